"""Before training: can this run learn? Sample what training would sample, score it with the run's
rewards, and name what will stop it from learning, with the fix, in a minute rather than an hour.

RLOO learns only from prompts whose K completions got different rewards (the leave-one-out
advantage is zero otherwise), and only from completions that are not cut before their answer.
`preflight` measures both on the model as it is, with the same K, temperature, completion length,
chat template and guarded, weighted rewards as `build_trainer` would use.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from datasets import Dataset

from .data import validate_dataset
from .errors import ConfigError
from .evaluation import eos_token_ids, generate_ids
from .presets import Preset, make_config, resolve_preset
from .rewards import RewardFunc, describe, guard, is_correct, load_reward_model, required_columns, unusable
from .tasks import Task

PROBE_FACTOR = 4  # sample up to this many times the completion length, to see what an uncut answer needs
PROBE_CAP = 128  # ... but no further than this many tokens (the length proposals stay within it)
SPREAD_EPS = 1e-8  # TRL's torch.isclose(std, 0) tolerance
COLLAPSE_SHARE = 0.8  # prompts without spread above this share: reward_collapse
SOLVED_PASS_RATE = 0.95  # completions judged correct above this share: solved
TRUNCATION_SHARE = 0.5  # completions cut above this share: truncation (the health monitor's threshold)
UNSCORED_SHARE = 0.5  # a reward leaving more than this share unscored: unscored


@dataclass(frozen=True)
class Problem:
    """One reason a run may not learn, in the health monitor's vocabulary."""

    kind: str  # reward_collapse, truncation, solved, unscored
    message: str
    fix: str
    blocking: bool  # True: training as set up cannot learn; False: it can, worse than it could

    def __str__(self) -> str:
        return f"[{self.kind}{'' if self.blocking else ', warning'}] {self.message}\n  Fix: {self.fix}"


@dataclass(frozen=True)
class PromptStats:
    index: int  # row in the dataset given to `preflight`
    prompt: str
    mean_reward: float
    spread: float  # standard deviation of the K total rewards (TRL's reward_std per group)
    pass_rate: float | None  # share of the K completions judged correct (None without an `answer` column)
    truncated: float  # share of the K completions cut at max_completion_length


@dataclass(frozen=True)
class RewardStats:
    name: str
    mean: float
    std: float
    unscored: float  # share of samples it gave no usable score (None, raised, NaN, not a number)
    causes: dict[str, int] = field(default_factory=dict)


@dataclass
class PreflightReport:
    num_generations: int
    max_completion_length: int
    temperature: float
    seconds: float
    zero_spread_fraction: float  # share of prompts whose K completions got the same total reward
    truncation_rate: float  # share of completions cut at max_completion_length
    pass_rate: float | None
    prompts: list[PromptStats]
    rewards: list[RewardStats]
    correlations: dict[str, float]  # "a ~ b": Pearson correlation of two reward functions over samples
    finished_within_probe: float  # share of completions that ended (EOS) within probe_length tokens
    probe_length: int
    needed_lengths: dict[str, int]  # p50 / p90 / max tokens of the completions that ended
    suggested_max_completion_length: int
    problems: list[Problem]
    lengths: list[int] = field(default_factory=list, repr=False)  # tokens of each sample up to probe_length
    examples: list[dict] = field(default_factory=list, repr=False)  # a few prompts with their K completions

    @property
    def ok(self) -> bool:
        """True when nothing blocks learning (warnings may stand)."""
        return not any(p.blocking for p in self.problems)

    def kinds(self) -> list[str]:
        return [p.kind for p in self.problems]

    def filter(self, dataset: Dataset) -> Dataset:
        """The rows of `dataset` (the one the pre-flight sampled from) whose prompt showed reward spread,
        i.e. whose K completions did not all get the same total reward. Only the sampled prompts can be
        judged: run the pre-flight with n_prompts covering the rows you want to keep."""
        keep = [p.index for p in self.prompts if p.spread > SPREAD_EPS]
        if keep and max(keep) >= len(dataset):
            raise ValueError("filter() takes the dataset the pre-flight sampled from; this one is shorter.")
        return dataset.select(keep)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ok"] = self.ok
        return out

    def __str__(self) -> str:
        lines = [f"pre-flight: {len(self.prompts)} prompts x {self.num_generations} completions, up to "
                 f"{self.max_completion_length} tokens, temperature {self.temperature:g} ({self.seconds:.0f} s)",
                 f"  prompts without reward spread: {self.zero_spread_fraction:.0%} (what training logs as "
                 f"frac_task_reward_zero_std)",
                 f"  completions cut at {self.max_completion_length} tokens: {self.truncation_rate:.0%}; those that "
                 f"end need {self.needed_lengths.get('p50', 0)} tokens (median), {self.needed_lengths.get('p90', 0)} "
                 f"(90%) -> suggested max_completion_length {self.suggested_max_completion_length}"]
        if self.pass_rate is not None:
            lines.append(f"  completions already correct: {self.pass_rate:.0%}")
        for r in self.rewards:
            extra = f", unscored {r.unscored:.0%} ({describe(Counter(r.causes))})" if r.unscored else ""
            lines.append(f"  reward {r.name}: mean {r.mean:.3f}, std {r.std:.3f}{extra}")
        lines += [str(p) for p in self.problems] or ["  no problem found"]
        lines.append("  verdict: " + ("can learn" if self.ok else "cannot learn as set up"))
        return "\n".join(lines)


