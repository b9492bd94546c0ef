import pytest
import torch

import rloo_kit
from rloo_kit.evaluation import (
    EvalReport,
    compare,
    evaluate,
    evaluate_base_and_adapter,
    paired_change,
    pass_at_k,
    sample_table,
)
from rloo_kit.patches import cpu_step
from rloo_kit.rewards import correct_answer, is_correct, predicted_answer


@pytest.mark.parametrize("n,c,k,expected", [
    (4, 0, 1, 0.0), (4, 4, 2, 1.0), (4, 1, 1, 0.25), (4, 1, 2, 0.5), (4, 2, 2, 1 - 1 / 6), (5, 2, 3, 1 - 1 / 10),
    (10, 3, 4, 1 - 35 / 210),
])
def test_pass_at_k_matches_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_needs_enough_samples():
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


@pytest.fixture(scope="module")
def tiny_lora(tiny_model_dir):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    return rloo_kit.attach_lora(model, r=4, alpha=8), tok


def test_report_and_self_comparison(tiny_lora):
    model, tok = tiny_lora
    test = rloo_kit.arithmetic_task(n_train=4, n_test=6)["test"]
    report = evaluate(model, tok, test, [correct_answer], samples=4, greedy=False, max_new_tokens=6)
    assert report.samples == 4 and len(report.completions) == 24
    assert set(report.pass_at_k) == {1, 2, 4} and report.pass_at_k[1] == pytest.approx(report.accuracy)
    assert 0 < report.mean_length <= 6 and 0 <= report.truncation_rate <= 1
    assert all(r["cut"] is (r["tokens"] >= 6) for r in report.completions)  # each reply that ran to the limit
    assert "correct_answer" in report.mean_reward
    diff = compare(report, report)["difference"]
    assert (diff == 0).all() and len(diff) >= 5
    with pytest.raises(ValueError, match="greedy"):
        evaluate(model, tok, test, samples=2, greedy=True)


def test_a_reward_that_reads_completion_ids_is_given_them_as_trl_gives_them(tiny_lora):
    """One token-id list a completion, ending on the end-of-sequence token where the completion ended."""
    model, tok = tiny_lora
    test = rloo_kit.arithmetic_task(n_train=4, n_test=3)["test"]

    def ended(prompts, completions, completion_ids, **kwargs):
        return [float(bool(ids) and ids[-1] == tok.eos_token_id) for ids in completion_ids]

    def id_count(prompts, completions, completion_ids, **kwargs):
        return [float(len(ids)) for ids in completion_ids]

    report = evaluate(model, tok, test, [ended, id_count], samples=8, greedy=False, max_new_tokens=6)
    rows = report.completions
    assert all(r["ended"] == 1.0 for r in rows if not r["cut"]) and any(r["ended"] == 0.0 for r in rows if r["cut"])
    assert [r["id_count"] for r in report.completions] == [r["tokens"] for r in report.completions]  # the ids drawn


def test_a_reply_that_ends_at_the_limit_is_not_cut(tiny_lora, monkeypatch):
    """A reply whose end-of-sequence token is its last allowed one ended: only one that ran out of tokens is cut."""
    model, tok = tiny_lora
    test = rloo_kit.arithmetic_task(n_train=4, n_test=2)["test"]
    drawn = [[[5, 6, tok.eos_token_id]], [[5, 6, 7]]]
    monkeypatch.setattr("rloo_kit.evaluation._generate", lambda *a, **k: ([["It is 7."], ["It is"]], [[3], [3]], drawn))
    report = evaluate(model, tok, test, max_new_tokens=3)
    assert [r["cut"] for r in report.completions] == [False, True] and report.truncation_rate == 0.5


