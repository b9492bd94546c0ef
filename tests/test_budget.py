"""A run bounded by time: it stops on its clock, measures validation rows carved from the training rows (never the
test split), keeps the best step's adapter as the run's, and a resumed run continues its budget and its curve. A run
bounded by its steps keeps its best step the same way (StepBudget)."""

import json
import os
import shutil
import subprocess
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerControl

import rloo_kit
from rloo_kit import budget as budget_module
from rloo_kit.budget import (
    BUDGET_STEPS,
    STATE_FILE,
    VALIDATION_KEY,
    VALIDATION_SHARE,
    StepBudget,
    TimeBudget,
    Validation,
    validation_rows,
)
from rloo_kit.cli import main
from rloo_kit.diagnostics import ANSWER_SPREAD_KEY, HABIT_KEY, SPREAD_KEY
from rloo_kit.evaluation import EvalReport
from rloo_kit.training import _validator

from .helpers import BudgetClock, run_budget, train_args, train_cmd


def test_validation_rows_are_carved_from_training_rows_never_the_test_split():
    task = rloo_kit.load_task("arithmetic", n_train=60, n_test=8)
    carved = task.carve_validation(seed=0)
    assert len(carved.validation) == validation_rows(60) == 12 and len(carved.train) <= 48
    train, validation, test = ({str(p) for p in split["prompt"]} for split in (carved.train, carved.validation,
                                                                            carved.test))
    assert not train & validation and validation <= {str(p) for p in task.train["prompt"]} and not validation & test
    assert carved.carve_validation(seed=1) is carved  # once only
    assert validation_rows(3) == 1 and validation_rows(10_000) == 32


@pytest.mark.heavy
def test_a_budgeted_run_stops_on_its_clock_and_ends_with_its_best_steps_adapter(tiny_model_dir, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(budget_module, "MEASUREMENTS", 8)

    class Clock:  # the budget's clock: a tenth of a second each time it is read, however busy the machine is
        now = 0.0

        def time(self):
            self.now += 0.1
            return self.now

    monkeypatch.setattr(budget_module, "time", Clock())
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    task = rloo_kit.load_task("arithmetic", n_train=40, n_test=4)
    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir=str(tmp_path), minutes=0.04,
                                     per_device_train_batch_size=4, num_generations=2, max_completion_length=8,
                                     save_strategy="no", live=False, learning_rate=5e-3)
    assert trainer.args.max_steps == BUDGET_STEPS and trainer.args.lr_scheduler_type == "constant"
    right = iter([4, 5, 12] + [8] * 1000)  # of 20 rows: the third measurement is the one kept
    seen = []

    def validate(model):  # each pass's replies say which pass they are
        seen.append(model.training)
        n = next(right)
        return Validation(_first_right(n, 20).right, replies=({"completion": f"pass {len(seen)}", "right": n},))

    trainer.time_budget.validate = validate
    rloo_kit.train(trainer)
    curve, best = trainer.time_budget.curve, trainer.time_budget.best
    assert curve[0]["step"] == 0 and len(curve) >= 4 and best == curve[2]
    assert 0 < best["step"] < trainer.state.global_step
    assert curve[-1]["step"] == trainer.state.global_step  # measured at the stop
    assert abs(curve[-1]["minutes"] - 0.04) < 0.01  # near the budget
    assert trainer.state.global_step < 30, trainer.state.global_step  # stopped by its clock
    kept = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    best_saved = load_file(tmp_path / "best" / "adapter_model.safetensors")
    assert kept.keys() == best_saved.keys() and all(torch.equal(kept[k], best_saved[k]) for k in kept)
    assert any(v.abs().sum() > 0 for k, v in kept.items() if "lora_B" in k)  # a trained step, not step 0
    assert json.loads((tmp_path / "best" / "best.json").read_text()) == best
    last = load_file(tmp_path / "last" / "adapter_model.safetensors")  # the last step, kept beside it to measure
    assert last.keys() == kept.keys() and any(not torch.equal(last[k], kept[k]) for k in kept)
    assert json.loads((tmp_path / "last" / "last.json").read_text()) == curve[-1]
    # each folder has its pass's validation replies, to read what that step answers
    assert json.loads((tmp_path / "best" / "replies.json").read_text()) == [{"completion": "pass 3", "right": 12}]
    assert json.loads((tmp_path / "last" / "replies.json").read_text()) == [
        {"completion": f"pass {len(curve)}", "right": 8}]


