"""The GPU path: Unsloth against transformers + bitsandbytes 4-bit and against 16-bit LoRA, on a
model of a real shape with random weights, every completion forced to the same length.

    .venv/bin/python benchmarks/backends.py                 # GPU: random Qwen2.5-0.5B shape
    .venv/bin/python benchmarks/backends.py --model random:qwen2.5-1.5b
    .venv/bin/python benchmarks/backends.py --model random:tiny  # CPU: a small shape, same code path

Writes benchmarks/results/backends-<device>.{json,md}: step time, generated tokens per second and
peak memory (CUDA peak on a GPU, process RSS on a CPU) per backend.
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
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--gens", type=int, default=8 if gpu else 4)
    ap.add_argument("--batch", type=int, default=16 if gpu else 8)
    ap.add_argument("--mcl", type=int, default=256 if gpu else 32)
    args = ap.parse_args()
    rows = []
    for name, backend, four_bit in BACKENDS:
        run = measure(via="kit", model=args.model, preset="24gb" if gpu else "cpu", backend=backend,
                      load_in_4bit=four_bit, dtype="bf16" if gpu else "fp32", steps=args.steps, gens=args.gens,
                      batch=args.batch, mcl=args.mcl, fixed_length=True, gradient_checkpointing=gpu,
                      optim="adamw_8bit" if gpu else "adamw_torch", output_dir="runs/bench-backends")
        rows.append({"name": name, **run})
        print(name, run["median_step_seconds"], run["tokens_per_second"], flush=True)
    peak = "cuda_peak_gb" if gpu else "peak_rss_gb"
    base = rows[1]["median_step_seconds"]
    table = ["| backend | median step (s) | vs transformers 4-bit | generated tokens/s | peak memory (GiB) |",
             "|---|---|---|---|---|"]
    table += [f"| {r['name']} | {r['median_step_seconds']:.3f} | {r['median_step_seconds'] / base:.2f}x | "
              f"{r['tokens_per_second']:.0f} | {r[peak]:.2f} |" for r in rows]
    device = "cuda" if gpu else "cpu"
    write(f"backends-{device}", {**stamp(), "settings": vars(args), "memory": peak, "runs": rows}, table, notes=(
        f"{args.model}, {args.gens} generations, {args.batch} completions per step of exactly {args.mcl} tokens, "
        f"{args.steps} steps (the first left out). Peak memory is {peak}. Unquantized means "
        f"{'bf16' if gpu else 'fp32'} weights here."))


if __name__ == "__main__":
    main()
