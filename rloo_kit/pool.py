"""A prompt pool: each step draws the prompts whose groups still teach.

A group whose K completions all get the same reward has a leave-one-out advantage of zero: its rollout costs as
much as any other and teaches nothing. TRL draws prompts uniformly, so solved prompts and hopeless ones keep
their share of every batch. The pool remembers, per prompt, what its last group gave (from the rewards the run
computes anyway, and first from the pre-flight's samples) and rests a prompt whose group was flat: for a quarter
of a pass over the data, doubling each time it is flat again, up to two passes. Rested prompts come back, as
the model may have learned them since (Axolotl re-rolls failed groups likewise), and a share of every draw
(`explore`) stays uniform over all prompts, so nothing is starved.

`patches.group_sampler.GroupSampler` asks it for each generation batch when the data loader wants one, and keeps
TRL's sampler contract (each prompt K times in a row, whole groups). A choice question asked in two orders
(`choice_order`) is one prompt to the pool: its twin's rewards count as its own. Under several processes each
process scores its own share of the groups, so the choices would differ between processes: the pool is for one
process, and declines (the prompts are drawn uniformly) under more.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from transformers import TrainerCallback

from .distributed import is_main_process
from .preflight_check import SPREAD_EPS

log = logging.getLogger("rloo_kit")

EXPLORE = 0.2  # share of each draw made uniformly over all prompts, rested ones included
FIRST_REST = 0.25  # passes over the data a prompt rests after its first flat group; doubled at each flat group after
MAX_REST = 2.0  # ... up to this many passes
STATE_FILE = "pool.json"  # inside each checkpoint: the pool's records, which --resume continues
LOG_PREFIX = "pool/"


def prompt_key(prompt) -> str:
    """A prompt as the pool knows it: the text, or the chat messages as JSON (the same key in the dataset, in
    the reward functions' `prompts` and in the pre-flight's rows)."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


@dataclass
class Record:
    """What the pool knows of one prompt."""

    groups: int = 0  # groups of it judged so far
    flat_streak: int = 0  # flat groups in a row, up to the last one
    rest_until: int = 0  # the draw before which it is rested
    last: str = ""  # the last group: "spread", "solved" (all at the best reward seen), "failed" (the worst), "flat"


