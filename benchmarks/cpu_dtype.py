"""bf16 or fp32 on this CPU, measured: the same demo run through `rloo-kit train` with RLOO_KIT_CPU_DTYPE=bf16 and
=fp32 in turn (bf16, fp32, fp32, bf16 by default, so that a drift of the machine falls on both), each a process of
its own, at temperature 1 and 16 tokens for both. `hardware.cpu_compute` picks the path from the CPU's flags; two
CPUs with the same flags measured differently (bf16 four times fp32's matmul speed on an AMD EPYC, half of it on
an Intel Xeon), and this says which is faster here, beside `hardware.bf16_speed`'s matmul timing.

    .venv/bin/python benchmarks/cpu_dtype.py [--steps 12] [--rounds 2]

Writes benchmarks/results/cpu-dtype.{json,md}; runs live in runs/bench-dtype/. A step's time is TRL's own
`step_time` (trainer_state.json), the first two steps left out; the two paths sample different completions, so
the table gives the completion tokens a step generated beside its time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from common import REPO, load_note, stamp, write

RUNS = REPO / "runs" / "bench-dtype"


def one_run(dtype: str, steps: int, index: int, reuse: bool) -> dict:
    """The demo for `steps` steps on the `dtype` path (with `reuse`, a finished run's folder is read again): its
    step times and lengths from TRL's log."""
    out = RUNS / f"{dtype}-{index}"
    cmd = [sys.executable, "-m", "rloo_kit.cli", "train", "--task", "arithmetic", "--max-steps", str(steps),
           "--temperature", "1", "--max-completion-length", "16", "--n-test", "8", "--seed", "0", "--force",
           "--overwrite", "--output-dir", str(out)]
    if not (reuse and (out / "metrics.json").is_file()):
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "RLOO_KIT_CPU_DTYPE": dtype})
        if done.returncode != 0:
            raise RuntimeError(f"{dtype} run failed:\n{done.stderr[-3000:]}")
    state = json.loads((out / f"checkpoint-{steps}" / "trainer_state.json").read_text())
    logged = [h for h in state["log_history"] if "step_time" in h][2:]
    metrics = json.loads((out / "metrics.json").read_text())
    config = metrics["config"]  # one process: a step's completions are its batch times its accumulation
    completions = config["per_device_train_batch_size"] * config["gradient_accumulation_steps"]
    return {"dtype": dtype, "step_seconds": statistics.median(h["step_time"] for h in logged),
            "step_tokens": completions * statistics.mean(h["completions/mean_length"] for h in logged),
            "before": metrics["accuracy_before"], "after": metrics["accuracy_after"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2, help="bf16, fp32 then fp32, bf16: 2 rounds is four runs")
    ap.add_argument("--reuse", action="store_true", help="read the runs already in runs/bench-dtype")
    args = ap.parse_args()
    from rloo_kit.hardware import bf16_speed, cpu_compute

    order = [d for r in range(args.rounds) for d in (("bf16", "fp32") if r % 2 == 0 else ("fp32", "bf16"))]
    runs = [one_run(dtype, args.steps, i, args.reuse) for i, dtype in enumerate(order)]
    matmul = bf16_speed()
    # each round's two runs were neighbours in time: their ratio is what the machine's drift spares
    paired = [runs[i]["step_seconds"] / runs[i + 1]["step_seconds"] if runs[i]["dtype"] == "bf16"
              else runs[i + 1]["step_seconds"] / runs[i]["step_seconds"] for i in range(0, len(runs), 2)]
    median = {d: statistics.median(r["step_seconds"] for r in runs if r["dtype"] == d) for d in ("bf16", "fp32")}
    tokens = {d: statistics.mean(r["step_tokens"] for r in runs if r["dtype"] == d) for d in ("bf16", "fp32")}
    table = ["| path | runs | median step (s) | completion tokens a step (mean) | s per completion token |",
             "|---|---|---|---|---|"]
    table += [f"| {d} | {sum(r['dtype'] == d for r in runs)} | {median[d]:.2f} | {tokens[d]:.0f} | "
              f"{median[d] / tokens[d]:.4f} |" for d in ("bf16", "fp32")]
    result = {**stamp(), "flags_choice": cpu_compute().describe(), "bf16_matmul_speed": matmul, "runs": runs,
              "bf16_step_over_fp32_by_round": paired, "bf16_step_over_fp32": statistics.mean(paired)}
    write("cpu-dtype", result, table, load_note(result) + (
        f"\n\nbf16 step / fp32 step, each round's neighbouring runs: **{result['bf16_step_over_fp32']:.2f}** "
        f"({', '.join(f'{r:.2f}' for r in paired)}; the bf16 path generated "
        f"{tokens['bf16'] / tokens['fp32']:.2f}x the fp32 path's tokens a step). A (2048x576)(576x1536) matmul in bf16 "
        f"ran at {matmul:.2f}x fp32's speed (`hardware.bf16_speed`). The flags chose: {result['flags_choice']}. "
        f"The demo, {args.steps} steps each, temperature 1, 16 tokens, seed 0; runs in the order {', '.join(order)}."))


if __name__ == "__main__":
    main()
