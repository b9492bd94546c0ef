"""Every notebook runs top to bottom under papermill (SMOKE=True, CPU), and is stored clean."""

import json
import os
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from .conftest import REPO
from .test_secrets import TOKEN

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_are_four_notebooks():
    assert [p.stem for p in NOTEBOOKS] == ["00_rloo_in_one_page", "01_train", "02_troubleshooting", "03_evaluation"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stripped_and_parameterised(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "store notebooks with outputs stripped"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    assert "google.colab" in code[0].source, "the first code cell is the Colab install cell"
    for line in tagged[0].source.splitlines():  # literals only
        if line.strip() and not line.lstrip().startswith("#"):
            name, value = line.split("#")[0].split("=", 1)
            assert name.strip().isupper()
            eval(value, {"__builtins__": {}})  # a literal evaluates without names
    assert nb.cells[0].cell_type == "markdown"


def run(name: str, out: Path, **params) -> dict:
    import papermill

    out.mkdir(parents=True, exist_ok=True)
    with hub_token_in_environment():  # the kernel inherits it, as a user's would
        papermill.execute_notebook(str(REPO / "notebooks" / f"{name}.ipynb"), str(out / f"{name}.ipynb"),
                                   parameters={"SMOKE": True, "OUTPUT_DIR": str(out), **params},
                                   kernel_name="python3", progress_bar=False, cwd=str(out))
    assert TOKEN not in (out / f"{name}.ipynb").read_text(), "a hub token was written into the notebook"
    return json.loads((out / "metrics.json").read_text())


@contextmanager
def hub_token_in_environment():
    saved = os.environ.get("HF_TOKEN")
    os.environ["HF_TOKEN"] = TOKEN
    try:
        yield
    finally:
        os.environ.pop("HF_TOKEN") if saved is None else os.environ.update(HF_TOKEN=saved)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, default_model_dir):
    """01_train in smoke mode on the real default model: the adapter 03 evaluates."""
    out = tmp_path_factory.mktemp("nb01")
    return out, run("01_train", out, MODEL="smollm2-135m", TASK="arithmetic", PRESET="cpu")


def test_00_rloo_in_one_page(tmp_path):
    m = run("00_rloo_in_one_page", tmp_path)
    assert m["advantages"]["RLOO"] == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert abs(m["gradient"]["RLOO"]["mean"] - m["true_gradient"]) < 0.05
    assert m["gradient"]["RLOO"]["std"] < m["gradient"]["REINFORCE"]["std"]


def test_01_train(trained):
    out, m = trained
    assert m["steps"] == 2 and m["model"] == "smollm2-135m" and m["preset"] == "cpu"
    for key in ("accuracy_before", "accuracy_after"):
        assert 0.0 <= m[key] <= 1.0
    assert (Path(m["adapter"]) / "adapter_model.safetensors").is_file()
    assert (out / "01_train.ipynb").is_file()


def test_02_troubleshooting(tmp_path, default_model_dir):
    m = run("02_troubleshooting", tmp_path)
    assert set(m["results"]) == {"high_variance", "kl_explosion", "reward_collapse"}
    assert "reward_collapse" in m["results"]["reward_collapse"]["bad"]  # a bare-number reward: never earned
    assert "reward_collapse" not in m["results"]["reward_collapse"]["fixed"]


def test_03_evaluation(trained, tmp_path):
    _, m01 = trained
    m = run("03_evaluation", tmp_path, ADAPTER_DIR=m01["adapter"])
    assert m["samples"] == 2
    for side in ("base", "adapter"):
        assert 0.0 <= m["greedy"][side]["accuracy"] <= 1.0
        assert m["sampled"][side]["pass@2"] >= m["sampled"][side]["pass@1"]
