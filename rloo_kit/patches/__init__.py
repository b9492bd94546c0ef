"""One door for every change rloo-kit makes to another library's behaviour (TRL, transformers, PEFT, torch,
ipykernel, bitsandbytes): each is an entry of `registry.PATCHES`, applied here when a trainer is built or a
model loaded, never at import. Every other read or write of a library's private attribute is an accessor of
`private`, an entry too, which its callers ask `allowed(name)` about; tests/test_patches.py fails on one
anywhere else in the kit.

A patch whose target is gone, or whose library is outside the range its tests passed on, is skipped with one
log line and the run takes the library's own path; one the run cannot do without (`Patch.required`) raises
`PatchError` instead, naming the versions. `build_trainer` logs one line of what it patched on which versions
and keeps the names in `trainer.rloo_kit_patches`; `rloo-kit doctor` shows `plan` for this machine.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..errors import ConfigError, RlooKitError
from .patch import Patch, versions_text
from .registry import PATCHES

if TYPE_CHECKING:
    from transformers import Trainer, TrainingArguments

    from ..hardware import Hardware

log = logging.getLogger("rloo_kit")

__all__ = ["PATCHES", "Outcome", "Patch", "PatchError", "allowed", "banner", "patch_before_trainer", "patch_model",
           "patch_trainer", "patch_trainer_with", "plan", "plan_here"]


class PatchError(RlooKitError):
    """A patch the run cannot go without cannot be trusted with the libraries installed."""


@dataclass(frozen=True)
class Outcome:
    """What the door did, or would do, with one patch for one run, and why."""

    patch: Patch
    status: str  # "applies" (planned), "applied", "not needed", "skipped", or "blocked" (required, untrusted)
    reason: str = ""


def _verdict(patch: Patch, device: str, dtype: torch.dtype | None, instance: object = None,
             skip: Collection[str] = ()) -> Outcome:
    """What the door would do with `patch` for this run; applies nothing, says nothing."""
    if patch.name in skip:
        return Outcome(patch, "skipped", "skip_patches asked for it")
    reason = patch.is_for(device, dtype)
    if reason:
        return Outcome(patch, "not needed", reason)
    if patch.asked_by and instance is not None and not any(getattr(instance, a, None) for a in patch.asked_by):
        return Outcome(patch, "not needed", f"the run sets no {' or '.join(patch.asked_by)}")
    reason = patch.unsupported(instance)
    if reason:
        return Outcome(patch, "blocked" if patch.required else "skipped", reason)
    when = f"{patch.when}; " if patch.when else ""
    return Outcome(patch, "applies", f"{when}tested on {', '.join(f'{d} {r}' for d, r in patch.tested.items())}")


def plan(device: str, dtype: torch.dtype | None) -> list[Outcome]:
    """What a run on `device` with a `dtype` base model would get here, patch by patch (`rloo-kit doctor`)."""
    return [_verdict(p, device, dtype) for p in PATCHES]


def plan_here(hw: Hardware | None = None) -> list[Outcome]:
    """`plan` for a run of the kit's default load on this machine (`hw`, detected when None): bf16 or fp16 on
    a GPU, bf16 or fp32 on a CPU by `hardware.cpu_compute`."""
    from ..hardware import detect_hardware

    hw = hw or detect_hardware()
    bf16 = hw.bf16 if hw.is_cuda else hw.cpu_bf16
    return plan(hw.device, torch.bfloat16 if bf16 else torch.float16 if hw.is_cuda else torch.float32)


def _admit(outcome: Outcome, device: str) -> Outcome:
    """Act on a verdict: raise for a blocked patch, log a skipped one (once per process)."""
    patch = outcome.patch
    if outcome.status == "blocked":
        pins = " ".join(f'"{d}{r}"' for d, r in patch.tested.items())
        raise PatchError(f"rloo-kit cannot run on {device} here: its patch {patch.name} ({patch.summary}) is needed "
                         f"there, and {outcome.reason}. Install the tested versions: pip install {pins}.")
    if outcome.status == "skipped":
        _say_once(f"patch {patch.name} skipped: {outcome.reason}; the run takes the library's own path there.")
    return outcome


_said: set[str] = set()


def _say_once(message: str) -> None:
    from ..distributed import is_main_process

    if message not in _said and is_main_process():
        _said.add(message)
        log.warning(message)


def _apply(phase: str, device: str, dtype: torch.dtype | None, obj: object = None,
           skip: Collection[str] = (), only: Collection[str] | None = None) -> list[Outcome]:
    outcomes = []
    for patch in (p for p in PATCHES if p.phase == phase and (only is None or p.name in only)):
        outcome = _admit(_verdict(patch, device, dtype, obj, skip), device)
        if outcome.status == "applies":
            module, _, name = patch.apply.partition(":")
            done = getattr(importlib.import_module(module), name)(*(() if obj is None else (obj,)))
            declined = done is not None and not done  # False, or 0 things changed
            outcome = Outcome(patch, "not needed" if declined else "applied",
                              "declined by its own checks" if declined else "")
        outcomes.append(outcome)
    return outcomes


def _base_model(model) -> torch.nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def patch_model(model: torch.nn.Module, device: str | None = None, skip: Collection[str] = ()) -> list[Outcome]:
    """The model's own patches (LM head, attention, norms), for a model running on `device` (default: where it
    is). `load_model` and `build_trainer` both call it: each patch is idempotent, and a patch applied at load
    counts as applied at build."""
    base = _base_model(model)
    carried = vars(base).setdefault("_rloo_kit_patches", set())
    outcomes = [Outcome(o.patch, "applied") if o.status == "not needed" and o.patch.name in carried else o
                for o in _apply("model", device or base.device.type, getattr(base, "dtype", None), model, skip)]
    carried.update(o.patch.name for o in outcomes if o.status == "applied")
    return outcomes


def patch_before_trainer(model: torch.nn.Module, config: TrainingArguments,
                         skip: Collection[str] = ()) -> list[Outcome]:
    """The model's, the config's and the process-wide patches, before TRL's trainer is made from them; none
    named in `skip`. Raises PatchError when one the run needs cannot be trusted here."""
    unknown = set(skip) - {p.name for p in PATCHES}
    if unknown:
        raise ConfigError(f"No patch named {', '.join(sorted(unknown))}. The patches: "
                          f"{', '.join(p.name for p in PATCHES)} (`rloo-kit doctor` says what each does).")
    device, dtype = config.device.type, getattr(_base_model(model), "dtype", None)
    return [*patch_model(model, device, skip), *_apply("config", device, dtype, config, skip),
            *_apply("process", device, dtype, None, skip)]


def patch_trainer(trainer: Trainer, earlier: list[Outcome], skip: Collection[str] = ()) -> list[Outcome]:
    """The built trainer's patches (none named in `skip`); then one banner line, and `trainer.rloo_kit_patches`:
    the names applied."""
    from ..distributed import is_main_process

    model = trainer.accelerator.unwrap_model(trainer.model)
    outcomes = [*earlier, *_apply("trainer", trainer.accelerator.device.type,
                                  getattr(_base_model(model), "dtype", None), trainer, skip)]
    trainer.rloo_kit_patches = tuple(o.patch.name for o in outcomes if o.status == "applied")
    if is_main_process():
        log.info(banner(outcomes))
    return outcomes


def patch_trainer_with(trainer: Trainer, names: Collection[str]) -> list[Outcome]:
    """Only the trainer patches `names`, checked as `build_trainer` checks them, on a trainer built without it
    (`cpu_step.speed_up_cpu_step`); no banner."""
    unknown = set(names) - {p.name for p in PATCHES if p.phase == "trainer"}
    if unknown:
        raise ConfigError(f"No trainer patch named {', '.join(sorted(unknown))}.")
    model = trainer.accelerator.unwrap_model(trainer.model)
    return _apply("trainer", trainer.accelerator.device.type, getattr(_base_model(model), "dtype", None), trainer,
                  only=names)


def banner(outcomes: list[Outcome]) -> str:
    """One line, as Unsloth's: what was patched, on which versions, and how many patches were left out."""
    from .. import __version__

    applied = [o.patch for o in outcomes if o.status == "applied"]
    skipped = sum(o.status == "skipped" for o in outcomes)
    left = f"; {skipped} skipped, see above" if skipped else ""
    kit = f"rloo-kit {__version__}: `rloo-kit doctor` lists every patch"
    if not applied:
        return f"patched nothing: the libraries run as they ship{left} ({kit})."
    dists = dict.fromkeys(d for p in applied for d in p.tested)
    return f"patched {', '.join(p.name for p in applied)} on {versions_text(dists)}{left} ({kit})."


def allowed(name: str, instance: object = None) -> bool:
    """Whether patch `name`, applied outside `build_trainer` (the live view's, an accessor of `patches.private`),
    can be trusted here, its instance attributes looked for on `instance` when given; when not, says so once."""
    (patch,) = (p for p in PATCHES if p.name == name)
    reason = patch.unsupported(instance)
    if reason:
        _say_once(f"patch {name} skipped: {reason}; the library's own behaviour is kept.")
    return reason is None
