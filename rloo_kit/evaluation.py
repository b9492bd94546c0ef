"""What the adapter learned: generation on held-out prompts, scored, and base-vs-adapter tables.

`evaluate` generates (greedy, or `samples` sampled completions per prompt), scores with the same
reward functions as training, and reports accuracy, unbiased pass@k, mean reward per function,
length and truncation. `evaluate_base_and_adapter` measures both with one model in memory by
switching the adapter off for the base.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from math import comb
from typing import TYPE_CHECKING

import pandas as pd
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from .errors import GPUOutOfMemoryError
from .rewards import (
    RewardFunc,
    accepted_answers,
    answered_earlier,
    answers_match,
    is_correct,
    parse_number,
    predicted_answer,
    row_rules,
)
from .tools.syntax import syntax_for

if TYPE_CHECKING:
    from datasets import Dataset
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger("rloo_kit")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): 1 - C(n-c, k) / C(n, k), for c correct out of n samples.

    Args:
        n: samples drawn for the prompt.
        c: how many of them are correct.
        k: the number of tries; at most n (ValueError otherwise).

    Returns:
        The chance that at least one of k samples drawn without replacement from the n is correct.
    """
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}.")
    return 1.0 if n - c < k else 1.0 - comb(n - c, k) / comb(n, k)


ONE_ANSWER_MIN_ROWS = 8  # fewer held-out replies say little about a habit (validation passes ask for fewer)
ONE_ANSWER_SHARE = 0.8  # of the replies giving one answer ...
ONE_ANSWER_RIGHT = 0.6  # ... while it is the right answer for at most this share of their prompts
# rows whose answer sits elsewhere (another place; for `one_answer` another answer), at least, to tell a habit of
# one place or one answer from knowing
ONE_PLACE_AGAINST = 4
# ... on more than this share of which the replies still pick that place: the place, not the question, chooses. A
# number-choice run picked the first number on 21 of 24 held-out pairs, 7 of the 9 whose larger came second (right on
# 2 of those, 14 of the other 15); asked for 0.8 of them, the check let it pass as +0.38 learned
ONE_PLACE_KEPT = 0.5
CHANCE_DEALS = 2000  # random deals `EvalReport.chance_share` draws: its share to within about 0.01
# random deals of replies that are right on as many rows, in this share or more: their lead over chance is luck. A
# held-back four-letter multiple-choice file's step 67 gave only 'B' and 'D' whatever the row, right on 4 of 12
# validation rows (chance 3.5, as often in half the deals), and was kept over step 0: held out 0.31 -> 0.19
CHANCE_SHARE = 0.4


def ordinal(place: int) -> str:
    """'first' for 1, as `EvalReport.one_place` numbers the places of a list."""
    return {1: "first", 2: "second", 3: "third"}.get(place, f"{place}th")