def preflight(model, tokenizer, dataset: Dataset | Task, reward_funcs: RewardFunc | Sequence[RewardFunc] | None = None,
              *, preset: str | Preset | None = None, num_generations: int | None = None,
              max_completion_length: int | None = None, temperature: float | None = None,
              reward_weights: Sequence[float] | None = None, n_prompts: int = 32, seed: int = 0,
              match: str | None = None, probe_length: int | None = None) -> PreflightReport:
    """Sample K completions of `n_prompts` prompts from the model as it is, score them as training
    would, and report spread, truncation, unscored rewards and the problems they predict.

    Settings left None are taken as `build_trainer` takes them: from the task (a `Task` given as
    `dataset` brings its rewards, weights, answer matching and completion length), then the preset
    (the hardware's when None). Completions are sampled up to `probe_length` tokens (default
    min(PROBE_FACTOR x length, PROBE_CAP), at least the length) and scored as cut at the completion
    length: the first tokens of a longer sample are distributed exactly as a shorter sample, so the
    same draw tells both what training sees and how long an uncut answer would be.
    """
    start = time.time()
    if isinstance(dataset, Task):
        task = dataset
        dataset, reward_funcs = task.train, reward_funcs or task.reward_funcs
        reward_weights = reward_weights if reward_weights is not None else task.reward_weights
        max_completion_length = max_completion_length or task.max_completion_length
        match = match or task.match
    preset = resolve_preset(preset)
    overrides = {k: v for k, v in dict(num_generations=num_generations, max_completion_length=max_completion_length,
                                       temperature=temperature).items() if v is not None}
    config = make_config(preset, output_dir="runs/preflight", save_strategy="no", **overrides)
    k, length = config.num_generations, config.max_completion_length
    probe = max(length, probe_length or min(PROBE_FACTOR * length, PROBE_CAP))
    funcs = [load_reward_model(f) if isinstance(f, (str, torch.nn.Module)) else f
             for f in guard(reward_funcs or [], patience=10**9)]
    validate_dataset(dataset, set().union(*map(required_columns, funcs)), name="dataset")
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(funcs)
    if len(weights) != len(funcs):
        raise ConfigError(f"{len(weights)} reward weights for {len(funcs)} reward functions: give one weight each.")

    rows = sorted(random.Random(seed).sample(range(len(dataset)), min(n_prompts, len(dataset))))
    picked = dataset.select(rows)
    prompts = list(picked["prompt"])
    ids = generate_ids(model, tokenizer, prompts, samples=k, do_sample=True, max_new_tokens=probe,
                       temperature=config.temperature, top_p=config.top_p, top_k=config.top_k or None,
                       min_p=config.min_p, repetition_penalty=config.repetition_penalty)
    seen = [[seq[:length] for seq in group] for group in ids]  # what training would have sampled
    texts = [tokenizer.decode(seq, skip_special_tokens=True) for group in seen for seq in group]
    completions = [[{"role": "assistant", "content": t}] if not isinstance(prompts[0], str) else t for t in texts]
    eos = eos_token_ids(model, tokenizer)
    cut = [not (seq and seq[-1] in eos) for group in seen for seq in group]
    ended = [len(seq) for group in ids for seq in group if seq and seq[-1] in eos]

    columns = {c: [v for v in picked[c] for _ in range(k)] for c in picked.column_names if c != "prompt"}
    flat_prompts = [p for p in prompts for _ in range(k)]
    scores, causes = _score(funcs, flat_prompts, completions, ids, columns)
    totals = _totals(scores, weights)
    answers = columns.get("answer")
    correct = [is_correct(t, a, match or "final") for t, a in zip(texts, answers, strict=True)] if answers else None

    per_prompt = []
    for i, row in enumerate(rows):
        group = slice(i * k, (i + 1) * k)
        per_prompt.append(PromptStats(
            row, _prompt_text(prompts[i]), float(np.mean(totals[group])), float(np.std(totals[group], ddof=1)),
            float(np.mean(correct[group])) if correct else None, float(np.mean(cut[group]))))
    reward_stats = [RewardStats(_name(f), _nanstat(np.nanmean, s), _nanstat(np.nanstd, s),
                                float(np.mean(np.isnan(s))), dict(c)) for f, s, c in zip(funcs, scores, causes,
                                                                                           strict=True)]
    needed = _needed(ended)
    suggestion = _suggest(ended, len(cut), probe, length)
    report = PreflightReport(
        num_generations=k, max_completion_length=length, temperature=config.temperature, seconds=0.0,
        zero_spread_fraction=float(np.mean([p.spread <= SPREAD_EPS for p in per_prompt])),
        truncation_rate=float(np.mean(cut)), pass_rate=float(np.mean(correct)) if correct else None,
        prompts=per_prompt, rewards=reward_stats, correlations=_correlations(funcs, scores),
        finished_within_probe=len(ended) / max(1, len(cut)), probe_length=probe, needed_lengths=needed,
        suggested_max_completion_length=suggestion, problems=[], lengths=[len(s) for g in ids for s in g],
        examples=[{"prompt": per_prompt[i].prompt, "completions": texts[i * k:(i + 1) * k],
                   "rewards": totals[i * k:(i + 1) * k].tolist()} for i in range(min(3, len(rows)))])
    report.problems = diagnose(report)
    report.seconds = time.time() - start
    return report


