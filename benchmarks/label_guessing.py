"""Can the pre-flight tell a label task the model guesses at from one it can learn? For each label file, the
pre-flight's draw (at the CLI's defaults, seed by seed) and the greedy answers and a draw at 0.5 of the same prompts
are scored by the labels they name. The figure: balanced accuracy over the answers that name one label, the mean
over gold labels of the share named right. A model that names one label whatever the prompt scores 1/n there
whatever its bias and the labels' shares; one that tells the labels apart scores more.

    .venv/bin/python benchmarks/label_guessing.py [--tasks sentiment animal_or_colour parity] [--seeds 0 1 2]

Each draw's replies are also marked as a validation pass's are (`Validation.marks`: one answer whatever the row, the
choice at one place whatever the row, or no better than the same answers dealt to the rows at random): would a
pre-flight check built on those marks, on the samples or on greedy answers asked for every time, tell them apart?

Known outcomes (sampling-fit.md, docs/benchmarks.md): sentiment gains +0.55 over three seeds in 30 steps, parity
0.56 -> 0.56 in 8 minutes, yes_no 0.62 -> 0.62 in 8 minutes (step 0 kept); animal_or_colour and larger +0.26 each
in 30 steps since their answers are read as picks. A check that warned on parity and yes_no would have to leave the
others. Writes benchmarks/results/<--name>.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from common import load_note, stamp, write

TASKS = Path(__file__).parent / "tasks"
# name: (file, prompt column, answer column, forced 30-step gain known)
CASES = {
    "sentiment": ("sentiment.jsonl", "messages", "label", "learns: +0.55 over 3 seeds"),
    "animal_or_colour": ("animal_or_colour.csv", "text", "label", "learns: +0.26 in 30 steps"),
    "parity": ("parity.csv", "question", "parity", "0.56 -> 0.56 in 8 min"),
    "yes_no": ("yes_no.csv", "question", "verdict", "0.62 -> 0.62 in 8 min"),
    "larger": ("larger.csv", "question", "solution", "learns: +0.26 in 30 steps"),
}
ARMS = ("1", "0.5", "greedy")  # the pre-flight's own draw at temperature 1, one at 0.5, the greedy answers


def balanced(named: list[str | None], gold: list[str]) -> dict:
    """Share of answers naming one label, share right, and balanced accuracy over those naming one."""
    per_label = {}
    for label in sorted(set(gold)):
        picks = [n for n, g in zip(named, gold, strict=True) if g == label and n is not None]
        if picks:
            per_label[label] = sum(n == label for n in picks) / len(picks)
    return {"named": sum(n is not None for n in named) / len(named),
            "right": sum(n == g for n, g in zip(named, gold, strict=True)) / len(named),
            "balanced": statistics.fmean(per_label.values()) if per_label else None, "per_label": per_label}


def measure(name: str, seed: int, model, tokenizer) -> dict:
    from rloo_kit.budget import Validation
    from rloo_kit.evaluation import EvalReport
    from rloo_kit.preflight_check import preflight
    from rloo_kit.rewards.answers import is_correct, predicted_answer, row_rules
    from rloo_kit.tasks import load_task

    file, prompt_column, answer_column, _ = CASES[name]
    task = load_task("file", path=str(TASKS / file), prompt_column=prompt_column, answer_column=answer_column,
                     seed=seed).carve_validation(seed)  # the rows the CLI's pre-flight samples from
    start = time.time()
    report = preflight(model, tokenizer, task, seed=seed, progress=False)
    seconds = time.time() - start
    sample, length = report.draw.sample, report.trained.max_completion_length
    rows = [p.index for p in report.asked.prompts]
    picked = task.train.select(rows)
    rules, gold, prompts = row_rules(picked), list(picked["answer"]), list(picked["prompt"])
    draws = {"1": report.draw.ids, "0.5": sample.at(0.5, length), "greedy": sample.greedy(length)}
    out = {"task": name, "seed": seed, "verdict": report.verdict, "kinds": report.kinds(),
           "temperature": report.trained.temperature, "length": length, "preflight_seconds": round(seconds, 1),
           "majority": max(gold.count(g) for g in set(gold)) / len(gold)}
    for arm, ids in draws.items():
        k = len(ids[0])
        texts = [tokenizer.decode(seq[:length], skip_special_tokens=True) for group in ids for seq in group]
        named = [predicted_answer(t, match=task.match, prompt=prompts[i // k], **rules[i // k])
                 for i, t in enumerate(texts)]
        out[arm] = balanced(named, [g for g in gold for _ in range(k)])
        replies = [{"completion": t, "answer": gold[i // k], "choices": rules[i // k].get("choices"),
                    "predicted": named[i], "correct": is_correct(t, gold[i // k], task.match, prompt=prompts[i // k],
                                                                 **rules[i // k])} for i, t in enumerate(texts)]
        out[arm]["marks"] = Validation.of(EvalReport(None, {}, {}, 0.0, 0.0, 1, replies)).marks()
        out[arm]["replies_right"] = sum(r["correct"] for r in replies)
    print(out, flush=True)
    return out


def _cells(run: dict, key: str) -> str:
    return " / ".join("-" if run[arm][key] is None else f"{run[arm][key]:.2f}" for arm in ARMS)


def _marks(run: dict) -> str:
    """Each arm's validation mark, in the words of its key and value, '-' where none."""
    return " / ".join(", ".join(f"{k} {v}" for k, v in run[arm]["marks"].items()) or "-" for arm in ARMS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--note", default="")
    parser.add_argument("--name", default="label-guessing", help="results/<name>.{json,md}")
    args = parser.parse_args()
    result = stamp()
    from rloo_kit.models import load_model

    model, tokenizer = load_model()
    result["runs"] = runs = [measure(name, seed, model, tokenizer) for name in args.tasks for seed in args.seeds]
    table = ["| task | forced gain (known) | seed | verdict at the defaults | trained at | majority label "
             "| balanced accuracy at " + " / ".join(ARMS) + " | naming one label: " + " / ".join(ARMS)
             + " | right: " + " / ".join(ARMS) + " | marked: " + " / ".join(ARMS) + " |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        right = " / ".join(str(r[arm]["replies_right"]) for arm in ARMS)
        table.append(f"| {r['task']} | {CASES[r['task']][3]} | {r['seed']} | {r['verdict']} {r['kinds'] or ''} | "
                     f"{r['temperature']:g} | {r['majority']:.2f} | {_cells(r, 'balanced')} | {_cells(r, 'named')} | "
                     f"{right} | {_marks(r)} |")
    write(args.name, result, table, " ".join(filter(None, [args.note, load_note(result)])))


if __name__ == "__main__":
    main()
