"""Which validation step should a time-budgeted run keep? Each task is trained once per seed as a user trains it
(`rloo-kit train ... --minutes M`), in a process of its own that also records, at every validation measurement,
the validation rows right and the adapter's weights; after the run, each measured step's adapter answers the
held-out test split. The keep rules are then replayed over the same measurements, so the rules differ in what they
choose and in nothing else (the training does not depend on which step is kept):

- kept:   the kit's (`budget.replaces`): the step right on the most validation rows, the later of equals;
- lead:   the kit's rule until then: a step replaces the kept one where it is right on more of the validation rows
          it and step 0 answer differently, by a lead chance gives at most KEEP_P of the time (one-sided sign
          test), and right on more rows than the kept one;
- sampled: the lead rule on a finer score of each row: its greedy answer beside SAMPLES answers sampled at the
          training temperature, right or not (a row right greedily and on 3 of 4 samples scores 4 of 5), measured
          after the run on each recorded step; the seconds of a sampled pass beside a greedy one say what it would
          cost inside the budget;
- latest: the latest step, unless step 0 or the step right on the most rows so far leads it by that test;
- last:   the final step, whatever its validation says; oracle: the best held-out step (not a rule: a ceiling).

    .venv/bin/python benchmarks/keep_rule.py [--tasks demo] [--seeds 0 1 2 3 4] [--minutes 3] [--reuse]

Writes benchmarks/results/keep-rule.{json,md} (`--name` another); runs live in runs/bench-keep/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from common import REPO, bootstrap, load_note, stamp, write
from sampling_fit import CASES

from rloo_kit.budget import replaces
from rloo_kit.evaluation import sign_test

RUNS = REPO / "runs" / "bench-keep"
STEPS_FILE = "measured_steps.json"  # per measured step: validation rows right, held-out prompts right
RULES = ("kept", "lead", "sampled", "latest", "last", "oracle")
RIVALS = ("lead", "sampled", "latest")  # the rules each compared with the kit's, paired by seed
SAMPLES = 4  # sampled answers a validation row, for the rule "sampled" (training draws 4 a prompt on a CPU)
KEEP_P = 0.2  # the rule "lead": one-sided sign test; 3 rows better of 3 changed, 4 of 5, 6 of 8


def child(argv: list[str]) -> None:
    """`rloo-kit train ARGV`, recording each validation measurement's rows and adapter, and after the run each
    measured adapter's held-out answers (in OUTPUT_DIR/measured_steps.json)."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from rloo_kit import budget, cli, pipeline

    measured: list[dict] = []
    init = budget.TimeBudget.__init__

    def recording_init(self, minutes, validate, output_dir):
        def recording(model):
            validation = validate(model)  # its marks go to the curve point; the rows are recorded here
            weights = {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(model).items()}
            measured.append({"rows": validation and validation.right, "weights": weights})
            return validation
        init(self, minutes, recording, output_dir)

    evaluate_after = pipeline.Run.evaluate_after

    def evaluating_every_step(self):
        report = evaluate_after(self)
        model, curve = self.trainer.model, self.trainer.time_budget.curve
        kept = {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(model).items()}
        task, temperature = self.task.for_preset(self.plan.preset), self.temperature()
        steps = []
        for point, m in zip(curve, measured, strict=True):
            set_peft_model_state_dict(model, m["weights"])
            answers = task.evaluate(model, self.tokenizer).to_dict()["completions"]
            began = time.time()
            greedy = task.evaluate(model, self.tokenizer, dataset=task.validation)
            greedy_seconds, began = time.time() - began, time.time()
            sampled = task.evaluate(model, self.tokenizer, dataset=task.validation, samples=SAMPLES, greedy=False,
                                    temperature=temperature).completions
            right = [sum(c["correct"] for c in sampled[i:i + SAMPLES]) for i in range(0, len(sampled), SAMPLES)]
            steps.append({**point, "rows": m["rows"], "held_out": [c["correct"] for c in answers],
                          "sampled_rows": right, "greedy_again": [c["correct"] for c in greedy.completions],
                          "seconds": {"greedy": greedy_seconds, "sampled": time.time() - began}})
        set_peft_model_state_dict(model, kept)
        (self.out / STEPS_FILE).write_text(json.dumps(steps))
        return report

    budget.TimeBudget.__init__, pipeline.Run.evaluate_after = recording_init, evaluating_every_step
    sys.exit(cli.main(["train", *argv]))


