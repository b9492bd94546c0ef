"""The live view of a running trainer: what a person watches while RLOO trains, and a Stop button.

`attach_live_view(trainer)` (called by `build_trainer`) adds a `LiveView` callback that, at every
logged step, shows the progress (step / max steps, elapsed, ETA); RLOO's curves — the total reward
and each reward function's mean, KL, entropy, mean completion length and clipped ratio, never the
loss, which is ~0 by design; the health monitor's diagnoses as they start, each a banner with its
fix; and the latest prompts with their K completions, rewards and leave-one-out advantages.

Where it shows, and how (the rule, in order):
1. `RLOO_KIT_LIVE=widget|text|off` in the environment decides, when set.
2. Outside an IPython kernel (a terminal, a script, the CLI): text.
3. Without ipywidgets: text.
4. In a kernel whose frontend renders widgets: Colab (`google.colab` imported), VS Code
   (`__vsc_ipynb_file__` in the namespace), or a Jupyter server (JupyterLab, Notebook 7: the
   server sets `JPY_SESSION_NAME` for the kernels it starts) that is not papermill / nbconvert /
   nbclient running the notebook (their kernel is started by them, not by a server, and they
   render no widget): an ipywidgets view. Otherwise: text.

Text is one concise line per logged step on stdout (`step 3/30 ...  reward ...`), which replaces
transformers' progress bar and its printed dict of every metric. In widget mode the view replaces
transformers' notebook progress table (so nothing is shown twice) and the health monitor's log
lines become banners. In both modes `LiveView.stop()` (the Stop button) sets
`control.should_training_stop` after the current step, so `rloo_kit.train()` ends normally and
writes `output_dir/adapter`, exactly as the monitor's `stop_on` does.

A click reaches a kernel that is busy running the training cell only if the kernel can dispatch it
off the main thread: ipykernel 7 can (each Stop button's messages are routed to a kernel subshell
of the view's own). On older kernels the button says so, and interrupting the kernel still keeps
the adapter (in `output_dir/interrupted`).
"""

from __future__ import annotations

import html
import io
import logging
import os
import sys
import threading
import time
from importlib.util import find_spec

from transformers import TrainerCallback

log = logging.getLogger("rloo_kit")

MODES = ("widget", "text", "off")
ENV = "RLOO_KIT_LIVE"
# transformers' own displays of a run, replaced by the live view: the notebook table, tqdm's bar, the dict print.
REPLACED_CALLBACKS = ("NotebookProgressCallback", "ProgressCallback", "PrinterCallback")
NO_WIDGET_RUNNERS = ("papermill", "nbconvert", "nbclient", "jupyter-execute", "jupyter_execute")
CURVES = (  # (title, [(log key, label)]) per panel; rewards/<fn>/mean are added to the first
    ("reward", [("reward", "total")]),
    ("KL to the reference", [("kl", "kl")]),
    ("entropy", [("entropy", "entropy")]),
    ("completion length", [("completions/mean_length", "mean tokens")]),
)
GOLD_CURVE = ("gold vs proxy (held-out)", [("gold/mean", "gold"), ("proxy/mean", "proxy")])  # reward_models.GoldMonitor
SHOWN_PROMPTS = 2  # prompts (each with its K completions) shown from the latest step


def choose_mode() -> str:
    """'widget', 'text' or 'off' for this process, by the rule in the module docstring."""
    forced = os.environ.get(ENV, "").strip().lower()
    if forced:
        if forced not in MODES:
            raise ValueError(f"{ENV}={forced!r}: use one of {', '.join(MODES)} (or unset it to decide automatically).")
        return forced
    shell = _kernel_shell()
    if shell is None or find_spec("ipywidgets") is None:
        return "text"
    return "widget" if _frontend_renders_widgets(shell) else "text"


