"""The kit under `accelerate launch`: two CPU processes joined by gloo (the shipped DDP config) train the
tiny model with checkpoints, write one adapter, report once, resume after a hard kill and keep an
adapter on Ctrl-C; a global batch of partial groups is refused before any step. DeepSpeed ZeRO-2 and
ZeRO-3 the same way where DeepSpeed is installed. Plus the shipped configs and the vLLM switch's
error, which need no launch."""

import importlib.util
import json
import os
import re
import signal
import subprocess
import time

import pytest

import rloo_kit
from rloo_kit.errors import ConfigError

from .conftest import REPO
from .helpers import checkpoint_steps, final_state, kill_tree, launch_cmd, logged_steps, train_args

ENV = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
FAST = ("--preflight-prompts", "0")  # the pre-flight has tests of its own


def run(cmd, timeout=600):
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)


def step_lines(stdout: str) -> list[str]:
    """The live view's line for each logged step ("step 3/4 | ... | reward ...")."""
    return [line for line in stdout.splitlines() if re.match(r"step \d+/\d+ \|", line)]


def loads(model_dir, adapter_dir) -> bool:
    model, _ = rloo_kit.load_model(str(model_dir), preset="cpu")
    return rloo_kit.load_adapter(model, adapter_dir) is not None


def wait_for_checkpoint(proc, out, step: int, log, deadline_s: int = 300) -> None:
    deadline = time.time() + deadline_s
    while step not in checkpoint_steps(out):
        assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before checkpoint {step}:\n" + \
            log.read_text()[-3000:]
        assert time.time() < deadline, f"no checkpoint {step} within {deadline_s} s"
        time.sleep(0.05)