@dataclass
class EvalReport:
    accuracy: float | None  # mean share of correct samples per prompt (None without an `answer` column)
    pass_at_k: dict[int, float]
    mean_reward: dict[str, float]
    mean_length: float  # completion tokens
    truncation_rate: float  # share of completions that ran to max_new_tokens without ending
    samples: int
    completions: list[dict] = field(default_factory=list, repr=False)
    tools: dict | None = None  # with tools: call_rate, and accuracy_with_call / accuracy_without_call

    def summary(self) -> dict:
        """The scalar metrics, flat, e.g. for metrics.json."""
        out = {"accuracy": self.accuracy, "mean_length": self.mean_length, "truncation_rate": self.truncation_rate}
        out.update({f"tools/{k}": v for k, v in (self.tools or {}).items()})
        out.update({f"pass@{k}": v for k, v in self.pass_at_k.items()})
        out.update({f"reward/{k}": v for k, v in self.mean_reward.items()})
        return out

    def to_dict(self) -> dict:
        return asdict(self)

    def answered_earlier(self) -> int:
        """Replies scored wrong that name the right answer in an earlier sentence (`rewards.answered_earlier`)."""
        return sum(bool(r.get("answered_earlier")) for r in self.completions)

    def one_answer(self, min_rows: int = ONE_ANSWER_MIN_ROWS) -> dict | None:
        """Where most replies give one answer whatever the prompt: while it is right for far fewer (a label task's
        model that learned a favourite label, not the task; the same number to every sum), or on most of the rows it
        is wrong for (a parity file 69% even, whose greedy replies said 'even' to 9 of 10 odd numbers). That answer,
        how many replies there are, how many give it, and for how many of their prompts it is right. None where the
        answers vary or follow the rows, or where fewer than `min_rows` replies say little about a habit. Given to
        more than half of the replies (not ONE_ANSWER_SHARE), a favourite kept on the rows it is wrong for fell on
        the base model of a label file that learns (animal or colour: 'colour' to most greedy replies)."""
        rows, counts, spelled = self._answers_given()
        if len(rows) < min_rows or not counts:
            return None
        value, _ = counts.most_common(1)[0]
        answer = spelled[value]
        # a row whose labels leave this answer out, as its question names it (*1 day before Tuesday?*), reads as no
        # label in a reply that gives it ('Tuesday.'): such replies give it all the same
        gives = [_one_value(r["predicted"]) == value if r["predicted"] is not None
                 else is_correct(r["completion"], answer) for r in rows]
        fits = [_fits(answer, r) for r in rows]
        given, right = sum(gives), sum(fits)
        against, kept = len(rows) - right, sum(g and not f for g, f in zip(gives, fits, strict=True))
        kept_against = against >= ONE_PLACE_AGAINST and kept > ONE_PLACE_KEPT * against
        if given < ONE_ANSWER_SHARE * len(rows) or not (right <= ONE_ANSWER_RIGHT * len(rows) or kept_against):
            return None
        written = next((gold for r in rows for gold in accepted_answers(r["answer"]) if answers_match(answer, gold)),
                       answer)  # as the file writes it: 'A', where the label set holds 'a'
        return {"answer": written, "replies": len(rows), "given": given, "right": right}

    def one_place(self, min_rows: int = ONE_ANSWER_MIN_ROWS) -> dict | None:
        """Where most replies to choice questions pick the choice at one place in the question's list (the first
        offered, say) whatever the row, and keep to it on the rows whose answer sits elsewhere: a number-choice run
        learned '<first number> is larger than <second>.', given to 22 of 24 held-out pairs: right on 14 of the 15
        that put the larger first, on 1 of the 9 others. The place (1 is the first offered), how many replies pick
        it, how many rows answer elsewhere and how many of those still pick it (more than ONE_PLACE_KEPT of them);
        None otherwise."""
        rows = [r for r in self.completions if r.get("choices") and r.get("predicted") is not None]
        if len(rows) < min_rows:
            return None
        picked = [choice_place([r["predicted"]], r["choices"]) for r in rows]
        place, given = Counter(picked).most_common(1)[0]
        against = [p for r, p in zip(rows, picked, strict=True)
                   if choice_place(accepted_answers(r["answer"]), r["choices"]) != place]
        kept = sum(p == place for p in against)
        if (place is None or given < ONE_ANSWER_SHARE * len(rows) or len(against) < ONE_PLACE_AGAINST
                or kept <= ONE_PLACE_KEPT * len(against)):
            return None
        return {"place": place + 1, "replies": len(rows), "given": given, "against": len(against), "kept": kept}

    def chance_right(self) -> float | None:
        """The rows these replies would be right on, dealt to the rows at random: what replies that do not read the
        row score (one answer to every row, or two in turn). A held-back weekday file's replies alternated 'Tuesday'
        and 'Sunday' whatever the day asked, right on 1 of 6 validation rows, about what such replies get by luck;
        the one answer check passes them. None without predicted answers (a task without an answer column)."""
        rows, counts, spelled = self._answers_given()
        if not rows:
            return None
        return sum(n * _right_for(spelled[value], rows) for value, n in counts.items()) / len(rows)

    def chance_share(self, deals: int = CHANCE_DEALS, seed: int = 0) -> float | None:
        """The share of `deals` seeded random deals of these replies to the rows that are right on as many rows as
        the replies are where they stand: how often luck alone does as well. `chance_right` is the mean of such
        deals; a lead over it of half a row is one that a held-back four-letter multiple-choice file's replies had
        in half the deals (4 of 12 validation rows right, chance 3.5, only 'B' and 'D' given whatever the row). None
        without predicted answers, as for `chance_right`."""
        rows = [r for r in self.completions if "predicted" in r]
        if not rows:
            return None
        match = [[_fits(reply["predicted"], row) for row in rows] for reply in rows]
        right, order, rng = sum(bool(r.get("correct")) for r in rows), list(range(len(rows))), random.Random(seed)
        as_right = 0
        for _ in range(deals):
            rng.shuffle(order)
            as_right += sum(match[reply][row] for reply, row in enumerate(order)) >= right
        return as_right / deals

    def _answers_given(self) -> tuple[list[dict], Counter, dict]:
        """The replies scored against an answer, how many of them give each answer ('7', '7.0' and '$7' are one),
        and each answer as first spelled."""
        rows = [r for r in self.completions if "predicted" in r]
        said = [r["predicted"] for r in rows if r["predicted"] is not None]
        spelled: dict = {}
        for answer in said:
            spelled.setdefault(_one_value(answer), answer)
        return rows, Counter(map(_one_value, said)), spelled

    def right_while_cut(self) -> dict | None:
        """Where most of the right replies ran to the length limit without ending: how many were right, how many of
        those were cut, and at how many tokens. A reply cut there has not ended on its answer, and one that names
        many answers can be scored right for one of them: a held-back last-letter run learned to spray letters
        ('E-D-A-N-G-E-N-...', 64 tokens) that a looser match scored right on 14 of 15 prompts. None otherwise."""
        right = [r for r in self.completions if r.get("correct")]
        cut = [r for r in right if r.get("cut")]
        if len(cut) < RIGHT_CUT_MIN or len(cut) < RIGHT_CUT_SHARE * len(right):
            return None
        return {"right": len(right), "cut": len(cut), "tokens": max(r["tokens"] for r in cut)}


