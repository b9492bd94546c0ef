"""The notebooks run from a fresh Colab runtime, without a clone: each installs the kit from the one
repository URL in pyproject.toml's [project.urls], and no code cell needs a path that only a checkout has."""

import re

import nbformat
import pytest

from .conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# read without tomllib, which Python 3.10 (the oldest the kit supports) lacks
URL = re.search(r'^\[project\.urls\]\n(?:.*\n)*?Repository = "([^"]+)"', (REPO / "pyproject.toml").read_text(),
                re.M).group(1)
CHECKOUT_ONLY = re.compile(r"""(\.\./|\bbenchmarks/|\btests/|\bshared/|__file__|\bnotebooks/)""")


def code_cells(path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_the_url_is_a_public_repository():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", URL), URL


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_install_cell_uses_the_project_url(path):
    install = code_cells(path)[0].source
    assert 'if "google.colab" in sys.modules:' in install
    assert re.findall(r"git\+([^\s\"'@]+)", install) == [URL], "install from exactly [project.urls] Repository"
    assert re.findall(r"https?://[^\s\"']+", install) == [URL], "no other URL in the install cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_path_that_only_a_checkout_has(path):
    for i, cell in enumerate(code_cells(path)):
        found = CHECKOUT_ONLY.search(cell.source)
        assert not found, f"code cell {i} uses {found.group(0)!r}, which a Colab runtime without a clone lacks"
