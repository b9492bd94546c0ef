"""Can a small model learn to use a calculator with RLOO on a CPU? The task (benchmarks/tasks/products_and_sums
.jsonl): 3-digit x 2-digit products, which the model cannot do alone, beside sums it can. One run, in stages:

1. the pre-flight with the calculator available, on the base model (does it ever call it?);
2. a warm-start of WARM examples x EPOCHS (TRL's SFTTrainer, `rloo_kit.tools.warm_start`) where it does not, and
   the pre-flight again;
3. held-out accuracy before (greedy, with the tool loop): accuracy, call rate, accuracy with and without a call;
4. RLOO with the calculator for --minutes (the best validation step kept), then held-out accuracy after;
5. the step time of the same task trained without tools for a few steps, for the cost of the tool loop.

    .venv/bin/python benchmarks/tools.py [--minutes 5] [--warm 16] [--epochs 2] [--seed 0]

Writes benchmarks/results/tools.{json,md}; the run lives in runs/bench-tools/.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import REPO, load_note, stamp, write

import rloo_kit
from rloo_kit.tools import calculator, warm_start, with_tools, worked_examples

TASK = REPO / "benchmarks" / "tasks" / "products_and_sums.jsonl"
RUNS = REPO / "runs" / "bench-tools"
LENGTH = 48  # a call, its result and a short answer
COMPARE_STEPS = 6  # steps of the same task without tools, for the step time


def held_out(task, model, tok) -> dict:
    report = task.evaluate(model, tok)
    products = [r for r in report.completions if "*" in r["prompt"]]
    return {"accuracy": report.accuracy, **(report.tools or {}),
            "products_accuracy": sum(r["correct"] for r in products) / len(products) if products else None,
            "right": [r["correct"] for r in report.completions]}


def step_times(trainer) -> list[float]:
    return [h["step_time"] for h in trainer.state.log_history if "step_time" in h][1:]  # the first warms up


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--warm", type=int, default=16, help="worked examples of the warm-start (0: none)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    plan = rloo_kit.plan_run()
    model, tok = rloo_kit.load_model(plan.model, preset=plan.preset)
    model = rloo_kit.attach_lora(model, preset=plan.preset)
    task = with_tools(rloo_kit.load_task("file", path=str(TASK), seed=args.seed), [calculator]).replace(
        max_completion_length=LENGTH, temperature=1.0)
    result: dict = {**stamp(), "minutes": args.minutes, "warm_examples": args.warm, "warm_epochs": args.epochs}
    base = rloo_kit.preflight(model, tok, task, preset=plan.preset, seed=args.seed)
    print(base, flush=True)
    result["preflight_base"] = {"tools": base.tools, "verdict": base.verdict, "kinds": base.kinds()}
    result["base"] = held_out(task, model, tok)
    if args.warm:
        start = time.time()
        shown = worked_examples(task, task.tools[0], n=args.warm, tokenizer=tok)
        model = warm_start(model, tok, shown, output_dir=str(RUNS / "sft"), preset=plan.preset, epochs=args.epochs,
                           seed=args.seed)
        result["warm_start_seconds"] = round(time.time() - start, 1)
        warmed = rloo_kit.preflight(model, tok, task, preset=plan.preset, seed=args.seed)
        print(warmed, flush=True)
        result["preflight_warmed"] = {"tools": warmed.tools, "verdict": warmed.verdict, "kinds": warmed.kinds()}
    before = held_out(task, model, tok)
    result["before"] = before
    trainer = rloo_kit.build_trainer(model, tok, task, preset=plan.preset, output_dir=str(RUNS / "rloo"),
                                     minutes=args.minutes, seed=args.seed, live=False, save_strategy="no")
    start = time.time()
    rloo_kit.train(trainer)
    result["train_minutes"] = round((time.time() - start) / 60, 2)
    logs = [h for h in trainer.state.log_history if "reward" in h]
    result["curve"] = [{k: h.get(k) for k in ("step", "reward", "tools/call_rate", "tools/valid_call_rate",
                                              "validation/accuracy")} for h in logs]
    result["validation"] = trainer.time_budget.curve
    after = held_out(task, trainer.model, tok)
    result["after"] = after
    better = sum(b > a for a, b in zip(before["right"], after["right"], strict=True))
    worse = sum(b < a for a, b in zip(before["right"], after["right"], strict=True))
    from rloo_kit.evaluation import sign_test

    result["paired"] = {"better": better, "worse": worse, "p": sign_test(better, worse)}
    tool_steps = step_times(trainer)
    fresh, tok = rloo_kit.load_model(plan.model, preset=plan.preset)  # the same task, no tools, a fresh adapter
    plain = rloo_kit.build_trainer(fresh, tok, task.replace(tools=()), preset=plan.preset,
                                   output_dir=str(RUNS / "plain"), max_steps=COMPARE_STEPS, live=False,
                                   save_strategy="no")
    rloo_kit.train(plain)
    result["step_seconds"] = {"with_tools": statistics.median(tool_steps), "without": statistics.median(
        step_times(plain)), "steps_with_tools": len(logs)}
    table = ["| stage | held-out accuracy | products | call rate | right with a call | right without |",
             "|---|---|---|---|---|---|"]
    for name, r in (("base model", result["base"]), ("after the warm-start", before), ("after RLOO", after)):
        table.append(f"| {name} | {r['accuracy']:.2f} | {_f(r['products_accuracy'])} | {_f(r.get('call_rate'))} | "
                     f"{_f(r.get('accuracy_with_call'))} | {_f(r.get('accuracy_without_call'))} |")
    s = result["step_seconds"]
    notes = (f"RLOO: {len(logs)} steps in {result['train_minutes']} min; paired over the held-out prompts: "
             f"{better} better, {worse} worse (sign test p = {result['paired']['p']:.2g}). Step time with the tool "
             f"loop {s['with_tools']:.2f} s, without {s['without']:.2f} s (median). Pre-flight on the base model: "
             f"{result['preflight_base']['tools']} -> {result['preflight_base']['verdict']} "
             f"{result['preflight_base']['kinds']}. " + load_note(result))
    for r in (result["base"], before, after):
        r.pop("right")
    write("tools", result, table, notes)


def _f(value) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
