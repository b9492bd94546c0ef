"""The live view without a browser: its text lines on a real tiny-model run, the Stop flag ending a run
with the adapter kept, the widget's state after real steps, and the rule that picks widget or text."""

import html

import pytest
from transformers import TrainerCallback

import rloo_kit
from rloo_kit import build_trainer, train
from rloo_kit.diagnostics import HealthMonitor, Thresholds
from rloo_kit.notebook.live import REPLACED_CALLBACKS, LiveView, attach_live_view, choose_mode

from .helpers import length_reward


def first_char_reward(prompts, completions, **kwargs):
    return [float((c[0]["content"] if isinstance(c, list) else c)[:1].isdigit()) for c in completions]


def trainer_for(tiny_model_dir, tmp_path, overrides, steps, **kwargs):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    model = rloo_kit.attach_lora(model, preset="cpu", r=4, alpha=8)
    data = rloo_kit.arithmetic_task(n_train=32, n_test=4)["train"]
    return build_trainer(model, tok, data, [length_reward, first_char_reward], preset="cpu",
                         output_dir=str(tmp_path), max_steps=steps, **{**overrides, **kwargs})


def shown_callbacks(trainer) -> set[str]:
    return {type(cb).__name__ for cb in trainer.callback_handler.callbacks}


def test_text_lines_replace_the_dict_print(tiny_model_dir, tmp_path, cpu_tiny_overrides, capsys, monkeypatch):
    monkeypatch.delenv("RLOO_KIT_LIVE", raising=False)
    trainer = trainer_for(tiny_model_dir, tmp_path, cpu_tiny_overrides, steps=3)
    view = trainer.live_view
    assert isinstance(view, LiveView) and view.mode == "text"  # pytest is no Jupyter kernel
    assert not shown_callbacks(trainer) & set(REPLACED_CALLBACKS)  # disable_tqdm's PrinterCallback is gone
    train(trainer)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert [line.split(" | ")[0] for line in lines] == ["step 1/3", "step 2/3", "step 3/3"]
    for line in lines:
        assert "reward " in line and "length_reward" in line and "first_char_reward" in line
        assert "entropy" in line and "clipped" in line and "ETA" in line and "loss" not in line
    assert "{'" not in out  # no dict of every metric
    assert "Done: 3 steps" in out
    assert view.updates == 3 and [h["step"] for h in view.history] == [1, 2, 3]


def test_live_false_leaves_transformers_display(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    trainer = trainer_for(tiny_model_dir, tmp_path, cpu_tiny_overrides, steps=1, live=False)
    assert not hasattr(trainer, "live_view") and "PrinterCallback" in shown_callbacks(trainer)


class ClickStopAt(TrainerCallback):
    """Presses the Stop button while step `at` runs, as a person would."""

    def __init__(self, view, at):
        self.view, self.at = view, at

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.at:
            self.view.renderer.stop_button.click()


def test_stop_button_ends_the_run_after_the_step_and_keeps_the_adapter(tiny_model_dir, tmp_path,
                                                                        cpu_tiny_overrides):
    trainer = trainer_for(tiny_model_dir, tmp_path, cpu_tiny_overrides, steps=50, live=False)
    view = attach_live_view(trainer, mode="widget")
    view.display = False  # no frontend in pytest
    trainer.add_callback(ClickStopAt(view, at=2))
    train(trainer)  # returns normally: a stop is not an interruption
    assert trainer.state.global_step == 2 and view.stopped_at == 2
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "interrupted").exists()
    assert view.renderer.stop_button.disabled and view.renderer.stop_button.description == "Stopped"
    assert "Stopped at step 2 of 50" in view.renderer.progress_text.value


