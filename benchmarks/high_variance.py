"""When does the health monitor name `high_variance`, and did the runs it names fail to learn? Its fix (more
completions a step, a lower learning rate) is only right for a run whose noise stops it learning.

Two kinds of run, each judged by the monitor as it is now (`HealthMonitor.diagnose` over the run's log):
- notebook 02's settings, trained here `--steps` steps a seed: `bad` (2 completions a prompt, one prompt a step,
  learning rate 1e-3: the run the notebook shows being named) and `fixed` (8 a prompt, two prompts, 2e-4);
- runs already made (`--runs DIR...`, e.g. sample_efficiency.py's runs/bench-efficiency/*): the log of their last
  checkpoint, and their held-out accuracy before and after from metrics.json.

For each: the step where high_variance was first named (or -), and the answer's reward over the first and the last
three logged steps (whether the run learned on its training prompts).

    .venv/bin/python benchmarks/high_variance.py [--seeds 0 1 2] [--steps 12] [--runs runs/bench-efficiency/*]
        [--reuse]

Writes benchmarks/results/high-variance.{json,md} (`--name` another); the trained runs' logs live in
runs/bench-high-variance/<setting>-s<seed>/log_history.json (--reuse reads them instead of training).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from common import REPO, load_note, stamp, write

from rloo_kit.diagnostics import HealthMonitor

RUNS = REPO / "runs" / "bench-high-variance"
SETTINGS = {"bad": {"num_generations": 2, "per_device_train_batch_size": 2, "learning_rate": 1e-3},
            "fixed": {"num_generations": 8, "per_device_train_batch_size": 16, "learning_rate": 2e-4}}
ANSWER = "correct_answer"  # the answer's reward of every task the kit makes (its first reward function)
TEMPLATE = "What is {a}{op}{b}? Reply with just the number."  # notebook 02's wording


def notebook_run(setting: str, seed: int, steps: int, reuse: bool) -> dict:
    """One of notebook 02's high-variance experiments, trained as the notebook trains it (`quick_run`)."""
    out = RUNS / f"{setting}-s{seed}"
    log = out / "log_history.json"
    if not (reuse and log.is_file()):
        import rloo_kit
        from rloo_kit.training import quick_run

        task = rloo_kit.load_task("arithmetic", seed=seed, template=TEMPLATE)
        trainer = quick_run("smollm2-135m", task, preset="cpu", steps=steps, output_dir=str(out), seed=seed,
                            **SETTINGS[setting])
        out.mkdir(parents=True, exist_ok=True)
        log.write_text(json.dumps(trainer.state.log_history))
    return judged(f"notebook 02 {setting}", seed, json.loads(log.read_text()), ANSWER)


def made_run(run_dir: Path) -> dict | None:
    """A run made by `rloo-kit train` (one with checkpoints): its last checkpoint's log, judged; None without one."""
    states = sorted(run_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states or not (run_dir / "metrics.json").is_file():
        return None
    m = json.loads((run_dir / "metrics.json").read_text())
    log = json.loads(states[-1].read_text())["log_history"]
    return {**judged(run_dir.name, (m.get("config") or {}).get("seed"), log, ANSWER),
            "held_out": [m.get("accuracy_before"), m.get("accuracy_after")],
            "kept_step": (m.get("validation") or {}).get("kept_step")}


def judged(name: str, seed: int | None, log: list[dict], answer: str) -> dict:
    """What the monitor names over `log`, and the answer's reward at the start and the end (the total reward where
    the answer's is not logged, as the monitor reads it then)."""
    steps = [h for h in log if "reward" in h]
    key = f"rewards/{answer}/mean" if any(f"rewards/{answer}/mean" in h for h in steps) else "reward"
    rewards = [h[key] for h in steps]
    named = {d.kind: d.step for d in HealthMonitor(answer_reward=answer).diagnose(log)}
    return {"run": name, "seed": seed, "steps": len(steps), "high_variance_at": named.get("high_variance"),
            "named": named, "answer_reward": [round(statistics.fmean(rewards[:3]), 3),
                                              round(statistics.fmean(rewards[-3:]), 3)]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=12, help="notebook 02's STEPS")
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--runs", nargs="*", default=[], type=Path, help="run directories made by rloo-kit train")
    ap.add_argument("--reuse", action="store_true", help="read the notebook runs' logs in runs/bench-high-variance")
    ap.add_argument("--note", default="", help="the conditions of the runs, for the results page")
    ap.add_argument("--name", default="high-variance")
    args = ap.parse_args()
    runs = [notebook_run(s, seed, args.steps, args.reuse) for s in args.settings for seed in args.seeds]
    runs += [r for r in map(made_run, args.runs) if r]
    table = ["| run | seed | steps | high_variance named at step | answer's reward, first 3 -> last 3 steps | "
             "held out before -> after | also named |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        held = r.get("held_out")
        table.append(f"| {r['run']} | {'-' if r['seed'] is None else r['seed']} | {r['steps']} | "
                     f"{r['high_variance_at'] or '-'} | {r['answer_reward'][0]:.2f} -> {r['answer_reward'][1]:.2f} | "
                     f"{f'{held[0]:.2f} -> {held[1]:.2f}' if held else '-'} | "
                     f"{', '.join(k for k in r['named'] if k != 'high_variance') or '-'} |")
    result = {**stamp(), "runs": runs}
    write(args.name, result, table, load_note(result) + ("\n\n" + args.note if args.note else ""))


if __name__ == "__main__":
    main()
