"""The pre-flight: its arithmetic on made-up numbers, its structure on the tiny model, and its verdicts on
the real default model, where they must predict what training would do."""

import dataclasses
import importlib
import json
import math

import numpy as np
import pytest
import torch
from datasets import Dataset

import rloo_kit
from rloo_kit.diagnostics import SamplingMeasured
from rloo_kit.errors import ConfigError
from rloo_kit.preflight_check import (
    PreflightReport,
    PromptStats,
    RewardStats,
    Setup,
    _fit_sampling,
    _greedy_habit,
    _suggest,
    _totals,
    _unpaid,
    diagnose,
    fit_task,
)
from rloo_kit.rewards import correct_answer, exact_answer, is_correct

from .helpers import length_reward

SETUP_FIELDS = {"max_completion_length", "zero_spread_fraction", "flat_fraction", "truncation_rate", "pass_rate",
                "prompts", "rewards", "correlations", "cut_without_spread", "alike_fraction", "unpaid"}


def setup(**changes) -> Setup:
    fields = dict(max_completion_length=16, zero_spread_fraction=0.2, flat_fraction=0.2, truncation_rate=0.1,
                  pass_rate=0.4, prompts=[PromptStats(i, f"q{i}", 0.5, 0.3 if i % 2 else 0.0, 0.5, 0.0)
                                          for i in range(4)],
                  rewards=[RewardStats("correct_answer", 0.4, 0.5, 0.0, {})], correlations={})
    fields.update(changes)
    return Setup(**fields)


def report(proposed: dict | None = None, applies: bool = False, colder: tuple[dict, ...] = (),
           **changes) -> PreflightReport:
    """A report with healthy numbers, changed where a test says: setup fields go to the as-asked setup,
    `proposed` (setup fields) makes the setup the kit proposes, `applies` makes it the one trained."""
    fields = dict(num_generations=4, temperature=1.0, seconds=1.0, finished_within_probe=0.9, probe_length=64,
                  needed_lengths={"p50": 10, "p90": 30, "max": 60}, suggested_max_completion_length=32)
    fields.update({k: v for k, v in changes.items() if k not in SETUP_FIELDS})
    asked = setup(**{k: v for k, v in changes.items() if k in SETUP_FIELDS}, temperature=fields["temperature"])
    r = PreflightReport(asked=asked, **fields)
    r.colder = [setup(**c) for c in colder]
    if proposed is not None:
        r.proposed, r.applies = setup(**proposed), applies
        r.adjustments = [f"completion length 16 -> {r.proposed.max_completion_length}"]
    for s in filter(None, (r.asked, r.proposed, *r.colder)):
        s.problems = diagnose(r, s)
    return r


def test_healthy_numbers_are_ok():
    assert report().ok and report().problems == [] and report().verdict == "can learn"


def test_no_spread_with_wrong_answers_is_a_blocking_reward_collapse():
    r = report(flat_fraction=0.9, zero_spread_fraction=0.9, pass_rate=0.02)
    assert r.kinds() == ["reward_collapse"] and not r.ok
    assert "90%" in r.problems[0].message and "2%" in r.problems[0].message  # the measured numbers, in words
    assert "no length probed did better" in r.problems[0].message


def test_a_fix_never_proposes_what_the_run_already_uses():
    uses = [RewardStats("correct_answer", 0.0, 0.0, 0.0, {}), RewardStats("brevity", 0.5, 0.1, 0.0, {})]
    fix = report(flat_fraction=0.95, pass_rate=0.0, rewards=uses).problems[0].fix
    assert "correct_answer" not in fix and "brevity" not in fix and "easier" in fix and "bigger model" in fix
    bare = report(flat_fraction=0.95, pass_rate=0.0).problems[0].fix
    assert "brevity" in bare and "correct_answer" not in bare  # correct_answer is in use there too


def test_little_spread_is_a_warning():
    r = report(flat_fraction=0.7, pass_rate=0.1)
    assert r.kinds() == ["reward_collapse"] and r.ok and not r.problems[0].blocking


def test_prompts_without_spread_because_cut_are_truncation_not_collapse():
    r = report(flat_fraction=0.9, zero_spread_fraction=0.9, truncation_rate=0.84, cut_without_spread=0.9,
               pass_rate=0.04)
    assert r.kinds() == ["truncation"] and not r.ok and "because their completions are cut" in r.problems[0].message
    assert "16 -> 32" in r.problems[0].fix and "reward_collapse" not in r.kinds()


def test_the_verdict_is_about_the_setup_that_will_be_trained():
    cut = dict(flat_fraction=0.9, zero_spread_fraction=0.9, truncation_rate=0.84, cut_without_spread=0.9,
               pass_rate=0.04)
    longer = dict(max_completion_length=64, flat_fraction=0.31, zero_spread_fraction=0.2, truncation_rate=0.1,
                  pass_rate=0.3)
    fitted = report(proposed=longer, applies=True, **cut)
    assert fitted.ok and fitted.problems == [] and fitted.max_completion_length == 64
    assert not fitted.asked.ok and fitted.asked.problems[0].kind == "truncation"  # the as-asked figures stay
    text = str(fitted)
    assert ("as asked: at 16 tokens: 90% of prompts without spread, 84% of completions cut, 4% right -> cannot "
            "learn [truncation]") in text  # the as-asked cause stays named beside the verdict on the trained one
    assert "the kit trains (completion length 16 -> 64): at 64 tokens: 31% of prompts without spread" in text
    assert text.rstrip().endswith("verdict: can learn (with the changes above)")
    d = fitted.to_dict()
    assert d["ok"] and d["max_completion_length"] == 64 and d["asked"]["max_completion_length"] == 16
    kept = d["summary"]  # what metrics.json keeps, carried by `rloo-kit preflight --json` for the benchmarks
    assert kept == json.loads(json.dumps(fitted.summary())) and kept["verdict"] == "can learn"
    assert (kept["max_completion_length"], kept["as_asked"]["max_completion_length"]) == (64, 16)
    assert kept["problems"] == [] and kept["as_asked"]["problems"] == ["truncation"] and kept["blocking"] == []
    fixed = report(proposed=longer, applies=False, **cut)  # a length the user fixed is judged as it is
    assert not fixed.ok and "would be, with the fix" in str(fixed)


def test_solved_and_truncation_warning_and_unscored():
    r = report(flat_fraction=1.0, pass_rate=0.98)
    assert r.kinds() == ["solved"] and not r.ok
    r = report(truncation_rate=0.8)
    assert r.kinds() == ["truncation"] and r.ok and not r.problems[0].blocking
    assert "16 -> 32" in r.problems[0].fix and "--system-prompt" in r.problems[0].fix
    r = report(rewards=[RewardStats("broken", math.nan, math.nan, 1.0, {"raised KeyError": 64})])
    assert r.kinds() == ["unscored"] and not r.ok and "raised KeyError: 64" in r.problems[0].message
    half = report(rewards=[RewardStats("sparse", 0.5, 0.1, 0.6, {"returned None": 38})])
    assert half.kinds() == ["unscored"] and half.ok  # most, not all: a warning


