"""What NF4 4-bit costs a small model: greedy accuracy on the same prompts with unquantized weights (bf16 where the
CPU has it, else fp32) and with bitsandbytes' NF4, the GPU presets' 4-bit, paired prompt by prompt. It decides
`presets.load_in_4bit_for`: a GPU preset's 4-bit is for its 0.5B-32B models.

    .venv/bin/python benchmarks/small_model_4bit.py [--model smollm2-135m] [--name small-model-4bit] [--note TEXT]

Runs on a CPU (bitsandbytes' 4-bit runs there, slower): the weights are the same NF4 as on a GPU, the kernels not.
Writes benchmarks/results/NAME.{json,md}.
"""

from __future__ import annotations

import argparse

from common import stamp, write
from sampling_fit import task_args

TASKS = {  # name: (sampling_fit's case, which split, prompts, completion tokens)
    "units": ("units", "train", 64, 128),
    "word_sums": ("word_sums", "train", 64, 128),
    "opposites": ("opposites", "train", 64, 32),
    "arithmetic": ("demo", "test", 50, 16),
}


def greedy(model_name: str, four_bit: bool) -> dict:
    """Each task's greedy report with the model loaded one way."""
    from rloo_kit import load_model
    from rloo_kit.evaluation import evaluate
    from rloo_kit.tasks import load_task

    model, tok = load_model(model_name, preset="cpu", backend="transformers", load_in_4bit=four_bit)
    reports = {}
    for name, (case, split, n, tokens) in TASKS.items():
        task = load_task(**task_args(case))
        rows = getattr(task, split)
        reports[name] = evaluate(model, tok, rows.select(range(min(n, len(rows)))), max_new_tokens=tokens,
                                 match=task.match)
    return reports


def main() -> None:
    from rloo_kit.evaluation import paired_change

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--name", default="small-model-4bit")
    ap.add_argument("--note", default="", help="what the table means, written under it")
    args = ap.parse_args()
    result = stamp()
    plain, nf4 = greedy(args.model, False), greedy(args.model, True)
    table = ["| task | prompts | tokens | unquantized | NF4 | prompts NF4 gets wrong that unquantized gets right "
             "| the other way | sign test p |", "|---|---|---|---|---|---|---|---|"]
    result["tasks"] = {}
    for name, (_, _, _, tokens) in TASKS.items():
        change = paired_change(nf4[name], plain[name])  # "better" = right unquantized, wrong in NF4
        result["tasks"][name] = {"prompts": change.prompts, "tokens": tokens, "unquantized": plain[name].accuracy,
                                 "nf4": nf4[name].accuracy, "lost_in_nf4": change.better,
                                 "gained_in_nf4": change.worse, "p": change.p_value,
                                 "examples": [{"prompt": a["prompt"], "unquantized": a["completion"],
                                               "nf4": b["completion"]}
                                              for a, b in zip(plain[name].completions[:4], nf4[name].completions[:4],
                                                              strict=True)]}
        table.append(f"| {name} | {change.prompts} | {tokens} | {plain[name].accuracy:.2f} | {nf4[name].accuracy:.2f} "
                     f"| {change.better} | {change.worse} | {change.p_value:.2g} |")
    write(args.name, result, table, args.note)


if __name__ == "__main__":
    main()
