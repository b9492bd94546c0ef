"""The one pipeline behind `rloo-kit train`, notebook 01 and `make demo`: its report is metrics.json, and a
resumed run trains the setup its first attempt's pre-flight chose, reusing the accuracy measured before."""

import json

import rloo_kit.cli as cli
from rloo_kit.pipeline import RunReport


def test_a_resumed_file_task_keeps_its_fitted_length_and_its_accuracy_before(tiny_model_dir, tmp_path, caplog):
    data = tmp_path / "task.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {i}.", "answer": str(i)}) + "\n" for i in range(20)))
    out = tmp_path / "run"
    common = ["--model", str(tiny_model_dir), "--preset", "cpu", "--task", "file", "--path", str(data),
              "--output-dir", str(out), "--batch-size", "4", "--num-generations", "2", "--n-test", "4",
              "--save-steps", "1"]
    assert cli.main(["train", *common, "--max-steps", "2", "--preflight-prompts", "4", "--force"]) == 0
    first = json.loads((out / "metrics.json").read_text())
    assert RunReport(**first).to_dict() == first  # metrics.json is the report, field for field
    fitted = json.loads((out / "fit.json").read_text())
    assert first["max_completion_length"] == fitted["max_completion_length"] > 16  # a random model never ends
    assert first["config"]["max_completion_length"] == first["max_completion_length"]
    caplog.clear()
    assert cli.main(["train", *common, "--max-steps", "3", "--resume"]) == 0
    again = json.loads((out / "metrics.json").read_text())
    assert again["steps"] == 3 and again["max_completion_length"] == first["max_completion_length"]
    assert again["accuracy_before"] == first["accuracy_before"] and again["before"] == first["before"]
    assert "as recorded in" in caplog.text  # read back, not measured again
    card = (out / "README.md").read_text()  # the kit's account, written over the card TRL wrote at each checkpoint
    assert card.startswith("# rloo-kit run: task file") and "3 steps" in card and 'model="None"' not in card
    assert f"rloo-kit eval --adapter {out / 'adapter'}" in card and "| `checkpoint-*` |" in card


def test_a_file_task_trained_with_short_answers_is_evaluated_and_resumed_with_them(tiny_model_dir, tmp_path,
                                                                                   monkeypatch, capsys):
    """Where the pre-flight trains the short-answer system prompt (forced here: whether the random model's samples are
    cut often enough to ask, and shorter when asked, depends on the CPU's arithmetic),
    the held-out accuracy before and after, a resumed run and `rloo-kit eval` all put it before every prompt, as
    training did, and the run's card and fit.json say so."""
    from rloo_kit import preflight_check, tasks
    from rloo_kit.diagnostics import HealthMonitor
    from rloo_kit.pipeline import asked_as_trained
    from rloo_kit.tasks import load_task

    data = tmp_path / "task.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {i}.", "answer": str(i)}) + "\n" for i in range(20)))
    out, told = tmp_path / "run", "Answer in one short sentence."
    monkeypatch.setattr(preflight_check, "_rambles", lambda report, dataset, length: True)
    monkeypatch.setattr(preflight_check, "_answers_shorter", lambda short, given: True)
    evaluated = []  # the held-out prompts each evaluation asked: a run's (`evaluate`), `rloo-kit eval`'s (both)

    def recording(real):
        def evaluate(model, tok, rows, *args, **kwargs):
            evaluated.append(rows["prompt"])
            return real(model, tok, rows, *args, **kwargs)
        return evaluate

    for name in ("evaluate", "evaluate_base_and_adapter"):
        monkeypatch.setattr(tasks, name, recording(getattr(tasks, name)))
    monitors, begin = [], HealthMonitor.on_train_begin  # whether each run's health monitor knows the prompts ask it
    monkeypatch.setattr(HealthMonitor, "on_train_begin",
                        lambda self, *a, **kw: (monitors.append(self.asks_short), begin(self, *a, **kw))[1])
    common = ["--model", str(tiny_model_dir), "--preset", "cpu", "--task", "file", "--path", str(data),
              "--output-dir", str(out), "--batch-size", "4", "--num-generations", "2", "--n-test", "4",
              "--save-steps", "1"]
    assert cli.main(["train", *common, "--max-steps", "1", "--preflight-prompts", "4", "--force"]) == 0
    first = json.loads((out / "metrics.json").read_text())
    assert first["system_prompt"] == told and json.loads((out / "fit.json").read_text())["system_prompt"] == told
    assert first["preflight"]["system_prompt"] == told and first["own_task_defaults"][0].startswith("system prompt")
    assert f'Trained with the system prompt "{told}"' in (out / "README.md").read_text()
    assert evaluated and all(p[0] == {"role": "system", "content": told} for rows in evaluated for p in rows)
    evaluated.clear()
    assert cli.main(["train", *common, "--max-steps", "2", "--resume"]) == 0
    assert evaluated and all(p[0]["content"] == told for rows in evaluated for p in rows)
    assert monitors == [True, True]  # its truncation fix does not tell the user to ask for a short answer again
    evaluated.clear()
    capsys.readouterr()
    assert cli.main(["eval", "--adapter", str(out / "adapter"), "--model", str(tiny_model_dir), "--samples", "0"]) == 0
    assert f'system prompt "{told}" before every prompt without one, as trained' in capsys.readouterr().out
    assert evaluated and all(p[0]["content"] == told for rows in evaluated for p in rows)
    plain = load_task("file", path=str(data), n_test=4)  # notebook 03's, which loads the task itself
    assert all(p[0]["content"] == told for p in asked_as_trained(plain, out / "adapter").test["prompt"])


