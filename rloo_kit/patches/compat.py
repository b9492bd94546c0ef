"""Patches over gaps in the pinned TRL, each applied once and only where needed, by `rloo_kit.patches`
(never at import).

TRL 1.15's RLOOTrainer computes per-token log-probabilities through a Triton kernel
(`trl.kernels.ChunkedLogProbFunction`) on every device. Triton has no CPU driver, so on a CPU
(or without Triton installed) the first training step fails. `TorchChunkedLogProb` computes the
same quantities with plain PyTorch; CUDA keeps TRL's kernel. Like TRL's kernel it projects in the
hidden states' dtype (bf16 when the base model is bf16), reduces over the vocabulary in fp32, keeps
only per-token statistics for backward and recomputes the logits there, so neither the weight nor
the (tokens x vocabulary) logits are copied to fp32 for autograd to hold. Its logit tiles are reused
across chunks and calls, and each chunk is exponentiated once (normaliser and entropy from one `exp`).

`reuse_policy_forward(trainer)` removes work TRL does twice on every step: with one optimisation
pass per generation (`num_iterations=1`), the "old" log-probabilities that TRL computes without
gradients for the KL penalty are the very values the loss's forward recomputes a moment later.
The policy's forward then runs once, with gradients, and the loss reuses it.

`contiguous_lm_head_input(model)` works around a costly torch matmul path: transformers feeds the LM
head `hidden[:, -1:, :]` when generation starts, a non-contiguous slice, and `F.linear` on such a
3-d input expands the (vocabulary x hidden) weight per row and copies it. On this CPU, 16 rows of
SmolLM2 took 690 ms in bf16 (70 ms in fp32) against 3.4 ms for the same product on a contiguous copy.

`log_task_reward_spread(trainer)` logs the share of prompts without a spread of task reward, before the KL
penalty (`diagnostics.SPREAD_KEY`), from inside TRL's reward calculation.
"""

from __future__ import annotations

import types

import torch

# Tokens per projection: fp32 logit tiles of at most 24 MiB (128 tokens of SmolLM2's 49k vocabulary). glibc
# maps each allocation over 32 MiB fresh from the kernel, so larger tiles page-fault on every elementwise
# pass: exp over 256 x 49k fp32 took 26 ms, ~4x the per-token time of 128 x 49k (the step: -1 to -4% in
# two in-process A/B runs against 512-token tiles). Measured when each chunk allocated its own tiles; now they
# are kept between chunks and calls (`_tile`), and the bound also caps the memory they hold.
_TILE_BYTES = 24 * 2**20
_TOKEN_CHUNK: int | None = None  # tests set a fixed number of tokens