def test_prompts_flat_because_always_right_are_solved_not_collapse():
    known = [PromptStats(i, f"q{i}", 1.0, 0.0, 1.0, 0.0) for i in range(9)] + [PromptStats(9, "q9", 0.2, 0.4, 0.25, 0)]
    r = report(flat_fraction=0.9, zero_spread_fraction=0.9, pass_rate=0.91, prompts=known, temperature=0.1)
    assert r.kinds() == ["solved"] and not r.ok  # 91% right overall, below 95%, yet 9 of 10 prompts are known
    assert "90% of the sampled prompts right in all 4 samples" in r.problems[0].message
    assert "temperature 0.1 -> 1.0" in r.problems[0].fix
    wrong = [PromptStats(i, f"q{i}", 0.0, 0.0, 0.0, 0.0) for i in range(9)] + [known[-1]]
    assert report(flat_fraction=0.9, pass_rate=0.03, prompts=wrong).kinds() == ["reward_collapse"]


WRONG = [PromptStats(i, f"q{i}", 0.0, 0.0, 0.0, 0.0) for i in range(15)] + [PromptStats(15, "q15", 0.3, 0.4, 0.25, 0)]
NOISY = dict(flat_fraction=0.94, zero_spread_fraction=0.9, pass_rate=0.02, prompts=WRONG)  # FACTS, fourth round
COLD = dict(temperature=0.3, flat_fraction=0.16, zero_spread_fraction=0.1, pass_rate=0.31)  # ... and at 0.3


def test_samples_wrong_where_greedy_answers_are_right_are_noise_and_the_fix_is_colder():
    r = report(greedy_pass_rate=0.53, colder=(dict(COLD, temperature=0.5, flat_fraction=0.7), COLD), **NOISY)
    assert r.kinds() == ["sampling_noise"] and not r.ok  # not reward_collapse: the model knows these answers
    problem = r.problems[0]
    assert "2% of the samples are right" in problem.message and "right on 53%" in problem.message
    assert "lower temperature 1 -> 0.3 (measured there: 16% of prompts without spread, 31% of samples right)" in (
        problem.fix) and "raise" not in problem.fix.lower().replace("a higher temperature makes this worse", "")
    unprobed = report(greedy_pass_rate=0.53, temperature=0.7, **dict(NOISY, flat_fraction=0.78))
    assert unprobed.kinds() == ["sampling_noise"] and unprobed.ok  # 78%: a warning
    assert "lower temperature 0.7 -> 0.35" in unprobed.problems[0].fix


def test_greedy_answers_right_far_more_often_than_samples_are_noise_even_where_both_are_rare():
    """units.csv, seed 2: greedy answers right on 5 of 32 prompts, samples on 2%, 91% of prompts flat. A fixed gap
    of 0.15 called it reward_collapse and refused a run that gained +0.25 forced; beyond luck, it is noise."""
    prompts = [PromptStats(i, f"q{i}", 0.0, 0.0, 0.0, 0.0) for i in range(32)]
    rare = dict(NOISY, flat_fraction=0.91, pass_rate=0.023, prompts=prompts)
    assert report(greedy_pass_rate=5 / 32, **rare).kinds() == ["sampling_noise"]
    assert report(greedy_pass_rate=1 / 32, **dict(rare, pass_rate=0.05)).kinds() == ["reward_collapse"]  # luck
    assert report(greedy_pass_rate=1 / 32, **dict(rare, pass_rate=0.0)).kinds() == ["reward_collapse"]  # an anecdote


class _Draws:
    """The sampler and judge `_fit_sampling` asks, for 16 prompts: greedy answers right on the first `greedy_right`,
    and a colder draw at each temperature of `flat_at` with that share of its prompts flat. `drawn`: what it drew."""

    match = "final"

    def __init__(self, greedy_right: int, flat_at: dict[float, float], picked: Dataset | None = None):
        self.greedy_right, self.flat_at, self.drawn = greedy_right, flat_at, []
        self.picked = picked if picked is not None else Dataset.from_dict({"prompt": [f"q{i}" for i in range(16)]})

    def greedy(self, length):
        self.drawn.append("greedy")
        return [([i],) for i in range(16)]

    def at(self, temperature, length):
        self.drawn.append(temperature)
        return temperature

    def decode(self, seqs):
        return list(seqs)

    def correct(self, texts, samples):
        return [i < self.greedy_right for i in range(len(texts))]

    def again(self, temperature, t):
        return lambda length, *rewards: setup(temperature=t, flat_fraction=self.flat_at[t], pass_rate=0.3)


def test_most_prompts_flat_and_wrong_where_greedy_is_right_fit_a_colder_temperature_where_it_is_clearly_better():
    """number_words on the fp32 path: 56% of prompts flat at temperature 1 and 13% of samples right, while the
    greedy answers were right on 65% held out. Below the warning's 60% the fit was not tried, and the run trained
    on noise: validation 0.56 -> 0.25 in 7 steps. A colder draw only a few prompts less flat (opposites: 50% ->
    47%) does not show noise, and is not trained; a temperature the caller set is probed where the advice is given."""
    prompts = [PromptStats(i, f"q{i}", 0.0, 0.0, 0.0 if i < 9 else 0.5, 0.0) for i in range(16)]

    def fit(open_sampling: bool, flat_at: dict[float, float]) -> tuple[PreflightReport, list]:
        r = report(flat_fraction=0.56, zero_spread_fraction=0.4, pass_rate=0.13, prompts=list(prompts))
        draws = _Draws(greedy_right=10, flat_at=flat_at)
        _fit_sampling(r, draws, draws, open_sampling, ([], []))
        return r, draws.drawn

    r, drawn = fit(True, {0.5: 0.31, 0.3: 0.25})
    assert drawn == ["greedy", 0.5] and r.greedy_pass_rate == 10 / 16  # most prompts with spread at 0.5: enough
    assert r.trained.temperature == 0.5 and r.adjustments == ["temperature 1 -> 0.5"]
    r, drawn = fit(True, {0.5: 0.53, 0.3: 0.5})
    assert drawn == ["greedy", 0.5, 0.3] and r.trained is r.asked and r.adjustments == []
    r, drawn = fit(False, {0.5: 0.31})
    assert drawn == [] and r.trained is r.asked


PARITY = Dataset.from_dict({"prompt": [f"Is {n} even or odd?" for n in range(16)],
                            "answer": ["even" if n % 2 == 0 else "odd" for n in range(16)],
                            "labels": [["even", "odd"]] * 16})