def test_a_runs_card_says_what_it_did_and_lists_the_files_it_left(tmp_path):
    common = dict(model="smollm2-135m", task="file", preset="cpu", device="cpu", accuracy_before=0.4)
    (tmp_path / "adapter").mkdir()
    (tmp_path / "metrics.json").write_text("{}")
    trained = RunReport(**common, accuracy_after=0.7, trained=True, steps=30, minutes=5.0).card(tmp_path)
    assert "held-out accuracy: before 0.40 -> after 0.70 (+0.30) · 30 steps in 5.0 min" in trained
    assert f'load_adapter(model, "{tmp_path / "adapter"}")' in trained and 'load_model("smollm2-135m")' in trained
    assert "| `adapter` |" in trained and "| `metrics.json` |" in trained and "| `best` |" not in trained
    assert "health monitor" not in trained
    watched = RunReport(**common, accuracy_after=0.7, trained=True, diagnoses=["high_variance", "converged"])
    assert "- the health monitor named: high_variance (" in watched.card(tmp_path)
    assert "- the health monitor noted: converged (not a failure" in watched.card(tmp_path)
    refused = RunReport(**common, accuracy_after=0.4, preflight={"ok": False, "problems": ["reward_collapse"]})
    card = refused.card(tmp_path)
    assert "Not trained" in card and "## Use the adapter" not in card


def test_a_refused_runs_report_says_it_was_not_trained_and_how_to_force_it():
    """Printed as the README prints it, a refused run does not read as a run that trained and gained nothing."""
    common = dict(model="m", task="file", preset="cpu", device="cpu", accuracy_before=0.17, accuracy_after=0.17)
    refused = RunReport(**common, preflight={"ok": False, "problems": ["reward_collapse"]})
    (line,) = refused.lines()
    assert line.startswith("Not trained") and "reward_collapse" in line and "force=True" in line and "0.17" in line
    warned = RunReport(**common, preflight={"ok": False, "problems": ["answer_habit", "reward_collapse"],
                                            "blocking": ["reward_collapse"]})
    assert "cannot learn (reward_collapse)" in warned.refusal()  # a warning printed beside it is no cause
    trained = RunReport(**common, preflight={"ok": True, "problems": []}, trained=True, steps=30)
    assert trained.refusal() is None and trained.lines()[0].startswith("held-out accuracy: before 0.17")
    habit = RunReport(**common, trained=True, one_answer={"answer": "colour", "replies": 13, "given": 12, "right": 6})
    assert "12 of 13 held-out replies answer 'colour', the right answer for 6 of the 13 prompts" in habit.lines()[-1]
    first = RunReport(**common, trained=True, one_place={"place": 1, "replies": 24, "given": 22, "against": 9,
                                                         "kept": 8})
    assert ("22 of 24 held-out replies pick the choice offered first, 8 of them on the 9 prompts whose answer is "
            "offered elsewhere") in first.lines()[-1]
    padded = RunReport(**common, trained=True, right_while_cut={"right": 14, "cut": 14, "tokens": 64})
    assert "right but cut: 14 of the 14 right held-out replies ran to the 64-token limit" in padded.lines()[-1]


