"""Every number a run takes, and the range it must lie in: the command line's options, a recipe's keys and
the RLOOConfig fields the kit builds are checked here, all at once and before any model loads, so that a bad
one is one line naming it, its value and its range rather than a traceback minutes into a run.

Relations between numbers that need the data or TRL (held-out rows against a file's rows, a batch of whole
groups) are checked where those are known: `tasks.load_task` and `presets.make_config`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class Limit:
    """A number's kind and range; `low_open` refuses `low` itself (a learning rate of 0 learns nothing)."""

    kind: type  # int or float
    low: float
    high: float
    why: str
    low_open: bool = False

    def problem(self, value) -> str | None:
        """What is wrong with `value`, in words; None when it is fine."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"is not a number ({type(value).__name__}); {self._range()}"
        if self.kind is int and not float(value).is_integer():
            return f"must be a whole number; {self._range()}"
        if not math.isfinite(value) or value < self.low or value > self.high or (self.low_open and value == self.low):
            return self._range()
        return None

    def _range(self) -> str:
        def shown(x: float) -> str:
            return str(int(x)) if self.kind is int else f"{x:g}"

        low = f"> {shown(self.low)}" if self.low_open else f">= {shown(self.low)}"
        return f"give a {'whole ' if self.kind is int else ''}number {low} and <= {shown(self.high)} ({self.why})"


LIMITS: dict[str, Limit] = {  # by the name of the option's destination, the recipe key and the RLOOConfig field
    "max_steps": Limit(int, 1, 10**7, "training steps; the demo learns in 30"),
    "minutes": Limit(float, 0, 10**5, "minutes of training, the best validation step kept", low_open=True),
    "save_steps": Limit(int, 1, 10**7, "steps between checkpoints"),
    "num_generations": Limit(int, 2, 1024, "completions per prompt: RLOO's baseline is the mean of the other K-1"),
    "per_device_train_batch_size": Limit(int, 1, 65536, "completions per step on each process"),
    "batch_size": Limit(int, 1, 65536, "completions per step on each process"),
    "gradient_accumulation_steps": Limit(int, 1, 4096, "steps accumulated per update"),
    "max_completion_length": Limit(int, 1, 131072, "tokens a completion may run"),
    "max_new_tokens": Limit(int, 1, 131072, "tokens an answer may run"),
    "learning_rate": Limit(float, 0, 1, "the adapter's learning rate; the cpu preset's is 4e-4", low_open=True),
    "beta": Limit(float, 0, 100, "the KL penalty's weight; 0 turns it off"),
    "temperature": Limit(float, 0, 10, "sampling temperature; 1.0 is TRL's default", low_open=True),
    "top_p": Limit(float, 0, 1, "nucleus sampling's share of probability", low_open=True),
    "min_p": Limit(float, 0, 1, "a token's least probability, relative to the likeliest one"),
    "top_k": Limit(int, 0, 10**7, "the likeliest tokens sampled from; 0 turns it off"),
    "max_grad_norm": Limit(float, 0, 10**6, "gradient clipping; 1.0 is usual", low_open=True),
    "warmup_ratio": Limit(float, 0, 1, "share of the steps spent warming the learning rate up"),
    "num_iterations": Limit(int, 1, 1024, "optimisation passes over each batch of samples"),
    "lora_r": Limit(int, 1, 4096, "LoRA rank; the presets use 16-64"),
    "lora_alpha": Limit(int, 1, 65536, "LoRA scale; the presets use 2 x r"),
    "n_test": Limit(int, 1, 10**6, "held-out prompts"),
    "preflight_prompts": Limit(int, 0, 65536, "prompts the pre-flight samples; 0 skips it"),
    "max_tool_calls": Limit(int, 1, 64, "tool calls a completion may make"),
    "tool_warm_start": Limit(int, 0, 10**5, "worked examples to warm a model up on; 0: none"),
    "samples": Limit(int, 0, 1024, "sampled completions a prompt; 0 for greedy only"),
    "seed": Limit(int, 0, 2**32 - 1, "a random seed"),
    "reward_model_weight": Limit(float, 0, 1000, "the reward model's weight beside the task's rewards",
                                 low_open=True),
    "num_train_epochs": Limit(float, 0, 10**4, "passes over the preference pairs", low_open=True),
    "eval_fraction": Limit(float, 0, 0.9, "share of the pairs held out", low_open=True),
    "max_length": Limit(int, 8, 131072, "tokens the reward model reads"),
}


def check_numbers(values: Mapping[str, object], names: Mapping[str, str] | None = None) -> None:
    """Raise one ConfigError naming every number in `values` outside its range (by `names[key]`, e.g. a
    command-line flag, else the key itself). Keys without a limit, and None (not given), pass."""
    names = names or {}
    wrong = [f"{names.get(key, key)} {value!r}: {problem}" for key, value in values.items()
             if value is not None and key in LIMITS and (problem := LIMITS[key].problem(value))]
    if wrong:
        raise ConfigError("; ".join(wrong) + ".")
