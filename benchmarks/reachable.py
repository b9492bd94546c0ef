"""How far RLOO can lift a task: RLOO only reinforces answers the model already samples, so a held-out prompt none of
whose K samples is right is out of a short run's reach. For each task file, on the held-out split its training runs
are measured on (the fifth `load_task` draws with the seed): greedy accuracy, and pass@K of K samples a prompt at
temperature 1 (TRL's) and at 0.5. Where pass@K sits below greedy + 0.25, the goal of +0.25 in 30 steps asks for
answers the model does not give.

    .venv/bin/python benchmarks/reachable.py [--tasks opposites larger] [--seeds 0 1 2] [--samples 16]

Writes benchmarks/results/reachable.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics

from common import stamp, write
from sampling_fit import CASES, task_args


def measure(model, tok, name: str, seed: int, samples: int) -> dict:
    from rloo_kit.evaluation import evaluate
    from rloo_kit.tasks import load_task

    task = load_task(**task_args(name), seed=seed)
    tokens = task.max_completion_length or 64
    common = dict(max_new_tokens=max(tokens, 64), match=task.match)
    greedy = evaluate(model, tok, task.test, **common)
    out = {"task": name, "seed": seed, "prompts": len(task.test), "greedy": greedy.accuracy}
    for temperature in (1.0, 0.5):
        sampled = evaluate(model, tok, task.test, samples=samples, greedy=False, temperature=temperature, **common)
        out[f"pass@{samples} t{temperature:g}"] = sampled.pass_at_k[samples]
        out[f"sampled t{temperature:g}"] = sampled.accuracy
    return out


def main() -> None:
    from rloo_kit import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["opposites", "larger", "animal_or_colour", "number_words"],
                    choices=[name for name, (kind, _) in CASES.items() if name != "demo"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--samples", type=int, default=16, choices=[2, 4, 8, 16, 32], help="K: pass@K is reported "
                    "for powers of two")
    ap.add_argument("--note", default="", help="what the table means, written under it")
    args = ap.parse_args()
    model, tok = load_model("smollm2-135m", preset="cpu")
    rows = [measure(model, tok, name, seed, args.samples) for name in args.tasks for seed in args.seeds]
    k = args.samples
    table = [f"| task | seeds | held-out prompts | greedy | sampled at 1 | pass@{k} at 1 | sampled at 0.5 "
             f"| pass@{k} at 0.5 | reachable gain (best pass@K - greedy) |", "|---|---|---|---|---|---|---|---|---|"]
    for name in args.tasks:
        mine = [r for r in rows if r["task"] == name]

        def mean(key: str, runs: list = mine) -> float:
            return statistics.fmean(r[key] for r in runs)

        best = max(mean(f"pass@{k} t1"), mean(f"pass@{k} t0.5"))
        cells = [mean(key) for key in ("greedy", "sampled t1", f"pass@{k} t1", "sampled t0.5", f"pass@{k} t0.5")]
        table.append(f"| {name} | {len(mine)} | {mean('prompts'):.0f} | "
                     + " | ".join(f"{c:.2f}" for c in cells) + f" | {best - mean('greedy'):+.2f} |")
    write("reachable", {**stamp(), "runs": rows}, table, args.note)


if __name__ == "__main__":
    main()
