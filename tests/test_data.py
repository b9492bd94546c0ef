import json
import re

import pytest
from datasets import Dataset

from rloo_kit import DataError, arithmetic_task, load_gsm8k, load_local
from rloo_kit.data import gold_answer, validate_dataset

from .conftest import SHARED_GSM8K


def question(row) -> str:
    return row["prompt"][-1]["content"]


def test_arithmetic_split_is_disjoint_deterministic_and_right():
    ds = arithmetic_task(n_train=500, n_test=40, seed=3, ops=("+", "-"), template="What is {a}{op}{b}?")
    assert len(ds["train"]) == 500 and len(ds["test"]) == 40
    assert {question(r) for r in ds["test"]}.isdisjoint({question(r) for r in ds["train"]})
    again = arithmetic_task(n_train=500, n_test=40, seed=3, ops=("+", "-"), template="What is {a}{op}{b}?")
    assert ds["test"]["answer"] == again["test"]["answer"]
    for row in ds["test"]:
        expr = question(row).split("What is ")[1].split("?")[0]
        assert str(eval(expr)) == row["answer"]
        assert row["prompt"][-1]["role"] == "user"


def test_arithmetic_default_wording_per_operator():
    ds = arithmetic_task(n_train=20, n_test=30, ops=("+", "-", "*"), seed=1)
    for row in ds["test"]:
        q = question(row)
        a, b = (int(x) for x in re.findall(r"\d+", q))
        expected = a + b if q.startswith("Add") else b - a if q.startswith("Subtract") else a * b
        assert q.startswith(("Add ", "Subtract ", "Multiply ")) and str(expected) == row["answer"], q


def test_arithmetic_difficulty_and_system_prompt():
    ds = arithmetic_task(n_train=50, n_test=10, max_operand=99, ops=("*",), system_prompt="Be brief.")
    assert ds["train"][0]["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert any(int(a) > 100 for a in ds["train"]["answer"])
    with pytest.raises(DataError, match="no training question"):
        arithmetic_task(n_test=1000, max_operand=3)


def test_gold_answer():
    assert gold_answer("... so 3 * 4 = 12\n#### 1,212") == "1212"
    with pytest.raises(DataError):
        gold_answer("no marker")


def test_load_gsm8k_from_a_local_jsonl(tmp_path):
    f = tmp_path / "mini.jsonl"
    f.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": f"work\n#### {i},000"}) for i in range(3)))
    ds = load_gsm8k(str(f))
    assert ds["answer"] == ["0000", "1000", "2000"]
    assert ds[0]["prompt"][0]["role"] == "system" and ds[0]["prompt"][1]["content"] == "q0"


@pytest.mark.skipif(not SHARED_GSM8K.exists(), reason="shared GSM8K data not beside the checkout")
def test_load_gsm8k_real_split():
    ds = load_gsm8k(str(SHARED_GSM8K), limit=100)
    assert len(ds) == 100 and ds[0]["answer"] == "72"


def test_load_gsm8k_unreachable_hub_id_says_what_to_do():
    with pytest.raises(DataError, match="file path"):
        load_gsm8k("no-such-org/no-such-dataset-xyz")


def test_load_local_maps_columns(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"q": "What is 2+2?", "gold": 4, "level": 1}) + "\n")
    ds = load_local(str(f), prompt_column="q", answer_column="gold")
    assert set(ds.column_names) == {"prompt", "answer", "level"} and ds[0]["answer"] == "4"
    with pytest.raises(DataError, match="no column 'question'"):
        load_local(str(f), prompt_column="question")


def test_validate_dataset_errors():
    with pytest.raises(DataError, match="no 'prompt' column"):
        validate_dataset(Dataset.from_dict({"question": ["a"]}))
    with pytest.raises(DataError, match="empty"):
        validate_dataset(Dataset.from_dict({"prompt": []}))
    with pytest.raises(DataError, match=r"\['answer'\]"):
        validate_dataset(Dataset.from_dict({"prompt": ["a"]}), {"answer"})


def test_the_arithmetic_test_split_shares_no_question_nor_its_commuted_twin_with_train():
    from rloo_kit.data import arithmetic_task

    for seed in (0, 1, 2):
        ds = arithmetic_task(seed=seed)

        test, train = (pairs(ds[split]) for split in ("test", "train"))
        assert len(ds["test"]) == 50 and len(test) == 50 and not test & train