def _chunk(vocab: int) -> int:
    return _TOKEN_CHUNK or max(1, _TILE_BYTES // (4 * vocab))


class TorchChunkedLogProb:
    """Drop-in for `ChunkedLogProbFunction.apply` that runs anywhere (same arguments, same outputs)."""

    cuda_kernel = None  # TRL's kernel, kept by `patch_trl_for_cpu` (None when Triton could not be imported)

    @classmethod
    def apply(cls, hidden, weight, bias, targets, temperature, chunk_size, softcap=None, logit_scale=1.0,
              outputs=("entropy",)):
        if cls.cuda_kernel is not None and hidden.device.type in ("cuda", "xpu"):
            return cls.cuda_kernel.apply(hidden, weight, bias, targets, temperature, chunk_size, softcap,
                                         logit_scale, outputs)
        return _ChunkedLogProb.apply(hidden, weight, bias, targets, temperature, softcap, logit_scale,
                                     tuple(outputs))


def _compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    kind = hidden.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else hidden.dtype


# Backward projects the logits again, as TRL's kernel does. Keeping forward's projection for it instead (24 MiB
# at the cpu preset) was tried: the step no faster (1.001, 17 alternating steps each).
_tiles: dict[str, torch.Tensor] = {}


def _tile(name: str, rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A (rows x cols) scratch tile, kept between chunks and calls. A fresh 24 MiB tile costs page faults on
    every pass that writes it (glibc can hand a freed block of that size back to the kernel): reusing three tiles
    took the head's forward from ~52 to ~35 ms and its forward and backward from ~145 to ~105 ms (256
    tokens of SmolLM2, 49k vocabulary)."""
    tile = _tiles.get(name)
    if tile is None or tile.dtype != dtype or tile.device != device or tile.numel() < rows * cols:
        tile = _tiles[name] = torch.empty(rows * cols, dtype=dtype, device=device)
    return tile[: rows * cols].view(rows, cols)


def _logits(hidden, weight, bias, temperature, softcap, logit_scale, dtype):
    """fp32 logits of one token chunk, projected in `dtype`, in the scratch tile "z" (valid until the next
    chunk); also d(logits)/d(raw projection) when softcapped."""
    w = weight if weight.dtype == dtype else weight.to(dtype)
    z = _tile("z", hidden.shape[0], weight.shape[0], torch.float32, hidden.device)
    if dtype == torch.float32:
        torch.mm(hidden.float(), w.t(), out=z)
    else:
        z.copy_(torch.mm(hidden.to(dtype), w.t(), out=_tile("raw", *z.shape, dtype, z.device)))
    if bias is not None:
        z.add_(bias)
    if logit_scale != 1.0:
        z.mul_(logit_scale)
    dcap = None
    if softcap is not None:
        t = torch.tanh(z / softcap)
        dcap = 1 - t * t
        z.copy_(t.mul_(softcap))
    if temperature != 1.0:
        z.div_(temperature)
    return z, dcap


class _ChunkedLogProb(torch.autograd.Function):
    """Per-token log p(target), entropy and the no-grad statistics of TRL's kernel, by token chunks.

    Forward keeps per-token log-normalisers and entropies only; backward recomputes each chunk's logits
    and turns them into the gradient in place: d logp_t/dz = onehot(t) - p, dH/dz = -p (log p + H).
    Each chunk is exponentiated once, into a reused tile, for the normaliser and the entropy both.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, softcap, logit_scale, outputs):
        ctx.set_materialize_grads(False)
        dtype = _compute_dtype(hidden)
        n = hidden.shape[0]
        f32 = dict(device=hidden.device, dtype=torch.float32)
        logprobs, log_z = torch.empty(n, **f32), torch.empty(n, **f32)
        entropy = torch.empty(n, **f32) if "entropy" in outputs else None
        log_sum_sq = torch.empty(n, **f32) if "log_sum_sq_probs" in outputs else None
        mean_logits = torch.empty(n, **f32) if "mean_logits" in outputs else None
        is_top1 = torch.empty(n, device=hidden.device, dtype=torch.bool) if "is_top1" in outputs else None
        chunk = _chunk(weight.shape[0])
        for i in range(0, n, chunk):
            j = min(i + chunk, n)
            z, _ = _logits(hidden[i:j], weight, bias, temperature, softcap, logit_scale, dtype)
            if is_top1 is not None:
                is_top1[i:j] = z.argmax(-1) == targets[i:j]
            top = z.amax(-1, keepdim=True)
            z.sub_(top)  # z - max: exp cannot overflow
            e = torch.exp(z, out=_tile("e", *z.shape, torch.float32, z.device))
            sum_e = e.sum(-1, keepdim=True)
            log_sum = sum_e.log()
            log_z[i:j] = (top + log_sum).squeeze(-1)
            logprobs[i:j] = (z.gather(-1, targets[i:j].unsqueeze(-1)) - log_sum).squeeze(-1)
            if mean_logits is not None:
                mean_logits[i:j] = (z.mean(-1, keepdim=True) + top).squeeze(-1)
            logp = z.sub_(log_sum)  # log p in place
            if log_sum_sq is not None:
                log_sum_sq[i:j] = torch.logsumexp(2 * logp, dim=-1)
            if entropy is not None:  # -sum p log p, with p = e / sum(e); torch.sum's pairwise sum over the vocabulary
                entropy[i:j] = e.mul_(logp).sum(-1, keepdim=True).div_(sum_e).neg_().squeeze(-1)
        ctx.save_for_backward(hidden, weight, bias, targets, log_z, log_z if entropy is None else entropy)
        ctx.has_entropy = entropy is not None
        ctx.args = (temperature, softcap, logit_scale, dtype)
        ctx.mark_non_differentiable(*(x for x in (log_sum_sq, mean_logits, is_top1) if x is not None))
        return logprobs, entropy, log_sum_sq, mean_logits, is_top1

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy, *_):
        hidden, weight, bias, targets, log_z, entropy = ctx.saved_tensors
        temperature, softcap, logit_scale, dtype = ctx.args
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_entropy = grad_entropy if ctx.has_entropy else None
        grad_h = torch.zeros(hidden.shape, device=hidden.device, dtype=torch.float32) if need_h else None
        grad_w = torch.zeros(weight.shape, device=weight.device, dtype=torch.float32) if need_w else None
        grad_b = torch.zeros(bias.shape, device=bias.device, dtype=torch.float32) if need_b else None
        if grad_logprobs is None and grad_entropy is None:
            return (None,) * 8
        w = weight if weight.dtype == dtype else weight.to(dtype)
        chunk = _chunk(weight.shape[0])
        for i in range(0, hidden.shape[0], chunk):
            j = min(i + chunk, hidden.shape[0])
            z, dcap = _logits(hidden[i:j], weight, bias, temperature, softcap, logit_scale, dtype)
            logp = z.sub_(log_z[i:j].unsqueeze(-1))
            p = torch.exp(logp, out=_tile("e", *z.shape, torch.float32, z.device))
            if grad_entropy is not None:  # g_H * (-p (log p + H))
                g = logp.add_(entropy[i:j].unsqueeze(-1)).mul_(p).mul_(-grad_entropy[i:j].float().unsqueeze(-1))
            else:
                g = logp.zero_()
            if grad_logprobs is not None:  # g_lp * (onehot - p)
                glp = grad_logprobs[i:j].float().unsqueeze(-1)
                g.sub_(p.mul_(glp))
                g.scatter_add_(-1, targets[i:j].unsqueeze(-1), glp)
            if temperature != 1.0:
                g.div_(temperature)
            if dcap is not None:
                g.mul_(dcap)
            if logit_scale != 1.0:
                g.mul_(logit_scale)
            # one rounding per chunk; each product below sums over the whole vocabulary
            gd = g if dtype == torch.float32 else _tile("raw", *g.shape, dtype, g.device).copy_(g)
            if grad_h is not None:
                grad_h[i:j] += gd @ w
            if grad_w is not None:
                grad_w += gd.t() @ hidden[i:j].to(dtype)
            if grad_b is not None:
                grad_b += g.sum(0)
        return (None if grad_h is None else grad_h.to(hidden.dtype),
                None if grad_w is None else grad_w.to(weight.dtype),
                None if grad_b is None else grad_b.to(bias.dtype), None, None, None, None, None)


