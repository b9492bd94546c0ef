"""What a patch is, the two questions the door asks of one (are its targets there, and is its library's
version one its equivalence tests passed on?), and `overriding`, how the kit's own code holds one in place for
the length of a call."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion

# "call": applied by the kit's own code for the length of one call (its generation), "cli": by the `rloo-kit`
# command for its own process, "private": a named accessor of another library's private attribute
# (`patches.private`), read, written or called by the kit's own code; all with `apply=None`, asking the door
# `allowed(name)` first where the caller has a fallback
PHASES = ("model", "config", "process", "trainer", "live", "call", "cli", "private")


@dataclass(frozen=True)
class Patch:
    """One change the kit makes to another library's behaviour, with what it takes to trust it."""

    name: str
    summary: str  # what it changes and why, in one line
    targets: tuple[str, ...]  # dotted paths of what it replaces, wraps, writes or calls, all of which must exist
    # ('pkg.Class().attr': an attribute the class's instances set in `__init__`)
    tested: dict[str, str]  # distribution -> the PEP 440 range its tests passed on
    tests: tuple[str, ...]  # pytest node ids that hold it to the library's own result
    apply: str | None  # "module:function", given the phase's object (nothing for "process"); returning
    # False means it declined this model or config (its own checks); None: applied by the code of its phase
    # ("live", "call", "cli", "private"), after `allowed(name)`
    phase: str = "trainer"  # when it applies: on the model, the config, the process, the built trainer, or "live"
    devices: tuple[str, ...] | None = ("cpu",)  # the run's device types it is for (None: any)
    dtype: torch.dtype | None = None  # the base model's dtype it is for (None: any)
    required: bool = False  # where it is for, the run cannot go without it: raise rather than skip
    when: str = ""  # what else its own checks ask of the run, in plain words
    asked_by: tuple[str, ...] = ()  # the trainer attributes a run sets (any one) to want it (tools, a pool); (): always

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"{self.name}: phase {self.phase!r} is not one of {PHASES}")

    def is_for(self, device: str, dtype: torch.dtype | None) -> str | None:
        """Why this run does not need it (device or dtype), or None when it does."""
        if self.devices is not None and device not in self.devices:
            return f"for {'/'.join(self.devices)}, not {device}"
        if self.dtype is not None and dtype is not None and dtype != self.dtype:
            return f"for {str(self.dtype).removeprefix('torch.')} models, not {str(dtype).removeprefix('torch.')}"
        return None

    def unsupported(self, instance: object = None) -> str | None:
        """Why it cannot be trusted here (a library outside its tested range, a target gone), or None."""
        for dist, tested in self.tested.items():
            found = version(dist)
            if found is None:
                return f"{dist} is not installed"
            if not _within(found, tested):
                return f"{dist} {found} is outside the {tested} it was tested on"
        gone = [t for t in self.targets if not present(t, instance)]
        return f"{', '.join(gone)} not found in {versions_text(self.tested)}" if gone else None


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions_text(dists) -> str:
    """'trl 1.15.0, torch 2.13.0+cpu': the installed versions of `dists`."""
    return ", ".join(f"{d} {version(d) or '(not installed)'}" for d in dists)


def _within(found: str, tested: str) -> bool:
    try:
        return SpecifierSet(tested).contains(found, prereleases=True)
    except InvalidVersion:
        return False


def resolve(target: str) -> object:
    """The object at a dotted path such as 'trl.trainer.utils._ChunkedLogProbFunction': the longest prefix that
    imports as a module, then attributes. Raises LookupError when any part is missing."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError as e:
            raise LookupError(target) from e
        return obj
    raise LookupError(target)


def present(target: str, instance: object = None) -> bool:
    """Whether `target` exists. 'pkg.Class().attr' names an attribute that instances set in `__init__` (TRL's
    `_metrics`): looked for on `instance` when that is one of them, else taken on trust while the class exists."""
    owner, marker, attr = target.partition("().")
    try:
        obj = resolve(owner)
    except LookupError:
        return False
    if not marker:
        return True
    return hasattr(instance, attr) if isinstance(obj, type) and isinstance(instance, obj) else isinstance(obj, type)


_NONE = object()


@contextlib.contextmanager
def overriding(name: str, overrides: list[tuple[object, object]]) -> Iterator[None]:
    """For the duration, each object's instance attribute `name` is its override; then what it was before
    (an outer override, or none: the class's again). Overrides nest."""
    before = [vars(obj).get(name, _NONE) for obj, _ in overrides]
    for obj, value in overrides:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for (obj, _), value in zip(overrides, before, strict=True):
            if value is _NONE:
                delattr(obj, name)
            else:
                setattr(obj, name, value)