def test_samples_read_their_prompt_once_and_greedy_ones_agree(tiny_lora):
    """generate_ids (evaluation and the pre-flight) samples as the training sampler does on a CPU: each
    prompt's pass once for all its completions, the cheap categorical draw, and nothing left patched."""
    from rloo_kit.evaluation import generate_ids

    model, tok = tiny_lora
    prompts = [[{"role": "user", "content": "Add 3 and 4."}], [{"role": "user", "content": "Hi"}]]
    rows = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, i, o: rows.append(o.shape[0]))
    try:
        greedy = generate_ids(model, tok, prompts, samples=3, max_new_tokens=5)
        assert rows[0] == 2 and set(rows[1:]) == {6}  # two prompts read, then six rows decoded
        assert all(group == [group[0]] * 3 for group in greedy)
        assert [g[0] for g in greedy] == [g[0] for g in generate_ids(model, tok, prompts, max_new_tokens=5)]
        sampled = generate_ids(model, tok, prompts, samples=3, do_sample=True, max_new_tokens=5)
        assert [len(g) for g in sampled] == [3, 3] and all(0 < len(s) <= 5 for g in sampled for s in g)
    finally:
        hook.remove()
    assert torch.multinomial is cpu_step._multinomial and "generate" not in vars(model)  # put back


def test_lean_generation_is_the_doors_and_gives_the_same_greedy_answers(tiny_lora, monkeypatch):
    """The swaps `generate_ids` makes on a CPU are the door's patch cpu_generation: made for the call only, and not
    at all where the door does not trust it (here: told so), with the same greedy answers both ways."""
    import copy

    import rloo_kit.patches as patches
    from rloo_kit.evaluation import generate_ids, lean_generation

    model, tok = tiny_lora
    model = copy.deepcopy(model)  # the module's fixture stays an untrained adapter
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)  # an adapter that changes the answers, so that bypassing it would show
    prompts = [[{"role": "user", "content": "Add 3 and 4."}], [{"role": "user", "content": "Hi"}]]
    lora = cpu_step.tuner_layers(model)
    with lean_generation(model):
        assert torch.multinomial is not cpu_step._multinomial and "generate" in vars(model)
        assert all("forward" in vars(m) for m in lora)
    assert torch.multinomial is cpu_step._multinomial and "generate" not in vars(model)
    assert not any("forward" in vars(m) for m in lora)
    lean = generate_ids(model, tok, prompts, samples=2, max_new_tokens=5)
    asked = []
    monkeypatch.setattr(patches, "allowed", lambda name: asked.append(name) and False)
    with lean_generation(model):
        assert torch.multinomial is cpu_step._multinomial and "generate" not in vars(model)
        assert not any("forward" in vars(m) for m in lora)
    assert generate_ids(model, tok, prompts, samples=2, max_new_tokens=5) == lean and set(asked) == {"cpu_generation"}


def test_a_begun_completion_continues_as_if_never_stopped(tiny_lora):
    from rloo_kit.evaluation import generate_ids

    model, tok = tiny_lora
    prompts = [[{"role": "user", "content": "Add 3 and 4."}], [{"role": "user", "content": "Say hello to everyone."}]]
    whole = generate_ids(model, tok, prompts, max_new_tokens=9)
    begun = generate_ids(model, tok, prompts, max_new_tokens=4)
    rest = generate_ids(model, tok, prompts, max_new_tokens=5, prefixes=[g[0] for g in begun])
    assert [b[0] + r[0] for b, r in zip(begun, rest, strict=True)] == [g[0] for g in whole]  # greedy: the same tokens
    with pytest.raises(ValueError, match="one begun completion per prompt"):
        generate_ids(model, tok, prompts, samples=2, prefixes=[g[0] for g in begun])


def test_a_resumed_generation_continues_its_rows_from_the_cache_as_if_never_stopped(tiny_lora):
    from rloo_kit.evaluation import Resumable, generate_ids, resume_ids

    model, tok = tiny_lora
    prompts = ["Add 3 and 4.", "Say hello to everyone, please", "Hi"]  # three lengths: two rows left-padded
    whole = generate_ids(model, tok, prompts, max_new_tokens=9)
    assert len({tuple(g[0]) for g in whole}) == 3  # three different answers: a wrong row would show
    state = Resumable()
    begun = generate_ids(model, tok, prompts, samples=2, max_new_tokens=4, resumable=state)
    assert begun == generate_ids(model, tok, prompts, samples=2, max_new_tokens=4)  # kept for resuming, as ever
    rest = resume_ids(model, tok, state, [1, 4], max_new_tokens=5)  # prompt-major: prompt 0's second, prompt 2's first
    assert [begun[0][1] + rest[0], begun[2][0] + rest[1]] == [whole[0][0], whole[2][0]]  # greedy: the same tokens
    assert resume_ids(model, tok, state, [0], max_new_tokens=5) is None  # the cache used up: prefixes instead
    with pytest.raises(ValueError, match="a resumable generation is one batch"):
        generate_ids(model, tok, prompts, batch_size=1, resumable=Resumable())