def test_two_processes_train_to_the_planned_step_and_write_one_adapter(tiny_model_dir, tmp_path):
    out, steps = tmp_path / "run", 4
    # 2 completions per process and 4 per prompt: only the global batch (2 processes x 2) holds whole groups
    done = run(launch_cmd(2, *train_args(tiny_model_dir, out, "--batch-size", "2", "--num-generations", "4",
                                         "--save-steps", "2", *FAST, steps=steps)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert checkpoint_steps(out) == [2, 4]
    state = final_state(out)
    assert state["global_step"] == steps and logged_steps(state) == list(range(1, steps + 1))
    ckpt = out / f"checkpoint-{steps}"
    assert sorted(p.name for p in ckpt.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]  # 2 trained
    adapters = [p.name for p in out.iterdir() if not p.name.startswith("checkpoint-")
                and (p / "adapter_model.safetensors").is_file()]
    assert adapters == ["adapter"]  # the final one, and no interrupted/
    assert len(step_lines(done.stdout)) == steps  # one line a step: only the main process reports
    assert loads(tiny_model_dir, out / "adapter")


def test_two_processes_killed_then_resumed(tiny_model_dir, tmp_path):
    out, steps, log = tmp_path / "run", 12, tmp_path / "killed.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(launch_cmd(2, *train_args(tiny_model_dir, out, *FAST, steps=steps)), env=ENV,
                                stdout=sink, stderr=subprocess.STDOUT)
        try:  # killed at the first checkpoint: with 6 steps left, one run here finished them before the kill
            wait_for_checkpoint(proc, out, 1, log)
        finally:
            kill_tree(proc)  # the launcher and both workers, at once
    killed_at = checkpoint_steps(out)[-1]
    assert killed_at < steps and not (out / "adapter").exists()

    done = run(launch_cmd(2, *train_args(tiny_model_dir, out, "--resume", *FAST, steps=steps)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("Resuming from") == 1  # from the main process only
    state = final_state(out)
    assert state["global_step"] == steps
    assert logged_steps(state) == list(range(1, steps + 1))  # steps before the kill kept, none repeated
    assert loads(tiny_model_dir, out / "adapter")


def test_ctrl_c_on_the_launcher_keeps_the_adapter(tiny_model_dir, tmp_path):
    out, log = tmp_path / "run", tmp_path / "launch.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(launch_cmd(2, *train_args(tiny_model_dir, out, *FAST, steps=400)), env=ENV,
                                stdout=sink, stderr=subprocess.STDOUT)
        try:
            wait_for_checkpoint(proc, out, 1, log)
            # Ctrl-C in a terminal reaches the launcher, which passes it on: each worker has a session of its own
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
        finally:
            kill_tree(proc)  # nothing left behind if the launcher did not stop
    text = log.read_text()
    assert proc.returncode != 0
    assert text.count("adapter saved to") == 1, text[-3000:]  # said once, by the main process
    assert not (out / "adapter").exists() and loads(tiny_model_dir, out / "interrupted")


def test_global_batch_of_partial_groups_is_refused_before_any_step(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    # 2 processes x 3 completions = 6, not a multiple of 4 completions per prompt
    done = run(launch_cmd(2, *train_args(tiny_model_dir, out, "--batch-size", "3", "--num-generations", "4",
                                         *FAST, steps=4)))
    assert done.returncode != 0
    assert "ConfigError" in done.stderr, done.stderr[-3000:]
    assert re.search(r"per_device_train_batch_size 3 x 2 process", done.stderr), done.stderr[-3000:]
    assert "num_generations=4" in done.stderr
    assert not step_lines(done.stdout) and not checkpoint_steps(out) and not (out / "adapter").exists()


BUDGET_RANKS = """
import json, sys

sys.path.insert(0, sys.argv[2])
from rloo_kit import budget
from rloo_kit.distributed import process_index
from tests.helpers import BudgetClock, run_budget

rank = process_index()
budget.time = clock = BudgetClock()  # each process's own: the second one's steps take longer
run = budget.TimeBudget(1, lambda model: budget.Validation([True]), sys.argv[1])
run._keep = lambda model: None
state = run_budget(run, clock, lambda step: 10 + 3 * rank)
# one write: both ranks share the launcher's stdout, and print's separate writes of "RANK" and the rest interleaved
sys.stdout.write("RANK " + json.dumps([rank, state.global_step, [point["step"] for point in run.curve]]) + "\\n")
sys.stdout.flush()
import torch.distributed

torch.distributed.destroy_process_group()  # a clean exit: left to interpreter teardown, a rank aborted now and then
"""


def test_a_time_budget_stops_and_measures_every_process_at_the_same_step(tmp_path):
    """Each process reads its own clock; had each decided from it, the second, whose steps take 13 s to the
    first's 10 in a one-minute budget, would stop a step early and leave the first waiting at its next
    collective step. The main process's clock decides for both."""
    script = tmp_path / "budget_ranks.py"
    script.write_text(BUDGET_RANKS)
    done = run(launch_cmd(2, str(tmp_path), str(REPO), program=(str(script),)), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = sorted(json.loads(found) for found in re.findall(r"RANK (\[\d+, \d+, \[[\d, ]*\]\])", done.stdout))
    assert [rank for rank, _, _ in ranks] == [0, 1], done.stdout[-3000:] + done.stderr[-3000:]
    (_, steps, measured), (_, steps_1, measured_1) = ranks
    assert steps == steps_1 == 6 and measured == measured_1 and measured[-1] == 6, ranks


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_two_processes_write_a_whole_adapter(tiny_model_dir, tmp_path, stage):
    """DeepSpeed runs on CPU processes too (its CPU accelerator speaks gloo); ZeRO-3 gathers the adapter from
    both processes to save it. Skipped where DeepSpeed is not installed (it is no dependency of the kit)."""
    pytest.importorskip("deepspeed")
    from safetensors.torch import load_file

    out, steps = tmp_path / "run", 3
    config = REPO / "configs" / "accelerate" / f"deepspeed_zero{stage}.yaml"
    cmd = launch_cmd(2, *train_args(tiny_model_dir, out, "--batch-size", "2", "--num-generations", "4",
                                    "--save-steps", "2", *FAST, steps=steps))
    cmd[cmd.index("--config_file") + 1] = str(config)
    done = run(cmd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert final_state(out)["global_step"] == steps and len(step_lines(done.stdout)) == steps
    assert (out / f"checkpoint-{steps}" / f"global_step{steps}").is_dir()  # DeepSpeed's own checkpoint
    weights = load_file(out / "adapter" / "adapter_model.safetensors")
    assert all(w.numel() > 0 for w in weights.values())  # gathered, not ZeRO-3's empty placeholders
    assert any(w.abs().sum() > 0 for k, w in weights.items() if "lora_B" in k)  # trained
    assert loads(tiny_model_dir, out / "adapter")


@pytest.mark.parametrize("name, kind, stage", [("ddp", "MULTI_GPU", None), ("deepspeed_zero2", "DEEPSPEED", 2),
                                               ("deepspeed_zero3", "DEEPSPEED", 3)])
def test_shipped_accelerate_configs(name, kind, stage):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(REPO / "configs" / "accelerate" / f"{name}.yaml"))
    assert config.distributed_type == kind
    assert config.mixed_precision == "no"  # the kit's preset chooses bf16 / fp16 from the GPU
    assert (config.deepspeed_config or {}).get("zero_stage") == stage


def test_one_process_outside_a_launcher():
    from rloo_kit import distributed

    assert distributed.world_size() == 1 and distributed.process_index() == 0 and distributed.is_main_process()
    distributed.barrier()  # returns at once


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_without_vllm_says_how_to_install():
    from rloo_kit.presets import make_config

    with pytest.raises(ConfigError, match=r'pip install "trl\[vllm\]"'):
        make_config("cpu", use_vllm=True, vllm_mode="server")
    with pytest.raises(ConfigError, match="colocate"):
        make_config("cpu", use_vllm=True, vllm_mode="remote")
