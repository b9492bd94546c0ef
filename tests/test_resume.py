"""A run killed hard (SIGKILL) after a checkpoint resumes and finishes with the planned step count."""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest
from safetensors.torch import load_file

import rloo_kit
from rloo_kit.budget import STATE_FILE as BUDGET_STATE
from rloo_kit.training import latest_checkpoint

from .helpers import train_cmd

STEPS = 12  # train_cmd's default


@pytest.mark.heavy
def test_sigkill_then_resume(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "TQDM_DISABLE": "1"}
    proc = subprocess.Popen(train_cmd(tiny_model_dir, out), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not (out / "checkpoint-2" / "trainer_state.json").exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "no checkpoint within 4 minutes"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert killed_at < STEPS and not (out / "adapter").exists()

    done = subprocess.run(train_cmd(tiny_model_dir, out, "--resume"), env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Resuming from" in done.stderr
    final = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    state = json.loads((final / "trainer_state.json").read_text())
    assert state["global_step"] == STEPS
    logged = [h["step"] for h in state["log_history"] if "reward" in h]
    assert logged == list(range(1, STEPS + 1))  # steps before the kill were kept, none repeated
    model, _ = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    assert rloo_kit.load_adapter(model, out / "adapter") is not None


def test_a_checkpoint_cut_short_is_passed_over_for_the_one_before(tmp_path, caplog):
    """A kill while saving leaves the newest checkpoint's trainer_state.json cut short (transformers writes it in
    place) or without the kit's state, which its callbacks write after it: resume from the one before."""
    for step in (2, 4, 6):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        (tmp_path / f"checkpoint-{step}" / BUDGET_STATE).write_text(json.dumps({"spent_seconds": 1.0}))
    (tmp_path / "checkpoint-6" / "trainer_state.json").write_text('{"global_step": 6, "log_hi')
    (tmp_path / "checkpoint-4" / BUDGET_STATE).unlink()

    with caplog.at_level("WARNING", logger="rloo_kit"):
        assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-4"  # a run without a budget reads no budget.json
        assert latest_checkpoint(tmp_path, (BUDGET_STATE,)) == tmp_path / "checkpoint-2"
    passed_over = [r.getMessage() for r in caplog.records if "passed over" in r.getMessage()]
    assert "checkpoint-6 is incomplete" in passed_over[0] and "trainer_state.json" in passed_over[0]
    assert "checkpoint-4 is incomplete" in passed_over[-1] and BUDGET_STATE in passed_over[-1]
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("")
    assert latest_checkpoint(tmp_path, (BUDGET_STATE,)) is None


@pytest.mark.heavy
def test_sigint_saves_adapter_to_interrupted(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(train_cmd(tiny_model_dir, out, "--max-steps", "400", "--save-steps", "1000"),
                            env={**os.environ, "TQDM_DISABLE": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    # wait for the live view's line for the first logged step ("step 1/400 | ... | reward ..."), then press Ctrl-C
    while proc.poll() is None and time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("step ") and " reward " in line:
            break
    assert proc.poll() is None and time.time() < deadline, "no logged step on stdout"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert (out / "interrupted" / "adapter_model.safetensors").is_file()
    assert "adapter saved to" in err and str(out / "interrupted") in err


@pytest.mark.heavy
def test_resuming_a_finished_run_trains_nothing_and_keeps_its_adapter(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "TQDM_DISABLE": "1"}
    first = subprocess.run(train_cmd(tiny_model_dir, out, "--preflight-prompts", "4", "--force", steps=2), env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    before = json.loads((out / "metrics.json").read_text())
    shutil.rmtree(out / "adapter")  # as if the run was killed between its last checkpoint and the adapter

    again = subprocess.run(train_cmd(tiny_model_dir, out, "--resume", steps=2), env=env, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished, at step 2" in again.stderr
    after = json.loads((out / "metrics.json").read_text())  # the report keeps what the first attempt measured
    assert before["preflight"]["verdict"] and after["preflight"] == before["preflight"]
    assert after["diagnoses"] == before["diagnoses"] and after["steps"] == 2
    assert not (out / "checkpoint-3").exists()  # transformers alone would have trained a third step
    assert _tensors(out / "adapter") == _tensors(out / "checkpoint-2")

    longer = subprocess.run(train_cmd(tiny_model_dir, out, "--resume", steps=3), env=env, capture_output=True,
                            text=True, timeout=600)
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "Resuming from" in longer.stderr
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "reward" in h] == [1, 2, 3]
    assert _tensors(out / "adapter") == _tensors(out / "checkpoint-3")


def _tensors(adapter_dir) -> dict:
    """An adapter's tensors as plain lists, for comparison with ==."""
    return {k: v.tolist() for k, v in load_file(adapter_dir / "adapter_model.safetensors").items()}
