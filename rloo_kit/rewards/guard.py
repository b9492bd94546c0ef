"""Reward functions as training calls them: each wrapped so that a crash, a wrong length or a value that is not a
number is named in words, a sample it cannot score is left unscored (None) rather than zero, and a reward that
scores nothing for a few batches in a row stops the run instead of training on noise.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import numbers
import re
from collections import Counter
from collections.abc import Callable

from ..errors import RewardError

log = logging.getLogger("rloo_kit")


RewardFunc = Callable[..., list]

_TRL_ARGS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}

def required_columns(fn: RewardFunc) -> set[str]:
    """Dataset columns a reward function needs: its named parameters beyond TRL's own. A reward model
    (a module, or a hub id / directory TRL loads) reads prompts and completions only."""
    if hasattr(fn, "required_columns"):
        return set(fn.required_columns)
    if isinstance(fn, str) or _is_module(fn):
        return set()
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.default is p.empty and p.name not in _TRL_ARGS}

UNSCORED_PATIENCE = 3  # batches in a row in which a reward scores no sample before the run stops

def guard(reward_funcs, *, strict: bool = False, patience: int = UNSCORED_PATIENCE) -> list:
    """The reward functions as training and the pre-flight call them: each callable wrapped in `safe`;
    a sequence-classification model as it is; a string (a reward model's hub id or directory) passed
    on to TRL, which loads it, after checking it can be loaded from here."""
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    if not funcs:
        raise RewardError("No reward function given: pass at least one, e.g. rloo_kit.rewards.correct_answer.")
    return [_check_reward_model_id(f) if isinstance(f, str) else f if _is_module(f)
            else safe(f, strict=strict, patience=patience) for f in funcs]

def _is_module(f) -> bool:
    import torch

    return isinstance(f, torch.nn.Module)

def _check_reward_model_id(name: str) -> str:
    from pathlib import Path

    from ..hardware import hub_reachable

    if Path(name).expanduser().is_dir():
        return name
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        raise RewardError(f"Reward '{name}' is a string but neither a reward model directory nor a hub id "
                          "(org/name). Pass a function, or load a model with rewards.reward_model(model, tokenizer).")
    if not hub_reachable():
        raise RewardError(f"Reward '{name}' is a hub id string, which TRL loads as a reward model, but the Hugging "
                          "Face hub is not reachable from here. Download it elsewhere and pass its directory, or load "
                          "it yourself and wrap it: rewards.reward_model(model, tokenizer).")
    return name

def safe(fn: RewardFunc, *, strict: bool = False, patience: int = UNSCORED_PATIENCE) -> RewardFunc:
    """Guard a reward function so that one bad sample cannot kill a run, and a broken one cannot
    waste it.

    An exception, a NaN/inf or a non-number for one sample gives None for that sample (TRL then
    leaves it out of the baseline) and a counted warning; `wrapper.failures` keeps the totals by
    cause ('raised ValueError', 'returned str', 'NaN/inf'). When the whole batch raises, the samples
    are retried one by one to find the culprits. A result of the wrong length is always an error:
    it is a bug, not a bad sample. A reward that scores no sample for `patience` batches in a row
    raises RewardError naming the cause. With strict=True, any failure raises RewardError at once.
    """
    if getattr(fn, "_rloo_kit_safe", False):
        return fn
    name = getattr(fn, "__name__", type(fn).__name__)

    @functools.wraps(fn)
    def wrapper(prompts: list, completions: list, **kwargs) -> list[float | None]:
        n = len(completions)
        try:
            values = _check_length(name, fn(prompts=prompts, completions=completions, **kwargs), n)
        except RewardError:
            raise
        except Exception as e:
            if strict:
                raise RewardError(f"Reward '{name}' raised {type(e).__name__}: {e}") from e
            values = [_one(fn, name, prompts, completions, kwargs, i) for i in range(n)]
        bad = Counter()
        clean = []
        for v in values:
            cause = unusable(v)
            if cause:
                bad[cause] += 1
            clean.append(None if cause or v is None else float(v))
        if bad:
            wrapper.failures.update(bad)
            if strict:
                raise RewardError(f"Reward '{name}' gave unusable values ({describe(bad)}) in a batch of {n}.")
            log.warning("Reward '%s': %d of %d samples unscored this batch (%s); %d so far. They count as "
                        "'no score', not zero.", name, sum(bad.values()), n, describe(bad),
                        sum(wrapper.failures.values()))
        wrapper.unscored_batches = wrapper.unscored_batches + 1 if all(v is None for v in clean) else 0
        if wrapper.unscored_batches >= patience:
            raise RewardError(scores_nothing(name, bad or Counter({"returned None": n}), wrapper.unscored_batches))
        return clean

    wrapper.failures = Counter()
    wrapper.unscored_batches = 0
    wrapper._rloo_kit_safe = True
    wrapper.required_columns = required_columns(fn)
    return wrapper

def unusable(value) -> str | None:
    """Why one reward value cannot be used ('raised ValueError', 'returned str', 'NaN/inf'), or None if it can."""
    if isinstance(value, _Failed):
        return f"raised {value.error}"
    if value is None or _is_number(value):
        return None
    return "NaN/inf" if isinstance(value, numbers.Real) else f"returned {type(value).__name__}"

def describe(causes: Counter) -> str:
    return ", ".join(f"{k}: {c}" for k, c in causes.most_common())

def scores_nothing(name: str, causes: Counter, batches: int = 1) -> str:
    """The message for a reward that scored no sample: what it did, and what a reward must return."""
    fix = ("It must return one float (or None) per completion: convert with float(...)"
           if any(c.startswith("returned") and c != "returned None" for c in causes) else
           "Run it on a few completions by hand to see why it fails" if any(c.startswith("raised") for c in causes)
           else "None means 'no score'; a reward that never scores gives nothing to learn from")
    where = f"the last {batches} batches" if batches > 1 else "this batch"
    return f"Reward '{name}' scored no sample in {where} ({describe(causes)}). {fix}."

class _Failed:
    def __init__(self, error: Exception):
        self.error = type(error).__name__

def _one(fn, name, prompts, completions, kwargs, i):
    one = {k: v[i:i + 1] if isinstance(v, list) and len(v) == len(completions) else v for k, v in kwargs.items()}
    try:
        return _check_length(name, fn(prompts=prompts[i:i + 1], completions=completions[i:i + 1], **one), 1)[0]
    except RewardError:
        raise
    except Exception as e:
        return _Failed(e)

def _check_length(name: str, values, n: int) -> list:
    if not isinstance(values, (list, tuple)) or len(values) != n:
        got = f"{len(values)} values" if isinstance(values, (list, tuple)) else f"a {type(values).__name__}"
        raise RewardError(f"Reward '{name}' returned {got} for {n} completions. A reward function must return "
                          "a list with one float (or None) per completion, in order.")
    return list(values)

def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and math.isfinite(v)
