"""Build TRL's RLOOTrainer with the kit's defaults, and run it without losing work.

`build_trainer` checks inputs up front (so a mistake fails in seconds, not an hour in), guards the
rewards, attaches the health monitor and keeps LoRA's reference model free: the base model with
the adapter switched off. `train` resumes from checkpoints, saves the adapter when interrupted,
and turns a CUDA out-of-memory into advice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import TrainerCallback
from trl import RLOOConfig, RLOOTrainer

from .compat import patch_trl_for_cpu
from .data import validate_dataset
from .diagnostics import HealthMonitor
from .errors import ConfigError, GPUOutOfMemoryError
from .models import attach_lora
from .presets import GPU_PRESETS, Preset, get_preset, make_config, pick_preset, validate_rloo_fields
from .rewards import RewardFunc, required_columns, safe

log = logging.getLogger("rloo_kit")

ADAPTER_DIR = "adapter"  # inside output_dir: the final adapter
INTERRUPTED_DIR = "interrupted"  # inside output_dir: the adapter saved on Ctrl-C


def build_trainer(model, tokenizer, train_dataset, reward_funcs: RewardFunc | Sequence[RewardFunc], *,
                  preset: str | Preset | None = None, config: RLOOConfig | None = None,
                  output_dir: str = "runs/rloo", monitor: HealthMonitor | bool = True,
                  callbacks: Sequence[TrainerCallback] = (), strict_rewards: bool = False,
                  eval_dataset=None, **overrides) -> RLOOTrainer:
    """An RLOOTrainer ready to `train()`.

    The config is `config` as given, or `make_config(preset, output_dir=..., **overrides)` (the
    hardware's preset when none is named). A model without LoRA gets the preset's adapter.
    Reward functions are wrapped in `rewards.safe` (strict_rewards=True makes failures raise).
    """
    if config is not None and overrides:
        raise ConfigError(f"Pass either config= or field overrides ({', '.join(overrides)}), not both: "
                          "put the overrides into the RLOOConfig, or drop config= to build one from the preset.")
    preset = get_preset(preset) if preset is not None else pick_preset()
    if config is None:
        config = make_config(preset, output_dir=output_dir, **overrides)
    else:
        validate_rloo_fields(vars(config), preset.max_seq_length)
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    if not funcs:
        raise ConfigError("No reward function given: pass at least one, e.g. rloo_kit.rewards.correct_answer.")
    needed = set().union(*(required_columns(f) for f in funcs if callable(f) and not isinstance(f, torch.nn.Module)))
    validate_dataset(train_dataset, needed)
    funcs = [f if isinstance(f, torch.nn.Module) else safe(f, strict=strict_rewards) for f in funcs]
    if not hasattr(model, "peft_config"):
        model = attach_lora(model, preset=preset)
    patch_trl_for_cpu()
    monitor = HealthMonitor() if monitor is True else monitor or None
    trainer = RLOOTrainer(model=model, reward_funcs=funcs, args=config, train_dataset=train_dataset,
                          eval_dataset=eval_dataset, processing_class=tokenizer,
                          callbacks=[*([monitor] if monitor else []), *callbacks])
    _use_base_as_reference(trainer.model)
    trainer.health_monitor = monitor
    return trainer


def _use_base_as_reference(model) -> None:
    """TRL copies a ready-made adapter into a second 'ref' adapter. For a fresh LoRA adapter
    (B = 0) that copy equals the base model, so drop it: the reference becomes the base with the
    adapter disabled, which costs no memory and keeps checkpoints to one adapter."""
    peft_config = getattr(model, "peft_config", {})
    if "ref" not in peft_config:
        return
    fresh = all(torch.count_nonzero(p) == 0 for n, p in model.named_parameters() if ".lora_B.default." in n)
    if fresh:
        model.delete_adapter("ref")
        model.set_adapter("default")


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest `checkpoint-N` directory in output_dir, or None."""
    ckpts = sorted(Path(output_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return ckpts[-1] if ckpts else None


def train(trainer: RLOOTrainer, *, resume: bool = False):
    """Run training; returns TRL's TrainOutput. The final adapter goes to `output_dir/adapter`.

    resume=True continues from the latest checkpoint in output_dir (adapter, optimizer, RNG and
    step), or starts fresh when there is none. Ctrl-C (KeyboardInterrupt, SIGINT) saves the adapter
    to `output_dir/interrupted` and re-raises. A CUDA out-of-memory saves the adapter there too and
    is re-raised as GPUOutOfMemoryError naming the preset one size down.
    """
    out = Path(trainer.args.output_dir)
    checkpoint = latest_checkpoint(out) if resume else None
    if resume:
        log.warning("Resuming from %s.", checkpoint) if checkpoint else log.warning(
            "resume=True but no checkpoint in %s: starting from step 0.", out)
    try:
        result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except KeyboardInterrupt:
        saved = _save_interrupted(trainer)
        log.warning("Interrupted at step %d: adapter saved to %s. Resume with resume=True (from the last "
                    "checkpoint) or load that adapter.", trainer.state.global_step, saved)
        raise
    except torch.cuda.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        saved = _save_interrupted(trainer)
        raise GPUOutOfMemoryError(f"{_oom_advice(trainer.args)} The adapter as it was at step "
                                  f"{trainer.state.global_step} is in {saved}.") from e
    trainer.save_model(str(out / ADAPTER_DIR))
    return result


def _save_interrupted(trainer: RLOOTrainer) -> Path:
    """Keep what a run had learned when it stops early: the adapter goes to output_dir/interrupted."""
    saved = Path(trainer.args.output_dir) / INTERRUPTED_DIR
    trainer.save_model(str(saved))
    return saved


def _oom_advice(args: RLOOConfig) -> str:
    smaller = [p for p in GPU_PRESETS if p.per_device_train_batch_size * p.max_completion_length <
               args.per_device_train_batch_size * args.max_completion_length]
    hint = (f"Try preset='{smaller[-1].name}' (batch {smaller[-1].per_device_train_batch_size}, "
            f"max_completion_length {smaller[-1].max_completion_length})" if smaller else "Use a smaller model")
    g = args.num_generations
    return (f"CUDA ran out of memory with per_device_train_batch_size={args.per_device_train_batch_size}, "
            f"max_completion_length={args.max_completion_length}, num_generations={g}. {hint}, or keep the "
            f"batch and fit it in memory: per_device_train_batch_size={max(g, args.per_device_train_batch_size // 2)} "
            f"with gradient_accumulation_steps={args.gradient_accumulation_steps * 2}, gradient_checkpointing=True. "
            "Checkpoints already written are kept: resume=True continues from the last one.")


def quick_run(model_name: str, task, *, preset: str | Preset, steps: int, output_dir: str,
              monitor: HealthMonitor | None = None, **overrides) -> RLOOTrainer:
    """Load the model fresh, train `steps` steps on a recipe (rloo_kit.recipes) and return the
    trainer (its state.log_history and health_monitor.diagnoses hold the outcome). For side-by-side
    experiments such as a broken setting and its fix."""
    from .models import load_model

    model, tok = load_model(model_name, preset=preset)
    overrides.setdefault("reward_weights", task.reward_weights)
    trainer = build_trainer(model, tok, task.train, task.reward_funcs, preset=preset, output_dir=output_dir,
                            monitor=monitor or HealthMonitor(), max_steps=steps, save_strategy="no",
                            disable_tqdm=True, **overrides)
    train(trainer)
    return trainer
