"""What continuing the pre-flight's cut samples from the draw's KV cache saves. Where most samples are still cut
at the probe, the pre-flight continues them once to twice the probe: from the cache its first draw kept
(`evaluation.resume_ids`), or, as before, from the completions given back as prefixes, which reads every cut
prompt and completion again before the first new token. Both ways on a task file whose answers run long, in one
process, alternating; round r draws its prompts and first samples with seed r, for both ways: the whole
pre-flight and the continuation alone, with the verdict and the lengths each way found (the same draw either way:
the same tokens, so the lengths and verdicts must match).

    .venv/bin/python benchmarks/preflight_widening.py [--rounds 2] [--task animal_or_colour]

Writes benchmarks/results/preflight-widening.{json,md}.
"""

from __future__ import annotations

import argparse
import time

from common import load_note, median, stamp, write
from sampling_fit import CASES

import rloo_kit
from rloo_kit import preflight_check
from rloo_kit.tasks import load_task

WAYS = ("cache", "prefixes")


def _task_of(case: str):
    """The benchmark task file as `rloo-kit train --task file` loads it from its flags."""
    flags = CASES[case][1]
    value = {flag: flags[n + 1] for n, flag in enumerate(flags) if flag.startswith("--")}
    return load_task("file", path=value["--path"], prompt_column=value.get("--prompt-column", "prompt"),
                     answer_column=value.get("--answer-column", "answer"))


def one(model, tokenizer, task, way: str, seed: int) -> dict:
    timed = {"continuation": 0.0}
    extend, resume = preflight_check._Sampler.extend, preflight_check.resume_ids

    def timed_extend(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return extend(self, *args, **kwargs)
        finally:
            timed["continuation"] += time.perf_counter() - start

    preflight_check._Sampler.extend = timed_extend
    if way == "prefixes":
        preflight_check.resume_ids = lambda *args, **kwargs: None  # as a cache that cannot be narrowed
    try:
        start = time.perf_counter()
        report = rloo_kit.preflight(model, tokenizer, task, progress=False, seed=seed)
        seconds = time.perf_counter() - start
    finally:
        preflight_check._Sampler.extend, preflight_check.resume_ids = extend, resume
    return {"way": way, "seed": seed, "seconds": round(seconds, 1),
            "continuation_seconds": round(timed["continuation"], 1),
            "widened_from": report.widened_from, "probe_length": report.probe_length,
            "needed_lengths": report.needed_lengths, "finished_within_probe": round(report.finished_within_probe, 3),
            "verdict": report.verdict}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="animal_or_colour", choices=[c for c in CASES if "--path" in CASES[c][1]])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    result = {**stamp(), "settings": vars(args)}
    model, tokenizer = rloo_kit.load_model()
    task = _task_of(args.task)
    runs = [one(model, tokenizer, task, way, seed) for seed in range(args.rounds) for way in WAYS]
    result["runs"] = runs
    by_way = {way: [r for r in runs if r["way"] == way] for way in WAYS}
    table = ["| continued from | pre-flight (s, median) | continuation (s, median) | widened | needed lengths "
             "(median, 90%) | ended within the probe | verdict |", "|---|---|---|---|---|---|---|"]
    for way, rs in by_way.items():
        first = rs[0]
        table.append(f"| {way} | {median([r['seconds'] for r in rs]):.1f} | "
                     f"{median([r['continuation_seconds'] for r in rs]):.1f} | "
                     f"{first['widened_from']} -> {first['probe_length']} | "
                     + ", ".join(str(r["needed_lengths"]) for r in rs) + " | "
                     + ", ".join(str(r["finished_within_probe"]) for r in rs) + " | "
                     + ", ".join(r["verdict"] for r in rs) + " |")
    cache, prefixes = (median([r["continuation_seconds"] for r in by_way[w]]) for w in WAYS)
    whole = median([r["seconds"] for r in by_way["cache"]]) / median([r["seconds"] for r in by_way["prefixes"]])
    notes = (f"Task {args.task}, {args.rounds} rounds alternating. The continuation from the cache took "
             f"{cache / prefixes:.2f}x the time from prefixes, the whole pre-flight {whole:.2f}x. "
             + load_note(result))
    write("preflight-widening", result, table, notes)


if __name__ == "__main__":
    main()
