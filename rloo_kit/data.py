"""Tasks as `datasets.Dataset`s with a chat-form `prompt` column plus the columns rewards read.

- `arithmetic_task`: generated from a seed, no download; train and test share no question.
- `load_gsm8k`: the hub id or a local jsonl/parquet; `answer` is the gold final number.
- `load_local`: any local file, with a column mapping.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from datasets import Dataset, DatasetDict, load_dataset

from .errors import DataError
from .hardware import hub_reachable
from .rewards import NUMBER, mentions, normalize_text, parse_number

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


def has_system_prompt(prompt) -> bool:
    """Whether a prompt carries a system message of its own (a text prompt carries none)."""
    return isinstance(prompt, list) and bool(prompt) and prompt[0].get("role") == "system"


def with_system_prompt(prompt, system_prompt: str):
    """A prompt with `system_prompt` put before it, where it has no system message of its own (which is kept)."""
    if isinstance(prompt, str):
        return chat_prompt(prompt, system_prompt)
    return prompt if has_system_prompt(prompt) else [{"role": "system", "content": system_prompt}, *prompt]


N_TEST = 50  # held-out prompts: enough to tell 0.7 from 0.9 (a standard error of ~0.06)
ARITHMETIC_MAX_OPERAND = 12  # 0..12: 91 sums up to commuting, so that 50 held out with their twins leave 41 to train


def arithmetic_task(*, n_train: int = 2000, n_test: int = N_TEST, max_operand: int = ARITHMETIC_MAX_OPERAND,
                    ops: Sequence[str] = ("+",), seed: int = 0, system_prompt: str | None = None,
                    template: str | None = None) -> DatasetDict:
    """Questions such as 'Add 3 and 4.' over operands 0..max_operand (ARITHMETIC_WORDING per
    operator, or `template` with {a}, {op} and {b}). The test questions are held out together with their
    commuted twins: for + and *, neither 'Add 3 and 4.' nor 'Add 4 and 3.' is in train when either is in
    test, so held-out accuracy measures sums the model was not trained on. Train rows are drawn with
    replacement from the rest, so n_train may exceed the number of distinct questions.

    Args:
        n_train: training rows, drawn with replacement from the questions not held out.
        n_test: held-out questions (each with its commuted twin); must leave some question to train on.
        max_operand: the largest operand; operands run 0..max_operand.
        ops: the operators to ask about, any of "+", "-" and "*".
        seed: the shuffle that picks the held-out questions and the draw of training rows.
        system_prompt: a system message put before every question; none when None.
        template: the question's wording with {a}, {op} and {b}; ARITHMETIC_WORDING's per operator when None.

    Returns:
        A DatasetDict with `train` and `test` splits, each with `prompt` (chat form) and `answer` columns.
    """
    bad = [op for op in ops if op not in _OPS]
    if bad:
        raise DataError(f"Unknown operator(s) {bad}; use any of {list(_OPS)}.")
    twins: dict[tuple, list[tuple[int, str, int]]] = {}
    for a in range(max_operand + 1):
        for op in ops:
            for b in range(max_operand + 1):
                twins.setdefault(_question_key(a, op, b), []).append((a, op, b))
    keys = list(twins)
    rng = random.Random(seed)
    rng.shuffle(keys)
    if n_test >= len(keys):
        raise DataError(f"n_test={n_test} leaves no training question out of {len(keys)} (commuted twins count as "
                        "one); raise max_operand or add operators.")
    test = [rng.choice(twins[key]) for key in keys[:n_test]]
    pool = [q for key in keys[n_test:] for q in twins[key]]

    def rows(items: Iterable[tuple[int, str, int]]) -> dict:
        items = list(items)
        return {"prompt": [chat_prompt((template or ARITHMETIC_WORDING[op]).format(a=a, op=op, b=b), system_prompt)
                           for a, op, b in items],
                "answer": [str(_OPS[op](a, b)) for a, op, b in items]}

    return DatasetDict(train=Dataset.from_dict(rows(rng.choice(pool) for _ in range(n_train))),
                       test=Dataset.from_dict(rows(test)))


def products_task(*, n_train: int = 400, n_test: int = N_TEST, seed: int = 0) -> DatasetDict:
    """'What is 127 * 48?' (three digits by two, which a small model cannot multiply in its head) beside 'What is
    12 + 7?' (sums it can), half and half: the task notebook 05 gives a calculator. Held-out questions (and their
    commuted twins) never appear in training."""
    rng = random.Random(seed)

    def question(i: int) -> tuple[int, str, int]:
        return (rng.randint(100, 999), "*", rng.randint(10, 99)) if i % 2 == 0 else (rng.randint(1, 20), "+",
                                                                                    rng.randint(1, 20))

    def rows(items: list[tuple[int, str, int]]) -> dict:
        return {"prompt": [chat_prompt(f"What is {a} {op} {b}?") for a, op, b in items],
                "answer": [str(_OPS[op](a, b)) for a, op, b in items]}

    test = list(dict.fromkeys(question(i) for i in range(n_test)))
    held = {_question_key(*q) for q in test}
    train: list[tuple[int, str, int]] = []
    while len(train) < n_train:
        q = question(len(train))
        if _question_key(*q) not in held:
            train.append(q)
    return DatasetDict(train=Dataset.from_dict(rows(train)), test=Dataset.from_dict(rows(test)))


def _question_key(a: int, op: str, b: int) -> tuple:
    """One key for a question and its commuted twin (3 + 4 and 4 + 3), which a model answers alike."""
    return (min(a, b), op, max(a, b)) if op in ("+", "*") else (a, op, b)


def gold_answer(solution: str) -> str:
    """GSM8K's final answer: the text after '####', commas and spaces removed ('1,234' -> '1234')."""
    if "####" not in solution:
        raise DataError("A GSM8K solution has no '#### <answer>' line: is this the 'answer' column?")
    return solution.rsplit("####", 1)[1].strip().replace(",", "").replace(" ", "")


