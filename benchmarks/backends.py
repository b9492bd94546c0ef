"""The GPU path: Unsloth against transformers + bitsandbytes 4-bit and against 16-bit LoRA, on a
model of a real shape with random weights, every completion forced to the same length.

    .venv/bin/python benchmarks/backends.py                 # GPU: random Qwen2.5-0.5B shape
    .venv/bin/python benchmarks/backends.py --model random:qwen2.5-1.5b
    .venv/bin/python benchmarks/backends.py --model random:tiny  # CPU: a small shape, same code path

Writes benchmarks/results/backends-<device>[-<model>].{json,md}: step time, generated tokens per second, peak
memory (CUDA peak on a GPU, process RSS on a CPU) and the kit's memory estimate per backend. A backend that
fails (Unsloth that does not import, say) is a row with its error, and the others still run.
"""

from __future__ import annotations

import argparse

import torch
from common import measure, stamp, write

BACKENDS = (  # (name, backend, 4-bit); compute in bf16 on a GPU, fp32 on a CPU
    ("unsloth 4-bit", "unsloth", True),
    ("transformers + bnb 4-bit", "transformers", True),
    ("transformers unquantized", "transformers", False),
)


def main() -> None:
    gpu = torch.cuda.is_available()
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="random:qwen2.5-0.5b" if gpu else "random:tiny")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--gens", type=int, default=8 if gpu else 4)
    ap.add_argument("--batch", type=int, default=16 if gpu else 8)
    ap.add_argument("--mcl", type=int, default=128 if gpu else 32)
    ap.add_argument("--name", default=None, help="results file stem (default: backends-<device>)")
    args = ap.parse_args()
    preset = "24gb" if gpu else "cpu"
    rows: list[dict] = []
    for name, backend, four_bit in BACKENDS:
        try:
            run = measure(via="kit", model=args.model, preset=preset, backend=backend,
                          load_in_4bit=four_bit, dtype="bf16" if gpu else "fp32", steps=args.steps, gens=args.gens,
                          batch=args.batch, mcl=args.mcl, fixed_length=True, gradient_checkpointing=gpu,
                          optim="adamw_8bit" if gpu else "adamw_torch", output_dir="runs/bench-backends")
        except RuntimeError as e:  # one backend's failure is a finding, not the end of the benchmark
            run = {"error": str(e)[-1500:]}
        rows.append({"name": name, **run})
        report(args, preset, rows, gpu)  # after every backend: a run stopped at a time limit keeps its rows


def report(args: argparse.Namespace, preset: str, rows: list[dict], gpu: bool) -> None:
    peak = "cuda_peak_gb" if gpu else "peak_rss_gb"
    base = next((r["median_step_seconds"] for r in rows if r["name"] == BACKENDS[1][0] and "error" not in r), None)
    table = ["| backend | median step (s) | vs transformers 4-bit | generated tokens/s | peak memory (GiB) | "
             "kit's estimate (GiB) |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            table.append(f"| {r['name']} | failed: {r['error'].strip().splitlines()[-1][:160]} | | | | |")
            continue
        ratio = f"{r['median_step_seconds'] / base:.2f}x" if base else "-"
        table.append(f"| {r['name']} | {r['median_step_seconds']:.3f} | {ratio} | {r['tokens_per_second']:.0f} | "
                     f"{r[peak]:.2f} | {r['estimate_gb']:.2f} |")
    missing = [name for name, _, _ in BACKENDS[len(rows):]]
    write(args.name or f"backends-{'cuda' if gpu else 'cpu'}",
          {**stamp(), "settings": vars(args), "memory": peak, "runs": rows}, table, notes=(
              f"{args.model}, preset {preset}, {args.gens} generations, {args.batch} completions per step of exactly "
              f"{args.mcl} tokens, {args.steps} steps (the first left out). Peak memory is {peak}; the estimate is "
              f"rloo_kit.memory.estimate_memory for these settings. Unquantized means "
              f"{'bf16' if gpu else 'fp32'} weights here."
              + (f" Not measured (the run stopped first): {', '.join(missing)}." if missing else "")))

if __name__ == "__main__":
    main()