def _first_right(n: int, rows: int) -> Validation:
    return Validation([True] * n + [False] * (rows - n))


def _measured(tmp_path, monkeypatch, validations: list[Validation], steps: tuple[int, ...]) -> tuple:
    """A budget that measured `validations` at `steps`, and the steps it kept, in turn."""
    measured = iter(validations)
    budget = TimeBudget(5, lambda model: next(measured), tmp_path)
    saved = []
    monkeypatch.setattr(budget, "_keep", lambda model: saved.append(budget.best["step"]))
    for step in steps:
        budget._measure(step, model=None)
    return budget, saved


def test_the_kept_step_is_the_one_right_on_the_most_validation_rows_the_later_of_equals(tmp_path, monkeypatch,
                                                                                         caplog):
    """A held-back-sized opposites file: 8 of its 16 validation rows right at every measurement while held-out
    accuracy rose 11 -> 16 of 20; held to a lead over step 0, the run kept step 0. A later step right on as many
    rows is kept; one right on fewer is not."""
    with caplog.at_level("INFO", logger="rloo_kit"):
        budget, saved = _measured(tmp_path, monkeypatch, [
            _first_right(8, 16), Validation(_first_right(8, 16).right[::-1]), _first_right(10, 16),
            _first_right(9, 16), _first_right(10, 16)], steps=(0, 17, 51, 70, 86))
    assert saved == [0, 17, 51, 86] and budget.best == budget.curve[-1]
    assert "validation accuracy at step 70 (0.0 min): 0.56 (kept: step 51, 0.62)" in caplog.text


def test_a_step_whose_replies_give_one_answer_whatever_the_row_is_not_kept(tmp_path, monkeypatch, caplog):
    """A held-back weekday file (*Which day is 2 days after Friday?*) learned to answer 'Tuesday' to everything:
    validation 0 -> 2 of 6, the two rows whose answer it is, and the kept step answered 0 of 8 held out against the
    base model's 1. A step that answers one way is not kept; a later one whose answers vary again can be."""
    with caplog.at_level("INFO", logger="rloo_kit"):
        budget, saved = _measured(tmp_path, monkeypatch, [
            _first_right(0, 6), Validation(_first_right(2, 6).right, one_answer="Tuesday"), _first_right(1, 6)],
            steps=(0, 24, 64))
    assert saved == [0, 64] and budget.curve[1]["one_answer"] == "Tuesday" and "one_answer" not in budget.curve[2]
    assert "step 24 (0.0 min): 0.33, most replies 'Tuesday' whatever the row (kept: step 0, 0.00)" in caplog.text


def test_a_step_whose_replies_pick_one_place_in_every_list_is_not_kept(tmp_path, monkeypatch, caplog):
    """A number-choice run learned '<first number> is larger than <second>.': right on the rows that offer the
    larger first, more of them than step 0's reasoned replies. A step that picks by place is not kept."""
    with caplog.at_level("INFO", logger="rloo_kit"):
        budget, saved = _measured(tmp_path, monkeypatch, [
            _first_right(5, 20), Validation(_first_right(12, 20).right, one_place=1), _first_right(9, 20)],
            steps=(0, 20, 40))
    assert saved == [0, 40] and budget.curve[1]["one_place"] == 1 and "one_place" not in budget.curve[2]
    assert ("step 20 (0.0 min): 0.60, most replies pick the choice offered first whatever the row (kept: step 0, "
            "0.25)") in caplog.text