def load_gsm8k(path_or_id: str = "openai/gsm8k", split: str = "train", *,
               system_prompt: str | None = GSM8K_SYSTEM_PROMPT, limit: int | None = None) -> Dataset:
    """GSM8K from the hub (config 'main') or a local .jsonl/.json/.csv/.tsv/.parquet, as prompt + answer.

    Args:
        path_or_id: a local file with GSM8K's `question` and `answer` columns, or a hub dataset id.
        split: the hub split to read; a local file is read whole.
        system_prompt: a system message put before every question (asks for the '#### <number>' line); none when
            None.
        limit: keep only the first `limit` rows; all of them when None or 0.

    Returns:
        A Dataset with `prompt` (chat form), `answer` (the gold final number) and `solution` (the worked answer).
    """
    raw = _read(path_or_id, split, hub_config="main")
    missing = {"question", "answer"} - set(raw.column_names)
    if missing:
        raise DataError(f"'{path_or_id}' lacks GSM8K's column(s) {sorted(missing)}; it has {raw.column_names}.")
    if limit:
        raw = raw.select(range(min(limit, len(raw))))
    return raw.map(lambda r: {"prompt": chat_prompt(r["question"], system_prompt), "answer": gold_answer(r["answer"]),
                              "solution": r["answer"]}, remove_columns=raw.column_names)


def load_local(path: str, *, prompt_column: str = "prompt", answer_column: str | None = None,
               system_prompt: str | None = None, split: str = "train", encoding: str = "utf-8") -> Dataset:
    """Any local jsonl/json/csv/tsv/parquet. `prompt_column` (a text, or a conversation: a list of
    role/content messages, TRL's conversational format) becomes `prompt`; `answer_column`, if given,
    becomes `answer`: a string, or a list of accepted strings. `system_prompt` goes before every prompt
    that has no system message of its own. Answers drawn from a few repeated labels (a classification
    task) also give a `labels` column, so that a reply naming two labels is not counted right. Answers that
    are always one of the numbers their prompt offers ('Which is larger, 70 or 95?') or one of the things it
    lists ('glacier or pear?') give a `choices` column instead, so that the one a reply picks is scored, not the
    last it names, and a reply that only lists them picks none. Other
    columns are kept for rewards to read. A row with no prompt or answer is refused, naming its line:
    an answer scored as the text 'None' would train and count a wrong target in silence.

    Args:
        path: a local .jsonl, .json, .csv, .tsv or .parquet file (a path that does not exist is tried as a hub id).
        prompt_column: the column that holds each prompt.
        answer_column: the column that holds each answer; no `answer` column when None.
        system_prompt: a system message put before prompts that have none; none added when None.
        split: the split read when `path` is a hub id; a local file is read whole.
        encoding: the text encoding of a .jsonl, .json, .csv or .tsv file.

    Returns:
        A Dataset with `prompt`, `answer` (when `answer_column` is given), `labels` or `choices` (where they
        apply) and the file's other columns.
    """
    records = _records(path, split, encoding)
    if not records:
        raise DataError(f"'{path}' has no rows. Each line (row) needs a '{prompt_column}' and, for accuracy and "
                        f"the answer reward, an '{answer_column or 'answer'}'.")
    columns = list(dict.fromkeys(c for _, r in records for c in r))
    for col in filter(None, (prompt_column, answer_column)):
        if col not in columns:
            raise DataError(f"'{path}' has no column '{col}'. Its columns: {columns}. Map yours with "
                            "prompt_column=/answer_column= (--prompt-column/--answer-column on the command line).")
    rows = []
    for where, r in records:
        out = {c: v for c, v in r.items() if c not in (prompt_column, answer_column)}
        out["prompt"] = _prompt(r.get(prompt_column), system_prompt, f"'{path}' {where}", prompt_column)
        if answer_column:
            out["answer"] = _answer(r.get(answer_column), f"'{path}' {where}", answer_column)
        rows.append(out)
    if answer_column and any(isinstance(r["answer"], list) for r in rows):  # one kind per column: lists for all
        for r in rows:
            r["answer"] = r["answer"] if isinstance(r["answer"], list) else [r["answer"]]
    labels = _label_set([r["answer"] for r in rows]) if answer_column else None
    if labels:
        for r in rows:
            r["labels"] = _row_labels(labels, r["prompt"][-1]["content"], r["answer"])
    elif answer_column and (offered := _offered_numbers(rows) or _offered_words(rows)):
        for r, choices in zip(rows, offered, strict=True):
            r["choices"] = choices
    try:
        return Dataset.from_list(rows)
    except Exception as e:  # pyarrow: a column with several kinds of value
        raise DataError(f"'{path}': {type(e).__name__}: {str(e)[:200]}. Every row needs the same kind of value in "
                        "each column (a text, a number or a list), as the first rows have.") from e


