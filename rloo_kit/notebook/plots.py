"""Matplotlib figures: training curves with diagnosis markers, and base-vs-adapter comparisons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt

from ..diagnostics import Diagnosis
from ..evaluation import EvalReport
from . import curves


def plot_training(runs: Mapping[str, Sequence[dict]] | Sequence[dict],
                  diagnoses: Mapping[str, Sequence[Diagnosis]] | Sequence[Diagnosis] = (), title: str = ""):
    """Reward, KL, entropy and length per step (`curves.PANELS`, the live view's too). `runs` is one
    log_history or {name: log_history} to overlay several (e.g. a broken run and its fix); diagnoses are
    drawn as dashed lines. Where a held-back gold score was logged (`gold/mean`), a last panel shows it
    (solid) beside the proxy reward measured on the same held-out prompts (`proxy/mean`, dashed, right axis)."""
    if not isinstance(runs, Mapping):
        runs, diagnoses = {"run": runs}, {"run": diagnoses}
    fig = plt.figure(figsize=(4 * len(curves.panels(runs)), 3.2))
    curves.draw(fig, runs, diagnoses if isinstance(diagnoses, Mapping) else {})
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_comparison(base: EvalReport, tuned: EvalReport, names: tuple[str, str] = ("base", "adapter")):
    """Bars of accuracy / pass@k / mean rewards, and histograms of completion length."""
    a, b = base.summary(), tuned.summary()
    keys = [k for k in a if (k == "accuracy" or k.startswith(("pass@", "reward/"))) and a[k] is not None]
    fig, (bars, hist) = plt.subplots(1, 2, figsize=(11, 3.6))
    x = range(len(keys))
    bars.bar([i - 0.2 for i in x], [a[k] for k in keys], 0.4, label=names[0])
    bars.bar([i + 0.2 for i in x], [b[k] for k in keys], 0.4, label=names[1])
    bars.set_xticks(list(x), keys, rotation=30, ha="right", fontsize=8)
    bars.set_title("held-out metrics")
    bars.legend()
    for report, name in ((base, names[0]), (tuned, names[1])):
        hist.hist([r["tokens"] for r in report.completions], bins=20, alpha=0.6, label=name)
    hist.set_title("completion length (tokens)")
    hist.legend()
    fig.tight_layout()
    return fig


def plot_reward_distribution(base: EvalReport, tuned: EvalReport, reward: str,
                             names: tuple[str, str] = ("base", "adapter")):
    """Histogram of one reward function's per-completion scores, base vs adapter."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for report, name in ((base, names[0]), (tuned, names[1])):
        ax.hist([r[reward] for r in report.completions if r.get(reward) is not None], bins=20, alpha=0.6, label=name)
    ax.set_title(f"{reward} per completion")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_preflight(report):
    """The pre-flight at a glance: each sampled prompt's mean reward with its spread (a prompt without
    spread teaches nothing), and how long the completions ran against the completion length: those of the prompts
    trained (with the short-answer system prompt, where the pre-flight chose it)."""
    report = report.chosen
    fig, (spread, lengths) = plt.subplots(1, 2, figsize=(11, 3.4))
    ordered = sorted(report.prompts, key=lambda p: p.mean_reward)
    xs = range(len(ordered))
    colors = ["tab:blue" if p.spread > 1e-8 else "tab:gray" for p in ordered]
    spread.bar(xs, [p.mean_reward for p in ordered], yerr=[p.spread for p in ordered], color=colors, capsize=2)
    spread.set_title(f"mean reward per prompt, ± spread (gray: no spread, {report.zero_spread_fraction:.0%})")
    spread.set_xlabel("sampled prompts, sorted")
    lengths.hist(report.lengths, bins=20, color="tab:blue", alpha=0.7)
    lengths.axvline(report.max_completion_length, color="tab:red", ls="--",
                    label=f"completion length {report.max_completion_length} ({report.truncation_rate:.0%} cut)")
    lengths.axvline(report.suggested_max_completion_length, color="tab:green", ls=":",
                    label=f"suggested {report.suggested_max_completion_length}")
    lengths.set_title(f"completion tokens (sampled up to {report.probe_length})")
    lengths.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_validation(validation: dict | None):
    """The validation curve of a run that kept its best step (RunReport.validation; --minutes or --keep best):
    greedy accuracy on the training rows set apart, by step, with the kept step marked. None draws nothing."""
    if not validation or not validation.get("curve"):
        print("no validation curve: the run kept its last step (MINUTES or KEEP_BEST; --minutes or --keep best)")
        return None
    points = [p for p in validation["curve"] if p["accuracy"] is not None]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([p["step"] for p in points], [p["accuracy"] for p in points], marker="o")
    if validation.get("kept_step") is not None:
        ax.axvline(validation["kept_step"], linestyle="--", color="tab:green", label="kept")
        ax.legend()
    ax.set(xlabel="step", ylabel="accuracy", ylim=(-0.02, 1.02),
           title=f"validation ({validation['rows']} training rows set apart)")
    fig.tight_layout()
    return fig