def _right_for(answer: str, rows: list[dict]) -> int:
    """The rows `answer` is right for, by their accepted answers."""
    return sum(_fits(answer, r) for r in rows)


def _fits(answer: str | None, row: dict) -> bool:
    """Whether `answer` is right for `row`, by its accepted answers, as the answer rule reads it ('5 PM' for 5 and
    for '17:00'; None, a reply that gives none, never is)."""
    return answer is not None and is_correct(answer, row["answer"])


def choice_place(answers: list[str], choices: Sequence[str]) -> int | None:
    """Where the first of `choices` that one of `answers` matches sits in the list (0 is the first), or None."""
    return next((i for i, c in enumerate(choices) if any(answers_match(a, c) for a in answers)), None)


def _one_value(answer: str) -> float | str:
    number = parse_number(answer)
    return answer if number is None else number


RIGHT_CUT_MIN = 3  # right replies cut at the length limit, at least ...
RIGHT_CUT_SHARE = 0.5  # ... and at least this share of the right ones, for the run to say so

PROGRESS_SECONDS = 10  # seconds between two progress lines of a long generation


def progress_lines(label: str, seconds: float = PROGRESS_SECONDS) -> Callable[[int, int], None]:
    """A `progress` callback for `generate_ids` that logs '<label>: token t/T (s)' every `seconds`, so that
    a generation of minutes on a CPU says how far it got."""
    start = said = time.time()

    def report(token: int, total: int) -> None:
        nonlocal said
        if time.time() - said >= seconds:
            said = time.time()
            log.info(f"{label}: token {token}/{total} ({said - start:.0f} s)")

    return report


@torch.no_grad()
def generate(model, tokenizer, prompts: list, *, samples: int = 1, greedy: bool = True, max_new_tokens: int = 64,
             temperature: float = 1.0, batch_size: int = 32, progress: Callable[[int, int], None] | None = None,
             tools: Sequence = (), tool_format: str = "kit") -> tuple[list[list[str]], list[list]]:
    """Completions for each prompt (chat form or text): texts and token counts, `samples` per prompt. With
    `tools` (`rloo_kit.tools.Tool`s), each completion is finished with its tool calls as in training: the texts
    are the answers after the last tool result, and each count is (tokens, calls). `tool_format`: how the
    prompts tell the tools (`Task.tool_format`)."""
    texts, counts, _ = _generate(model, tokenizer, prompts, samples=samples, greedy=greedy,
                                 max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size,
                                 progress=progress, tools=tools, tool_format=tool_format)
    return texts, counts


def _generate(model, tokenizer, prompts: list, *, samples: int, greedy: bool, max_new_tokens: int,
              temperature: float, batch_size: int, progress: Callable[[int, int], None] | None, tools: Sequence,
              tool_format: str) -> tuple[list[list[str]], list[list], list[list[list[int]]]]:
    """`generate`'s texts and counts, and each completion's token ids as training's rewards get them
    (`completion_ids`: up to and including the end-of-sequence token; with tools, the whole rollout)."""
    settings = dict(do_sample=not greedy, max_new_tokens=max_new_tokens, temperature=temperature,
                    batch_size=batch_size)
    if tools:
        settings["template_kwargs"] = syntax_for(tool_format, tokenizer).template_kwargs(tools)
    ids = generate_ids(model, tokenizer, prompts, samples=samples, progress=progress, **settings)
    if tools:
        return _with_tools(model, tokenizer, prompts, ids, tools, settings, tool_format)
    texts = [[tokenizer.decode(r, skip_special_tokens=True) for r in group] for group in ids]
    return texts, [[len(r) for r in group] for group in ids], ids


