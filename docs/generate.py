"""The documentation pages made from the code when the site is built, so that they cannot drift from it.

docs/hooks.py puts them in the site: a page that holds `<!-- generated: NAME -->` gets `PAGES[NAME]()` in its
place. The command line's reference comes from `rloo_kit.cli.build_parser()`, the presets' tables from
`rloo_kit.presets`, the answer-matching table from `rloo_kit.rewards.is_correct`, the API reference from the names
`rloo_kit` exports, and the changelog and benchmark results from where they lie in the repository. The tutorials are
the notebooks: their executed copies from the notebook tests (build/notebooks/, tests/notebook_runs.py) where those
ran the same code, else the stored ones. Plain Python, no MkDocs: tests/test_docs.py imports it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the kit of this checkout, as mkdocstrings reads its source (paths: [.])
    sys.path.insert(0, str(REPO))
NOTEBOOKS = REPO / "notebooks"
EXECUTED = REPO / "build" / "notebooks"  # where the notebook tests leave what they ran (tests/notebook_runs.py)
RESULTS = REPO / "benchmarks" / "results"
USAGE_WIDTH = 100


def cell(text: str) -> str:
    """Text for one cell of a Markdown table: on one line, with its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: str) -> str:
    return f"`{text}`" if text != "" else ""


# ------------------------------------------------------------------------------------------------ command line

def _shown(value) -> str:
    """A default as a reader types it: a path under the clone relative to it, nothing for an unset option."""
    if value is None or value is False or value == argparse.SUPPRESS:
        return ""
    if isinstance(value, str) and value.startswith(str(REPO) + "/"):
        return value[len(str(REPO)) + 1:]
    return str(value)


def _option(action: argparse.Action) -> str:
    if not action.option_strings:  # a positional
        return action.metavar or action.dest
    if action.nargs == 0:  # a switch: store_true, --version, --x/--no-x
        return ", ".join(action.option_strings)
    meta = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    return ", ".join(f"{s} {meta}" for s in action.option_strings)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | default | what it does |", "|---|---|---|"]
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        text = argparse.HelpFormatter(parser.prog)._expand_help(action) if action.help else ""
        default = "" if isinstance(action, argparse._VersionAction) else _shown(action.default)
        rows.append(f"| {code(cell(_option(action)))} | {code(cell(default))} | {cell(text)} |")
    return rows if len(rows) > 2 else ["No options."]