def test_base_and_adapter_from_one_model(tiny_lora):
    model, tok = tiny_lora
    test = rloo_kit.arithmetic_task(n_train=4, n_test=4)["test"]
    base, tuned = evaluate_base_and_adapter(model, tok, test, max_new_tokens=6)
    assert [r["completion"] for r in base.completions] == [r["completion"] for r in tuned.completions]  # B = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p))
    base2, tuned2 = evaluate_base_and_adapter(model, tok, test, max_new_tokens=6)
    assert [r["completion"] for r in base2.completions] == [r["completion"] for r in base.completions]
    assert [r["completion"] for r in tuned2.completions] != [r["completion"] for r in base.completions]
    assert len(sample_table(base2, tuned2, n=3)) == 3


def _report(correct: list[list[bool]]) -> EvalReport:
    """A report with these right/wrong samples per prompt (nothing else in it matters here)."""
    rows = [{"prompt": f"q{i}", "completion": "", "correct": ok} for i, group in enumerate(correct) for ok in group]
    flat = [ok for group in correct for ok in group]
    return EvalReport(sum(flat) / len(flat), {}, {}, 1.0, 0.0, len(correct[0]), rows)


def _answered(replies: list[str], golds: list[str], labels: list[str]) -> EvalReport:
    rows = [{"prompt": f"q{i}", "completion": r, "answer": g, "predicted": predicted_answer(r, labels),
             "correct": is_correct(r, g, labels=labels)} for i, (r, g) in enumerate(zip(replies, golds, strict=True))]
    return EvalReport(sum(r["correct"] for r in rows) / len(rows), {}, {}, 1.0, 0.0, 1, rows)


def test_one_answer_to_every_prompt_is_named_and_a_mostly_right_one_is_not():
    labels, golds = ["animal", "colour"], ["animal", "colour"] * 6
    favourite = _answered(["The word is a colour."] * 11 + ["It is an animal."], golds, labels)
    assert favourite.one_answer() == {"answer": "colour", "replies": 12, "given": 11, "right": 6}
    assert _answered([f"It is an {g}." for g in golds], golds, labels).one_answer() is None  # answers that vary
    mostly = ["colour"] * 10 + ["animal"] * 2  # one answer, and it is the right one for most prompts
    assert _answered(["A colour."] * 12, mostly, labels).one_answer() is None
    assert _answered(["A colour."] * 6, golds[:6], labels).one_answer() is None  # too few replies to tell
    assert _answered(["A colour."] * 6, golds[:6], labels).one_answer(min_rows=5)["given"] == 6  # validation's 6
    days = ["monday", "tuesday", "wednesday", "thursday"]
    before_tuesday = _answered(["Tuesday."] * 6, ["Monday", "Tuesday", "Thursday", "Monday", "Wednesday", "Monday"],
                               days)
    before_tuesday.completions[0]["predicted"] = None  # *1 day before Tuesday?*: its row's labels leave Tuesday out
    # the answer as the file writes it, where the label set holds it lower-cased
    assert before_tuesday.one_answer(min_rows=5) == {"answer": "Tuesday", "replies": 6, "given": 6, "right": 1}
    same_number = _answered(["It is 7."] * 6 + ["It is 7.0."] * 6, [str(n) for n in range(12)], None).one_answer()
    assert same_number == {"answer": "7", "replies": 12, "given": 12, "right": 1}  # 7 and 7.0 are one answer