def _with_tools(model, tokenizer, prompts: list, ids: list[list[list[int]]], tools, settings: dict,
                tool_format: str):
    """The completions `ids` finished with their tool calls: the answer texts the rewards read, each
    completion's (length, calls) and its rollout's token ids, grouped by prompt."""
    from .tools.rollout import answer_text, text_codec

    rollouts = finish_with_tools(model, tokenizer, prompts, ids, tools, tool_format=tool_format, **settings)
    decode, _ = text_codec(tokenizer)
    samples = len(ids[0]) if ids else 1
    by_prompt = [range(i, i + samples) for i in range(0, len(rollouts), samples)]
    return ([[answer_text(rollouts[j], decode) for j in js] for js in by_prompt],
            [[(len(rollouts[j].ids), rollouts[j].calls) for j in js] for js in by_prompt],
            [[list(rollouts[j].ids) for j in js] for js in by_prompt])


def finish_with_tools(model, tokenizer, prompts: list, ids: list[list[list[int]]], tools, *, max_new_tokens: int,
                      tool_format: str = "kit", **settings) -> list:
    """The completions `ids` (`generate_ids`' form, a group a prompt) finished with their tool calls as training's
    rollouts are (`tools.rollout`), each continuation sampled with `settings`: the rollouts, in prompt order.
    Evaluation and the pre-flight both finish their samples here. `tool_format`: how the prompts tell the
    tools (`Task.tool_format`)."""
    from .tools.rollout import roll_out, text_codec

    samples = len(ids[0]) if ids else 1
    flat_prompts = [p for p in prompts for _ in range(samples)]
    syntax = syntax_for(tool_format, tokenizer)
    settings = {**settings, "template_kwargs": syntax.template_kwargs(tools)}

    def more(rows: list[int], begun: list[list[int]]) -> list[list[int]]:
        return [g[0] for g in generate_ids(model, tokenizer, [flat_prompts[i] for i in rows], prefixes=begun,
                                           max_new_tokens=max_new_tokens, **settings)]

    return roll_out(more, [r for group in ids for r in group], *text_codec(tokenizer), tools,
                    max_length=max_new_tokens, syntax=syntax)


@torch.no_grad()
def generate_ids(model, tokenizer, prompts: list, *, samples: int = 1, do_sample: bool = False,
                 max_new_tokens: int = 64, temperature: float = 1.0, top_p: float = 1.0, top_k: int | None = None,
                 min_p: float | None = None, repetition_penalty: float = 1.0,
                 batch_size: int = 32, progress: Callable[[int, int], None] | None = None,
                 prefixes: list[list[int]] | None = None, template_kwargs: dict | None = None,
                 resumable: Resumable | None = None) -> list[list[list[int]]]:
    """Completion token ids, `samples` per prompt, each cut after its first end-of-sequence token
    (kept, as TRL counts it). Prompts in chat form get the model's chat template, as in training;
    sampling settings are TRL's RLOOConfig fields of the same names. `progress(token, max_new_tokens)`
    is called as decoding goes, so a long generation can say how far it got. `prefixes` (one per prompt,
    with samples=1): completions begun earlier, each continued by up to `max_new_tokens` (only the new
    tokens are returned), so that a longer look costs only the tokens it adds.
    `template_kwargs` go to the chat template (the tools, for a model's own tool-call format).
    `resumable`: an empty `Resumable`, filled with what `resume_ids` needs to go on with the rows that did not
    end (all prompts in one batch)."""
    from transformers import GenerationConfig

    if prefixes is not None and (samples != 1 or len(prefixes) != len(prompts)):
        raise ValueError("prefixes: one begun completion per prompt, with samples=1.")
    if resumable is not None and len(prompts) > batch_size:
        raise ValueError(f"resumable: {len(prompts)} prompts in batches of {batch_size}; a resumable generation "
                         "is one batch.")
    texts = [p if isinstance(p, str) else tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True,
                                                                        **(template_kwargs or {})) for p in prompts]
    rows = tokenizer(texts, add_special_tokens=False)["input_ids"]
    rows = [r + list(prefix) for r, prefix in zip(rows, prefixes, strict=True)] if prefixes is not None else rows
    eos = eos_token_ids(model, tokenizer)
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=do_sample,
                              return_dict_in_generate=resumable is not None,
                              temperature=temperature if do_sample else None, top_p=top_p if do_sample else None,
                              top_k=top_k if do_sample else None, min_p=min_p if do_sample else None,
                              repetition_penalty=repetition_penalty, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=sorted(eos), disable_compile=True)
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    out: list[list[list[int]]] = []
    try:
        for i in range(0, len(rows), batch_size):
            enc = tokenizer.pad({"input_ids": rows[i:i + batch_size]}, padding=True, return_tensors="pt")
            enc = {k: v.repeat_interleave(samples, dim=0).to(model.device) for k, v in enc.items()}
            watch = _Progress.watching(progress, enc["input_ids"].shape[1], max_new_tokens)
            with _evaluating(model), lean_generation(model):
                new = model.generate(**enc, generation_config=config, stopping_criteria=watch)
            if resumable is not None:
                resumable.keep(new, enc["attention_mask"], config)
                new = new.sequences
            new = new[:, enc["input_ids"].shape[1]:].tolist()
            out.extend([_cut(r, eos) for r in new[j:j + samples]] for j in range(0, len(new), samples))
    except torch.cuda.OutOfMemoryError as e:
        raise GPUOutOfMemoryError(f"CUDA ran out of memory generating {batch_size} prompts x {samples} samples x "
                                  f"{max_new_tokens} tokens. Lower batch_size= or samples=, or max_new_tokens.") from e
    finally:
        tokenizer.padding_side = side
    return out


