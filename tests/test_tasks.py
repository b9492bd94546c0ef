"""Tasks own their data, rewards, matching and length; "auto" resolves the same way everywhere."""

import json

import pytest

import rloo_kit
from rloo_kit import DataError
from rloo_kit.hardware import Hardware
from rloo_kit.tasks import plan_run

CPU = Hardware("cpu", "test cpu", 24.0, 20.0, False, 2)
GPU = Hardware("cuda", "24 GiB GPU", 23.6, 23.0, True, 8)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_auto_is_resolved_from_the_hardware():
    cpu = plan_run(hardware=CPU)
    assert (cpu.model, cpu.task, cpu.preset.name) == ("smollm2-135m", "arithmetic", "cpu")
    gpu = plan_run(hardware=GPU)
    assert (gpu.model, gpu.task, gpu.preset.name) == ("Qwen/Qwen2.5-0.5B-Instruct", "gsm8k", "24gb")
    named = plan_run("my/model", "file", "8gb", hardware=GPU)
    assert (named.model, named.task, named.preset.name) == ("my/model", "file", "8gb")
    with pytest.raises(DataError, match="Unknown task 'maths'"):
        plan_run(task="maths", hardware=CPU)


def test_the_arithmetic_task_carries_its_scoring():
    task = rloo_kit.load_task("arithmetic", n_train=10, n_test=5)
    assert [f.__name__ for f in task.reward_funcs] == ["correct_answer", "brevity"]
    assert task.trainer_overrides() == {"reward_weights": [1.0, 0.2], "max_completion_length": 16}
    assert task.for_preset("24gb").max_completion_length == 16  # its own length wins over the preset's


def test_a_file_task_with_word_answers(tmp_path):
    rows = [{"question": f"Opposite of w{i}?", "reply": ["cold", "chilly"] if i % 2 else "warm"} for i in range(12)]
    path = write_jsonl(tmp_path / "own.jsonl", rows)
    task = rloo_kit.load_task("file", path=path, n_test=4, prompt_column="question", answer_column="reply")
    assert len(task.train) == 8 and len(task.test) == 4 and task.max_completion_length is None
    assert task.for_preset("cpu").max_completion_length == 16  # an open length takes the preset's
    assert task.train[0]["prompt"][-1]["role"] == "user"
    answers = list(task.train["answer"]) + list(task.test["answer"])
    assert ["cold", "chilly"] in answers and ["warm"] in answers  # a list stays a list; a text beside lists is one


@pytest.mark.parametrize("rows,held_out", [(60, 12), (250, 50), (1000, 50), (4, 1)])
def test_a_small_file_holds_out_a_fifth_by_default(tmp_path, rows, held_out):
    path = write_jsonl(tmp_path / "own.jsonl", [{"prompt": f"q{i}", "answer": str(i)} for i in range(rows)])
    task = rloo_kit.load_task("file", path=path)
    assert (len(task.train), len(task.test)) == (rows - held_out, held_out)


def test_a_label_file_holds_out_each_label_in_its_share_of_the_rows(tmp_path):
    """A true-or-false file (40 of each in 80 rows) held out 12 'false' of 16 drawn from all rows at once: a change of
    favourite label then reads as a gain or a loss. Each label is held out in its share, test and validation alike;
    three labels of 30, 30 and 20 rows give 6, 6 and 4 of 16."""
    rows = [{"q": f"Is {i} + 1 = {i + 1 + i % 2}?", "a": ["true", "false"][i % 2]} for i in range(80)]
    task = rloo_kit.load_task("file", path=write_jsonl(tmp_path / "tf.jsonl", rows), prompt_column="q",
                              answer_column="a")
    assert sorted(task.test["answer"]) == ["false"] * 8 + ["true"] * 8
    carved = task.carve_validation(seed=0)
    assert sorted(carved.validation["answer"]) == ["false"] * 6 + ["true"] * 6
    assert len(carved.train) == 52 and sorted(set(carved.train["answer"])) == ["false", "true"]
    assert not {p[-1]["content"] for p in task.test["prompt"]} & {p[-1]["content"] for p in task.train["prompt"]}
    again = rloo_kit.load_task("file", path=write_jsonl(tmp_path / "tf.jsonl", rows), prompt_column="q",
                               answer_column="a")
    assert again.test["prompt"] == task.test["prompt"]  # the seed's draw, every time
    three = [{"q": f"Which {i}?", "a": "red" if i < 30 else "blue" if i < 60 else "green"} for i in range(80)]
    task = rloo_kit.load_task("file", path=write_jsonl(tmp_path / "rgb.jsonl", three), prompt_column="q",
                              answer_column="a")
    assert sorted(task.test["answer"]) == ["blue"] * 6 + ["green"] * 4 + ["red"] * 6