def test_the_validation_pass_marks_replies_that_pick_by_place():
    """The greedy pass a budget measures names the place its replies pick whatever the row, as the report after
    training does (`EvalReport.one_place`)."""
    pairs = [("92", "18"), ("35", "86"), ("64", "61"), ("17", "71"), ("99", "69"), ("38", "70"), ("11", "42")]
    rows = [{"prompt": f"Which number is larger, {a} or {b}?", "completion": f"{a} is larger than {b}.",
             "answer": max(a, b, key=int), "predicted": a, "choices": [a, b], "correct": int(a) > int(b)}
            for a, b in pairs]
    report = EvalReport(3 / 7, {}, {}, 8.0, 0.0, 1, rows)
    task = SimpleNamespace(validation=None, evaluate=lambda *args, **kwargs: report)
    measured = _validator(task, tokenizer=None, config=SimpleNamespace(max_completion_length=64))(model=None)
    assert measured.right == [True, False, True, False, True, False, False]
    assert measured.marks() == {"one_place": 1}


def test_a_step_right_no_more_often_than_chance_or_on_no_row_is_not_kept(tmp_path, monkeypatch, caplog):
    """A held-back weekday file's replies alternated 'Tuesday' and 'Sunday' whatever the day asked: right on 1 of 6
    validation rows, which such replies get by luck (here, chance: 1 row). Neither that step nor one right on no row
    replaces step 0; a later one right on more rows than chance is kept."""
    with caplog.at_level("INFO", logger="rloo_kit"):
        budget, saved = _measured(tmp_path, monkeypatch, [
            _first_right(1, 6), Validation(_first_right(1, 6).right, chance=1.0),
            Validation(_first_right(0, 6).right, chance=0.0), _first_right(1, 6),
            Validation(_first_right(3, 6).right, chance=1.5)], steps=(0, 18, 30, 48, 84))
    assert saved == [0, 48, 84]
    assert [p.get("chance") for p in budget.curve] == [None, 0.167, None, None, None]  # step 30: right on none
    assert ("step 18 (0.0 min): 0.17, no better than its replies dealt to the rows at random (0.17) (kept: step 0, "
            "0.17)") in caplog.text
    never, saved = _measured(tmp_path, monkeypatch, [_first_right(0, 6)] * 2, steps=(0, 10))
    assert saved == [0] and never.best["step"] == 0  # right on none throughout: the model the run began with stays


def test_a_step_whose_lead_over_chance_random_deals_often_match_is_not_kept(tmp_path, monkeypatch):
    """A held-back four-letter multiple-choice file: step 67 gave only 'B' and 'D' whatever the row, right on 4 of 12
    validation rows against chance's 3.5 (random deals of its replies did as well half the time), and was kept over
    step 0: held out 0.31 -> 0.19. A lead that deals of the replies rarely match is kept."""
    lucky = Validation(_first_right(4, 12).right, chance=3.5, chance_share=0.5)
    assert lucky.marks() == {"chance": 0.292}
    budget, saved = _measured(tmp_path, monkeypatch, [_first_right(2, 12), lucky], steps=(0, 67))
    assert saved == [0] and budget.best["step"] == 0
    learned = Validation(_first_right(4, 12).right, chance=3.5, chance_share=0.3)
    assert learned.marks() == {}
    budget, saved = _measured(tmp_path, monkeypatch, [_first_right(2, 12), learned], steps=(0, 67))
    assert saved == [0, 67]


def test_a_resumed_run_keeps_holding_its_steps_to_the_kept_one(tmp_path, monkeypatch):
    """A held-back rounding file: validation 0 of 12 at step 0, 11 at step 38, 12 at steps 76 and 116, then 4. A
    resumed run holds its next steps to the kept step of its first attempt."""
    budget, saved = _measured(tmp_path, monkeypatch, [
        _first_right(0, 12), _first_right(11, 12), _first_right(12, 12), _first_right(12, 12), _first_right(4, 12)],
        steps=(0, 38, 76, 116, 156))
    assert saved == [0, 38, 76, 116] and budget.best["step"] == 116
    checkpoint = tmp_path / "checkpoint-156"
    checkpoint.mkdir()
    budget.on_save(None, type("State", (), {"global_step": 156}), None)
    resumed = TimeBudget(5, lambda model: _first_right(11, 12), tmp_path)
    monkeypatch.setattr(resumed, "_keep", lambda model: None)
    resumed._resume(156)
    resumed._measure(196, model=None)
    assert resumed.best["step"] == 116 and [p["step"] for p in resumed.curve] == [0, 38, 76, 116, 156, 196]


