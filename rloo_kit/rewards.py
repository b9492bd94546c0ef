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
    marked = marked_answer(text)
    if marked is not None:
        return marked
    numbers = re.findall(NUMBER, text)
    return numbers[-1] if numbers else None


def marked_answer(text: str) -> str | None:
    """The answer a completion marks as its answer (the patterns of `extract_answer`), else None."""
    for pattern in _ANSWER_PATTERNS:
        matches = pattern.findall(text)
        if matches:
            inner = re.findall(NUMBER, matches[-1])
            return inner[-1] if inner else matches[-1].strip()
    return None


def sentences(text: str) -> list[str]:
    """A reply's sentences, split after . ! ? and at line breaks."""
    return re.split(r"(?<=[.!?])\s+|\n+", text.strip())


_ARTICLES = re.compile(r"^(?:the|a|an)\s+")
_EDGE_PUNCTUATION = " \t\n.,;:!?\"'`*()[]{}<>«»“”‘’"


def normalize_text(text: str) -> str:
    """Lower case, surrounding punctuation and quotes stripped, a leading article dropped, spaces collapsed:
    'The Cold.' -> 'cold'."""
    text = " ".join(str(text).lower().split()).strip(_EDGE_PUNCTUATION)
    return _ARTICLES.sub("", text).strip(_EDGE_PUNCTUATION)


def answers_match(predicted: str | None, gold: str) -> bool:
    """Numeric comparison when both are numbers (18 == 18.00, 1,000 == 1000), else normalized text
    ('The cold.' == 'cold')."""
    if predicted is None:
        return False
    p, g = parse_number(predicted), parse_number(gold)
    if p is not None and g is not None:
        return math.isclose(p, g, rel_tol=1e-9, abs_tol=1e-6)
    return normalize_text(predicted) == normalize_text(gold)


def accepted_answers(gold) -> list[str]:
    """An `answer` cell as the list of accepted answers: a string is one; a list (or tuple) is several."""
    if isinstance(gold, (list, tuple)):
        return [str(g) for g in gold]
    return [str(gold)]


