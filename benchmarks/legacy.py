"""0.1's fp32 CPU path, kept for the side-by-side benchmarks (cpu_speed.py, roofline.py --path legacy) and
nowhere in the package: log-softmax over the vocabulary through autograd in fp32, 1024 tokens at a time, and
TRL's separate no-grad scoring pass. Run with RLOO_KIT_CPU_DTYPE=fp32 (fp32 weights), build the trainer with
`skip_patches=SKIP`, then `use_legacy_log_probs()`."""

from __future__ import annotations

import torch

SKIP = ("trl_cpu_logprob", "reuse_scoring_forward")  # the kit's patches that 0.1 did not have, or had as below
CHUNK = 1024


class LegacyChunkedLogProb:
    """0.1's stand-in for TRL's `ChunkedLogProbFunction.apply` (same arguments and outputs)."""

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size, softcap=None, logit_scale=1.0,
              outputs=("entropy",)):
        args = (weight, bias, temperature, softcap, logit_scale, outputs)
        pieces = [_chunk(hidden[i:i + CHUNK], targets[i:i + CHUNK], *args)
                  for i in range(0, hidden.shape[0], CHUNK)] or [_chunk(hidden, targets, *args)]
        return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*pieces, strict=True))


def _chunk(hidden, targets, weight, bias, temperature, softcap, logit_scale, outputs):
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


def use_legacy_log_probs() -> None:
    """Route TRL's fused LM head through 0.1's path, process-wide (a benchmark worker's own process)."""
    import trl.trainer.utils as trl_utils

    trl_utils._ChunkedLogProbFunction = LegacyChunkedLogProb
