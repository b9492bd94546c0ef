"""The kit's every touch of another library's private attributes (and loggers) outside a whole patch module: a
named accessor each, registered in `registry.PATCHES` (phase "private", or the phase of the patch it serves),
so a TRL or transformers release that renames one is caught by the door (`allowed`), not by a user's run.

Code outside `rloo_kit/patches/` calls these instead of writing `trainer._metrics` itself;
tests/test_patches.py reads every module of the kit and fails on a private name of another library anywhere else.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import Trainer, TrainingArguments

# bitsandbytes' logger for its CPU kernels: its notice that the optional 'kernels' package is missing
KERNEL_NOTICE_LOGGER = "bitsandbytes.backends.cpu.ops"


def trl_metrics(trainer: Trainer, mode: str = "train") -> dict[str, list[float]]:
    """TRL's per-step metrics for `mode` (`trainer._metrics`, patch `trl_metrics`): a value appended under a key
    is averaged into the step's log and cleared by TRL's own `log`, so it lands beside reward and KL."""
    return trainer._metrics[mode]


def trl_logs(trainer: Trainer) -> dict:
    """What RLOOTrainer keeps of its latest step for logging (`trainer._logs`, patch `trl_logs`): prompts,
    completions, rewards per function, advantages; {} before the first step."""
    return getattr(trainer, "_logs", None) or {}


def load_checkpoint(trainer: Trainer, checkpoint: str | Path) -> None:
    """Load `checkpoint`'s weights into `trainer` as `trainer.train(resume_from_checkpoint=...)` does
    (transformers' `Trainer._load_from_checkpoint`, patch `load_checkpoint`), without training a step."""
    trainer._load_from_checkpoint(str(checkpoint))


def plain_cpu_device(args: TrainingArguments) -> bool:
    """Name a CPU process's `args.device` plain `cpu` rather than accelerate's `cpu:<rank>` (the same memory;
    see `rloo_kit.distributed`), patch `plain_cpu_device`. GPUs and single-process runs are left alone (False).
    Call before the trainer is built."""
    device = args.device
    if device.type != "cpu" or device.index is None:
        return False
    args.__dict__["_setup_devices"] = torch.device("cpu")  # where TrainingArguments caches its device
    return True


def silence_kernel_notice() -> None:
    """bitsandbytes' notice that the optional hub kernels are missing, silenced for this process (patch
    `bitsandbytes_notice`, the `rloo-kit` command's): it uses its own CPU kernel either way."""
    logging.getLogger(KERNEL_NOTICE_LOGGER).setLevel(logging.ERROR)
