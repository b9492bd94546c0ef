"""How a model writes a call and reads its result: the kit's plain-text syntax, or the model's own.

- `KitSyntax`: `<tool>name(arguments)</tool>`, told in a system message, any model, any tokenizer (SmolLM2's
  template has no tool messages). What the model writes after a call in the same turn is dropped; the result
  follows as `<result>...</result>` and the model writes on in the same turn.
- `TemplateSyntax`: where the model's chat template renders tool calls and tool messages and TRL can parse its
  replies (Qwen2.5, Qwen3, Llama 3.1/3.2, ... : `trl.chat_template_utils.supports_tool_calling`,
  `add_response_schema`), the tools go to the template (`tools=`), the model ends its turn with its own call
  format, the results come back as the template's tool messages, and a new assistant turn begins: as TRL's
  GRPOTrainer does (`_get_tool_suffix_ids`, ported here).

Both read a turn's tokens and give the tokens that follow it, so the rollout (`tools.rollout`) never re-tokenizes
what was sampled, and the rewards read the model's last turn (`rollout.answer_text`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from .protocol import CALL_CLOSE, CALL_OPEN, Call, Tool, find_call, result_text

Decode = Callable[[list[int]], str]
Encode = Callable[[str], list[int]]


class KitSyntax:
    """The kit's own: `<tool>name(arguments)</tool>` then `<result>...</result>`, in one assistant turn."""

    name = "kit"

    def template_kwargs(self, tools: Sequence[Tool]) -> dict:
        return {}

    def read_turn(self, turn: list[int], decode: Decode, tools: Sequence[Tool]) -> tuple[list[Call], int] | None:
        """The turn's first call and how many of its tokens to keep (through the call's closing tag); None when
        the turn calls nothing."""
        call = find_call(decode(turn), tools)
        if call is None:
            return None
        return [call], _tokens_through(turn, decode, CALL_CLOSE)

    def result_ids(self, results: list[tuple[Call, str]], encode: Encode) -> list[int]:
        return encode("".join(result_text(r) for _, r in results))

    def worked_completion(self, prompt, call: Call, result: str, answer: str):
        text = f"{CALL_OPEN}{call.text}{CALL_CLOSE}{result_text(result)} The answer is {answer}."
        return text if isinstance(prompt, str) else [{"role": "assistant", "content": text}]


class TemplateSyntax:
    """The model's own tool-call format, as its chat template writes it and TRL parses it."""

    name = "template"

    def __init__(self, tokenizer):
        from trl.chat_template_utils import add_response_schema

        self.tokenizer = add_response_schema(tokenizer)  # sets the template's response parser on the tokenizer
        self._prefix = tokenizer.apply_chat_template([{"role": "user", "content": "-"}], add_generation_prompt=True,
                                                     tokenize=True, return_dict=False)
        fields = (getattr(tokenizer, "response_template", None) or {}).get("fields", {}).get("tool_calls", {})
        self._opener = re.compile(fields.get("open_pattern") or re.escape(fields.get("open") or "\0"))

    def template_kwargs(self, tools: Sequence[Tool]) -> dict:
        return template_kwargs(tools)  # the template renders the tools; the prompts stay as they are

    def read_turn(self, turn: list[int], decode: Decode, tools: Sequence[Tool]) -> tuple[list[Call], int] | None:
        """The calls of a turn (the model's format ends the turn with them), all of its tokens kept; None when it
        calls nothing. A call the template's parser cannot read is an invalid call, not text."""
        from trl.chat_template_utils import parse_response

        parsed = parse_response(self.tokenizer, list(turn), prefix=self._prefix)
        calls = parsed.get("tool_calls") or []
        if not calls:
            text = parsed.get("content") or ""
            ended = bool(turn) and turn[-1] == self.tokenizer.eos_token_id  # a cut turn was not done calling
            if not ended or not self._opener.search(text):
                return None
            return [Call(len(turn), text, problem="cannot read the call: write it in the format the system "
                                                  "prompt shows, arguments as a JSON object")], len(turn)
        return [_call(c, tools, len(turn)) for c in calls], len(turn)

    def result_ids(self, results: list[tuple[Call, str]], encode: Encode) -> list[int]:
        """The template's tool messages and the next assistant header, after the turn's end-of-turn token."""
        name = next((c.name for c, _ in results if c.name), "tool")
        called = [{"role": "user", "content": "-"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"type": "function", "function": {"name": name, "arguments": {}}}]}]
        answered = [{"role": "tool", "name": c.name or name, "content": r} for c, r in results]
        tok = self.tokenizer
        prefix = tok.apply_chat_template(called, tokenize=True, return_dict=False)
        full = tok.apply_chat_template(called + answered, add_generation_prompt=True, tokenize=True,
                                       return_dict=False)
        ends = [i for i, t in enumerate(prefix) if t == tok.eos_token_id]
        prefix = prefix[:ends[-1] + 1] if ends else prefix  # the turn ends at its end-of-turn token, as sampled
        if full[:len(prefix)] != prefix:
            raise ValueError("The chat template renders a tool message by rewriting the turn before it, so its "
                             "results cannot be appended to a sampled turn.")
        return full[len(prefix):]

    def worked_completion(self, prompt, call: Call, result: str, answer: str):
        return [{"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": call.name, "arguments": call.kwargs or {}}}]},
                {"role": "tool", "name": call.name, "content": result},
                {"role": "assistant", "content": f"The answer is {answer}."}]