class _Adapter:
    """A model whose save_pretrained writes `weights` into the folder, failing halfway where `fail` is set."""

    def __init__(self, weights: str, fail: bool = False):
        self.weights, self.fail = weights, fail

    def save_pretrained(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "adapter_model.safetensors"), "w") as f:
            f.write(self.weights[:3] if self.fail else self.weights)
        if self.fail:
            raise KeyboardInterrupt  # stopped while writing


def test_a_run_stopped_while_saving_its_best_step_keeps_the_one_saved_before(tmp_path):
    budget = TimeBudget(5, lambda model: None, tmp_path)
    budget._save(_Adapter("step 4's adapter"), "best", {"step": 4, "minutes": 1.0, "accuracy": 0.5})
    with pytest.raises(KeyboardInterrupt):
        budget._save(_Adapter("step 8's adapter", fail=True), "best", {"step": 8, "minutes": 2.0, "accuracy": 0.6})
    assert (tmp_path / "best" / "adapter_model.safetensors").read_text() == "step 4's adapter"
    assert budget_module.saved_point(tmp_path, "best")["step"] == 4
    budget._save(_Adapter("step 9's adapter"), "best", {"step": 9, "minutes": 2.5, "accuracy": 0.6})
    assert (tmp_path / "best" / "adapter_model.safetensors").read_text() == "step 9's adapter"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]  # nothing half-written left beside it


def test_a_step_kept_after_the_last_checkpoint_stays_kept_on_resume(tmp_path, caplog):
    """Ctrl-C between two checkpoints: best/ holds step 6, measured after checkpoint-4, whose state kept step 4.
    The resumed run keeps step 6 (it replaced step 4 by the rule); best/ of another step is not taken for it."""
    curve = [{"step": 0, "minutes": 0.0, "accuracy": 0.1}, {"step": 4, "minutes": 2.0, "accuracy": 0.3}]
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / STATE_FILE).write_text(json.dumps({"spent_seconds": 150.0, "curve": curve,
                                                                    "best": curve[1]}))
    later = {"step": 6, "minutes": 3.0, "accuracy": 0.4}
    TimeBudget(5, lambda model: None, tmp_path)._save(_Adapter("step 6's"), "best", later)
    resumed = TimeBudget(5, lambda model: None, tmp_path)
    with caplog.at_level("INFO", logger="rloo_kit"):
        resumed._resume(4)
    assert resumed.best == later and resumed.curve == curve and "(in best/, measured after checkpoint-4)" in caplog.text
    resumed.validate = lambda model: _first_right(3, 10)  # step 6 again, this time below the kept one
    done = []
    resumed._save = lambda model, folder, point, replies=(): done.append((folder, point["step"]))
    resumed._restore = lambda model: done.append(("restored", resumed.best["step"]))
    resumed.on_train_end(None, type("State", (), {"global_step": 6}), None, model=object())
    assert resumed.best == later and done == [("last", 6), ("restored", 6)]  # best/'s step 6, not this one

    (tmp_path / "best" / "best.json").write_text(json.dumps({**later, "step": 2}))  # not the kept step's adapter
    stale = TimeBudget(5, lambda model: None, tmp_path)
    stale._resume(4)
    with caplog.at_level("WARNING", logger="rloo_kit"):
        stale._restore(model=None)
    assert stale.best == curve[1] and "best/ does not hold the kept step's adapter" in caplog.text