def _records(path_or_id: str, split: str, encoding: str) -> list[tuple[str, dict]]:
    """The rows of a local file with where each came from ('line 31'), or of a hub dataset. Text files
    are decoded strictly (a UTF-8 byte-order mark is dropped), so a file in another encoding or a broken
    JSON line is refused with its line and the fix instead of a traceback from deep in a parser."""
    path = Path(path_or_id).expanduser()
    if not path.exists():
        return [(f"row {i + 1}", dict(r)) for i, r in enumerate(_read(path_or_id, split))]
    kind = _kind(path)
    if kind == "parquet":
        return [(f"row {i + 1}", dict(r)) for i, r in enumerate(_read(str(path), split))]
    text = _decode(path, encoding)
    if kind == "csv":
        import csv

        delimiter = _delimiter(path)
        header = next((line for line in text.splitlines() if line.strip()), "")
        if delimiter == "," and "\t" in header and "," not in header:
            raise DataError(f"'{path}' is tab-separated (its header has tabs and no commas): name it .tsv, and it "
                            "is read with tabs.")
        reader = csv.DictReader(text.splitlines(), delimiter=delimiter)
        rows = []
        for r in reader:
            if None in r:  # csv puts the fields beyond the header's under None
                raise DataError(f"'{path}' line {reader.line_num} has {len(reader.fieldnames) + len(r[None])} fields, "
                                f"its header {len(reader.fieldnames)} ({', '.join(reader.fieldnames)}). A text with a "
                                + ("tab needs double quotes around it." if delimiter == "\t" else
                                   'comma needs double quotes: "Which is larger, 70 or 95?",95'))
            if any((v or "").strip() for v in r.values()):
                rows.append((f"line {reader.line_num}", dict(r)))
        return rows
    if kind == "json" and path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"'{path}' is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}. A .json file "
                            "holds one list of rows ([{...}, {...}]); one row per line is a .jsonl file.") from e
        if isinstance(data, dict) and all(isinstance(v, list) for v in data.values()):  # columns
            data = [dict(zip(data, values, strict=True)) for values in zip(*data.values(), strict=True)]
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise DataError(f"'{path}' must hold a list of rows, each an object such as "
                            '{"prompt": "...", "answer": "..."}.')
        return [(f"row {i + 1}", r) for i, r in enumerate(data)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"'{path}' line {n} is not valid JSON ({e.msg}, column {e.colno}): "
                            f"{line.strip()[:80]!r}. Each line of a .jsonl file is one object such as "
                            '{"prompt": "...", "answer": "..."}.') from e
        if not isinstance(row, dict):
            raise DataError(f"'{path}' line {n} is a {type(row).__name__}, not an object such as "
                            '{"prompt": "...", "answer": "..."}.')
        out.append((f"line {n}", row))
    return out


def _delimiter(path: Path) -> str:
    """A CSV's field separator: a tab in a .tsv, else a comma."""
    return "\t" if path.suffix.lower() == ".tsv" else ","


