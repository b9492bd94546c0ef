"""Where the grouped-attention patch pays in fp32 (a CPU without native bf16): SDPA against the stacked-heads
matmuls (rloo_kit.patches.attention), per layer at SmolLM2-135M's shapes (9 query heads, 3 key/value heads,
64 dims; an additive padding mask, as generation passes one), for a decoding token and for a whole sequence's
forward and backward; then the kit's own generation end to end (8 prompts x 4 samples x 64 tokens, the
pre-flight's draw) with the model on SDPA and on the patch, alternating, in one process.

    .venv/bin/python benchmarks/attention_fp32.py [--repeats 3] [--model smollm2-135m]

Writes benchmarks/results/attention-fp32.{json,md}.
"""

from __future__ import annotations

import argparse
import time

import torch
from common import load_note, median, stamp, write
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import rloo_kit
from rloo_kit.evaluation import generate_ids
from rloo_kit.patches import attention
from rloo_kit.tasks import load_task

HEADS, KV_HEADS, DIMS = 9, 3, 64
DECODING = ((32, 60), (32, 120), (16, 100))  # (sequences, keys) for one query token
WHOLE = ((16, 53), (16, 128))  # (sequences, tokens) for a forward and backward


class _Layer(torch.nn.Module):
    num_key_value_groups, is_causal = HEADS // KV_HEADS, True


def _per_call_us(fn, n: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def _inputs(b: int, q: int, k: int, grad: bool = False):
    make = [torch.randn(b, h, n, DIMS, requires_grad=grad) for h, n in ((HEADS, q), (KV_HEADS, k), (KV_HEADS, k))]
    mask = torch.zeros(b, 1, q, k)
    mask[1::2, :, :, :4] = torch.finfo(torch.float32).min  # every other row left-padded by 4
    if q > 1:
        mask = mask + torch.triu(torch.full((q, k), torch.finfo(torch.float32).min), 1 + k - q)
    return (*make, mask)


def layer_timings() -> list[dict]:
    layer, rows = _Layer(), []
    ways = {"sdpa": lambda q, k, v, m: sdpa_attention_forward(layer, q, k, v, m, scaling=DIMS ** -0.5)[0],
            "stacked": lambda q, k, v, m: attention.stacked_heads_attention(q, k, v, m, DIMS ** -0.5)}
    cases = [(f"decoding a token, {b} sequences, {k} keys", _inputs(b, 1, k), False) for b, k in DECODING]
    cases += [(f"forward and backward, {b} x {n} tokens", _inputs(b, n, n, grad=True), True) for b, n in WHOLE]
    for case, tensors, backward in cases:
        def call(f, tensors=tensors, backward=backward):
            return f(*tensors).sum().backward() if backward else f(*tensors)

        with torch.inference_mode(not backward):
            us = {w: _per_call_us(lambda f=f: call(f), 20 if backward else 200) for w, f in ways.items()}
        rows.append({"case": case, **us})
    return rows


def generation_timings(model_name: str, repeats: int) -> dict[str, list[float]]:
    model, tok = rloo_kit.load_model(model_name, preset="cpu")
    assert model.dtype == torch.float32, "this benchmark is for the fp32 path"
    prompts = load_task("arithmetic", n_train=8, n_test=2).train["prompt"][:8]
    seconds: dict[str, list[float]] = {"sdpa": [], attention.NAME: []}
    generate_ids(model, tok, prompts[:1], max_new_tokens=4)  # warm-up: the first call's imports
    for _ in range(repeats):
        for impl in seconds:
            model.set_attn_implementation(impl)
            start = time.perf_counter()
            generate_ids(model, tok, prompts, samples=4, max_new_tokens=64, do_sample=True, batch_size=8)
            seconds[impl].append(round(time.perf_counter() - start, 2))
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    result = {**stamp(), "settings": vars(args)}
    result["layers"] = layers = layer_timings()
    result["generation_seconds"] = gen = generation_timings(args.model, args.repeats)
    table = ["| case | SDPA (us) | stacked heads (us) | ratio |", "|---|---|---|---|"]
    table += [f"| {r['case']} | {r['sdpa']:.0f} | {r['stacked']:.0f} | {r['stacked'] / r['sdpa']:.2f} |"
              for r in layers]
    sdpa, patched = median(gen["sdpa"]), median(gen[attention.NAME])
    table.append(f"| the kit's generation, 8 prompts x 4 x 64 tokens (s, median of {args.repeats}) | {sdpa:.1f} | "
                 f"{patched:.1f} | {patched / sdpa:.2f} |")
    notes = ("fp32 on a CPU: the patch takes decoding (one query token) and leaves whole sequences to SDPA. "
             + load_note(result))
    write("attention-fp32", result, table, notes)


if __name__ == "__main__":
    main()