def contiguous_lm_head_input(model) -> None:
    """Give the LM head a contiguous input (a copy of a few rows; a no-op when already contiguous). Idempotent."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or getattr(head, "_rloo_kit_contiguous", False):
        return
    head.register_forward_pre_hook(lambda _module, args: (args[0].contiguous(), *args[1:]) if args else None)
    head._rloo_kit_contiguous = True


def patch_trl_for_cpu() -> None:
    """Route TRL's fused LM head through `TorchChunkedLogProb`, keeping TRL's kernel for CUDA (idempotent).
    Process-wide: TRL reads the name at every call. The door (`rloo_kit.patches`) applies it, never an import."""
    import trl.trainer.utils as trl_utils

    if trl_utils._ChunkedLogProbFunction is not TorchChunkedLogProb:
        TorchChunkedLogProb.cuda_kernel = trl_utils._ChunkedLogProbFunction
        trl_utils._ChunkedLogProbFunction = TorchChunkedLogProb


def reuse_policy_forward(trainer) -> bool:
    """Let TRL's scoring pass double as the loss's forward, where that changes nothing but the time.

    With `num_iterations=1`, one micro-batch per generation (`steps_per_generation=1`), no gradient
    checkpointing and a CPU, TRL runs the policy twice on the same tokens with the same weights: once
    without gradients for the "old" log-probabilities (KL penalty, importance ratio), once with them in
    the loss. Here the first pass keeps its graph and the second returns it: same log-probabilities, the
    ratio exactly 1 as it is mathematically, one forward fewer. Returns whether it was installed."""
    args = trainer.args
    if (getattr(args, "num_iterations", 1) != 1 or (getattr(args, "steps_per_generation", None) or 1) != 1
            or args.gradient_checkpointing or trainer.accelerator.device.type != "cpu"
            or getattr(trainer, "use_vllm", False) or getattr(trainer, "_rloo_kit_reuse", False)):
        return False
    compute = trainer._get_per_token_logps_and_entropies  # the bound method, possibly already wrapped
    kept: dict = {}

    def per_token_logps(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                        compute_entropy=False, compute_aux_loss=False, **kwargs):
        policy = model is self.model and self.model.training and _adapters_on(model)
        if policy and not torch.is_grad_enabled() and kwargs.get("pixel_values") is None:
            with torch.enable_grad():  # the scoring pass: keep the graph for the loss
                out = compute(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy=True,
                              compute_aux_loss=getattr(self, "aux_loss_enabled", False), **kwargs)
            kept.clear()
            kept.update(ids=input_ids, mask=attention_mask, keep=logits_to_keep, out=out)
            return out[0].detach(), (out[1].detach() if compute_entropy else None), None
        order = _rows_in(kept, input_ids, attention_mask, logits_to_keep) if policy and kept else None
        if order is not None and torch.is_grad_enabled():  # the loss: TRL shuffled the rows, the graph follows
            logps, entropies, aux = kept.pop("out")
            kept.clear()
            return logps[order], (entropies[order] if compute_entropy else None), (aux if compute_aux_loss else None)
        if policy:  # anything else on the policy (a changed batch) drops a stale graph and runs as TRL would
            kept.clear()
        return compute(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy=compute_entropy,
                       compute_aux_loss=compute_aux_loss, **kwargs)

    trainer._get_per_token_logps_and_entropies = types.MethodType(per_token_logps, trainer)
    trainer._rloo_kit_reuse = True
    return True


def _rows_in(kept: dict, input_ids, attention_mask, logits_to_keep) -> torch.Tensor | None:
    """Where each row of (input_ids, attention_mask) sits in the kept batch, or None when the batch differs.
    Identical rows (the same completion twice) have identical log-probabilities, so any match will do."""
    ids, mask = kept["ids"], kept["mask"]
    if kept["keep"] != logits_to_keep or ids.shape != input_ids.shape or mask.shape != attention_mask.shape:
        return None
    where: dict[bytes, list[int]] = {}
    for i, (r, m) in enumerate(zip(ids.cpu(), mask.cpu(), strict=True)):
        where.setdefault(r.numpy().tobytes() + m.numpy().tobytes(), []).append(i)
    order = []
    for r, m in zip(input_ids.cpu(), attention_mask.cpu(), strict=True):
        slots = where.get(r.numpy().tobytes() + m.numpy().tobytes())
        if not slots:
            return None
        order.append(slots.pop())
    return torch.tensor(order, device=input_ids.device)


def _adapters_on(model) -> bool:
    """True unless a PEFT model's adapters are switched off or a reference adapter ('ref') is active."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layer = next((m for m in model.modules() if isinstance(m, BaseTunerLayer)), None)
    if layer is None:
        return True
    return not layer.disable_adapters and "ref" not in layer.active_adapters