def pairs(split) -> set[tuple[int, ...]]:
    """Each question's operands, sorted: a question and its commuted twin give the same pair."""
    return {tuple(sorted(map(int, re.findall(r"\d+", p[-1]["content"])))) for p in split["prompt"]}


def test_a_conversation_with_a_system_message_and_a_system_prompt_for_every_row(tmp_path):
    from rloo_kit.data import load_local

    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
             "label": 4},
            {"messages": [{"role": "user", "content": "3+3?"}], "label": 6}]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_local(str(path), prompt_column="messages", answer_column="label", system_prompt="Answer in digits.")
    assert data[0]["prompt"][0] == {"role": "system", "content": "Be brief."}  # a row's own system message stays
    assert data[1]["prompt"] == [{"role": "system", "content": "Answer in digits."},
                                 {"role": "user", "content": "3+3?"}]
    assert data["answer"] == ["4", "6"]
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
                                                                                "content": "x"}], "label": 1}) + "\n")
    with pytest.raises(DataError, match="ends with a 'assistant' message"):
        load_local(str(path), prompt_column="messages", answer_column="label")


def test_a_tab_separated_file_is_read_as_a_spreadsheet_exports_it(tmp_path):
    from rloo_kit.data import load_local

    path = tmp_path / "symbols.tsv"
    path.write_text("question\tsymbol\nWhat is the symbol of gold, the metal?\tAu\nAnd of iron?\tFe\n")
    data = load_local(str(path), prompt_column="question", answer_column="symbol")
    assert data["answer"] == ["Au", "Fe"]
    assert data[0]["prompt"][-1]["content"] == "What is the symbol of gold, the metal?"
    gsm8k = tmp_path / "gsm8k.tsv"  # GSM8K's own columns, read through datasets' csv builder
    gsm8k.write_text("question\tanswer\nTom has 3 apples, then 4 more. How many?\t3 + 4 = 7 #### 7\n")
    assert load_gsm8k(str(gsm8k))["answer"] == ["7"]
    (tmp_path / "symbols.csv").write_text(path.read_text())  # saved under the other name
    with pytest.raises(DataError, match="tab-separated .* name it .tsv"):
        load_local(str(tmp_path / "symbols.csv"), prompt_column="question", answer_column="symbol")
    (tmp_path / "symbols.txt").write_text(path.read_text())
    with pytest.raises(DataError, match=r"\.jsonl, \.json, \.csv, \.tsv or \.parquet"):
        load_local(str(tmp_path / "symbols.txt"), prompt_column="question", answer_column="symbol")


def test_labels_are_found_and_a_hedge_between_them_is_wrong(tmp_path):
    from rloo_kit.data import load_local
    from rloo_kit.rewards import correct_answer
    from rloo_kit.tasks import load_task

    path = tmp_path / "labels.csv"
    path.write_text("text,sentiment\n" + "".join(f"Review {i}: fine.,{'Positive' if i % 2 else 'negative'}\n"
                                                 for i in range(10)))
    data = load_local(str(path), prompt_column="text", answer_column="sentiment")
    assert data[0]["labels"] == ["negative", "positive"]
    task = load_task("file", path=str(path), prompt_column="text", answer_column="sentiment", n_test=2)
    assert task.answer_kind() == "labels negative, Positive: a reply that names two is wrong"  # as the file writes
    replies = ["It is positive.", "Positive or negative.", "negative", "Positive, not negative."]
    assert correct_answer([""] * 4, replies, answer=["Positive"] * 4, labels=[data[0]["labels"]] * 4) == [1.0, 0.0,
                                                                                                         0.0, 1.0]
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": i % 2}) + "\n" for i in range(10)))
    assert "labels" not in load_local(str(numbers), answer_column="answer").column_names  # numbers are no labels


def test_the_article_a_in_a_question_does_not_name_the_choice_a(tmp_path):
    """A question with the article 'a' names no choice A: naming A beside the answer B stays a hedge."""
    from rloo_kit.data import load_local
    from rloo_kit.rewards import correct_answer

    path = tmp_path / "letters.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Is a whale a fish? ({i})", "answer": "AB"[i % 2]}) + "\n"
                            for i in range(10)))
    data = load_local(str(path), answer_column="answer")
    assert data[1]["answer"] == "B" and data[1]["labels"] == ["a", "b"]
    assert correct_answer([""] * 3, ["B or A.", "B)", "B, not A."], answer=["B"] * 3,
                          labels=[data[1]["labels"]] * 3) == [0.0, 1.0, 1.0]  # a hedge; a pick; a pick and a denial