def test_stop_in_text_mode(tiny_model_dir, tmp_path, cpu_tiny_overrides, capsys):
    trainer = trainer_for(tiny_model_dir, tmp_path, cpu_tiny_overrides, steps=50, live=False)
    view = attach_live_view(trainer, mode="text")

    class StopAt3(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 2:
                view.stop()

    trainer.add_callback(StopAt3())
    train(trainer)
    assert trainer.state.global_step == 3
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert "Stopped at step 3 of 50" in capsys.readouterr().out


def test_widget_state_after_real_steps(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    # a monitor that fires at once (truncation: any clipped completion counts), to see a banner appear
    monitor = HealthMonitor(Thresholds(warmup_steps=1, patience=1, clipped_ratio=0.0))
    trainer = trainer_for(tiny_model_dir, tmp_path, cpu_tiny_overrides, steps=3, live=False, monitor=monitor)
    view = attach_live_view(trainer, mode="widget")
    view.display = False
    assert not shown_callbacks(trainer) & set(REPLACED_CALLBACKS)
    assert monitor.verbose is False  # its verdicts become banners, not log lines
    train(trainer)
    assert view.updates == 3
    assert (view.renderer.progress_bar.value, view.renderer.progress_bar.max) == (3, 3)
    assert "step 3 / 3" in view.renderer.progress_text.value and "Done: 3 steps" in view.renderer.progress_text.value
    assert view.renderer.curves.value[:8] == b"\x89PNG\r\n\x1a\n" and len(view.renderer.curves.value) > 5000
    kinds = [d.kind for d in monitor.diagnoses]
    assert "truncation" in kinds
    assert len(view.renderer.banners.children) == len(kinds)
    truncation = next(d for d in monitor.diagnoses if d.kind == "truncation")  # others may come first
    banner = view.renderer.banners.children[monitor.diagnoses.index(truncation)].value
    assert "truncation" in banner and "Fix:" in banner and truncation.fix.split()[0] in banner
    groups = view.latest_groups()
    assert groups and all(len(g["completions"]) == 2 for g in groups)  # num_generations=2
    for g in groups:
        advantages = [c["advantage"] for c in g["completions"]]
        rewards = [c["reward"] for c in g["completions"]]
        # RLOO with K=2: each advantage is the reward minus the other's (up to the KL term in the reward)
        assert advantages[0] == pytest.approx(-advantages[1], abs=1e-4)
        assert set(g["completions"][0]["rewards"]) == {"length_reward", "first_char_reward"}
        assert all(r is not None for r in rewards)
    shown = view.renderer.samples.value  # each group's prompt once, with its completions, as the HTML escapes them
    assert shown.count("<b>prompt:</b>") == len(groups)
    for g in groups:
        assert f"<b>prompt:</b> {html.escape(g['prompt'])}</div>" in shown
        assert all(html.escape(c["completion"]) in shown for c in g["completions"])
    assert "advantage" in view.renderer.samples.value
    assert view.renderer.widget.children[0].children[-1] is view.renderer.stop_button


def test_mode_rule(monkeypatch):
    monkeypatch.delenv("RLOO_KIT_LIVE", raising=False)
    assert choose_mode() == "text"  # no kernel here
    for forced in ("widget", "text", "off"):
        monkeypatch.setenv("RLOO_KIT_LIVE", forced)
        assert choose_mode() == forced
    monkeypatch.setenv("RLOO_KIT_LIVE", "table")
    with pytest.raises(ValueError, match="RLOO_KIT_LIVE"):
        choose_mode()


def test_mode_rule_in_a_kernel(monkeypatch):
    """A kernel started by a Jupyter server renders widgets; the same kernel under papermill does not."""
    import rloo_kit.notebook.live as live

    monkeypatch.delenv("RLOO_KIT_LIVE", raising=False)

    class Shell:
        config = {"IPKernelApp": {}}
        user_ns = {}

    monkeypatch.setattr(live, "_kernel_shell", lambda: Shell())
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert choose_mode() == "text"  # papermill / nbclient: no server, no widget frontend
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/01_train.ipynb")
    monkeypatch.setattr(live, "_started_by_a_headless_runner", lambda: False)
    assert choose_mode() == "widget"
    monkeypatch.setattr(live, "_started_by_a_headless_runner", lambda: True)
    assert choose_mode() == "text"


def test_off_attaches_nothing(tiny_model_dir, tmp_path, cpu_tiny_overrides, monkeypatch):
    monkeypatch.setenv("RLOO_KIT_LIVE", "off")
    trainer = trainer_for(tiny_model_dir, tmp_path, cpu_tiny_overrides, steps=1)
    assert getattr(trainer, "live_view", None) is None and "PrinterCallback" in shown_callbacks(trainer)


def test_compare_browser_steps_and_filters():
    """03_evaluation's widget: base vs adapter side by side, Next/Previous, and the filters."""
    from rloo_kit.evaluation import EvalReport
    from rloo_kit.notebook.widgets import compare_browser

    def report(correct):
        rows = [{"prompt": f"Add {i} and 1.", "completion": f"{i + 1}" if ok else "hmm", "tokens": 2,
                 "answer": str(i + 1), "predicted": None, "correct": ok, "correct_answer": float(ok)}
                for i, ok in enumerate(correct)]
        return EvalReport(sum(correct) / len(correct), {1: 0.5}, {"correct_answer": 0.5}, 2.0, 0.0, 1, rows)

    base, adapter = report([False, True, False]), report([True, True, False])
    box = compare_browser(base, adapter, mode="widget")
    choice, (prev, slider, nxt, position), shown = box.children[0], box.children[1].children, box.children[2]
    assert "Add 0 and 1." in shown.value and "✗" in shown.value and "✓" in shown.value
    nxt.click()
    assert slider.value == 1 and "Add 1 and 1." in shown.value
    prev.click()
    prev.click()
    assert slider.value == 2 and "Add 2 and 1." in shown.value  # wraps around
    choice.value = "where they differ"
    assert slider.max == 0 and "Add 0 and 1." in shown.value and "1 of 1" in position.value
    choice.value = "where the adapter is wrong"
    assert "Add 2 and 1." in shown.value
    table = compare_browser(base, adapter, mode="text")  # papermill / terminal: a table instead
    assert list(table["prompt"]) == ["Add 0 and 1.", "Add 1 and 1.", "Add 2 and 1."]


def test_curves_take_a_small_share_of_the_run_and_end_drawn(tiny_model_dir, tmp_path, cpu_tiny_overrides,
                                                             monkeypatch):
    """A redraw dearer than the steps (as ~1 s of matplotlib is beside a small model's step) is skipped until the
    curves' share of the run allows it; the end draws the last steps."""
    import time

    from rloo_kit.notebook import live_display

    real, drawn = live_display.curves_png, []

    def slow_curves(history, diagnoses):
        drawn.append(len(history))
        time.sleep(0.5)
        return real(history, diagnoses)

    monkeypatch.setattr(live_display, "curves_png", slow_curves)
    trainer = trainer_for(tiny_model_dir, tmp_path, cpu_tiny_overrides, steps=5, live=False)
    view = attach_live_view(trainer, mode="widget")
    view.display = False
    train(trainer)
    assert view.updates == 5 and drawn[0] == 1 and drawn[-1] == 5  # the first step, and the end
    assert len(drawn) < 5 and view.renderer.curve_draws == len(drawn)
    assert view.renderer.curves.value[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_converged_run_is_a_note_not_a_warning():
    from rloo_kit.diagnostics import Diagnosis
    from rloo_kit.notebook.live_display import banner_html

    converged, collapse = Diagnosis("converged", 48, "rose, flat", "stop"), Diagnosis("reward_collapse", 9, "m", "f")
    assert not converged.failure and collapse.failure
    assert "ℹ converged" in banner_html(converged) and "Next:" in banner_html(converged)
    assert "⚠ reward collapse" in banner_html(collapse) and "Fix:" in banner_html(collapse)
