"""A task: its data, its rewards, how its answers are matched and how long they may be, and its
evaluation, so that notebooks, the CLI and the benchmarks train and measure the same thing.

`load_task("arithmetic" | "gsm8k" | "file", ...)` builds one; `plan_run` resolves "auto" for the
model, the task and the preset from the hardware, for the notebooks and the CLI alike.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter
from dataclasses import dataclass

from datasets import Dataset

from .choices import TASKS
from .data import (
    N_TEST,
    arithmetic_task,
    has_system_prompt,
    load_gsm8k,
    load_local,
    normalize_label,
    products_task,
    with_system_prompt,
)
from .errors import DataError
from .evaluation import EvalReport, choice_place, evaluate, evaluate_base_and_adapter
from .hardware import Hardware, detect_hardware
from .presets import Preset, resolve_preset
from .rewards import RewardFunc, accepted_answers, brevity, correct_answer, offers_numbers
from .sources import DEFAULT_MODEL, GPU_DEFAULT_MODEL
from .tools.syntax import KIT, template_kwargs

log = logging.getLogger("rloo_kit")
DEFAULT_EVAL_LENGTH = 256  # tokens, for a task evaluated before any preset fixed its length
PRODUCTS_LENGTH = 48  # a calculator call, its result and a short answer
LABELS_SHOWN = 8  # labels named before a run; a longer set is counted


@dataclass(frozen=True)
class Task:
    """Train and test splits (a `prompt` column, `answer` where there is one), the rewards with their
    weights, how evaluation counts an answer correct ("final" or "exact", see rewards.is_correct), the
    completion length that training and evaluation share (None: the preset's, or the pre-flight's for a
    file task), and the sampling temperature of training (None: the preset's, or the one the pre-flight
    fits where the preset's gives noise)."""

    name: str
    train: Dataset
    test: Dataset
    reward_funcs: tuple[RewardFunc, ...]
    reward_weights: tuple[float, ...] | None = None
    match: str = "final"
    max_completion_length: int | None = None
    temperature: float | None = None
    validation: Dataset | None = None  # rows carved from train to choose the best step (`carve_validation`)
    tools: tuple = ()  # `rloo_kit.tools.Tool`s the model may call in training and evaluation (`tools.with_tools`)
    tool_format: str = KIT.name  # how the prompts tell the tools: the kit's syntax, or "template", the model's own

    def replace(self, **changes) -> Task:
        """A copy with some fields changed, e.g. task.replace(max_completion_length=48)."""
        return dataclasses.replace(self, **changes)

    def for_preset(self, preset: str | Preset) -> Task:
        """This task with its completion length fixed: its own, or else the preset's."""
        if self.max_completion_length is not None:
            return self
        return self.replace(max_completion_length=resolve_preset(preset).max_completion_length)

    def with_reward(self, fn: RewardFunc, weight: float) -> Task:
        """This task with one more reward function (weights default to 1.0 for the existing ones)."""
        weights = self.reward_weights or (1.0,) * len(self.reward_funcs)
        return self.replace(reward_funcs=(*self.reward_funcs, fn), reward_weights=(*weights, weight))

    def carve_validation(self, seed: int = 0) -> Task:
        """This task with `budget.validation_rows` of its training rows set apart as `validation` (and no training
        row left that repeats one): a run that keeps its best step (a time budget, or keep_best) measures them to
        choose it, and the test split stays for the end. Once only."""
        from .budget import validation_rows

        if self.validation is not None:
            return self
        if not self.has_answers():
            raise DataError(f"Task '{self.name}' cannot set validation rows apart from its {len(self.train)} training "
                            "rows with answers: a run that keeps its best step (--minutes, --keep best) chooses it by "
                            "their accuracy. Give --max-steps with --keep last instead, or more rows.")
        train, validation = _split(self.train, validation_rows(len(self.train)), seed, f"{self.name}'s training rows")
        return self.replace(train=train, validation=validation)

    def with_system_prompt(self, system_prompt: str) -> Task:
        """This task with `system_prompt` before every prompt of every split that has no system message of its own:
        the training rows and the held-out ones alike, so that accuracy before and after training is measured on the
        prompts that are trained."""
        def told(rows: Dataset | None) -> Dataset | None:
            if rows is None:
                return None
            return rows.map(lambda r: {"prompt": with_system_prompt(r["prompt"], system_prompt)})

        return self.replace(train=told(self.train), test=told(self.test), validation=told(self.validation))

    def system_prompts(self) -> set[str]:
        """The system messages its training prompts carry (the file's, --system-prompt's, or the pre-flight's)."""
        return {p[0]["content"] for p in self.train["prompt"] if has_system_prompt(p)}

    def has_answers(self) -> bool:
        """Whether validation rows can be set apart to choose a run's best step: two training rows with answers."""
        return len(self.train) >= 2 and "answer" in self.train.column_names

    def answer_kind(self) -> str | None:
        """How its answers are told apart, where the data decided it (data.load_local): a label set, a choice among
        each prompt's numbers, or among the things it lists ('X or Y'); None for plain answers. Said before a run,
        as it changes what counts as right."""
        if not len(self.train):
            return None
        if "choices" in self.train.column_names:
            offered = ("each prompt's numbers" if offers_numbers(self.train[0]["choices"])
                       else "the things each prompt lists ('X or Y')")
            return f"a choice among {offered}: the one a reply picks is scored; listing them picks none"
        if "labels" not in self.train.column_names:
            return None
        labels = sorted(set().union(*self.train["labels"]))  # a row's own leaves out the labels its question names
        written: dict[str, str] = {}  # each label as the file most often writes it ('A', not 'a')
        for answer, _ in Counter(a for a in self.train["answer"] if isinstance(a, str)).most_common():
            written.setdefault(normalize_label(answer), answer)
        shown = ", ".join(written.get(lab, lab) for lab in labels[:LABELS_SHOWN])
        if (more := len(labels) - LABELS_SHOWN) > 0:
            shown += f" and {more} more"
        return f"labels {shown}: a reply that names two is wrong"

    def without_long_prompts(self, tokenizer, max_tokens: int) -> tuple[Task, int]:
        """This task less the rows whose prompt, in the chat template, runs past `max_tokens` (TRL would
        cut them from the left, dropping the question's start in silence), and how many went."""
        rendered = self.trainer_overrides().get("chat_template_kwargs", {})  # a template's tools count too

        def fits(rows: Dataset) -> list[int]:
            texts = [p if isinstance(p, str) else tokenizer.apply_chat_template(p, tokenize=False,
                                                                                 add_generation_prompt=True, **rendered)
                     for p in rows["prompt"]]
            lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
            return [i for i, n in enumerate(lengths) if n <= max_tokens]

        keep_train, keep_test = fits(self.train), fits(self.test)
        dropped = len(self.train) - len(keep_train) + len(self.test) - len(keep_test)
        if not keep_train or not keep_test:
            raise DataError(f"Every {'training' if not keep_train else 'held-out'} prompt of task '{self.name}' is "
                            f"longer than {max_tokens} tokens, the room a prompt has in this preset's sequences. "
                            "Shorten the prompts, or choose a preset with longer sequences (rloo-kit presets).")
        return self.replace(train=self.train.select(keep_train), test=self.test.select(keep_test)), dropped

    def trainer_overrides(self) -> dict:
        """The RLOOConfig fields this task decides: reward weights, completion length, temperature, and the tools
        for a chat template that renders them (a task told in the model's own tool-call format)."""
        out = {}
        if self.tools and self.tool_format != KIT.name:
            out["chat_template_kwargs"] = template_kwargs(self.tools)
        if self.reward_weights is not None:
            out["reward_weights"] = list(self.reward_weights)
        if self.max_completion_length is not None:
            out["max_completion_length"] = self.max_completion_length
        if self.temperature is not None:
            out["temperature"] = self.temperature
        return out

    def evaluate(self, model, tokenizer, dataset: Dataset | None = None, **kwargs) -> EvalReport:
        """`evaluation.evaluate` on the test split (or `dataset`), with this task's rewards, matching
        and completion length. kwargs: samples, greedy, temperature, batch_size."""
        task = self._in_model_format(tokenizer, dataset)
        return evaluate(model, tokenizer, task.test, list(self.reward_funcs), **task._eval_settings(kwargs))

    def evaluate_base_and_adapter(self, model, tokenizer, dataset: Dataset | None = None,
                                  **kwargs) -> tuple[EvalReport, EvalReport]:
        """(base, adapter) reports on the test split from one PEFT model (the base is the adapter off)."""
        task = self._in_model_format(tokenizer, dataset)
        return evaluate_base_and_adapter(model, tokenizer, task.test, list(self.reward_funcs),
                                         **task._eval_settings(kwargs))

    def _eval_settings(self, kwargs: dict) -> dict:
        return {"match": self.match, "max_new_tokens": self.max_completion_length or DEFAULT_EVAL_LENGTH,
                "tools": self.tools, "tool_format": self.tool_format, **kwargs}

    def _in_model_format(self, tokenizer, dataset: Dataset | None = None) -> Task:
        """This task, `dataset` (when given) as its test split, with its tools told as this model takes them."""
        from .tools import in_model_format

        return in_model_format(self if dataset is None else self.replace(test=dataset), tokenizer)


def load_task(name: str = "arithmetic", *, path: str | None = None, n_train: int = 2000, n_test: int | None = None,
              seed: int = 0, template: str | None = None, prompt_column: str = "prompt",
              answer_column: str = "answer", system_prompt: str | None = None, encoding: str = "utf-8") -> Task:
    """arithmetic: 'Add a and b.' over 0..12 (a held-out sum's commuted twin is held out too), rewarded
    for a right final number (1.0) and brevity (0.2), 16-token answers; accuracy counts the final number.
    SmolLM2-135M knows these sums but mostly talks about the numbers instead of answering: that behaviour
    is what a few minutes of RLOO on a CPU change. `template` rewords the question (see data.arithmetic_task).
    products: 'What is 127 * 48?' beside 'What is 12 + 7?' (data.products_task), rewarded for a right final
    number, 48-token answers: a task for a calculator (notebook 05, `--tools calculator`).
    gsm8k: grade-school word problems (hub, or a local jsonl/parquet as `path`), rewarded and scored
    on the final '#### N' answer.
    file: a local jsonl/json/csv/tsv/parquet with a prompt column and an answer column (names settable);
    answers may be numbers or text, or a list of accepted answers, matched as rewards.is_correct says;
    prompts may be conversations, and `system_prompt` is put before every prompt without one of its own.
    Its completion length is left to the preset, or to the pre-flight (`preflight.fit_task`).
    n_test: the held-out rows for accuracy before/after; by default 50, or a fifth of a smaller file's
    rows (`default_n_test`), so that a small file still leaves most of its rows to train on.

    Args:
        name: "arithmetic", "products", "gsm8k" or "file".
        path: the data file: required for "file"; for "gsm8k", a local copy in place of the hub's.
        n_train: training rows of the generated tasks (at most 400 for products); gsm8k and file train on every row
            not held out.
        n_test: held-out rows; the default above when None.
        seed: the generated questions, or the train/test split of gsm8k and file.
        template: arithmetic only: the question's wording with {a}, {op} and {b}.
        prompt_column: file only: the column that holds each prompt.
        answer_column: file only: the column that holds each answer.
        system_prompt: for file, a system message put before prompts that have none; for gsm8k, in place of its
            default one; unused by the generated tasks.
        encoding: file only: the text encoding of a jsonl, json, csv or tsv file.

    Returns:
        The Task: train and test splits, reward functions and weights, answer matching and completion length.
    """
    if name == "arithmetic":
        ds = arithmetic_task(n_train=n_train, n_test=N_TEST if n_test is None else n_test, seed=seed, template=template)
        return Task(name, ds["train"], ds["test"], (correct_answer, brevity()), (1.0, 0.2), "final", 16)
    if name == "products":
        ds = products_task(n_train=min(n_train, 400), n_test=N_TEST if n_test is None else n_test, seed=seed)
        return Task(name, ds["train"], ds["test"], (correct_answer,), None, "final", PRODUCTS_LENGTH)
    if name == "gsm8k":
        data = load_gsm8k(path or "openai/gsm8k", **({"system_prompt": system_prompt} if system_prompt else {}))
    elif name == "file":
        if not path:
            raise DataError("The 'file' task needs a path: a local .jsonl/.json/.csv/.tsv/.parquet file with a prompt "
                            "column and an answer column (--path FILE on the command line).")
        data = load_local(path, prompt_column=prompt_column, answer_column=answer_column, system_prompt=system_prompt,
                          encoding=encoding)
    else:
        raise DataError(f"Unknown task '{name}'. Choose one of: {', '.join(TASKS)}.")
    n_test = default_n_test(len(data)) if n_test is None else n_test
    return Task(name, *_split(data, n_test, seed, path or name), (correct_answer,))


def default_n_test(rows: int) -> int:
    """Held-out rows for a dataset of `rows`: N_TEST, or a fifth of a dataset too small to spare them."""
    return min(N_TEST, max(1, rows // 5))


def _split(data: Dataset, n_test: int, seed: int, source: str) -> tuple[Dataset, Dataset]:
    """Train and held-out test rows, with no training row that repeats a held-out prompt (whitespace and
    case aside): a duplicate would let accuracy after training measure recall. A label task's rows are held out
    label by label, a choice task's by the place its answer is offered at (`_stratified`). Refuses a file too
    small to hold out n_test and still train."""
    if len(data) < 2 or n_test >= len(data):
        raise DataError(f"'{source}' has {len(data)} row(s): too few to hold out {n_test} for testing and still "
                        f"train. Add rows, or lower the held-out count (n_test / --n-test), e.g. to "
                        f"{max(1, len(data) // 5)}.")
    if (strata := _strata(data)) is not None:
        train, test = _stratified(data, strata, n_test, seed)
    else:
        split = data.train_test_split(test_size=n_test, seed=seed)
        train, test = split["train"], split["test"]
    held_out = {_prompt_key(p) for p in test["prompt"]}
    keep = [i for i, p in enumerate(train["prompt"]) if _prompt_key(p) not in held_out]
    if not keep:
        raise DataError(f"Every training row of '{source}' repeats a held-out prompt: the file holds too few "
                        "distinct prompts. Add rows, or lower --n-test.")
    if len(keep) < len(train):
        log.info(f"{len(train) - len(keep)} training row(s) of '{source}' repeat a held-out prompt and were "
                 "dropped, so that accuracy after training measures prompts the model was not trained on.")
    return train.select(keep), test


def _strata(data: Dataset) -> list[str] | None:
    """What a split holds in its share, row by row: a label task's label; a choice task's place its answer is
    offered at (the first, the second, ...; "" where no choice is the answer); None for other tasks.

    Drawn at random from all rows, a true-or-false file's 16 held-out rows were 12 'false' (of 40 in 80): the base
    model, 'False.' to nearly every row, scored 0.56 there, and a run whose kept step said 'True.' to most rows scored
    0.25 while its validation rows, 6 of each, went 0.42 -> 0.75. A habit of one place does the same to a choice
    file: a larger-number file offers the larger first in 63 of its 120 rows, and seeds drew it first in 15 of 24
    held-out rows and in 6 of 19 validation rows, so that replies picking the first number whatever the pair scored
    0.62 held out and 0.32 on validation. A change of favourite label or place then reads as learning, or as loss."""
    if "labels" in data.column_names:
        return [normalize_label(str(answer)) for answer in data["answer"]]
    if "choices" in data.column_names:
        places = (choice_place(accepted_answers(answer), choices or [])
                  for answer, choices in zip(data["answer"], data["choices"], strict=True))
        return ["" if place is None else str(place) for place in places]
    return None


def _stratified(data: Dataset, strata: list[str], n_test: int, seed: int) -> tuple[Dataset, Dataset]:
    """Train and test rows with each stratum (`_strata`) held out in its share of the rows (the largest remainders
    rounded up), drawn at random within it."""
    rng = random.Random(seed)
    rows_of: dict[str, list[int]] = {}
    for i, stratum in enumerate(strata):
        rows_of.setdefault(stratum, []).append(i)
    share = {stratum: n_test * len(rows) / len(data) for stratum, rows in rows_of.items()}
    count = {stratum: int(s) for stratum, s in share.items()}
    by_remainder = sorted(share, key=lambda stratum: (count[stratum] - share[stratum], stratum))
    for stratum in by_remainder[:n_test - sum(count.values())]:
        count[stratum] += 1
    test = []
    for stratum in sorted(rows_of):
        rows = rows_of[stratum][:]
        rng.shuffle(rows)
        test += rows[:count[stratum]]
    held = set(test)
    train = [i for i in range(len(data)) if i not in held]
    rng.shuffle(train)
    rng.shuffle(test)
    return data.select(train), data.select(test)


def _prompt_key(prompt) -> str:
    text = prompt if isinstance(prompt, str) else "\n".join(f"{m['role']}: {m['content']}" for m in prompt)
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class RunPlan:
    """What a run will use once every "auto" is resolved."""

    model: str
    task: str
    preset: Preset
    hardware: Hardware


def plan_run(model: str = "auto", task: str = "auto", preset: str | Preset = "auto",
             hardware: Hardware | None = None) -> RunPlan:
    """Resolve "auto": on a GPU a real 0.5B model on GSM8K, on a CPU the embedded SmolLM2-135M on
    arithmetic; the preset is this hardware's pick for that model. Anything named is kept.

    Args:
        model: a model name, path or alias; "auto" (or empty): the default for this hardware.
        task: a task name (`TASKS`); "auto" (or empty): gsm8k on a GPU, arithmetic on a CPU.
        preset: a preset's name or a Preset; "auto": this hardware's pick.
        hardware: the machine to plan for; detected when None.

    Returns:
        A RunPlan: the model, task, preset and hardware, every "auto" resolved.
    """
    hw = hardware or detect_hardware()
    auto_model, auto_task = (GPU_DEFAULT_MODEL, "gsm8k") if hw.is_cuda else (DEFAULT_MODEL, "arithmetic")
    model = auto_model if model in ("auto", "", None) else model
    task = auto_task if task in ("auto", "", None) else task
    if task not in TASKS:
        raise DataError(f"Unknown task '{task}'. Choose one of: auto, {', '.join(TASKS)}.")
    return RunPlan(model, task, resolve_preset(preset, hw), hw)
