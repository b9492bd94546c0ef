"""A short supervised warm-start for a model that never calls its tools: RLOO reinforces what the model samples,
so a call it never writes is never learned (the pre-flight's `tool_unused`). A handful of worked examples (the
call, its result, the answer) trained with TRL's SFTTrainer into the same LoRA adapter teach the syntax; RLOO then
learns when a call pays. The examples come from the task's own training rows, through a tool's `demonstrate(text)`
(the call a row's question needs, or None), so no answer outside the training split is shown.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable

from datasets import Dataset

from ..errors import ConfigError
from .protocol import CALL_CLOSE, CALL_OPEN, Tool, find_call, run_call
from .syntax import template_kwargs

log = logging.getLogger("rloo_kit")

WARM_EXAMPLES = 32  # worked examples: enough to teach a syntax, too few to teach the task
WARM_EPOCHS = 3


def demonstrate_hint(tool: str) -> str:
    """How to give a tool of one's own the worked call a warm-start needs."""
    return (f"A warm-start writes each example's call with the tool's `demonstrate(question)`; `{tool}` has none: "
            f"beside it in its file, `{tool}.demonstrate = my_function`, which returns the call that answers a "
            f"training question (the text `{tool}(...)` with the question's values) or None where it cannot.")


def demonstrating_tool(tools: list[Tool]) -> Tool:
    """The first of `tools` that can show a worked call (a `demonstrate` attribute): what a warm-start teaches.

    Args:
        tools: the task's tools.

    Returns:
        That tool; ConfigError, saying how to give one, where none can.
    """
    tool = next((t for t in tools if getattr(t.fn, "demonstrate", None)), None)
    if tool is None:
        raise ConfigError(f"A warm-start needs a tool that can show a worked call (a `demonstrate(question)` "
                          f"attribute, as the built-in calculator has): give one, or train without the "
                          f"warm-start. {demonstrate_hint(tools[0].name if tools else 'your_tool')}")
    return tool


def worked_examples(task, tool: Tool, n: int = WARM_EXAMPLES,
                    demonstrate: Callable[[str], str | None] | None = None, tokenizer=None) -> Dataset:
    """Up to `n` training rows of `task` (made with `tools.with_tools`) as prompt / completion pairs whose
    completion calls `tool`, reads its result and answers: `<tool>call</tool><result>r</result> The answer is a.`,
    or the same in the model's own tool-call format for a task told in it (then `tokenizer` is needed, and the
    rows carry the tools for the chat template).
    `demonstrate(question) -> call text` (default: the tool's own `demonstrate`) picks the call; rows it returns
    None for, or whose call does not give the row's answer, are left out."""
    from ..rewards import accepted_answers, is_correct
    from . import in_model_format
    from .syntax import syntax_for

    demonstrate = demonstrate or getattr(tool.fn, "demonstrate", None)
    if demonstrate is None:
        raise ValueError(f"Tool '{tool.name}' has no demonstrate(question) -> call: pass demonstrate= to say which "
                         "call answers a training question.")
    task = in_model_format(task, tokenizer) if tokenizer is not None else task
    syntax = syntax_for(task.tool_format, tokenizer)
    params = list(tool.schema["function"].get("parameters", {}).get("properties", {}))
    prompts, completions = [], []
    for row in task.train:
        question = row["prompt"] if isinstance(row["prompt"], str) else row["prompt"][-1]["content"]
        call = demonstrate(question)
        parsed = find_call(f"{CALL_OPEN}{call}{CALL_CLOSE}", [tool]) if call else None
        if parsed is None:
            continue
        result, ok = run_call(parsed, [tool])
        answer = accepted_answers(row["answer"])[0]
        if not ok or not is_correct(result, answer):
            continue
        by_name = {**dict(zip(params, parsed.args, strict=False)), **(parsed.kwargs or {})}
        named = dataclasses.replace(parsed, args=(), kwargs=by_name)  # a JSON call names its arguments
        prompts.append(row["prompt"])
        completions.append(syntax.worked_completion(row["prompt"], named, result, answer))
        if len(prompts) == n:
            break
    if not prompts:
        raise ValueError(f"No training row of task '{task.name}' has a call of '{tool.name}' that gives its answer.")
    columns = {"prompt": prompts, "completion": completions}
    if syntax.template_kwargs(task.tools):  # the chat template renders the tools in each example's prompt; as
        columns["tools"] = [json.dumps(template_kwargs(task.tools)["tools"])] * len(prompts)  # JSON, which TRL reads
    return Dataset.from_dict(columns)


def warm_start(model, tokenizer, examples: Dataset, *, output_dir: str, preset=None, epochs: int = WARM_EPOCHS,
               learning_rate: float = 5e-4, batch_size: int = 8, seed: int = 0):
    """Train the model's LoRA adapter on `examples` (prompt / completion) with TRL's SFTTrainer, loss on the
    completions only; returns the model, ready for RLOO (whose reference is then this warmed model)."""
    from trl import SFTConfig, SFTTrainer

    from ..hardware import detect_hardware
    from ..patches import patch_before_trainer
    from ..presets import PINNED_TRAINING_DEFAULTS, device_flags, resolve_preset

    flags = device_flags(detect_hardware(), resolve_preset(preset))
    config = SFTConfig(output_dir=output_dir, num_train_epochs=epochs, learning_rate=learning_rate,
                       per_device_train_batch_size=batch_size, completion_only_loss=True, save_strategy="no",
                       report_to="none", logging_steps=1, seed=seed, disable_tqdm=True,
                       **PINNED_TRAINING_DEFAULTS, **flags)
    patch_before_trainer(model, config)  # TRL's CPU path for its log-prob kernel among them (SFT shares it)
    trainer = SFTTrainer(model=model, args=config, train_dataset=examples, processing_class=tokenizer)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    if losses:
        log.info(f"tool warm-start: {len(examples)} worked examples x {epochs} epochs, loss {losses[0]:.2f} -> "
                 f"{losses[-1]:.2f}")
    return trainer.model
