"""Bad input to `rloo-kit train` is refused in one line before any model weights load, and nothing is
written under the run's names. Loading is replaced by a tripwire, so each case proves the order."""

import json

import pytest

import rloo_kit.cli as cli
import rloo_kit.models


@pytest.fixture
def tripwire(monkeypatch):
    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(rloo_kit.models, "load_model", loaded)


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def good_rows(n=20):
    return [{"prompt": f"Write {i} in digits.", "answer": str(i)} for i in range(n)]


def refuse(capsys, tmp_path, tiny_model_dir, *args, model=None) -> str:
    out = tmp_path / "run"
    code = cli.main(["train", "--model", str(model or tiny_model_dir), "--preset", "cpu", "--output-dir", str(out),
                     *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("rloo-kit: "), err  # one line, the kit's own
    assert not (out / "metrics.json").exists() and not (out / "adapter").exists()
    return err[0]


def test_a_directory_without_a_model(tripwire, capsys, tmp_path, tiny_model_dir):
    (tmp_path / "empty").mkdir()
    line = refuse(capsys, tmp_path, tiny_model_dir, model=tmp_path / "empty")
    assert "without a model in it" in line and "smollm2-135m" in line


def test_a_hub_id_without_a_hub(tripwire, capsys, tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(rloo_kit.sources, "hub_reachable", lambda *a, **k: False)
    line = refuse(capsys, tmp_path, tiny_model_dir, model="SomeOrg/not-cached-model")
    assert "cannot be reached" in line and "--model ./dir" in line


def test_keeping_the_last_step_of_a_time_budget(tripwire, capsys, tmp_path, tiny_model_dir):
    line = refuse(capsys, tmp_path, tiny_model_dir, "--minutes", "5", "--keep", "last")
    assert "a time budget always ends with its best validation step" in line and "--max-steps N --keep last" in line


def test_keeping_the_best_step_of_a_task_too_small_to_set_rows_apart(tripwire, capsys, tmp_path, tiny_model_dir):
    path = write_jsonl(tmp_path / "three.jsonl", good_rows(3))
    line = refuse(capsys, tmp_path, tiny_model_dir, "--task", "file", "--path", path, "--n-test", "2", "--keep", "best")
    assert "--keep best chooses the step" in line and "1 training row(s)" in line, line


def test_a_file_in_another_encoding(tripwire, capsys, tmp_path, tiny_model_dir):
    path = tmp_path / "latin.jsonl"
    path.write_bytes("".join(json.dumps(r) + "\n" for r in good_rows(5)).encode()
                     + '{"prompt": "caf\xe9?", "answer": "1"}\n'.encode("latin-1"))
    line = refuse(capsys, tmp_path, tiny_model_dir, "--task", "file", "--path", str(path))
    assert "line 6 is not utf-8: byte 0xe9" in line and "--encoding latin-1" in line


def test_a_warm_start_no_tool_can_demonstrate_is_refused_before_the_model_loads(tripwire, capsys, tmp_path,
                                                                                 tiny_model_dir):
    """The fix `tool_unused` prints needs a `demonstrate`; without one the run stops before loading, not after
    the pre-flight has sampled."""
    tools = tmp_path / "letters.py"
    tools.write_text('def count_letter(word: str, letter: str) -> int:\n'
                     '    """How often a letter is in a word.\n\n    Args:\n        word: the word.\n'
                     '        letter: the letter.\n    """\n    return word.count(letter)\n')
    path = write_jsonl(tmp_path / "ok.jsonl", good_rows())
    line = refuse(capsys, tmp_path, tiny_model_dir, "--task", "file", "--path", path, "--tools",
                  f"{tools}:count_letter", "--tool-warm-start", "8")
    assert "`count_letter.demonstrate = my_function`" in line
    assert not (tmp_path / "run").exists()


def test_a_warm_start_without_tools_is_refused(tripwire, capsys, tmp_path, tiny_model_dir):
    line = refuse(capsys, tmp_path, tiny_model_dir, "--tool-warm-start", "5")
    assert "--tool-warm-start 5" in line and "add --tools" in line
    assert not (tmp_path / "run").exists()
    preflight = ["preflight", "--model", str(tiny_model_dir), "--tools", "calculator", "--tool-warm-start", "5"]
    assert cli.main(preflight) == 2
    assert "judges the model as it is" in capsys.readouterr().err  # the pre-flight warms nothing up


def test_a_utf8_byte_order_mark_is_accepted():
    import tempfile
    from pathlib import Path

    from rloo_kit.data import load_local

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bom.csv"
        path.write_text("prompt,answer\nHow many legs has a cat?,4\nAnd a bird?,2\n", encoding="utf-8-sig")
        data = load_local(str(path), answer_column="answer")
    assert data["answer"] == ["4", "2"] and data[0]["prompt"][-1]["content"] == "How many legs has a cat?"


def test_a_malformed_jsonl_line_is_named(tripwire, capsys, tmp_path, tiny_model_dir):
    path = tmp_path / "broken.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in good_rows(30)) + '{"prompt": "x", "answer": 1,}\n')
    line = refuse(capsys, tmp_path, tiny_model_dir, "--task", "file", "--path", str(path))
    assert "line 31 is not valid JSON" in line


def test_null_and_empty_answers_are_refused_not_scored_as_none(tripwire, capsys, tmp_path, tiny_model_dir):
    rows = good_rows() + [{"prompt": "What is nothing?", "answer": None}]
    line = refuse(capsys, tmp_path, tiny_model_dir, "--task", "file", "--path", write_jsonl(tmp_path / "n.jsonl", rows))
    assert "line 21 has no usable 'answer' (it is None)" in line
    rows = good_rows() + [{"prompt": "  ", "answer": "1"}]
    line = refuse(capsys, tmp_path, tiny_model_dir, "--task", "file", "--path", write_jsonl(tmp_path / "e.jsonl", rows))
    assert "line 21 has no 'prompt'" in line


@pytest.mark.parametrize(("args", "words"), [
    (["--max-steps", "0"], "--max-steps 0"),
    (["--preflight-prompts", "-1"], "--preflight-prompts -1"),
    (["--num-generations", "1"], "--num-generations 1"),
    (["--batch-size", "3", "--num-generations", "2"], "3"),
])
def test_settings_that_cannot_work(tripwire, capsys, tmp_path, tiny_model_dir, args, words):
    assert words in refuse(capsys, tmp_path, tiny_model_dir, *args)


def test_unknown_preset(tripwire, capsys, tmp_path, tiny_model_dir):
    code = cli.main(["train", "--model", str(tiny_model_dir), "--preset", "nope", "--output-dir", str(tmp_path / "r")])
    assert code == 2 and "nope" in capsys.readouterr().err


def test_an_output_dir_that_is_a_file_or_holds_a_run(tripwire, capsys, tmp_path, tiny_model_dir):
    (tmp_path / "file").write_text("x")
    code = cli.main(["train", "--model", str(tiny_model_dir), "--output-dir", str(tmp_path / "file")])
    assert code == 2 and "is a file" in capsys.readouterr().err
    done = tmp_path / "done"
    done.mkdir()
    (done / "metrics.json").write_text("{}")
    code = cli.main(["train", "--model", str(tiny_model_dir), "--output-dir", str(done)])
    err = capsys.readouterr().err
    assert code == 2 and "--resume" in err and "--overwrite" in err
    assert (done / "metrics.json").read_text() == "{}"  # untouched


def test_a_reward_file_is_checked_on_rows_before_loading(tripwire, capsys, tmp_path, tiny_model_dir):
    rewards = tmp_path / "mine.py"
    rewards.write_text("def short(prompts, completions, **kw):\n    return [1.0]\n"
                       "def fine(prompts, completions, **kw):\n    return [0.5] * len(completions)\n")
    line = refuse(capsys, tmp_path, tiny_model_dir, "--reward", f"{rewards}:short")
    assert "returned 1 values for 4 completions" in line
    assert "has no function 'nope'" in refuse(capsys, tmp_path, tiny_model_dir, "--reward", f"{rewards}:nope")
    assert "not a file on this machine" in refuse(capsys, tmp_path, tiny_model_dir, "--reward",
                                                  "https://example.invalid/r.py:fn")


def test_a_preflight_of_no_prompts_is_refused(tripwire, capsys, tmp_path, tiny_model_dir):
    code = cli.main(["preflight", "--model", str(tiny_model_dir), "--preflight-prompts", "0"])
    assert code == 2 and "nothing to sample" in capsys.readouterr().err


def test_help_and_argument_errors_load_no_heavy_library():
    import subprocess
    import sys

    code = ("import sys, rloo_kit, rloo_kit.cli as cli\n"
            "try:\n    cli.main(['train', '--max-steps', 'abc'])\nexcept SystemExit as e:\n    assert e.code == 2\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'peft') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    assert "invalid int value: 'abc'" in done.stderr


BAD_NUMBERS = ("0", "-1", "nan", "1e12", "abc")
NUMERIC_OPTIONS = {  # command (with what it needs besides): its numeric options
    ("train", "--task", "arithmetic"): ("--max-steps", "--minutes", "--save-steps", "--batch-size", "--num-generations",
                                        "--max-completion-length", "--beta", "--temperature", "--learning-rate",
                                        "--lora-r", "--lora-alpha", "--n-test", "--preflight-prompts", "--seed",
                                        "--reward-model-weight", "--max-tool-calls",
                                        "--tool-warm-start"),
    ("preflight", "--task", "arithmetic"): ("--num-generations", "--max-completion-length", "--temperature",
                                            "--learning-rate", "--n-test", "--preflight-prompts"),
    ("eval", "--adapter", "no/adapter"): ("--n-test", "--samples", "--max-new-tokens", "--temperature"),
    ("train-rm", "--path", "prefs.jsonl"): ("--learning-rate", "--epochs", "--eval-fraction", "--max-length",
                                            "--lora-r", "--batch-size", "--seed"),
    ("export", "--adapter", "no/adapter", "--output", "x.gguf"): ("--n-test", "--max-new-tokens"),
}


@pytest.mark.parametrize(("command", "option"), [(c, o) for c, options in NUMERIC_OPTIONS.items() for o in options])
def test_every_number_out_of_range_is_refused_in_one_line_before_any_work(tripwire, capsys, tmp_path, command,
                                                                        option):
    """0, a negative, NaN, a huge value and a word, for every numeric option of every command: each one its range
    refuses ends in one line and exit 2, with no traceback and nothing written, and most of them are refused."""
    from rloo_kit.limits import LIMITS

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    action = next(a for a in commands.choices[command[0]]._actions if option in a.option_strings)
    refused = 0
    for value in BAD_NUMBERS:
        try:
            parsed = action.type(value)
        except ValueError:
            parsed = None  # argparse's own refusal: not a number of the option's kind
        if parsed is not None and LIMITS[action.dest].problem(parsed) is None:
            continue  # in range for this option (a seed of 0, a beta of 0): nothing to refuse
        out = tmp_path / f"run{refused}"
        try:
            code = cli.main([*command, "--output-dir", str(out), option, value] if command[0] in ("train", "train-rm")
                            else [*command, option, value])
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and option in err[0] and "Traceback" not in err[0], (value, err)
        assert not out.exists()
        refused += 1
    assert refused >= 3


def test_a_recipes_numbers_are_checked_like_the_options(tripwire, capsys, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    for text, words in (("learning_rate: -1\n", "--learning-rate -1"), ("max_steps: ten\n", "invalid int value: 'ten'"),
                        ("lora_r: [16]\n", "--lora-r [16]: is not a number (list)"), ("min_p: 2\n", "min_p 2"),
                        ("top_p: .nan\n", "top_p nan")):
        recipe.write_text(text)
        try:
            code = cli.main(["train", "--config", str(recipe), "--output-dir", str(tmp_path / "run")])
        except SystemExit as e:  # argparse converts a recipe's text as it converts the command line's
            code = e.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and words in err[0], (text, err)
        assert not (tmp_path / "run").exists()


def test_the_api_refuses_the_same_numbers():
    from rloo_kit.errors import ConfigError
    from rloo_kit.presets import make_config

    with pytest.raises(ConfigError, match=r"learning_rate -1: give a number > 0"):
        make_config("cpu", learning_rate=-1)
