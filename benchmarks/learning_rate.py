"""Which learning rate should the CPU preset have? 30 steps of `rloo-kit train` at each rate, everything
else at the CLI's defaults, on the demo's arithmetic and on task files of make_tasks.py: held-out accuracy
before and after, and what the health monitor named.

    .venv/bin/python benchmarks/learning_rate.py [--tasks arithmetic number_words] [--rates 2e-4 4e-4] [--reuse]
    .venv/bin/python benchmarks/learning_rate.py --runs arithmetic:2e-4 opposites:5e-4 --reuse

One run per process, one after another. --reuse reads runs already in runs/lr/<task>-<rate>, each with the
command that made it in its `command` file.
Writes benchmarks/results/learning-rate.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from common import REPO, load_note, stamp, write

TASKS = {"arithmetic": ["--task", "arithmetic"],
         "number_words": ["--task", "file", "--path", "benchmarks/tasks/number_words.jsonl"],
         "opposites": ["--task", "file", "--path", "benchmarks/tasks/opposites.jsonl"]}


def run(task: str, rate: str, steps: int, reuse: bool) -> dict:
    out = REPO / "runs" / "lr" / f"{task}-{rate}"
    cmd = ["train", *TASKS[task], "--learning-rate", rate, "--max-steps", str(steps), "--force", "--overwrite",
           "--output-dir", str(out.relative_to(REPO))]
    if not (reuse and (out / "metrics.json").is_file()):
        start = time.time()
        done = subprocess.run([sys.executable, "-m", "rloo_kit.cli", *cmd], cwd=REPO, capture_output=True, text=True)
        print(f"== {task} at {rate} (exit {done.returncode}, {(time.time() - start) / 60:.1f} min)\n"
              f"{done.stdout[-800:]}{done.stderr[-800:]}", flush=True)
        (out / "command").write_text("rloo-kit " + " ".join(cmd) + "\n")
    m = json.loads((out / "metrics.json").read_text())
    return {"task": task, "learning_rate": float(rate), "accuracy_before": m["accuracy_before"],
            "accuracy_after": m["accuracy_after"], "gain": round(m["accuracy_after"] - m["accuracy_before"], 2),
            "paired": m.get("paired"), "health": m.get("diagnoses", []),
            "max_completion_length": m["max_completion_length"], "minutes": m["minutes"],
            "command": (out / "command").read_text().strip()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--rates", nargs="+", default=["2e-4", "3e-4", "4e-4", "5e-4", "1e-3"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--runs", nargs="+", metavar="TASK:RATE", help="these runs instead of every task at every rate")
    ap.add_argument("--reuse", action="store_true", help="read the runs already in runs/lr/<task>-<rate>")
    args = ap.parse_args()
    pairs = [tuple(p.split(":")) for p in args.runs] if args.runs else [(t, r) for t in args.tasks for r in args.rates]
    runs = [run(task, rate, args.steps, args.reuse) for task, rate in pairs]
    table = ["| task | learning rate | held-out accuracy before -> after | better / worse of | health monitor named | "
             "tokens | training minutes |", "|---|---|---|---|---|---|---|"]
    table += [f"| {r['task']} | {r['learning_rate']:g} | {r['accuracy_before']:.2f} -> {r['accuracy_after']:.2f} "
              f"({r['gain']:+.2f}) | {r['paired']['better']} / {r['paired']['worse']} of {r['paired']['prompts']} | "
              f"{', '.join(r['health']) or '-'} | {r['max_completion_length']} | {r['minutes']} |"
              for r in runs]
    result = {**stamp(), "runs": runs}
    write("learning-rate", result, table, load_note(result))


if __name__ == "__main__":
    main()
