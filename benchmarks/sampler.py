"""What the pre-flight and evaluation pay to sample on a CPU: `generate_ids` with its lean sampling
(`evaluation.lean_generation`: inference mode, each prompt read once for its K completions, the
cumulative-distribution draw), with and without ended rows leaving the batch (`evaluation.COMPACT_SHARE`),
against transformers' generation as it comes, alternating in one process.

    .venv/bin/python benchmarks/sampler.py [--tasks number_words sentiment] [--tokens 64] [--rounds 2]

Each round samples the pre-flight's draw (32 prompts x 4 completions, temperature 1) of each task file
to `--tokens` new tokens, once each way, the order rotating from round to round. The pre-flight's time is
mostly this draw (issue "The verdict is about the run that will happen": goal <= 60 s on 2 cores, nothing
else running).
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
    lean, share = evaluation.lean_generation, evaluation.COMPACT_SHARE
    never = 2.0  # a share of ended rows never reached: the batch decodes every row to the last token
    variants = {"lean, ended rows dropped": (lean, share), "lean": (lean, never), "as it comes": (as_it_comes, never)}
    seconds = {t: {v: [] for v in variants} for t in args.tasks}
    prompts_of = {task: task_prompts(task, args.prompts) for task in args.tasks}
    for r in range(args.rounds):
        for task, prompts in prompts_of.items():
            names = list(variants)
            for name in names[r % len(names):] + names[:r % len(names)]:
                evaluation.lean_generation, evaluation.COMPACT_SHARE = variants[name]
                start = time.time()
                evaluation.generate_ids(model, tok, prompts, samples=args.samples, do_sample=True,
                                        max_new_tokens=args.tokens, batch_size=len(prompts))
                seconds[task][name].append(round(time.time() - start, 2))
                print(f"round {r} {task} {name}: {seconds[task][name][-1]} s", flush=True)
    evaluation.lean_generation, evaluation.COMPACT_SHARE = lean, share
    result["seconds"] = seconds
    table = ["| task | " + " | ".join(f"{v} (s)" for v in variants) + " | dropped / lean | dropped / as it comes |",
             "|---|" + "---|" * (len(variants) + 2)]
    for task, s in seconds.items():
        m = {v: statistics.median(s[v]) for v in variants}
        dropped = m["lean, ended rows dropped"]
        table.append(f"| {task} | " + " | ".join(f"{m[v]:.1f}" for v in variants)
                     + f" | {dropped / m['lean']:.2f} | {dropped / m['as it comes']:.2f} |")
    notes = (f"{args.prompts} prompts x {args.samples} completions to {args.tokens} tokens, temperature 1, one batch; "
             f"medians of {args.rounds} rounds, the order of the ways rotating. " + load_note(result))
    write("sampler", result, table, notes)


if __name__ == "__main__":
    main()