def _kernel_shell():
    """The IPython shell when this process is a Jupyter kernel, else None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    try:
        return shell if shell is not None and "IPKernelApp" in shell.config else None
    except Exception:
        return None


def _frontend_renders_widgets(shell) -> bool:
    if "google.colab" in sys.modules or "__vsc_ipynb_file__" in getattr(shell, "user_ns", {}):
        return True
    return bool(os.environ.get("JPY_SESSION_NAME")) and not _started_by_a_headless_runner()


def _started_by_a_headless_runner() -> bool:
    """True when this kernel's parent process is papermill, nbconvert or nbclient (e.g. papermill run
    from a notebook cell, whose kernel inherits the server's JPY_SESSION_NAME)."""
    try:
        import psutil

        cmdline = " ".join(psutil.Process(os.getppid()).cmdline()).lower()
    except Exception:
        return False
    return any(name in cmdline for name in NO_WIDGET_RUNNERS)


def attach_live_view(trainer, monitor=None, *, mode: str | None = None) -> LiveView | None:
    """Add a LiveView to `trainer` in place of transformers' progress display; return it (also kept as
    `trainer.live_view`), or None when the mode is 'off' or in the other processes of a run under
    `accelerate launch` (one view per run, on the main process: the metrics it shows are already
    gathered across processes by TRL). `monitor` defaults to trainer.health_monitor; `mode` to `choose_mode()`."""
    mode = mode or choose_mode()
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: use one of {', '.join(MODES)}.")
    if mode == "off" or not trainer.is_world_process_zero():
        return None
    for cb in list(trainer.callback_handler.callbacks):
        if type(cb).__name__ in REPLACED_CALLBACKS:
            trainer.callback_handler.remove_callback(cb)
    view = LiveView(trainer, monitor if monitor is not None else getattr(trainer, "health_monitor", None), mode=mode)
    trainer.add_callback(view)
    trainer.live_view = view
    return view


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _text(message) -> str:
    """The text of a prompt or completion in chat form (list of messages) or plain."""
    if isinstance(message, list) and message and isinstance(message[-1], dict):
        return str(message[-1].get("content", ""))
    return str(message)


def _fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}" if abs(value) < 1e-2 and value else f"{value:.{digits}f}"


