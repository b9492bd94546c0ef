"""A reward the user wrote, in a file of their own: loaded from a local path as the command line names it
(`PATH.py:NAME[:WEIGHT]`), and tried on a few rows of the task before any model loads.
"""

from __future__ import annotations

import re

from ..errors import RewardError
from ..user_files import function_from_file
from .answers import accepted_answers
from .guard import RewardFunc, _check_length, _is_number


def from_file(spec: str) -> tuple[RewardFunc, float]:
    """A reward function from a local Python file, as the command line names it: 'PATH.py:NAME' or
    'PATH.py:NAME:WEIGHT' (weight 1.0 by default). Only a file on this machine is read: never a URL or
    a hub id, since the file runs as code."""
    parsed = re.fullmatch(r"(?P<path>.+\.py):(?P<name>[A-Za-z_]\w*)(?::(?P<weight>[^:]+))?", spec)
    if parsed is None:
        raise RewardError(f"--reward '{spec}': write it as PATH.py:FUNCTION or PATH.py:FUNCTION:WEIGHT, e.g. "
                          "my_rewards.py:has_units:0.5.")
    weight = parsed["weight"] or "1"
    try:
        value = float(weight)
    except ValueError:
        raise RewardError(f"--reward '{spec}': the weight '{weight}' is not a number.") from None
    fn = function_from_file(spec, parsed["path"], parsed["name"], RewardError, "--reward")
    return fn, value


def check_on_rows(fn: RewardFunc, rows: list[dict], name: str | None = None) -> None:
    """Call a reward on a few dataset rows, their answers standing in for completions, and refuse it in
    words if it breaks TRL's contract: a crash, or not one number (or None) per completion."""
    name = name or getattr(fn, "__name__", "reward")
    prompts = [r["prompt"] for r in rows]
    completions = [str(accepted_answers(r.get("answer", ""))[0]) for r in rows]
    columns = {c: [r[c] for r in rows] for c in rows[0] if c != "prompt"}
    try:
        values = fn(prompts=prompts, completions=completions, completion_ids=[[0]] * len(rows), **columns)
    except Exception as e:
        raise RewardError(f"Reward '{name}' raised {type(e).__name__}: {e} when tried on {len(rows)} rows of the task "
                          "(their answers as completions). It is called as fn(prompts, completions, completion_ids, "
                          "**columns) and returns one float (or None) per completion.") from e
    _check_length(name, values, len(rows))
    bad = [v for v in values if v is not None and not _is_number(v)]
    if bad:
        raise RewardError(f"Reward '{name}' returned {bad[0]!r} ({type(bad[0]).__name__}): return one float (or None) "
                          "per completion.")