KIT = KitSyntax()


def template_kwargs(tools: Sequence[Tool]) -> dict:
    """What a chat template that renders tools takes (`apply_chat_template(..., tools=)`, RLOOConfig's
    `chat_template_kwargs`): the tools' JSON schemas."""
    return {"tools": [t.schema for t in tools]}


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


def untell_prompt(prompt):
    """`prompt` without the kit's tool instructions that `tell_prompt` added to its system message."""
    if isinstance(prompt, str) or not prompt or prompt[0]["role"] != "system":
        return prompt
    content = prompt[0]["content"]
    start = content.find(_TOLD)
    if start < 0:
        return prompt
    if start == 0:
        return [dict(m) for m in prompt[1:]]
    return [{**prompt[0], "content": content[:start].removesuffix("\n\n")}, *map(dict, prompt[1:])]


_TOLD = f"Tools: write {CALL_OPEN}"  # how the kit's instructions begin (`protocol.instructions`)


def has_own_tool_format(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders tool calls and results and TRL can parse its calls."""
    from trl.chat_template_utils import supports_tool_calling

    if not isinstance(getattr(tokenizer, "chat_template", None), str):
        return False
    try:
        if not supports_tool_calling(tokenizer):
            return False
        TemplateSyntax(tokenizer)  # raises where TRL has no parser for the template's replies
    except (ValueError, TypeError, KeyError):
        return False
    return True


def syntax_for(name: str, tokenizer=None) -> KitSyntax | TemplateSyntax:
    """The syntax a task's tools were told in (`Task.tool_format`), for this tokenizer."""
    return TemplateSyntax(tokenizer) if name == TemplateSyntax.name else KIT


def _call(parsed: dict, tools: Sequence[Tool], end: int) -> Call:
    """A parsed tool call of the template's as the kit's `Call`: arguments by name, checked like the kit's."""
    fn = parsed.get("function") or {}
    name, args = fn.get("name"), fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    text = json.dumps({"name": name, "arguments": args})
    known = {t.name for t in tools}
    if name not in known:
        return Call(end, text, name, problem=f"no tool named {name}; the tools: {', '.join(sorted(known))}")
    if not isinstance(args, dict):
        return Call(end, text, name, problem="the arguments are not a JSON object of named values")
    return Call(end, text, name, (), dict(args))


def _tokens_through(turn: list[int], decode: Decode, marker: str) -> int:
    """The fewest tokens of `turn` whose text holds `marker`."""
    for n in range(1, len(turn) + 1):
        if marker in decode(turn[:n]):
            return n
    return len(turn)
