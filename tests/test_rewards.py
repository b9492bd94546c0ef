import json
import math

import pytest

from rloo_kit import RewardError
from rloo_kit.data import gold_answer
from rloo_kit.rewards import brevity, combine, correct_answer, extract_answer, required_columns, safe, tag_format

from .conftest import SHARED_GSM8K


@pytest.mark.parametrize("text,expected", [
    ("She pays 5 + 3 = 8 dollars.\n#### 8", "8"),
    ("so the total is \\boxed{1,234}", "1,234"),
    ("<think>2+2</think><answer> 4 </answer>", "4"),
    ("The answer is $18.00.", "$18.00"),
    ("Answer: -7", "-7"),
    ("12 + 7 = 19", "19"),
    ("no digits here", None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("completion,gold,score", [
    ("#### 1,000", "1000", 1.0), ("\\boxed{18}", "18.00", 1.0), ("The answer is 45%", "45", 1.0),
    ("9 - 12 = -3", "-3", 1.0), ("9 - 12 = 3", "-3", 0.0), ("$5", "5", 1.0), ("I don't know", "5", 0.0),
    ("<answer>0.5</answer>", "0.50", 1.0), ("The answer is 17", "71", 0.0),
])
def test_correct_answer_formats(completion, gold, score):
    assert correct_answer(prompts=["q"], completions=[completion], answer=[gold]) == [score]


def test_correct_answer_reads_chat_messages():
    completions = [[{"role": "assistant", "content": "3 + 4 = 7"}], [{"role": "assistant", "content": "8"}]]
    assert correct_answer(prompts=["a", "b"], completions=completions, answer=["7", "7"]) == [1.0, 0.0]


@pytest.mark.skipif(not SHARED_GSM8K.exists(), reason="shared GSM8K data not beside the checkout")
def test_every_gsm8k_solution_scores_its_own_gold_answer():
    rows = [json.loads(line) for line in SHARED_GSM8K.read_text().splitlines()]
    solutions = [r["answer"] for r in rows]
    golds = [gold_answer(s) for s in solutions]
    assert len(rows) > 7000
    assert correct_answer(prompts=[""] * len(rows), completions=solutions, answer=golds) == [1.0] * len(rows)
    wrong = [str(float(g) + 1) for g in golds]
    assert correct_answer(prompts=[""] * len(rows), completions=solutions, answer=wrong) == [0.0] * len(rows)


def test_gsm8k_style_solutions_without_shared_data():
    sols = ["Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "It costs $1,250 in total.\n#### 1,250"]
    golds = [gold_answer(s) for s in sols]
    assert golds == ["72", "1250"]
    assert correct_answer(prompts=["", ""], completions=sols, answer=golds) == [1.0, 1.0]


def test_tag_format_and_brevity():
    fmt = tag_format(("think", "answer"))
    assert fmt(prompts=["", ""], completions=["<think>x</think><answer>1</answer>", "<answer>1</answer>"]) == [1.0, 0.5]
    assert fmt.__name__ == "format_think_answer"
    short, long = brevity(max_chars=10)(prompts=["", ""], completions=["7", "x" * 30])
    assert short == pytest.approx(0.9) and long == 0.0


def test_combine_weights_and_required_columns():
    both = combine((correct_answer, 1.0), (brevity(max_chars=10), 0.5))
    assert required_columns(both) == {"answer"}
    assert both(prompts=[""], completions=["7"], answer=["7"]) == [pytest.approx(1.0 + 0.45)]


def test_required_columns_reads_the_signature():
    def needs(prompts, completions, answer, difficulty, **kwargs):
        return [0.0] * len(completions)

    assert required_columns(needs) == {"answer", "difficulty"}
    assert required_columns(brevity()) == set()


def flaky(prompts, completions, **kwargs):
    if any(c == "boom" for c in completions):
        raise ZeroDivisionError("boom")
    return [float("nan") if c == "nan" else math.inf if c == "inf" else "x" if c == "str" else 1.0
            for c in completions]


def test_safe_turns_bad_samples_into_none_and_counts_them():
    guarded = safe(flaky)
    out = guarded(prompts=[""] * 5, completions=["ok", "boom", "nan", "inf", "str"])
    assert out == [1.0, None, None, None, None]
    assert guarded.failures == {"raised": 1, "NaN/inf": 2, "not a number": 1}
    guarded(prompts=[""], completions=["boom"])
    assert guarded.failures["raised"] == 2


def test_safe_strict_raises():
    with pytest.raises(RewardError, match="flaky"):
        safe(flaky, strict=True)(prompts=["", ""], completions=["ok", "boom"])
    with pytest.raises(RewardError, match="NaN/inf"):
        safe(flaky, strict=True)(prompts=[""], completions=["nan"])


def test_wrong_length_is_always_an_error():
    def short(prompts, completions, **kwargs):
        return [1.0]

    with pytest.raises(RewardError, match="returned 1 values for 3 completions"):
        safe(short)(prompts=[""] * 3, completions=["a", "b", "c"])
