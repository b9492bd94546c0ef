"""How the live view shows a run: one line per step on stdout (`TextLines`), or an ipywidgets panel with
progress, a Stop button, banners, curves and the latest completions (`WidgetPanel`). Both draw from the
`LiveView` callback's state (rloo_kit.notebook.live; `view` below: its `history`, `monitor`, `diagnoses`,
`stopped_at`, `times(state)` and `latest_groups()`) and keep none of their own, as transformers'
`NotebookTrainingTracker` draws for its `NotebookProgressCallback`."""

from __future__ import annotations

import html
import io
import time
from collections.abc import Callable, Sequence

from ..patches.kernel_clicks import deliver_clicks_while_busy
from . import curves

_CELL = "style='border:1px solid #ccc;padding:2px 6px;vertical-align:top;text-align:left'"
# The most of a run's time that redrawing the curves may take. A redraw costs ~1 s of matplotlib on a slow 2-core
# CPU, a tenth of a small CPU step and more than a whole step of a small model on a GPU; the progress, banners and
# completions still change every step, and the last step's curves are always drawn.
CURVES_SHARE = 0.05


def fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}" if abs(value) < 1e-2 and value else f"{value:.{digits}f}"


class TextLines:
    """One concise line per logged step, in place of transformers' progress bar and its dict of every metric."""

    def begin(self, view, state, show: bool) -> None:
        pass

    def update(self, view, state, new_diagnoses: Sequence) -> None:
        print(step_line(view, state), flush=True)
        if view.monitor is not None and not getattr(view.monitor, "verbose", True):
            for d in new_diagnoses:  # a verbose monitor has logged them already
                print(f"Health monitor: {d}", flush=True)

    def stopping(self) -> None:
        print("Stop requested: training ends after this step; the adapter is kept.", flush=True)

    def end(self, view, state, summary: str, new_diagnoses: Sequence) -> None:
        print(summary, flush=True)


def step_line(view, state) -> str:
    logs = view.history[-1]
    elapsed, eta = view.times(state)
    per_fn = " ".join(f"{n} {fmt(logs.get(f'rewards/{n}/mean'))}" for n in curves.reward_names(view.history))
    parts = [f"step {view.steps(state)}", f"{elapsed} elapsed, ETA {eta}",
             f"reward {fmt(logs.get('reward'))}" + (f" [{per_fn}]" if per_fn else "")]
    if logs.get("kl") is not None:
        parts.append(f"kl {fmt(logs['kl'], 4)}")
    if logs.get("validation/accuracy") is not None:
        parts.append(f"validation {fmt(logs['validation/accuracy'], 2)}")
    if logs.get("gold/mean") is not None:
        parts.append(f"gold {fmt(logs['gold/mean'])} (proxy {fmt(logs.get('proxy/mean'))})")
    if logs.get("tools/call_rate") is not None:
        valid = logs.get("tools/valid_call_rate")
        parts.append(f"tool calls {fmt(logs['tools/call_rate'], 2)}" + (f" ({fmt(valid, 2)} valid)" if valid is not
                                                                           None else ""))
    parts += [f"entropy {fmt(logs.get('entropy'))}", f"length {fmt(logs.get('completions/mean_length'), 1)}",
              f"clipped {fmt(logs.get('completions/clipped_ratio'), 2)}"]
    return " | ".join(parts)