@dataclass
class Resumable:
    """A one-batch generation as it stopped, to go on from (`resume_ids`): every row's tokens (prompt, padding and
    completion), the prompts' attention mask, the KV cache of all but the last token, and the sampling settings."""

    tokens: torch.Tensor | None = None
    prompt_mask: torch.Tensor | None = None
    cache: object = None
    config: object = None

    def keep(self, output, prompt_mask: torch.Tensor, config) -> None:
        self.tokens, self.prompt_mask, self.cache, self.config = (
            output.sequences, prompt_mask, output.past_key_values, config)


def resume_ids(model, tokenizer, state: Resumable, rows: list[int], *, max_new_tokens: int,
               progress: Callable[[int, int], None] | None = None) -> list[list[int]] | None:
    """Rows `rows` of `state`'s batch (each sample of each prompt, prompt-major; rows that did not end), each
    continued by up to `max_new_tokens` from the batch's KV cache: what `generate_ids` with their completions as
    `prefixes` gives, without reading prompts and completions again (on a CPU that re-read was a fifth of a
    long pre-flight). Only the new tokens are returned. The cache is used up; None where it is not a dynamic
    cache of keys and values alone (static, quantized, or with a recurrent state: one that `batch_select_indices`
    would not narrow whole), to continue from prefixes instead."""
    from .patches.cpu_step import narrowable

    cache, state.cache = state.cache, None
    if not narrowable(cache):
        return None
    index = torch.tensor(rows, dtype=torch.long, device=state.tokens.device)
    tokens = state.tokens[index]
    completed = tokens.shape[1] - state.prompt_mask.shape[1]
    mask = torch.cat([state.prompt_mask[index], state.prompt_mask.new_ones(len(rows), completed)], dim=1)
    cache.batch_select_indices(index)
    config = copy.deepcopy(state.config)
    config.max_new_tokens, config.return_dict_in_generate = max_new_tokens, False
    watch = _Progress.watching(progress, tokens.shape[1], max_new_tokens)
    eos = eos_token_ids(model, tokenizer)
    with _evaluating(model), lean_generation(model):
        new = model.generate(input_ids=tokens, attention_mask=mask, past_key_values=cache, generation_config=config,
                             stopping_criteria=watch)
    return [_cut(r, eos) for r in new[:, tokens.shape[1]:].tolist()]


