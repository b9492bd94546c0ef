"""Widgets for looking at what an adapter learned, for a person who would rather click than edit code.

`compare_browser(base, adapter)` steps through the held-out prompts of two evaluation reports and
shows the base model's and the adapter's completions side by side, marked right or wrong, with their
rewards. `prompt_playground(model, tokenizer)` answers a prompt you type, with the adapter off and on.
Where no widget can show (a terminal, papermill), they fall back to a table / do nothing, by the same
rule as the live view (`live.choose_mode`).
"""

from __future__ import annotations

import html

from ..evaluation import EvalReport, disabled_adapter, generate, sample_table
from .live import choose_mode

_CELL = "border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left"


def _groups(report: EvalReport) -> list[list[dict]]:
    """The report's completion rows, one list per prompt (its `samples` completions)."""
    n = max(report.samples, 1)
    rows = report.completions
    return [rows[i:i + n] for i in range(0, len(rows), n)]


def _side(title: str, rows: list[dict], reward_names: list[str]) -> str:
    right = [r.get("correct") for r in rows]
    score = f" · {sum(bool(x) for x in right)}/{len(right)} right" if any(x is not None for x in right) else ""
    parts = [f"<div style='flex:1;min-width:0'><b>{html.escape(title)}</b>{score}"]
    for r in rows:
        mark = {True: "✓", False: "✗"}.get(r.get("correct"), "")
        color = {True: "#e6f4ea", False: "#fce8e6"}.get(r.get("correct"), "#f6f6f6")
        rewards = ", ".join(f"{n} {r[n]:.2f}" for n in reward_names if isinstance(r.get(n), (int, float)))
        parts.append(f"<div style='background:{color};color:#222;margin:4px 0;padding:4px 8px'>"
                     f"<pre style='margin:0;white-space:pre-wrap'>{html.escape(str(r['completion']))}</pre>"
                     f"<small>{mark} {html.escape(rewards)} · {r.get('tokens', '?')} tokens</small></div>")
    parts.append("</div>")
    return "".join(parts)


def _right(rows: list[dict]) -> int:
    return sum(bool(r.get("correct")) for r in rows)


_FILTERS = {"all prompts": lambda b, a: True,  # compare_browser's choices: (base rows, adapter rows) -> shown
            "where they differ": lambda b, a: _right(b) != _right(a),
            "where the adapter is wrong": lambda b, a: _right(a) < len(a)}


def _pair_html(i: int, base: list[dict], adapter: list[dict], names: tuple[str, str], reward_names: list[str]) -> str:
    """One held-out prompt, its answer, and both models' completions side by side."""
    answer = base[0].get("answer")
    return (f"<div style='margin:4px 0'><b>prompt {i + 1}:</b> {html.escape(str(base[0]['prompt']))}"
            + (f" &nbsp;·&nbsp; <b>answer:</b> {html.escape(str(answer))}" if answer is not None else "")
            + "</div><div style='display:flex;gap:12px'>"
            + _side(names[0], base, reward_names) + _side(names[1], adapter, reward_names) + "</div>")


def compare_browser(base: EvalReport, adapter: EvalReport, *, names: tuple[str, str] = ("base", "adapter"),
                    mode: str | None = None):
    """A widget to browse held-out prompts with both models' completions side by side; filters show only
    the prompts where the two differ in correctness, or where the adapter is wrong. In a terminal or
    under papermill: `evaluation.sample_table` for the first prompts."""
    if (mode or choose_mode()) != "widget":
        return sample_table(base, adapter, n=10)
    import ipywidgets as w

    pairs = list(zip(_groups(base), _groups(adapter), strict=False))
    if not pairs:
        return w.HTML("<i>No completions in these reports.</i>")
    known = {"prompt", "completion", "tokens", "answer", "predicted", "correct"}
    reward_names = [k for k in base.completions[0] if k not in known]
    choice = w.ToggleButtons(options=list(_FILTERS), value="all prompts", style={"button_width": "auto"})
    slider = w.IntSlider(min=0, max=len(pairs) - 1, value=0, description="prompt", continuous_update=False)
    prev_button, next_button = w.Button(description="Previous", icon="arrow-left"), w.Button(
        description="Next", icon="arrow-right")
    shown = w.HTML()
    shown.add_class("rloo-compare-pair")
    position = w.HTML()
    state = {"indices": list(range(len(pairs)))}

    def render(*_):
        indices = state["indices"]
        if not indices:
            shown.value, position.value = "<i>No prompt matches this filter.</i>", ""
            return
        i = indices[slider.value]
        position.value = f"{slider.value + 1} of {len(indices)} ({len(pairs)} held-out prompts)"
        shown.value = _pair_html(i, *pairs[i], names, reward_names)

    def refilter(*_):
        keep = _FILTERS[choice.value]
        state["indices"] = [i for i, (b, a) in enumerate(pairs) if keep(b, a)]
        slider.max = max(len(state["indices"]) - 1, 0)
        slider.value = 0
        render()

    def step(delta):
        def go(_):
            if state["indices"]:
                slider.value = (slider.value + delta) % len(state["indices"])
        return go

    slider.observe(render, names="value")
    choice.observe(refilter, names="value")
    prev_button.on_click(step(-1))
    next_button.on_click(step(+1))
    render()
    box = w.VBox([choice, w.HBox([prev_button, slider, next_button, position]), shown])
    box.add_class("rloo-compare-browser")
    return box


def prompt_playground(model, tokenizer, *, max_new_tokens: int = 64, mode: str | None = None):
    """Type a prompt, press Generate: greedy completions with the adapter off (the base) and on, side by
    side. Needs a model with a LoRA adapter. None where no widget can show."""
    if (mode or choose_mode()) != "widget":
        return None
    import ipywidgets as w

    text = w.Textarea(value="Add 12 and 30.", placeholder="a prompt, as a user would write it",
                      layout=w.Layout(width="60%", height="60px"))
    button = w.Button(description="Generate", button_style="primary", icon="play")
    shown = w.HTML()

    def run(_):
        button.disabled, shown.value = True, "<i>generating…</i>"
        try:
            prompt = [{"role": "user", "content": text.value}]
            with disabled_adapter(model):
                (base,), _ = generate(model, tokenizer, [prompt], max_new_tokens=max_new_tokens)
            (tuned,), _ = generate(model, tokenizer, [prompt], max_new_tokens=max_new_tokens)
            rows = [{"completion": base[0]}], [{"completion": tuned[0]}]
            shown.value = ("<div style='display:flex;gap:12px'>" + _side("base", rows[0], [])
                           + _side("adapter", rows[1], []) + "</div>")
        except Exception as e:  # shown, not raised: a widget callback has no cell to fail in
            shown.value = f"<b>Error:</b> {html.escape(f'{type(e).__name__}: {e}')}"
        finally:
            button.disabled = False

    button.on_click(run)
    box = w.VBox([w.HBox([text, button]), shown])
    box.add_class("rloo-prompt-playground")
    return box