def test_greedy_answers_that_ignore_the_row_are_a_habit_not_evidence_of_noise():
    """A parity file: greedy answers 'even' to 26 of 32 numbers, 22 of them even, right on 19 against 12% of the
    samples. The kit took that for noise, trained colder, and learned nothing (0.56 -> 0.56); a multiple-choice
    file's greedy answers were 'A' to 28 of 32, and it was said to have no problem."""
    def habit_of(texts: list[str]) -> dict | None:
        right = [is_correct(t, a, labels=["even", "odd"]) for t, a in zip(texts, PARITY["answer"], strict=True)]
        return _greedy_habit(PARITY, texts, right, "final")

    habit = habit_of(["It is odd."] * 15 + ["It is even."])
    assert habit == {"one_answer": "odd", "replies": 16, "right": 7}  # one answer, right on its rows (not the 16th)
    knows = ["It is even." if n % 2 == 0 else "Odd." for n in range(16)]
    assert habit_of(knows) is None
    assert habit_of(knows[:4] + knows[4:][::-1])["chance"] == 0.5  # right on 4: no more than random deals of them
    assert habit_of(["Seven."] * 16) is None  # no label at all: no answer, no habit
    # choices in the question: the first offered, whatever the row, as a validation pass is marked for it
    pairs = [(n, 20 - n) for n in range(2, 18) if n != 10]
    larger = Dataset.from_dict({"prompt": [f"Which is larger, {a} or {b}?" for a, b in pairs],
                                "answer": [str(max(a, b)) for a, b in pairs],
                                "choices": [[str(a), str(b)] for a, b in pairs]})
    first = [f"{a} is larger." for a, _ in pairs]
    right = [is_correct(t, a, prompt=q, choices=c)
             for t, a, q, c in zip(first, larger["answer"], larger["prompt"], larger["choices"], strict=True)]
    assert sum(right) == 7 and _greedy_habit(larger, first, right, "final") == {"one_place": 1, "replies": 15,
                                                                                "right": 7}

    class Habit(_Draws):
        def decode(self, seqs):
            return ["It is odd."] * 16

    prompts = [PromptStats(i, f"q{i}", 0.0, 0.0, 0.0 if i < 9 else 0.5, 0.0) for i in range(16)]
    r = report(flat_fraction=0.56, zero_spread_fraction=0.4, pass_rate=0.13, prompts=prompts)
    draws = Habit(greedy_right=8, flat_at={0.5: 0.31}, picked=PARITY)
    _fit_sampling(r, draws, draws, True, ([], []))
    assert draws.drawn == ["greedy"] and r.trained is r.asked and r.greedy_habit["one_answer"] == "odd"  # no colder
    told = report(greedy_pass_rate=0.53, greedy_habit=habit, **NOISY)
    assert told.kinds() == ["answer_habit", "reward_collapse"]  # not sampling_noise: the habit's rows, not knowledge
    assert not told.problems[0].blocking and ("right on 7 of the 16 probed prompts, but most replies 'odd' "
                                              "whatever the row") in told.problems[0].message
    assert told.sampling_measured().greedy_better is False  # nor is the health monitor told so
    at_chance = report(greedy_pass_rate=0.53, greedy_habit={"chance": 0.5, "replies": 16, "right": 8}, **NOISY)
    assert at_chance.kinds() == ["reward_collapse"]  # not warned (it fell on files that learn), not knowledge either
    assert at_chance.sampling_measured().greedy_better is False


def test_a_label_task_whose_greedy_answers_give_one_label_is_warned_where_its_samples_have_spread(tiny_model_dir,
                                                                                                   monkeypatch):
    """A yes-or-no file: 41% of prompts flat, so no greedy answers were asked for, and "no problem found"; greedy, the
    model answered 'No.' to every row, and training learned nothing (0.62 -> 0.62, step 0 kept). A label task's
    greedy answers are now asked for all the same, and one label given whatever the row is warned; no other mark is
    (greedy answers at chance: animal or colour on two pre-flights of three, sentiment on one, and both learn)."""
    numbers = range(8)
    yes_no = Dataset.from_dict({"prompt": [f"Is {n} even? Answer yes or no." for n in numbers],
                                "answer": ["yes" if n % 2 == 0 else "no" for n in numbers],
                                "labels": [["yes", "no"]] * 8})
    module = importlib.import_module("rloo_kit.preflight_check")
    spread = ["No.", "Yes.", "No, it is not.", "No."] * 8  # one or three of each prompt's four right: all spread
    monkeypatch.setattr(module._Judge, "texts", lambda self, length: spread)
    greedy = []

    def preflight(replies: list[str], data: Dataset = yes_no) -> PreflightReport:
        monkeypatch.setattr(module._Judge, "decode", lambda self, seqs: replies)  # the greedy replies
        monkeypatch.setattr(module._Sampler, "greedy", lambda self, length: greedy.append(length) or
                            [([0],)] * len(data))
        return rloo_kit.preflight(model, tok, data, [correct_answer], preset="cpu", num_generations=4, n_prompts=8,
                                  max_completion_length=8, probe_length=8, progress=False)

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    r = preflight(["No."] * 8)
    assert r.flat_fraction == 0.0 and greedy == [8] and r.greedy_pass_rate is None  # asked, though nothing is flat
    assert r.greedy_habit == {"one_answer": "no", "replies": 8, "right": 4} and r.kinds()[0] == "answer_habit"
    assert "right on 4 of the 8 probed prompts, but most replies 'no' whatever the row" in r.problems[0].message
    assert not r.problems[0].blocking and r.sampling_measured() is None  # a warning; not evidence for the sampling
    reads = ["Yes." if n % 2 == 0 else "No." for n in numbers]
    assert preflight(reads).greedy_habit is None
    at_chance = ["No." if n % 4 in (0, 3) else "Yes." for n in numbers]  # right on 4 of 8, as random deals of them
    assert module._greedy_habit(yes_no, at_chance, [n % 4 > 1 for n in numbers], "final") == {
        "chance": 0.5, "replies": 8, "right": 4}
    marked = preflight(at_chance)
    assert marked.greedy_habit["chance"] == 0.5 and "answer_habit" not in marked.kinds()  # fell on files that learn
    greedy.clear()
    assert preflight(["No."] * 8, yes_no.remove_columns("labels")).greedy_habit is None and greedy == []  # no labels


def test_a_reward_that_never_pays_right_answers_is_collapse_not_noise():
    """All-or-nothing reward: every group flat at 0 although a third of the samples are right by the task's
    matching and the greedy answers more so. Colder sampling would not make that reward pay."""
    mixed = [PromptStats(i, f"q{i}", 0.0, 0.0, 0.25 + 0.25 * (i % 3), 0.0) for i in range(16)]
    r = report(greedy_pass_rate=0.7, flat_fraction=1.0, zero_spread_fraction=1.0, pass_rate=0.5, prompts=mixed)
    assert r.kinds() == ["reward_collapse"]


def test_greedy_right_but_colder_draws_as_flat_is_collapse_not_noise():
    """An all-or-nothing reward the model's answers never meet: the greedy answers are right by the task's matching,
    but a colder draw leaves the prompts as flat as before, so the cause is the reward, not the sampling."""
    r = report(greedy_pass_rate=0.38, colder=(dict(COLD, flat_fraction=0.97, prompts=WRONG),), **NOISY)
    assert r.kinds() == ["reward_collapse"]


def test_right_answers_paid_no_more_than_wrong_ones_is_collapse_and_the_fix_is_the_reward():
    """Samples right by the task's matching, scored like the wrong ones: no draw gives a group spread."""
    r = report(unpaid=True, greedy_pass_rate=0.5, **NOISY)  # greedy right more often: noise, were they paid
    assert r.kinds() == ["reward_collapse"]
    assert "got no more reward than the wrong ones, nor did the right greedy answers" in r.problems[0].message
    assert "pay the right answers" in r.problems[0].fix and "temperature" not in r.problems[0].fix


def test_unpaid_compares_the_rewards_of_right_and_wrong_samples():
    assert _unpaid(np.zeros(4), [True, False, False, False])
    assert not _unpaid(np.array([1.0, 0, 0, 0]), [True, False, False, False])
    assert not _unpaid(np.zeros(4), [False] * 4) and not _unpaid(np.zeros(4), None)  # nothing right: cannot tell