def run(task: str, seed: int, minutes: float, reuse: bool) -> dict:
    out = RUNS / f"{task}-s{seed}"
    args = [*CASES[task][1], "--minutes", str(minutes), "--seed", str(seed), "--force", "--overwrite",
            "--output-dir", str(out)]
    if not (reuse and (out / STEPS_FILE).is_file()):
        start = time.time()
        done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
        print(f"== {task} seed {seed} (exit {done.returncode}, {(time.time() - start) / 60:.1f} min)\n"
              f"{done.stdout[-2000:]}{done.stderr[-1500:]}", flush=True)
    steps = json.loads((out / STEPS_FILE).read_text())
    m = json.loads((out / "metrics.json").read_text())
    record = {"task": task, "seed": seed, "steps": m.get("steps"), "minutes": m.get("minutes"),
              "kit_kept": (m.get("validation") or {}).get("kept_step"),
              "measured": [{k: s[k] for k in ("step", "minutes", "accuracy")} for s in steps],
              "diagnoses": m.get("diagnoses"),
              "command": " ".join(["rloo-kit train", *args]).replace(str(REPO) + "/", "")}
    for rule in RULES:
        chosen = choose(steps, rule)
        record[rule] = {"step": chosen["step"], "validation": chosen["accuracy"],
                        "held_out": statistics.fmean(chosen["held_out"])}
    record["step0"] = {"held_out": statistics.fmean(steps[0]["held_out"]), "prompts": len(steps[0]["held_out"])}
    if all("seconds" in s for s in steps):  # runs recorded before the rule "sampled" lack them
        record["pass_seconds"] = {kind: statistics.median(s["seconds"][kind] for s in steps)
                                  for kind in ("greedy", "sampled")}
    return record


def choose(steps: list[dict], rule: str) -> dict:
    """The step `rule` keeps among the measured ones (validation rows only; the oracle alone reads held-out)."""
    if rule == "last":
        return steps[-1]
    if rule == "oracle":
        return max(reversed(steps), key=lambda s: sum(s["held_out"]))
    score = finer if rule == "sampled" else (lambda step: [int(r) for r in step["rows"]])
    kept = best = first = steps[0]
    for s in steps[1:]:
        if rule == "kept":
            better = replaces(s, kept)
        elif rule == "latest":
            better = not leads(score(first), score(s)) and not leads(score(best), score(s))
            best = s if sum(score(s)) > sum(score(best)) else best
        else:  # lead, sampled
            better = leads(score(s), score(first)) and sum(score(s)) > sum(score(kept))
        if better:
            kept = s
    return kept


def leads(rows: list[int], other: list[int]) -> bool:
    """Whether a step scoring `rows` is better than one scoring `other` on more of the rows they differ on, by a
    lead chance gives at most KEEP_P of the time (one-sided sign test)."""
    better = sum(a > b for a, b in zip(rows, other, strict=True))
    worse = sum(b > a for a, b in zip(rows, other, strict=True))
    return better > worse and sign_test(better, worse) / 2 <= KEEP_P


def finer(step: dict) -> list[int]:
    """Each validation row's score for the rule "sampled": right greedily (as the run measured it) plus right among
    its SAMPLES sampled answers, 0 to SAMPLES + 1. `replaces` compares rows by these as it does by right or wrong."""
    return [int(greedy) + right for greedy, right in zip(step["rows"], step["sampled_rows"], strict=True)]


def row(runs: list[dict], task: str) -> str:
    mine = [r for r in runs if r["task"] == task]
    prompts = mine[0]["step0"]["prompts"]
    cells = [f"{statistics.fmean(r[rule]['held_out'] for r in mine):.2f}" for rule in RULES]
    paired = []
    for rival in RIVALS:
        d = bootstrap([r[rival]["held_out"] - r["kept"]["held_out"] for r in mine])
        paired.append(f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}], p = {d['p']:.2g}")
    worse = sum(r[rule]["held_out"] < r["step0"]["held_out"] - 1.5 / prompts
                for r in mine for rule in ("kept", *RIVALS))
    return (f"| {task} | {len(mine)} | {statistics.fmean(r['step0']['held_out'] for r in mine):.2f} | "
            + " | ".join(cells + paired) + " | "
            + ", ".join("/".join(str(r[rule]["step"]) for rule in ("kept", *RIVALS, "last")) for r in mine)
            + f" | {worse} | {_pass_seconds(mine)} |")


def _pass_seconds(runs: list[dict]) -> str:
    timed = [r["pass_seconds"] for r in runs if "pass_seconds" in r]
    if not timed:
        return "-"
    return " / ".join(f"{statistics.fmean(t[kind] for t in timed):.1f}" for kind in ("greedy", "sampled"))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", nargs="+", default=["demo"], choices=list(CASES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--note", default="", help="the conditions of the runs, for the results page")
    ap.add_argument("--name", default="keep-rule")
    ap.add_argument("--reuse", action="store_true", help="read the finished runs in runs/bench-keep; train the rest")
    args = ap.parse_args()
    runs = [run(task, seed, args.minutes, args.reuse) for task in args.tasks for seed in args.seeds]
    table = ["| task | seeds | held-out at step 0 | " + " | ".join(RULES) + " | "
             + " | ".join(f"{rival} - kept, paired by seed [bootstrap 95%], sign test" for rival in RIVALS)
             + f" | steps kept ({'/'.join(('kept', *RIVALS, 'last'))}) per seed | kept, {' or '.join(RIVALS)} worse "
             "than step 0 by > 1 prompt | validation pass, s (greedy / sampled) |",
             "|---" * (len(RULES) + len(RIVALS) + 6) + "|"]
    table += [row(runs, task) for task in args.tasks]
    if len(args.tasks) > 1:
        table.append(row([{**r, "task": "all"} for r in runs], "all"))
    result = {**stamp(), "minutes": args.minutes, "runs": runs}
    write(args.name, result, table, load_note(result) + ("\n\n" + args.note if args.note else ""))


if __name__ == "__main__":
    main()
