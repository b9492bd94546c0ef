"""Does training at the temperature the pre-flight fits beat TRL's 1.0? Each task is run as a user runs it,
`rloo-kit train --task file --path F` (column flags only) for 30 steps, in its own process, twice per seed:
at the CLI's defaults (the pre-flight fits the temperature where the samples are noise) and with
`--temperature 1` (kept as asked). Where the fit leaves 1.0 the two arms are one setup, trained once. Every
run is forced (--force), so that the gain stands beside the verdict whatever the verdict says.

    .venv/bin/python benchmarks/sampling_fit.py [--tasks word_sums demo] [--seeds 0 1 2] [--reuse] [--report-only]
        [--colder 0.5]

--colder T trains a third arm per seed at `--temperature T` (as asked), whatever the fit chose: does a colder
temperature teach a task faster where the fit sees no reason to change it (as many prompts with spread)? Its table
pairs it by seed with the defaults.

Goals (issue "The run samples the way the model answers best"): no task that gains >= 0.15 when forced is
refused; every hopeless task is refused; every learnable task file gains >= +0.25 in 30 steps at the defaults
(or >= 80% of its headroom above a base of 0.7); the demo gains >= +0.40. Adopt the fit only if it wins.
Writes benchmarks/results/sampling-fit.{json,md}; runs live in runs/bench-sampling/. The results accumulate: an
invocation replaces the records of the runs it measured and keeps the others (each with its own command); the
page's header line is the last invocation's, and its notes are every invocation's `--note`, in order.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from common import REPO, accumulated_notes, cli_train, load_note, stamp, write

TASKS = Path(__file__).parent / "tasks"
RUNS = REPO / "runs" / "bench-sampling"
# name: (kind, the options that make the task)
CASES = {
    "word_sums": ("learns; numeric answers in a sentence, columns question/result",
                  ["--task", "file", "--path", str(TASKS / "word_sums.jsonl"), "--prompt-column", "question",
                   "--answer-column", "result"]),
    "animal_or_colour": ("learns; a label CSV (text, label)",
                         ["--task", "file", "--path", str(TASKS / "animal_or_colour.csv"), "--prompt-column", "text",
                          "--answer-column", "label"]),
    "larger": ("learns; a choice CSV", ["--task", "file", "--path", str(TASKS / "larger.csv"), "--prompt-column",
                                        "question", "--answer-column", "solution"]),
    "opposites": ("learns; word answers", ["--task", "file", "--path", str(TASKS / "opposites.jsonl")]),
    "number_words": ("learns; number words to digits", ["--task", "file", "--path",
                                                        str(TASKS / "number_words.jsonl")]),
    "sentiment": ("learns; labels in conversations", ["--task", "file", "--path", str(TASKS / "sentiment.jsonl"),
                                                      "--prompt-column", "messages", "--answer-column", "label"]),
    "units": ("learns; unit conversions, numeric answers in a CSV", ["--task", "file", "--path",
                                                                     str(TASKS / "units.csv"), "--prompt-column",
                                                                     "question", "--answer-column", "amount"]),
    "rounding": ("learns; rounding to tens, few right answers before training (columns ask/result)",
                 ["--task", "file", "--path", str(TASKS / "rounding.jsonl"), "--prompt-column", "ask",
                  "--answer-column", "result"]),
    "spelled_numbers": ("learns; numbers to write in words, answers of one or two words (columns request/spelled)",
                        ["--task", "file", "--path", str(TASKS / "spelled_numbers.csv"), "--prompt-column", "request",
                         "--answer-column", "spelled"]),
    "past_tense": ("learns; past tense of verbs, word answers (columns verb_q/past)",
                   ["--task", "file", "--path", str(TASKS / "past_tense.jsonl"), "--prompt-column", "verb_q",
                    "--answer-column", "past"]),
    "demo": ("the demo: arithmetic, 16 tokens", ["--task", "arithmetic"]),
    "reverse_letters": ("hopeless", ["--task", "file", "--path", str(TASKS / "reverse_letters.jsonl")]),
}


def task_args(name: str) -> dict:
    """`rloo_kit.tasks.load_task`'s arguments for a case, from the CLI options it is trained with."""
    options = CASES[name][1]
    return {key: options[options.index(flag) + 1] for flag, key in (
        ("--task", "name"), ("--path", "path"), ("--prompt-column", "prompt_column"),
        ("--answer-column", "answer_column")) if flag in options}


