"""Small shims over gaps in the pinned libraries, each applied once and only where needed.

TRL 1.15's RLOOTrainer computes per-token log-probabilities through a Triton kernel
(`trl.kernels.ChunkedLogProbFunction`) on every device. Triton has no CPU driver, so on a CPU
(or without Triton installed) the first training step fails. The fallback below computes the
same quantities with plain PyTorch and lets autograd derive the backward; CUDA keeps TRL's kernel.
"""

from __future__ import annotations

import torch
import trl.trainer.utils as trl_utils

_TOKEN_CHUNK = 1024


class TorchChunkedLogProb:
    """Drop-in for `ChunkedLogProbFunction.apply` that runs anywhere (same arguments, same outputs)."""

    cuda_kernel = trl_utils._ChunkedLogProbFunction  # None when Triton could not be imported

    @classmethod
    def apply(cls, hidden, weight, bias, targets, temperature, chunk_size, softcap=None, logit_scale=1.0,
              outputs=("entropy",)):
        if cls.cuda_kernel is not None and hidden.device.type in ("cuda", "xpu"):
            return cls.cuda_kernel.apply(hidden, weight, bias, targets, temperature, chunk_size, softcap,
                                         logit_scale, outputs)
        pieces = [_token_chunk(hidden[i:i + _TOKEN_CHUNK], weight, bias, targets[i:i + _TOKEN_CHUNK],
                               temperature, softcap, logit_scale, outputs)
                  for i in range(0, hidden.shape[0], _TOKEN_CHUNK)] or [
            _token_chunk(hidden, weight, bias, targets, temperature, softcap, logit_scale, outputs)]
        return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*pieces))


def _token_chunk(hidden, weight, bias, targets, temperature, softcap, logit_scale, outputs):
    z = torch.nn.functional.linear(hidden.float(), weight.float(), None if bias is None else bias.float())
    z = z * logit_scale
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    z = z / temperature
    logp = torch.log_softmax(z, dim=-1)
    logprobs = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1) if "entropy" in outputs else None
    with torch.no_grad():
        log_sum_sq = torch.logsumexp(2 * logp, dim=-1) if "log_sum_sq_probs" in outputs else None
        mean_logits = z.mean(-1) if "mean_logits" in outputs else None
        is_top1 = (z.argmax(-1) == targets) if "is_top1" in outputs else None
    return logprobs, entropy, log_sum_sq, mean_logits, is_top1


def patch_trl_for_cpu() -> None:
    """Route TRL's fused LM head through `TorchChunkedLogProb` (idempotent)."""
    trl_utils._ChunkedLogProbFunction = TorchChunkedLogProb
