"""Rewards from a model: train a reward model on preference pairs, use it as a reward, and watch a
held-back gold scorer while RLOO optimises it.

A reward model is a proxy: it learnt which of two answers people (or a rule) preferred, from a finite
set of pairs. A policy trained against it finds the places where the proxy is wrong, and its proxy
reward keeps rising while what the proxy stood for falls: reward hacking. `GoldMonitor` measures a
second scorer that training never optimises on held-out prompts, so that the health monitor can name
the moment (`diagnostics`' `reward_hacking`) and the best checkpoint to keep.

The text a reward model reads is the same in training and in use (`pair_text`): the prompt and the
completion as one conversation in the tokenizer's chat template, whatever form the preference file or
the trainer gives them in (plain strings or chat messages).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset
from transformers import TrainerCallback

from .errors import ConfigError, DataError, RewardError
from .presets import RewardModelPreset, rm_preset
from .rewards import RewardFunc, completion_text, reward_model
from .sources import DEFAULT_MODEL

log = logging.getLogger("rloo_kit")

COLUMNS = ("prompt", "chosen", "rejected")  # TRL's preference format, explicit prompt
MIN_PAIRS = 10  # fewer cannot both train a model and measure it on held-out pairs
MIN_EVAL_PAIRS = 2
METADATA = "reward_model.json"  # written beside the weights: how the model reads its text
METRICS = "metrics.json"


# ---------------------------------------------------------------------------------------------- data

def load_preferences(source: str | Path | Dataset | Sequence[dict], *, encoding: str = "utf-8") -> Dataset:
    """Preference pairs in TRL's format (`prompt`, `chosen`, `rejected`), from a jsonl/json/csv/tsv/parquet file,
    a Dataset or a list of rows, checked before any model loads: every column present, no empty value, no
    pair whose two answers are the same, enough pairs to train and hold some out. The prompt may be a text or
    chat messages; chosen/rejected a text or the assistant's message(s)."""
    from .data import _records

    where = str(source) if isinstance(source, (str, Path)) else "the preferences"
    if isinstance(source, (str, Path)):
        if not Path(source).expanduser().exists() and not re.fullmatch(r"[\w.-]+/[\w.-]+", str(source)):
            raise DataError(f"No preference file at '{source}'. Give a .jsonl/.json/.csv/.tsv/.parquet file with the "
                            "columns prompt, chosen, rejected (or a hub dataset id, org/name, where the hub is "
                            "reachable).")
        records = _records(str(source), "train", encoding)
    else:
        records = [(f"row {i + 1}", dict(r)) for i, r in enumerate(source)]
    columns = list(dict.fromkeys(c for _, r in records for c in r))
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise DataError(f"{where} has no {', '.join(repr(c) for c in missing)} column(s); its columns: {columns}. A "
                        'preference file has one pair a row: {"prompt": "...", "chosen": "the better answer", '
                        '"rejected": "the worse one"} (TRL\'s format). Rename your columns to these.')
    rows, same = [], []
    for at, r in records:
        texts = {c: _text(r.get(c), c, f"{where} {at}") for c in COLUMNS}
        if " ".join(texts["chosen"].split()) == " ".join(texts["rejected"].split()):
            same.append(at)
        rows.append({"prompt": _messages(r["prompt"]), "chosen": texts["chosen"], "rejected": texts["rejected"]})
    if same:
        raise DataError(f"{where}: chosen and rejected are the same text in {len(same)} pair(s) ({', '.join(same[:5])}"
                        f"{', ...' if len(same) > 5 else ''}). Such a pair teaches nothing: remove it, or put the "
                        "answer that was not preferred under 'rejected'.")
    if len(rows) < MIN_PAIRS:
        raise DataError(f"{where} has {len(rows)} preference pair(s): too few to train a reward model and measure "
                        f"it on held-out pairs. Give at least {MIN_PAIRS} (a few hundred reach a useful accuracy).")
    return Dataset.from_list(rows)


