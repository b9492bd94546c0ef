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
    first = subprocess.run(train_cmd(tiny_model_dir, out, steps=2), env=env, capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.rmtree(out / "adapter")  # as if the run was killed between its last checkpoint and the adapter

    again = subprocess.run(train_cmd(tiny_model_dir, out, "--resume", steps=2), env=env, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished, at step 2" in again.stderr
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
