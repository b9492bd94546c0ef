"""A trial reward beside the task's (benchmarks/sample_efficiency.py, arm `cut_unpaid`, weight 1): takes back the
answer reward of a reply that ran to the completion length without ending and marks no answer ('The answer is X').
A cut reply has not ended on its answer, yet `correct_answer` scores its last sentence: a two-choice question's
ramble that happens to name one choice last is paid half the time, and a held-back bigger-or-smaller run
(*Which is smaller, a mountain or a pea?*) grew its replies from 87 to 122 tokens while all 5 of its right held-out
replies after training were cut rambles. Here a cut reply earns the answer reward only where it marked its answer."""

from rloo_kit.rewards import correct_answer
from rloo_kit.rewards.answers import _marked_span, completion_text

END_IDS = frozenset({2})  # SmolLM2's <|im_end|>: TRL's completion ids keep the token a completion ended on


def cut_unpaid(prompts, completions, completion_ids, answer, **kwargs):
    paid = correct_answer(prompts, completions, answer, **kwargs)
    return [-p if ids and ids[-1] not in END_IDS and _marked_span(completion_text(c)) is None else 0.0
            for p, c, ids in zip(paid, completions, completion_ids, strict=True)]
