"""Does the prompt pool make every step teach? Each task is trained as a user trains it (`rloo-kit train`, the
task's own flags), for the same wall time in every arm (`--minutes M`), each arm in its own process, arms of
one seed run back to back so that they share the machine's state:

- plain:  the CLI's defaults (TRL draws prompts uniformly);
- pool:   `--prompt-pool` (flat prompts rested, seeded by the pre-flight);
- filter: `--spread-filter` (a step's flat groups left out of its forward and backward passes);
- pool_filter: both;
- double: twice the prompts per step (`--batch-size` 2x the preset's), the honest control: more rollouts a
          step also means more groups with spread;
- no_kl:  `--beta 0`: no KL penalty, so no reference pass a step (DAPO and Dr. GRPO drop it);
- mixed:  `--mix-choice-order`: each choice question's group sampled half as written, half with its choices one
          place on (a habit of one place is right in one half, wrong in the other: a group that teaches);
- short:  `--system-prompt "Answer in one short sentence."`: the short answer the pre-flight adopts where replies
          ramble, asked whatever the pre-flight would decide (does its rule leave it where it would have helped?).

Reported per task and arm: held-out accuracy before and after (the kept, best-validation adapter), the
paired difference arm - plain over seeds with a bootstrap 95% interval and the sign test over seeds, steps
taken, a training step's seconds (TRL's step_time) and groups with spread that reached the loss per minute (from
the run's logs: (1 - the share of groups flat in the task reward) x prompts a step; every run saves a checkpoint
every 5 steps for them, the same cost in every arm). Adopt an arm as the default only if it wins with an interval that
excludes 0 and costs no task more than one held-out prompt on average.

    .venv/bin/python benchmarks/sample_efficiency.py [--tasks demo word_sums] [--seeds 0 1 2 3 4] [--minutes 3]
        [--arms plain pool filter pool_filter double (no_kl mixed short)] [--max-steps N] [--reuse]

Writes benchmarks/results/sample-efficiency.{json,md} (`--name` another); runs live in runs/bench-efficiency/.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from common import REPO, bootstrap, cli_train, load_note, stamp, write
from sampling_fit import CASES, held_out_right

from rloo_kit.diagnostics import SHORT_ANSWER_PROMPT, SPREAD_KEY
from rloo_kit.presets import PRESETS

RUNS = REPO / "runs" / "bench-efficiency"
ARMS = {"plain": [], "pool": ["--prompt-pool"], "filter": ["--spread-filter"],
        "pool_filter": ["--prompt-pool", "--spread-filter"], "double": ["--batch-size", "{double}"],
        "no_kl": ["--beta", "0"], "mixed": ["--mix-choice-order"], "short": ["--system-prompt", SHORT_ANSWER_PROMPT],
        # a trial: a wrong pick of a choice or label costs half a right one's pay (tasks/wrong_pick.py)
        "wrong_cost": ["--reward", str(REPO / "benchmarks" / "tasks" / "wrong_pick.py") + ":wrong_pick:0.5"],
        # a trial: a reply cut at the completion length earns the answer reward only where it marked its answer
        "cut_unpaid": ["--reward", str(REPO / "benchmarks" / "tasks" / "cut_unpaid.py") + ":cut_unpaid:1"]}
SAVE_STEPS = 5  # checkpoints, whose logs give the groups with spread a minute
COMPLETIONS_PER_STEP = PRESETS["cpu"].per_device_train_batch_size  # what "double" doubles


def run(task: str, arm: str, seed: int, minutes: float, reuse: bool, max_steps: int | None = None) -> dict:
    out = RUNS / f"{task}-{arm}-s{seed}"
    flags = [f.format(double=2 * COMPLETIONS_PER_STEP) for f in ARMS[arm]]
    budget = ["--max-steps", str(max_steps)] if max_steps else ["--minutes", str(minutes)]
    m, command = cli_train(out, [*CASES[task][1], *budget, "--seed", str(seed), "--force",
                                 "--overwrite", "--save-steps", str(SAVE_STEPS), *flags],
                           f"{task} {arm} seed {seed}", reuse)
    config = m.get("config") or {}
    return {"task": task, "arm": arm, "seed": seed, "before": m.get("accuracy_before"),
            "after": m.get("accuracy_after"), "steps": m.get("steps"), "minutes": m.get("minutes"),
            "kept_step": (m.get("validation") or {}).get("kept_step"),
            **_from_logs(out, config, m.get("minutes"), m.get("steps")),
            "right_after": held_out_right(out / "evaluation_after.json"),
            "habit": habit(m), "command": command}


def habit(metrics: dict) -> str | None:
    """What the run's check after training names of held-out replies that ignore the row (metrics.json's `one_place`,
    `one_answer`), None where neither: such a run's gain is the habit's, not the task's (a larger run's +0.38 picked
    the first number on 21 of 24 pairs)."""
    if place := metrics.get("one_place"):
        return f"place {place['place']}"
    if one := metrics.get("one_answer"):
        return f"answers '{one['answer']}'"
    return None


def _from_logs(out: Path, config: dict, minutes: float | None, steps: int | None) -> dict:
    """From the last checkpoint's log: groups with spread in their task reward that reached the loss, per minute of
    training (over the share of the run's minutes that checkpoint covers), and a training step's mean seconds
    (TRL's step_time, validation not included). None each for a run with no checkpoint."""
    states = sorted(out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states or not minutes or not steps or not config.get("num_generations"):
        return {"spread_groups_per_minute": None, "step_seconds": None}
    prompts = config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] // config["num_generations"]
    state = json.loads(states[-1].read_text())
    logs = [h for h in state["log_history"] if "frac_reward_zero_std" in h]
    # the share flat before the KL penalty where the run logged it: after it, a moved policy makes every group differ
    flat = [h.get(SPREAD_KEY, h["frac_reward_zero_std"]) for h in logs]
    covered = minutes * state["global_step"] / steps
    times = [h["step_time"] for h in logs if "step_time" in h]
    return {"spread_groups_per_minute": round(sum((1 - f) * prompts for f in flat) / covered, 2),
            "step_seconds": round(statistics.fmean(times), 2) if times else None}


def paired(runs: list[dict], task: str, arm: str) -> dict:
    """arm - plain, held-out accuracy after, paired by seed: mean, bootstrap 95% interval, sign test."""
    by_seed = {r["seed"]: r for r in runs if r["task"] == task and r["arm"] == "plain" and r["after"] is not None}
    diffs = [r["after"] - by_seed[r["seed"]]["after"] for r in runs
             if r["task"] == task and r["arm"] == arm and r["after"] is not None and r["seed"] in by_seed]
    return bootstrap(diffs) if diffs else {"n": 0}


def row(runs: list[dict], task: str, arm: str) -> str:
    mine = [r for r in runs if r["task"] == task and r["arm"] == arm and r["after"] is not None]
    if not mine:
        return f"| {task} | {arm} | not measured | | | | | | | |"
    gains = [r["after"] - r["before"] for r in mine]
    per_min = [r["spread_groups_per_minute"] for r in mine if r["spread_groups_per_minute"] is not None]
    d = paired(runs, task, arm) if arm != "plain" else {"n": 0}
    vs = ("-" if arm == "plain" else "not paired" if not d["n"] else
          f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}], p = {d['p']:.2g}")
    spread = f"{statistics.fmean(per_min):.1f}" if per_min else "-"
    times = [r["step_seconds"] for r in mine if r.get("step_seconds") is not None]
    step = f"{statistics.fmean(times):.1f}" if times else "-"
    task_gains = [g for r, g in zip(mine, gains, strict=True) if not r.get("habit")]
    habits = (f"{len(mine) - len(task_gains)} ("
              + (f"{statistics.fmean(task_gains):+.3f}" if task_gains else "none left") + ")"
              if len(task_gains) < len(mine) else "0")
    return (f"| {task} | {arm} | {len(mine)} | {statistics.fmean(r['before'] for r in mine):.2f} -> "
            f"{statistics.fmean(r['after'] for r in mine):.2f} | {statistics.fmean(gains):+.3f} | {vs} | "
            f"{habits} | {statistics.fmean(r['steps'] for r in mine):.0f} | {step} | {spread} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", nargs="+", default=["demo", "word_sums", "animal_or_colour", "reverse_letters"],
                    choices=list(CASES))
    trials = ("no_kl", "mixed", "short", "wrong_cost", "cut_unpaid")
    ap.add_argument("--arms", nargs="+", default=[a for a in ARMS if a not in trials],
                    choices=list(ARMS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--max-steps", type=int, default=None,
                    help="train this many steps instead of for --minutes (the 30-step goals; a count of steps does not "
                    "move with the machine's load)")
    ap.add_argument("--note", default="", help="the conditions of the runs, for the results page")
    ap.add_argument("--name", default="sample-efficiency", help="results/<name>.{json,md}: one name per budget")
    ap.add_argument("--reuse", action="store_true",
                    help="read the finished runs already in runs/bench-efficiency that the same code and settings "
                    "made (common.run_stamp); train the others")
    args = ap.parse_args()
    runs = [run(task, arm, seed, args.minutes, args.reuse, args.max_steps)
            for task in args.tasks for seed in args.seeds for arm in args.arms]
    table = ["| task | arm | seeds | held-out before -> after (mean) | gain | after: arm - plain, paired by seed "
             "[bootstrap 95%], sign test | runs with a habit (gain without them) | steps | step s | "
             "groups with spread / min |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    table += [row(runs, task, arm) for task in args.tasks for arm in args.arms]
    result = {**stamp(), "minutes": None if args.max_steps else args.minutes, "max_steps": args.max_steps, "runs": runs}
    write(args.name, result, table, load_note(result) + ("\n\n" + args.note if args.note else ""))


if __name__ == "__main__":
    main()