def sample_preferences(model, tokenizer, dataset: Dataset, gold: RewardFunc, *, samples: int = 4,
                       max_new_tokens: int = 16, temperature: float = 1.0, pairs_per_prompt: int = 2, seed: int = 0,
                       batch_size: int = 32) -> list[dict]:
    """Preference pairs from the policy's own samples, labelled by a `gold` rule: `samples` completions per prompt,
    and a completion gold scores higher is chosen over one it scores lower (equal scores make no pair). The reward
    model learns from the pairs and never sees the rule: what it learns is whatever tells them apart, the rule's
    intent or a shortcut that happens to go with it."""
    from .evaluation import generate

    prompts = list(dataset["prompt"])
    texts, _ = generate(model, tokenizer, prompts, samples=samples, greedy=False, max_new_tokens=max_new_tokens,
                        temperature=temperature, batch_size=batch_size)
    flat = [t for group in texts for t in group]
    columns = {c: [v for v in dataset[c] for _ in range(samples)] for c in dataset.column_names if c != "prompt"}
    scores = gold(prompts=[p for p in prompts for _ in range(samples)], completions=flat, **columns)
    rng, rows = random.Random(seed), []
    for i, prompt in enumerate(prompts):
        scored = {t: s for t, s in zip(texts[i], scores[i * samples:(i + 1) * samples], strict=True) if s is not None}
        pairs = [(a, b) for a in scored for b in scored if scored[a] > scored[b]]
        for chosen, rejected in rng.sample(pairs, min(pairs_per_prompt, len(pairs))):
            rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return rows


def _text(value, column: str, where: str) -> str:
    text = value if isinstance(value, str) else completion_text(value) if isinstance(value, (list, dict)) else None
    if value is None or text is None or not text.strip():
        raise DataError(f"{where}: '{column}' is {'empty' if text is not None and value is not None else repr(value)}. "
                        "Every pair needs a prompt, a chosen and a rejected answer, each a non-empty text (or chat "
                        "messages); remove or fill that row.")
    return text


def _messages(prompt) -> list[dict]:
    """A prompt as chat messages: a text becomes one user message."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": str(m.get("role", "user")), "content": str(m.get("content", ""))} for m in prompt]


def split_preferences(prefs: Dataset, eval_fraction: float, seed: int = 0) -> tuple[Dataset, Dataset]:
    """Train and held-out pairs. Pairs that share a prompt stay together, so that held-out accuracy measures
    prompts the model has not seen (when the file has too few distinct prompts, pairs are split one by one)."""
    keys = [_key(p) for p in prefs["prompt"]]
    groups = list(dict.fromkeys(keys))
    rng = random.Random(seed)
    n_eval = max(MIN_EVAL_PAIRS, round(eval_fraction * len(prefs)))
    if len(groups) >= 5:
        rng.shuffle(groups)
        held, size = set(), 0
        counts = Counter(keys)
        for g in groups:
            if size >= n_eval:
                break
            held.add(g)
            size += counts[g]
        test = [i for i, k in enumerate(keys) if k in held]
    else:
        test = rng.sample(range(len(prefs)), n_eval)
    chosen = set(test)
    train = [i for i in range(len(prefs)) if i not in chosen]
    if len(train) < MIN_EVAL_PAIRS:
        raise DataError(f"Holding out {len(test)} of {len(prefs)} pairs leaves {len(train)} to train on: add pairs or "
                        "lower eval_fraction.")
    return prefs.select(train), prefs.select(sorted(test))


def _key(prompt) -> str:
    return " ".join(" ".join(m["content"] for m in _messages(prompt)).lower().split())


def pair_text(tokenizer, prompt, completion) -> str:
    """What the reward model reads: prompt + completion as one conversation in the chat template (a tokenizer
    without one gets the texts on lines, ended by its end-of-sequence token). Used alike in training and use."""
    messages = _messages(prompt) + [{"role": "assistant", "content": completion_text(completion)}]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False)
    return "\n".join(m["content"] for m in messages) + (tokenizer.eos_token or "")


def _encode(tokenizer, prefs: Dataset, max_length: int) -> Dataset:
    """chosen_ids / rejected_ids as TRL's RewardTrainer takes them ready-made (it then skips its own
    tokenisation), cut as the scorer cuts them."""
    def encode(row):
        return {f"{c}_ids": tokenizer(pair_text(tokenizer, row["prompt"], row[c]), truncation=True,
                                      max_length=max_length)["input_ids"] for c in ("chosen", "rejected")}

    return prefs.map(encode, remove_columns=prefs.column_names)


def _prepare_tokenizer(tokenizer):
    """Right padding (the score is read at the last real token; left padding shifts positions) and cuts
    that keep the end of a long text, where the completion is."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side, tokenizer.truncation_side = "right", "left"
    return tokenizer


