"""Recipes: one YAML file names a run, the command line overrides it, --print-config shows what would run,
and every run writes the recipe that runs it again. The shipped recipes parse and run two steps on the tiny
model; TensorBoard's event file is read back."""

import json
from pathlib import Path

import pytest
import yaml

import rloo_kit.cli as cli
from rloo_kit.recipes import apply_recipe, eval_task_options, read_recipe, trained_task

from .conftest import REPO

RECIPES = sorted((REPO / "configs" / "recipes").glob("*.yaml"))


def tiny(tiny_model_dir, out) -> list[str]:
    """Options that shrink any recipe to a two-step run of the tiny model."""
    return ["--model", str(tiny_model_dir), "--preset", "cpu", "--output-dir", str(out), "--max-steps", "2",
            "--batch-size", "4", "--num-generations", "2", "--max-completion-length", "8", "--n-test", "4",
            "--preflight-prompts", "0", "--overwrite"]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_a_shipped_recipe_parses(recipe):
    args = apply_recipe(cli.build_parser(), ["train", "--config", str(recipe)])
    raw = yaml.safe_load(recipe.read_text())
    assert args.model == raw["model"] and args.max_steps == raw["max_steps"] and args.preset == raw["preset"]
    if "path" in raw:  # read beside the recipe, wherever the command runs from
        assert Path(args.path).resolve() == (recipe.resolve().parent / raw["path"]).resolve()


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.stem != "gsm8k_t4"], ids=lambda p: p.stem)
def test_a_shipped_recipe_runs_two_steps_on_the_tiny_model(recipe, tiny_model_dir, tmp_path, capsys):
    assert cli.main(["train", "--config", str(recipe), *tiny(tiny_model_dir, tmp_path / "run")]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["trained"]


def test_gsm8k_recipe_runs_on_a_local_file(tiny_model_dir, tmp_path):
    rows = [{"question": f"Tom has {i} apples and buys 2. How many?", "answer": f"{i} + 2 = {i + 2}\n#### {i + 2}"}
            for i in range(20)]
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = REPO / "configs" / "recipes" / "gsm8k_t4.yaml"
    args = [*tiny(tiny_model_dir, tmp_path / "run"), "--path", str(data), "--report-to", "none"]
    assert cli.main(["train", "--config", str(recipe), *args]) == 0


def test_command_line_wins_print_config_and_the_written_recipe_runs_again(tiny_model_dir, tmp_path, capsys):
    rewards = tmp_path / "mine.py"
    rewards.write_text("def short(prompts, completions, **kw):\n"
                       "    return [1.0 - min(len(c), 50) / 50 for c in completions]\n")
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps({"q": f"Say {i}.", "a": str(i)}) + "\n" for i in range(20)))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"model": str(tiny_model_dir), "task": "file", "path": "task.jsonl",
                                      "prompt_column": "q", "answer_column": "a", "reward": ["mine.py:short:0.5"],
                                      "preset": "cpu", "max_steps": 5, "beta": 0.1, "logging_steps": 1,
                                      "system_prompt": "Be brief."}))
    assert read_recipe(recipe)["path"] == str(task)  # relative to the recipe, not to the working directory
    out = tmp_path / "run"
    assert cli.main(["train", "--config", str(recipe), "--max-steps", "2", "--print-config", "--output-dir",
                     str(out)]) == 0
    shown = capsys.readouterr().out
    assert "max_steps: 2" in shown and "beta: 0.1" in shown and "logging_steps: 1" in shown
    assert "# num_generations: 4" in shown and not out.exists()  # printed, nothing run
    small = ["--batch-size", "4", "--num-generations", "2", "--max-completion-length", "8", "--n-test", "4",
             "--preflight-prompts", "0"]
    assert cli.main(["train", "--config", str(recipe), "--max-steps", "2", "--output-dir", str(out), *small]) == 0
    written = yaml.safe_load((out / "recipe.yaml").read_text())
    assert written["max_steps"] == 2 and written["beta"] == 0.1 and written["reward"] == [f"{rewards}:short:0.5"]
    assert written["logging_steps"] == 1 and written["system_prompt"] == "Be brief."
    again = tmp_path / "again"
    assert cli.main(["train", "--config", str(out / "recipe.yaml"), "--output-dir", str(again)]) == 0
    assert yaml.safe_load((again / "recipe.yaml").read_text()) == {**written, "output_dir": str(again)}


