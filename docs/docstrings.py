"""A Griffe extension for the API reference (mkdocs.yml, mkdocstrings' `extensions`): the kit's docstrings are
plain prose, not Markdown with HTML in it, so their `>>>` examples are shown as code with their output (rather than
read as nested quotes) and a `<tag>` they name is shown as written (rather than taken for HTML)."""

from __future__ import annotations

import re

import griffe


def fence_examples(text: str) -> str:
    """Each run of `>>>` lines and the output lines under them, up to a blank line, as a fenced `pycon` block."""
    out, block = [], []
    for line in [*text.split("\n"), ""]:
        if line.lstrip().startswith(">>>") or (block and line.strip()):
            block.append(line.strip())
            continue
        if block:
            out += ["", "```pycon", *block, "```", ""]
            block = []
        out.append(line)
    return "\n".join(out[:-1])


def escape_tags(text: str) -> str:
    """`<` as `&lt;` outside code spans and fenced blocks."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            parts = re.split(r"(`[^`]*`)", line)
            line = "".join(p if p.startswith("`") else p.replace("<", "&lt;") for p in parts)
        out.append(line)
    return "\n".join(out)


class KitDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = escape_tags(fence_examples(obj.docstring.value))
