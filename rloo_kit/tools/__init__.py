"""RLOO with tools: rollouts that call plain Python functions, a tool's tokens weighing nothing in the loss.

`protocol`: how a call is written, parsed and run (`calculator` is one tool, ready to use); `syntax`: the kit's
call syntax, or the model's own where its chat template has one (Qwen2.5, Llama 3.x); `rollout`: the loop
that runs calls and samples on; `warmup`: a few worked examples, trained with TRL's SFTTrainer, for a model that
never calls; `with_tools`: a task or dataset whose prompts tell the model its tools. The
trainer is TRL's own, given `tools=` through `rloo_kit.build_trainer` (the door's patch `tool_rollouts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .protocol import Tool, as_tools, calculator, instructions
from .rollout import MAX_CALLS, Rollout, roll_out
from .syntax import KIT, TemplateSyntax, has_own_tool_format, tell_prompt, untell_prompt
from .warmup import demonstrating_tool, warm_start, worked_examples

__all__ = ["BUILT_IN", "KIT", "MAX_CALLS", "TEMPLATE_TOOL_COMPLETION_LENGTH", "TOOL_COMPLETION_LENGTH", "Rollout",
           "TemplateSyntax", "Tool", "as_tools", "calculator", "demonstrating_tool", "has_own_tool_format",
           "in_model_format", "instructions", "load_tools", "roll_out", "tell_prompt", "untell_prompt", "warm_start",
           "with_tools", "worked_examples"]

BUILT_IN = {"calculator": calculator}  # tools the command line names by name alone
TOOL_COMPLETION_LENGTH = 48  # tokens for a call, its result and a short answer (the products task's, measured)
# the same in a model's own format, whose call is JSON and whose result is a tool message and a new turn: the
# products task's worked example is 72 tokens in Qwen2.5's format (35 in the kit's) on SmolLM2's tokenizer
TEMPLATE_TOOL_COMPLETION_LENGTH = 96
SPLITS = ("train", "test", "validation")  # a Task's datasets, each told its tools


def load_tools(specs: Sequence[str]) -> list[Tool]:
    """Tools as the command line names them: a built-in by name (`calculator`), or `PATH.py:FUNCTION` from a
    local file; each checked as `as_tools` checks a function."""
    import re

    from ..errors import ConfigError
    from ..user_files import function_from_file

    functions = []
    for spec in specs:
        parsed = re.fullmatch(r"(?P<path>.+\.py):(?P<name>[A-Za-z_]\w*)", spec)
        if spec in BUILT_IN:
            functions.append(BUILT_IN[spec])
        elif parsed:
            functions.append(function_from_file(spec, parsed["path"], parsed["name"], ConfigError, "--tools"))
        else:
            raise ConfigError(f"--tools '{spec}': name a built-in tool ({', '.join(BUILT_IN)}) or a function in a "
                              "local file as PATH.py:FUNCTION, e.g. my_tools.py:convert_units.")
    return as_tools(functions)


def with_tools(data, tools: Sequence[Callable | Tool], example: str | None = None, tokenizer=None):
    """A dataset whose prompts tell the model its tools; or a `tasks.Task` whose splits do, and which carries the
    tools, so that its training, pre-flight and evaluation run them. A task without a completion length of its own
    gets TOOL_COMPLETION_LENGTH: the pre-flight does not fit the length of multi-turn samples, and a preset's
    (16 tokens on a CPU) cuts a call before its result comes back; TEMPLATE_TOOL_COMPLETION_LENGTH in a model's own
    format, whose calls and results take twice the tokens.

    The kit's call syntax is told in a system message. A Task of chat prompts for a model whose chat template has
    its own tool-call format (Qwen2.5, Llama 3.x, ...: `syntax.has_own_tool_format(tokenizer)`) is told in that
    format instead, as TRL does: its prompts stay as they are and the template renders the tools. Without
    `tokenizer`, the kit's; training, the pre-flight and evaluation switch such a task to the model's own format
    when they meet its tokenizer (`in_model_format`)."""
    from datasets import Dataset

    tools = as_tools(tools)
    if not isinstance(data, Dataset):  # a Task (tools cannot import tasks, which imports them)
        own = tokenizer is not None and _chat(data.train) and has_own_tool_format(tokenizer)
        task = data.replace(tools=tuple(tools), max_completion_length=data.max_completion_length or (
            TEMPLATE_TOOL_COMPLETION_LENGTH if own else TOOL_COMPLETION_LENGTH))
        return _retold(task, TemplateSyntax(tokenizer) if own else KIT, example)
    return _told(data, tools, example)


def in_model_format(task, tokenizer):
    """`task` told in the model's own tool-call format where its tokenizer has one and the kit's syntax was told;
    otherwise `task` as it is. Training, the pre-flight and evaluation call it, so a task made with tools before
    the model was loaded runs in the model's format."""
    if not task.tools or task.tool_format != KIT.name or not _chat(task.train) or not has_own_tool_format(tokenizer):
        return task
    untold = task.replace(**{split: _untold(getattr(task, split)) for split in SPLITS})
    if task.max_completion_length == TOOL_COMPLETION_LENGTH:  # the kit syntax's room, which the format outgrows
        untold = untold.replace(max_completion_length=TEMPLATE_TOOL_COMPLETION_LENGTH)
    return _retold(untold, TemplateSyntax(tokenizer))


def _retold(task, syntax, example: str | None = None):
    """`task` told its tools in `syntax`: the kit's instructions in its prompts, or (the model's own format) its
    prompts as they are, the template rendering the tools."""
    if syntax is not KIT:
        return task.replace(tool_format=syntax.name)
    return task.replace(**{split: _told(getattr(task, split), task.tools, example) for split in SPLITS},
                        tool_format=KIT.name)


def _told(dataset, tools, example: str | None):
    if dataset is None:
        return None
    text = instructions(tools, example)
    return dataset.map(lambda row: {"prompt": tell_prompt(row["prompt"], text)})


def _untold(dataset):
    return None if dataset is None else dataset.map(lambda row: {"prompt": untell_prompt(row["prompt"])})


def _chat(dataset) -> bool:
    return dataset is not None and len(dataset) > 0 and not isinstance(dataset[0]["prompt"], str)