@contextlib.contextmanager
def _evaluating(model) -> Iterator[None]:
    """The model in eval mode inside (no dropout while generating), its mode restored after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def lean_generation(model) -> Iterator[None]:
    """On a CPU, sampling that pays less per token and per prompt, as the training sampler (`cpu_step`) does:
    inference mode; each distinct prompt read once, however many completions it gets (transformers reads it
    once per completion); the categorical draw by inverting the cumulative distribution, which
    `torch.multinomial` makes far dearer there (one exponential per vocabulary entry, row by row); plain LoRA
    layers as one product added to the base output (`cpu_step.lean_lora`). The same draws in distribution,
    and greedy completions the same tokens. The door's patch `cpu_generation`: skipped, with a line saying so,
    where its libraries are not the tested ones. A GPU's generation (and Unsloth's) is left as it comes."""
    from .patches import allowed

    if model.device.type != "cpu" or not allowed("cpu_generation"):
        yield
        return
    from .patches.cpu_step import categorical_sampling, lean_lora, shared_prompts

    with torch.inference_mode(), categorical_sampling(), shared_prompts(model), lean_lora(model):
        yield


class _Progress(StoppingCriteria):
    """A stopping criterion that never stops: it reports each decoded token to `report(token, total)`."""

    def __init__(self, report: Callable[[int, int], None], prompt_length: int, total: int):
        self.report, self.prompt_length, self.total = report, prompt_length, total

    @classmethod
    def watching(cls, report: Callable[[int, int], None] | None, prompt_length: int,
                 total: int) -> StoppingCriteriaList:
        """The stopping criteria `generate` is given: this one where there is a `report`, else none."""
        return StoppingCriteriaList([cls(report, prompt_length, total)] if report else [])

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        self.report(input_ids.shape[1] - self.prompt_length, self.total)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def eos_token_ids(model, tokenizer) -> set[int]:
    """Every id that ends a completion: the tokenizer's and the model's generation config's."""
    configured = model.generation_config.eos_token_id
    return {tokenizer.eos_token_id, *([configured] if isinstance(configured, int) else configured or [])} - {None}


def _cut(ids: list[int], eos: set[int]) -> list[int]:
    """Tokens up to and including the first end-of-sequence; all of them when none was produced."""
    for n, t in enumerate(ids, 1):
        if t in eos:
            return ids[:n]
    return ids


def evaluate(model: PreTrainedModel | PeftModel, tokenizer: PreTrainedTokenizerBase, dataset: Dataset,
             reward_funcs: RewardFunc | list[RewardFunc] = (), *, samples: int = 1,
             greedy: bool = True, max_new_tokens: int = 64, temperature: float = 1.0,
             batch_size: int = 32, match: str = "final", progress: str | None = None,
             tools: Sequence = (), tool_format: str = "kit") -> EvalReport:
    """Generate on `dataset` (a `prompt` column; `answer` enables accuracy) and score.

    greedy=True needs samples=1 (greedy decoding gives one answer). pass@k is reported for
    k = 1, 2, 4, ... up to `samples`. match="final" counts a completion correct when its final
    answer is right; match="exact" when the reply is the answer alone (see rewards.is_correct).
    progress: a label under which to log, every few seconds, how far generation got.
    tools: `rloo_kit.tools.Tool`s the model may call, as in training (the answer after the last result is scored);
    the report then says how often it called one, and its accuracy with and without a call.

    Args:
        model: the model to generate with (a PEFT model is evaluated with its adapter on).
        tokenizer: the model's tokenizer; chat-form prompts get its chat template, as in training.
        dataset: held-out rows with a `prompt` column; an `answer` column enables accuracy and pass@k.
        reward_funcs: the training rewards to score completions with (mean per function); none by default.
        samples: completions per prompt.
        greedy: greedy decoding (needs samples=1); False samples at `temperature`.
        max_new_tokens: the completion length; a completion that reaches it without ending counts as truncated.
        temperature: the sampling temperature when greedy=False.
        batch_size: prompts generated at once; lower it on a CUDA out-of-memory.
        match: "final" or "exact", how a completion is judged correct (see rewards.is_correct).
        progress: a label for progress lines during generation; none when None.
        tools: `rloo_kit.tools.Tool`s the model may call; none by default.
        tool_format: how the prompts tell the tools: "kit" (the kit's syntax, `tools.with_tools`) or "template"
            (the model's own, `Task.tool_format`).

    Returns:
        An EvalReport: accuracy, pass@k, mean reward per function, length, truncation and every completion.
    """
    funcs = [f for f in (reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]) if callable(f)]
    if greedy and samples > 1:
        raise ValueError("greedy decoding gives one completion per prompt: use greedy=False with samples > 1.")
    prompts = list(dataset["prompt"])
    answers = list(dataset["answer"]) if "answer" in dataset.column_names else None
    texts, lengths, ids = _generate(model, tokenizer, prompts, samples=samples, greedy=greedy,
                                    max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size,
                                    progress=progress_lines(progress) if progress else None, tools=tools,
                                    tool_format=tool_format)
    calls = [[c for _, c in group] for group in lengths] if tools else None
    lengths = [[n for n, _ in group] for group in lengths] if tools else lengths
    columns = {c: [v for v in dataset[c] for _ in range(samples)] for c in dataset.column_names if c != "prompt"}
    flat_prompts = [p for p in prompts for _ in range(samples)]
    flat = [t for group in texts for t in group]
    completion_ids = [seq for group in ids for seq in group]  # as TRL gives them to a reward
    eos = eos_token_ids(model, tokenizer) if any(n >= max_new_tokens for ns in lengths for n in ns) else set()
    cut = [[n >= max_new_tokens and not (seq and seq[-1] in eos) for n, seq in zip(ns, seqs, strict=True)]
           for ns, seqs in zip(lengths, ids, strict=True)]  # ran to the limit without ending: an end there is no cut
    rewards = {getattr(f, "__name__", "reward"): f(prompts=flat_prompts, completions=flat,
                                                   completion_ids=completion_ids, **columns) for f in funcs}
    rows, correct_counts = [], []
    rules = row_rules(dataset)
    for i, (p, group) in enumerate(zip(prompts, texts, strict=True)):
        ok = [is_correct(t, answers[i], match, prompt=p, **rules[i]) for t in group] if answers else []
        correct_counts.append(sum(ok))
        for s, t in enumerate(group):
            row = {"prompt": _prompt_text(p), "completion": t, "tokens": lengths[i][s], "cut": cut[i][s]}
            if calls:
                row["tool_calls"] = calls[i][s]
            if answers:
                row.update(answer=answers[i], predicted=predicted_answer(t, match=match, prompt=p, **rules[i]),
                           correct=ok[s])
                if rules[i].get("choices"):
                    row["choices"] = list(rules[i]["choices"])  # in the question's order: see EvalReport.one_place
                if match == "final" and not ok[s] and answered_earlier(t, answers[i], prompt=p, **rules[i]):
                    row["answered_earlier"] = True  # right first, then gone on from: see rewards.answered_earlier
            row.update({name: vals[i * samples + s] for name, vals in rewards.items()})
            rows.append(row)
    n_prompts = len(prompts)
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= samples]
    all_lengths = [n for group in lengths for n in group]
    return EvalReport(
        accuracy=sum(correct_counts) / (n_prompts * samples) if answers else None,
        pass_at_k={k: sum(pass_at_k(samples, c, k) for c in correct_counts) / n_prompts for k in ks} if answers else {},
        mean_reward={name: _mean(v) for name, v in rewards.items()},
        mean_length=sum(all_lengths) / len(all_lengths),
        truncation_rate=sum(map(sum, cut)) / len(all_lengths),
        samples=samples, completions=rows, tools=_tool_figures(rows) if calls else None)


