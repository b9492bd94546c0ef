"""Rewards from a model, on a CPU: how long a reward model takes to train and how well it ranks held-out pairs;
whether RLOO against it raises a held-back gold score at a small and a larger beta; what a reward-model reward
costs per step against a string-match one.

The data is notebook 04's: preference pairs from SmolLM2-135M-Instruct's own samples on the arithmetic task,
labelled by the gold rule (rewards.correct_answer) that the reward model never sees.

    .venv/bin/python benchmarks/reward_model.py            # ~30-60 min on 2 cores
    .venv/bin/python benchmarks/reward_model.py --quick    # a few minutes: checks that it runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import load_note, stamp, write

import rloo_kit
from rloo_kit.reward_models import gold_summary, run_with_gold, sample_preferences
from rloo_kit.rewards import brevity, correct_answer

GOALS = {"rm_minutes": 3.0, "pair_accuracy": 0.85, "rloo_minutes": 10.0}


def reward_call_ms(fn, task, n: int = 16, repeats: int = 3) -> float:
    """Milliseconds one reward call takes on a batch of n completions (the held-out answers stand in)."""
    rows = [task.test[i % len(task.test)] for i in range(n)]
    prompts, completions = [r["prompt"] for r in rows], [f"So the answer is {r['answer']}." for r in rows]
    answers = [r["answer"] for r in rows]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(prompts=prompts, completions=completions, answer=answers)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def step_seconds(history: list[dict]) -> float:
    return statistics.median([h["step_time"] for h in history if "step_time" in h] or [float("nan")])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=240, help="training prompts sampled for pairs (notebook 04)")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.1])
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--n-gold", type=int, default=32)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--cost-steps", type=int, default=4, help="steps of the string-match run for the cost figure")
    ap.add_argument("--output-dir", default="runs/bench-reward-model")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="reuse what a previous run left in --output-dir: the reward "
                    "model (its metrics.json keeps its training time and accuracy), the betas already run (runs.json) "
                    "and the cost figures (cost.json), so that a run cut short goes on where it stopped")
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.steps, args.n_gold, args.every, args.cost_steps = 32, 2, 8, 1, 2
    result = {**stamp(), "goals": GOALS, "settings": vars(args)}
    out = Path(args.output_dir)
    task = rloo_kit.load_task("arithmetic", n_test=args.n_gold, seed=0)

    if args.reuse and (out / "reward_model" / "metrics.json").is_file():
        rm = json.loads((out / "reward_model" / "metrics.json").read_text())
        kept = out / "preferences.json"  # absent when the earlier run predates it: then the pairs are counted only
        result.update(json.loads(kept.read_text()) if kept.is_file() else {"preferences": {
            "pairs": rm["train_pairs"] + rm["eval_pairs"], "prompts": args.prompts, "seconds": None}})
        result["reward_model"] = rm
    else:
        result.update(preferences_and_reward_model(args, task, out))
    print(result["reward_model"], flush=True)
    reward = rloo_kit.load_reward_model(out / "reward_model")
    proxy_task = task.replace(reward_funcs=(reward,), reward_weights=None)

    done = out / "runs.json"
    runs = json.loads(done.read_text()) if args.reuse and done.is_file() else {}
    for beta in args.betas:
        if f"{beta:g}" in runs:
            continue
        start = time.time()
        trainer, _ = run_with_gold(args.model, proxy_task, correct_answer, preset="cpu", steps=args.steps,
                                   every=args.every, output_dir=str(out / f"beta={beta:g}"), beta=beta,
                                   learning_rate=args.lr, seed=0)
        history = trainer.state.log_history
        runs[f"{beta:g}"] = {"steps": args.steps, **gold_summary(history),
                             "minutes": round((time.time() - start) / 60, 2),
                             "step_seconds": round(step_seconds(history), 2),
                             "diagnoses": [d.kind for d in trainer.health_monitor.diagnoses]}
        print(f"beta {beta:g}: {json.dumps(runs[f'{beta:g}'])}", flush=True)
        done.write_text(json.dumps(runs, indent=2))  # kept for --reuse
    result["runs"] = {f"{b:g}": runs[f"{b:g}"] for b in args.betas}
    cost = out / "cost.json"
    if args.reuse and cost.is_file():
        result["cost"] = json.loads(cost.read_text())
    else:
        result["cost"] = measure_cost(args, task, reward, out, runs[f"{args.betas[-1]:g}"]["step_seconds"])
        cost.write_text(json.dumps(result["cost"], indent=2))
    report(result)


def measure_cost(args, task, reward, out: Path, rm_step_seconds: float) -> dict:
    """A reward call on 16 completions, and an RLOO step, with the reward model against string match."""
    string_task = task.replace(reward_funcs=(correct_answer, brevity()), reward_weights=(1.0, 0.2))
    trainer, _ = run_with_gold(args.model, string_task, correct_answer, preset="cpu", steps=args.cost_steps,
                               every=args.cost_steps, output_dir=str(out / "string-match"), beta=args.betas[-1],
                               learning_rate=args.lr, seed=0)
    return {"rm_call_ms_16": round(reward_call_ms(reward, task), 1),
            "string_call_ms_16": round(reward_call_ms(correct_answer, task), 3),
            "rm_step_seconds": rm_step_seconds,
            "string_step_seconds": round(step_seconds(trainer.state.log_history), 2)}


def preferences_and_reward_model(args, task, out: Path) -> dict:
    """Pairs from the model's own samples labelled by the gold rule, and a reward model trained on them."""
    model, tok = rloo_kit.load_model(args.model, preset="cpu")
    start = time.time()
    pairs = sample_preferences(model, tok, task.train.select(range(args.prompts)), correct_answer,
                               samples=args.samples, seed=0)
    found = {"preferences": {"pairs": len(pairs), "prompts": args.prompts, "seconds": round(time.time() - start, 1)}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "preferences.json").write_text(json.dumps(found))
    del model
    rm = rloo_kit.train_reward_model(pairs, out / "reward_model", model=args.model, preset="cpu", overwrite=True,
                                     **({"num_train_epochs": 1} if args.quick else {}))
    return {**found, "reward_model": rm.to_dict()}


