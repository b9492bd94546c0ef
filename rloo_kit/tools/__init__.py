"""RLOO with tools: rollouts that call plain Python functions, a tool's tokens weighing nothing in the loss.

`protocol`: how a call is written, parsed and run (`calculator` is one tool, ready to use); `rollout`: the loop
that runs calls and samples on; `warmup`: a few worked examples, trained with TRL's SFTTrainer, for a model that
never calls; `with_tools`: a task or dataset whose prompts tell the model its tools. The
trainer is TRL's own, given `tools=` through `rloo_kit.build_trainer` (the door's patch `tool_rollouts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .protocol import Tool, as_tools, calculator, instructions
from .rollout import MAX_CALLS, Rollout, roll_out
from .warmup import demonstrating_tool, warm_start, worked_examples

__all__ = ["BUILT_IN", "MAX_CALLS", "TOOL_COMPLETION_LENGTH", "Rollout", "Tool", "as_tools", "calculator",
           "demonstrating_tool", "instructions", "load_tools", "roll_out", "tell_prompt", "warm_start", "with_tools",
           "worked_examples"]

BUILT_IN = {"calculator": calculator}  # tools the command line names by name alone
TOOL_COMPLETION_LENGTH = 48  # tokens for a call, its result and a short answer (the products task's, measured)


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


def tell_prompt(prompt, text: str):
    """`prompt` with the tools' instructions: a system message before a chat prompt's first message (merged
    into the prompt's own system message if it has one), or a paragraph before a plain prompt."""
    if isinstance(prompt, str):
        return f"{text}\n\n{prompt}"
    messages = [dict(m) for m in prompt]
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = f"{messages[0]['content']}\n\n{text}"
        return messages
    return [{"role": "system", "content": text}, *messages]


def with_tools(data, tools: Sequence[Callable | Tool], example: str | None = None):
    """A dataset whose prompts tell the model its tools; or a `tasks.Task` whose splits do, and which carries the
    tools, so that its training, pre-flight and evaluation run them. A task without a completion length of its own
    gets TOOL_COMPLETION_LENGTH: the pre-flight does not fit the length of multi-turn samples, and a preset's
    (16 tokens on a CPU) cuts a call before its result comes back."""
    from ..tasks import Task

    tools = as_tools(tools)
    text = instructions(tools, example)

    def told(dataset):
        return None if dataset is None else dataset.map(lambda row: {"prompt": tell_prompt(row["prompt"], text)})

    if isinstance(data, Task):
        return data.replace(train=told(data.train), test=told(data.test), validation=told(data.validation),
                            tools=tuple(tools),
                            max_completion_length=data.max_completion_length or TOOL_COMPLETION_LENGTH)
    return told(data)