def test_many_repeated_names_are_labels_and_a_reply_may_restate_its_questions_subject(tmp_path):
    """19 month and day names, each the answer of several rows, are a label set: a reply that names the answer
    among other names is wrong (after training on a calendar task without this rule, 5 of the 8 held-out replies
    scored right did so), while one that restates the name its question asks about is right. A question that
    offers its answer among others keeps every label as a hedge."""
    from rloo_kit.data import load_local
    from rloo_kit.rewards import correct_answer
    from rloo_kit.tasks import load_task

    months = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
              "November", "December"]
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    rows = [{"question": f"Which {kind} comes {k} before {seq[i]}?", "name": seq[(i - k) % len(seq)]}
            for seq, kind in ((months, "month"), (days, "day")) for i in range(len(seq)) for k in (1, 2, 3)]
    rows.append({"question": "Is it Friday or Sunday that ends the week?", "name": "Sunday"})
    path = tmp_path / "calendar.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_local(str(path), prompt_column="question", answer_column="name")
    may = next(i for i, r in enumerate(rows) if r["question"] == "Which month comes 1 before May?")
    assert len(data[may]["labels"]) == 18 and "may" not in data[may]["labels"]  # the question's subject
    replies = ["The month before May is April.", "The month before May is March, not April.",
               "April, May or June."]
    assert correct_answer([""] * 3, replies, answer=["April"] * 3, labels=[data[may]["labels"]] * 3) == [1.0, 0.0,
                                                                                                         0.0]
    choice = data[-1]["labels"]
    assert len(choice) == 19 and correct_answer([""] * 2, ["Sunday or Friday.", "Sunday, not Friday."],
                                                answer=["Sunday"] * 2, labels=[choice] * 2) == [0.0, 1.0]
    task = load_task("file", path=str(path), prompt_column="question", answer_column="name", n_test=5)
    assert task.answer_kind().endswith("and 11 more: a reply that names two is wrong")


def test_a_question_that_offers_its_answer_in_the_other_spelling_offers_choices(tmp_path):
    """'animal or a color?' offers the label 'colour' among others: naming 'animal' beside it stays a hedge, as
    matching takes either spelling; denying it does not."""
    from rloo_kit.data import load_local
    from rloo_kit.rewards import is_correct

    rows = [{"q": f"Is '{w}' an animal or a color?", "label": label}
            for w, label in [("zebra", "animal"), ("fox", "animal"), ("deer", "animal"), ("red", "colour"),
                             ("blue", "colour"), ("teal", "colour")]]
    path = tmp_path / "animal_or_colour.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    red = load_local(str(path), prompt_column="q", answer_column="label")[3]
    assert red["answer"] == "colour" and red["labels"] == ["animal", "colour"]
    assert not is_correct("Red is a color or an animal.", red["answer"], labels=red["labels"])
    assert is_correct("Red is a color, not an animal.", red["answer"], labels=red["labels"])