def diagnose(report: PreflightReport) -> list[Problem]:
    """The problems the measured numbers predict, each with its fix in this run's own numbers."""
    problems = []
    for r in report.rewards:
        if r.unscored > UNSCORED_SHARE:
            nothing = r.unscored >= 1.0
            problems.append(Problem(
                "unscored", f"Reward '{r.name}' gave no usable score for {r.unscored:.0%} of the samples "
                f"({describe(Counter(r.causes))}).",
                "make it return one float per completion (None only where it does not apply); try it by hand on "
                "the examples in report.examples" + ("; a hub id string must name a reward model you can load: "
                                                    "rewards.reward_model(model, tokenizer)" if nothing else ""),
                blocking=nothing))
    g, temp = report.num_generations, report.temperature
    if report.pass_rate is not None and report.pass_rate >= SOLVED_PASS_RATE:
        problems.append(Problem(
            "solved", f"The model already answers {report.pass_rate:.0%} of the sampled completions right: there is "
            "almost nothing left for RLOO to teach on these prompts.",
            "use harder prompts (or filter out the solved ones with report.filter), or evaluate instead of training.",
            blocking=True))
    elif report.zero_spread_fraction >= COLLAPSE_SHARE:
        why = (f"only {report.pass_rate:.0%} of completions are right" if report.pass_rate is not None
               else f"mean rewards {', '.join(f'{r.name} {r.mean:.2f}' for r in report.rewards)}")
        problems.append(Problem(
            "reward_collapse", f"{report.zero_spread_fraction:.0%} of prompts got the same reward for all {g} "
            f"completions ({why}): their leave-one-out advantage is zero, so training would learn nothing from them.",
            f"give partial credit (e.g. rewards.correct_answer instead of an all-or-nothing match, or add "
            f"rewards.brevity() with a small weight), make the prompts easier, or raise num_generations {g} -> {2 * g} "
            f"and temperature {temp:g} -> {min(temp + 0.3, 1.5):g}.", blocking=True))
    if report.truncation_rate >= TRUNCATION_SHARE:
        problems.append(Problem(
            "truncation", f"{report.truncation_rate:.0%} of completions are cut at max_completion_length="
            f"{report.max_completion_length}; those that end need {report.needed_lengths.get('p90', 0)} tokens "
            f"(90th percentile), and {report.finished_within_probe:.0%} end within {report.probe_length}.",
            f"raise max_completion_length {report.max_completion_length} -> "
            f"{report.suggested_max_completion_length}, ask for a short answer in the prompt, or add "
            "rloo_kit.rewards.brevity() with a small weight.", blocking=False))
    return problems