def report(result: dict) -> None:
    rm, cost = result["reward_model"], result["cost"]
    table = ["| figure | value | goal |", "|---|---|---|",
             f"| preference pairs (from {result['preferences']['prompts']} prompts' own samples) | "
             f"{result['preferences']['pairs']} ({result['preferences']['seconds'] or 'n/a'} s to sample) | |",
             f"| reward model training time | {rm['seconds'] / 60:.2f} min | ≤ {GOALS['rm_minutes']:g} min |",
             f"| held-out pair accuracy ({rm['eval_pairs']} pairs) | {rm['pair_accuracy']:.3f} | "
             f"≥ {GOALS['pair_accuracy']:g} |"]
    for beta, r in result["runs"].items():
        table.append(f"| beta {beta}, {r['steps']} steps: gold (held-out accuracy) before → best (step) → after | "
                     f"{r['gold_before']:.3f} → "
                     f"{r['gold_best']:.3f} ({r['best_step']}) → {r['gold_after']:.3f}; proxy "
                     f"{r['proxy_before']:.2f} → {r['proxy_after']:.2f}; {r['minutes']:.1f} min; diagnoses "
                     f"{', '.join(r['diagnoses']) or 'none'} | gold up in ≤ {GOALS['rloo_minutes']:g} min at the "
                     "larger beta |")
    table += [f"| reward call, 16 completions: reward model vs string match | {cost['rm_call_ms_16']:.0f} ms vs "
              f"{cost['string_call_ms_16']:.2f} ms | |",
              f"| RLOO step (median): reward model vs string match | {cost['rm_step_seconds']:.1f} s vs "
              f"{cost['string_step_seconds']:.1f} s | |"]
    threads = (f" Torch used {result['torch_threads']} thread(s); on cores other jobs share, one thread each avoids "
               "the oversubscription that made sampling ~10x slower here (OMP_NUM_THREADS=1)."
               if result.get("torch_threads") == 1 else "")
    write("reward-model", result, table, load_note(result) + threads)


if __name__ == "__main__":
    main()