def test_the_majority_label_given_on_the_rows_it_is_wrong_for_is_a_habit():
    """A parity file's greedy answers said 'even' to 84-94% of rows where 'even' was the answer of 66-69%: right for
    most rows, so not marked, though the model ignored the row. The rows of the other label tell it from knowing."""
    labels, golds = ["even", "odd"], ["even"] * 11 + ["odd"] * 5
    habit = _answered(["It is even."] * 15 + ["It is odd."], golds, labels)
    assert habit.one_answer() == {"answer": "even", "replies": 16, "given": 15, "right": 11}
    learned = ["It is even."] * 10 + ["It is odd."] + ["It is odd."] * 4 + ["It is even."]  # wrong on two rows
    assert _answered(learned, golds, labels).one_answer() is None
    skewed = ["even"] * 12 + ["odd"] * 4  # three rows in four even: 'even' on one odd row is knowing the rest
    assert _answered(["It is even."] * 13 + ["It is odd."] * 3, skewed, labels).one_answer() is None
    assert _answered(["It is even."] * 16, skewed, labels).one_answer()["given"] == 16  # every odd row 'even' too
    silent = ["It is even."] * 9 + ["I cannot tell."] * 2 + ["It is even."] * 3 + ["I cannot tell.", "It is odd."]
    assert _answered(silent, golds, labels).one_answer() is None  # 'even' on 3 of 5 odd rows, but 12 of 16 in all
    assert _answered(["It is even."] * 10 + silent[10:], golds, labels).one_answer()["given"] == 13  # four in five


def test_picking_one_place_in_every_list_is_named_and_reading_the_numbers_is_not():
    """A number-choice run learned '<first number> is larger than <second>.': right wherever the larger came first,
    wrong on every other row (here on every pair; the run's own replies did so on 22 of 24)."""
    pairs = [("92", "18"), ("35", "86"), ("64", "61"), ("17", "71"), ("99", "69"), ("38", "70"), ("85", "74"),
             ("11", "42"), ("22", "11"), ("54", "86")]

    def replies(pick, pairs=pairs) -> EvalReport:
        rows = [{"prompt": f"Which number is larger, {a} or {b}?", "completion": f"{pick(a, b)} is larger.",
                 "answer": max(a, b, key=int), "predicted": pick(a, b), "choices": [a, b]} for a, b in pairs]
        for r in rows:
            r["correct"] = r["predicted"] == r["answer"]
        return EvalReport(sum(r["correct"] for r in rows) / len(rows), {}, {}, 1.0, 0.0, 1, rows)

    first = replies(lambda a, b: a)
    assert first.one_place() == {"place": 1, "replies": 10, "given": 10, "against": 5, "kept": 5}
    assert first.one_answer() is None  # the numbers given vary: the one answer check cannot see it
    assert replies(lambda a, b: max(a, b, key=int)).one_place() is None  # reads the numbers
    assert replies(lambda a, b: a).one_place(min_rows=11) is None  # too few replies to tell
    mostly_first = pairs[:2] + [(a, b) for a, b in pairs[2:] if int(a) > int(b)]  # answers elsewhere: one row only
    assert replies(lambda a, b: a, mostly_first).one_place(min_rows=4) is None


def test_a_place_picked_on_most_rows_that_answer_elsewhere_is_a_habit():
    """A number-choice run's 24 held-out replies: the first number on all 15 pairs whose larger came first and on 7 of
    the 9 others (right on 2). It read as +0.38 learned while its replies followed the order; a run that reads the
    numbers and slips on a few rows is no habit."""
    pairs = [(str(60 + i), str(20 + i)) for i in range(15)] + [(str(20 + i), str(70 + i)) for i in range(9)]

    def picks(first_on: int) -> EvalReport:
        """The first number on each first-larger pair, and on the first `first_on` of the others."""
        rows = []
        for i, (a, b) in enumerate(pairs):
            pick = a if int(a) > int(b) or i - 15 < first_on else b
            rows.append({"completion": f"{pick}.", "answer": max(a, b, key=int), "predicted": pick,
                         "choices": [a, b], "correct": pick == max(a, b, key=int)})
        return EvalReport(sum(r["correct"] for r in rows) / len(rows), {}, {}, 1.0, 0.0, 1, rows)

    assert picks(7).one_place() == {"place": 1, "replies": 24, "given": 22, "against": 9, "kept": 7}
    assert picks(5).one_place()["kept"] == 5  # still more than half of the rows that answer elsewhere
    assert picks(4).one_place() is None  # 19 of 24 replies at the first place: under 80%
    assert picks(1).one_place() is None  # reads the numbers, slipping once


