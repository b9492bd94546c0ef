"""How step time and peak memory grow with the group size and the completion length.

    .venv/bin/python benchmarks/scaling.py [--model smollm2-135m] [--steps 4]
    .venv/bin/python benchmarks/scaling.py --model random:tiny

num_generations in (2, 4, 8) x max_completion_length in (16, 32, 64), two prompts per step (so the
completions per step grow with the group), completions forced to full length. Each cell is a fresh
process. Also records the preset memory estimate against the measured peak (CPU RSS here, CUDA peak
on a GPU). Writes benchmarks/results/scaling-<model>.{json,md}.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import measure, stamp, write

GENS = (2, 4, 8)
LENGTHS = (16, 32, 64)


def linear_fit(x: list[float], y: list[float]) -> tuple[float, float, float]:
    """Slope, intercept and R^2 of y against x."""
    slope, intercept = np.polyfit(x, y, 1)
    pred = np.polyval([slope, intercept], x)
    ss_res, ss_tot = float(((np.array(y) - pred) ** 2).sum()), float(((np.array(y) - np.mean(y)) ** 2).sum())
    return float(slope), float(intercept), 1 - ss_res / ss_tot if ss_tot else 1.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    args = ap.parse_args()
    cells = []
    for g in GENS:
        for m in LENGTHS:
            run = measure(model=args.model, steps=args.steps, gens=g, batch=g * args.prompts, mcl=m, fixed_length=True,
                          output_dir="runs/bench-scaling")
            cells.append(run)
            print(g, m, run["median_step_seconds"], run["peak_rss_gb"], run["estimate_gb"], flush=True)
    tokens = [c["batch"] * c["mcl"] for c in cells]
    step_fit = linear_fit(tokens, [c["median_step_seconds"] for c in cells])
    mem_fit = linear_fit(tokens, [c["peak_rss_gb"] for c in cells])
    for c in cells:
        c["estimate_error"] = round(c["estimate_gb"] / c["peak_rss_gb"] - 1, 3)
    result = {**stamp(), "settings": vars(args), "cells": cells,
              "step_seconds_vs_completion_tokens": dict(zip(("slope", "intercept", "r2"), step_fit, strict=True)),
              "peak_gb_vs_completion_tokens": dict(zip(("slope", "intercept", "r2"), mem_fit, strict=True)),
              "estimate_within_25pct": all(abs(c["estimate_error"]) <= 0.25 for c in cells)}
    table = ["| generations | completion length | completions/step | median step (s) | peak RSS (GiB) | estimate (GiB) "
             "| estimate error |", "|---|---|---|---|---|---|---|"]
    table += [f"| {c['gens']} | {c['mcl']} | {c['batch']} | {c['median_step_seconds']:.2f} | {c['peak_rss_gb']:.2f} | "
              f"{c['estimate_gb']:.2f} | {c['estimate_error']:+.0%} |" for c in cells]
    notes = (f"Step time against completion tokens per step (completions x length): slope "
             f"{step_fit[0] * 1000:.2f} ms/token, intercept {step_fit[1]:.2f} s, R^2 {step_fit[2]:.3f}. Peak memory: "
             f"slope {mem_fit[0] * 1024:.3f} MiB/token, intercept {mem_fit[1]:.2f} GiB, R^2 {mem_fit[2]:.3f}.")
    write(f"scaling-{args.model.replace('random:', 'random-')}", result, table, notes)


if __name__ == "__main__":
    main()