class LiveView(TrainerCallback):
    """A TrainerCallback that shows a run as it goes (see the module docstring); `stop()` ends it cleanly.

    After a run: `history` (the logged steps), `updates` (how many times the view was redrawn),
    `stopped_at` (the step a stop took effect, or None).
    """

    def __init__(self, trainer, monitor=None, *, mode: str = "text", display: bool = True):
        if mode not in ("widget", "text"):
            raise ValueError(f"LiveView mode {mode!r}: 'widget' or 'text'.")
        self.trainer, self.monitor, self.mode, self.display = trainer, monitor, mode, display
        self.history: list[dict] = []
        self.updates = 0
        self.stopped_at: int | None = None
        self._stop = threading.Event()
        self._shown_diagnoses = 0
        self._start_time = time.time()
        self._start_step = 0
        self.widget = None
        if mode == "widget":
            self._build_widget()
            if monitor is not None:
                monitor.verbose = False  # its verdicts become banners instead of log lines

    # the Stop button ------------------------------------------------------------------------------
    def stop(self, *_) -> None:
        """Ask the run to end after the current step (thread-safe; the Stop button calls this)."""
        self._stop.set()
        if self.mode == "widget":
            self.stop_button.disabled = True
            self.stop_button.description = "Stopping after this step…"
        else:
            print("Stop requested: training ends after this step; the adapter is kept.", flush=True)

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    # TrainerCallback ------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self.history, self.updates, self.stopped_at, self._shown_diagnoses = [], 0, None, 0
        self._stop.clear()
        self._start_time, self._start_step = time.time(), state.global_step
        if self.mode == "widget":
            self._reset_widget(state)
            if self.display:
                from IPython.display import display

                display(self.widget)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self._stop.is_set() and self.stopped_at is None:
            self.stopped_at = state.global_step
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "reward" not in logs:  # eval logs and the end-of-training summary
            return control
        self.history.append({**logs, "step": state.global_step})
        new = self._new_diagnoses()
        if self.mode == "widget":
            self._update_widget(state, new)
        else:
            self._print_step(state, logs, new)
        self.updates += 1
        return control

    def on_train_end(self, args, state, control, **kwargs):
        new = self._new_diagnoses()
        elapsed = _hms(time.time() - self._start_time)
        if self.stopped_at is not None:
            summary = (f"Stopped at step {state.global_step} of {state.max_steps} after {elapsed}; "
                       f"train() saves the adapter to {args.output_dir}/adapter.")
        else:
            summary = f"Done: {state.global_step} steps in {elapsed}."
        if self.mode == "widget":
            for d in new:
                self._add_banner(d)
            self.progress_text.value = self._progress_html(state, final=summary)
            self.stop_button.disabled = True
            self.stop_button.description = "Stopped" if self.stopped_at is not None else "Finished"
        else:
            print(summary, flush=True)
        return control

    # shared ---------------------------------------------------------------------------------------
    def _new_diagnoses(self) -> list:
        found = list(getattr(self.monitor, "diagnoses", []) or [])
        new, self._shown_diagnoses = found[self._shown_diagnoses:], len(found)
        return new

    def _eta(self, state) -> tuple[str, str]:
        elapsed = time.time() - self._start_time
        done = state.global_step - self._start_step
        left = max(state.max_steps - state.global_step, 0)
        eta = _hms(elapsed / done * left) if done > 0 else "?"
        return _hms(elapsed), eta

    def _reward_names(self) -> list[str]:
        return [k[len("rewards/"):-len("/mean")] for k in (self.history[-1] if self.history else {})
                if k.startswith("rewards/") and k.endswith("/mean")]

    # text -----------------------------------------------------------------------------------------
    def _print_step(self, state, logs: dict, new_diagnoses: list) -> None:
        elapsed, eta = self._eta(state)
        per_fn = " ".join(f"{n} {_fmt(logs.get(f'rewards/{n}/mean'))}" for n in self._reward_names())
        parts = [f"step {state.global_step}/{state.max_steps}", f"{elapsed} elapsed, ETA {eta}",
                 f"reward {_fmt(logs.get('reward'))}" + (f" [{per_fn}]" if per_fn else "")]
        if logs.get("kl") is not None:
            parts.append(f"kl {_fmt(logs['kl'], 4)}")
        if logs.get("gold/mean") is not None:
            parts.append(f"gold {_fmt(logs['gold/mean'])} (proxy {_fmt(logs.get('proxy/mean'))})")
        parts += [f"entropy {_fmt(logs.get('entropy'))}", f"length {_fmt(logs.get('completions/mean_length'), 1)}",
                  f"clipped {_fmt(logs.get('completions/clipped_ratio'), 2)}"]
        print(" | ".join(parts), flush=True)
        if self.monitor is not None and not getattr(self.monitor, "verbose", True):
            for d in new_diagnoses:  # a verbose monitor has logged them already
                print(f"Health monitor: {d}", flush=True)

    # widget ---------------------------------------------------------------------------------------
    def _build_widget(self) -> None:
        import ipywidgets as w

        self.progress_bar = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(width="240px"))
        self.progress_text = w.HTML()
        self.progress_text.add_class("rloo-live-progress")
        self.stop_button = w.Button(description="Stop after this step", button_style="danger", icon="stop",
                                    tooltip="End training after the current step; the adapter is kept.",
                                    layout=w.Layout(width="auto"))
        self.stop_button.add_class("rloo-live-stop")
        self.stop_button.on_click(self.stop)
        self.banners = w.VBox()
        self.banners.add_class("rloo-live-banners")
        self.curves = w.Image(format="png", layout=w.Layout(max_width="100%"))
        self.curves.add_class("rloo-live-curves")
        self.samples = w.HTML()
        self.samples.add_class("rloo-live-samples")
        self.note = w.HTML()
        header = w.HBox([self.progress_bar, self.progress_text, self.stop_button],
                        layout=w.Layout(align_items="center", justify_content="space-between"))
        self.widget = w.VBox([header, self.note, self.banners, self.curves, self.samples])
        self.widget.add_class("rloo-live-view")
        if not _deliver_clicks_while_busy(self.stop_button):
            self.note.value = ("<small>This kernel handles a click only after the running cell: to stop now, "
                               "interrupt the kernel (the adapter is kept in output_dir/interrupted).</small>")

    def _reset_widget(self, state) -> None:
        self.progress_bar.max = max(state.max_steps, 1)
        self.progress_bar.value = state.global_step
        self.progress_bar.bar_style = ""
        self.stop_button.disabled = False
        self.stop_button.description = "Stop after this step"
        self.banners.children = ()
        self.curves.value = b""
        self.samples.value = "<i>The latest completions appear after the first step.</i>"
        self.progress_text.value = self._progress_html(state)

    def _progress_html(self, state, final: str | None = None) -> str:
        elapsed, eta = self._eta(state)
        head = f"<b>step {state.global_step} / {state.max_steps}</b> · {elapsed} elapsed"
        tail = f" · {html.escape(final)}" if final else f" · ETA {eta}"
        last = self.history[-1] if self.history else {}
        reward = f" · reward {_fmt(last['reward'])}" if last.get("reward") is not None else ""
        return f"<span style='font-family:monospace'>{head}{reward}{tail}</span>"

    def _update_widget(self, state, new_diagnoses: list) -> None:
        self.progress_bar.max = max(state.max_steps, 1)
        self.progress_bar.value = state.global_step
        self.progress_text.value = self._progress_html(state)
        for d in new_diagnoses:
            self._add_banner(d)
        self.curves.value = self._render_curves()
        self.samples.value = self._samples_html()

    def _add_banner(self, d) -> None:
        import ipywidgets as w

        banner = w.HTML(
            "<div style='border-left:5px solid #d9822b;background:#fff4e5;color:#222;padding:6px 10px;margin:3px 0'>"
            f"<b>⚠ {html.escape(d.kind.replace('_', ' '))}</b> (from step {d.step}): {html.escape(d.message)}"
            f"<br><b>Fix:</b> {html.escape(d.fix)}</div>")
        banner.add_class("rloo-live-banner")
        self.banners.children = (*self.banners.children, banner)
        if self.progress_bar.bar_style != "danger":
            self.progress_bar.bar_style = "warning"

    def _render_curves(self) -> bytes:
        """A PNG of RLOO's curves so far, drawn without pyplot (no global figure, no extra display)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11, 2.6), dpi=80, layout="constrained")
        FigureCanvasAgg(fig)
        curves = CURVES + ((GOLD_CURVE,) if any("gold/mean" in h for h in self.history) else ())
        axes = fig.subplots(1, len(curves))
        steps = [h["step"] for h in self.history]
        diagnoses = list(getattr(self.monitor, "diagnoses", []) or [])
        for ax, (title, series) in zip(axes, curves, strict=False):
            if title == "reward":
                series = series + [(f"rewards/{n}/mean", n) for n in self._reward_names()]
            for i, (key, label) in enumerate(series):
                pts = [(s, h[key]) for s, h in zip(steps, self.history, strict=False) if h.get(key) is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=False), marker="o", ms=3, lw=2.2 if i == 0 else 1.2, label=label)
            if title == "completion length":
                twin = ax.twinx()
                pts = [(s, h["completions/clipped_ratio"]) for s, h in zip(steps, self.history, strict=False)
                       if h.get("completions/clipped_ratio") is not None]
                if pts:
                    twin.plot(*zip(*pts, strict=False), color="tab:red", ls="--", marker=".", label="clipped ratio")
                twin.set_ylim(-0.05, 1.05)
                twin.set_ylabel("clipped ratio", color="tab:red")
            for d in diagnoses:
                ax.axvline(d.step, color="tab:orange", ls=":", lw=1)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=7)
            if len(series) > 1:
                ax.legend(fontsize=7)
            if not ax.lines:
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()

    def latest_groups(self, n_prompts: int = SHOWN_PROMPTS) -> list[dict]:
        """The latest step's first prompts, each with its completions, their rewards and advantages, read
        from what RLOOTrainer keeps for logging (`trainer._logs`); nothing is generated again."""
        logs = getattr(self.trainer, "_logs", None) or {}
        prompts, completions = list(logs.get("prompt", ())), list(logs.get("completion", ()))
        rewards = {name: list(v) for name, v in dict(logs.get("rewards", {})).items()}
        advantages = list(logs.get("advantages", ()))
        weights = getattr(self.trainer, "reward_weights", None)
        weights = weights.tolist() if hasattr(weights, "tolist") else [1.0] * len(rewards)
        groups: list[dict] = []
        for i, (p, c) in enumerate(zip(prompts, completions, strict=False)):
            text = _text(p)
            if not groups or groups[-1]["prompt"] != text:
                if len(groups) == n_prompts:
                    break
                groups.append({"prompt": text, "completions": []})
            per_fn = {name: vals[i] for name, vals in rewards.items() if i < len(vals)}
            valid = [(v, wt) for v, wt in zip(per_fn.values(), weights, strict=False) if v is not None and v == v]
            groups[-1]["completions"].append({
                "completion": _text(c), "rewards": per_fn,
                "reward": sum(v * wt for v, wt in valid) if valid else None,
                "advantage": advantages[i] if i < len(advantages) else None})
        return groups

    def _samples_html(self) -> str:
        groups = self.latest_groups()
        if not groups:
            return ""
        names = list(groups[0]["completions"][0]["rewards"])
        cell = "style='border:1px solid #ccc;padding:2px 6px;vertical-align:top;text-align:left'"
        head = "".join(f"<th {cell}>{html.escape(n)}</th>" for n in ["completion", *names, "reward", "advantage"])
        parts = [f"<b>Latest completions</b> (step {self.history[-1]['step'] if self.history else '?'}; "
                 "advantage: its KL-penalised reward minus the mean of the other completions of its prompt)"]
        for g in groups:
            rows = []
            for c in g["completions"]:
                adv = c["advantage"]
                color = "#fff" if adv is None or adv == 0 else "#e6f4ea" if adv > 0 else "#fce8e6"
                vals = [_fmt(c["rewards"].get(n)) if c["rewards"].get(n) is not None else "-" for n in names]
                rows.append(f"<tr style='background:{color};color:#222'><td {cell}><pre style='margin:0;white-space:"
                            f"pre-wrap'>{html.escape(c['completion'])}</pre></td>"
                            + "".join(f"<td {cell}>{v}</td>" for v in vals)
                            + f"<td {cell}>{_fmt(c['reward'])}</td><td {cell}><b>{_fmt(adv)}</b></td></tr>")
            parts.append(f"<div style='margin-top:6px'><b>prompt:</b> {html.escape(g['prompt'])}</div>"
                         f"<table style='border-collapse:collapse;font-size:12px'><tr>{head}</tr>"
                         f"{''.join(rows)}</table>")
        return "".join(parts)


# Clicks while the training cell runs ------------------------------------------------------------------
_SUBSHELL: dict[str, str] = {}


def _deliver_clicks_while_busy(widget) -> bool:
    """Route `widget`'s messages from the frontend to a kernel subshell (ipykernel >= 7), whose thread
    handles them while the main thread runs the training cell. False where that is not possible (no
    kernel, an older ipykernel), in which case the click waits for the cell to end."""
    try:
        from ipykernel.kernelbase import Kernel

        from .patches import allowed

        if not Kernel.initialized() or not allowed("ipykernel_subshell"):
            return False
        channel = getattr(Kernel.instance(), "shell_channel_thread", None)
        comm = getattr(widget, "comm", None)
        if channel is None or comm is None or not hasattr(comm, "_reply_subshell_for"):
            return False
        if "id" not in _SUBSHELL:
            done, box = threading.Event(), {}

            def create():
                try:
                    box["id"] = channel.manager._create_subshell()
                finally:
                    done.set()

            channel.io_loop.add_callback(create)
            if not done.wait(10) or "id" not in box:
                return False
            _SUBSHELL["id"] = box["id"]
        subshell = _SUBSHELL["id"]
        comm._reply_subshell_for = lambda data, default: subshell
        return True
    except Exception as e:  # a kernel without subshells: the click is handled after the cell
        log.debug("live view: clicks wait for the cell to end (%s)", e)
        return False