@pytest.mark.parametrize("last_rows, kept_step", [(_first_right(9, 10), 7), (_first_right(4, 10), 0)])
def test_a_run_the_health_monitor_stops_has_its_last_step_measured(tmp_path, monkeypatch, last_rows, kept_step):
    """The monitor stopped a held-back multiple-choice run at step 22 on memorisation, between two measurements:
    the last step was never measured, so the keep rule could not take it, and the report named the last measured
    step (15) as the one in last/. The last step is now measured at the end, whoever stopped the run."""
    measured = iter([_first_right(5, 10), last_rows])
    budget = TimeBudget(5, lambda model: next(measured), tmp_path)
    saved = []
    monkeypatch.setattr(budget, "_keep", lambda model: saved.append(("best", budget.best["step"])))
    monkeypatch.setattr(budget, "_save", lambda model, folder, point, replies=(): saved.append((folder, point["step"])))
    monkeypatch.setattr(budget, "_restore", lambda model: saved.append(("restored", budget.best["step"])))
    budget._measure(0, model=None)

    class State:
        global_step = 7

    budget.on_train_end(None, State(), None, model=object())
    assert [p["step"] for p in budget.curve] == [0, 7] and budget.best["step"] == kept_step
    assert saved == ([("best", 0), ("best", 7)] if kept_step else [("best", 0), ("last", 7), ("restored", 0)])


@pytest.mark.parametrize("step_seconds, validation_seconds, measured, warm_up",
                         [(50, 20, [0, 1, 2], 0), (13.5, 8, [0, 3, 6, 9, 10], 0), (40, 0, [0, 1, 2, 3, 4], 0),
                          (10, 5, [0, 1, 2], 140)])
def test_a_budget_measures_a_quarter_of_its_time_at_most_and_ends_nearest_its_minutes(
        tmp_path, monkeypatch, step_seconds, validation_seconds, measured, warm_up):
    """Three minutes of 50-second steps and 20-second validation passes (a label file's on a 2-core CPU) ran 3.9
    minutes when a step began whenever time was left and a measurement followed every step (40% of the time):
    now the last step is the one that ends nearest the budget (2.8 min), measurements included, and those on
    the way take a quarter of it at most. The demo's steps (13.5 s, 8 s a pass) are measured every
    budget/MEASUREMENTS still; a task without answers (nothing to measure) stops within half a step of it. A
    first step that compiles (Unsloth's, 50-80 s on an H100), or a first pass that warms up, is not taken for
    what the next ones cost."""
    clock = BudgetClock()
    monkeypatch.setattr(budget_module, "time", clock)

    def validate(model):
        clock.now += validation_seconds * (1.5 if not budget.curve else 1)  # the first pass warms up
        return Validation([True] * 10) if validation_seconds else None

    budget = TimeBudget(3, validate, tmp_path)
    monkeypatch.setattr(budget, "_keep", lambda model: None)
    state = run_budget(budget, clock, lambda step: step_seconds + (warm_up if step == 0 else 0))
    assert [point["step"] for point in budget.curve] == measured and state.global_step == measured[-1]
    assert abs(budget.spent() - 180) <= (step_seconds + validation_seconds) / 2  # the end nearest 3 minutes
    between = len(budget.curve) - 2  # the measurements besides step 0's and the stop's
    assert validation_seconds * between <= VALIDATION_SHARE * budget.spent()
    if validation_seconds == 8:
        gaps = [60 * (b["minutes"] - a["minutes"]) - validation_seconds
                for a, b in zip(budget.curve[:-2], budget.curve[1:-1], strict=True)]
        assert all(30 <= gap < 30 + step_seconds for gap in gaps), gaps  # every 30 s: the first step's end after


@pytest.mark.parametrize("validation_seconds, measured", [(0, [0, 7, 14, 21, 28, 35]), (12, [0, 7, 19, 31])])
def test_a_run_of_max_steps_measures_along_the_way_and_never_stops_on_a_clock(tmp_path, monkeypatch,
                                                                              validation_seconds, measured):
    """40 steps of 3 s: measured at step 0 and every 40/MEASUREMENTS steps; where a pass takes 12 s, no more often
    than keeps measuring within a quarter of the time (the first pass warms up, so it does not count). The run takes
    all its steps: the clock has no say (the last step is measured at train end, `test_a_run_of_max_steps_...`)."""
    clock = BudgetClock()
    monkeypatch.setattr(budget_module, "time", clock)

    def validate(model):
        clock.now += validation_seconds
        return Validation([True] * 10)

    budget = StepBudget(validate, tmp_path)
    monkeypatch.setattr(budget, "_keep", lambda model: None)
    state = run_budget(budget, clock, lambda step: 3, max_steps=40)
    assert state.global_step == 40 and [point["step"] for point in budget.curve] == measured
    assert budget.minutes is None and budget.best == budget.curve[-1]  # equals: the later is kept


