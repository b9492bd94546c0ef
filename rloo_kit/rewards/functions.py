"""Reward functions in TRL's signature: f(prompts, completions, **columns) -> list[float | None].

Completions arrive as strings or as chat messages; every function here accepts both. Dataset columns arrive as
keyword lists (`answer=[...]`). None means "no score for this sample": TRL leaves it out of the leave-one-out
baseline instead of counting it as zero.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ..errors import RewardError
from .answers import completion_text, is_correct
from .guard import RewardFunc, _check_reward_model_id, required_columns


def correct_answer(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
    """1.0 when the completion's final answer matches the `answer` column (see `is_correct`), else 0.0.

    A `labels` column (a classification task's label set, see data.load_local) makes a reply that names
    another label beside the right one wrong (one named only to deny it is not named); a `choices` column (what
    each question offers: 'glacier or pear?') scores the one a reply picks. Without either, a text answer named
    only where the reply repeats its prompt's words is not the reply's answer (`rewards.answers.restates`).

    >>> correct_answer(["q", "q"], ["So 3 + 4 = 7.", "The opposite of hot is Cold."], answer=["7", "cold"])
    [1.0, 1.0]
    >>> correct_answer(["q"] * 2, ["Positive or negative.", "Not positive: negative."], answer=["negative"] * 2,
    ...                labels=[["positive", "negative"]] * 2)
    [0.0, 1.0]
    """
    labels = kwargs.get("labels") or [None] * len(completions)
    choices = kwargs.get("choices") or [None] * len(completions)
    return [float(is_correct(c, a, labels=ls, prompt=p, choices=cs))
            for p, c, a, ls, cs in zip(prompts, completions, answer, labels, choices, strict=True)]

def exact_answer(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
    """1.0 when the whole reply is the answer and nothing else (whitespace, surrounding punctuation, a leading article
    and case ignored, case only where the prompt asks for it, `answers.keeps_case`; numbers compared numerically):
    for tasks that ask for "just the answer".

    >>> exact_answer(["q", "q"], ["7.", "It is 7."], answer=["7", "7"])
    [1.0, 0.0]
    """
    return [float(is_correct(c, a, match="exact", prompt=p))
            for p, c, a in zip(prompts, completions, answer, strict=True)]

def tag_format(tags: Sequence[str] = ("think", "answer")) -> RewardFunc:
    """A reward for using the tags, in order: the fraction of `<tag>...</tag>` pairs present."""
    patterns = [re.compile(rf"<{t}>.*?</{t}>", re.S) for t in tags]

    def format_reward(prompts: list, completions: list, **kwargs) -> list[float]:
        return [sum(bool(p.search(completion_text(c))) for p in patterns) / len(patterns) for c in completions]

    format_reward.__name__ = "format_" + "_".join(tags)
    return format_reward

def brevity(max_chars: int = 40, *, gate: RewardFunc | None = None) -> RewardFunc:
    """1.0 for an empty answer, falling linearly to 0.0 at `max_chars` characters. Weight it small:
    it breaks ties between right answers in favour of the shorter one.

    `gate` (the task's answer reward): paid only where the gate scores above 0, so a short wrong reply earns
    nothing more than a long one, as in Kimi k1.5's length reward. Ungated, a run whose answers are never right
    still finds spread in length and learns to empty its replies (*Which number comes right before 162?*
    answered "150"). The kit's own brevity stays ungated: gated, 30 steps of the demo and of a number-words file
    gained less held out (-0.05 each over three seeds, `benchmarks/results/brevity-gate.md`), as paying a short
    wrong reply teaches the short form the right answers then take.

    >>> brevity(10, gate=correct_answer)(["q", "q"], ["7", "8"], answer=["7", "7"])
    [0.9, 0.0]
    """

    def brevity_reward(prompts: list, completions: list, **kwargs) -> list[float]:
        short = [max(0.0, 1.0 - len(completion_text(c).strip()) / max_chars) for c in completions]
        if gate is None:
            return short
        right = gate(prompts=prompts, completions=completions, **kwargs)
        return [s if (r or 0) > 0 else 0.0 for s, r in zip(short, right, strict=True)]

    brevity_reward.__name__ = "brevity"
    brevity_reward.required_columns = required_columns(gate) if gate is not None else set()
    return brevity_reward

def reward_model(model, tokenizer, *, batch_size: int = 8, name: str = "reward_model",
                 text: Callable[..., str] | None = None, max_length: int | None = None) -> RewardFunc:
    """Score prompt + completion with a sequence-classification model (its first logit). `text(tokenizer,
    prompt, completion)` builds what the model reads (default: the chat template for chat prompts, the two
    texts joined otherwise); `max_length` cuts it as the model was trained (see reward_models.pair_text)."""
    import torch

    as_text = text or _as_text
    cut = {"max_length": max_length} if max_length else {}

    def score(prompts: list, completions: list, **kwargs) -> list[float]:
        texts = [as_text(tokenizer, p, c) for p, c in zip(prompts, completions, strict=True)]
        out: list[float] = []
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(texts[i:i + batch_size], return_tensors="pt", padding=True, truncation=True, **cut)
            with torch.inference_mode():
                logits = model(**enc.to(model.device)).logits
            out.extend(logits[:, 0].float().tolist())
        return out

    score.__name__ = name
    return score

def hub_reward_model(model, *, batch_size: int = 8) -> RewardFunc:
    """A reward model as TRL takes it, as a reward function (`reward_model`): a hub id or directory, loaded
    as TRL loads it (sequence classification, one label), or a loaded sequence-classification model, with
    the tokenizer saved beside it (its `config.name_or_path`), as TRL finds it."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if isinstance(model, str):
        source = _check_reward_model_id(model)
        try:
            model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, use_safetensors=True)
        except OSError as e:
            raise RewardError(f"Cannot load the reward model '{source}': {e}") from e
    source = getattr(getattr(model, "config", None), "name_or_path", "") or ""
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise RewardError(f"No tokenizer for the reward model {type(model).__name__} at '{source}' ({e}). Pass "
                          "rloo_kit.rewards.reward_model(model, tokenizer) instead.") from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return reward_model(model.eval(), tokenizer, batch_size=batch_size, name=source.rstrip("/").split("/")[-1])

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
        return [None if None in vals else sum(vals) for vals in zip(*parts, strict=True)]

    combined.__name__ = name
    combined.required_columns = set().union(*(required_columns(fn) for fn, _ in weighted))
    return combined
