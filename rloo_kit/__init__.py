"""rloo-kit: RLOO fine-tuning of small language models with LoRA, notebook first.

The flow, one module each: hardware -> presets -> models (+LoRA) -> data + rewards ->
training (+diagnostics) -> evaluation -> plots.
"""

import logging as _logging
import sys as _sys

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
from .evaluation import compare, evaluate, evaluate_base_and_adapter, pass_at_k
from .hardware import Hardware, detect_hardware
from .models import DEFAULT_MODEL, attach_lora, fetch_model, load_adapter, load_model, merge_and_save, save_adapter
from .presets import Preset, estimate_memory, get_preset, list_presets, make_config, pick_preset
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
    "ModelSourceError", "ModelTooLargeError", "Preset", "RewardError", "RlooKitError", "Thresholds",
    "arithmetic_task", "attach_lora", "build_trainer", "compare", "detect_hardware", "estimate_memory",
    "evaluate", "evaluate_base_and_adapter", "fetch_model", "get_preset", "list_presets", "load_adapter",
    "load_gsm8k", "load_local", "load_model", "make_config", "merge_and_save", "pass_at_k", "pick_preset",
    "save_adapter", "train",
]