def test_a_colder_draw_is_spent_only_where_the_reward_pays_a_right_greedy_answer(tiny_model_dir):
    """Samples right by the final-answer matching, never in the bare form an exact reward pays: unpaid. Greedy answers
    in that form say a colder draw (nearer them) can be paid; right greedy sentences say it cannot."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from rloo_kit.preflight_check import _Judge

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)

    def ids(*texts):
        return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]

    sampler = SimpleNamespace(eos=set(), k=2, prompts=["Add 3 and 4.", "Add 4 and 5."], tools=[], answer_starts={},
                              config=SimpleNamespace(temperature=1.0))
    picked = Dataset.from_dict({"prompt": sampler.prompts, "answer": ["7", "9"]})
    judge = _Judge(tok, sampler, [ids("The sum is 7.", "It is 8."), ids("The sum is 9.", "Maybe 3.")], picked,
                   [0, 1], "final")
    assert judge(32, [exact_answer], [1.0]).unpaid
    bare, sentences = [[x] for x in ids("7", "9")], [[x] for x in ids("The sum is 7.", "It is 9.")]
    assert judge.pays(bare, [True, True], 32, [exact_answer], [1.0])
    assert not judge.pays(sentences, [True, True], 32, [exact_answer], [1.0])
    assert not judge.pays(bare, [False, False], 32, [exact_answer], [1.0])  # nothing right greedily: nothing to pay


def test_a_reward_that_reads_completion_ids_gets_one_list_of_token_ids_per_completion(tiny_model_dir):
    """TRL gives every reward `completion_ids` (one token-id list a completion); the pre-flight gave flattened
    tokens, so a reward reading them raised on every sample and the run was refused as `unscored`."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from rloo_kit.preflight_check import _Judge

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    seqs = [[tok(t, add_special_tokens=False)["input_ids"] for t in pair] for pair in (("7", "It is 8."), ("9", "No"))]

    def tokens(prompts, completions, completion_ids, **kwargs):
        return [float(len(ids)) for ids in completion_ids]

    sampler = SimpleNamespace(eos=set(), k=2, prompts=["Add 3 and 4.", "Add 4 and 5."], tools=[], answer_starts={},
                              config=SimpleNamespace(temperature=1.0))
    judge = _Judge(tok, sampler, seqs, Dataset.from_dict({"prompt": sampler.prompts, "answer": ["7", "9"]}), [0, 1],
                   "final")
    setup = judge(32, [tokens], [1.0])
    assert setup.rewards[0].unscored == 0 and list(judge.totals[32]) == [len(s) for pair in seqs for s in pair]


def test_wrong_greedily_too_is_reward_collapse_and_only_alike_samples_ask_for_more_temperature():
    hopeless = report(greedy_pass_rate=0.03, **NOISY)
    assert hopeless.kinds() == ["reward_collapse"] and "greedy answers right on 3%" in hopeless.problems[0].message
    assert "temperature" not in hopeless.problems[0].fix  # neither colder nor warmer cures a task beyond the model
    assert "so sampling colder would not help" in hopeless.problems[0].message
    assert "not clearly more than the samples' 2%" in hopeless.problems[0].message  # no colder draw: greedy alone
    drawn = report(greedy_pass_rate=0.03, colder=(dict(NOISY, temperature=0.5, flat_fraction=0.91),), **NOISY)
    assert "drawn at temperature 0.5, 91% of prompts were still without spread" in drawn.problems[0].message
    # yes/no questions: greedy 19%, samples 5% at 1 and 11% at 0.5, which the kit trains at: not "colder" bare
    trained = dict(NOISY, temperature=0.5, flat_fraction=0.69, pass_rate=0.11)
    cold = report(greedy_pass_rate=0.19, proposed=trained, applies=True, **NOISY)
    assert [p.kind for p in cold.problems] == ["reward_collapse"]
    assert "so sampling colder than 0.5 would not help" in cold.problems[0].message
    alike = report(greedy_pass_rate=0.03, alike_fraction=0.8, **NOISY)
    assert "temperature 1 -> 1.3 (the 4 samples of 80% of these prompts are one answer)" in alike.problems[0].fix


def test_a_flat_task_with_a_few_right_answers_trains_with_a_warning_and_one_with_none_is_refused():
    """A held-back rounding file (*Round 68 to the nearest ten.*): 94% of 32 prompts flat, 2 of 128 samples right
    and 1 greedy answer; refused, it gained +0.44 held out when forced (the brevity reward shortened the replies to
    a number and the right ones became common). The hopeless tasks of the verdict benchmark saw no right answer."""
    prompts = [PromptStats(i, f"q{i}", 0.0, 0.0, 0.0, 0.0) for i in range(30)] + [
        PromptStats(30 + i, f"q{30 + i}", 0.25, 0.4, 0.25, 0.0) for i in range(2)]
    rounding = dict(flat_fraction=0.94, zero_spread_fraction=0.94, pass_rate=2 / 128, prompts=prompts)
    few = report(greedy_pass_rate=1 / 32, **rounding)
    few.held_against = few.asked
    few.asked.problems = diagnose(few, few.asked)
    assert few.kinds() == ["reward_collapse"] and few.ok and not few.problems[0].blocking
    assert "learn slowly, from the few that differ (the probe saw 3 right answers: few, but a start)" in str(few)
    assert "more steps than usual" in few.problems[0].fix and "--minutes keeps the best" in few.problems[0].fix
    none = report(**dict(rounding, pass_rate=0.0, prompts=[dataclasses.replace(p, pass_rate=0.0) for p in prompts]))
    assert none.kinds() == ["reward_collapse"] and not none.ok and "learn nothing from them" in str(none)
    one = report(**dict(rounding, pass_rate=1 / 128))  # a single right sample could be the scorer's fluke
    assert not one.ok
    # a held-back uppercase file: 1 greedy answer right, 1 sample right where cut at the asked 16 tokens and none at
    # the fitted 64 (the same draw, judged at two lengths); refused, it gained +0.33 held out when forced
    fitted = dict(rounding, max_completion_length=64, pass_rate=0.0, flat_fraction=1.0)
    for asked_right, trains in ((1 / 128, True), (0.0, False)):
        upper = report(greedy_pass_rate=1 / 32, proposed=fitted, applies=True, **dict(rounding, pass_rate=asked_right))
        upper.held_against = upper.proposed
        upper.proposed.problems = diagnose(upper, upper.proposed)
        assert upper.kinds() == ["reward_collapse"] and upper.ok == trains
        assert ("the probe saw 2 right answers: few, but a start" in str(upper)) == trains
    longer = report(greedy_pass_rate=1 / 32, proposed=fitted, applies=True,  # right only past the trained length
                    **dict(rounding, max_completion_length=256, pass_rate=1 / 128))
    longer.held_against = longer.proposed
    longer.proposed.problems = diagnose(longer, longer.proposed)
    assert not longer.ok