def _kind(path: Path) -> str:
    kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}.get(
        path.suffix.lower())
    if kind is None or not path.is_file():
        raise DataError(f"Cannot read '{path}': use a .jsonl, .json, .csv, .tsv or .parquet file.")
    if path.stat().st_size == 0:
        raise DataError(f"'{path}' is empty. Each line (row) needs a prompt and an answer, e.g. "
                        '{"prompt": "What is the opposite of hot?", "answer": "cold"}.')
    return kind


def _decode(path: Path, encoding: str) -> str:
    raw = path.read_bytes()
    codec = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        return raw.decode(codec)
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise DataError(f"'{path}' line {line} is not {encoding}: byte 0x{raw[e.start]:02x} at offset {e.start}. "
                        f"Save the file as UTF-8, or name its encoding (--encoding latin-1 on the command "
                        "line, encoding= in Python).") from e
    except LookupError as e:
        raise DataError(f"Unknown encoding '{encoding}': use a name Python knows, such as utf-8 or latin-1.") from e


def _prompt(value, system_prompt: str | None, where: str, column: str):
    """A row's prompt in the form TRL takes: a text becomes a chat; a conversation is checked and kept."""
    if isinstance(value, str) and value.strip():
        return chat_prompt(value, system_prompt)
    if isinstance(value, list) and value:
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                   for m in value):
            raise DataError(f"{where}: the '{column}' conversation needs messages of the form "
                            '{"role": "user", "content": "..."}.')
        if value[-1]["role"] != "user":
            raise DataError(f"{where}: the '{column}' conversation ends with a '{value[-1]['role']}' message; it must "
                            "end with the user's turn, which the model answers.")
        return with_system_prompt(value, system_prompt) if system_prompt else value
    raise DataError(f"{where} has no '{column}' (it is {value!r}): give every row a prompt, or remove the row.")


def _answer(value, where: str, column: str):
    if isinstance(value, (list, tuple)):
        accepted = [str(x).strip() for x in value if x is not None and str(x).strip()]
        if accepted:
            return accepted
    elif value is not None and not isinstance(value, (dict, bool)) and str(value).strip():
        return str(value).strip()
    raise DataError(f"{where} has no usable '{column}' (it is {value!r}): give every row an answer (a text, a number "
                    "or a list of accepted texts), or remove the row. It would otherwise be trained on as a wrong "
                    "target and counted in accuracy.")


# distinct text answers up to this many, each seen at least LABEL_MIN_COUNT times: a label set. Not 10: a held-back
# calendar task (19 month and day names) then had none, and 5 of the 8 held-out replies scored right after training
# named several ("The day before Sunday is Friday, ... before Saturday." for Saturday)
LABEL_MAX = 32
LABEL_MIN_COUNT = 3


def _label_set(answers: list) -> list[str] | None:
    """A classification task's labels (its few, repeated text answers), else None."""
    if any(isinstance(a, list) for a in answers):
        return None
    counts = Counter(normalize_label(a) for a in answers)
    if any(parse_number(a) is not None for a in counts) or not 2 <= len(counts) <= LABEL_MAX:
        return None
    return sorted(counts) if min(counts.values()) >= LABEL_MIN_COUNT else None


def _row_labels(labels: list[str], question: str, answer) -> list[str]:
    """The labels a reply to this row may not name beside its answer. A question that names labels but not its
    answer names its subject ('Which month comes two before July?'): a reply may restate it. One that names its
    answer among others offers choices ('positive or negative?'): naming another is a hedge."""
    text = normalize_label(str(question))
    accepted = {normalize_label(a) for a in (answer if isinstance(answer, list) else [answer])}
    if any(mentions(text, a) for a in accepted):
        return labels
    return [lab for lab in labels if not mentions(text, lab)]


def _offered_numbers(rows: list[dict]) -> list[list[str]] | None:
    """Each row's prompt numbers, when every answer is one of at least two numbers its prompt offers (a
    choice question, as 'Which is larger, 70 or 95?'), else None."""
    offered = []
    for r in rows:
        answer, question = r["answer"], r["prompt"][-1]["content"]  # the user's turn
        numbers = list(dict.fromkeys(re.findall(NUMBER, question)))
        gold = parse_number(answer) if isinstance(answer, str) else None
        if gold is None or len(numbers) < 2 or gold not in {parse_number(n) for n in numbers}:
            return None
        offered.append(numbers)
    return offered if len(offered) >= LABEL_MIN_COUNT else None


