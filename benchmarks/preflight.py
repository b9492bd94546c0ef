"""Does the pre-flight predict what training logs? And does spending steps only where it saw spread pay?

    .venv/bin/python benchmarks/preflight.py [--model smollm2-135m] [--seeds 0 1] [--filter-minutes 3]

For three settings (the arithmetic task's own rewards, an all-or-nothing reward, a completion length that
cuts) the pre-flight's zero_spread_fraction and truncation_rate on 32 prompts, against the mean
frac_reward_zero_std and completions/clipped_ratio that the first 3 training steps log, from the same
untrained model. Then, on a mixed task (+, -, *: many prompts hopeless or already solved for this model),
held-out reward after equal wall-clock of training on all prompts and on the pre-flight's `filter`.
Writes benchmarks/results/preflight.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import stamp, write
from transformers import TrainerCallback

import rloo_kit
from rloo_kit.rewards import exact_answer

FIRST_STEPS = 3


def settings(task) -> dict:
    return {"task rewards (correct + brevity), 16 tokens": (task, {}),
            "all-or-nothing (exact_answer), 16 tokens": (task.replace(reward_funcs=(exact_answer,),
                                                                      reward_weights=None), {}),
            "task rewards, 4 tokens (cuts)": (task.replace(max_completion_length=4), {})}


def first_steps(model_name: str, task, seed: int) -> tuple[float, float, float]:
    """Mean frac_reward_zero_std and clipped ratio over the first steps of a fresh run, and step 1's
    frac_reward_zero_std alone: TRL computes it after subtracting beta x KL from the rewards, so once the
    first update moves the policy every group gains a little spread from the KL term."""
    model, tok = rloo_kit.load_model(model_name, preset="cpu")
    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir="runs/bench-preflight",
                                     max_steps=FIRST_STEPS, save_strategy="no", disable_tqdm=True, seed=seed,
                                     monitor=False, live=False)
    rloo_kit.train(trainer)
    logs = [h for h in trainer.state.log_history if "frac_reward_zero_std" in h]
    return (statistics.fmean(h["frac_reward_zero_std"] for h in logs),
            statistics.fmean(h["completions/clipped_ratio"] for h in logs), logs[0]["frac_reward_zero_std"])


class StopAfter(TrainerCallback):
    """End training once `seconds` of wall-clock have passed (checked after each step)."""

    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.time()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = time.time() - self.start >= self.seconds


def filtered_vs_all(model_name: str, minutes: float, seed: int) -> dict:
    """Held-out mean reward after `minutes` of training on every prompt vs on those the pre-flight kept."""
    task = rloo_kit.load_task("arithmetic", seed=seed).replace(name="mixed")
    mixed = rloo_kit.arithmetic_task(ops=("+", "-", "*"), n_train=120, n_test=50, seed=seed)
    task = task.replace(train=mixed["train"], test=mixed["test"])
    out = {}
    for name in ("all prompts", "filtered"):
        model, tok = rloo_kit.load_model(model_name, preset="cpu")
        model = rloo_kit.attach_lora(model, preset="cpu", seed=seed)
        started = time.time()
        train_task, kept = task, len(task.train)
        if name == "filtered":
            report = rloo_kit.preflight(model, tok, task, preset="cpu", n_prompts=len(task.train), seed=seed)
            train_task = task.replace(train=report.filter(task.train))
            kept = len(train_task.train)
        spent = time.time() - started  # the pre-flight counts against the filtered run's budget
        trainer = rloo_kit.build_trainer(model, tok, train_task, preset="cpu", output_dir="runs/bench-filter",
                                         max_steps=10_000, save_strategy="no", disable_tqdm=True, seed=seed,
                                         callbacks=[StopAfter(max(0.0, minutes * 60 - spent))], live=False)
        rloo_kit.train(trainer)
        after = task.evaluate(trainer.model, tok)
        out[name] = {"train_prompts": kept, "steps": trainer.state.global_step, "preflight_seconds": round(spent, 1),
                     "held_out_accuracy": after.accuracy,
                     "held_out_reward": after.mean_reward.get("correct_answer", float("nan")) +
                     0.2 * after.mean_reward.get("brevity", float("nan"))}
        print(name, out[name], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--filter-minutes", type=float, default=3.0, help="0 skips the filter experiment")
    args = ap.parse_args()
    task = rloo_kit.load_task("arithmetic")
    rows = []
    for name, (t, _) in settings(task).items():
        for seed in args.seeds:
            model, tok = rloo_kit.load_model(args.model, preset="cpu")
            report = rloo_kit.preflight(model, tok, t, preset="cpu", n_prompts=32, seed=seed)
            logged_zero, logged_cut, step1_zero = first_steps(args.model, t, seed)
            rows.append({"setting": name, "seed": seed, "preflight_seconds": round(report.seconds, 1),
                         "preflight_zero_spread": report.zero_spread_fraction,
                         "logged_zero_std": logged_zero, "step1_zero_std": step1_zero,
                         "preflight_truncation": report.truncation_rate,
                         "logged_clipped": logged_cut, "problems": report.kinds()})
            print(rows[-1], flush=True)
    filt = filtered_vs_all(args.model, args.filter_minutes, args.seeds[0]) if args.filter_minutes else {}
    table = ["| setting | seed | pre-flight zero spread | first 3 steps' frac_reward_zero_std (step 1) | "
             "pre-flight cut | first 3 steps' clipped ratio | pre-flight says | pre-flight seconds |", "|---" * 8 + "|"]
    table += [f"| {r['setting']} | {r['seed']} | {r['preflight_zero_spread']:.2f} | {r['logged_zero_std']:.2f} "
              f"({r['step1_zero_std']:.2f}) | "
              f"{r['preflight_truncation']:.2f} | {r['logged_clipped']:.2f} | {', '.join(r['problems']) or 'ok'} | "
              f"{r['preflight_seconds']} |" for r in rows]
    worst = max(max(abs(r["preflight_zero_spread"] - r["logged_zero_std"]),
                    abs(r["preflight_truncation"] - r["logged_clipped"])) for r in rows)
    notes = f"Largest gap between prediction and the first steps: {worst:.2f} (goal: within 0.15)."
    if filt:
        table += ["", "| mixed task (+, -, *), equal wall-clock | train prompts | steps | held-out accuracy | "
                  "held-out reward |", "|---|---|---|---|---|"]
        table += [f"| {k} | {v['train_prompts']} | {v['steps']} | {v['held_out_accuracy']:.2f} | "
                  f"{v['held_out_reward']:.3f} |" for k, v in filt.items()]
    write("preflight", {**stamp(), "model": args.model, "rows": rows, "filter": filt, "largest_gap": worst},
          table, notes)


if __name__ == "__main__":
    main()
