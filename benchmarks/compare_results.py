"""A change with no flag to compare it by (a default changed in the code) is measured by running the same
`sample_efficiency.py` arm before and after it, on the same seeds. This pairs the two sides' runs by task and seed:
held out after training on each side, the paired difference with a bootstrap 95% interval and the sign test over
seeds, and the held-out prompts one side got right that the other did not, over all seeds.

    .venv/bin/python benchmarks/compare_results.py --before RESULT [RESULT ...] --after RESULT [RESULT ...]
        --name NAME [--note TEXT]

RESULT: a results file's name in benchmarks/results (without .json). Writes benchmarks/results/NAME.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics

from common import RESULTS, bootstrap, write


def runs(names: list[str]) -> tuple[dict, dict]:
    """The runs of these results files by (task, seed), and the first file's stamp."""
    files = [json.loads((RESULTS / f"{name}.json").read_text()) for name in names]
    return {(r["task"], r["seed"]): r for f in files for r in f["runs"]}, files[0]


def compare(before: dict, after: dict) -> list[dict]:
    rows = []
    for task in sorted({t for t, _ in before} & {t for t, _ in after}):
        seeds = sorted(s for t, s in before if t == task and (t, s) in after)
        pairs = [(before[task, s], after[task, s]) for s in seeds]
        diffs = [round(a["after"] - b["after"], 4) for b, a in pairs]
        prompts = [(x, y) for b, a in pairs for x, y in zip(a["right_after"], b["right_after"], strict=True)]
        better, worse = sum(x and not y for x, y in prompts), sum(y and not x for x, y in prompts)
        rows.append({"task": task, "seeds": seeds, "start": statistics.fmean(b["before"] for b, _ in pairs),
                     "before": statistics.fmean(b["after"] for b, _ in pairs),
                     "after": statistics.fmean(a["after"] for _, a in pairs), "diffs": diffs,
                     "paired": bootstrap(diffs), "prompts_better": better, "prompts_worse": worse,
                     "steps": (statistics.fmean(b["steps"] for b, _ in pairs),
                               statistics.fmean(a["steps"] for _, a in pairs))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", nargs="+", required=True)
    parser.add_argument("--after", nargs="+", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    (before, stamped), (after, _) = runs(args.before), runs(args.after)
    rows = compare(before, after)
    table = ["| task | seeds | held out at step 0 | after, before the change | after, with it | with - before, paired "
             "by seed [bootstrap 95%], sign test | per seed | held-out prompts better / worse (all seeds) | steps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["paired"]
        table.append(f"| {r['task']} | {len(r['seeds'])} | {r['start']:.2f} | {r['before']:.2f} | {r['after']:.2f} | "
                     f"{p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}], p = {p['p']:.2g} | "
                     f"{', '.join(f'{d:+.2f}' for d in r['diffs'])} | {r['prompts_better']} / {r['prompts_worse']} | "
                     f"{r['steps'][0]:.0f} -> {r['steps'][1]:.0f} |")
    command = " ".join([".venv/bin/python benchmarks/compare_results.py", "--before", *args.before,
                        "--after", *args.after, "--name", args.name])
    write(args.name, {**stamped, "command": command, "before": args.before, "after": args.after, "rows": rows},
          table, args.note)


if __name__ == "__main__":
    main()
