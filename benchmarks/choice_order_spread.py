"""Do groups in two orders teach where groups as written do not? For a choice task file and a model (the base, or
an adapter trained on it), each of N training prompts gets 2K samples at the training temperature: K as written and
K with its choices one place on (`rloo_kit.choice_order`). A group of K as written is flat where its K answer rewards
are equal; a group in two orders (K - K//2 as written, K//2 reordered: what `--mix-choice-order` samples) likewise.
Reported: the share of flat groups each way, the share of samples that pick the first choice offered, and accuracy
as written and reordered (a model that picks by place is right on one order and wrong on the other).

    .venv/bin/python benchmarks/choice_order_spread.py --path F --prompt-column Q --answer-column A
        [--adapter RUN/adapter] [--prompts 32] [--k 4] [--max-new-tokens 128] [--temperature 1] [--name NAME]
        [--note TEXT]

Writes benchmarks/results/choice-order-spread.{json,md} (`--name` another).
"""

from __future__ import annotations

import argparse
import random

import torch
from common import accumulated_notes, load_note, stamp, write

import rloo_kit
from rloo_kit.choice_order import with_reordered_twins
from rloo_kit.rewards.answers import picked_choice


def sample(model, tok, prompts: list, k: int, max_new_tokens: int, temperature: float, seed: int) -> list[list[str]]:
    """k completions of each chat prompt, sampled as TRL samples them (temperature, no top-p)."""
    torch.manual_seed(seed)
    out = []
    for prompt in prompts:
        ids = tok.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.no_grad():
            gen = model.generate(**ids, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=max_new_tokens, num_return_sequences=k,
                                 pad_token_id=tok.pad_token_id or tok.eos_token_id)
        out.append(tok.batch_decode(gen[:, ids["input_ids"].shape[1]:], skip_special_tokens=True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", required=True)
    ap.add_argument("--prompt-column", default="prompt")
    ap.add_argument("--answer-column", default="answer")
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="choice-order-spread")
    ap.add_argument("--note", default="", help="the conditions, a paragraph of the results page")
    args = ap.parse_args()

    task = rloo_kit.load_task("file", path=args.path, prompt_column=args.prompt_column,
                              answer_column=args.answer_column, seed=args.seed)
    mixed, twins = with_reordered_twins(task.train)
    rows = random.Random(args.seed).sample(sorted(twins), min(args.prompts, len(twins)))
    model, tok = rloo_kit.load_model(preset="cpu")
    if args.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.adapter)
    model.eval()
    reward = task.reward_funcs[0]
    written = [mixed[r] for r in rows]
    reordered = [mixed[twins[r]] for r in rows]
    scores, firsts = {}, {}
    for name, records, seed in (("written", written, args.seed), ("reordered", reordered, args.seed + 1)):
        texts = sample(model, tok, [r["prompt"] for r in records], args.k, args.max_new_tokens, args.temperature, seed)
        flat_prompts = [r["prompt"] for r in records for _ in range(args.k)]
        columns = {c: [r[c] for r in records for _ in range(args.k)] for c in ("answer", "choices")}
        values = reward(prompts=flat_prompts, completions=[[{"role": "assistant", "content": t}] for g in texts
                                                           for t in g], **columns)
        scores[name] = [values[i * args.k:(i + 1) * args.k] for i in range(len(records))]
        picks = [picked_choice(t, r["choices"], r["prompt"][-1]["content"]) for r, g in zip(records, texts, strict=True)
                 for t in g]
        offered = [r["choices"] for r in records for _ in range(args.k)]
        placed = [c.index(p) for p, c in zip(picks, offered, strict=True) if p in c]
        firsts[name] = (sum(p == 0 for p in placed), len(placed))
    half = args.k - args.k // 2
    flat_written = [len(set(g)) == 1 for g in scores["written"]]
    flat_mixed = [len(set(w[:half] + o[:args.k // 2])) == 1
                  for w, o in zip(scores["written"], scores["reordered"], strict=True)]
    accuracy = {n: sum(map(sum, s)) / (len(s) * args.k) for n, s in scores.items()}
    result = {**stamp(), "path": args.path, "adapter": args.adapter, "prompts": len(rows), "k": args.k,
              "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
              "flat_as_written": round(sum(flat_written) / len(rows), 3),
              "flat_in_two_orders": round(sum(flat_mixed) / len(rows), 3),
              "accuracy": {n: round(a, 3) for n, a in accuracy.items()},
              "first_choice_picked": {n: f"{a} of {b}" for n, (a, b) in firsts.items()}}
    table = ["| model | prompts x K | flat groups as written | flat groups in two orders | right as written / "
             "reordered | picks of the first choice, as written / reordered |", "|---|---|---|---|---|---|",
             f"| {args.adapter or 'base'} | {len(rows)} x {args.k} | {result['flat_as_written']:.2f} | "
             f"{result['flat_in_two_orders']:.2f} | {accuracy['written']:.2f} / {accuracy['reordered']:.2f} | "
             f"{result['first_choice_picked']['written']} / {result['first_choice_picked']['reordered']} |"]
    write(args.name, result, table, f"{load_note(result)}\n\n{accumulated_notes(args.name, result, args.note)}".strip())


if __name__ == "__main__":
    main()
