"""A user's reward that scores nothing for this model: it reads a JSON object's "answer" field from each
completion, and SmolLM2 answers in prose, so every completion gets None (benchmarks/preflight_verdicts.py)."""

import json


def json_answer(prompts, completions, answer, **kwargs):
    scores = []
    for completion, gold in zip(completions, answer, strict=True):
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        try:
            said = json.loads(text)["answer"]
        except (ValueError, KeyError, TypeError):
            scores.append(None)
            continue
        scores.append(float(str(said).strip().lower() in [a.lower() for a in gold]))
    return scores