def test_the_fitted_temperature_is_reported_beside_the_asked_one_and_trained():
    r = report(greedy_pass_rate=0.53, colder=(COLD,), proposed=COLD, applies=True, **NOISY)
    r.adjustments = ["temperature 1 -> 0.3"]
    assert r.ok and not r.asked.ok and [p.kind for p in r.asked.problems] == ["sampling_noise"]
    text = str(r)
    assert ("greedy answers right on 53% of these prompts; samples at temperature 0.3: 31% right, 16% of prompts "
            "without spread") in text
    assert "as asked: at 16 tokens and temperature 1: 94% of prompts without spread" in text
    assert "the kit trains (temperature 1 -> 0.3): at 16 tokens and temperature 0.3: 16% of prompts" in text
    assert r.to_dict()["temperature"] == 0.3 and r.to_dict()["asked"]["temperature"] == 1.0
    task = rloo_kit.load_task("arithmetic", n_train=20, n_test=4)
    fitted, notes = fit_task(task, r)
    assert fitted.temperature == 0.3 and fitted.trainer_overrides()["temperature"] == 0.3
    assert notes == ["temperature 1 -> 0.3: greedy answers were right on 53% of the probed prompts, samples on 2%; "
                     "at 0.3 16% of prompts are without spread (at 1: 94%)"]
    r.held_against = setup(max_completion_length=64, flat_fraction=0.5, pass_rate=0.18)  # a longer length's samples
    assert "samples on 18%; at 0.3 16% of prompts are without spread (at 1: 50%)" in fit_task(task, r)[1][0]
    kept = task.replace(temperature=1.0)  # a temperature the user set is the task's own: kept
    assert fit_task(kept, r)[0].temperature == 1.0


def test_the_health_monitor_is_given_the_greedy_answers_against_the_trained_samples_and_the_colder_draws():
    """What `HealthMonitor(sampling=...)` reads to tell flat groups of noise from a task the model cannot yet do."""
    assert report(**NOISY).sampling_measured() is None  # the greedy answers were not asked for
    asked = report(greedy_pass_rate=0.53, colder=(dict(COLD, temperature=0.5, flat_fraction=0.9), COLD), **NOISY)
    m = asked.sampling_measured()
    assert (m.temperature, m.greedy_right, m.samples_right, m.greedy_better) == (1.0, 0.53, 0.02, True)
    assert m.colder == ((0.5, 0.9), (0.3, 0.16)) and m.colder_helped == 0.3  # 0.5 is not clearly less flat
    recorded = json.loads(json.dumps(asked.to_dict()))["sampling_measured"]  # preflight.json, for a resumed run
    assert SamplingMeasured.from_dict(recorded) == m
    as_flat = report(greedy_pass_rate=0.38, colder=(dict(COLD, flat_fraction=0.97, prompts=WRONG),), **NOISY)
    assert as_flat.sampling_measured().colder_helped is None
    fitted = report(greedy_pass_rate=0.53, colder=(COLD,), proposed=COLD, applies=True, **NOISY)
    m = fitted.sampling_measured()  # trained at 0.3: no draw below it, and its samples now face the greedy answers
    assert (m.temperature, m.samples_right, m.colder, m.colder_helped) == (0.3, 0.31, (), None)


def test_a_probe_still_mostly_cut_says_it_cannot_decide():
    r = report(flat_fraction=0.9, truncation_rate=0.95, cut_without_spread=1.0, pass_rate=0.0,
               finished_within_probe=0.2, probe_length=128, suggested_max_completion_length=16)
    assert r.kinds() == ["truncation"] and "cannot tell how long an answer needs: 80%" in r.problems[0].fix


def test_cut_rollouts_with_tools_are_told_to_take_a_longer_length():
    r = report(flat_fraction=0.9, truncation_rate=0.95, cut_without_spread=1.0, pass_rate=0.0, probe_length=16,
               suggested_max_completion_length=16, tools={"call_rate": 0.97, "valid_call_rate": 0.99})
    assert r.kinds() == ["truncation"] and "raise max_completion_length 16 -> 32" in r.problems[0].fix
    roomless = report(flat_fraction=0.9, truncation_rate=0.95, cut_without_spread=1.0, pass_rate=0.0, probe_length=16,
                      suggested_max_completion_length=16, tools={"call_rate": 0.97}, length_room=24)
    assert "16 -> 24" in roomless.problems[0].fix  # within the room the preset's sequences leave


def test_suggested_length_and_totals():
    totals = _totals([np.array([1.0, math.nan, 0.0]), np.array([0.5, 0.5, math.nan])], [1.0, 0.2])
    assert totals.tolist() == pytest.approx([1.1, 0.1, 0.0])
    assert _suggest([10] * 8 + [30] * 2, 10, probe=64, length=16) == 32  # the 90th percentile, rounded up to 8
    assert _suggest([10] * 9 + [30], 10, probe=64, length=16) == 16
    assert _suggest([10] * 5, 10, probe=64, length=16) == 64  # half were cut even at the probe length
    assert _suggest([], 0, probe=64, length=16) == 16


def test_filter_keeps_the_prompts_with_spread():
    data = Dataset.from_dict({"prompt": [f"q{i}" for i in range(6)], "answer": ["1"] * 6})
    kept = report().filter(data)
    assert kept["prompt"] == ["q1", "q3"]  # rows 1 and 3 had spread in the made-up report


def test_fit_task_trains_the_setup_the_report_judged():
    task = rloo_kit.load_task("arithmetic", n_train=20, n_test=4).replace(name="file", max_completion_length=None,
                                                                         reward_funcs=(correct_answer,),
                                                                         reward_weights=None)
    judged = report(proposed=dict(max_completion_length=32), applies=True, truncation_rate=0.8)
    judged.brevity_max_chars, judged.adjustments = 40, ["completion length 16 -> 32", "+ brevity reward (weight 0.2)"]
    fitted, notes = fit_task(task, judged)
    assert fitted.max_completion_length == 32 and [f.__name__ for f in fitted.reward_funcs] == [
        "correct_answer", "brevity"] and fitted.reward_weights == (1.0, 0.2)
    (why,) = notes  # one reason for the length and the brevity reward it brings, said once
    assert why.startswith("completion length 16 -> 32; + brevity reward (weight 0.2): at 16 tokens 80% of completions")
    calm, notes = fit_task(task, report())
    assert calm.max_completion_length == 16 and len(calm.reward_funcs) == 1 and notes == []
    fixed = rloo_kit.load_task("arithmetic", n_train=20, n_test=4)  # a task that sets its own length keeps it
    assert fit_task(fixed, judged) == (fixed, [])


def test_short_answers_are_trained_where_they_cut_clearly_fewer_samples_and_teach_as_much():
    from rloo_kit.preflight_check import Problem, _answers_shorter

    given = setup(truncation_rate=0.61, flat_fraction=0.44)  # a held-back faster/slower file at 128 tokens
    assert _answers_shorter(setup(truncation_rate=0.36, flat_fraction=0.31), given)  # ... and asked for short
    assert _answers_shorter(setup(truncation_rate=0.36, flat_fraction=0.5), given)  # as much spread, within 10 points
    larger = setup(truncation_rate=0.48, flat_fraction=0.34)  # larger.csv seed 2: left at 6 points, it learned a habit
    assert _answers_shorter(setup(truncation_rate=0.32, flat_fraction=0.41), larger)
    assert not _answers_shorter(setup(truncation_rate=0.55, flat_fraction=0.31), given)  # hardly fewer cut
    assert not _answers_shorter(setup(truncation_rate=0.2, flat_fraction=0.6), given)  # ended, but teach less
    collapse = Problem("reward_collapse", "", "", blocking=True)
    assert not _answers_shorter(setup(truncation_rate=0.2, flat_fraction=0.44, problems=[collapse]), given)
    refused = setup(truncation_rate=0.61, flat_fraction=0.9, problems=[collapse])
    assert _answers_shorter(setup(truncation_rate=0.2, flat_fraction=0.9, problems=[collapse]), refused)