def test_each_measurement_is_in_the_step_log_a_checkpoint_keeps(tmp_path, monkeypatch):
    """A resumed run's diagnoses are replayed over the log_history its checkpoint keeps. The measurements rode on the
    logs the health monitor read, not on that copy, so a resumed run that had memorised its training prompts (its
    reward rising, validation flat) lost the diagnosis. The copy now has them too, and the replay names it."""
    clock = BudgetClock()
    monkeypatch.setattr(budget_module, "time", clock)
    budget = StepBudget(lambda model: _first_right(4, 10), tmp_path)
    monkeypatch.setattr(budget, "_keep", lambda model: None)
    state = run_budget(budget, clock, lambda step: 3, max_steps=40,
                       logs=lambda step: {"reward": min(0.9, 0.1 + 0.03 * step), "reward_std": 0.3, "kl": 0.01})
    logged = [(h["step"], h[VALIDATION_KEY]) for h in state.log_history if VALIDATION_KEY in h]
    measured = [(max(p["step"], 1), p["accuracy"]) for p in budget.curve]  # step 0's rides on step 1's log
    assert len(logged) >= 4 and logged == measured
    assert "memorisation" in [d.kind for d in rloo_kit.HealthMonitor().diagnose(state.log_history)]


def test_replies_that_pick_by_place_ride_in_the_log_and_the_monitor_names_a_habit(tmp_path, monkeypatch):
    """A held-back number-choice run's training reward rose 0.28 -> 0.50 while its validation replies picked the
    first number offered whatever the row, and the monitor named memorisation, whose fix (more rows, a lower learning
    rate) does not touch a habit. The measurement's habit is logged beside its accuracy, and the replay names it."""
    clock = BudgetClock()
    monkeypatch.setattr(budget_module, "time", clock)
    first = Validation([True] * 4 + [False] * 6, one_place=1)
    measured = iter([_first_right(4, 10)] + [first] * 20)
    budget = StepBudget(lambda model: next(measured), tmp_path)
    monkeypatch.setattr(budget, "_keep", lambda model: None)
    state = run_budget(budget, clock, lambda step: 3, max_steps=40,
                       logs=lambda step: {"reward": min(0.9, 0.1 + 0.03 * step), "reward_std": 0.3, "kl": 0.01})
    habits = [h[HABIT_KEY] for h in state.log_history if HABIT_KEY in h]
    assert len(habits) == len(budget.curve) - 1  # step 0's replies had no habit
    assert set(habits) == {"most replies pick the choice offered first whatever the row"}
    diagnoses = rloo_kit.HealthMonitor().diagnose(state.log_history)
    (named,) = [d for d in diagnoses if d.kind in ("memorisation", "answer_habit")]
    assert named.kind == "answer_habit" and named.evidence["habit"] == habits[-1]
    assert "pick the choice offered first whatever the row: the policy learned a habit" in named.message
    assert "learning_rate" not in named.fix and "by place in their lists" in named.fix


