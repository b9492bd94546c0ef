"""One execution of a notebook serves every test that checks it.

A notebook's smoke run costs up to three minutes on a 2-core CPU, and two test files check it: test_browser.py
(Run All in JupyterLab: every cell ran, no error output, figures and widgets rendered) and test_notebooks.py
(the figures the run reports in its metrics.json). Where the browser ran a notebook clean in this pytest session,
with the parameters the metric checks expect (SMOKE, OUTPUT_DIR and otherwise its defaults), the metric checks
read that run; elsewhere (`-m "not browser"`, test_notebooks.py alone, a browser run that failed) papermill
executes it.
pytest collects test_browser.py first, so `make test` runs each of those notebooks once.

The record lives in one process. `make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`), so a
notebook's browser run and the checks that read it share a lane (`lane`): one worker takes all of a lane's tests, in
the order pytest collects them. Two lanes, so that the two workers share the notebooks' minutes about equally.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import REPO
from .helpers import TOKEN

EXECUTED = REPO / "build" / "notebooks"  # each executed copy, for the docs site to render (docs/generate.py)
_RUN_CLEAN: dict[str, Path] = {}  # notebook -> the OUTPUT_DIR of its clean run in this session
# Which worker's lane runs each notebook. On a 2-core CPU without AVX512, three runs of `make test`: lane a's tests took
# 9.5-12 minutes of their worker (02 and the Stop button's run of 01), b's 12-14 (01, 03 on 01's adapter, 04, 05).
# `stop` is the Stop button's run.
LANES = {"00_rloo_in_one_page": "a", "02_troubleshooting": "a", "stop": "a",
         "01_train": "b", "03_evaluation": "b", "04_reward_model": "b", "05_tools": "b"}


def lane(name: str) -> pytest.MarkDecorator:
    """The mark that keeps notebook `name`'s tests on one pytest-xdist worker (a no-op without xdist)."""
    return pytest.mark.xdist_group(f"notebooks-{LANES[name]}")


def record(name: str, executed: Path, output_dir: Path, *, with_defaults: bool) -> None:
    """Keep a clean run of notebook `name`: its executed copy for the docs and, for a run `with_defaults` (SMOKE
    and OUTPUT_DIR aside), its output folder for the metric checks."""
    assert_no_token(executed)
    assert (output_dir / "metrics.json").is_file(), f"{name} wrote no metrics.json in {output_dir}"
    EXECUTED.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(executed, EXECUTED / f"{name}.ipynb")
    if with_defaults:
        _RUN_CLEAN[name] = output_dir


def assert_no_token(notebook: Path) -> None:
    """The stand-in hub token the kernel had in its environment is nowhere in the saved notebook."""
    assert TOKEN not in notebook.read_text(), f"{notebook.name}: a hub token was written into the notebook"


def run_clean(name: str) -> tuple[Path, dict] | None:
    """The output folder and metrics of this session's clean run of `name` with its defaults, or None."""
    out = _RUN_CLEAN.get(name)
    return None if out is None else (out, json.loads((out / "metrics.json").read_text()))