def test_a_misspelt_recipe_key_is_refused_with_the_near_name(tiny_model_dir, tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: smollm2-135m\nlerning_rate: 0.001\n")
    assert cli.main(["train", "--config", str(recipe), "--output-dir", str(tmp_path / "o")]) == 2
    assert "did you mean 'learning_rate'" in capsys.readouterr().err
    assert cli.main(["train", "--config", str(tmp_path / "none.yaml")]) == 2


def test_tensorboard_events_hold_rlo_metrics(tiny_model_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "tb"
    assert cli.main(["train", *tiny(tiny_model_dir, out), "--report-to", "tensorboard"]) == 0
    files = list(out.rglob("events.out.tfevents.*"))
    assert files, "no TensorBoard event file written"
    tags = set()
    for f in files:
        acc = EventAccumulator(str(f))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    wanted = {"train/reward", "train/kl", "train/frac_task_reward_zero_std", "train/rewards/correct_answer/mean"}
    assert wanted <= tags, sorted(tags)


def test_functions_in_files_are_read_beside_the_recipe(tmp_path, monkeypatch):
    """A recipe's reward and tool files (PATH.py:NAME) are found beside the recipe, wherever the command runs."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "mine.py").write_text("def f(prompts, completions, **kw):\n    return [0.0] * len(completions)\n")
    recipe = folder / "r.yaml"
    recipe.write_text("reward: mine.py:f:0.5\ntools: [calculator, mine.py:f]\n")
    monkeypatch.chdir(tmp_path)
    read = read_recipe(recipe)
    assert read["reward"] == [f"{folder / 'mine.py'}:f:0.5"]
    assert read["tools"] == ["calculator", f"{folder / 'mine.py'}:f"]


def test_print_config_shows_the_learning_rate_as_asked_and_the_small_model_rule_when_not(tmp_path, capsys):
    """--learning-rate is the rate trained at, on any preset; without it, a GPU preset's 5e-5 is printed with the
    note that a model under 0.2B parameters trains at 4e-4."""
    args = ["train", "--task", "arithmetic", "--preset", "8gb", "--print-config", "--output-dir", str(tmp_path / "r")]
    assert cli.main([*args, "--learning-rate", "1e-4"]) == 0
    shown = capsys.readouterr().out
    assert "# learning_rate: 0.0001" in shown and "learning_rate_for" not in shown
    assert cli.main(args) == 0
    shown = capsys.readouterr().out
    assert "# learning_rate: 5e-05" in shown and "(learning_rate 0.0004 instead for a model under 0.2B" in shown


def test_an_adapter_brings_the_task_and_held_out_split_it_was_trained_on(tmp_path):
    """What eval and export --verify read when no task is named: the run's recipe, task options only."""
    data = tmp_path / "mine.jsonl"
    data.write_text('{"question": "q", "reply": "r"}\n')
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text(yaml.safe_dump({
        "model": "smollm2-135m", "task": "file", "path": str(data), "prompt_column": "question",
        "answer_column": "reply", "seed": 3, "n_test": 5, "max_steps": 30, "beta": 0.1}))
    assert trained_task(run / "adapter") == {"task": "file", "path": str(data), "prompt_column": "question",
                                             "answer_column": "reply", "n_test": 5, "seed": 3}
    assert trained_task(tmp_path / "elsewhere" / "adapter") == {}
    # as eval and export --verify load it: the recorded options, those given winning; a task given is evaluated
    # as given, on the default split
    assert eval_task_options(run / "adapter") == {"name": "file", "path": str(data), "prompt_column": "question",
                                                 "answer_column": "reply", "n_test": 5, "seed": 3}
    moved = eval_task_options(run / "adapter", path="here/mine.jsonl", n_test=2, encoding=None)
    assert (moved["path"], moved["n_test"], moved["seed"], moved["prompt_column"]) == ("here/mine.jsonl", 2, 3,
                                                                                       "question")
    assert eval_task_options(run / "adapter", task="arithmetic") == {"name": "arithmetic", "seed": 0, "n_test": None}
