"""Attention for bf16 and fp32 models on a CPU, where PyTorch's SDPA kernel is slow at RLOO's short sequences.

On a CPU with native bf16 (no AMX), `scaled_dot_product_attention` in bf16 took 290 us per layer to
decode one token for 16 sequences and 11 ms per layer for a forward and backward over 16 x 53 tokens;
two batched matmuls and a softmax take 73 us and 2.1 ms. That is transformers' eager attention, less its
copy of keys and values for every query head: the query heads that share a key/value head are stacked
into one matmul. Scores and weights are fp32 (bf16 scores doubled the error against an fp64 reference;
in fp32 it equals SDPA's, which accumulates in fp32), for ~20% more time in attention. The whole score
matrix is held, so beyond `SHORT_KEYS` keys (where SDPA's blocked kernel is faster again: 75 against
172 ms per layer at 256 keys) and on any other device or dtype, SDPA keeps the work.

In fp32 (a CPU without native bf16) only decoding takes the matmuls: SDPA copies every key and value per query
head and, given a padding mask, falls back to its plain kernel: 0.98 against 0.51 ms per layer for a token of
32 sequences at 60 keys, 3.1 against 0.84 ms at 120, and the pre-flight's draw (8 prompts x 4 x 64 tokens of
SmolLM2-135M) 0.89x the time (AMD EPYC, AVX2, 2 threads; `benchmarks/attention_fp32.py`). Over whole sequences
(a training forward and backward) the two are within noise of each other (0.92x at 16 x 53 tokens, 1.08x at
16 x 128), so SDPA keeps them.
"""

from __future__ import annotations

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "rloo_kit_cpu"  # the attention implementation's name in transformers' registry
SHORT_KEYS = 128  # the longest key sequence given to the matmul path (measured crossover: ~170 keys)


def grouped_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention signature: query (b, heads, q, d), key/value (b, kv_heads, k, d), an additive
    mask (b, 1, q, k) or None; returns the output as (b, q, heads, d) and no weights."""
    b, heads, q, d = query.shape
    kv_heads, k = key.shape[1], key.shape[2]
    short = q == 1 or (query.dtype == torch.bfloat16 and k <= SHORT_KEYS)  # fp32: decoding only
    if (query.device.type != "cpu" or query.dtype not in (torch.bfloat16, torch.float32) or not short
            or (dropout and module.training) or heads % kv_heads):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    return stacked_heads_attention(query, key, value, attention_mask, d ** -0.5 if scaling is None else scaling), None


def stacked_heads_attention(query, key, value, attention_mask, scaling: float) -> torch.Tensor:
    """The two matmuls and the softmax, the query heads that share a key/value head stacked into one product;
    (b, q, heads, d) out, in the query's dtype."""
    b, heads, q, d = query.shape
    kv_heads, k = key.shape[1], key.shape[2]
    group = heads // kv_heads
    with torch.autocast("cpu", enabled=False):  # fp32 scores and weights, as SDPA accumulates them
        # 3-d bmm: matmul's 4-d broadcasting path took 26 against 17 us a product for a decoding token
        scores = torch.bmm(query.float().reshape(b * kv_heads, group * q, d),
                           key.float().reshape(b * kv_heads, k, d).transpose(1, 2))
        scores = scores.view(b, kv_heads, group, q, k) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask[:, :, None, :, :k]
        probs = torch.softmax(scores, dim=-1)
        out = torch.bmm(probs.view(b * kv_heads, group * q, k), value.float().reshape(b * kv_heads, k, d))
        out = out.view(b, heads, q, d)
    return out.to(query.dtype).transpose(1, 2).contiguous()


def use_cpu_attention(model) -> bool:
    """Switch a model that uses SDPA to `grouped_attention` (which hands long sequences back to SDPA).
    Returns whether it was switched: models on another attention implementation keep theirs."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, grouped_attention)
    AttentionMaskInterface.register(NAME, eager_mask)  # additive masks, which both paths take
    model.set_attn_implementation(NAME)
    return True
