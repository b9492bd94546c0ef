"""Rewards in TRL's signature, f(prompts, completions, **columns) -> list[float | None], and what they rest on.

`answers`: how a reply is matched against its gold answer (`is_correct`). `functions`: the reward functions
(`correct_answer`, `exact_answer`, `tag_format`, `brevity`, `combine`, a reward model as a reward). `guard`:
rewards as training calls them, failures named, unscored samples left out. `files`: a reward of your own, from
a local file.
"""

from .answers import (
    NUMBER,
    accepted_answers,
    answered_earlier,
    answers_match,
    completion_text,
    extract_answer,
    is_correct,
    marked_answer,
    mentions,
    normalize_text,
    offers_numbers,
    parse_number,
    picked_choice,
    predicted_answer,
    row_rules,
    sentences,
)
from .files import check_on_rows, from_file
from .functions import brevity, combine, correct_answer, exact_answer, hub_reward_model, reward_model, tag_format
from .guard import (
    UNSCORED_PATIENCE,
    RewardFunc,
    describe,
    guard,
    required_columns,
    safe,
    scores_nothing,
    unusable,
)

__all__ = ["NUMBER", "UNSCORED_PATIENCE", "RewardFunc", "accepted_answers", "answered_earlier", "answers_match",
           "brevity", "check_on_rows", "combine", "completion_text", "correct_answer", "describe", "exact_answer",
           "extract_answer", "from_file", "guard", "hub_reward_model", "is_correct", "marked_answer", "mentions",
           "normalize_text", "offers_numbers", "parse_number", "picked_choice", "predicted_answer", "reward_model",
           "required_columns", "row_rules", "safe", "scores_nothing", "sentences", "tag_format", "unusable"]