def test_the_truncation_fix_asks_for_a_short_answer_only_where_the_kit_has_not():
    cut = report(truncation_rate=0.8)
    (fix,) = [p.fix for p in cut.problems if p.kind == "truncation"]
    assert "--system-prompt" in fix
    cut.asked_short = True  # asked (or probed) by the pre-flight: its figures stand beside the fix instead
    cut.diagnose()
    (fix,) = [p.fix for p in cut.problems if p.kind == "truncation"]
    assert "--system-prompt" not in fix and "brevity" in fix
    cut.short_answers = report(truncation_rate=0.3)  # probed and not adopted: the user may still choose it
    cut.diagnose()
    (fix,) = [p.fix for p in cut.problems if p.kind == "truncation"]
    assert 'all the same (--system-prompt "Answer in one short sentence.")' in fix


def test_the_truncation_fix_is_never_empty():
    """A faster/slower file at 128 tokens (the length its samples called for) with a brevity reward, its short-answer
    probe adopted, still had half its samples cut: the fix said 'Fix: .'."""
    paid = [RewardStats("correct_answer", 0.2, 0.4, 0.0, {}), RewardStats("brevity", 0.0, 0.1, 0.0, {})]
    cut = report(truncation_rate=0.5, rewards=paid, max_completion_length=128, suggested_max_completion_length=128)
    cut.asked_short, cut.system_prompt = True, "Answer in one short sentence."
    cut.diagnose()
    (fix,) = [p.fix for p in cut.problems if p.kind == "truncation"]
    assert fix.startswith("train as it is")


def rambling_report() -> PreflightReport:
    """A file task's report whose fitted length still cut 61% of samples, and whose short-answer probe is adopted."""
    from rloo_kit.diagnostics import SHORT_ANSWER_PROMPT

    judged = report(proposed=dict(max_completion_length=128, truncation_rate=0.61, flat_fraction=0.44), applies=True,
                    truncation_rate=0.98, flat_fraction=0.75)
    told = report(proposed=dict(max_completion_length=64, truncation_rate=0.36, flat_fraction=0.31), applies=True,
                  truncation_rate=0.9, flat_fraction=0.5)
    told.brevity_max_chars, told.adjustments = 40, ["completion length 16 -> 64", "+ brevity reward (weight 0.2)"]
    judged.short_answers, judged.system_prompt = told, SHORT_ANSWER_PROMPT
    return judged


def test_a_task_trained_with_short_answers_has_the_system_prompt_before_every_prompt_of_every_split():
    from rloo_kit.data import chat_prompt

    judged = rambling_report()
    told = judged.short_answers.proposed
    assert judged.trained is told and judged.max_completion_length == 64
    assert judged.without_system_prompt.truncation_rate == 0.61
    assert judged.asked.truncation_rate == 0.98  # as asked stays the prompts as given
    said = str(judged)
    assert 'the kit trains (system prompt "Answer in one short sentence."; completion length 16 -> 64' in said
    assert "without it, fitted (completion length 16 -> 128): at 128 tokens" in said
    assert "the kit trains with it" in said
    whole = json.loads(json.dumps(judged.to_dict()))  # preflight.json: the trained draw at the top level
    assert whole["max_completion_length"] == 64 and whole["brevity_max_chars"] == 40 and whole["applies"]
    assert whole["adjustments"] == ["completion length 16 -> 64", "+ brevity reward (weight 0.2)"]
    assert whole["asked"]["truncation_rate"] == 0.98 and whole["as_given"]["max_completion_length"] == 128
    summary = whole["summary"]
    assert summary["system_prompt"] == "Answer in one short sentence." and summary["max_completion_length"] == 64
    assert summary["as_asked"]["truncation_rate"] == 0.98 and summary["short_answers"]["truncation_rate"] == 0.36
    assert summary["without_system_prompt"]["truncation_rate"] == 0.61

    rows = Dataset.from_dict({"prompt": [chat_prompt(f"Which is faster, a snail or jet {i}?") for i in range(6)]
                              + [chat_prompt("Which is faster?", "Be brief.")], "answer": ["jet"] * 7})
    task = rloo_kit.tasks.Task("file", rows, rows, (correct_answer,)).carve_validation()
    fitted, notes = fit_task(task, judged)
    for split in (fitted.train, fitted.test, fitted.validation):
        assert all(p[0]["role"] == "system" for p in split["prompt"])
    assert {p[0]["content"] for p in fitted.test["prompt"]} == {"Answer in one short sentence.", "Be brief."}
    assert fitted.max_completion_length == 64 and [f.__name__ for f in fitted.reward_funcs] == ["correct_answer",
                                                                                                "brevity"]
    assert notes[0].startswith('system prompt "Answer in one short sentence." before every prompt: as given, 61% of '
                               "completions were cut at 128 tokens and 44% of prompts had no spread; asked for a short "
                               "answer, 36% cut at 64 and 31% without spread")
    assert notes[1].startswith("completion length 16 -> 64; + brevity reward")
    judged.short_answers.adjustments = []  # nothing else changed
    assert 'the kit trains (system prompt "Answer in one short sentence."): at 64 tokens' in str(judged)
    judged.system_prompt = None  # probed, not adopted: the prompts as given are trained
    assert judged.trained is judged.proposed and "not trained: at 64 tokens" in str(judged)
    kept, _ = fit_task(task, judged)
    assert kept.max_completion_length == 128 and kept.test["prompt"] == task.test["prompt"]


def test_a_probe_still_cut_is_widened_by_continuing_its_own_samples(tiny_model_dir, monkeypatch):
    """The random tiny model never ends a reply: the probe (4 x 8 tokens) is widened once, to 64, by continuing
    the cut samples rather than drawing new ones, so the 32 tokens already sampled are kept and paid once: from
    the draw's KV cache, or, for a cache that cannot be narrowed to the cut rows, from the samples as prefixes,
    drawing the very same tokens."""
    from rloo_kit import evaluation

    module = importlib.import_module("rloo_kit.preflight_check")  # the package's `preflight` is the function

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    data = rloo_kit.arithmetic_task(n_train=24, n_test=4)["train"]
    calls, resumed, narrowable = [], [], [True]
    real_generate, real_resume = evaluation.generate_ids, evaluation.resume_ids

    def recorded(model, tokenizer, prompts, **kw):
        out = real_generate(model, tokenizer, prompts, **kw)
        if kw.get("resumable") is not None and not narrowable[0]:
            kw["resumable"].cache = object()
        calls.append((kw["max_new_tokens"], kw.get("prefixes"), out))
        return out

    def resume(model, tokenizer, state, rows, **kw):
        out = real_resume(model, tokenizer, state, rows, **kw)
        resumed.append((kw["max_new_tokens"], rows, out))
        return out

    monkeypatch.setattr(module, "generate_ids", recorded)
    monkeypatch.setattr(module, "resume_ids", resume)

    def widened():
        calls.clear(), resumed.clear()
        return rloo_kit.preflight(model, tok, data, [correct_answer], preset="cpu", num_generations=2,
                                  max_completion_length=8, n_prompts=4, progress=False)

    r = widened()
    eos = evaluation.eos_token_ids(model, tok)
    ((first, _, drawn),) = calls  # nothing drawn again
    open_rows = [n for n, seq in enumerate(s for group in drawn for s in group) if seq[-1] not in eos]
    ((more, rows, added),) = resumed
    assert (first, more, r.widened_from, r.probe_length) == (32, 32, 32, 64) and rows == open_rows
    assert len(added) == len(open_rows) > 4  # only the cut ones go on, from where they were
    assert sorted(r.lengths) == sorted([len(s) for g in drawn for s in g if s[-1] in eos]
                                       + [32 + len(a) for a in added])

    narrowable[0] = False
    again = widened()
    (_, _, drawn_again), (more, prefixes, _) = calls
    assert resumed[0][2] is None and drawn_again == drawn and more == 32
    assert prefixes == [seq for group in drawn for seq in group if seq[-1] not in eos]
    assert again.draw.ids == r.draw.ids  # the same tokens either way


