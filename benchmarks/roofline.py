"""Where does a CPU RLOO step spend its time, against what this machine can do?

Measures the peaks (2048^2 matmul in fp32 and bf16, best of a few seconds each; memory bandwidth as
a 256 MiB copy), counts the FLOPs of one RLOO step of the default model at the cpu preset by phase
from the model's shape and the step's real token counts, times each phase of a few real steps, and
prints achieved GFLOP/s per phase against the peaks. The reference peak is measured again after every
step (`--step-peak-seconds`), and each step is also given as a fraction of the peak measured right after
it: this VM's speed drifts between minutes, so a peak taken once at the start can be off for the steps.

    .venv/bin/python benchmarks/roofline.py [--steps 4] [--path fast|legacy] [--model smollm2-135m]

Phases: generation prefill and decode (the first forward of a generation is the prefill: on the
fast path each distinct prompt once, all but its last token, rloo_kit.patches.cpu_step.shared_prompts),
reference log-probs (adapter off), the "old" policy pass (legacy path only: the fast path's scoring
forward is the loss's forward), policy forward (with gradients), backward, optimizer, rewards, and
the rest of the step. FLOPs are counted as run. Writes benchmarks/results/roofline[-legacy].{json,md}.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))


def best_seconds(fn, seconds: float = 2.0, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def matmul_peak(dtype: torch.dtype, seconds: float) -> float:
    """GFLOP/s of the best 2048^2 matmul in `seconds`: the peak every figure here is a fraction of."""
    n = 2048
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    return round(2 * n**3 / best_seconds(lambda: a @ b, seconds) / 1e9, 1)


def peaks(seconds: float) -> dict:
    out = {f"matmul_{name}_gflops": matmul_peak(dtype, seconds)
           for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    src = torch.empty(64 * 1024**2, dtype=torch.float32).fill_(1.0)  # 256 MiB
    dst = torch.empty_like(src)
    out["copy_gb_per_s"] = round(2 * src.numel() * 4 / best_seconds(lambda: dst.copy_(src), seconds) / 1e9, 1)
    return out


def step_flops(cfg, batch: int, prompt: int, completion: int, lora_r: int, legacy: bool,
               prefill_rows: int, prefill_tokens: int, attention: bool = True) -> dict:
    """FLOPs of one RLOO step by phase (multiply-add = 2), from the model's shape and the step's tokens.
    `prompt` is the padded prompt length, `completion` the padded completion length (both as TRL runs them);
    the prefill read `prefill_tokens` of `prefill_rows` rows, and decoding did the rest, `batch` rows a token.
    attention=False leaves attention's products out: the linear layers' FLOPs, what `matmul_seconds` replays."""
    h, layers, vocab, inter = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size, cfg.intermediate_size
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or h // heads
    linear = layers * (h * heads * hd * 2 + 2 * h * kv * hd + 3 * h * inter)  # q, o, k, v, gate, up, down
    lora = layers * lora_r * ((h + heads * hd) * 2 + 2 * (h + kv * hd) + 2 * (h + inter) + (inter + h))
    head = vocab * h

    def attn(queries: int, context: int) -> float:  # QK^T and AV, causal: each query sees `context` keys
        return 2 * 2 * layers * heads * hd * queries * context if attention else 0

    seq = prompt + completion
    scored = batch * completion  # LM head only on completion positions (TRL's fused head)
    full = batch * seq
    causal = batch * sum(range(1, seq + 1))  # sum of context lengths over a causal sequence
    prefill = (2 * prefill_rows * prefill_tokens * (linear + lora) + 2 * prefill_rows * head
               + attn(1, prefill_rows * sum(range(1, prefill_tokens + 1))))
    decode = sum(2 * batch * (linear + lora + head) + attn(batch, context)
                 for context in range(prefill_tokens + 1, prompt + completion))
    fwd_base = 2 * full * linear + attn(1, causal) + 2 * scored * head
    policy_fwd = fwd_base + 2 * full * lora
    # backward: activation gradients through every linear (= their forward), LoRA weight gradients (= LoRA
    # forward), attention (2x), the LM head's hidden gradient, and its logits recomputed (fast path) or kept
    backward = 2 * full * linear + 2 * 2 * full * lora + 2 * attn(1, causal) + 2 * scored * head * (1 if legacy else 2)
    n_lora = lora  # parameters: r x (in + out) per adapted matrix
    return {"generate_prefill": prefill, "generate_decode": decode, "reference_fwd": fwd_base,
            "old_policy_fwd": policy_fwd if legacy else 0, "policy_fwd": policy_fwd, "backward": backward,
            "optimizer": 12 * n_lora, "rewards": 0, "rest": 0}


def matmul_seconds(model, shapes: dict, lora_r: int, packed: bool, legacy: bool = False, repeats: int = 3) -> dict:
    """Each phase's matrix products alone, on the model's own bf16 weights at the step's row counts: what the
    phase would take if nothing but its linear layers ran (attention's products left out). Decoding runs them
    as the kit's sampler does (`cpu_step`): packed weights where the step packs them (`packed`), lean LoRA;
    `legacy`: as 0.1's fp32 path, PEFT's LoRA while sampling and the LM head's logits kept for backward."""
    import torch.nn.functional as F

    from rloo_kit.patches.cpu_step import PACKED_ROWS

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    body = [m.weight.detach() for name, m in base.named_modules()
            if type(m) is torch.nn.Linear and "lora_" not in name and m is not head]
    head_w = head.weight.detach()
    gen, dtype = torch.Generator().manual_seed(0), head_w.dtype

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    lora = [(randn(lora_r, w.shape[1]), randn(w.shape[0], lora_r)) for w in body]
    pack = {id(w): torch.ops.mkldnn._reorder_linear_weight(w, PACKED_ROWS) for w in [*body, head_w]} if packed else {}

    def linear(x, w):
        return torch.ops.mkldnn._linear_pointwise(x, pack[id(w)], None, "none", [], "")

    def inputs(rows):  # one input per width; every product reads the one of its width
        return {n: randn(rows, n) for n in {w.shape[1] for w in body} | {w.shape[0] for w in body}}

    def forward(rows, head_rows, adapters, sampler=False, generating=False, no_grad=False):
        """PEFT's LoRA (two F.linear) or, for `sampler`, the kit's: the adapter's two products in fp32 added in
        place. Packed base weights where the step packs them: every no-grad pass through the layers, and the
        LM head while generating (the log-prob head reads the weight itself)."""
        x, hx = inputs(rows), randn(head_rows, head_w.shape[1])
        lean = [(a.t().float().contiguous(), b.t().float().contiguous()) for a, b in lora] if sampler else lora
        base = linear if (sampler or generating or no_grad) and packed else F.linear
        head = linear if (sampler or generating) and packed else F.linear

        def run():
            for w, (a, b) in zip(body, lean, strict=True):
                out = base(x[w.shape[1]], w)
                if sampler:
                    out.add_((x[w.shape[1]].float() @ a) @ b)
                elif adapters:
                    F.linear(F.linear(x[w.shape[1]], a), b)
            head(hx, head_w)
        return run

    def backward(rows, head_rows):
        g, hx, logits = inputs(rows), randn(head_rows, head_w.shape[1]), randn(head_rows, head_w.shape[0])

        def run():
            for w, (a, b) in zip(body, lora, strict=True):
                out, inp = w.shape
                g[out] @ w  # the input's gradient through the frozen weight
                t = F.linear(g[inp], a)  # LoRA: its input's product, recomputed by autograd from saved t
                g[out].t() @ t  # dB
                gt = g[out] @ b  # dt
                gt.t() @ g[inp]  # dA
                gt @ a  # dx through the adapter
            if not legacy:
                F.linear(hx, head_w)  # the log-prob backward recomputes the logits
            logits @ head_w  # and takes the hidden states' gradient
        return run

    def best(fn, times=1):
        fn()
        return min(_timed(fn) for _ in range(repeats)) * times

    full, scored = shapes["batch"] * shapes["seq"], shapes["batch"] * shapes["completion"]
    decode_steps = shapes["seq"] - shapes["prefill_tokens"] - 1
    return {"generate_prefill": best(forward(shapes["prefill_rows"] * shapes["prefill_tokens"],
                                             shapes["prefill_rows"], True, generating=True)),
            "generate_decode": best(forward(shapes["batch"], shapes["batch"], True, sampler=not legacy),
                                    decode_steps),
            "reference_fwd": best(forward(full, scored, False, no_grad=not legacy)),
            "policy_fwd": best(forward(full, scored, True)),
            "backward": best(backward(full, scored))}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


class PhaseClock:
    def __init__(self):
        self.seconds = collections.defaultdict(float)

    @contextlib.contextmanager
    def time(self, name):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t


def instrument(trainer, clock: PhaseClock, base_model, peak_dtype: torch.dtype, peak_seconds: float) -> dict:
    """Wrap the trainer's phases in timers; returns a dict the step shapes are recorded into. After each
    step, outside its timers, the reference matmul peak is measured again for `peak_seconds` (0: not)."""
    from transformers import TrainerCallback

    from rloo_kit.patches.compat import _adapters_on

    shapes = {}
    generating = {"on": False, "calls": 0, "t": 0.0}
    gen = trainer._generate_single_turn

    def generate_single_turn(*a, **k):
        generating.update(on=True, calls=0, prefill=0.0)
        t = time.perf_counter()
        try:
            return gen(*a, **k)
        finally:
            generating["on"] = False
            clock.seconds["generate_decode"] += time.perf_counter() - t - generating["prefill"]

    def pre(module, args, kwargs):
        if generating["on"]:
            generating["t"] = time.perf_counter()

    def post(module, args, kwargs, output):
        if generating["on"]:
            if generating["calls"] == 0:
                ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
                shapes["prefill_rows"], shapes["prefill_tokens"] = ids.shape
                generating["prefill"] = time.perf_counter() - generating["t"]
                clock.seconds["generate_prefill"] += generating["prefill"]
            generating["calls"] += 1

    base_model.register_forward_pre_hook(pre, with_kwargs=True)
    base_model.register_forward_hook(post, with_kwargs=True)
    trainer._generate_single_turn = generate_single_turn

    logps = trainer._get_per_token_logps_and_entropies  # the kit's reuse wrapper, when installed

    def per_token_logps(model, input_ids, attention_mask, logits_to_keep, *a, **k):
        shapes["batch"], shapes["seq"], shapes["completion"] = *input_ids.shape, logits_to_keep
        if not _adapters_on(model):
            name = "reference_fwd"
        elif torch.is_grad_enabled():
            name = "policy_fwd"
        else:  # the scoring pass: with the reuse installed it runs with gradients and is the policy forward
            name = "policy_fwd" if getattr(trainer, "_rloo_kit_reuse", False) else "old_policy_fwd"
        with clock.time(name):
            return logps(model, input_ids, attention_mask, logits_to_keep, *a, **k)

    trainer._get_per_token_logps_and_entropies = per_token_logps
    rewards = trainer._calculate_rewards

    def calculate_rewards(*a, **k):
        with clock.time("rewards"):
            return rewards(*a, **k)

    trainer._calculate_rewards = calculate_rewards
    backward = trainer.accelerator.backward

    def timed_backward(*a, **k):
        with clock.time("backward"):
            return backward(*a, **k)

    trainer.accelerator.backward = timed_backward

    class Steps(TrainerCallback):
        def __init__(self):
            self.step_seconds, self.snapshots, self.peaks = [], [], []

        def on_step_begin(self, args, state, control, **kwargs):
            self.t = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.o = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            clock.seconds["optimizer"] += time.perf_counter() - self.o

        def on_step_end(self, args, state, control, **kwargs):
            self.step_seconds.append(time.perf_counter() - self.t)
            self.snapshots.append(dict(clock.seconds))
            if peak_seconds:
                self.peaks.append(matmul_peak(peak_dtype, peak_seconds))

    steps = Steps()
    trainer.add_callback(steps)
    shapes["steps"] = steps
    return shapes


def drift_note(per_step: list[float], step_peaks: list[float]) -> str:
    if not per_step:
        return ""
    return (f"; each step against the peak measured right after it ({min(step_peaks):.0f}-{max(step_peaks):.0f} "
            f"GFLOP/s over the run): median {100 * statistics.median(per_step):.0f}%, range "
            f"{100 * min(per_step):.0f}-{100 * max(per_step):.0f}%")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--path", choices=("fast", "legacy"), default="fast")
    ap.add_argument("--peak-seconds", type=float, default=3.0)
    ap.add_argument("--step-peak-seconds", type=float, default=1.0,
                    help="the reference peak measured again after every step, for this long (0: not)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.path == "legacy":
        os.environ["RLOO_KIT_CPU_DTYPE"] = "fp32"
    from common import load_note, stamp, write
    from legacy import SKIP, use_legacy_log_probs

    import rloo_kit
    from rloo_kit.hardware import cpu_compute
    from rloo_kit.patches.cpu_step import packing_available
    from rloo_kit.tasks import load_task

    peak = peaks(a.peak_seconds)
    print(peak, flush=True)
    task = load_task("arithmetic", n_train=a.steps * 16, seed=a.seed)
    model, tok = rloo_kit.load_model(a.model, preset="cpu")
    base = model
    model = rloo_kit.attach_lora(model, preset="cpu", seed=a.seed)
    # every completion runs to max_completion_length, so that each step does the same work: generation stops
    # at no token (TRL still ends each completion at its first end-of-sequence token for scoring), which adds
    # no per-token work, where `min_new_tokens`' logits processors cost ~1% of the step
    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir="runs/bench-roofline",
                                     max_steps=a.steps, save_strategy="no", disable_tqdm=True, seed=a.seed,
                                     monitor=False, live=False, generation_kwargs={"eos_token_id": []},
                                     skip_patches=SKIP if a.path == "legacy" else ())
    if a.path == "legacy":
        use_legacy_log_probs()
    clock = PhaseClock()
    bf16 = cpu_compute().bf16 and a.path == "fast"
    shapes = instrument(trainer, clock, base, torch.bfloat16 if bf16 else torch.float32, a.step_peak_seconds)
    trainer.train()
    steps = shapes["steps"]
    first = steps.snapshots[0]  # leave the first (warm-up) step out
    n = len(steps.step_seconds) - 1
    phase_s = {k: (clock.seconds[k] - first.get(k, 0.0)) / n for k in clock.seconds}
    step_s = sum(steps.step_seconds[1:]) / n
    preset = rloo_kit.get_preset("cpu")
    step = (trainer.model.config, shapes["batch"], shapes["seq"] - shapes["completion"], shapes["completion"],
            preset.lora_r, a.path == "legacy", shapes["prefill_rows"], shapes["prefill_tokens"])
    flops = step_flops(*step)
    phase_s["rest"] = step_s - sum(phase_s.values())
    total = sum(flops.values())
    # each step against the peak measured right after it: this VM's speed drifts between minutes, which moves
    # a step and a peak measured minutes apart differently
    per_step = [total / t / 1e9 / p for t, p in zip(steps.step_seconds[1:], steps.peaks[1:], strict=False)]
    ref_peak = peak["matmul_bf16_gflops"] if bf16 else peak["matmul_fp32_gflops"]
    matmuls = matmul_seconds(trainer.model, shapes, preset.lora_r, packed=bf16 and packing_available(),
                             legacy=a.path == "legacy")
    linear_flops = sum(step_flops(*step, attention=False).values()) - flops["optimizer"]
    if a.path == "legacy":  # its separate scoring pass is a policy forward without gradients
        matmuls["old_policy_fwd"] = matmuls["policy_fwd"]
    rows = ["| phase | GFLOP | seconds | GFLOP/s | % of fp32 peak | % of bf16 peak | its matmuls alone (s) |",
            "|---|---|---|---|---|---|---|"]
    table = {}
    for k in flops:
        s, f, m = phase_s.get(k, 0.0), flops[k], matmuls.get(k)
        rate = f / s / 1e9 if s > 0 and f > 0 else 0.0
        table[k] = {"gflop": round(f / 1e9, 2), "seconds": round(s, 3), "gflops": round(rate, 1),
                    "matmul_seconds": None if m is None else round(m, 3)}
        if s or f:
            fp32_pct, bf16_pct = 100 * rate / peak["matmul_fp32_gflops"], 100 * rate / peak["matmul_bf16_gflops"]
            alone = "" if m is None else f"{m:.3f}"
            rows.append(f"| {k} | {f / 1e9:.1f} | {s:.3f} | {rate:.1f} | {fp32_pct:.0f}% | {bf16_pct:.0f}% | {alone} |")
    whole, floor = total / step_s / 1e9, sum(matmuls.values())
    rows.append(f"| **whole step** | {total / 1e9:.1f} | {step_s:.3f} | {whole:.1f} | "
                f"{100 * whole / peak['matmul_fp32_gflops']:.0f}% | {100 * whole / peak['matmul_bf16_gflops']:.0f}% | "
                f"{floor:.3f} |")
    choice = cpu_compute()
    result = {**stamp(), "cpu_flags": list(choice.flags), "cpu_path": choice.describe() if a.path == "fast"
              else "legacy: fp32, 0.1 log-prob path, separate old-policy pass", "path": a.path, "peaks": peak,
              "shapes": {k: v for k, v in shapes.items() if k != "steps"}, "phases": table,
              "step_seconds": [round(s, 3) for s in steps.step_seconds], "mean_step_seconds": round(step_s, 3),
              "step_gflop": round(total / 1e9, 1), "achieved_gflops": round(whole, 1),
              "achieved_fraction_of_reference_peak": round(whole / ref_peak, 3),
              "matmuls_alone_seconds": round(floor, 3),
              "matmuls_alone_fraction_of_reference_peak": round(linear_flops / floor / 1e9 / ref_peak, 3),
              "reference_peak": "bf16" if bf16 else "fp32", "goal": ">= 40% of the bf16 matmul peak where bf16 is used",
              "peak_after_each_step_gflops": steps.peaks,
              "per_step_fraction_of_peak_after_it": [round(f, 3) for f in per_step],
              "median_per_step_fraction": round(statistics.median(per_step), 3) if per_step else None}
    notes = (f"Peaks: 2048^2 matmul {peak['matmul_fp32_gflops']} GFLOP/s fp32, {peak['matmul_bf16_gflops']} bf16; "
             f"copy {peak['copy_gb_per_s']} GB/s (read + write). CPU flags: {', '.join(choice.flags)}. Path: "
             f"{result['cpu_path']}. Step: {shapes['batch']} completions x ({shapes['seq'] - shapes['completion']} "
             f"prompt + {shapes['completion']} completion tokens), completions forced to full length; prefill "
             f"{shapes['prefill_rows']} rows x {shapes['prefill_tokens']} tokens; FLOPs counted as run; mean of "
             f"steps 2..{a.steps}. Whole step at {whole:.0f} GFLOP/s = {100 * whole / ref_peak:.0f}% of the "
             f"{result['reference_peak']} peak measured at the start{drift_note(per_step, steps.peaks[1:])}. "
             f"The last column replays each phase's linear layers alone, on the "
             f"model's weights at the step's row counts (attention's products and everything else left out): "
             f"{floor:.2f} s of the step's {step_s:.2f} s: those products alone run at "
             f"{100 * linear_flops / floor / 1e9 / ref_peak:.0f}% of the peak; the other {step_s - floor:.2f} s go "
             f"to elementwise work, attention, sampling and per-operation overhead. {load_note(result)}")
    write("roofline" if a.path == "fast" else "roofline-legacy", result, rows, notes=notes)


if __name__ == "__main__":
    main()
