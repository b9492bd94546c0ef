"""RLOO's training curves, defined once: the panels `plots.plot_training` draws after a run and the live
view redraws while it runs. Never the loss, which is ~0 by design in RLOO."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Panel:
    """One plot: a logged key per step, and optionally a second key on its own right axis (dashed)."""

    title: str
    key: str
    twin: str | None = None
    twin_label: str = ""
    twin_limits: tuple[float, float] | None = None


REWARD = Panel("reward (mean)", "reward")  # with one run, each reward function's mean (rewards/<fn>/mean) beside it
PANELS = (
    REWARD,
    Panel("KL to the reference", "kl"),
    Panel("entropy", "entropy"),
    Panel("completion length", "completions/mean_length", twin="completions/clipped_ratio",
          twin_label="clipped ratio (dashed)", twin_limits=(-0.05, 1.05)),
)
# a panel of its own where reward_models.GoldMonitor logged a held-back score beside the proxy reward
GOLD = Panel("gold (held back) vs proxy", "gold/mean", twin="proxy/mean", twin_label="proxy (dashed)")
# and one where the run had tools: how many completions called one, and how many of the calls were valid
TOOLS = Panel("tool calls", "tools/call_rate", twin="tools/valid_call_rate", twin_label="valid calls (dashed)",
              twin_limits=(-0.05, 1.05))
DIAGNOSIS_COLORS = {"high_variance": "tab:orange", "kl_explosion": "tab:red", "reward_collapse": "tab:purple",
                    "sampling_noise": "tab:blue", "converged": "teal", "truncation": "tab:brown",
                    "reward_hacking": "tab:pink", "memorisation": "tab:olive", "answer_habit": "gold",
                    "tool_unused": "tab:gray", "tool_invalid": "tab:cyan"}


def points(history: Sequence[dict], key: str) -> tuple[list, list]:
    """(steps, values) of `key` in a log history, skipping the steps that did not log it."""
    pts = [(h["step"], h[key]) for h in history if h.get(key) is not None and "step" in h]
    return [s for s, _ in pts], [v for _, v in pts]


def reward_names(history: Sequence[dict]) -> list[str]:
    """The reward functions whose means the latest logged step carries (TRL's rewards/<fn>/mean)."""
    last = next((h for h in reversed(history) if "reward" in h), {})
    return [k[len("rewards/"):-len("/mean")] for k in last if k.startswith("rewards/") and k.endswith("/mean")]


def panels(runs: Mapping[str, Sequence[dict]]) -> tuple[Panel, ...]:
    return PANELS + tuple(p for p in (GOLD, TOOLS) if any(points(h, p.key)[0] for h in runs.values()))


def draw(fig, runs: Mapping[str, Sequence[dict]], diagnoses: Mapping[str, Sequence] | None = None) -> list:
    """Draw every panel on `fig` (a matplotlib Figure, pyplot's or not) for each named log history, with
    each run's diagnoses as dashed lines; return the axes. One run also gets its per-function rewards."""
    shown, diagnoses = panels(runs), diagnoses or {}
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    for ax, panel in zip(axes, shown, strict=True):
        twin = ax.twinx() if panel.twin else None
        for name, history in runs.items():
            line, = ax.plot(*points(history, panel.key), marker=".", lw=2, label=name if len(runs) > 1 else "total")
            if panel is REWARD and len(runs) == 1:
                for fn in reward_names(history):
                    ax.plot(*points(history, f"rewards/{fn}/mean"), marker=".", lw=1, label=fn)
            if twin is not None:
                twin.plot(*points(history, panel.twin), ls="--", marker="x", ms=4, color=line.get_color())
            for d in diagnoses.get(name, ()):
                color = DIAGNOSIS_COLORS.get(d.kind, "gray")
                ax.axvline(d.step, color=color, ls="--", lw=1)
                if panel is REWARD:
                    ax.annotate(d.kind, (d.step, 1), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                                va="top", color=color)
        if twin is not None:
            twin.set_ylabel(panel.twin_label, fontsize=8)
            if panel.twin_limits:
                twin.set_ylim(*panel.twin_limits)
        if not any(len(line.get_xdata()) for line in ax.lines):
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    if len(axes[0].lines) > 1:
        axes[0].legend(fontsize=7)
    return list(axes)