def test_on_the_tiny_model_the_report_adds_up(tiny_model_dir):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    data = rloo_kit.arithmetic_task(n_train=24, n_test=4)["train"]
    r = rloo_kit.preflight(model, tok, data, [correct_answer, length_reward], preset="cpu", num_generations=2,
                           max_completion_length=8, reward_weights=[1.0, 0.1], n_prompts=10, probe_length=12)
    assert len(r.prompts) == 10 and r.num_generations == 2 and r.probe_length == 12
    assert r.zero_spread_fraction == pytest.approx(np.mean([p.spread <= 1e-8 for p in r.prompts]))
    assert r.truncation_rate == pytest.approx(np.mean([p.truncated for p in r.prompts]))
    assert len(r.lengths) == 20 and max(r.lengths) <= 12
    assert [x.name for x in r.rewards] == ["correct_answer", "length_reward"]
    assert "correct_answer ~ length_reward" in r.correlations
    kept = r.filter(data)
    assert len(kept) == sum(p.spread > 1e-8 for p in r.prompts)
    d = r.to_dict()
    assert d["ok"] == r.ok and len(d["prompts"]) == 10
    assert "pre-flight: 10 prompts x 2 completions" in str(r)


def test_on_the_tiny_model_noisy_samples_are_probed_colder_and_an_open_temperature_is_fitted(tiny_model_dir):
    """Every token ends a reply of this tiny model, and the gold answer is its greedy one: greedy answers are all
    right, samples of its near-uniform distribution mostly wrong. The pre-flight holds the two side by side,
    probes colder draws, and trains a task that leaves its temperature open at the one with the most spread."""
    from rloo_kit.evaluation import generate
    from rloo_kit.tasks import Task

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    model.generation_config.eos_token_id = list(range(model.config.vocab_size))
    prompts = rloo_kit.arithmetic_task(n_train=24, n_test=4)["train"]["prompt"][:8]
    greedy, _ = generate(model, tok, prompts, max_new_tokens=4)
    data = Dataset.from_dict({"prompt": prompts, "answer": [g[0] for g in greedy]})
    task = Task("file", data, data, (exact_answer,), match="exact", max_completion_length=4)
    r = rloo_kit.preflight(model, tok, task, preset="cpu", num_generations=2, n_prompts=8, progress=False)
    assert r.greedy_pass_rate == 1.0 and r.asked.pass_rate < 1 - 0.15
    cured = any(c.flat_fraction <= r.asked.flat_fraction - 0.1 for c in r.colder)  # noise, where colder helped
    assert ("sampling_noise" in [p.kind for p in r.asked.problems]) == (cured and r.asked.flat_fraction >= 0.6)
    probed = [c.temperature for c in r.colder]
    assert probed in ([0.5], [0.5, 0.3]) and (probed == [0.5]) == (r.colder[0].flat_fraction < 0.5)
    best = min(r.colder, key=lambda s: s.flat_fraction)
    best = best if best.flat_fraction <= r.asked.flat_fraction - 0.1 else r.asked  # colder, where clearly better
    assert r.trained is best and (best is r.asked or r.adjustments == [f"temperature 1 -> {best.temperature:g}"])
    assert fit_task(task, r)[0].temperature == (None if best is r.asked else best.temperature)
    kept = rloo_kit.preflight(model, tok, task.replace(temperature=1.0), preset="cpu", num_generations=2, n_prompts=8,
                              progress=False)
    assert kept.trained.temperature == 1.0 and kept.colder  # probed for the advice, not applied
    assert fit_task(task.replace(temperature=1.0), kept)[0].temperature == 1.0


def test_an_open_length_far_longer_than_the_answers_need_is_shortened(tiny_model_dir):
    """A GPU preset's 256-1024 tokens for a file task whose answers end within 64: every step, validation and
    evaluation pass ran to the preset's length whenever one sample rambled (a pre-flight of 159 s at 1024 tokens on an
    H200). An open length twice what 90% of the answers need is cut to that, not below 64; a length set is kept."""
    import dataclasses

    from rloo_kit.tasks import Task

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    model.generation_config.eos_token_id = list(range(model.config.vocab_size))  # every reply ends at once
    prompts = rloo_kit.arithmetic_task(n_train=24, n_test=4)["train"]["prompt"][:8]
    data = Dataset.from_dict({"prompt": prompts, "answer": ["1"] * 8})
    task = Task("file", data, data, (correct_answer,))
    long = dataclasses.replace(rloo_kit.get_preset("cpu"), max_completion_length=256, max_seq_length=768)
    r = rloo_kit.preflight(model, tok, task, preset=long, num_generations=2, n_prompts=8, progress=False)
    assert r.asked.max_completion_length == 256 and r.adjustments == ["completion length 256 -> 64"]
    assert r.applies and r.trained.max_completion_length == 64
    assert fit_task(task, r)[0].max_completion_length == 64
    kept = rloo_kit.preflight(model, tok, task.replace(max_completion_length=256), preset=long, num_generations=2,
                              n_prompts=8, progress=False)
    assert kept.trained.max_completion_length == 256 and not kept.adjustments


