"""The documents a newcomer reads: the README fits a screen or two, its Python quickstart runs as written (on the
tiny model, for seconds), every link between the documents leads to a file that is there, every code block of the
site's pages runs here or says why not, and the pages made from the code say what the code does."""

import argparse
import contextlib
import importlib.util
import io
import json
import re
import textwrap

import pytest

import rloo_kit

from .conftest import REPO

PAGES = sorted((REPO / "docs").rglob("*.md"))
DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", *PAGES]
FENCE = re.compile(r"^([ \t]*)```(\S*)[^\n]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"^\s*<!-- not run: [^>]+ -->$")  # the line above a block that is not run here, and why
SHOWN = {"text", "json", "yaml"}  # printed output, a file's rows, a recipe: shown, not run


def docs_generator():
    """docs/generate.py: the pages the site makes from the code (docs/hooks.py puts them in)."""
    spec = importlib.util.spec_from_file_location("docs_generate", REPO / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_short_and_says_how_to_install():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    assert "## Install" in readme and "source .venv/bin/activate" in readme and "[unsloth" in readme


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_between_the_documents_leads_somewhere(doc):
    notebooks = {(REPO / "docs" / page).resolve() for page in docs_generator().tutorials()}  # pages the site adds
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
        if not target.startswith(("http://", "https://")):
            there = (doc.parent / target).exists() or (doc.parent / target).resolve() in notebooks
            assert there, f"{doc.name} links to {target}, which is not there"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO / "docs")))
def test_every_code_block_runs_or_says_why_not(page, monkeypatch):
    """A page's Python blocks run in order, in one namespace, from the repository root, and a `text` block right
    after one is what it printed; any other code has `<!-- not run: why -->` on the line above it."""
    monkeypatch.chdir(REPO)
    text, namespace, printed = page.read_text(), {"__name__": "docs"}, None
    for block in FENCE.finditer(text):
        _, language, body = block.groups()
        body, marked = textwrap.dedent(body), NOT_RUN.match(text[:block.start()].rstrip().rsplit("\n", 1)[-1])
        assert language, f"{page.name}: a code block without a language: {body[:60]!r}"
        if language == "text" and printed is not None:
            assert body.strip() == printed.strip(), f"{page.name}: the output shown is not what the block above prints"
        printed = None
        if language in SHOWN:
            continue
        assert language == "python" or marked, (f"{page.name}: a {language} block that is not run here says why on "
                                                f"the line above it (<!-- not run: ... -->): {body[:60]!r}")
        if not marked:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                exec(compile(body, str(page), "exec"), namespace)
            printed = out.getvalue()


def test_the_answer_table_says_what_is_correct_says():
    """The site's table of replies and gold answers (made by docs/generate.py at build time), checked row by row
    against `is_correct` called here, and against what the rows are there to show."""
    from rloo_kit.rewards import is_correct

    docs = docs_generator()
    table = docs.answers_reference().splitlines()
    expected = {"The opposite of hot is cold.": True, "It is coldest at night.": False, "#### 1,000": True,
                "positive or negative": False, "positive, not negative": True, "The statement is not true.": False,
                "95 is larger than 70.": True, "70 is larger than 95.": False,
                "It is 7.": False, "A mountain is bigger than a chair.": True, "A mountain and a chair.": False}
    for reply, right in expected.items():
        ((_, gold, rules, match, _),) = [e for e in docs.ANSWER_EXAMPLES if e[0] == reply]
        assert is_correct(reply, gold, match=match, **rules) is right
        (row,) = [line for line in table if line.startswith(f"| `{reply}` |")]
        assert f"| {'right' if right else 'wrong'} |" in row, row


def test_the_generated_references_name_every_command_option_and_preset():
    from rloo_kit.cli import build_parser
    from rloo_kit.presets import RM_PRESETS, list_presets

    docs = docs_generator()
    cli, presets = docs.cli_reference(), docs.presets_reference()
    options = set(re.findall(r"--?[\w-]+", " ".join(line.split(" | ")[0] for line in cli.splitlines()
                                                  if line.startswith("| `"))))
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in [("", parser), *commands.choices.items()]:
        assert not name or f"\n## rloo-kit {name}\n" in cli
        for action in sub._actions:
            assert all(s in options for s in action.option_strings if s not in ("-h", "--help")), action
    assert all(f" `{p.name}` |" in presets for p in [*list_presets(), *RM_PRESETS.values()])  # a column each


@pytest.mark.heavy
def test_the_readmes_python_quickstart_runs_as_written(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """Its own file, its own reward, `rloo_kit.run` with a time budget: the only changes are the file's path, the
    machine's plan (the tiny model in place of the default one) and seconds in place of minutes."""
    (block,) = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    # four-digit answers: a random model's noise never hits one (with one-digit sums it did, on 5% of samples on the
    # fp32 CPU path, and the pre-flight rightly let that spread train)
    rows = [{"question": f"Tom has {a} apples and gets {b} more. How many apples?", "answer": str(a + b)}
            for a in range(1302, 1308) for b in range(2071, 2076)]
    task_file = tmp_path / "my_task.jsonl"
    task_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = rloo_kit.plan_run(str(tiny_model_dir), "file", "cpu")
    monkeypatch.setattr(rloo_kit, "plan_run", lambda **kw: plan)
    code = (block.replace('"my_task.jsonl"', repr(str(task_file))).replace('"runs/mine"', repr(str(tmp_path / "run")))
            .replace("minutes=8", "minutes=0.05"))
    assert code.count(str(task_file)) == 1 and "minutes=0.05" in code
    exec(compile(code, "README.md", "exec"), {})
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["task"] == "file" and m["accuracy_before"] is not None and m["budget_minutes"] == 0.05
    # a random model answers nothing: the pre-flight refuses, and what the README prints says so, not "+0.00"
    assert not m["trained"] and "reward_collapse" in m["preflight"]["problems"]
    assert "Not trained: the pre-flight says" in capsys.readouterr().out
