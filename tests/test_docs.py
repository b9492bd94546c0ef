"""The documents a newcomer reads: the README fits a screen or two, its Python quickstart runs as written (on the
tiny model, for seconds), and every link between the documents leads to a file that is there."""

import json
import re

import pytest

import rloo_kit

from .conftest import REPO

DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def test_the_readme_is_short_and_says_how_to_install():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    assert "## Install" in readme and "source .venv/bin/activate" in readme and "[unsloth" in readme


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_between_the_documents_leads_somewhere(doc):
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
        if not target.startswith(("http://", "https://")):
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which is not there"


@pytest.mark.heavy
def test_the_readmes_python_quickstart_runs_as_written(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """Its own file, its own reward, `rloo_kit.run` with a time budget: the only changes are the file's path, the
    machine's plan (the tiny model in place of the default one) and seconds in place of minutes."""
    (block,) = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    rows = [{"prompt": f"Tom has {a} apples and gets {b} more. How many apples?", "answer": str(a + b)}
            for a in range(2, 8) for b in range(2, 7)]
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
    assert "held-out accuracy: before" in capsys.readouterr().out
