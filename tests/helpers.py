"""What tests share: the arguments of a tiny `rloo-kit train` run, the command that runs it in one process
and the one that runs it in several under `accelerate launch`, TRL's own trainer on the tiny model, and a time
budget driven by a clock the test moves."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from rloo_kit.budget import read_json

from .conftest import REPO

DDP_CONFIG = REPO / "configs" / "accelerate" / "ddp.yaml"
TOKEN = "hf_rlookitSentinelToken0123456789"  # a stand-in hub token that must never reach output or files


def train_args(model_dir, out, *extra, steps: int = 12) -> list[str]:
    """`rloo-kit train` on the tiny model with the `cpu` preset: 4 completions of up to 8 tokens a step
    (2 per prompt), a checkpoint every step, 4 held-out prompts, no pre-flight (a random model has nothing
    to learn, which the pre-flight would rightly say). Later options in `extra` win."""
    return ["train", "--model", str(model_dir), "--preset", "cpu", "--output-dir", str(out), "--max-steps",
            str(steps), "--save-steps", "1", "--batch-size", "4", "--num-generations", "2",
            "--max-completion-length", "8", "--n-test", "4", "--preflight-prompts", "0", *extra]


def train_cmd(model_dir, out, *extra, steps: int = 12) -> list[str]:
    """The tiny run in this Python, one process."""
    return [sys.executable, "-m", "rloo_kit.cli", *train_args(model_dir, out, *extra, steps=steps)]


def launch_cmd(processes: int, *cli_args: str, program: tuple[str, ...] = ("-m", "rloo_kit.cli")) -> list[str]:
    """`accelerate launch` of `rloo-kit` (or another `program`: a script's path) with the shipped DDP config: on a
    machine without a GPU it starts `processes` CPU processes joined by gloo. A free port each time, so that runs
    side by side do not meet."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(DDP_CONFIG),
            "--num_processes", str(processes), "--main_process_port", str(free_port()), *program, *cli_args]


class BudgetClock:
    """`rloo_kit.budget`'s clock in a test: it moves only when the test moves it."""

    now = 0.0

    def time(self) -> float:
        return self.now


def run_budget(budget, clock: BudgetClock, step_seconds: Callable[[int], float], max_steps: int = 0,
               logs: Callable[[int], dict] | None = None, control=None):
    """Drive `budget` (a TimeBudget) as the Trainer does: training begins, then step after step, the one after
    step N taking step_seconds(N) on `clock` and logging logs(N + 1) where given, until the budget stops the run
    (or max_steps, where given, are taken), with `control` (a TrainerControl) where given. Returns the
    TrainerState."""
    from transformers import TrainerControl, TrainerState

    state, control = TrainerState(max_steps=max_steps), control or TrainerControl()
    budget.on_train_begin(None, state, control)
    while not control.should_training_stop and not 0 < max_steps <= state.global_step:
        budget.on_step_begin(None, state, control)
        clock.now += step_seconds(state.global_step)
        state.global_step += 1
        budget.on_step_end(None, state, control)
        if logs is not None:  # the Trainer logs a step after its on_step_end, into log_history first
            step_logs = logs(state.global_step)
            state.log_history.append({**step_logs, "step": state.global_step})
            budget.on_log(None, state, control, logs=step_logs)
    return state


def kill_tree(proc) -> None:
    """SIGKILL a launcher and its workers at once. torchrun starts each worker in a session of its own,
    so killing the launcher's process group would leave the workers training."""
    import psutil

    try:
        launcher = psutil.Process(proc.pid)
        procs = [*launcher.children(recursive=True), launcher]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkpoint_steps(out: Path) -> list[int]:
    """The steps of the complete checkpoints in a run's output directory, in order: trainer_state.json, which
    transformers writes last and in place, there and whole (the kit's rule, `training.latest_checkpoint`)."""
    return sorted(int(p.name.split("-")[1]) for p in Path(out).glob("checkpoint-*")
                  if read_json(p / "trainer_state.json") is not None)


def final_state(out: Path) -> dict:
    """trainer_state.json of the run's newest complete checkpoint."""
    return json.loads((Path(out) / f"checkpoint-{checkpoint_steps(out)[-1]}" / "trainer_state.json").read_text())


def logged_steps(state: dict) -> list[int]:
    """The training steps that logged RLOO's metrics, from a trainer state's log history."""
    return [h["step"] for h in state["log_history"] if "reward" in h]


def arithmetic_rows(n: int = 16):
    """n training rows of the arithmetic task (prompt + answer)."""
    import rloo_kit

    return rloo_kit.arithmetic_task(n_train=n, n_test=4)["train"]


def length_reward(prompts, completions, **kwargs):
    """The completion's length in characters plus a tenth of a content checksum. The tiny model's completions
    are all cut at the same token count more often than not, so length alone can leave a group without
    spread and LoRA without a gradient; the checksum makes completions that differ in any way score apart."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [len(t) + (sum(map(ord, t)) % 10) / 10 for t in texts]


def logits(model, tokenizer, text: str = "What is 2+2?"):
    """The model's logits for one prompt, in eval mode, without gradients: to compare two models' outputs."""
    import torch

    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model.eval()(ids).logits


def plain_trainer(model, tokenizer, output_dir, overrides: dict, reward, targets=("q_proj",)):
    """TRL's own RLOOTrainer, not the kit's `build_trainer`: 8 "Add i and i+1." prompts, 2 steps, lr 1e-2,
    beta 0.1, LoRA r=4 on `targets`, with the kit's CPU log-prob shim. `overrides` are RLOOConfig fields."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import RLOOConfig, RLOOTrainer

    from rloo_kit.patches import compat

    compat.patch_trl_for_cpu()
    train = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Add {i} and {i + 1}."}] for i in range(8)]})
    args = RLOOConfig(output_dir=str(output_dir), use_cpu=True, bf16=False, max_steps=2, learning_rate=1e-2,
                      beta=0.1, report_to="none", **{"gradient_checkpointing": False, **overrides})
    return RLOOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=train, processing_class=tokenizer,
                       peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=list(targets), task_type="CAUSAL_LM"))
