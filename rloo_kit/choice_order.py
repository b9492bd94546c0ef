"""Groups in two orders: each choice question sampled half as written, half with its choices one place on.

A policy that picks the choice at one place of the list ('a worm or a plane?' -> the first) is paid on the rows
whose answer sits there and on no other, and then every group of K completions is flat: all right, or all wrong.
A flat group has no leave-one-out advantage, so RLOO cannot leave such a habit once the policy has it, and the
validation marks of held-back comparison files saw runs settle in it (the first place on 14 of 16 held-out
replies). Asked in two orders within one group, the same habit is right in one half and wrong in the other: the
group has spread, and its advantage pays the pick that follows the answer rather than the place. Each sample's
baseline is still the mean of the others, which does not depend on its own reply, so the estimate stays unbiased
for the two orders' mean reward.

`with_reordered_twins` appends to a dataset with a `choices` column (data.load_local's choice questions) a twin
of each row whose question names each choice once in one clause; `patches.group_sampler.GroupSampler` then
samples a row's group half from the row, half from its twin.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise

from datasets import Dataset

from .rewards import offers_numbers

_ARTICLE = r"(?:\b(?:a|an|the)\s+)?"
_HYPHEN_OR_SPACE = r"[\s\-\u2010\u2011]+"
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|\n)[\s\"'\u2018\u201c(*]*$")


def _pattern(choice: str, numbers: bool) -> re.Pattern:
    """Where a question names `choice` (as data.load_local found it: normalized, or a number as written), with the
    article before it: 'a koala', 'an owl', '92'."""
    if numbers:
        return re.compile(rf"(?<![\d.,]){re.escape(choice)}(?![\d]|[.,]\d)")
    words = _HYPHEN_OR_SPACE.join(map(re.escape, choice.split()))
    return re.compile(rf"{_ARTICLE}(?<!\w){words}(?!\w)", re.I)


def reordered(question: str, choices: Sequence[str]) -> tuple[str, list[str]] | None:
    """`question` with the choices it lists one place on (the first last: 'a jet or a koala' -> 'a koala or a
    jet', each with its own article), and the choices in their new order; None where no clause of it names each
    choice once, or one of them opens a sentence (its capital would move with it)."""
    if len(choices) < 2:
        return None
    patterns = [_pattern(c, offers_numbers(choices)) for c in choices]
    start = 0  # where the clause begins in the question
    for clause in re.split(r"(?<=[?!.;:\n])", question):
        found = [list(p.finditer(clause)) for p in patterns]
        if all(len(f) == 1 for f in found):
            spans = [f[0].span() for f in found]
            places = sorted(range(len(choices)), key=lambda i: spans[i][0])  # choices by where they stand
            at = [spans[i] for i in places]
            apart = all(a[1] <= b[0] for a, b in pairwise(at))
            if apart and not any(_SENTENCE_START.search(question[:start + s]) for s, _ in at):
                moved = places[1:] + places[:1]  # the choice that stands at each place after the move
                pieces, end = [], 0
                for (s, e), i in zip(at, moved, strict=True):
                    pieces += [clause[end:s], clause[slice(*spans[i])]]
                    end = e
                asked = question[:start] + "".join(pieces) + clause[end:] + question[start + len(clause):]
                return asked, [choices[i] for i in moved]
        start += len(clause)
    return None


def _with_user_turn(prompt, text: str):
    if isinstance(prompt, str):
        return text
    return [*prompt[:-1], {**prompt[-1], "content": text}]


def with_reordered_twins(dataset: Dataset) -> tuple[Dataset, dict[int, int]]:
    """The dataset with a twin appended for each choice row that `reordered` can reorder (its question and its
    `choices` one place on, the rest as it is), and which row each twin is of: {row: twin row}. A dataset
    without choices comes back as it is, with no twins."""
    if "choices" not in dataset.column_names:
        return dataset, {}
    twins, rows = {}, []
    for row, record in enumerate(dataset):
        prompt = record["prompt"]
        asked = reordered(prompt if isinstance(prompt, str) else prompt[-1]["content"], record["choices"] or [])
        if asked is not None:
            twins[row] = len(dataset) + len(rows)
            rows.append({**record, "prompt": _with_user_turn(prompt, asked[0]), "choices": asked[1]})
    if not rows:
        return dataset, {}
    from datasets import concatenate_datasets

    extra = Dataset.from_list(rows, features=dataset.features)
    return concatenate_datasets([dataset, extra]), twins