@pytest.mark.parametrize("kind, last_right, flat_shares, stopped", [
    ("budget", 12, (1.0,), True),  # all rows right twice, groups flat: solved
    ("budget", 12, (1.0, 1.0, 0.75, 1.0, 1.0, 1.0), True),  # now and then a wrong sample: solved all the same
    ("budget", 11, (1.0,), False),  # a row still wrong: a later step could be kept for more
    ("budget", 12, (0.75,), False),  # a group in four with spread at every step: the run still learns from them
    ("steps", 12, (1.0,), False),  # a run of steps trains the steps it was given
])
def test_a_budget_right_on_every_validation_row_while_its_groups_are_flat_stops_solved(
        tmp_path, monkeypatch, kind, last_right, flat_shares, stopped):
    """A held-back first-letter file was right on all 12 validation rows from step 7 and answered every training
    prompt one way from step 16, then spent 50 more steps, 6 of its 8 minutes, keeping a step no better than step
    7. A budget now stops at the measurement that makes two of all rows right, once its groups have been flat for
    SOLVED_FLAT_STEPS steps (nine groups in ten, as the health monitor counts them flat): the steps after could keep
    nothing right on more rows."""
    clock = BudgetClock()
    monkeypatch.setattr(budget_module, "time", clock)
    rows = iter([_first_right(8, 12), _first_right(12, 12), *[_first_right(last_right, 12)] * 99])
    budget = (TimeBudget(8, lambda model: next(rows), tmp_path) if kind == "budget"
              else StepBudget(lambda model: next(rows), tmp_path))
    monkeypatch.setattr(budget, "_keep", lambda model: None)

    def logs(step):  # groups with spread to step 15, then flat at `flat_shares`, in turn
        return {"reward": 0.6, SPREAD_KEY: 0.5 if step <= 15 else 0.9,
                ANSWER_SPREAD_KEY: 0.25 if step <= 15 else flat_shares[step % len(flat_shares)]}

    control = TrainerControl()
    state = run_budget(budget, clock, lambda step: 6, max_steps=0 if kind == "budget" else 120, logs=logs,
                       control=control)
    steps = [p["step"] for p in budget.curve]
    if stopped:
        assert budget.solved_at == state.global_step == steps[-1] and state.global_step < 40  # of 80 in 8 min
        assert control.should_save  # the step it stopped at is checkpointed
        assert budget.spent() < 240 and budget.curve[-2]["accuracy"] == budget.curve[-1]["accuracy"] == 1
        assert sum(p["step"] > 15 for p in budget.curve) <= 2  # stopped at the first chance: flat from step 16
        _resumes_finished(budget, state, tmp_path)
    else:
        assert budget.solved_at is None and state.global_step >= 78


def _resumes_finished(budget: TimeBudget, state, tmp_path) -> None:
    """A solved run's checkpoint (the budget asks for one where it stops) says so, and --resume finds it finished
    (seen: "already finished, at step 28") rather than train the rest of the minutes again from an earlier one."""
    from types import SimpleNamespace

    from rloo_kit.training import _finished, _train_on

    checkpoint = tmp_path / f"checkpoint-{state.global_step}"
    checkpoint.mkdir()
    state.save_to_json(str(checkpoint / "trainer_state.json"))
    budget.on_save(None, state, None)
    again = TimeBudget(8, lambda model: None, tmp_path)
    again._resume(state.global_step)
    assert again.solved_at == budget.solved_at == state.global_step
    trainer = SimpleNamespace(args=SimpleNamespace(max_steps=BUDGET_STEPS), is_deepspeed_enabled=False,
                              is_fsdp_enabled=False, time_budget=again)
    assert _finished(trainer, checkpoint) and "It stopped solved" in _train_on(trainer)  # not: raise max_steps


@pytest.mark.heavy
def test_a_run_of_max_steps_ends_with_its_best_validation_steps_adapter(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(budget_module, "MEASUREMENTS", 3)  # every 2 of 6 steps
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    task = rloo_kit.load_task("arithmetic", n_train=40, n_test=4)
    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir=str(tmp_path), keep_best=True,
                                     max_steps=6, per_device_train_batch_size=4, num_generations=2,
                                     max_completion_length=8, save_strategy="no", live=False, learning_rate=5e-3)
    assert trainer.args.max_steps == 6 and trainer.time_budget.minutes is None
    right = iter([4, 12, 5, 5])  # of 20 rows: step 2's measurement is kept
    trainer.time_budget.validate = lambda m: _first_right(next(right), 20)
    rloo_kit.train(trainer)
    curve, best = trainer.time_budget.curve, trainer.time_budget.best
    assert [p["step"] for p in curve] == [0, 2, 4, 6] and best == curve[1] and trainer.state.global_step == 6
    kept = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    best_saved = load_file(tmp_path / "best" / "adapter_model.safetensors")
    assert kept.keys() == best_saved.keys() and all(torch.equal(kept[k], best_saved[k]) for k in kept)
    assert any(v.abs().sum() > 0 for k, v in kept.items() if "lora_B" in k)  # step 2, trained
    last = load_file(tmp_path / "last" / "adapter_model.safetensors")
    assert any(not torch.equal(last[k], kept[k]) for k in kept)
    assert json.loads((tmp_path / "last" / "last.json").read_text()) == curve[-1]


