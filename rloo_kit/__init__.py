"""rloo-kit: RLOO fine-tuning of small language models with LoRA, notebook first.

The flow, one module each: hardware -> presets (sized by memory) -> models (+LoRA, from sources) ->
tasks (data + rewards + evaluation) -> preflight_check -> pipeline (training, budget, diagnostics) ->
export; reward_models makes rewards from preferences. Three folders hold what is not the flow itself:
`patches/` every change the kit makes to another library, `notebook/` the live view and plots, `export/`
the merged model, GGUF and llama.cpp.

`import rloo_kit` loads none of torch, transformers or TRL, and changes no library: each name below is
imported from its module on first use (PEP 562), and the kit's patches apply when a trainer is built.
So `rloo-kit --help` answers at once, and a library the kit patches stays as it was until then.
"""

import importlib as _importlib
import logging as _logging
import sys as _sys

from .errors import (
    ConfigError,
    DataError,
    ExportError,
    GPUOutOfMemoryError,
    ModelSourceError,
    ModelTooLargeError,
    RewardError,
    RlooKitError,
)

__version__ = "0.2.0"

_log = _logging.getLogger("rloo_kit")
if not _log.handlers:  # plain-words messages in notebooks and terminals, without configuring logging
    _handler = _logging.StreamHandler(_sys.stderr)
    _handler.setFormatter(_logging.Formatter("[rloo-kit] %(message)s"))
    _log.addHandler(_handler)
    _log.setLevel(_logging.INFO)
    _log.propagate = False

_EXPORTS = {  # name -> the module that defines it
    "data": ("arithmetic_task", "load_gsm8k", "load_local"),
    "diagnostics": ("Diagnosis", "HealthMonitor", "Thresholds"),
    "evaluation": ("compare", "evaluate", "evaluate_base_and_adapter", "paired_change", "pass_at_k"),
    "export.convert": ("export_gguf", "export_merged", "push_to_hub", "verify_gguf"),
    "hardware": ("Hardware", "detect_hardware"),
    "memory": ("ModelShape", "estimate_memory"),
    "models": ("attach_lora", "load_adapter", "load_model", "merge_and_save", "save_adapter"),
    "pipeline": ("Run", "RunReport", "run"),
    "preflight_check": ("PreflightReport", "preflight"),
    "presets": ("Preset", "RewardModelPreset", "get_preset", "list_presets", "make_config", "pick_preset"),
    "reward_models": ("GoldMonitor", "load_reward_model", "train_reward_model"),
    "sources": ("DEFAULT_MODEL", "fetch_model"),
    "tasks": ("Task", "load_task", "plan_run"),
    "training": ("build_trainer", "train"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = ["ConfigError", "DataError", "ExportError", "GPUOutOfMemoryError", "ModelSourceError",
           "ModelTooLargeError", "RewardError", "RlooKitError", *_MODULE_OF]


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'rloo_kit' has no attribute '{name}'")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

