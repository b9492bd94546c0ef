"""Choice questions in two orders: the question reordered, its twin rows, groups sampled half and half, and a pool
that judges the two halves as one group."""

import csv
import itertools

import pytest

import rloo_kit
from rloo_kit.choice_order import reordered, with_reordered_twins
from rloo_kit.data import load_local
from rloo_kit.patches.group_sampler import GroupSampler, uniform_draw
from rloo_kit.pool import PromptPool


@pytest.mark.parametrize(("question", "choices", "expected"), [
    ("Which is faster, a jet or a koala?", ["jet", "koala"], ("Which is faster, a koala or a jet?", ["koala", "jet"])),
    ("Which is slower, an owl or a jet?", ["owl", "jet"], ("Which is slower, a jet or an owl?", ["jet", "owl"])),
    ("Which number is larger, 92 or 85?", ["92", "85"], ("Which number is larger, 85 or 92?", ["85", "92"])),
    ("Which is bigger, 1,000 or 999? Think.", ["1,000", "999"], ("Which is bigger, 999 or 1,000? Think.",
                                                                 ["999", "1,000"])),
    ("Which word does not belong: cat, dog, plum, horse?", ["cat", "dog", "plum", "horse"],
     ("Which word does not belong: dog, plum, horse, cat?", ["dog", "plum", "horse", "cat"])),
    ("Which is heavier, a race-car or a feather?", ["race car", "feather"],
     ("Which is heavier, a feather or a race-car?", ["feather", "race car"])),
    ("Which is bigger, the cat or the catfish?", ["cat", "catfish"],
     ("Which is bigger, the catfish or the cat?", ["catfish", "cat"])),
    ("A cat sat. Which is bigger, a cat or a dog?", ["cat", "dog"],  # the clause that lists both
     ("A cat sat. Which is bigger, a dog or a cat?", ["dog", "cat"])),
])
def test_a_question_is_asked_with_its_choices_one_place_on(question, choices, expected):
    assert reordered(question, choices) == expected


@pytest.mark.parametrize(("question", "choices"), [
    ("Jet or koala: which is faster?", ["jet", "koala"]),  # a capital would move with 'Jet'
    ("Which is faster, a jet or a jet ski?", ["jet", "jet ski"]),  # 'jet' named twice in the clause
    ("Which is faster?", ["jet", "koala"]),  # not listed
    ("Which is faster, a jet?", ["jet"]),  # nothing to reorder
])
def test_a_question_that_cannot_be_reordered_plainly_is_left_alone(question, choices):
    assert reordered(question, choices) is None


def _choice_file(tmp_path, rows):
    path = tmp_path / "faster.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([("q", "which"), *rows])
    return path


ROWS = [("Which is faster, a jet or a snail?", "jet"), ("Which is slower, a train or a worm?", "worm"),
        ("Which is faster, a slug or a hawk?", "hawk"), ("Which is slower, a koala or a rocket?", "koala"),
        ("Which is faster, a clam or a plane?", "plane"), ("Which is slower, a horse or a sloth?", "sloth"),
        ("Which is faster, a car or a jet or a snail?", "jet")]  # three choices: the list rotates


def test_choice_rows_get_reordered_twins_and_other_rows_none(tmp_path):
    data = load_local(str(_choice_file(tmp_path, ROWS)), prompt_column="q", answer_column="which")
    mixed, twins = with_reordered_twins(data)
    assert len(mixed) == 2 * len(data) and twins == {i: len(data) + i for i in range(len(data))}
    row, twin = mixed[0], mixed[twins[0]]
    assert twin["prompt"][-1]["content"] == "Which is faster, a snail or a jet?"
    assert (twin["answer"], twin["choices"], row["choices"]) == ("jet", ["snail", "jet"], ["jet", "snail"])
    assert mixed[twins[6]]["choices"] == ["jet", "snail", "car"]
    plain = data.remove_columns("choices")
    assert with_reordered_twins(plain) == (plain, {})


def test_the_group_sampler_samples_a_twin_half_of_each_group():
    twins = {0: 4, 1: 5}  # rows 2 and 3 have none
    sampler = GroupSampler(uniform_draw(range(4), seed=0), 4, num_generations=4, batch_size=2, repeat_count=1,
                           twins=twins)
    drawn = list(sampler)
    assert len(drawn) == len(sampler) == 4 * 4
    groups = [drawn[i:i + 4] for i in range(0, len(drawn), 4)]
    assert sorted(g[0] for g in groups) == [0, 1, 2, 3]  # one pass over the rows, each once
    for g in groups:
        assert g == ([g[0]] * 2 + [twins[g[0]]] * 2 if g[0] in twins else [g[0]] * 4)
    odd = GroupSampler(uniform_draw(range(4), seed=0), 4, num_generations=3, batch_size=1, repeat_count=1,
                       twins=twins)
    assert odd.group(0) == [0, 0, 4]


