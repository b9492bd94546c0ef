"""Does the kit cost anything over TRL? The same RLOO run built by rloo_kit.build_trainer and by a
hand-written trl.RLOOTrainer (identical settings and seed, benchmarks/rloo_run.py), run in
alternation so that machine noise falls on both alike.

    .venv/bin/python benchmarks/overhead.py [--rounds 3] [--steps 8] [--model smollm2-135m]

Writes benchmarks/results/overhead.{json,md}. Goal: median step time kit / TRL <= 1.05.
"""

from __future__ import annotations

import argparse

import torch
from common import measure, median, stamp, write


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--gens", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--mcl", type=int, default=16)
    args = ap.parse_args()
    runs = {"kit": [], "trl": []}
    for r in range(args.rounds):
        for via in (("kit", "trl") if r % 2 == 0 else ("trl", "kit")):  # alternate who goes first
            runs[via].append(measure(via=via, model=args.model, steps=args.steps, gens=args.gens, batch=args.batch,
                                     mcl=args.mcl, fixed_length=True, output_dir=f"runs/bench-overhead-{via}"))
            print(via, runs[via][-1]["median_step_seconds"], runs[via][-1]["peak_rss_gb"], flush=True)
    step = {via: median([s for run in rs for s in run["step_seconds"][1:]]) for via, rs in runs.items()}
    rss = {via: max(run["peak_rss_gb"] for run in rs) for via, rs in runs.items()}
    same_rewards = all(k["rewards"] == t["rewards"] for k, t in zip(runs["kit"], runs["trl"], strict=True))
    ratio = step["kit"] / step["trl"]
    result = {**stamp(), "settings": vars(args), "median_step_seconds": step, "peak_rss_gb": rss,
              "step_time_ratio_kit_over_trl": round(ratio, 4), "goal": "<= 1.05", "met": ratio <= 1.05,
              "identical_rewards": same_rewards, "runs": runs}
    table = ["| built by | median step (s) | peak RSS (GiB) |", "|---|---|---|",
             *(f"| {via} | {step[via]:.3f} | {rss[via]:.2f} |" for via in ("kit", "trl")),
             "", f"step-time ratio kit / TRL: **{ratio:.3f}** (goal <= 1.05: {'met' if ratio <= 1.05 else 'NOT met'}); "
             f"identical rewards step by step: {same_rewards}"]
    notes = (f"{args.rounds} rounds x {args.steps} steps each, alternating; the first step of each run is left out "
             f"(warm-up). {args.gens} generations, {args.batch} completions per step, completions forced to "
             f"{args.mcl} tokens. The TRL side needs rloo_kit.patches.compat's CPU patch to run at all on CPU.")
    if not torch.cuda.is_available():
        from rloo_kit.hardware import cpu_compute

        choice = cpu_compute()
        notes += f" The kit's CPU path here: {choice.describe()}."
        if choice.bf16:
            notes += (" The hand-written run keeps TRL's defaults (fp32 weights, torch's sampler), so the rewards "
                      "differ step by step by design and the ratio is the kit's speed-up, not its overhead; "
                      "cpu_speed.md compares the two paths' learning.")
    write("overhead", result, table, notes=notes)


if __name__ == "__main__":
    main()