def cli_reference() -> str:
    """Every command of `rloo-kit`, its usage, and every option with its help and default, as the parser has them."""
    from rloo_kit.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {a.dest: a.help for a in commands._choices_actions}
    lines = ["Made from `rloo_kit.cli.build_parser()` when this site is built: `rloo-kit COMMAND --help` prints the "
             "same options. An option left empty in *default* takes its value from the preset, the task or the "
             "recipe, as its text says.", "", "```text", _usage(parser), "```", "", *_options_table(parser), ""]
    for name, sub in commands.choices.items():
        lines += [f"## rloo-kit {name}", "", helps.get(name) or sub.description or "", "", "```text", _usage(sub),
                  "```", "", *_options_table(sub), ""]
        if sub.epilog:
            lines += ["```text", sub.epilog.strip(), "```", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ presets

def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return ", ".join(v)
    return str(v)


def _dataclass_table(items: list, kinds) -> list[str]:
    import dataclasses

    fields = dataclasses.fields(kinds)
    names = [p.name for p in items]
    rows = [f"- {code(p.name)}: {p.description}" for p in items if getattr(p, "description", None)]
    rows += ["", "| field | " + " | ".join(code(n) for n in names) + " |", "|---|" + "---|" * len(names)]
    rows += [f"| {code(f.name)} | " + " | ".join(cell(_value(getattr(p, f.name))) for p in items) + " |"
             for f in fields if f.name not in ("name", "description")]
    rows += ["", *(f"- **{f.name}**: {' '.join(f.metadata['help'].split())}" for f in fields)]
    return rows


def presets_reference() -> str:
    """The RLOO presets and the reward-model presets, each field's value per preset and what it is for."""
    from rloo_kit.presets import RM_PRESETS, Preset, RewardModelPreset, list_presets

    return "\n".join([
        "Made from `rloo_kit.presets` when this site is built: `list_presets()` and the help text of each field of "
        "the `Preset` dataclass (`rloo-kit presets --explain NAME` prints one preset's fields with their help; "
        "`rloo-kit presets --model 1.5B` adds a memory estimate for a model). `pick_preset()` takes the largest one "
        "this machine holds; `--preset NAME` or `preset=` names one.", "",
        "## RLOO presets", "", *_dataclass_table(list_presets(), Preset), "",
        "## Reward-model presets", "",
        "What `rloo-kit train-rm` / `train_reward_model` use on each hardware class (`rloo_kit.presets.RM_PRESETS`).",
        "", *_dataclass_table(list(RM_PRESETS.values()), RewardModelPreset), ""])


# ------------------------------------------------------------------------------------------------ answers

POSITIVE_NEGATIVE = {"labels": ["positive", "negative"]}
COLOURS = {"labels": ["animal", "colour"]}
TRUE_FALSE = {"labels": ["true", "false"]}
OFFERED = {"choices": ["70", "95"]}  # the numbers "Which is larger, 70 or 95?" offers
LISTED = {"choices": ["mountain", "chair"]}  # the things "Which is bigger, a mountain or a chair?" offers
PLAIN: dict = {}

# (reply, gold answer, the row's labels or choices, match, what the row shows). Whether each counts as right is not
# written here: answer_rows() asks rloo_kit.rewards.is_correct.
ANSWER_EXAMPLES = [
    ("So 3 + 4 = 7.", "7", PLAIN, "final", "a number: the reply's final number"),
    ("I think 7. Or maybe 8.", "7", PLAIN, "final", "a number: the last one counts"),
    ("The answer is 7, not 8.", "7", PLAIN, "final", "a number the reply marks as its answer"),
    ("#### 1,000", "1000", PLAIN, "final", "GSM8K's marker; thousands separators"),
    (r"\boxed{18.00}", "18", PLAIN, "final", "a boxed answer, compared as a number"),
    ("It costs $18.", "18", PLAIN, "final", "a currency sign"),
    ("Half: 50%", "50", PLAIN, "final", "a percent sign"),
    ([{"role": "assistant", "content": "So 3 + 4 = 7."}], "7", PLAIN, "final", "a completion as chat messages"),
    ("The opposite of hot is cold.", "cold", PLAIN, "final", "a text in the last sentence"),
    ("Cold is the opposite of hot.", "cold", PLAIN, "final", "a text anywhere in the last sentence"),
    ("The Cold.", "cold", PLAIN, "final", "case, punctuation and a leading article"),
    ("It is coldest at night.", "cold", PLAIN, "final", "a text inside another word"),
    ("Cold. But hot is also possible.", "cold", PLAIN, "final", "a text only in an earlier sentence"),
    ("Answer: cold", "cold", PLAIN, "final", "a text the reply marks as its answer"),
    ("Blue.", ["red", "blue", "yellow"], PLAIN, "final", "one of several accepted answers"),
    ("Crimson is a color.", "colour", COLOURS, "final", "British or American spelling, either one"),
    ("It is forty two.", "forty-two", PLAIN, "final", "a hyphen between words is a space"),
    ("It is positive.", "positive", POSITIVE_NEGATIVE, "final", "a label set: one label named"),
    ("It is 5:00 p.m.", "5 PM", PLAIN, "final", "a time of day, however written"),
    ("positive or negative", "positive", POSITIVE_NEGATIVE, "final", "a label set: two labels named"),
    ("positive, not negative", "positive", POSITIVE_NEGATIVE, "final", "a label set: one named, one denied"),
    ("The statement is not true.", "true", TRUE_FALSE, "final", "a label named only to deny it"),
    ("95 is larger than 70.", "95", OFFERED, "final", "a choice between the prompt's numbers: the pick comes first"),
    ("70 is larger than 95.", "95", OFFERED, "final", "a choice: the wrong pick, though 95 is the last number"),
    ("Answer: 95", "95", OFFERED, "final", "a choice the reply marks"),
    ("A mountain.", "mountain", LISTED, "final", "a choice among the things the prompt lists: one named"),
    ("A mountain is bigger than a chair.", "mountain", LISTED, "final", "a choice among things: the pick comes first"),
    ("A mountain and a chair.", "mountain", LISTED, "final", "a choice among things: both only listed"),
    ("7.", "7", PLAIN, "exact", "`exact_answer`: the reply is the answer alone"),
    ("It is 7.", "7", PLAIN, "exact", "`exact_answer`: anything beside the answer"),
]


def answer_rows() -> list[dict]:
    """Each example with what `is_correct` says of it and, for a number, the number it reads."""
    from rloo_kit.rewards import is_correct, parse_number, predicted_answer

    rows = []
    for reply, gold, rules, match, case in ANSWER_EXAMPLES:
        numeric = all(parse_number(g) is not None for g in ([gold] if isinstance(gold, str) else gold))
        rows.append(dict(reply=reply, gold=gold, rules=rules, match=match, case=case,
                         right=is_correct(reply, gold, match=match, **rules),
                         read_as=predicted_answer(reply, **rules) if numeric or "choices" in rules else None))
    return rows


def _rules_cell(rules: dict) -> str:
    return "; ".join(f"{name}: {', '.join(values)}" for name, values in rules.items())


def answers_reference() -> str:
    lines = ["Made when this site is built, by calling `rloo_kit.rewards.is_correct(reply, gold, match=..., "
             "labels=..., choices=...)` on each row: *right?* is what training rewards (`correct_answer`, "
             "`exact_answer`), the pre-flight and evaluation take it to be. *Reads* is the number a numeric answer, or "
             "the pick a choice, is scored on (`predicted_answer`). A row's *labels* are its label set, its *choices* "
             "what its question offers, numbers or things (a file task finds both by itself: [your own "
             "task](../own-task.md)).", "",
             "| reply | gold answer | labels or choices | match | right? | reads | what it shows |",
             "|---|---|---|---|---|---|---|"]
    for r in answer_rows():
        reply = json.dumps(r["reply"]) if not isinstance(r["reply"], str) else r["reply"]
        gold = " or ".join(r["gold"]) if isinstance(r["gold"], list) else r["gold"]
        lines.append(f"| {code(cell(reply))} | {code(cell(gold))} | {cell(_rules_cell(r['rules']))} | "
                     f"{r['match']} | {'right' if r['right'] else 'wrong'} | {code(cell(r['read_as'] or ''))} | "
                     f"{cell(r['case'])} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ API

def _api_section(title: str, module: str, names) -> list[str]:
    return [f"## {title}", "", *(f"::: {module}.{n}\n" for n in names)]


def api_reference() -> str:
    """`rloo_kit`'s top-level names, each documented where it is defined (`_EXPORTS` maps name -> module: the
    package imports them lazily, which the docs' source reader cannot follow)."""
    import rloo_kit

    lines = ["Every name `import rloo_kit` offers, documented from its source when this site is built. The names "
             "are imported from their modules on first use (`rloo_kit.preflight` is "
             "`rloo_kit.preflight_check.preflight`); each is listed here under the module that defines it.", ""]
    for module, names in rloo_kit._EXPORTS.items():
        lines += _api_section(f"`rloo_kit.{module}`", f"rloo_kit.{module}", names)
    errors = [n for n in rloo_kit.__all__ if n not in rloo_kit._MODULE_OF]
    assert all(getattr(rloo_kit, n).__module__ == "rloo_kit.errors" for n in errors)
    return "\n".join(lines + _api_section("Errors: `rloo_kit.errors`", "rloo_kit.errors", errors))


def rewards_reference() -> str:
    """`rloo_kit.rewards`' functions, by the module that defines each."""
    import inspect

    import rloo_kit.rewards as rewards

    by_module: dict[str, list[str]] = {}
    for name in rewards.__all__:
        obj = getattr(rewards, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            by_module.setdefault(obj.__module__, []).append(name)
    lines = ["The reward functions, answer matching and the guard around rewards (`rloo_kit.rewards`), documented "
             "from their source when this site is built.", ""]
    for module in sorted(by_module):
        lines += _api_section(f"`{module}`", module, by_module[module])
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ thresholds

def _source_block(lines: list[str]) -> str:
    return "\n".join(["```python", *lines, "```", ""])


def preflight_thresholds() -> str:
    """The pre-flight's thresholds as `rloo_kit/preflight_check.py` sets them, its comments included."""
    import re

    text = (REPO / "rloo_kit" / "preflight_check.py").read_text(encoding="utf-8")
    return _source_block([line for line in text.splitlines() if re.match(r"[A-Z][A-Z_]* = ", line)])


def health_thresholds() -> str:
    """`rloo_kit.diagnostics.Thresholds` as its source has it: each default and what it means."""
    import ast

    text = (REPO / "rloo_kit" / "diagnostics.py").read_text(encoding="utf-8")
    (node,) = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Thresholds"]
    return _source_block(ast.get_source_segment(text, node, padded=True).splitlines())


# ------------------------------------------------------------------------------------------------ files

def changelog() -> str:
    return (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


def benchmark_results() -> str:
    """Every committed result table (benchmarks/results/*.md) under its file's name, as the scripts wrote it."""
    lines = ["The tables the benchmark scripts wrote (`benchmarks/results/*.md`, each with the command, machine and "
             "versions it ran on), included as they are when this site is built. [Benchmarks](benchmarks.md) says "
             "what each script asks.", ""]
    for path in sorted(RESULTS.glob("*.md")):
        lines += [f"## {path.stem}", "", path.read_text(encoding="utf-8").strip(), ""]
        for image in sorted(RESULTS.glob(path.stem + ".png")):
            lines += [f"![{image.name}](results/{image.name})", ""]
    return "\n".join(lines)


def _code_cells(path: Path) -> list[tuple[str, str]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for c in nb["cells"] if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]


def notebook_source(stored: Path) -> Path:
    """The executed copy of a notebook that the notebook tests left in build/notebooks/ when its cells are the
    stored notebook's (the injected parameters aside), else the stored, stripped notebook."""
    executed = EXECUTED / stored.name
    if executed.is_file() and _code_cells(executed) == _code_cells(stored):
        return executed
    return stored


def tutorials() -> dict[str, Path]:
    """Site path -> the notebook file rendered there (notebooks/NAME.ipynb, from notebooks/ or build/notebooks/)."""
    return {f"notebooks/{p.name}": notebook_source(p) for p in sorted(NOTEBOOKS.glob("0*.ipynb"))}


PAGES = {
    "cli-reference": cli_reference,
    "presets-reference": presets_reference,
    "answers-reference": answers_reference,
    "api-reference": api_reference,
    "rewards-reference": rewards_reference,
    "preflight-thresholds": preflight_thresholds,
    "health-thresholds": health_thresholds,
    "changelog": changelog,
    "benchmark-results": benchmark_results,
}
