"""Does RLOO learn on this machine? Held-out greedy accuracy of the default model on the arithmetic
task, before training and at several step counts, with the reward/KL curves.

    .venv/bin/python benchmarks/learning.py [--steps 10 20 40] [--model smollm2-135m]

Writes benchmarks/results/learning.{json,md,png}, stamped with the command, the device and the
library versions. Not run in CI (minutes of CPU).
"""

from __future__ import annotations

import argparse
import time

from common import RESULTS, stamp, write
from transformers import TrainerCallback

import rloo_kit
from rloo_kit.notebook import plots


class EvalAt(TrainerCallback):
    """Greedy held-out accuracy at chosen steps, timed apart from training."""

    def __init__(self, model, tok, task, steps):
        self.model, self.tok, self.task, self.steps, self.rows = model, tok, task, set(steps), []
        self.eval_seconds = 0.0

    def measure(self, step: int, train_seconds: float) -> None:
        t = time.time()
        report = self.task.evaluate(self.model, self.tok)
        self.eval_seconds += time.time() - t
        self.rows.append({"step": step, "accuracy": report.accuracy, "mean_length": report.mean_length,
                          "train_minutes": round(train_seconds / 60, 2)})
        print(self.rows[-1], flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            self.measure(state.global_step, time.time() - self.start - self.eval_seconds)

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, nargs="+", default=[10, 20, 40])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    task = rloo_kit.load_task("arithmetic", seed=args.seed)
    model, tok = rloo_kit.load_model(args.model, preset="cpu")
    model = rloo_kit.attach_lora(model, preset="cpu", seed=args.seed)
    probe = EvalAt(model, tok, task, args.steps)
    probe.measure(0, 0.0)
    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir="runs/bench-learning",
                                     max_steps=max(args.steps), save_strategy="no", disable_tqdm=True,
                                     seed=args.seed, callbacks=[probe])
    rloo_kit.train(trainer)
    result = {**stamp(), "model": args.model, "preset": "cpu", "accuracy": probe.rows,
              "diagnoses": [d.kind for d in trainer.health_monitor.diagnoses],
              "log_history": trainer.state.log_history}
    table = ["| step | held-out accuracy | mean reply length (tokens) | training minutes |", "|---|---|---|---|"]
    table += [f"| {r['step']} | {r['accuracy']:.2f} | {r['mean_length']:.1f} | {r['train_minutes']} |"
              for r in probe.rows]
    gain = probe.rows[-1]["accuracy"] - probe.rows[0]["accuracy"]
    write("learning", result, table, notes=(
        f"Held-out: {len(task.test)} arithmetic prompts, greedy. Gain {gain:+.2f} in "
        f"{probe.rows[-1]['train_minutes']} training minutes (goal: +0.30 in at most 10). Curves: learning.png."))
    plots.plot_training(trainer.state.log_history, trainer.health_monitor.diagnoses).savefig(RESULTS / "learning.png")

if __name__ == "__main__":
    main()
