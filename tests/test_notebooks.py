"""Every notebook runs top to bottom (SMOKE=True, CPU), reports what it measured, and is stored clean.

The notebooks the browser test runs with their defaults are not run twice: where it ran one clean in this
session, the checks here read that run (tests/notebook_runs.py); elsewhere papermill executes it."""

import json
import os
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from . import notebook_runs
from .conftest import REPO
from .helpers import TOKEN

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
slow = pytest.mark.slow  # each runs a notebook on the real default model


def test_there_are_six_notebooks():
    assert [p.stem for p in NOTEBOOKS] == ["00_rloo_in_one_page", "01_train", "02_troubleshooting", "03_evaluation",
                                           "04_reward_model", "05_tools"]


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
    notebook_runs.record(name, out / f"{name}.ipynb", out, with_defaults=not params)
    return json.loads((out / "metrics.json").read_text())


def run_once(name: str, out: Path) -> tuple[Path, dict]:
    """Notebook `name` with SMOKE and its defaults: the browser's clean run in this session, else papermill's
    into `out`. Its output folder and metrics."""
    return notebook_runs.run_clean(name) or (out, run(name, out))


@contextmanager
def hub_token_in_environment():
    saved = os.environ.get("HF_TOKEN")
    os.environ["HF_TOKEN"] = TOKEN
    try:
        yield
    finally:
        os.environ.pop("HF_TOKEN") if saved is None else os.environ.update(HF_TOKEN=saved)


ONE_PROMPT = 1 / 8 + 1e-9  # of a smoke run's 8 held-out prompts
CPU_DEFAULTS = dict(MODEL="smollm2-135m", TASK="arithmetic", PRESET="cpu")  # what "auto" resolves to on a CPU


@pytest.fixture(scope="module")
def trained(tmp_path_factory, default_model_dir):
    """01_train in smoke mode on the real default model: the adapter 03 evaluates. The browser's run of it in this
    session serves where its "auto" choices were these (a CPU); elsewhere papermill runs it."""
    ran = notebook_runs.run_clean("01_train")
    if ran and all(ran[1][key.lower()] == value for key, value in CPU_DEFAULTS.items()):
        out, m = ran
        return out, {**m, "adapter": str(out / "adapter")}  # the kernel wrote it relative to the lab's folder
    out = tmp_path_factory.mktemp("nb01")
    return out, run("01_train", out, **CPU_DEFAULTS)


@slow
@notebook_runs.lane("00_rloo_in_one_page")
def test_00_rloo_in_one_page(tmp_path):
    _, m = run_once("00_rloo_in_one_page", tmp_path)
    assert m["advantages"]["RLOO"] == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert abs(m["gradient"]["RLOO"]["mean"] - m["true_gradient"]) < 0.05
    assert m["gradient"]["RLOO"]["std"] < m["gradient"]["REINFORCE"]["std"]


@slow
@notebook_runs.lane("01_train")
def test_01_train(trained, default_model_dir):
    """The values the notebook reports are the kit's own, measured again here."""
    import torch
    from safetensors.torch import load_file

    import rloo_kit

    _, m = trained
    assert m["steps"] == 2 and m["model"] == "smollm2-135m" and m["preset"] == "cpu" and m["task"] == "arithmetic"
    assert m["max_completion_length"] == 16 and m["before"]["accuracy"] == m["accuracy_before"]
    assert m["sampled_before"]["temperature"] == m["config"]["temperature"] == m["sampled_after"]["temperature"]
    model, tok = rloo_kit.load_model(default_model_dir, preset="cpu")
    task = rloo_kit.load_task("arithmetic", n_test=8, seed=0)
    # greedy: the same base, the same answers; bf16 kernels flipped one of the 8 in 2 of ~35 fresh processes
    assert abs(task.evaluate(model, tok).accuracy - m["accuracy_before"]) <= ONE_PROMPT
    pre = m["preflight"]
    assert pre["ok"] and len(pre["prompts"]) == 8 and pre["num_generations"] == 4
    assert pre["zero_spread_fraction"] == sum(p["spread"] <= 1e-8 for p in pre["prompts"]) / 8
    lora_b = {k: v for k, v in load_file(Path(m["adapter"]) / "adapter_model.safetensors").items() if "lora_B" in k}
    assert lora_b and any(torch.count_nonzero(v) for v in lora_b.values())  # two steps moved the adapter
    assert (notebook_runs.EXECUTED / "01_train.ipynb").is_file()  # the executed copy the docs site renders