# ---------------------------------------------------------------------------------------------- train

@dataclass(frozen=True)
class RewardModelResult:
    """What `train_reward_model` wrote and measured."""

    output_dir: str
    pair_accuracy: float  # held-out pairs whose chosen answer scores above the rejected one
    train_pairs: int
    eval_pairs: int
    seconds: float  # training and measuring, model load excluded
    model: str
    preset: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return (f"reward model in {self.output_dir}: held-out pair accuracy {self.pair_accuracy:.3f} "
                f"({self.eval_pairs} pairs; trained on {self.train_pairs} in {self.seconds / 60:.1f} min, "
                f"{self.model}, preset {self.preset})")


def train_reward_model(preferences: str | Path | Dataset | Sequence[dict], output_dir: str | Path, *,
                       model: str = DEFAULT_MODEL, preset: str | RewardModelPreset = "auto", seed: int = 0,
                       overwrite: bool = False, encoding: str = "utf-8", **settings: object) -> RewardModelResult:
    """Train a reward model on preference pairs with TRL's RewardTrainer (LoRA on a sequence-classification
    head of `model`, the offline default unless named), measure its pair accuracy on held-out pairs, and
    write it, merged, as safetensors with its tokenizer, `reward_model.json` and `metrics.json` into
    output_dir. `settings` override the preset's fields (see RewardModelPreset.describe()). Every check
    that needs no weights (the file, the settings, the output directory, the model's source) comes first.

    Args:
        preferences: pairs with `prompt`, `chosen` and `rejected`: a jsonl/json/csv/tsv/parquet file, a hub dataset id,
            a Dataset or a list of rows (`load_preferences`).
        output_dir: the directory to write the reward model into (created if missing).
        model: the causal LM the reward model starts from (a hub id, a directory or an alias).
        preset: a reward-model preset's name or a RewardModelPreset; "auto": the hardware's.
        seed: the split into training and held-out pairs, and training's seed.
        overwrite: replace a reward model already in output_dir.
        encoding: the text encoding of a jsonl, json or csv file.
        **settings: RewardModelPreset fields to override (learning_rate, max_length, ...); None leaves one as it is.

    Returns:
        A RewardModelResult: where it was written, its held-out pair accuracy, the pair counts and the time.
    """
    from .sources import check_source

    prefs = load_preferences(preferences, encoding=encoding)
    config = rm_preset(preset, **settings)
    train_set, eval_set = split_preferences(prefs, config.eval_fraction, seed)
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir '{out}' is a file; name a directory (it is created if missing).")
    if (out / METADATA).exists() and not overwrite:
        raise ConfigError(f"'{out}' already holds a reward model. Replace it with overwrite=True (--overwrite), or "
                          "choose another output directory.")
    check_source(model)
    rm, tok = _load_for_training(model)
    start = time.time()
    trainer = _reward_trainer(rm, tok, _encode(tok, train_set, config.max_length), config, out, seed)
    trainer.train()
    merged = trainer.model.merge_and_unload().eval()
    score = reward_model(merged, tok, batch_size=2 * config.per_device_train_batch_size, name=out.name,
                         text=pair_text, max_length=config.max_length)
    accuracy = pair_accuracy(score, eval_set)
    result = RewardModelResult(str(out), accuracy, len(train_set), len(eval_set), round(time.time() - start, 1),
                               model, config.name)
    merged.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / METADATA).write_text(json.dumps({"format": "chat", "max_length": config.max_length, "base_model": model,
                                            "preset": dataclasses.asdict(config)}, indent=2))
    (out / METRICS).write_text(json.dumps({**result.to_dict(), "train_log": _losses(trainer)}, indent=2))
    log.info("%s", result)
    return result