def test_a_choice_file_holds_out_each_place_of_its_answer_in_its_share_of_the_rows(tmp_path):
    """A larger-number file drew the larger first in 15 of 24 held-out rows and in 6 of 19 validation rows, so a
    habit of the first place read as a gain held out and a loss on validation. The answer's place is held out in its
    share: 48 of 80 rows offering it first give 10 of 16 held out, and 7 of 12 validation rows."""
    rows = [{"q": f"Which number is larger, {a} or {b}?", "a": str(max(a, b))}
            for i in range(80) for a, b in [(20 + i, 10 + i) if i % 5 < 3 else (10 + i, 20 + i)]]
    task = rloo_kit.load_task("file", path=write_jsonl(tmp_path / "larger.jsonl", rows), prompt_column="q",
                              answer_column="a")

    def first(split) -> int:
        return sum(row["choices"][0] == row["answer"] for row in split)

    assert "choices" in task.test.column_names and (len(task.test), first(task.test)) == (16, 10)
    carved = task.carve_validation(seed=3)
    assert (len(carved.validation), first(carved.validation)) == (12, 7)
    assert (len(carved.train), first(carved.train)) == (52, 31)


@pytest.mark.parametrize("content,n_test,match", [
    ("", 50, "is empty"),
    ('{"prompt": "a", "answer": "1"}\n' * 10, 50, r"10 row\(s\).*--n-test"),
    ('{"question": "a", "answer": "1"}\n' * 10, 2, "--prompt-column"),
])
def test_file_problems_are_clear_errors(tmp_path, content, n_test, match):
    path = tmp_path / "task.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=match):
        rloo_kit.load_task("file", path=str(path), n_test=n_test)


def test_a_file_task_needs_a_path():
    with pytest.raises(DataError, match="--path"):
        rloo_kit.load_task("file")


def test_evaluation_uses_the_tasks_length(tiny_model_dir):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    model = rloo_kit.attach_lora(model, r=4, alpha=8)
    task = rloo_kit.load_task("arithmetic", n_train=8, n_test=3).replace(max_completion_length=5)
    report = task.evaluate(model, tok)
    assert max(row["tokens"] for row in report.completions) <= 5 and report.accuracy is not None
    base, tuned = task.evaluate_base_and_adapter(model, tok)
    assert [r["completion"] for r in base.completions] == [r["completion"] for r in tuned.completions]  # B = 0


def test_a_file_task_never_holds_out_a_prompt_it_trains_on(tmp_path):
    import json

    rows = [{"prompt": f"Question {i % 30}?", "answer": str(i % 30)} for i in range(60)]
    rows += [{"prompt": f"  question {i}?  ".upper(), "answer": str(i)} for i in range(30)]  # the same, reworded
    path = tmp_path / "dupes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = rloo_kit.load_task("file", path=str(path), n_test=10)

    def key(p):
        return " ".join(p[-1]["content"].lower().split())

    held_out = {key(p) for p in task.test["prompt"]}
    assert not held_out & {key(p) for p in task.train["prompt"]}
    assert len(task.train) == sum(" ".join(r["prompt"].lower().split()) not in held_out for r in rows)  # the rest stay


def test_prompts_too_long_for_the_preset_are_left_out_and_counted(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    task = rloo_kit.load_task("arithmetic", n_train=20, n_test=4)
    long_row = {"prompt": [{"role": "user", "content": "word " * 5000}], "answer": "1"}
    task = task.replace(train=task.train.add_item(long_row), test=task.test.add_item(long_row))
    kept, dropped = task.without_long_prompts(tok, 200)
    assert dropped == 2 and len(kept.train) == 20 and len(kept.test) == 4
    with pytest.raises(rloo_kit.DataError, match="longer than 5 tokens"):
        task.without_long_prompts(tok, 5)