def test_a_resumed_budget_continues_its_clock_and_curve(tmp_path):
    checkpoint = tmp_path / "checkpoint-4"
    checkpoint.mkdir()
    curve = [{"step": 0, "minutes": 0.0, "accuracy": 0.1}, {"step": 4, "minutes": 2.0, "accuracy": 0.3}]
    (checkpoint / STATE_FILE).write_text(json.dumps({"spent_seconds": 150.0, "curve": curve, "best": curve[1],
                                                     "kept_rows": _first_right(3, 10).right}))  # an older version's too
    calls = []
    budget = TimeBudget(5, lambda model: calls.append(model) or Validation([True]), tmp_path)

    class State:
        global_step = 4

    budget.on_train_begin(None, State(), None, model=None)
    assert calls == [] and budget.curve == curve and budget.best == curve[1]  # not measured again
    assert 150.0 <= budget.spent() < 160 and 140 < budget.left() <= 150


@pytest.mark.heavy
def test_the_command_keeps_the_best_validation_step_unless_told_to_keep_the_last(tiny_model_dir, tmp_path):
    """A random model answers no validation row, so no trained step replaces step 0's: with --keep best the run ends
    with the adapter it began with (zero) and leaves its last step in last/; a resumed finished run gives the same;
    by default (the last step) it ends with the last step and measures no validation rows."""
    out, env = tmp_path / "best", {**os.environ, "TQDM_DISABLE": "1"}
    done = subprocess.run(train_cmd(tiny_model_dir, out, "--keep", "best", steps=3), env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert [p["step"] for p in m["validation"]["curve"]][::len(m["validation"]["curve"]) - 1] == [0, 3]
    assert m["validation"]["kept_step"] == 0 and m["steps"] == 3 and "trained 3 steps; keeping step 0" in done.stderr
    assert "the adapter is step 0's; step 3's is in last/" in done.stdout
    assert _lora_b_is_zero(out / "adapter") and not _lora_b_is_zero(out / "last")
    shutil.rmtree(out / "adapter")  # as if killed after the last checkpoint: the resume writes the kept step's
    again = subprocess.run(train_cmd(tiny_model_dir, out, "--keep", "best", "--resume", steps=3), env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "already finished" in again.stderr, again.stderr[-3000:]
    assert _lora_b_is_zero(out / "adapter")
    last = tmp_path / "last"
    assert main(train_args(tiny_model_dir, last, steps=3)) == 0
    m = json.loads((last / "metrics.json").read_text())
    assert m["validation"] is None and not (last / "best").exists() and not _lora_b_is_zero(last / "adapter")


def _lora_b_is_zero(adapter) -> bool:
    weights = load_file(adapter / "adapter_model.safetensors")
    return all(v.abs().sum() == 0 for k, v in weights.items() if "lora_B" in k)


@pytest.mark.heavy
def test_the_command_trains_for_minutes_and_reports_the_validation_curve(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--model", str(tiny_model_dir), "--preset", "cpu", "--output-dir", str(out), "--minutes",
                 "0.05", "--batch-size", "4", "--num-generations", "2", "--max-completion-length", "8", "--n-test",
                 "4", "--preflight-prompts", "0"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["budget_minutes"] == 0.05 and m["steps"] >= 1 and m["config"]["max_steps"] == BUDGET_STEPS
    validation = m["validation"]
    assert validation["rows"] == 32 and validation["curve"][0]["step"] == 0 and validation["kept_step"] is not None
    assert (out / "best" / "adapter_config.json").is_file() and (out / "adapter" / "adapter_config.json").is_file()
