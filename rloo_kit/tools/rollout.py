"""A rollout with tools: the model writes, a complete call is cut out and run, its result appended, and the model
goes on from there, until it answers without a call, reaches the cap on calls, or fills its completion length.

Every token stays as it was sampled or tokenized (nothing is decoded and re-encoded), and each carries a weight:
1 for what the model wrote, 0 for what a tool wrote, so that training never scores the model on text it did not
choose. This module holds the loop only; the door's patch `tool_rollouts` runs it inside TRL's trainer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .protocol import Tool, run_call
from .syntax import KIT, KitSyntax, TemplateSyntax

MAX_CALLS = 3  # tool calls a completion may make: the cap that ends a runaway loop


@dataclass
class Rollout:
    """One completion's tokens, their weights (0: a tool's), and what its calls did."""

    ids: list[int]
    weights: list[int] = field(default_factory=list)
    calls: int = 0
    valid: int = 0  # calls that parsed, named a tool and ran without raising
    turn_start: int = 0  # where the model's latest turn begins in `ids`
    done: bool = False

    def __post_init__(self):
        self.weights = self.weights or [1] * len(self.ids)

    def add(self, ids: Sequence[int], weight: int, room: int) -> None:
        kept = list(ids)[:max(0, room)]
        self.ids += kept
        self.weights += [weight] * len(kept)


def roll_out(generate: Callable[[list[int], list[list[int]]], list[list[int]]], first: Sequence[list[int]],
             decode: Callable[[list[int]], str], encode: Callable[[str], list[int]], tools: Sequence[Tool], *,
             max_calls: int = MAX_CALLS, max_length: int, syntax: KitSyntax | TemplateSyntax = KIT) -> list[Rollout]:
    """Finish the completions `first` with tool calls: at most `max_calls` each, and `max_length` tokens in all.
    `generate(rows, begun)` samples one continuation of each begun completion, row `rows[j]`'s `begun[j]`.
    `syntax` reads the calls of a turn and writes what follows them (`tools.syntax`)."""
    rollouts = [Rollout(list(ids)) for ids in first]
    for _ in range(max_calls):
        waiting = []
        for i, r in enumerate(rollouts):
            read = None if r.done or r.calls >= max_calls else syntax.read_turn(r.ids[r.turn_start:], decode, tools)
            if read is None:  # an answer, or the turn after the last call allowed: the rollout is finished
                r.done = True
                continue
            calls, keep = read
            cut = r.turn_start + keep
            del r.ids[cut:], r.weights[cut:]  # what the model wrote after the call is not kept: the result follows
            results = []
            for call in calls:  # the cap counts calls, not turns: one turn of the model's format may hold several
                result, ok = run_call(call, tools) if r.calls < max_calls else (
                    f"error: at most {max_calls} tool calls; answer now", False)
                r.calls, r.valid = r.calls + 1, r.valid + ok
                results.append((call, result))
            r.add(syntax.result_ids(results, encode), 0, max_length - len(r.ids))
            r.turn_start = len(r.ids)
            if len(r.ids) >= max_length:
                r.done = True
            else:
                waiting.append(i)
        if not waiting:
            break
        for i, ids in zip(waiting, generate(waiting, [list(rollouts[i].ids) for i in waiting]), strict=True):
            rollouts[i].add(ids, 1, max_length - len(rollouts[i].ids))
    return rollouts


def text_codec(tokenizer) -> tuple[Callable[[list[int]], str], Callable[[str], list[int]]]:
    """(decode, encode) as the rollout uses them: completions decoded as TRL decodes them (special tokens
    dropped), a tool's result encoded without special tokens."""
    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    return decode, encode


def answer_text(rollout: Rollout, decode: Callable[[list[int]], str]) -> str:
    """What the rewards score: the model's last turn, after the last tool result."""
    return decode(rollout.ids[rollout.turn_start:]).lstrip()


def summary(rollouts: Sequence[Rollout]) -> dict[str, float | None]:
    """The batch's tool figures, as logged: share of completions that called a tool, share of calls that were
    valid (None without a call to judge), calls a completion, and tool errors a completion."""
    n, calls = len(rollouts), sum(r.calls for r in rollouts)
    return {"tools/call_rate": sum(r.calls > 0 for r in rollouts) / max(1, n),
            "tools/valid_call_rate": sum(r.valid for r in rollouts) / calls if calls else None,
            "tools/calls": calls / max(1, n),
            "tools/errors": sum(r.calls - r.valid for r in rollouts) / max(1, n)}
