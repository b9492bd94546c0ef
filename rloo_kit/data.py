"""Tasks as `datasets.Dataset`s with a chat-form `prompt` column plus the columns rewards read.

- `arithmetic_task`: generated from a seed, no download; train and test share no question.
- `load_gsm8k`: the hub id or a local jsonl/parquet; `answer` is the gold final number.
- `load_local`: any local file, with a column mapping.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path

from datasets import Dataset, DatasetDict, load_dataset

from .errors import DataError

# How each operator is asked. Plain instructions, not "a+b=": a small model has to learn to answer
# them with the sum rather than talk about the numbers, which is what RLOO teaches it on a CPU.
ARITHMETIC_WORDING = {"+": "Add {a} and {b}.", "-": "Subtract {b} from {a}.", "*": "Multiply {a} by {b}."}
GSM8K_SYSTEM_PROMPT = ("Solve the problem step by step, then give the final answer on its own line as "
                       "'#### <number>'.")
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def chat_prompt(question: str, system_prompt: str | None = None) -> list[dict]:
    """A prompt in the chat form TRL applies the model's template to."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": question}]


N_TEST = 50  # held-out prompts: enough to tell 0.7 from 0.9 (a standard error of ~0.06)


def arithmetic_task(*, n_train: int = 2000, n_test: int = N_TEST, max_operand: int = 9,
                    ops: Sequence[str] = ("+",), seed: int = 0, system_prompt: str | None = None,
                    template: str | None = None) -> DatasetDict:
    """Questions such as 'Add 3 and 4.' over operands 0..max_operand (ARITHMETIC_WORDING per
    operator, or `template` with {a}, {op} and {b}). The test questions are held out:
    no (a, op, b) of the test split appears in train. Train rows are drawn with replacement from
    the rest, so n_train may exceed the number of distinct questions."""
    bad = [op for op in ops if op not in _OPS]
    if bad:
        raise DataError(f"Unknown operator(s) {bad}; use any of {list(_OPS)}.")
    questions = [(a, op, b) for a in range(max_operand + 1) for op in ops for b in range(max_operand + 1)]
    rng = random.Random(seed)
    rng.shuffle(questions)
    if n_test >= len(questions):
        raise DataError(f"n_test={n_test} leaves no training question out of {len(questions)}; raise "
                        "max_operand or add operators.")
    test, pool = questions[:n_test], questions[n_test:]

    def rows(items: Iterable[tuple[int, str, int]]) -> dict:
        items = list(items)
        return {"prompt": [chat_prompt((template or ARITHMETIC_WORDING[op]).format(a=a, op=op, b=b), system_prompt)
                           for a, op, b in items],
                "answer": [str(_OPS[op](a, b)) for a, op, b in items]}

    return DatasetDict(train=Dataset.from_dict(rows(rng.choice(pool) for _ in range(n_train))),
                       test=Dataset.from_dict(rows(test)))


def gold_answer(solution: str) -> str:
    """GSM8K's final answer: the text after '####', commas and spaces removed ('1,234' -> '1234')."""
    if "####" not in solution:
        raise DataError("A GSM8K solution has no '#### <answer>' line: is this the 'answer' column?")
    return solution.rsplit("####", 1)[1].strip().replace(",", "").replace(" ", "")


def load_gsm8k(path_or_id: str = "openai/gsm8k", split: str = "train", *,
               system_prompt: str | None = GSM8K_SYSTEM_PROMPT, limit: int | None = None) -> Dataset:
    """GSM8K from the hub (config 'main') or a local .jsonl/.json/.parquet, as prompt + answer."""
    raw = _read(path_or_id, split, hub_config="main")
    missing = {"question", "answer"} - set(raw.column_names)
    if missing:
        raise DataError(f"'{path_or_id}' lacks GSM8K's column(s) {sorted(missing)}; it has {raw.column_names}.")
    if limit:
        raw = raw.select(range(min(limit, len(raw))))
    return raw.map(lambda r: {"prompt": chat_prompt(r["question"], system_prompt), "answer": gold_answer(r["answer"]),
                              "solution": r["answer"]}, remove_columns=raw.column_names)


def load_local(path: str, *, prompt_column: str = "prompt", answer_column: str | None = None,
               system_prompt: str | None = None, split: str = "train") -> Dataset:
    """Any local jsonl/json/csv/parquet. `prompt_column` (text or chat messages) becomes `prompt`;
    `answer_column`, if given, becomes `answer`: a string, or a list of accepted strings. Other
    columns are kept for rewards to read."""
    raw = _read(path, split)
    if len(raw) == 0:
        raise DataError(f"'{path}' has no rows. Each line (row) needs a '{prompt_column}' and, for accuracy and "
                        f"the answer reward, an '{answer_column or 'answer'}'.")
    for col in filter(None, (prompt_column, answer_column)):
        if col not in raw.column_names:
            raise DataError(f"'{path}' has no column '{col}'. Its columns: {raw.column_names}. Map yours with "
                            "prompt_column=/answer_column= (--prompt-column/--answer-column on the command line).")

    def convert(r: dict) -> dict:
        p = r[prompt_column]
        out = {"prompt": chat_prompt(p, system_prompt) if isinstance(p, str) else p}
        if answer_column:
            a = r[answer_column]
            out["answer"] = [str(x) for x in a] if isinstance(a, (list, tuple)) else str(a)
        return out

    drop = [c for c in (prompt_column, answer_column) if c and c not in ("prompt", "answer")]
    return raw.map(convert, remove_columns=drop)


def _read(path_or_id: str, split: str, hub_config: str | None = None) -> Dataset:
    path = Path(path_or_id).expanduser()
    if path.exists():
        kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(path.suffix)
        if kind is None:
            raise DataError(f"Cannot read '{path}': use a .jsonl, .json, .csv or .parquet file.")
        if path.stat().st_size == 0:
            raise DataError(f"'{path}' is empty. Each line (row) needs a prompt and an answer, e.g. "
                            '{"prompt": "What is the opposite of hot?", "answer": "cold"}.')
        try:
            return load_dataset(kind, data_files=str(path), split="train")
        except Exception as e:  # datasets raises several types for a malformed file
            raise DataError(f"Cannot read '{path}' as {kind} ({type(e).__name__}: {str(e)[:300]}). Check that "
                            "every row has the same columns, with the same kind of value in each.") from e
    try:
        return load_dataset(path_or_id, hub_config, split=split)
    except Exception as e:  # datasets raises several types for "not found" and "offline"
        raise DataError(f"Cannot load '{path_or_id}' ({type(e).__name__}: {str(e)[:200]}). It is not a local "
                        "file; if it is a hub id, the hub may be unreachable: download the data and pass the "
                        "file path instead.") from e


def validate_dataset(dataset: Dataset, required_columns: Iterable[str] = (), *, name: str = "train_dataset") -> None:
    """Raise DataError unless the dataset has rows, a `prompt` column and every column the rewards read."""
    if dataset is None or len(dataset) == 0:
        raise DataError(f"{name} is empty: give it at least one row with a 'prompt'.")
    cols = set(dataset.column_names)
    if "prompt" not in cols:
        raise DataError(f"{name} has no 'prompt' column (it has {sorted(cols)}). Rename your question column, "
                        "e.g. dataset.rename_column('question', 'prompt'), or use rloo_kit.data.load_local(..., "
                        "prompt_column='question').")
    missing = sorted(set(required_columns) - cols)
    if missing:
        raise DataError(f"A reward function reads column(s) {missing} that {name} lacks (it has {sorted(cols)}). "
                        "Add them to the dataset or pick rewards that do not need them.")