def _load_for_training(model: str):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from .sources import resolve_source

    source = resolve_source(model)
    dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    try:  # TRL's quieting of the expected "score.weight missing" report: the head is new, by design
        from trl.trainer.reward_trainer import suppress_seqcls_warning
    except ImportError:
        from contextlib import nullcontext as suppress_seqcls_warning
    try:
        with suppress_seqcls_warning():
            rm = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, use_safetensors=True,
                                                                    trust_remote_code=False, dtype=dtype)
        tok = _prepare_tokenizer(AutoTokenizer.from_pretrained(source, trust_remote_code=False))
    except (OSError, ValueError) as e:
        raise ConfigError(f"Cannot load '{model}' as a sequence classifier for a reward model: {e}. Use a causal "
                          f"LM with safetensors weights (a hub id, a directory, or '{DEFAULT_MODEL}').") from e
    rm.config.pad_token_id = tok.pad_token_id
    return rm, tok


def _reward_trainer(model, tokenizer, train_set: Dataset, config: RewardModelPreset, out: Path, seed: int):
    import torch
    from peft import LoraConfig
    from trl import RewardConfig, RewardTrainer

    from .presets import LORA_ALL_LINEAR

    cuda = torch.cuda.is_available()
    args = RewardConfig(output_dir=str(out / "checkpoints"), learning_rate=config.learning_rate,
                        num_train_epochs=config.num_train_epochs,
                        per_device_train_batch_size=config.per_device_train_batch_size,
                        gradient_accumulation_steps=config.gradient_accumulation_steps,
                        gradient_checkpointing=config.gradient_checkpointing, max_length=None,
                        bf16=cuda and torch.cuda.is_bf16_supported(), use_cpu=not cuda, save_strategy="no",
                        report_to="none", logging_steps=5, disable_tqdm=True, seed=seed, lr_scheduler_type="linear",
                        warmup_steps=0, weight_decay=0.0)
    lora = LoraConfig(task_type="SEQ_CLS", r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                      target_modules=list(LORA_ALL_LINEAR))
    return RewardTrainer(model=model, args=args, train_dataset=train_set, processing_class=tokenizer,
                         peft_config=lora)


def _losses(trainer) -> list[dict]:
    return [{k: h[k] for k in ("step", "loss", "accuracy") if k in h} for h in trainer.state.log_history if "loss" in h]


def pair_accuracy(score: RewardFunc, prefs: Dataset | Sequence[dict]) -> float:
    """The share of pairs whose chosen answer scores strictly above the rejected one."""
    rows = list(prefs)
    prompts = [r["prompt"] for r in rows]
    values = score(prompts=prompts + prompts, completions=[r["chosen"] for r in rows] + [r["rejected"] for r in rows])
    n = len(rows)
    return sum(c is not None and r is not None and c > r for c, r in zip(values[:n], values[n:], strict=True)) / n


# ---------------------------------------------------------------------------------------------- use

