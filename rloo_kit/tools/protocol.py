"""How a model calls a tool in a rollout, in plain text any model can write and any tokenizer can read back.

The model writes `<tool>name(arguments)</tool>`, arguments as Python literals (`calculator("12*34")`); the kit runs
the function and appends `<result>...</result>`; the model goes on writing. Text in, text out, so the kit's
rollout never re-tokenizes what was sampled: each turn's tokens are appended as they are, which keeps the
completion prefix-preserving whatever the chat template (SmolLM2's drops tool messages altogether).

Tools are plain Python functions with type hints and a docstring, as TRL's `tools=` takes them; their schema is
transformers' `get_json_schema`. A call is parsed with `ast`, never evaluated: a tool only ever receives literals.
A call that does not parse, names no tool, or raises comes back to the model as an `error: ...` result, not as a
crash.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ConfigError

CALL_OPEN, CALL_CLOSE = "<tool>", "</tool>"
RESULT_OPEN, RESULT_CLOSE = "<result>", "</result>"
MAX_RESULT_CHARS = 200  # a tool's answer is cut here: a runaway result would eat the completion's tokens
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, schema (for the prompt) and the function itself."""

    name: str
    fn: Callable
    schema: dict

    @property
    def signature(self) -> str:
        params = self.schema["function"].get("parameters", {}).get("properties", {})
        typed = ", ".join(f"{p}: {v.get('type', 'any')}" for p, v in params.items())
        return f"{self.name}({typed})"

    @property
    def description(self) -> str:
        return self.schema["function"].get("description", "").strip()


def as_tools(functions: Sequence[Callable | Tool]) -> list[Tool]:
    """The functions as tools (a Tool stays as it is), each checked now: a name, type hints and a docstring that
    says what it does (transformers' `get_json_schema` convention), and no two with one name."""
    from transformers.utils import get_json_schema

    tools = []
    for fn in functions:
        if isinstance(fn, Tool):
            tools.append(fn)
            continue
        name = getattr(fn, "__name__", repr(fn))
        try:
            schema = get_json_schema(fn)
        except Exception as e:  # transformers raises its own DocstringParsingException / TypeHintParsingException
            raise ConfigError(f"Tool '{name}': {e}. A tool is a function with type hints on every argument and a "
                              "docstring: a first line saying what it does, and an 'Args:' section naming each "
                              "argument.") from None
        tools.append(Tool(name, fn, schema))
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ConfigError(f"Two tools share a name ({', '.join(sorted({n for n in names if names.count(n) > 1}))}): "
                          "the model calls a tool by its name.")
    return tools


def instructions(tools: Sequence[Tool], example: str | None = None) -> str:
    """What the model is told: the syntax, each tool's signature and description, and a one-shot example (a
    small model that has never seen the syntax rarely writes it unshown)."""
    listed = "\n".join(f"- {t.signature}: {t.description}" for t in tools)
    shown = example or _example(tools[0])
    return (f"Tools: write {CALL_OPEN}name(arguments){CALL_CLOSE}, get {RESULT_OPEN}...{RESULT_CLOSE}, then "
            f"answer.\n{listed}\nExample: {shown}")


def _example(tool: Tool) -> str:
    """A call of `tool` from its own attribute `example` ('calculator("12*34")'), else with placeholder values."""
    call = getattr(tool.fn, "example", None)
    if call is None:  # placeholders show the form; they are not run
        params = tool.schema["function"].get("parameters", {}).get("properties", {})
        placeholder = {"string": '"..."', "integer": "1", "number": "1.0", "boolean": "True"}
        return f"{CALL_OPEN}{tool.name}({', '.join(placeholder.get(v.get('type'), 'None') for v in params.values())})" \
               f"{CALL_CLOSE}"
    shown = f"{CALL_OPEN}{call}{CALL_CLOSE}"
    parsed = find_call(shown, [tool])
    result, ok = run_call(parsed, [tool]) if parsed else ("", False)
    return f"{shown}{result_text(result)} The answer is {result}." if ok else shown


@dataclass(frozen=True)
class Call:
    """One call found in the model's text: where it ends, and what it asked for (or why it cannot run)."""

    end: int  # index in the text just after the call's closing tag
    text: str  # what stood between the tags
    name: str | None = None
    args: tuple = ()
    kwargs: dict | None = None
    problem: str | None = None  # why it is not a valid call; None when it is


def find_call(text: str, tools: Sequence[Tool]) -> Call | None:
    """The first complete call in `text`, parsed; None when there is none."""
    found = _CALL.search(text)
    if found is None:
        return None
    inner = found.group(1).strip()
    try:
        node = ast.parse(inner, mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not a call of a tool by its name")
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except (SyntaxError, ValueError, TypeError) as e:
        return Call(found.end(), inner, problem=f"cannot read the call ({e}); write name(arguments), arguments as "
                                                "literal values")
    known = {t.name for t in tools}
    if node.func.id not in known:
        return Call(found.end(), inner, node.func.id, problem=f"no tool named {node.func.id}; the tools: "
                                                               f"{', '.join(sorted(known))}")
    return Call(found.end(), inner, node.func.id, args, kwargs)


def run_call(call: Call, tools: Sequence[Tool]) -> tuple[str, bool]:
    """The result the model reads, and whether the call was valid and ran: a tool's exception is its result."""
    if call.problem:
        return f"error: {call.problem}", False
    fn = next(t.fn for t in tools if t.name == call.name)
    try:
        value = fn(*call.args, **(call.kwargs or {}))
    except Exception as e:  # the model's mistake to learn from, not the run's end
        return f"error: {type(e).__name__}: {e}"[:MAX_RESULT_CHARS], False
    return str(value)[:MAX_RESULT_CHARS], True


def result_text(result: str) -> str:
    return f"{RESULT_OPEN}{result}{RESULT_CLOSE}"


def final_message(text: str) -> str:
    """What the rewards read: the text after the last tool result (the whole text when no tool was called)."""
    cut = text.rfind(RESULT_CLOSE)
    return text if cut < 0 else text[cut + len(RESULT_CLOSE):].lstrip()


def calculator(expression: str) -> str:
    """Exact arithmetic: + - * / ** and parentheses.

    Args:
        expression: the arithmetic, e.g. "127 * 48".
    """
    return str(_arithmetic(ast.parse(expression, mode="eval").body))


calculator.example = 'calculator("127 * 48")'
_EXPRESSION = re.compile(r"-?\d+(?:\.\d+)?(?:\s*(?:\*\*|//|[-+*/%])\s*\(?-?\d+(?:\.\d+)?\)?)+")


def _demonstrate(question: str) -> str | None:
    """The calculator call a question's arithmetic needs ('What is 127 * 48?' -> 'calculator("127 * 48")')."""
    found = _EXPRESSION.search(question)
    return f'calculator("{found.group(0)}")' if found else None


calculator.demonstrate = _demonstrate

_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
              ast.Pow: lambda a, b: a ** b if abs(b) <= 64 else _too_big()}


def _too_big():
    raise ValueError("exponent too large")


def _arithmetic(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _arithmetic(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    raise ValueError(f"not arithmetic: {ast.unparse(node)}")