def _tool_figures(rows: list[dict]) -> dict:
    """How often the completions called a tool, and how often they were right with a call and without one."""
    called = [r for r in rows if r["tool_calls"]]
    alone = [r for r in rows if not r["tool_calls"]]
    def right(group: list[dict]) -> float | None:
        return sum(r["correct"] for r in group) / len(group) if group and "correct" in group[0] else None

    return {"call_rate": len(called) / len(rows), "accuracy_with_call": right(called),
            "accuracy_without_call": right(alone)}


def _mean(values: list) -> float:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else float("nan")


def _prompt_text(prompt) -> str:
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


def evaluate_base_and_adapter(model: PeftModel, tokenizer: PreTrainedTokenizerBase, dataset: Dataset,
                              reward_funcs: RewardFunc | list[RewardFunc] = (), progress: str | None = None,
                              **kwargs: object) -> tuple[EvalReport, EvalReport]:
    """(base, adapter) reports from one PEFT model: the base is the same weights with the adapter off.

    Args:
        model: a PEFT model; its adapter is switched off for the base and on again for the adapter.
        tokenizer: the model's tokenizer.
        dataset: held-out rows with a `prompt` column (and `answer` for accuracy).
        reward_funcs: the rewards to score completions with, as in `evaluate`.
        progress: a label under which to log how far each side's generation got ("<label>, base: token t/T").
        **kwargs: `evaluate`'s settings (samples, greedy, max_new_tokens, ...), the same for both.

    Returns:
        (base report, adapter report).
    """
    def labelled(side: str) -> str | None:
        return f"{progress}, {side}" if progress else None

    with disabled_adapter(model):
        base = evaluate(model, tokenizer, dataset, reward_funcs, progress=labelled("base"), **kwargs)
    return base, evaluate(model, tokenizer, dataset, reward_funcs, progress=labelled("adapter"), **kwargs)


@contextlib.contextmanager
def disabled_adapter(model):
    """The base model's behaviour, without loading it again."""
    if not hasattr(model, "disable_adapter"):
        raise ValueError("This model has no LoRA adapter to switch off: load one with rloo_kit.load_adapter.")
    with model.disable_adapter():
        yield model