def test_chance_is_what_the_replies_would_be_right_on_dealt_to_the_rows_at_random():
    """A held-back weekday file's replies alternated 'Tuesday' and 'Sunday' whatever the day asked: right on 1 of 6,
    and dealt at random, half of them would be right on each of its two rows whose answer they name."""
    days = ["sunday", "tuesday", "friday", "monday"]
    golds = ["Tuesday", "Friday", "Sunday", "Monday", "Friday", "Monday"]
    in_turn = _answered(["Tuesday.", "Sunday."] * 3, golds, days)
    assert sum(r["correct"] for r in in_turn.completions) == 1 and in_turn.chance_right() == 1.0
    read = _answered([f"It is {g}." for g in golds], golds, days)  # replies that read the row: right on all 6
    # Tuesday and Sunday once each, on one row each; Friday and Monday twice each, on two rows each
    assert read.chance_right() == pytest.approx((1 * 1 + 1 * 1 + 2 * 2 + 2 * 2) / 6)
    sums = _answered([f"It is {n}." for n in range(8)], [str(n) for n in range(8)], None)  # every answer its own
    assert sums.chance_right() == 1.0 and sum(r["correct"] for r in sums.completions) == 8
    assert EvalReport(None, {}, {}, 1.0, 0.0, 1, [{"prompt": "q", "completion": "c"}]).chance_right() is None


def test_the_chance_share_is_how_often_random_deals_of_the_replies_do_as_well():
    """A held-back four-letter multiple-choice file: a step gave only 'B' and 'D' whatever the row, right on 4 of 12
    validation rows, where random deals of those replies average 3.5 and do as well about half the time. Replies that
    read the row are right on all 12, which no deal of theirs but a lucky few matches."""
    letters = ["a", "b", "c", "d"]
    golds = ["C", "D", "B", "B", "C", "C", "B", "B", "A", "B", "D", "A"]
    habit = _answered([f"{p}) cat" for p in "DBDDBDBBBBDD"], golds, letters)
    assert sum(r["correct"] for r in habit.completions) == 4 and habit.chance_right() == 3.5
    assert 0.4 < habit.chance_share() < 0.6
    assert habit.chance_share() == habit.chance_share(seed=0)  # seeded: one pass, one verdict
    read = _answered([f"{g}) cat" for g in golds], golds, letters)
    assert read.chance_share() < 0.01
    assert EvalReport(None, {}, {}, 1.0, 0.0, 1, [{"prompt": "q", "completion": "c"}]).chance_share() is None


def test_right_replies_mostly_cut_at_the_limit_are_named_and_a_few_are_not():
    """A held-back last-letter run learned to spray letters to the 64-token limit, scored right by a looser match."""
    def report(right_cut: int, right_ended: int, wrong_cut: int = 4) -> EvalReport:
        rows = ([{"correct": True, "cut": True, "tokens": 64}] * right_cut + [{"correct": True, "cut": False,
                 "tokens": 5}] * right_ended + [{"correct": False, "cut": True, "tokens": 64}] * wrong_cut)
        return EvalReport(0.5, {}, {}, 1.0, 0.5, 1, rows)
    assert report(14, 0).right_while_cut() == {"right": 14, "cut": 14, "tokens": 64}
    assert report(3, 3).right_while_cut() == {"right": 6, "cut": 3, "tokens": 64}  # half of the right ones
    assert report(3, 4).right_while_cut() is None and report(2, 0).right_while_cut() is None
    assert report(0, 10, wrong_cut=10).right_while_cut() is None  # cut replies that are wrong say nothing of this


