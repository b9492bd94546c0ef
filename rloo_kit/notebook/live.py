"""The live view of a running trainer: what a person watches while RLOO trains, and a Stop button.

`attach_live_view(trainer)` (called by `build_trainer`) adds a `LiveView` callback that, at every
logged step, shows the progress (step / max steps, elapsed, ETA); RLOO's curves — the total reward
and each reward function's mean, KL, entropy, mean completion length and clipped ratio, never the
loss, which is ~0 by design (redrawn as often as 5% of the run's time allows, and at its end); the
health monitor's diagnoses as they start, each a banner with its fix; and the latest prompts with their
K completions, rewards and leave-one-out advantages.

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
of the view's own: rloo_kit.patches.kernel_clicks, the one adapter to ipykernel's internals). On older kernels
the button says so, and interrupting the kernel still keeps the adapter (in `output_dir/interrupted`).

This module keeps the run's state (the callback); rloo_kit.notebook.live_display draws it; rloo_kit.notebook.curves
defines the curves, the same panels `plots.plot_training` draws after the run.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from importlib.util import find_spec

from transformers import TrainerCallback

from .live_display import TextLines, WidgetPanel

MODES = ("widget", "text", "off")
ENV = "RLOO_KIT_LIVE"
# transformers' own displays of a run, replaced by the live view: the notebook table, tqdm's bar, the dict print.
REPLACED_CALLBACKS = ("NotebookProgressCallback", "ProgressCallback", "PrinterCallback")
NO_WIDGET_RUNNERS = ("papermill", "nbconvert", "nbclient", "jupyter-execute", "jupyter_execute")
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


class LiveView(TrainerCallback):
    """A TrainerCallback that keeps a run's state as it goes and has `renderer` show it (`TextLines` or
    `WidgetPanel`, rloo_kit.notebook.live_display); `stop()` ends the run cleanly after the current step.

    After a run: `history` (the logged steps), `updates` (how many times the view was redrawn),
    `stopped_at` (the step a stop took effect, or None). `display=False` builds the widget without showing it.
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
        self._start_time, self._start_step = time.time(), 0
        self.renderer = WidgetPanel(on_stop=self.stop) if mode == "widget" else TextLines()
        if mode == "widget" and monitor is not None:
            monitor.verbose = False  # its verdicts become banners instead of log lines

    def stop(self) -> None:
        """Ask the run to end after the current step (thread-safe; the Stop button calls this)."""
        self._stop.set()
        self.renderer.stopping()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    # TrainerCallback ------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self.history, self.updates, self.stopped_at, self._shown_diagnoses = [], 0, None, 0
        self._stop.clear()
        self._start_time, self._start_step = time.time(), state.global_step
        self.renderer.begin(self, state, show=self.display)
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
        self.renderer.update(self, state, self._new_diagnoses())
        self.updates += 1
        return control

    def on_train_end(self, args, state, control, **kwargs):
        elapsed = _hms(time.time() - self._start_time)
        if self.stopped_at is not None:
            summary = (f"Stopped at step {self.steps(state, ' of ')} after {elapsed}; "
                       f"train() saves the adapter to {args.output_dir}/adapter.")
        else:
            summary = f"Done: {state.global_step} steps in {elapsed}."
        self.renderer.end(self, state, summary, self._new_diagnoses())
        return control

    # the state the renderers draw -----------------------------------------------------------------
    @property
    def diagnoses(self) -> list:
        return list(getattr(self.monitor, "diagnoses", []) or [])

    def _new_diagnoses(self) -> list:
        found = self.diagnoses
        new, self._shown_diagnoses = found[self._shown_diagnoses:], len(found)
        return new

    def _clock(self):
        """The run's time budget, None where it is bounded by steps (a StepBudget keeps its best step, no clock)."""
        budget = getattr(self.trainer, "time_budget", None)
        return budget if budget is not None and budget.minutes is not None else None

    def steps(self, state, of: str = "/") -> str:
        """'12/40' (`of` between the two), or for a run bounded by time '12 (10-min budget)'."""
        budget = self._clock()
        return (f"{state.global_step} ({budget.minutes:g}-min budget)" if budget is not None
                else f"{state.global_step}{of}{state.max_steps}")

    def progress(self, state) -> tuple[int, int]:
        """(done, total) for a progress bar: steps, or a budget's seconds."""
        budget = self._clock()
        if budget is not None:
            return int(budget.seconds - budget.left()), max(int(budget.seconds), 1)
        return state.global_step, max(state.max_steps, 1)

    def times(self, state) -> tuple[str, str]:
        """(elapsed, ETA) as h:mm:ss, the ETA from this run's own steps so far (a resumed run's too), or what
        is left of a time budget."""
        elapsed = time.time() - self._start_time
        budget = self._clock()
        if budget is not None:
            return _hms(elapsed), _hms(budget.left())
        done = state.global_step - self._start_step
        left = max(state.max_steps - state.global_step, 0)
        return _hms(elapsed), _hms(elapsed / done * left) if done > 0 else "?"

    def latest_groups(self, n_prompts: int = SHOWN_PROMPTS) -> list[dict]:
        """The latest step's first prompts, each with its completions, their rewards and advantages, read
        from what RLOOTrainer keeps for logging (patch `trl_logs`); nothing is generated again; none where the
        door does not trust that read here."""
        from ..patches import allowed
        from ..patches.private import trl_logs

        logs = trl_logs(self.trainer) if allowed("trl_logs", self.trainer) else {}
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