def task_rewards(trainer, per_func: torch.Tensor) -> torch.Tensor:
    """TRL's total reward of each completion before the KL penalty, from its rewards per function: the weighted sum,
    NaN where every function left the completion unscored."""
    rewards = (per_func * trainer.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
    return rewards


def group_spread(trainer, per_func: torch.Tensor) -> torch.Tensor:
    """The spread (standard deviation) of each group's task reward, from `per_func` (TRL's rewards per function, a
    row per completion): TRL's total as it takes it before the KL penalty (unscorable rows left out, then clipped),
    grouped by the trainer's group size for its mode. NaN for a group with fewer than two scorable rows."""
    rewards = task_rewards(trainer, per_func)
    if trainer.reward_clip_range:
        rewards = rewards.clamp(*trainer.reward_clip_range)
    return _spread_by_group(trainer, rewards)


def _spread_by_group(trainer, rewards: torch.Tensor) -> torch.Tensor:
    """The standard deviation within each group of `rewards` (one per completion), by the group size of the
    trainer's mode; NaN for a group with fewer than two scored rows."""
    from trl.trainer.utils import nanstd

    group = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
    return nanstd(rewards.view(-1, group), dim=1) if group > 1 else torch.zeros(len(rewards))


def zero_spread_share(spread: torch.Tensor) -> float:
    """The share of groups whose spread (`group_spread`) is zero, as TRL counts its frac_reward_zero_std: a NaN
    spread is not zero."""
    return torch.isclose(spread, torch.zeros_like(spread)).float().mean().item()


def log_task_reward_spread(trainer) -> None:
    """Log, each step, the share of prompts whose completions all got the same reward from the reward
    functions, as `frac_task_reward_zero_std`. TRL's `frac_reward_zero_std` is taken after RLOO subtracts
    beta x KL from each reward, and completions that differ have different KL: once the policy has moved
    from the reference, a group with one reward for every completion no longer counts, and reward collapse
    goes unseen. Wraps TRL's `_calculate_rewards` (which returns every process's rewards per function).

    With several reward functions, also the share without a spread in the first one's alone, the answer's where the
    kit builds the run, as `frac_answer_reward_zero_std`: a side reward (the brevity the kit adds to a long-winded
    file task) gives groups a spread while no answer is ever right, and the run then learns only that reward."""
    from ..diagnostics import ANSWER_SPREAD_KEY, SPREAD_KEY

    calculate = trainer._calculate_rewards

    def calculate_rewards(*args, **kwargs):
        per_func = calculate(*args, **kwargs)
        metrics = trainer._metrics["train" if trainer.model.training else "eval"]  # TRL's mode, its group size
        metrics[SPREAD_KEY].append(zero_spread_share(group_spread(trainer, per_func)))
        if per_func.shape[1] > 1:
            metrics[ANSWER_SPREAD_KEY].append(zero_spread_share(_spread_by_group(trainer, per_func[:, 0])))
        return per_func

    trainer._calculate_rewards = calculate_rewards
