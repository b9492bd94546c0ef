import json
import re
import subprocess
import sys

import pytest
import tomllib
import yaml

from rloo_kit.cli import main

from .conftest import REPO


def test_environment_yml_is_valid_and_installs_the_package():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    assert env["name"] == "rloo-kit" and "conda-forge" in env["channels"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(p.startswith("-e .") for p in pip)


def test_pyproject_script_extras_and_unsloth_compatible_ranges():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["scripts"]["rloo-kit"] == "rloo_kit.cli:main"
    assert {"unsloth", "notebooks", "dev"} <= set(meta["optional-dependencies"])
    deps = {re.split(r"[<>=!; ]", d)[0]: d for d in meta["dependencies"]}
    assert "<=5.17.0" in deps["transformers"] and "<=1.15.0" in deps["trl"] and "<5" in deps["datasets"]


def test_readme_names_the_two_commands_first():
    readme = (REPO / "README.md").read_text()
    first_block = readme.split("```")[1]
    assert re.findall(r"^make (\w+)", first_block, re.M) == ["demo", "test"]
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_version_is_one_number_in_the_package_the_metadata_and_the_command(capsys):
    import importlib.metadata

    import rloo_kit

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert rloo_kit.__version__ == declared == importlib.metadata.version("rloo-kit")
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"rloo-kit {declared}"
    assert f"## {declared}" in (REPO / "CHANGELOG.md").read_text() and (REPO / "LICENSE").is_file()


def test_every_option_of_every_command_says_what_it_does_and_its_default():
    import argparse

    from rloo_kit.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        help_text = " ".join(sub.format_help().split())
        for action in sub._actions:
            assert action.help, (name, action.option_strings or action.dest)
            if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
                assert "default" in action.help.lower() or f"(default: {action.default})" in help_text, (
                    name, action.option_strings)


def test_doctor(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for field in ("trl", "device", "hub reachable", "default model", "preset it would pick"):
        assert field in out


def test_presets_table_with_model_estimate(capsys):
    assert main(["presets", "--model", "1.5B"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("cpu", "8gb", "t4-16gb", "24gb", "40gb", "80gb"))
    assert "estimate" in out and "GiB" in out and "*" not in out


def test_presets_table_shows_what_a_small_model_trains_with(capsys):
    """A 135M model loads unquantized and trains at 4e-4 under every GPU preset: the table says so, not the preset's
    4-bit and 5e-5."""
    assert main(["presets", "--model", "135M"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("8gb")}
    assert rows["8gb"][4] == "no*" and rows["8gb"][10] == "0.0004*"  # "8 GiB" is two words


def test_bad_input_is_a_clear_error_and_exit_code():
    """Refused before TRL and PEFT are imported: those imports alone took 10 s on a 2-core CPU."""
    code = ("import sys\nfrom rloo_kit.cli import main\n"
            "code = main(['train', '--preset', '16gb', '--model', 'smollm2-135m'])\n"
            "print(code, sorted(m for m in ('trl', 'peft') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["2", "[]"], done.stdout + done.stderr[-2000:]
    assert "Unknown preset '16gb'" in done.stderr and "t4-16gb" in done.stderr


def opposites_file(tmp_path, n: int = 12):
    rows = [{"question": f"What is the opposite of 'w{i}'?", "reply": "cold"} for i in range(n)]
    path = tmp_path / "own.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tiny_train(tiny_model_dir, out, path, *extra):
    return ["train", "--model", str(tiny_model_dir), "--preset", "cpu", "--task", "file", "--path", str(path),
            "--prompt-column", "question", "--answer-column", "reply", "--n-test", "4", "--output-dir", str(out),
            "--max-steps", "2", "--batch-size", "4", "--num-generations", "2", "--preflight-prompts", "6", *extra]


@pytest.mark.heavy
def test_train_stops_before_a_run_that_cannot_learn(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A random model never says 'cold': the pre-flight sees no spread, and nothing is trained. Its samples are noise
    that seldom ends, so the cause named first is reward_collapse or truncation, by how often the noise happens to
    end (the bf16 and fp32 CPU paths sample it differently). A resume is no way round it: refused again before the
    model loads (on the command line) or before a step trains (`pipeline.run`, the notebook's), unless forced."""
    import rloo_kit.models
    from rloo_kit.pipeline import Run
    from rloo_kit.tasks import plan_run
    out = tmp_path / "run"
    assert main(tiny_train(tiny_model_dir, out, opposites_file(tmp_path))) == 3
    captured = capsys.readouterr()
    assert "verdict: cannot learn" in captured.out and "Not trained" in captured.err and "--force" in captured.err
    m = json.loads((out / "metrics.json").read_text())
    assert m["trained"] is False and m["steps"] == 0 and m["accuracy_after"] == m["accuracy_before"] == 0.0
    assert m["preflight"]["problems"][0] in ("reward_collapse", "truncation") and not m["preflight"]["ok"]
    assert m["preflight"]["blocking"][0] in captured.err and not (out / "adapter").exists()

    load_model = rloo_kit.models.load_model
    with monkeypatch.context() as patched:
        patched.setattr(rloo_kit.models, "load_model", lambda *a, **k: pytest.fail("a refused run loaded its model"))
        assert main(tiny_train(tiny_model_dir, out, opposites_file(tmp_path), "--resume")) == 3
    captured = capsys.readouterr()
    assert "first attempt's pre-flight" in captured.out and "--overwrite" in captured.out and "Fix:" in captured.out
    assert "--force" in captured.err
    assert not json.loads((out / "metrics.json").read_text())["trained"] and not (out / "adapter").exists()
    model, tok = load_model(str(tiny_model_dir), preset="cpu")
    resumed = Run(plan_run(str(tiny_model_dir), "file", "cpu"), rloo_kit.load_task(
        "file", path=opposites_file(tmp_path), prompt_column="question", answer_column="reply", n_test=4), model, tok,
        output_dir=out)
    resumed.refit()
    assert resumed.cannot_learn() and not resumed.cannot_learn(force=True)
    assert main(tiny_train(tiny_model_dir, out, opposites_file(tmp_path), "--resume", "--force")) == 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == 2 and (out / "adapter").is_dir()


@pytest.mark.heavy
def test_train_round_trip_writes_metrics_and_one_adapter(tiny_model_dir, tmp_path, capsys, monkeypatch):
    from transformers import Trainer

    saves = []
    real_save = Trainer.save_model
    monkeypatch.setattr(Trainer, "save_model", lambda self, output_dir=None, **kw: (
        saves.append(output_dir), real_save(self, output_dir, **kw))[1])
    out = tmp_path / "run"
    assert main(tiny_train(tiny_model_dir, out, opposites_file(tmp_path), "--force")) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["trained"] and m["steps"] == 2 and m["task"] == "file"
    assert m["accuracy_before"] == 0.0 and m["accuracy_after"] is not None
    assert m["max_completion_length"] >= 16 and m["before"]["accuracy"] == m["accuracy_before"]
    assert [s for s in saves if str(s).endswith("adapter")] == [str(out / "adapter")]  # written once
    assert "held-out accuracy: before 0.00 -> after" in capsys.readouterr().out
    assert main(["eval", "--adapter", str(out / "adapter"), "--model", str(tiny_model_dir), "--task", "file",
                 "--path", str(opposites_file(tmp_path)), "--prompt-column", "question", "--answer-column", "reply",
                 "--n-test", "4", "--output", str(tmp_path / "eval.json")]) == 0
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    assert evaluated["adapter"]["accuracy"] == m["accuracy_after"]
    trained_at = m["config"]["temperature"]  # sampled as training sampled, beside the greedy answers
    assert m["sampled_before"] == {"temperature": trained_at, "samples": 2, "accuracy": m["sampled_before"]["accuracy"]}
    assert m["sampled_after"]["temperature"] == trained_at and 0 <= m["sampled_after"]["accuracy"] <= 1
    assert evaluated["sampled"]["temperature"] == trained_at and evaluated["sampled"]["samples"] == 4
    assert evaluated["paired"] == m["paired"] and m["paired"]["prompts"] == 4  # the same held-out prompts
    after = json.loads((out / "evaluation_after.json").read_text())["completions"]  # the answers, to read
    assert [a["completion"] for a in evaluated["answers"]["adapter"]] == [a["completion"] for a in after]
    assert len(after) == 4 and {"prompt", "completion", "answer", "correct"} <= set(after[0])
    # no task named: the one it trained on, its file, columns and held-out rows, from the recipe beside it
    assert main(["eval", "--adapter", str(out / "adapter"), "--model", str(tiny_model_dir), "--samples", "0",
                 "--output", str(tmp_path / "eval2.json")]) == 0
    assert "as trained" in capsys.readouterr().out
    again = json.loads((tmp_path / "eval2.json").read_text())["answers"]["adapter"]
    assert [a["prompt"] for a in again] == [a["prompt"] for a in after] and again == evaluated["answers"]["adapter"]


@pytest.mark.parametrize("args,message", [
    (["eval", "--adapter", "no/such/adapter"], "No adapter in 'no/such/adapter'"),
    (["train", "--task", "file", "--path", "EMPTY"], "is empty"),
    (["train", "--task", "file", "--path", "SMALL", "--n-test", "50"], "--n-test"),
    (["train", "--task", "file", "--path", "SMALL", "--prompt-column", "q"], "no column 'q'"),
])
@pytest.mark.heavy
def test_bad_input_from_the_command_line_is_one_clear_line(tmp_path, args, message):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "small.jsonl").write_text('{"prompt": "a", "answer": "1"}\n' * 5)
    args = [str(tmp_path / "empty.jsonl") if a == "EMPTY" else str(tmp_path / "small.jsonl") if a == "SMALL" else a
            for a in args]
    done = subprocess.run([sys.executable, "-m", "rloo_kit.cli", *args], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.heavy
def test_help_says_what_a_file_needs_and_how_answers_match():
    done = subprocess.run([sys.executable, "-m", "rloo_kit.cli", "train", "--help"], capture_output=True, text=True)
    for phrase in ("--prompt-column", "--answer-column", "list of accepted", "whole words", "pre-flight"):
        assert phrase in done.stdout


def test_every_preset_field_says_why(capsys):
    import dataclasses

    from rloo_kit.presets import Preset

    for f in dataclasses.fields(Preset):
        assert len(f.metadata.get("help", "")) > 20, f"Preset.{f.name} has no help text"
    assert main(["presets", "--explain", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "max_completion_length = 16\n" in out and "learning_rate = 0.0004\n" in out
    assert out.count("\n    ") == len(dataclasses.fields(Preset))  # a why under every field