def correct_answer(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
    """1.0 when the completion's final answer matches the `answer` column (see `is_correct`), else 0.0.

    A `labels` column (a classification task's label set, see data.load_local) makes a reply that names
    another label beside the right one wrong.

    >>> correct_answer(["q", "q"], ["So 3 + 4 = 7.", "The opposite of hot is Cold."], answer=["7", "cold"])
    [1.0, 1.0]
    >>> correct_answer(["q"], ["Not positive: negative."], answer=["negative"], labels=[["positive", "negative"]])
    [0.0]
    """
    labels = kwargs.get("labels") or [None] * len(completions)
    return [float(is_correct(c, a, labels=ls)) for c, a, ls in zip(completions, answer, labels, strict=True)]


def exact_answer(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
    """1.0 when the whole reply is the answer and nothing else (case, whitespace, surrounding
    punctuation and a leading article ignored; numbers compared numerically): for tasks that ask
    for "just the answer".

    >>> exact_answer(["q", "q"], ["7.", "It is 7."], answer=["7", "7"])
    [1.0, 0.0]
    """
    return [float(is_correct(c, a, match="exact")) for c, a in zip(completions, answer, strict=True)]


def is_correct(completion, gold, match: str = "final", labels: Sequence[str] | None = None) -> bool:
    """One completion against its gold answer (a string, or a list of accepted strings).

    Numbers (gold parses as one): match="final" compares the final number of the reply (see
    `extract_answer`), numerically.
    Text: both sides normalized (`normalize_text`). match="final" looks for the gold answer, as whole
    words, in the reply's explicit answer ('answer: ...', '<answer>', '####', boxed) or else in its
    last sentence: 'The opposite of hot is cold.' is right for 'cold'.
    match="exact" wants the reply to be the answer alone, in both cases.
    labels: the answers a row chooses among. A classification task's label set: with match="final" a reply
    that also names a label other than the accepted ones ('positive, not negative') is wrong, as a hedge is
    no answer. The numbers a choice question offers ('Which is larger, 70 or 95?'): the reply's pick is
    scored (`picked_number`), not its last number, as '95 is larger than 70.' names both.
    """
    if match not in ("final", "exact"):
        raise ValueError(f"match must be 'final' or 'exact', not {match!r}.")
    text = completion_text(completion)
    accepted = accepted_answers(gold)
    if match == "final" and offers_numbers(labels) and all(parse_number(g) is not None for g in accepted):
        return any(answers_match(picked_number(text, labels), g) for g in accepted)
    if not any(_matches(text, g, match) for g in accepted):
        return False
    others = [lab for lab in labels or () if normalize_text(lab) not in {normalize_text(g) for g in accepted}]
    return match == "exact" or not any(_matches(text, lab, match) for lab in others)


def predicted_answer(completion, labels: Sequence[str] | None = None) -> str | None:
    """The number a reply is scored on, for showing beside its gold answer: its pick among the offered
    numbers of a choice question (`picked_number`), else its final number (`extract_answer`)."""
    text = completion_text(completion)
    return picked_number(text, labels) if offers_numbers(labels) else extract_answer(text)


def offers_numbers(labels: Sequence[str] | None) -> bool:
    """Whether a row's labels are the numbers a choice question offers (data.load_local), not text labels."""
    return bool(labels) and all(parse_number(lab) is not None for lab in labels)


def picked_number(text: str, offered: Sequence[str]) -> str | None:
    """The offered number a reply picks: its marked answer if it marks one ('answer: 95'), else the first
    offered number named in its last sentence that names any, as a reply states its pick before what it
    compares it with: '95 is larger than 70.' picks 95, 'The larger is 95, not 70.' too.

    >>> picked_number("Let me see. 70 is a larger integer than 95.", ["70", "95"])
    '70'
    """
    marked = marked_answer(text)
    if marked is not None:
        return marked
    values = {parse_number(n) for n in offered}
    for sentence in reversed(sentences(text)):
        named = [n for n in re.findall(NUMBER, sentence) if parse_number(n) in values]
        if named:
            return named[0]
    return None


def _matches(text: str, gold: str, match: str) -> bool:
    numeric = parse_number(gold) is not None
    if match == "exact":
        reply = text.strip().rstrip(".").strip()
        if numeric:
            return re.fullmatch(NUMBER, reply) is not None and answers_match(reply, gold)
        return normalize_text(reply) == normalize_text(gold)
    if numeric:
        return answers_match(extract_answer(text), gold)
    wanted = normalize_text(gold)
    return bool(wanted) and re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", _answer_span(text)) is not None


def _answer_span(text: str) -> str:
    """Where a text answer is looked for: the explicit answer if the reply marks one, else its last sentence."""
    for pattern in _ANSWER_PATTERNS[:3]:  # ####, boxed, <answer>
        found = pattern.findall(text)
        if found:
            return normalize_text(found[-1])
    marked = re.findall(r"answer(?: is)?\s*:?\s*(.+)", text, re.I)
    if marked:
        return normalize_text(marked[-1])
    said = [s for s in sentences(text) if normalize_text(s)]
    return normalize_text(said[-1]) if said else ""


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


def load_reward_model(model, *, batch_size: int = 8) -> RewardFunc:
    """A reward model as TRL takes it, as a reward function (`reward_model`): a hub id or directory, loaded
    as TRL loads it (sequence classification, one label), or a loaded sequence-classification model, with
    the tokenizer saved beside it (its `config._name_or_path`), as TRL finds it."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if isinstance(model, str):
        source = _check_reward_model_id(model)
        try:
            model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, use_safetensors=True)
        except OSError as e:
            raise RewardError(f"Cannot load the reward model '{source}': {e}") from e
    source = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
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

    from .hardware import hub_reachable

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


def from_file(spec: str) -> tuple[RewardFunc, float]:
    """A reward function from a local Python file, as the command line names it: 'PATH.py:NAME' or
    'PATH.py:NAME:WEIGHT' (weight 1.0 by default). Only a file on this machine is read: never a URL or
    a hub id, since the file runs as code."""
    import importlib.util
    from pathlib import Path

    parsed = re.fullmatch(r"(?P<path>.+\.py):(?P<name>[A-Za-z_]\w*)(?::(?P<weight>[^:]+))?", spec)
    if parsed is None:
        raise RewardError(f"--reward '{spec}': write it as PATH.py:FUNCTION or PATH.py:FUNCTION:WEIGHT, e.g. "
                          "my_rewards.py:has_units:0.5.")
    path, name, weight = Path(parsed["path"]).expanduser(), parsed["name"], parsed["weight"] or "1"
    if "://" in parsed["path"] or not path.is_file():
        raise RewardError(f"--reward '{spec}': '{parsed['path']}' is not a file on this machine. Rewards are read "
                          "from local .py files only.")
    try:
        value = float(weight)
    except ValueError:
        raise RewardError(f"--reward '{spec}': the weight '{weight}' is not a number.") from None
    module_spec = importlib.util.spec_from_file_location(f"rloo_kit_user_rewards.{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        raise RewardError(f"--reward '{spec}': importing {path} raised {type(e).__name__}: {e}") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise RewardError(f"--reward '{spec}': {path} has no function '{name}'. It has: {', '.join(found) or 'none'}.")
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