RESULTS = REPO / "benchmarks" / "results" / "sampling-fit.json"
# The runs already measured, read once: the results accumulate over sessions, as runs/ is not kept between them.
MEASURED = json.loads(RESULTS.read_text())["runs"] if RESULTS.is_file() else []


def key(r: dict) -> tuple:
    return r["task"], r["arm"], r["seed"]


def recorded(name: str, arm: str, seed: int, max_steps: int) -> dict | None:
    """This arm's measured record in the results, with as many steps, for a run whose folder is gone."""
    return next((r for r in MEASURED if key(r) == (name, arm, seed) and r["after"] is not None
                 and f" --max-steps {max_steps} " in f"{r['command']} "), None)


def run(name: str, arm: str, seed: int, max_steps: int, reuse: bool, train: bool = True) -> dict:
    """One arm of one task and seed: "fitted" (the CLI's defaults) or "t<T>" (--temperature T, as "t1" or "t0.5")."""
    out = RUNS / f"{name}-{arm}-s{seed}"
    if reuse and not (out / "metrics.json").is_file() and (kept := recorded(name, arm, seed, max_steps)):
        return kept
    m, command = cli_train(out, [*CASES[name][1], "--max-steps", str(max_steps), "--seed", str(seed), "--force",
                                 "--overwrite", *(["--temperature", arm[1:]] if arm != "fitted" else [])],
                           f"{name} {arm} seed {seed}", reuse, train)
    pre = m.get("preflight") or {}
    right = held_out_right(out / "evaluation_after.json"), held_out_right(out / "evaluation_before.json")
    return {"task": name, "arm": arm, "seed": seed, "verdict": pre.get("verdict"), "problems": pre.get("problems"),
            "as_asked": (pre.get("as_asked") or {}).get("problems"),
            "temperature": (m.get("config") or {}).get("temperature"), "preflight_seconds": pre.get("seconds"),
            "greedy_pass_rate": pre.get("greedy_pass_rate"),
            "max_completion_length": m.get("max_completion_length"), "before": m.get("accuracy_before"),
            "after": m.get("accuracy_after"), "sampled_before": (m.get("sampled_before") or {}).get("accuracy"),
            "sampled_after": (m.get("sampled_after") or {}).get("accuracy"), "minutes": m.get("minutes"),
            "right_after": right[0], "right_before": right[1],
            "command": command}


def held_out_right(path: Path) -> list[bool] | None:
    """Each held-out prompt's greedy verdict, to pair two arms prompt by prompt."""
    return [r["correct"] for r in json.loads(path.read_text())["completions"]] if path.is_file() else None


def gain(r: dict) -> float | None:
    """Held-out accuracy after minus before; None for a run not measured."""
    return None if r["after"] is None or r["before"] is None else r["after"] - r["before"]


def row(name: str, runs: list[dict]) -> str:
    """One task's line, paired by seed: a seed where the fit kept temperature 1 trained one setup, which is then
    both arms (its difference 0); seeds not measured are left out."""
    fitted = [r for r in runs if r["arm"] == "fitted" and r["after"] is not None]
    if not fitted:
        return f"| {name} | {CASES[name][0]} | not measured | - | - | - | 0 | - | - | - | - |"
    t1 = {r["seed"]: r for r in runs if r["arm"] == "t1" and r["after"] is not None}
    at_1 = {f["seed"]: f if f["temperature"] == 1.0 else t1.get(f["seed"]) for f in fitted}
    pairs = [(f, at_1[f["seed"]]) for f in fitted if at_1[f["seed"]] is not None]
    first, greedy = fitted[0], fitted[0]["greedy_pass_rate"]
    return (f"| {name} | {CASES[name][0]} | {first['verdict']} [{', '.join(first['problems'] or [])}] | "
            f"{first['temperature']:g} | {'-' if greedy is None else f'{greedy:.2f}'} | "
            f"{first['preflight_seconds']} | {len(fitted)} | "
            f"{_mean([gain(o) for _, o in pairs])} | {_mean([gain(f) for f in fitted])} | "
            f"{_mean([f['after'] - o['after'] for f, o in pairs])} | "
            f"{_acc(first['sampled_before'])} -> {_acc(first['sampled_after'])} |")