def test_the_report_names_the_runs_last_step_as_the_one_in_last():
    """A run stopped between measurements (an older run's curve ends at step 15, the run at 22): last/ holds step
    22's adapter, and the report says so."""
    curve = [{"step": 0, "minutes": 0.1, "accuracy": 0.38}, {"step": 15, "minutes": 4.6, "accuracy": 0.38}]
    report = RunReport(model="m", task="file", preset="cpu", device="cpu", trained=True, steps=22,
                       validation={"rows": 13, "curve": curve, "kept_step": 0})
    assert "the adapter is step 0's; step 22's is in last/" in report.lines()[1]
    assert not any("solved" in line for line in report.lines())


def test_a_budgeted_run_that_stopped_solved_says_so():
    """A held-back first-letter file right on its 12 validation rows at two measurements running, its groups flat."""
    curve = [{"step": 0, "minutes": 0.1, "accuracy": 0.83}, {"step": 7, "minutes": 1.5, "accuracy": 1.0},
             {"step": 20, "minutes": 3.0, "accuracy": 1.0}]
    report = RunReport(model="m", task="file", preset="cpu", device="cpu", trained=True, steps=20,
                       validation={"rows": 12, "curve": curve, "kept_step": 20, "solved_at": 20})
    assert report.lines()[2].startswith("  stopped at step 20, solved: every validation row right twice running")


def test_a_budgeted_runs_report_marks_the_validation_steps_whose_replies_ignored_the_row():
    """A held-back yes/no file: validation 6 of 14 at step 0, then 8 of 14 with every reply 'yes', the rows whose
    answer it is, then replies in turn 'yes' and 'no' as right as chance; the report says why step 0 was kept."""
    curve = [{"step": 0, "minutes": 0.0, "accuracy": 0.43},
             {"step": 22, "minutes": 2.8, "accuracy": 0.57, "one_answer": "yes"},
             {"step": 40, "minutes": 5.1, "accuracy": 0.5, "chance": 0.5}]
    report = RunReport(model="m", task="file", preset="cpu", device="cpu", accuracy_before=0.61, accuracy_after=0.61,
                       trained=True, steps=40, validation={"rows": 14, "curve": curve, "kept_step": 0})
    assert ("  validation (14 training rows set apart): 0.43 (step 0) -> 0.57 (step 22, most replies 'yes' whatever "
            "the row) -> 0.50 (step 40, no better than its replies dealt to the rows at random (0.50)); the adapter "
            "is step 0's; step 40's is in last/") in report.lines()


def test_the_runs_health_monitor_reads_what_the_preflight_measured_of_sampling(tiny_model_dir, tmp_path):
    """Flat groups are told apart (noise a colder draw cures, or answers not known) by the pre-flight's greedy answers
    against its samples, from the first step on: the run hands them to its monitor (a resumed run, from its
    preflight.json)."""
    from dataclasses import asdict

    import rloo_kit
    from rloo_kit.diagnostics import SamplingMeasured
    from rloo_kit.pipeline import PREFLIGHT, Run
    from rloo_kit.tasks import plan_run

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    task = rloo_kit.load_task("arithmetic", n_train=8, n_test=4)
    run = Run(plan_run(str(tiny_model_dir), "arithmetic", "cpu"), task, rloo_kit.attach_lora(model, preset="cpu"), tok,
              output_dir=tmp_path, per_device_train_batch_size=4, num_generations=2, save_strategy="no")
    measured = SamplingMeasured(1.0, greedy_right=0.25, samples_right=0.02, greedy_better=True,
                                colder=((0.5, 0.84), (0.3, 0.81)))
    (tmp_path / PREFLIGHT).write_text(json.dumps({"sampling_measured": asdict(measured)}))  # as its first attempt left
    run.refit()
    assert run.sampling == measured and run.build_trainer().health_monitor.sampling == measured