def _score(funcs: list, prompts: list, completions: list, ids: list, columns: dict) -> tuple[list, list]:
    """Per function: its scores as a float array (NaN = unscored) and the causes of unscored samples."""
    completion_ids = [seq for group in ids for seq in group]
    scores, causes = [], []
    for f in funcs:
        before = Counter(getattr(f, "failures", {}))
        values = f(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)
        values = [float(v) if v is not None and not unusable(v) else math.nan for v in values]
        failed = Counter(getattr(f, "failures", {})) - before
        nones = sum(math.isnan(v) for v in values) - sum(failed.values())
        if nones:
            failed["returned None"] += nones
        scores.append(np.array(values, dtype=float))
        causes.append(failed)
    return scores, causes


def _totals(scores: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """TRL's total: the weighted sum over functions with unscored ones left out (nansum)."""
    return np.nansum(np.stack([w * s for w, s in zip(weights, scores, strict=True)]), axis=0)


def _correlations(funcs: list, scores: list[np.ndarray]) -> dict[str, float]:
    out = {}
    for i in range(len(funcs)):
        for j in range(i + 1, len(funcs)):
            both = ~np.isnan(scores[i]) & ~np.isnan(scores[j])
            a, b = scores[i][both], scores[j][both]
            r = float(np.corrcoef(a, b)[0, 1]) if both.sum() > 2 and a.std() > 0 and b.std() > 0 else math.nan
            out[f"{_name(funcs[i])} ~ {_name(funcs[j])}"] = r
    return out


def _needed(ended: list[int]) -> dict[str, int]:
    if not ended:
        return {}
    return {"p50": int(statistics.median(ended)), "p90": int(np.percentile(ended, 90)), "max": max(ended)}


def _suggest(ended: list[int], total: int, probe: int, length: int) -> int:
    """A completion length that lets ~90% of answers end: the 90th percentile of the lengths of the
    completions that ended (counting cut ones as needing the whole probe), rounded up to 8."""
    need = sorted(ended + [probe] * (total - len(ended)))
    if not need:
        return length
    p90 = need[min(len(need) - 1, math.ceil(0.9 * len(need)) - 1)]
    return int(min(probe, max(8, math.ceil(p90 / 8) * 8)))


def _nanstat(fn, values: np.ndarray) -> float:
    return float(fn(values)) if not np.isnan(values).all() else math.nan


def _name(f) -> str:
    return getattr(f, "__name__", type(f).__name__)


def _prompt_text(prompt) -> str:
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


def fit_task(task: Task, report: PreflightReport, preset: str | Preset | None = None) -> tuple[Task, list[str]]:
    """A task's own defaults from what the pre-flight measured, and why, for a task that leaves its
    completion length open (a file task; the arithmetic task fixes its own). When more than a fifth of
    the completions are cut, the length training and evaluation share becomes the suggested one (within
    half the preset's sequence length), else the pre-flight's; when most are cut (the model rambles),
    the brevity reward that made the demo learn joins with weight 0.2, sized to the answers."""
    from .rewards import brevity

    if task.max_completion_length is not None:
        return task, []
    notes = []
    limit = resolve_preset(preset).max_seq_length // 2
    if report.truncation_rate > 0.2 and report.suggested_max_completion_length > report.max_completion_length:
        length = min(report.suggested_max_completion_length, limit)
        task = task.replace(max_completion_length=length)
        notes.append(f"completion length {report.max_completion_length} -> {length}: {report.truncation_rate:.0%} "
                     f"of completions were cut; 90% of those that end need {report.needed_lengths.get('p90')} tokens")
    else:
        task = task.replace(max_completion_length=report.max_completion_length)
    names = {_name(f) for f in task.reward_funcs}
    if report.truncation_rate >= TRUNCATION_SHARE and "brevity" not in names:
        answers = [a for a in task.train["answer"][:200]] if "answer" in task.train.column_names else []
        longest = max((len(str(x)) for a in answers for x in (a if isinstance(a, list) else [a])), default=10)
        task = task.with_reward(brevity(max_chars=max(40, 4 * longest)), 0.2)
        notes.append(f"+ brevity reward (weight 0.2): {report.truncation_rate:.0%} of completions ran past "
                     f"{report.max_completion_length} tokens, so shorter answers are paid a little")
    return task, notes