def _offered_words(rows: list[dict]) -> list[list[str]] | None:
    """Each row's choices, when every text answer is one of the things its prompt lists (a choice question, as
    'Which comes first in alphabetical order: glacier or pear?' or 'Which word does not belong: cat, dog, plum,
    horse?'), else None. Scored as choices, a reply's pick counts, and one that names them all picks none: a
    held-back alphabetical-order run learned to reply 'glacier and pear.' to every pair, which naming the answer
    paid on 15 of its 16 held-out prompts."""
    golds = [r["answer"] for r in rows]
    if any(not isinstance(g, str) or parse_number(g) is not None or not normalize_text(g) for g in golds):
        return None
    offered = []
    for r in rows:
        choices = _listed(r["prompt"][-1]["content"], normalize_text(r["answer"]))  # the user's turn
        if choices is None:
            return None
        offered.append(choices)
    return offered if len(offered) >= LABEL_MIN_COUNT else None


_LIST_JOIN = re.compile(r"\s*(,\s*(?:or|and)\b|,|\b(?:or|and)\b)\s*")


def _listed(question: str, gold: str) -> list[str] | None:
    """The things a clause of `question` lists (joined by commas, 'or', 'and'), one of them `gold` (normalized),
    each at most as many words as the gold has (a file whose one answer is three words lists no 'which is heavier'
    in its other rows), articles dropped: 'glacier or pear', 'a feather or a brick', 'cat, dog, plum, horse'. Right
    next to an 'or' or 'and' a longer phrase gives its words nearest the join, as many as the gold has ('Is 17 prime
    or composite?' offers 'prime'); beside a comma only a short one is an item, so that 'Which is heavier, a feather
    or a brick?' offers no 'heavier' and 'Name a colour, like red or blue.' no 'like'. None where no clause lists
    the gold."""
    n = len(gold.split())
    for clause in re.split(r"[?!.:;()\"\n]", question):
        parts = _LIST_JOIN.split(clause)
        pieces, joins = parts[0::2], parts[1::2]
        items = []
        for i, piece in enumerate(pieces):
            words = normalize_text(piece).split()
            if len(words) <= n:
                items.append(" ".join(words))
                continue
            if i < len(joins) and joins[i] != ",":  # 'Is 17 prime' before 'or'
                items.append(" ".join(words[-n:]))
            if i > 0 and joins[i - 1] != ",":  # 'green today' after 'or'
                items.append(" ".join(words[:n]))
        items = list(dict.fromkeys(filter(None, items)))
        if joins and gold in items and len(items) >= 2:
            return items
    return None


def normalize_label(answer: str) -> str:
    return " ".join(answer.lower().split())


def _read(path_or_id: str, split: str, hub_config: str | None = None) -> Dataset:
    path = Path(path_or_id).expanduser()
    if path.exists():
        kind = _kind(path)
        separated = {"delimiter": _delimiter(path)} if kind == "csv" else {}
        try:
            return load_dataset(kind, data_files=str(path), split="train", **separated)
        except Exception as e:  # datasets raises several types for a malformed file
            raise DataError(f"Cannot read '{path}' as {kind} ({type(e).__name__}: {str(e)[:300]}). Check that "
                            "every row has the same columns, with the same kind of value in each.") from e
    if not hub_reachable() and not _in_hub_cache(path_or_id):  # said now, not after the hub's retries
        raise DataError(f"Cannot load '{path_or_id}': it is not a local file, and if it is a hub id, the Hugging "
                        "Face hub cannot be reached from here and it is not in the local cache: download the data "
                        "and pass the file path instead.")
    try:
        return load_dataset(path_or_id, hub_config, split=split)
    except Exception as e:  # datasets raises several types for "not found" and "offline"
        raise DataError(f"Cannot load '{path_or_id}' ({type(e).__name__}: {str(e)[:200]}). It is not a local "
                        "file; if it is a hub id, the hub may be unreachable: download the data and pass the "
                        "file path instead.") from e


def _in_hub_cache(repo_id: str) -> bool:
    """Whether a hub dataset may be had here without the hub: downloaded before (the hub's cache, or datasets' own
    prepared copy), or offline mode set, in which datasets looks in its caches at once."""
    from datasets import config
    from huggingface_hub import constants

    return (config.HF_DATASETS_OFFLINE or constants.HF_HUB_OFFLINE
            or (Path(constants.HF_HUB_CACHE) / f"datasets--{repo_id.replace('/', '--')}").is_dir()
            or (Path(config.HF_DATASETS_CACHE) / repo_id.replace("/", "___")).is_dir())


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
