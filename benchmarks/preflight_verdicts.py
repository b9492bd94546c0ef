"""Does the pre-flight's verdict hold on tasks it has never seen? Each task file of make_tasks.py is run
as a user would run it, `rloo-kit train --task file --path F` at the CLI's defaults, for 30 steps, in its
own process. The verdict is read from metrics.json; every task is trained with --force whatever the
verdict, so that what 30 steps did to held-out accuracy stands beside what the pre-flight said.

    .venv/bin/python benchmarks/make_tasks.py                 # writes benchmarks/tasks/* (committed)
    .venv/bin/python benchmarks/preflight_verdicts.py [--tasks larger sentiment] [--max-steps 30]

Goals (issue "The verdict is about the run that will happen"): no task that gains >= 0.15 is refused;
no task that gains < 0.05 is called "can learn" without a warning; the pre-flight <= 60 s on 2 cores.
Writes benchmarks/results/preflight-verdicts.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, load_note, stamp, write

TASKS = Path(__file__).parent / "tasks"
# name: (what kind of task it is, the file, the CLI options its file needs)
CASES = {
    "number_words": ("learns; answers cut at 16 tokens", "number_words.jsonl", []),
    "opposites": ("learns; word answers, some with several accepted", "opposites.jsonl", []),
    "sentiment": ("learns; labels, conversations with a system message", "sentiment.jsonl",
                  ["--prompt-column", "messages", "--answer-column", "label"]),
    "larger": ("learns; a CSV with its own column names", "larger.csv",
               ["--prompt-column", "question", "--answer-column", "solution"]),
    "prime_products": ("hopeless: products of two 4-digit primes", "prime_products.jsonl", []),
    "reverse_letters": ("hopeless: nine random letters reversed", "reverse_letters.jsonl", []),
    "copy_number": ("meant as solved: repeat a number (SmolLM2 samples it ~40% right at temperature 1)",
                    "copy_number.jsonl", []),
    "copy_number_cold": ("solved: repeat a number, sampled at temperature 0.1", "copy_number.jsonl",
                         ["--temperature", "0.1"]),
    "unscored": ("unscored: a reward of the user's that scores nothing", "opposites.jsonl",
                 ["--reward", str(TASKS / "unscored_reward.py") + ":json_answer"]),
}
TABLE = [name for name in CASES if name != "copy_number"]  # the committed table's tasks; copy_number is kept
# to show why the solved case is sampled cold (at temperature 1 it is not solved), not as a row of its own


def run(name: str, max_steps: int, preflight_only: bool, reuse: bool, verdict_again: bool = False) -> dict:
    """One task as a user runs it: `train --force` (the verdict, then 30 steps whatever it says), or with
    preflight_only the verdict alone (`preflight --json`). reuse: read a finished run's metrics.json.
    verdict_again: keep a finished run's training figures, and take the verdict again with today's pre-flight."""
    kind, file, extra = CASES[name]
    out = REPO / "runs" / f"bench-verdict-{name}"
    options = ["--task", "file", "--path", str(TASKS / file), *extra]
    if preflight_only:
        cmd = ["preflight", *options, "--json", str(out / "preflight.json")]
    else:
        cmd = ["train", *options, "--output-dir", str(out), "--max-steps", str(max_steps), "--force", "--overwrite"]
    cmd = [sys.executable, "-m", "rloo_kit.cli", *cmd]
    done, wall, start = None, None, time.time()
    if not (reuse and (out / ("preflight.json" if preflight_only else "metrics.json")).is_file()):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = round((time.time() - start) / 60, 2)
        print(f"== {name} (exit {done.returncode}, {wall} min)\n{done.stdout[-2500:]}{done.stderr[-1500:]}",
              flush=True)
    metrics = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").is_file() else {}
    if preflight_only and (out / "preflight.json").is_file():
        metrics = {"preflight": json.loads((out / "preflight.json").read_text())["summary"]}
    again = out / "preflight-again.json"  # a verdict taken again is the row's verdict from then on
    if verdict_again and metrics:
        subprocess.run([sys.executable, "-m", "rloo_kit.cli", "preflight", *options, "--json", str(again)],
                       capture_output=True, text=True)
    if metrics and reuse and again.is_file():
        metrics["preflight"] = json.loads(again.read_text())["summary"]
    refusal = next((line for line in done.stderr.splitlines() if line.startswith("rloo-kit:")), None) if done else None
    return {"task": name, "kind": kind, "exit_code": done.returncode if done else None, "wall_minutes": wall,
            "refused_by": refusal, "preflight": metrics.get("preflight"), "steps": metrics.get("steps"),
            "train_minutes": metrics.get("minutes"), "max_completion_length": metrics.get("max_completion_length"),
            "accuracy_before": metrics.get("accuracy_before"), "accuracy_after": metrics.get("accuracy_after"),
            "command": " ".join(["rloo-kit", *cmd[3:]]).replace(str(REPO) + "/", "")}


def verdict(r: dict) -> str:
    pre = r["preflight"]
    if pre is None:
        return "refused before training: " + (r["refused_by"] or f"exit {r['exit_code']}").removeprefix("rloo-kit: ")
    kinds = [k if k in pre.get("blocking", pre["problems"]) else f"{k} (warning)" for k in pre["problems"]]
    return ("can learn" if pre["ok"] else "cannot learn (refused)") + (f" [{', '.join(kinds)}]" if kinds else "")


def goals(runs: list[dict]) -> list[str]:
    out = []
    for r in runs:
        gain = None if r["accuracy_after"] is None else r["accuracy_after"] - r["accuracy_before"]
        pre = r["preflight"]
        refused = pre is None or not pre["ok"]
        warned = refused or bool(pre["problems"])
        if gain is not None and gain >= 0.15 and refused:
            out.append(f"MISSED: {r['task']} gained {gain:+.2f} but was refused")
        if gain is not None and gain < 0.05 and not warned:
            out.append(f"MISSED: {r['task']} gained {gain} but was called 'can learn' without a warning")
    trained = [r["task"] for r in runs if r["accuracy_after"] is not None]
    untrained = [r["task"] for r in runs if r["accuracy_after"] is None]
    if not trained:
        return ["not measured: no task was trained in this run (verdicts only, --preflight-only)"]
    return out or [f"met on the trained tasks ({', '.join(trained)}): none that gained >= 0.15 was refused, every one "
                   "that gained < 0.05 was refused or warned about"
                   + (f"; untrained here, verdict only: {', '.join(untrained)}" if untrained else "")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", nargs="+", default=TABLE, choices=list(CASES))
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--preflight-only", nargs="*", default=[], help="tasks to give the verdict alone, untrained")
    ap.add_argument("--reuse", action="store_true", help="read the runs already in runs/bench-verdict-*")
    ap.add_argument("--verdict-again", nargs="*", default=[],
                    help="with --reuse: tasks whose verdict is taken again by today's pre-flight (training kept); "
                         "a verdict taken again stays the row's verdict in later --reuse runs")
    args = ap.parse_args()
    runs = [run(name, args.max_steps, name in args.preflight_only, args.reuse, name in args.verdict_again)
            for name in args.tasks]
    table = ["| task | kind | pre-flight verdict (CLI defaults) | as asked -> as trained | pre-flight s | "
             "steps | held-out accuracy before -> after (30 steps, --force) |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        pre = r["preflight"] or {}
        asked = pre.get("as_asked", {})
        setups = (f"{asked.get('max_completion_length')} tok: {asked.get('flat_fraction', 0):.0%} flat, "
                  f"{asked.get('truncation_rate', 0):.0%} cut -> {pre.get('max_completion_length')} tok: "
                  f"{pre.get('flat_fraction', 0):.0%} flat, {pre.get('truncation_rate', 0):.0%} cut") if pre else "-"
        before, after = r["accuracy_before"], r["accuracy_after"]
        acc = "not trained in this run" if after is None else f"{before:.2f} -> {after:.2f} ({after - before:+.2f})"
        table.append(f"| {r['task']} | {r['kind']} | {verdict(r)} | {setups} | {pre.get('seconds', '-')} | "
                     f"{r['steps'] if r['steps'] is not None else '-'} | {acc} |")
    result = {**stamp(), "runs": runs, "goals": goals(runs)}
    write("preflight-verdicts", result, table, "Goals: " + "; ".join(result["goals"]) + ".\n\n" + load_note(result))


if __name__ == "__main__":
    main()