@slow
@notebook_runs.lane("02_troubleshooting")
def test_02_troubleshooting(tmp_path, default_model_dir):
    _, m = run_once("02_troubleshooting", tmp_path)
    assert m["steps"] == 3 and set(m["results"]) == {"high_variance", "kl_explosion", "reward_collapse"}
    collapse = m["results"]["reward_collapse"]
    assert "reward_collapse" in collapse["bad"]  # a bare-number reward: never earned
    assert "reward_collapse" not in collapse["fixed"]
    # the pre-flight said so before any step, and the first steps logged what it predicted
    assert "reward_collapse" in collapse["preflight"]["bad"]["problems"] and not collapse["preflight"]["bad"]["ok"]
    assert collapse["preflight"]["fixed"]["ok"]
    assert collapse["first_steps_zero_std"]["bad"][0] == 1.0


@slow
@notebook_runs.lane("03_evaluation")
def test_03_evaluation(trained, tmp_path):
    """03 on 01's adapter (the browser's run of 03 in the folder where it ran 01 finds it there; else papermill is
    told where it is): the same base and adapter on the same held-out prompts give 01's numbers."""
    _, m01 = trained
    ran = notebook_runs.run_clean("03_evaluation")
    m = ran[1] if ran else run("03_evaluation", tmp_path, ADAPTER_DIR=m01["adapter"])
    assert m["samples"] == 2 and Path(m["adapter"]) == Path(m01["adapter"]).resolve() and not m["trained_here"]
    assert m["temperature"] == m01["config"]["temperature"]  # sampled as the adapter was trained
    assert abs(m["greedy"]["base"]["accuracy"] - m01["accuracy_before"]) <= ONE_PROMPT  # as in test_01_train
    assert abs(m["greedy"]["adapter"]["accuracy"] - m01["accuracy_after"]) <= ONE_PROMPT
    for side in ("base", "adapter"):
        assert m["sampled"][side]["pass@2"] >= m["sampled"][side]["pass@1"]


@slow
@notebook_runs.lane("04_reward_model")
def test_04_reward_model(tmp_path, default_model_dir):
    """Preferences from the policy's samples -> reward model -> RLOO at two betas with gold measured beside."""
    import rloo_kit

    out, m = run_once("04_reward_model", tmp_path)
    assert m["pairs"] >= 10 and 0.0 <= m["reward_model"]["pair_accuracy"] <= 1.0
    assert (out / "reward_model" / "metrics.json").is_file()
    assert set(m["runs"]) == {"beta=0", "beta=0.1"}
    for name, run_ in m["runs"].items():
        assert [p["step"] for p in m["gold"][name]] == [0, 1, 2]  # start, then every step (SMOKE)
        assert 0.0 <= run_["gold_before"] <= 1.0 and run_["proxy_before"] is not None
    score = rloo_kit.load_reward_model(out / "reward_model")  # what the notebook wrote loads as a reward
    assert len(score(prompts=["Add 2 and 3."], completions=["5"])) == 1


@slow
@notebook_runs.lane("05_tools")
def test_05_tools(tmp_path, default_model_dir):
    """The default model never calls the calculator: the pre-flight says so, a warm-start teaches the syntax, and
    RLOO trains with the tool loop (SMOKE: 2 steps); held-out figures carry the call rate before and after."""
    _, m = run_once("05_tools", tmp_path)
    assert m["steps"] == 2 and len(m["curve"]) == 2 and all("tools/call_rate" in c for c in m["curve"])
    assert "tool_unused" in m["preflight"]["kinds"] or m["warmed_up"]
    for side in ("before", "after"):
        assert 0.0 <= m[side]["tools/call_rate"] <= 1.0 and m[side]["accuracy"] is not None