class PromptPool:
    """Per-prompt records of a training set's prompts, and the choice of the next generation batch from them."""

    def __init__(self, prompts: Sequence, *, explore: float = EXPLORE, seed: int = 0):
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore={explore}: a share, between 0 and 1.")
        self.rows_of: dict[str, list[int]] = {}
        for row, prompt in enumerate(prompts):
            self.rows_of.setdefault(prompt_key(prompt), []).append(row)
        self.explore, self.rng = explore, random.Random(seed)
        self.records: dict[str, Record] = {}
        self.alias: dict[str, str] = {}  # a twin's key -> the key of the prompt it asks in another order
        self.draws = 0  # generation batches chosen so far
        self.batch = 1  # prompts a draw chooses (set by the sampler)
        self.low, self.high = math.inf, -math.inf  # the range of group rewards seen
        self._window = {"groups": 0, "flat": 0}  # since the last log line

    def add_twins(self, pairs: Iterable[tuple]) -> None:
        """(prompt, twin) pairs: the twin's groups are judged as the prompt's, and it is never chosen itself."""
        for prompt, twin in pairs:
            self.alias[prompt_key(twin)] = prompt_key(prompt)

    # ------------------------------------------------------------------ choosing
    def rested(self, key: str) -> bool:
        record = self.records.get(key)
        return record is not None and record.rest_until > self.draws

    def choose(self, n: int) -> list[int]:
        """`n` distinct rows for the next generation batch: each slot drawn uniformly over the prompts not
        rested (those whose last group had spread first), or with probability `explore` over all prompts."""
        keys = list(self.rows_of)
        n = min(n, len(keys))
        awake = [k for k in keys if not self.rested(k)]
        taught = [k for k in awake if self.records.get(k, Record()).last == "spread"]
        chosen: list[str] = []
        for _ in range(n):
            for candidates in ((keys,) if self.rng.random() < self.explore else (taught, awake, keys)):
                left = [k for k in candidates if k not in chosen]
                if left:
                    chosen.append(self.rng.choice(left))
                    break
        self.draws += 1
        return [self.rng.choice(self.rows_of[k]) for k in chosen]

    # ------------------------------------------------------------------ learning
    def observe(self, prompts: Sequence, rewards: Sequence[float]) -> None:
        """The total rewards of one scored batch (prompts repeated K times each, as TRL scores them)."""
        groups: dict[str, list[float]] = {}
        for prompt, reward in zip(prompts, rewards, strict=True):
            if not math.isnan(reward):
                key = prompt_key(prompt)
                groups.setdefault(self.alias.get(key, key), []).append(reward)
        judged = {k: v for k, v in groups.items() if k in self.rows_of and len(v) >= 2}
        for values in judged.values():  # the batch's range first, so that no group is judged on a part of it
            self.low, self.high = min(self.low, *values), max(self.high, *values)
        for key, values in judged.items():
            self._judge(key, values)

    def seed(self, prompts: Sequence, flat: Sequence[bool]) -> None:
        """What the pre-flight saw: for each of its prompts, whether its K samples were flat."""
        for prompt, is_flat in zip(prompts, flat, strict=True):
            key = prompt_key(prompt)
            if key in self.rows_of:
                self._mark(key, "flat" if is_flat else "spread")

    def _judge(self, key: str, values: list[float]) -> None:
        mean = sum(values) / len(values)
        spread = max(values) - min(values) > SPREAD_EPS
        tolerance = 1e-6 * max(1.0, self.high - self.low)
        kind = ("spread" if spread else "solved" if mean >= self.high - tolerance
                else "failed" if mean <= self.low + tolerance else "flat")
        self._mark(key, kind)
        self._window["groups"] += 1
        self._window["flat"] += not spread

    def _mark(self, key: str, kind: str) -> None:
        record = self.records.setdefault(key, Record())
        record.groups += 1
        record.last = kind
        if kind == "spread":
            record.flat_streak, record.rest_until = 0, 0
            return
        record.flat_streak += 1
        passes = min(MAX_REST, FIRST_REST * 2 ** (record.flat_streak - 1))
        record.rest_until = self.draws + max(1, round(passes * len(self.rows_of) / max(1, self.batch)))

    # ------------------------------------------------------------------ reporting and keeping
    def summary(self) -> dict[str, float]:
        """Logged beside each step: the share of prompts rested, and of the groups judged since the last log,
        the share that was flat (before any choice could avoid them, it would be TRL's frac_reward_zero_std)."""
        window, self._window = self._window, {"groups": 0, "flat": 0}
        rested = sum(self.rested(k) for k in self.rows_of) / max(1, len(self.rows_of))
        out = {f"{LOG_PREFIX}rested": round(rested, 4)}
        if window["groups"]:
            out[f"{LOG_PREFIX}flat_groups"] = round(window["flat"] / window["groups"], 4)
        return out

    def state(self) -> dict:
        return {"draws": self.draws, "low": self.low if math.isfinite(self.low) else None,
                "high": self.high if math.isfinite(self.high) else None,
                "records": {k: asdict(r) for k, r in self.records.items()}, "rng": self.rng.getstate()}

    def load(self, state: dict) -> None:
        self.draws = state["draws"]
        self.low = state["low"] if state["low"] is not None else math.inf
        self.high = state["high"] if state["high"] is not None else -math.inf
        self.records = {k: Record(**r) for k, r in state["records"].items() if k in self.rows_of}
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))

    # ------------------------------------------------------------------ wiring into a run
    def recording(self, funcs: Sequence, weights: Sequence[float]) -> list:
        """The reward functions as the trainer gets them, each also reporting its scores here; once every one has
        scored a batch, their weighted sum (TRL's, None left out) is observed. Reward models given as a module or
        a hub id are not callables the pool can wrap: ValueError (train without the pool)."""
        import functools

        if any(not callable(f) or hasattr(f, "forward") for f in funcs):
            raise ValueError("the prompt pool reads the rewards of reward functions, not of reward models given as a "
                             "model or hub id: train without it, or wrap the model with rloo_kit.rewards.reward_model.")
        pending: dict[int, list] = {}

        def record(index: int, fn):
            @functools.wraps(fn)
            def scored(prompts, completions, **kwargs):
                values = fn(prompts=prompts, completions=completions, **kwargs)
                pending[index] = [math.nan if v is None else float(v) for v in values]
                if len(pending) == len(funcs):
                    parts = [pending.pop(i) for i in range(len(funcs))]
                    totals = [sum(w * v for w, v in zip(weights, vals, strict=True) if not math.isnan(v))
                              if not all(map(math.isnan, vals)) else math.nan for vals in zip(*parts, strict=True)]
                    self.observe(prompts, totals)
                return values
            return scored

        return [record(i, f) for i, f in enumerate(funcs)]


class PoolCallback(TrainerCallback):
    """Logs the pool's figures with each step's log, keeps its state in each checkpoint and takes it back on
    --resume, as the time budget keeps its own."""

    def __init__(self, pool: PromptPool, output_dir: str | Path):
        self.pool, self.out = pool, Path(output_dir)

    def on_train_begin(self, args, state, control, **kwargs):
        saved = self.out / f"checkpoint-{state.global_step}" / STATE_FILE
        if state.global_step and saved.is_file():
            self.pool.load(json.loads(saved.read_text()))
            if is_main_process():
                log.info(f"prompt pool: {len(self.pool.records)} prompts' records taken back from {saved.parent.name}")
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Into the step's log (the monitor and live view read it) and its copy in log_history (plots and
        metrics.json read that)."""
        if logs is not None and "reward" in logs:
            summary = self.pool.summary()
            logs.update(summary)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(summary)
        return control

    def on_save(self, args, state, control, **kwargs):
        checkpoint = self.out / f"checkpoint-{state.global_step}"
        if is_main_process() and checkpoint.is_dir():
            (checkpoint / STATE_FILE).write_text(json.dumps(self.pool.state()))
        return control