def test_a_right_answer_given_first_and_gone_on_from_is_told_apart():
    """A held-back symbols file: 'The chemical symbol of gold is Au. It is a metal ...' is scored on its last sentence,
    so wrong; after training the replies ended on the answer, and two of the three prompts gained were these."""
    from rloo_kit.rewards import answered_earlier

    question = "What is the chemical symbol of gold?"
    assert answered_earlier("The chemical symbol of gold is Au. It is a metal used in coins.", "Au", prompt=question)
    assert not answered_earlier("The chemical symbol of gold is Au.", "Au", prompt=question)  # right: not wrong
    assert not answered_earlier("The chemical symbol of gold is Ag. It shines.", "Au", prompt=question)
    assert not answered_earlier("5 + 3 = 8. Then 8 + 4 = 12.", "8")  # an intermediate value is no answer given
    assert not answered_earlier("5 + 3 = 8. Then 8 + 4 = 12.", ["8"])  # nor in a list of accepted answers
    assert answered_earlier("It is teeth. Or tooths.", ["teeth", "tooth"])
    assert not answered_earlier("It is positive. Or negative.", "positive", labels=["positive", "negative"])
    assert not answered_earlier("Is it Au? No, it is Ag.", "Au")  # a guess asked, then taken back
    assert not answered_earlier("The plural of moose is mooses. It is an animal.", "moose",
                                prompt="What is the plural of moose?")  # named only in restating the question
    base, tuned = _report([[False]] * 3 + [[True]]), _report([[True]] * 4)
    base.completions[0]["answered_earlier"] = base.completions[1]["answered_earlier"] = True
    change = paired_change(base, tuned)
    assert (change.better, change.answered_before) == (3, 2) and base.answered_earlier() == 2
    assert "2 of the 3 better had the right answer before too" in str(change)
    assert "had the right answer before" not in str(paired_change(_report([[False]] * 4), tuned))


def test_evaluate_marks_the_replies_that_answered_first(monkeypatch):
    from datasets import Dataset

    import rloo_kit.evaluation as evaluation

    replies = ["The chemical symbol of gold is Au. It is a metal.", "Fe.", "It is Cu, I think. Or Zn."]
    monkeypatch.setattr(evaluation, "_generate", lambda *a, **k: ([[r] for r in replies], [[12], [2], [9]],
                                                                  [[[0] * 12], [[0] * 2], [[0] * 9]]))
    rows = Dataset.from_dict({"prompt": ["Gold?", "Iron?", "Zinc?"], "answer": ["Au", "Fe", "Zn"]})
    report = evaluation.evaluate(None, None, rows)
    assert [r.get("answered_earlier", False) for r in report.completions] == [True, False, False]
    assert report.accuracy == pytest.approx(2 / 3) and report.answered_earlier() == 1


def test_paired_change_counts_prompts_and_tests_the_sign():
    one_worse = paired_change(_report([[True]] * 12), _report([[True]] * 11 + [[False]]))
    assert (one_worse.better, one_worse.worse, one_worse.prompts) == (0, 1, 12)
    assert one_worse.p_value == 1.0 and "luck alone" in str(one_worse)
    ten_better = paired_change(_report([[False]] * 10 + [[True]] * 2), _report([[True]] * 12))
    assert (ten_better.better, ten_better.worse) == (10, 0)
    assert ten_better.p_value == pytest.approx(2 / 2**10) and "more than luck" in str(ten_better)
    mixed = paired_change(_report([[True, False]] * 3), _report([[True, True], [False, False], [True, False]]))
    assert (mixed.better, mixed.worse, mixed.prompts) == (1, 1, 3)  # by each prompt's share of right samples
    assert mixed.p_value == 1.0
    shifted = _report([[True]] * 3)
    for row in shifted.completions:
        row["prompt"] += "'"  # three other prompts
    for other in (_report([[True]] * 4), shifted, _report([[True, True]] * 3)):
        with pytest.raises(ValueError, match="same prompts"):
            paired_change(_report([[True]] * 3), other)
