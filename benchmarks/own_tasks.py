"""Does a user's own task learn with the kit's defaults? `rloo-kit train --task file --path F` and nothing
else (the pre-flight picks the completion length and the shaping), on task files unlike the arithmetic
demo: digits from number words (number answers) and opposites (word answers, some with several accepted).

    .venv/bin/python benchmarks/make_tasks.py          # writes benchmarks/tasks/*.jsonl (committed)
    .venv/bin/python benchmarks/own_tasks.py [--tasks number_words opposites] [--max-steps 40]

Each task runs as a user would run it, in its own process; its metrics.json (accuracy before and after on
50 held-out prompts, greedy) is collected into benchmarks/results/own-tasks.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, stamp, write

TASKS = Path(__file__).parent / "tasks"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", nargs="+", default=sorted(p.stem for p in TASKS.glob("*.jsonl")))
    ap.add_argument("--max-steps", type=int, help="default: the CLI's")
    args = ap.parse_args()
    runs = []
    for name in args.tasks:
        out = REPO / "runs" / f"bench-own-{name}"
        cmd = [sys.executable, "-m", "rloo_kit.cli", "train", "--task", "file", "--path", str(TASKS / f"{name}.jsonl"),
               "--output-dir", str(out)] + (["--max-steps", str(args.max_steps)] if args.max_steps else [])
        start = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = (time.time() - start) / 60
        print(done.stdout[-3000:], done.stderr[-1500:] if done.returncode else "", flush=True)
        m = json.loads((out / "metrics.json").read_text())
        runs.append({"task": name, "exit_code": done.returncode, "wall_minutes": round(wall, 2),
                     "train_minutes": m.get("minutes"), "steps": m["steps"],
                     "max_completion_length": m["max_completion_length"], "preflight": m.get("preflight"),
                     "accuracy_before": m["accuracy_before"], "accuracy_after": m["accuracy_after"],
                     "command": " ".join(["rloo-kit", *cmd[3:]])})
    table = ["| task | pre-flight | own-task defaults | steps | training minutes | held-out accuracy before -> after |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        pre = r["preflight"] or {}
        table.append(f"| {r['task']} | {', '.join(pre.get('problems', [])) or 'ok'} "
                     f"(zero spread {pre.get('zero_spread_fraction', 0):.2f}, cut {pre.get('truncation_rate', 0):.2f}) "
                     f"| {'; '.join(pre.get('own_task_defaults', [])) or '-'} | {r['steps']} | {r['train_minutes']} | "
                     f"{r['accuracy_before']:.2f} -> {r['accuracy_after']:.2f} "
                     f"({r['accuracy_after'] - r['accuracy_before']:+.2f}) |")
    write("own-tasks", {**stamp(), "runs": runs}, table)


if __name__ == "__main__":
    main()
