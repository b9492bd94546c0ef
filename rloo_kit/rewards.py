"""Reward functions in TRL's signature: f(prompts, completions, **columns) -> list[float | None].

Completions arrive as strings or as chat messages; every function here accepts both. Dataset
columns arrive as keyword lists (`answer=[...]`). None means "no score for this sample": TRL
leaves it out of the leave-one-out baseline instead of counting it as zero.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import numbers
import re
from collections import Counter
from collections.abc import Callable, Sequence

from .errors import RewardError

log = logging.getLogger("rloo_kit")

RewardFunc = Callable[..., list]
_TRL_ARGS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}

NUMBER = r"-?\$?-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?"
_ANSWER_PATTERNS = (  # most explicit first; the last number in the text is the fallback
    re.compile(rf"####\s*({NUMBER})"),
    re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}"),
    re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S),
    re.compile(rf"answer is\s*:?\s*({NUMBER})", re.I),
    re.compile(rf"answer\s*:\s*({NUMBER})", re.I),
)


def completion_text(completion) -> str:
    """The text of one completion, whether a string or a list of chat messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return "".join(str(m.get("content", "")) for m in completion)


def parse_number(text: str | None) -> float | None:
    """'1,234' / '$18.00' / '45%' / '-3' / '−3' -> float; None when it is not a number."""
    if text is None:
        return None
    cleaned = text.strip().replace("−", "-").replace(",", "").replace("$", "").replace("%", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion: '#### N', '\\boxed{N}', '<answer>N</answer>', 'the answer
    is N', 'answer: N', else the last number in the text."""
    for pattern in _ANSWER_PATTERNS:
        matches = pattern.findall(text)
        if matches:
            inner = re.findall(NUMBER, matches[-1])
            return inner[-1] if inner else matches[-1].strip()
    numbers = re.findall(NUMBER, text)
    return numbers[-1] if numbers else None


def answers_match(predicted: str | None, gold: str) -> bool:
    """Numeric comparison when both are numbers (18 == 18.00, 1,000 == 1000), else exact text."""
    p, g = parse_number(predicted), parse_number(gold)
    if p is not None and g is not None:
        return math.isclose(p, g, rel_tol=1e-9, abs_tol=1e-6)
    return predicted is not None and predicted.strip() == str(gold).strip()


def correct_answer(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
    """1.0 when the completion's final answer equals the `answer` column, else 0.0."""
    return [float(is_correct(c, str(a))) for c, a in zip(completions, answer)]


def exact_answer(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
    """1.0 when the whole reply is the answer and nothing else (whitespace and a final period
    ignored, numbers compared numerically): for tasks that ask for "just the number"."""
    return [float(_is_exact(completion_text(c), str(a))) for c, a in zip(completions, answer)]


def _is_exact(text: str, gold: str) -> bool:
    reply = text.strip().rstrip(".").strip()
    return re.fullmatch(NUMBER, reply) is not None and answers_match(reply, gold) if parse_number(gold) is not None \
        else reply == gold.strip()


def is_correct(completion, gold: str, match: str = "final") -> bool:
    """One completion against its gold answer: match="final" reads the final answer out of the text
    (as correct_answer does); match="exact" wants the reply to be the answer alone."""
    text = completion_text(completion)
    if match == "exact":
        return _is_exact(text, gold)
    if match == "final":
        return answers_match(extract_answer(text), gold)
    raise ValueError(f"match must be 'final' or 'exact', not {match!r}.")


def tag_format(tags: Sequence[str] = ("think", "answer")) -> RewardFunc:
    """A reward for using the tags, in order: the fraction of `<tag>...</tag>` pairs present."""
    patterns = [re.compile(rf"<{t}>.*?</{t}>", re.S) for t in tags]

    def format_reward(prompts: list, completions: list, **kwargs) -> list[float]:
        return [sum(bool(p.search(completion_text(c))) for p in patterns) / len(patterns) for c in completions]

    format_reward.__name__ = "format_" + "_".join(tags)
    return format_reward


def brevity(max_chars: int = 40) -> RewardFunc:
    """1.0 for an empty answer, falling linearly to 0.0 at `max_chars` characters. Weight it small:
    it breaks ties between right answers in favour of the shorter one."""

    def brevity_reward(prompts: list, completions: list, **kwargs) -> list[float]:
        return [max(0.0, 1.0 - len(completion_text(c).strip()) / max_chars) for c in completions]

    brevity_reward.__name__ = "brevity"
    return brevity_reward


def reward_model(model, tokenizer, *, batch_size: int = 8, name: str = "reward_model") -> RewardFunc:
    """Score prompt + completion with a sequence-classification model (its first logit)."""
    import torch

    def score(prompts: list, completions: list, **kwargs) -> list[float]:
        texts = [_as_text(tokenizer, p, c) for p, c in zip(prompts, completions)]
        out: list[float] = []
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(texts[i:i + batch_size], return_tensors="pt", padding=True, truncation=True)
            with torch.inference_mode():
                logits = model(**enc.to(model.device)).logits
            out.extend(logits[:, 0].float().tolist())
        return out

    score.__name__ = name
    return score


def _as_text(tokenizer, prompt, completion) -> str:
    if isinstance(prompt, str):
        return prompt + completion_text(completion)
    messages = list(prompt) + [{"role": "assistant", "content": completion_text(completion)}]
    return tokenizer.apply_chat_template(messages, tokenize=False)


def combine(*weighted: tuple[RewardFunc, float], name: str = "combined") -> RewardFunc:
    """One reward that is the weighted sum of others: combine((correct_answer, 1.0), (brevity(), 0.2)).
    A sample any part scores None is None. (To log each part separately, pass them to the trainer
    as a list with RLOOConfig(reward_weights=[...]) instead.)"""

    def combined(prompts: list, completions: list, **kwargs) -> list[float | None]:
        parts = [[None if v is None else w * v for v in fn(prompts=prompts, completions=completions, **kwargs)]
                 for fn, w in weighted]
        return [None if None in vals else sum(vals) for vals in zip(*parts)]

    combined.__name__ = name
    combined.required_columns = set().union(*(required_columns(fn) for fn, _ in weighted))
    return combined


def required_columns(fn: RewardFunc) -> set[str]:
    """Dataset columns a reward function needs: its named parameters beyond TRL's own."""
    if hasattr(fn, "required_columns"):
        return set(fn.required_columns)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.default is p.empty and p.name not in _TRL_ARGS}


def safe(fn: RewardFunc, *, strict: bool = False) -> RewardFunc:
    """Guard a reward function so that one bad sample cannot kill a run.

    An exception, a NaN/inf or a non-number for one sample gives None for that sample (TRL then
    leaves it out of the baseline) and a counted warning; `wrapper.failures` keeps the totals.
    When the whole batch raises, the samples are retried one by one to find the culprits.
    A result of the wrong length is always an error: it is a bug, not a bad sample.
    With strict=True, any failure raises RewardError instead.
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
            if v is _FAILED:
                bad["raised"] += 1
                v = None
            elif v is not None and not _is_number(v):
                bad["not a number" if not isinstance(v, numbers.Real) else "NaN/inf"] += 1
                v = None
            clean.append(None if v is None else float(v))
        if bad:
            wrapper.failures.update(bad)
            detail = ", ".join(f"{k}: {c}" for k, c in bad.items())
            if strict:
                raise RewardError(f"Reward '{name}' gave unusable values ({detail}) in a batch of {n}.")
            log.warning("Reward '%s': %d of %d samples unscored this batch (%s); %d so far. They count as "
                        "'no score', not zero.", name, sum(bad.values()), n, detail, sum(wrapper.failures.values()))
        return clean

    wrapper.failures = Counter()
    wrapper._rloo_kit_safe = True
    wrapper.required_columns = required_columns(fn)
    return wrapper


_FAILED = object()


def _one(fn, name, prompts, completions, kwargs, i):
    one = {k: v[i:i + 1] if isinstance(v, list) and len(v) == len(completions) else v for k, v in kwargs.items()}
    try:
        return _check_length(name, fn(prompts=prompts[i:i + 1], completions=completions[i:i + 1], **one), 1)[0]
    except RewardError:
        raise
    except Exception:
        return _FAILED


def _check_length(name: str, values, n: int) -> list:
    if not isinstance(values, (list, tuple)) or len(values) != n:
        got = f"{len(values)} values" if isinstance(values, (list, tuple)) else f"a {type(values).__name__}"
        raise RewardError(f"Reward '{name}' returned {got} for {n} completions. A reward function must return "
                          "a list with one float (or None) per completion, in order.")
    return list(values)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and math.isfinite(v)
