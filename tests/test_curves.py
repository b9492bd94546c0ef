"""The training curves are defined once (rloo_kit.notebook.curves): plots.plot_training after a run and the live
view's PNG while it runs draw the same panels from the same log keys."""

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from rloo_kit.diagnostics import Diagnosis  # noqa: E402
from rloo_kit.notebook import curves, plots  # noqa: E402
from rloo_kit.notebook.live_display import curves_png  # noqa: E402


def history(steps=4, gold=False):
    rows = []
    for s in range(1, steps + 1):
        row = {"step": s, "reward": 0.1 * s, "rewards/correct/mean": 0.05 * s, "rewards/brevity/mean": 0.5,
               "kl": 0.01 * s, "entropy": 1.0, "completions/mean_length": 20.0 + s, "completions/clipped_ratio": 0.1}
        if gold:
            row.update({"gold/mean": 0.3 - 0.01 * s, "proxy/mean": 0.2 + 0.1 * s})
        rows.append(row)
    rows.append({"step": steps, "train_runtime": 12.0})  # the end-of-training summary logs no curve
    return rows


def titles(axes):
    return [ax.get_title() for ax in axes if ax.get_title()]  # twin axes have none


def test_the_panels_and_their_lines():
    fig = Figure()
    axes = curves.draw(fig, {"run": history()}, {"run": [Diagnosis("truncation", 3, "cut", "longer")]})
    assert titles(axes) == [p.title for p in curves.PANELS]
    reward = axes[0]
    assert [line.get_label() for line in reward.lines if not line.get_label().startswith("_")] == [
        "total", "correct", "brevity"]
    assert list(reward.lines[0].get_xdata()) == [1, 2, 3, 4]  # the summary row is skipped
    assert any(list(line.get_xdata()) == [3, 3] for line in axes[1].lines)  # the diagnosis, on every panel


def test_gold_gets_a_panel_only_where_it_was_logged_and_runs_overlay():
    assert titles(plots.plot_training(history(gold=True)).axes)[-1] == curves.GOLD.title
    fig = plots.plot_training({"bad": history(), "fixed": history(steps=6)})
    reward = fig.axes[0]
    assert [line.get_label() for line in reward.lines] == ["bad", "fixed"]  # no per-function lines when overlaid
    assert curves.GOLD.title not in titles(fig.axes)


def test_the_live_view_draws_the_same_panels():
    png = curves_png(history(gold=True), [])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert curves.panels({"run": history(gold=True)})[-1] is curves.GOLD