def load_reward_model(path: str | Path, *, device: str = "auto", batch_size: int = 16,
                      name: str | None = None) -> RewardFunc:
    """A reward model written by `train_reward_model` as a reward function in TRL's signature
    (prompts, completions, **columns -> floats), scoring in batches on `device` ("auto": the GPU when there is
    one, where the policy trains; else the CPU). Safetensors only, no remote code. It reads prompt and
    completion as it did in training, whether they come as texts or chat messages.

    Args:
        path: the directory `train_reward_model` wrote.
        device: where the reward model scores ("cuda", "cpu", ...); "auto": the GPU when there is one.
        batch_size: prompt-completion pairs scored at once.
        name: the reward function's name, as logs and metrics show it; "reward_model" when None.

    Returns:
        A reward function that takes prompts and completions and returns one float score each.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(path).expanduser()
    if not (folder / METADATA).is_file() or not any(folder.glob("*.safetensors")):
        what = "does not exist" if not folder.exists() else "holds no reward model (reward_model.json and safetensors)"
        raise RewardError(f"Reward model '{path}' {what}. Train one with `rloo-kit train-rm --path PREFS.jsonl "
                          f"--output-dir {path}` (rloo_kit.train_reward_model). A hub reward model goes in "
                          "reward_funcs as its id instead (rloo_kit.rewards.hub_reward_model).")
    meta = json.loads((folder / METADATA).read_text())
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    try:
        model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, use_safetensors=True,
                                                                   trust_remote_code=False)
        tok = _prepare_tokenizer(AutoTokenizer.from_pretrained(folder, trust_remote_code=False))
    except (OSError, ValueError) as e:
        raise RewardError(f"Cannot load the reward model in '{path}': {e}. Train it again with "
                          "`rloo-kit train-rm`.") from e
    return reward_model(model.to(device).eval(), tok, batch_size=batch_size, name=name or "reward_model",
                        text=pair_text, max_length=meta.get("max_length"))


# ---------------------------------------------------------------------------------------------- gold

GOLD_KEY, PROXY_KEY = "gold/mean", "proxy/mean"  # logged beside the step's reward and kl


class GoldMonitor(TrainerCallback):
    """A held-back scorer (a rule, or a second reward model) that training never optimises, measured on
    held-out prompts at the start and every `every` steps: greedy completions scored by `gold` and by the
    run's own rewards (the proxy, weighted as in training). It logs `gold/mean` and `proxy/mean` into the
    step's log, so that the health monitor (`reward_hacking`), `plots.plot_training` and the live view see
    them beside reward and KL; `records` keeps every measurement.

    gold: a reward function, or a directory written by `train_reward_model`. prompts: a dataset with a
    `prompt` column (and the columns `gold` reads). Attach it with `GoldMonitor(...).attach(trainer)`.
    """

    def __init__(self, gold: RewardFunc | str | Path, prompts: Dataset, *, every: int = 5,
                 max_new_tokens: int | None = None, batch_size: int = 32):
        if every < 1:
            raise ConfigError(f"GoldMonitor every={every}: measure every 1 step or more (e.g. 5).")
        if "prompt" not in prompts.column_names or len(prompts) == 0:
            raise DataError("GoldMonitor needs held-out prompts: a non-empty dataset with a 'prompt' column "
                            "(e.g. task.test), never trained on.")
        self.gold = load_reward_model(gold) if isinstance(gold, (str, Path)) else gold
        self.prompts, self.every, self.max_new_tokens, self.batch_size = prompts, every, max_new_tokens, batch_size
        self.trainer = None
        self.records: list[dict] = []

    def attach(self, trainer) -> GoldMonitor:
        """Watch `trainer` (an RLOOTrainer): the proxy is its reward functions with their weights."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def measure(self, model, tokenizer) -> dict:
        """Gold and proxy means on the held-out prompts for the model as it is now."""
        from .evaluation import generate

        prompts = list(self.prompts["prompt"])
        length = self.max_new_tokens or getattr(self.trainer.args, "max_completion_length", None) or 64
        texts, _ = generate(model, tokenizer, prompts, greedy=True, max_new_tokens=length, batch_size=self.batch_size)
        completions = [group[0] for group in texts]
        columns = {c: list(self.prompts[c]) for c in self.prompts.column_names if c != "prompt"}
        gold = self.gold(prompts=prompts, completions=completions, **columns)
        return {GOLD_KEY: _mean(gold), PROXY_KEY: self._proxy(prompts, completions, columns)}

    def _proxy(self, prompts, completions, columns) -> float | None:
        funcs, weights = self.trainer.reward_funcs, self.trainer.reward_weights.tolist()
        total = [0.0] * len(prompts)
        for fn, w in zip(funcs, weights, strict=True):
            if not callable(fn) or _is_module(fn):
                return None  # a model TRL loaded itself: scored inside TRL only
            for i, v in enumerate(fn(prompts=prompts, completions=completions, **columns)):
                total[i] = None if v is None or total[i] is None else total[i] + w * v
        return _mean(total)

    def _record(self, state) -> dict:
        values = self.measure(self.trainer.model, self.trainer.processing_class)
        self.records.append({"step": state.global_step, **values})
        return values

    def on_train_begin(self, args, state, control, **kwargs):
        if self.trainer is None:
            raise ConfigError("GoldMonitor was added as a plain callback: attach it with "
                              "GoldMonitor(...).attach(trainer).")
        self.records = []
        if state.global_step == 0:  # the starting point, its own entry (no reward logged at step 0)
            state.log_history.append({"step": 0, **self._record(state)})

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every and state.global_step != state.max_steps:
            return
        from .patches import allowed
        from .patches.private import trl_metrics

        values = self._record(state)
        if not allowed("trl_metrics", self.trainer):  # the door says why: the measurement, an entry of its own
            state.log_history.append({"step": state.global_step, **values})
            return
        metrics = trl_metrics(self.trainer)  # logged, averaged and cleared by the trainer's own log
        for key, value in values.items():
            if value is not None:
                metrics[key].append(value)