class WidgetPanel:
    """The ipywidgets view; its parts carry CSS classes (rloo-live-*) that the browser test finds."""

    def __init__(self, on_stop: Callable[[], None]):
        import ipywidgets as w

        self.progress_bar = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(width="240px"))
        self.progress_text = _with_class(w.HTML(), "rloo-live-progress")
        self.stop_button = _with_class(w.Button(
            description="Stop after this step", button_style="danger", icon="stop",
            tooltip="End training after the current step; the adapter is kept.", layout=w.Layout(width="auto")),
            "rloo-live-stop")
        self.stop_button.on_click(lambda _: on_stop())
        self.banners = _with_class(w.VBox(), "rloo-live-banners")
        self.curves = _with_class(w.Image(format="png", layout=w.Layout(max_width="100%")), "rloo-live-curves")
        self.samples = _with_class(w.HTML(), "rloo-live-samples")
        self.note = w.HTML()
        header = w.HBox([self.progress_bar, self.progress_text, self.stop_button],
                        layout=w.Layout(align_items="center", justify_content="space-between"))
        self.widget = _with_class(w.VBox([header, self.note, self.banners, self.curves, self.samples]),
                                  "rloo-live-view")
        self._reset_curves()
        if not deliver_clicks_while_busy(self.stop_button):
            self.note.value = ("<small>This kernel handles a click only after the running cell: to stop now, "
                               "interrupt the kernel (the adapter is kept in output_dir/interrupted).</small>")

    def begin(self, view, state, show: bool) -> None:
        done, total = view.progress(state)
        self.progress_bar.max, self.progress_bar.value = total, done
        self.progress_bar.bar_style = ""
        self.stop_button.disabled, self.stop_button.description = False, "Stop after this step"
        self.banners.children = ()
        self._reset_curves()
        self.samples.value = "<i>The latest completions appear after the first step.</i>"
        self.progress_text.value = progress_html(view, state)
        if show:
            from IPython.display import display

            display(self.widget)

    def update(self, view, state, new_diagnoses: Sequence) -> None:
        done, total = view.progress(state)
        self.progress_bar.max, self.progress_bar.value = total, done
        self.progress_text.value = progress_html(view, state)
        self._add_banners(new_diagnoses)
        if self._drawing <= CURVES_SHARE * (time.perf_counter() - self._since):
            self._draw_curves(view)
        self.samples.value = samples_html(view.latest_groups(), view.history[-1]["step"])

    def stopping(self) -> None:
        self.stop_button.disabled, self.stop_button.description = True, "Stopping after this step…"

    def end(self, view, state, summary: str, new_diagnoses: Sequence) -> None:
        self._add_banners(new_diagnoses)
        if view.history and self._drawn != len(view.history):
            self._draw_curves(view)  # the run's last steps, where a redraw was skipped
        self.progress_text.value = progress_html(view, state, final=summary)
        self.stop_button.disabled = True
        self.stop_button.description = "Stopped" if view.stopped_at is not None else "Finished"

    def _reset_curves(self) -> None:
        """No curves yet, and the time budget for drawing them starts now (a run's begin)."""
        self.curves.value = b""
        self.curve_draws, self._drawing, self._drawn, self._since = 0, 0.0, 0, time.perf_counter()

    def _draw_curves(self, view) -> None:
        """Redraw the curves from the history so far, and count the time it took against `CURVES_SHARE`."""
        start = time.perf_counter()
        self.curves.value = curves_png(view.history, view.diagnoses)
        self.curve_draws, self._drawn = self.curve_draws + 1, len(view.history)
        self._drawing += time.perf_counter() - start

    def _add_banners(self, diagnoses: Sequence) -> None:
        import ipywidgets as w

        for d in diagnoses:
            self.banners.children = (*self.banners.children, _with_class(w.HTML(banner_html(d)), "rloo-live-banner"))
            if d.failure and self.progress_bar.bar_style != "danger":
                self.progress_bar.bar_style = "warning"


def _with_class(widget, css_class: str):
    widget.add_class(css_class)
    return widget


def progress_html(view, state, final: str | None = None) -> str:
    elapsed, eta = view.times(state)
    head = f"<b>step {view.steps(state, ' / ')}</b> · {elapsed} elapsed"
    tail = f" · {html.escape(final)}" if final else f" · ETA {eta}"
    last = view.history[-1] if view.history else {}
    reward = f" · reward {fmt(last['reward'])}" if last.get("reward") is not None else ""
    return f"<span style='font-family:monospace'>{head}{reward}{tail}</span>"


def banner_html(d) -> str:
    """An orange warning for a failure, a blue note for what is not one (`converged`)."""
    edge, fill, mark = ("#d9822b", "#fff4e5", "⚠") if d.failure else ("#2b7bd9", "#e8f1fc", "ℹ")
    return (f"<div style='border-left:5px solid {edge};background:{fill};color:#222;padding:6px 10px;margin:3px 0'>"
            f"<b>{mark} {html.escape(d.kind.replace('_', ' '))}</b> (from step {d.step}): {html.escape(d.message)}"
            f"<br><b>{d.fix_label}:</b> {html.escape(d.fix)}</div>")


def curves_png(history: Sequence[dict], diagnoses: Sequence) -> bytes:
    """A PNG of the run's curves so far (`curves.draw`), without pyplot: no global figure, no extra display."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    runs = {"run": history}
    fig = Figure(figsize=(2.75 * len(curves.panels(runs)), 2.6), dpi=80, layout="constrained")
    FigureCanvasAgg(fig)
    curves.draw(fig, runs, {"run": diagnoses})
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def samples_html(groups: Sequence[dict], step) -> str:
    """The latest step's prompts, each with its K completions, their rewards and leave-one-out advantages."""
    if not groups:
        return ""
    names = list(groups[0]["completions"][0]["rewards"])
    head = "".join(f"<th {_CELL}>{html.escape(n)}</th>" for n in ["completion", *names, "reward", "advantage"])
    parts = [f"<b>Latest completions</b> (step {step}; advantage: its KL-penalised reward minus the mean of the "
             "other completions of its prompt)"]
    for g in groups:
        rows = []
        for c in g["completions"]:
            adv = c["advantage"]
            color = "#fff" if adv is None or adv == 0 else "#e6f4ea" if adv > 0 else "#fce8e6"
            vals = [fmt(c["rewards"].get(n)) if c["rewards"].get(n) is not None else "-" for n in names]
            rows.append(f"<tr style='background:{color};color:#222'><td {_CELL}><pre style='margin:0;white-space:"
                        f"pre-wrap'>{html.escape(c['completion'])}</pre></td>"
                        + "".join(f"<td {_CELL}>{v}</td>" for v in vals)
                        + f"<td {_CELL}>{fmt(c['reward'])}</td><td {_CELL}><b>{fmt(adv)}</b></td></tr>")
        parts.append(f"<div style='margin-top:6px'><b>prompt:</b> {html.escape(g['prompt'])}</div>"
                     f"<table style='border-collapse:collapse;font-size:12px'><tr>{head}</tr>{''.join(rows)}</table>")
    return "".join(parts)
