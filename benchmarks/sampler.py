"""What the pre-flight and evaluation pay to sample on a CPU: `generate_ids` with its lean sampling
(`evaluation.lean_generation`: inference mode, each prompt read once for its K completions, the
cumulative-distribution draw) against transformers' generation as it comes, alternating in one process.

    .venv/bin/python benchmarks/sampler.py [--tasks number_words sentiment] [--tokens 64] [--rounds 2]

Each round samples the pre-flight's draw (32 prompts x 4 completions, temperature 1) of each task file
to `--tokens` new tokens, once each way, in alternating order. The pre-flight's time is mostly this draw
(issue "The verdict is about the run that will happen": goal <= 60 s on 2 cores, nothing else running).
Writes benchmarks/results/sampler.{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

from common import load_note, stamp, write
from preflight_verdicts import CASES, TASKS

import rloo_kit
from rloo_kit import evaluation


@contextlib.contextmanager
def as_it_comes(model):
    yield


def task_prompts(name: str, n: int) -> list:
    _, file, extra = CASES[name]
    columns = dict(zip(extra[::2], extra[1::2], strict=True))
    task = rloo_kit.load_task("file", path=str(TASKS / file), prompt_column=columns.get("--prompt-column", "prompt"),
                              answer_column=columns.get("--answer-column", "answer"))
    return list(task.train["prompt"][:n])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", nargs="+", default=["number_words", "sentiment"])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    result = {**stamp(), "settings": vars(args)}
    model, tok = rloo_kit.load_model(args.model, preset="cpu")
    model = rloo_kit.attach_lora(model, preset="cpu")  # as the pre-flight sees it: an untrained adapter on
    lean = evaluation.lean_generation
    seconds: dict[str, dict[str, list[float]]] = {t: {"lean": [], "as it comes": []} for t in args.tasks}
    prompts_of = {task: task_prompts(task, args.prompts) for task in args.tasks}
    for r in range(args.rounds):
        for task, prompts in prompts_of.items():
            order = [("lean", lean), ("as it comes", as_it_comes)]
            for name, sampler in order if r % 2 == 0 else order[::-1]:
                evaluation.lean_generation = sampler
                start = time.time()
                evaluation.generate_ids(model, tok, prompts, samples=args.samples, do_sample=True,
                                        max_new_tokens=args.tokens, batch_size=len(prompts))
                seconds[task][name].append(round(time.time() - start, 2))
                print(f"round {r} {task} {name}: {seconds[task][name][-1]} s", flush=True)
    evaluation.lean_generation = lean
    result["seconds"] = seconds
    table = ["| task | lean sampling (s) | transformers as it comes (s) | ratio |", "|---|---|---|---|"]
    for task, s in seconds.items():
        a, b = statistics.median(s["lean"]), statistics.median(s["as it comes"])
        table.append(f"| {task} | {a:.1f} | {b:.1f} | {a / b:.2f} |")
    notes = (f"{args.prompts} prompts x {args.samples} completions to {args.tokens} tokens, temperature 1, one batch; "
             f"medians of {args.rounds} rounds, the two ways alternating. " + load_note(result))
    write("sampler", result, table, notes)


if __name__ == "__main__":
    main()