def test_the_uniform_draw_passes_over_every_row_before_repeating():
    choose = uniform_draw(range(6), seed=3)
    first, second = [choose(2) for _ in range(3)], [choose(2) for _ in range(3)]
    assert sorted(itertools.chain(*first)) == sorted(itertools.chain(*second)) == list(range(6))
    assert first != second  # a new shuffle each pass


def test_the_pool_judges_a_row_and_its_twin_as_one_group():
    """A first-place habit: right on the row as written, wrong on its twin. Apart, each half is flat; as one
    group it has spread, and the twin is never chosen itself."""
    pool = PromptPool(["a or b?"], seed=0)
    pool.add_twins([("a or b?", "b or a?")])
    pool.observe(["a or b?", "a or b?", "b or a?", "b or a?"], [1.0, 1.0, 0.0, 0.0])
    assert pool.records["a or b?"].last == "spread" and pool.records["a or b?"].groups == 1
    assert "b or a?" not in pool.records and pool.choose(1) == [0]


FAST = ("jet", "hawk", "train", "rocket", "plane", "falcon", "car", "horse", "bullet", "cheetah", "boat", "bus")
SLOW = ("snail", "slug", "worm", "clam", "sloth", "koala", "tortoise", "glacier", "moth", "ant", "toddler", "sponge")


@pytest.mark.heavy
def test_a_run_in_two_orders_samples_each_group_half_and_half(tiny_model_dir, tmp_path):
    """Through the door: the trainer draws its groups from the twins, the rewards see each group's prompt in both
    orders, and TRL trains on them."""
    rows = [(f"Which is {way}, a {a} or a {b}?", a if (way == "faster") == (a in FAST) else b)
            for i, (fast, slow) in enumerate(zip(FAST, SLOW, strict=True))
            for way, (a, b) in [("faster" if i % 2 else "slower", (fast, slow) if i % 3 else (slow, fast))]]
    task = rloo_kit.load_task("file", path=str(_choice_file(tmp_path, rows)), n_test=4, prompt_column="q",
                              answer_column="which")
    seen = []

    def record(prompts, completions, **kwargs):
        seen.extend(p[-1]["content"] for p in prompts)
        return [0.0] * len(completions)

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = rloo_kit.build_trainer(model, tok, task.with_reward(record, 0.0), preset="cpu", live=False,
                                     output_dir=str(tmp_path / "run"), mix_choice_order=True, max_steps=2,
                                     per_device_train_batch_size=8, num_generations=4, max_completion_length=6,
                                     save_strategy="no")
    assert "group_sampler" in trainer.rloo_kit_patches
    assert len(trainer.choice_twins) == len(task.train) and len(trainer.train_dataset) == 2 * len(task.train)
    rloo_kit.train(trainer)
    assert trainer.state.global_step == 2 and len(seen) == 2 * 8
    for at in range(0, len(seen), 4):
        group = seen[at:at + 4]
        assert group[0] == group[1] != group[2] == group[3]
        written = next(r["prompt"][-1]["content"] for r in task.train if r["prompt"][-1]["content"] == group[0])
        assert reordered(written, next(r["choices"] for r in task.train
                                       if r["prompt"][-1]["content"] == group[0]))[0] == group[2]


@pytest.mark.heavy
def test_the_command_mixes_the_order_and_records_it(tiny_model_dir, tmp_path):
    import json

    import yaml

    from rloo_kit.cli import main

    path = _choice_file(tmp_path, [(f"Which is faster, a {f} or a {s}?", f) for f, s in zip(FAST, SLOW, strict=True)])
    out = tmp_path / "run"
    code = main(["train", "--model", str(tiny_model_dir), "--preset", "cpu", "--task", "file", "--path", str(path),
                 "--prompt-column", "q", "--answer-column", "which", "--n-test", "4", "--output-dir", str(out),
                 "--max-steps", "1", "--batch-size", "4", "--num-generations", "2", "--max-completion-length", "8",
                 "--preflight-prompts", "0", "--mix-choice-order"])
    assert code == 0
    config = json.loads((out / "metrics.json").read_text())["config"]
    assert config["rows_in_two_orders"] == len(FAST) - 4 and "group_sampler" in config["patches"]
    assert yaml.safe_load((out / "recipe.yaml").read_text())["mix_choice_order"] is True