def test_a_file_task_whose_replies_ramble_is_asked_again_for_a_short_answer(tiny_model_dir, monkeypatch):
    """The random tiny model never ends a reply: a file task (its length open) is still cut at the widest length
    fitted, and the same rows are drawn again with the short-answer system prompt. Here that cuts no fewer, and the
    prompts as given are trained; where it does (forced below), its setup is the one trained. A task that sets its
    length, or whose prompts carry a system message, is judged as it is."""
    from rloo_kit import preflight_check
    from rloo_kit.data import chat_prompt
    from rloo_kit.tasks import Task

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    rows = Dataset.from_dict({"prompt": [chat_prompt(f"Say {i}.") for i in range(8)],
                              "answer": [str(i) for i in range(8)]})
    task = Task("file", rows, rows, (correct_answer,))
    judged = []
    real = preflight_check._preflight
    monkeypatch.setattr(preflight_check, "_preflight",
                        lambda m, t, data, **kw: judged.append(data) or real(m, t, data, **kw))

    def judge(task: Task) -> PreflightReport:
        judged.clear()
        return rloo_kit.preflight(model, tok, task, preset="cpu", num_generations=2, n_prompts=4, progress=False)

    r = judge(task)
    assert r.without_system_prompt.truncation_rate >= 0.5 and r.short_answers is not None and len(judged) == 2
    told = judged[1].train["prompt"]
    assert all(p[0] == {"role": "system", "content": "Answer in one short sentence."} for p in told)
    assert [p.index for p in r.short_answers.prompts] == [p.index for p in r.prompts]  # the same rows
    assert r.system_prompt is None and r.trained is r.without_system_prompt and "replies rambled" in str(r)
    assert r.seconds >= r.short_answers.seconds

    monkeypatch.setattr(preflight_check, "_answers_shorter", lambda told, given: True)
    adopted = judge(task)
    assert adopted.system_prompt == "Answer in one short sentence." and adopted.trained is adopted.short_answers.trained
    fitted, notes = fit_task(task, adopted)
    assert all(p[0]["role"] == "system" for p in fitted.train["prompt"]) and notes[0].startswith("system prompt")
    json.dumps(adopted.to_dict())  # preflight.json holds both draws' figures, and no model

    for as_set in (task.replace(max_completion_length=16), fitted.replace(max_completion_length=None)):
        assert judge(as_set).short_answers is None and len(judged) == 1


def test_the_same_seed_draws_the_same_samples_and_leaves_the_callers_random_numbers_alone(tiny_model_dir):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    data = rloo_kit.arithmetic_task(n_train=8, n_test=2)["train"]

    def draw(seed: int) -> list:
        r = rloo_kit.preflight(model, tok, data, [exact_answer], preset="cpu", num_generations=2,
                               max_completion_length=6, n_prompts=8, seed=seed, progress=False)  # all 8 rows
        return [e["completions"] for e in r.examples]

    torch.manual_seed(123)
    first = draw(0)
    after_first = torch.rand(1)
    torch.manual_seed(123)
    assert draw(0) == first and torch.equal(torch.rand(1), after_first)  # reproducible, and the caller's RNG as it was
    assert draw(1) != first


def test_a_second_reward_is_judged_on_the_first_reports_samples_without_drawing_again(tiny_model_dir, monkeypatch):
    from rloo_kit import preflight_check

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    data = rloo_kit.arithmetic_task(n_train=8, n_test=2)["train"]
    settings = dict(preset="cpu", num_generations=2, max_completion_length=6, n_prompts=8, progress=False)
    first = rloo_kit.preflight(model, tok, data, [exact_answer], **settings)
    drawn = []
    monkeypatch.setattr(preflight_check, "generate_ids", lambda *a, **k: drawn.append(k) or [])
    again = rloo_kit.preflight(model, tok, data, [correct_answer, length_reward], samples=first, **settings)
    assert not drawn and again.lengths == first.lengths and again.examples[0]["completions"] == \
        first.examples[0]["completions"]
    assert [r.name for r in again.rewards] == ["correct_answer", "length_reward"]
    with pytest.raises(ConfigError, match="num_generations differ"):
        rloo_kit.preflight(model, tok, data, [exact_answer], samples=first, **{**settings, "num_generations": 4})
    with pytest.raises(ConfigError, match="prompts differ"):
        rloo_kit.preflight(model, tok, data, [exact_answer], samples=first, **{**settings, "n_prompts": 4})
    other, _ = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    with pytest.raises(ConfigError, match="model differ"):
        rloo_kit.preflight(other, tok, data, [exact_answer], samples=first, **settings)
    with pytest.raises(ConfigError, match="returned in this session"):
        rloo_kit.preflight(model, tok, data, [exact_answer], samples=report(), **settings)


@pytest.mark.heavy
def test_a_loaded_reward_model_is_scored_with_the_tokenizer_beside_it(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    from rloo_kit.errors import RewardError

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    config = LlamaConfig.from_pretrained(tiny_model_dir, num_labels=1, pad_token_id=tok.pad_token_id)
    LlamaForSequenceClassification(config).save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    rm = LlamaForSequenceClassification.from_pretrained(tmp_path / "rm")  # as a user hands it over, loaded
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    data = rloo_kit.arithmetic_task(n_train=8, n_test=2)["train"]
    r = rloo_kit.preflight(model, tok, data, [rm], preset="cpu", num_generations=2, max_completion_length=4,
                           n_prompts=3)
    assert [x.name for x in r.rewards] == ["rm"] and r.rewards[0].unscored == 0
    assert r.rewards[0].std > 0 and np.isfinite(r.rewards[0].mean)  # a random head scores texts differently
    rm.config._name_or_path = str(tmp_path / "nowhere")
    with pytest.raises(RewardError, match=r"reward_model\(model, tokenizer\)"):
        rloo_kit.preflight(model, tok, data, [rm], preset="cpu", num_generations=2, max_completion_length=4,
                           n_prompts=3)


@pytest.fixture(scope="module")
def default_model(default_model_dir):
    return rloo_kit.load_model(default_model_dir, preset="cpu")


@pytest.fixture(scope="module")
def arithmetic():
    return rloo_kit.load_task("arithmetic")


@pytest.mark.slow
def test_all_or_nothing_reward_collapses_before_any_step(default_model, arithmetic):
    model, tok = default_model
    r = rloo_kit.preflight(model, tok, arithmetic.train, [exact_answer], preset="cpu", n_prompts=8,
                           max_completion_length=64, probe_length=64)  # room to end: never exactly right, not cut
    assert r.zero_spread_fraction >= 0.8 and "reward_collapse" in r.kinds() and not r.ok
    # answers right by the final-answer matching, sampled and greedy, score 0 like the rest: no colder draw is spent
    assert r.asked.pass_rate > 0 and r.asked.unpaid and not r.colder and r.greedy_pass_rate > 0


@pytest.mark.slow
def test_the_tasks_own_rewards_can_learn(default_model, arithmetic):
    model, tok = default_model
    r = rloo_kit.preflight(model, tok, arithmetic, preset="cpu", n_prompts=16, probe_length=16)
    assert r.ok and not any(p.blocking for p in r.problems)  # warnings (cut answers, thin spread) may stand
    assert [x.name for x in r.rewards] == ["correct_answer", "brevity"] and r.max_completion_length == 16


@pytest.mark.slow
def test_a_reward_that_raises_is_unscored(default_model, arithmetic):
    def broken(prompts, completions, answer, **kwargs):
        raise KeyError("no such field")

    model, tok = default_model
    r = rloo_kit.preflight(model, tok, arithmetic.train, [broken], preset="cpu", n_prompts=8, probe_length=16)
    assert r.kinds()[0] == "unscored" and not r.ok and r.rewards[0].causes == {"raised KeyError": 32}


@pytest.mark.slow
def test_two_tokens_truncate(default_model, arithmetic):
    model, tok = default_model
    r = rloo_kit.preflight(model, tok, arithmetic, preset="cpu", max_completion_length=2, n_prompts=8,
                           probe_length=24)
    assert "truncation" in r.kinds() and r.truncation_rate >= 0.9
    assert r.suggested_max_completion_length > 2
