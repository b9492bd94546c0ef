"""rloo-kit: RLOO fine-tuning of small language models with LoRA, notebook first.

The flow, one module each: hardware -> presets (sized by memory) -> models (+LoRA, from sources) ->
tasks (data + rewards + evaluation) -> preflight -> training (+diagnostics, live view) -> plots.
"""

import logging as _logging
import sys as _sys

# bitsandbytes, on CPUs with AVX512-BF16, tries to fetch an optional 4-bit kernel from the hub at import and
# warns when it cannot; its plain CPU kernel is used either way, so a newcomer's first screen need not say so.
_logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(_logging.ERROR)

from .data import arithmetic_task, load_gsm8k, load_local
from .diagnostics import Diagnosis, HealthMonitor, Thresholds
from .errors import (
    ConfigError,
    DataError,
    GPUOutOfMemoryError,
    ModelSourceError,
    ModelTooLargeError,
    RewardError,
    RlooKitError,
)
from .evaluation import compare, evaluate, evaluate_base_and_adapter, paired_change, pass_at_k
from .hardware import Hardware, detect_hardware
from .memory import ModelShape, estimate_memory
from .models import attach_lora, load_adapter, load_model, merge_and_save, save_adapter
from .preflight import PreflightReport, preflight
from .presets import Preset, get_preset, list_presets, make_config, pick_preset
from .sources import DEFAULT_MODEL, fetch_model
from .tasks import Task, load_task, plan_run
from .training import build_trainer, train

__version__ = "0.1.0"

_log = _logging.getLogger("rloo_kit")
if not _log.handlers:  # plain-words messages in notebooks and terminals, without configuring logging
    _handler = _logging.StreamHandler(_sys.stderr)
    _handler.setFormatter(_logging.Formatter("[rloo-kit] %(message)s"))
    _log.addHandler(_handler)
    _log.setLevel(_logging.INFO)
    _log.propagate = False

__all__ = [
    "DEFAULT_MODEL", "ConfigError", "DataError", "Diagnosis", "GPUOutOfMemoryError", "Hardware", "HealthMonitor",
    "ModelShape", "ModelSourceError", "ModelTooLargeError", "PreflightReport", "Preset", "RewardError", "RlooKitError",
    "Task", "Thresholds", "load_task", "plan_run", "preflight",
    "arithmetic_task", "attach_lora", "build_trainer", "compare", "detect_hardware", "estimate_memory",
    "evaluate", "evaluate_base_and_adapter", "fetch_model", "get_preset", "list_presets", "load_adapter",
    "load_gsm8k", "load_local", "load_model", "make_config", "merge_and_save", "paired_change", "pass_at_k",
    "pick_preset", "save_adapter", "train",
]