def test_a_choice_among_the_things_a_prompt_lists_scores_the_pick(tmp_path):
    """A held-back alphabetical-order run learned to reply 'glacier and pear.' to every pair, scored right as it names
    the answer. The things each prompt lists ('X or Y', 'X, Y, Z') are its choices: the one a reply names first in
    its last sentence is its pick ('A brick is heavier than a feather.'), and one that only lists them picks none. A
    question's opening words before a comma are no item, nor are a list's neighbours beside a comma."""
    from rloo_kit.data import load_local
    from rloo_kit.rewards import correct_answer, predicted_answer
    from rloo_kit.tasks import load_task

    rows = [("Which word comes first in alphabetical order: glacier or pear? Reply with the word.", "glacier"),
            ("Which word comes first in alphabetical order: zebra or apple? Reply with the word.", "apple"),
            ("Which is heavier, a feather or a brick?", "a brick"),
            ("Which of these is a fruit: rake, plum, or cat?", "plum"),
            ("Is 17 prime or composite?", "prime"),
            ("Which word does not belong: cat, dog, plum, horse?", "plum"),
            ("Name a colour, like red or blue.", "red")]
    path = tmp_path / "choices.csv"
    path.write_text("ask,pick\n" + "".join(f'"{q}",{a}\n' for q, a in rows))
    data = load_local(str(path), prompt_column="ask", answer_column="pick")
    assert "labels" not in data.column_names
    assert data["choices"] == [["glacier", "pear"], ["zebra", "apple"], ["feather", "brick"], ["rake", "plum", "cat"],
                               ["prime", "composite"], ["cat", "dog", "plum", "horse"], ["red", "blue"]]
    replies = ["glacier and pear.", "Apple comes before zebra.", "A brick is heavier than a feather.",
               "Plum, rake or cat.", "17 is prime.", "Cat, dog, plum, horse.", "I like red, not blue."]
    assert correct_answer([""] * 7, replies, answer=data["answer"], choices=data["choices"]) == [
        0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert [predicted_answer(r, choices=cs) for r, cs in zip(replies, data["choices"], strict=True)] == [
        None, "apple", "brick", None, "prime", None, "red"]
    assert correct_answer([""], ["Zebra comes after apple."], answer=["apple"], choices=[["zebra", "apple"]]) == [0.0]
    task = load_task("file", path=str(path), prompt_column="ask", answer_column="pick", n_test=1)
    assert task.answer_kind().startswith("a choice among the things each prompt lists")  # said before a run
    path.write_text("ask,pick\n" + "".join(f'"{q}",{a}\n' for q, a in rows + [("What is the plural of cat?", "cats")]))
    assert "choices" not in load_local(str(path), prompt_column="ask", answer_column="pick").column_names  # all or none
    long = [("Which is heavier, a feather or a brick?", "brick"), ("Which is a star: Mars, the Big Dipper or Sirius?",
                                                                    "sirius"),
            ("Which is a city in America: Paris or New York City?", "New York City")]
    path.write_text("ask,pick\n" + "".join(f'"{q}",{a}\n' for q, a in long))  # one long gold widens no other row
    assert load_local(str(path), prompt_column="ask", answer_column="pick")["choices"] == [
        ["feather", "brick"], ["mars", "dipper", "sirius"], ["paris", "new york city"]]


def test_a_choice_between_the_prompts_numbers_scores_the_pick_not_the_last_number(tmp_path):
    from rloo_kit.data import load_local
    from rloo_kit.rewards import correct_answer, predicted_answer
    from rloo_kit.tasks import load_task

    path = tmp_path / "larger.csv"
    pairs = [(70, 95), (84, 79), (12, 30), (61, 16)]
    path.write_text("question,solution\n" + "".join(f'"Which number is larger, {a} or {b}?",{max(a, b)}\n'
                                                    for a, b in pairs))
    data = load_local(str(path), prompt_column="question", answer_column="solution")
    assert data["choices"] == [["70", "95"], ["84", "79"], ["12", "30"], ["61", "16"]]
    replies = ["95 is larger than 70.", "The number 79 is larger than the number 84.", "Answer: 30", "61 or 16? 16."]
    assert correct_answer([""] * 4, replies, answer=data["answer"], choices=data["choices"]) == [1.0, 0.0, 1.0, 0.0]
    assert [predicted_answer(r, choices=cs) for r, cs in zip(replies, data["choices"], strict=True)] == [
        "95", "79", "30", "16"]
    listed = ["70 and 95.", "79, 84", "The larger is 30, not 12.", "16 16 16"]  # the offered numbers listed: no pick
    assert correct_answer([""] * 4, listed, answer=data["answer"], choices=data["choices"]) == [0.0, 0.0, 1.0, 0.0]
    assert [predicted_answer(r, choices=cs) for r, cs in zip(listed, data["choices"], strict=True)] == [
        None, None, "30", "16"]
    task = load_task("file", path=str(path), prompt_column="question", answer_column="solution", n_test=1)
    assert task.answer_kind().startswith("a choice among each prompt's numbers")  # said before a run
    path.write_text("question,solution\nWhich number is larger, 70 or 95?,95\n")  # an unquoted comma
    with pytest.raises(DataError, match="line 2 has 3 fields, its header 2 .* needs double quotes"):
        load_local(str(path), prompt_column="question", answer_column="solution")
    sums = tmp_path / "sums.csv"  # an answer that is not among the prompt's numbers: no choice, the last number
    sums.write_text("question,solution\n" + "".join(f"Add {a} and {b}.,{a + b}\n" for a, b in pairs))
    assert "choices" not in load_local(str(sums), prompt_column="question", answer_column="solution").column_names
    assert load_task("file", path=str(sums), prompt_column="question", answer_column="solution",
                     n_test=1).answer_kind() is None