def compare(base: EvalReport, tuned: EvalReport, names: tuple[str, str] = ("base", "adapter")) -> pd.DataFrame:
    """One row per metric: base, adapter, and the difference.

    Args:
        base: the report before training (or of the base model).
        tuned: the report after training (or with the adapter).
        names: the column names for the two reports.

    Returns:
        A DataFrame indexed by metric, with the two reports' values and tuned minus base; metrics either report
        lacks are left out.
    """
    a, b = base.summary(), tuned.summary()
    keys = [k for k in a if k in b and a[k] is not None and b[k] is not None]
    return pd.DataFrame({names[0]: [a[k] for k in keys], names[1]: [b[k] for k in keys],
                         "difference": [b[k] - a[k] for k in keys]}, index=pd.Index(keys, name="metric"))


@dataclass(frozen=True)
class PairedChange:
    """Base and adapter on the same held-out prompts, prompt by prompt: a difference of a prompt or two is
    what luck alone gives on a few dozen prompts, and the accuracy difference alone does not say so."""

    better: int  # prompts the adapter gets right more often than the base
    worse: int  # and less often
    prompts: int
    p_value: float  # exact two-sided sign test over the prompts that changed (McNemar's, for one sample each)
    # of the better ones, those whose base replies, each wrong, named the right answer in an earlier sentence: there
    # the adapter learned to end on the answer (`rewards.answered_earlier`), not to know it
    answered_before: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        verdict = "more than luck" if self.p_value < 0.05 else "luck alone often does as much"
        earlier = (f"; {self.answered_before} of the {self.better} better had the right answer before too, in an "
                   "earlier sentence, and now end on it (a reply is scored on its last sentence)"
                   if self.answered_before else "")
        return (f"{self.better} prompt(s) better, {self.worse} worse, of {self.prompts} "
                f"(sign test p = {self.p_value:.2g}: {verdict}){earlier}")


def paired_change(base: EvalReport, tuned: EvalReport) -> PairedChange | None:
    """Which prompts the adapter answers right more (or less) often than the base; None without answers.
    Both reports must come from the same prompts with the same number of samples.

    Args:
        base: the base model's report.
        tuned: the adapter's report, on the same prompts with the same number of samples (ValueError otherwise).

    Returns:
        The prompts better and worse, and the sign test's p-value; None when either report has no accuracy.
    """
    if base.accuracy is None or tuned.accuracy is None:
        return None
    k = base.samples
    prompts = [[r["prompt"] for r in report.completions[::k]] for report in (base, tuned)]
    if not prompts[0] or prompts[0] != prompts[1] or tuned.samples != k:
        raise ValueError("paired_change needs two evaluations of the same prompts with the same number of samples.")
    right = [[sum(r["correct"] for r in rows[i:i + k]) for i in range(0, len(rows), k)]
             for rows in (base.completions, tuned.completions)]
    better = sum(b > a for a, b in zip(*right, strict=True))
    worse = sum(b < a for a, b in zip(*right, strict=True))
    earlier = [all(r.get("answered_earlier") for r in base.completions[i:i + k])
               for i in range(0, len(base.completions), k)]
    before = sum(b > a and e for a, b, e in zip(*right, earlier, strict=True))
    return PairedChange(better, worse, len(right[0]), sign_test(better, worse), answered_before=before)


def sign_test(better: int, worse: int) -> float:
    """The exact two-sided sign test's p-value: how often luck alone (each change a coin flip) gives a split of
    the changed pairs at least this uneven."""
    n = better + worse
    return min(1.0, 2 * sum(comb(n, i) for i in range(min(better, worse) + 1)) / 2**n) if n else 1.0


def greedy_beside_sampled(greedy: tuple[EvalReport, EvalReport], sampled: tuple[EvalReport, EvalReport],
                          temperature: float) -> pd.DataFrame:
    """Accuracy of the greedy answer (what a user sees) beside that of samples at the training temperature
    (what RLOO learns from), for the base and the adapter: a gap between them is the sampling noise the
    pre-flight fits the temperature against."""
    return pd.DataFrame({"greedy": [r.accuracy for r in greedy],
                         f"sampled at temperature {temperature:g}": [r.accuracy for r in sampled]},
                        index=pd.Index(["base", "adapter"], name="accuracy"))


def sample_table(base: EvalReport, tuned: EvalReport, n: int = 10) -> pd.DataFrame:
    """Side-by-side completions for the first n prompts."""
    rows = []
    for x, y in list(zip(base.completions, tuned.completions, strict=True))[:n]:
        rows.append({"prompt": x["prompt"], "answer": x.get("answer"), "base": x["completion"],
                     "adapter": y["completion"], "base ok": x.get("correct"), "adapter ok": y.get("correct")})
    return pd.DataFrame(rows)
