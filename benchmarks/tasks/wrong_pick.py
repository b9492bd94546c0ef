"""A trial reward beside the task's (benchmarks/sample_efficiency.py, arm `wrong_cost`): -1 for a reply that picks a
wrong one of its question's choices or names a wrong label, 0 for any other. With `correct_answer` alone a wrong pick
scores what a reply that picks nothing scores, and a 135M model's replies often pick nothing at first: on the rows a
habit gets wrong (the first number offered, one favourite label) its samples tie with the rambling ones and nothing
pushes it down there, while on the rows it fits it is paid. A larger run learned to pick the first number offered, an
animal-or-colour run to answer 'animal' to every word."""

from rloo_kit.rewards import is_correct, predicted_answer


def wrong_pick(prompts, completions, answer, **kwargs):
    rows = len(completions)
    labels, choices = kwargs.get("labels") or [None] * rows, kwargs.get("choices") or [None] * rows
    scores = []
    for prompt, completion, gold, label_set, offered in zip(prompts, completions, answer, labels, choices, strict=True):
        said = predicted_answer(completion, labels=label_set, choices=offered, prompt=prompt)
        wrong = (label_set or offered) and said is not None and not is_correct(
            completion, gold, labels=label_set, prompt=prompt, choices=offered)
        scores.append(-1.0 if wrong else 0.0)
    return scores