def colder_row(name: str, runs: list[dict], arm: str) -> str | None:
    """One task's line of the --colder table: the forced colder arm beside the defaults, paired by seed."""
    fitted = {r["seed"]: r for r in runs if r["arm"] == "fitted" and r["after"] is not None}
    pairs = [(fitted[r["seed"]], r) for r in runs if r["arm"] == arm and r["after"] is not None
             and r["seed"] in fitted]
    if not pairs:
        return None
    fitted_temperatures = ", ".join(f"{f['temperature']:g}" for f, _ in pairs)
    return (f"| {name} | {len(pairs)} | {fitted_temperatures} | "
            f"{_mean([gain(f) for f, _ in pairs])} | {_mean([gain(c) for _, c in pairs])} | "
            f"{_mean([c['after'] - f['after'] for f, c in pairs])} | "
            f"{_mean([c['sampled_after'] - f['sampled_after'] for f, c in pairs])} |")


def _acc(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mean(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.fmean(values):+.2f}" + (f" ({', '.join(f'{v:+.2f}' for v in values)})" if len(values) > 1
                                                 else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--colder", type=float, default=None, metavar="T",
                    help="also train each task and seed at --temperature T, as asked (an arm of its own)")
    ap.add_argument("--no-t1", action="store_true", help="train no temperature-1 arm beside a fitted one: a --colder "
                    "comparison only")
    ap.add_argument("--note", default="", help="the conditions of the runs, for the results page")
    ap.add_argument("--reuse", action="store_true", help="read the finished runs already in runs/bench-sampling that "
                    "the same code and settings made (common.run_stamp), or recorded in the results; train the "
                    "others")
    ap.add_argument("--report-only", action="store_true", help="train nothing: the table from the runs already there "
                    "or recorded in the results (any other is reported as not measured)")
    args = ap.parse_args()
    runs = []
    for name in args.tasks:
        for seed in args.seeds:
            fitted = run(name, "fitted", seed, args.max_steps, args.reuse or args.report_only, not args.report_only)
            runs.append(fitted)
            if fitted["temperature"] != 1.0 and not args.no_t1:  # the fit changed the setup: train 1.0 beside it
                runs.append(run(name, "t1", seed, args.max_steps, args.reuse or args.report_only, not args.report_only))
            if args.colder is not None and fitted["temperature"] == args.colder:  # one setup: trained once
                runs.append({**fitted, "arm": f"t{args.colder:g}"})
            elif args.colder is not None:
                runs.append(run(name, f"t{args.colder:g}", seed, args.max_steps, args.reuse or args.report_only,
                                not args.report_only))
    table = ["| task | kind | verdict at the defaults | fitted temperature | greedy right (pre-flight) | pre-flight s "
             "| seeds | gain at temperature 1 | gain at the defaults | after: defaults - temperature 1 | sampled "
             "accuracy before -> after (defaults, seed 0) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    merged = {key(r): r for r in MEASURED}  # this invocation's runs replace their earlier records, if measured
    merged.update({key(r): r for r in runs if r["after"] is not None or key(r) not in merged})
    runs = list(merged.values())
    table += [row(name, [r for r in runs if r["task"] == name]) for name in CASES if any(r["task"] == name
                                                                                         for r in runs)]
    colder_arms = sorted({r["arm"] for r in runs if r["arm"] not in ("fitted", "t1")})
    for arm in colder_arms:
        table += ["", f"Forced to temperature {arm[1:]} (`--colder {arm[1:]}`), beside the defaults, paired by seed:",
                  "",
                  "| task | seeds | temperature at the defaults | gain at the defaults | gain at "
                  f"{arm[1:]} | after: {arm[1:]} - defaults | sampled accuracy after: {arm[1:]} - defaults |",
                  "|---|---|---|---|---|---|---|"]
        table += [line for name in CASES if (line := colder_row(name, [r for r in runs if r["task"] == name], arm))]
    result = {**stamp(), "runs": runs}
    notes = accumulated_notes("sampling-fit", result, args.note)
    write("sampling-fit", result, table, load_note(result) + ("\n\n" + notes if notes else ""))


if __name__ == "__main__":
    main()