def _mean(values: Sequence) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _is_module(fn) -> bool:
    import torch

    return isinstance(fn, torch.nn.Module)


def gold_series(log_history: Sequence[dict]) -> list[dict]:
    """The gold measurements of a log history, with the proxy and KL logged beside them."""
    return [{"step": h.get("step"), "gold": h[GOLD_KEY], "proxy": h.get(PROXY_KEY), "kl": h.get("kl")}
            for h in log_history if h.get(GOLD_KEY) is not None]


def gold_summary(log_history: Sequence[dict]) -> dict:
    """Gold and proxy at the start and the end, the best gold and its step, the last KL: a run in one row."""
    points = gold_series(log_history)
    if not points:
        raise DataError("No gold measurement in this log history: attach a GoldMonitor to the trainer.")
    best = max(points, key=lambda p: p["gold"])
    return {"gold_before": points[0]["gold"], "gold_after": points[-1]["gold"], "gold_best": best["gold"],
            "best_step": best["step"], "proxy_before": points[0]["proxy"], "proxy_after": points[-1]["proxy"],
            "kl_last": points[-1]["kl"]}


def run_with_gold(model_name: str, task, gold: RewardFunc | str | Path, *, preset, steps: int, output_dir: str,
                  every: int = 5, **overrides):
    """Load the model fresh and train `steps` RLOO steps on `task` (its rewards are the proxy) with a GoldMonitor
    on the task's held-out prompts; returns (trainer, monitor). For side-by-side runs, e.g. two betas."""
    from .models import load_model
    from .training import build_trainer, train

    model, tok = load_model(model_name, preset=preset)
    trainer = build_trainer(model, tok, task, preset=preset, output_dir=output_dir, max_steps=steps,
                            save_strategy="no", disable_tqdm=True, **overrides)
    monitor = GoldMonitor(gold, task.test, every=every).attach(trainer)
    train(trainer)
    return trainer, monitor
