"""Ready-made tasks: datasets, rewards and how answers are matched, so that notebooks, the CLI
and the benchmarks train and measure the same thing."""

from __future__ import annotations

from dataclasses import dataclass

from datasets import Dataset

from .data import arithmetic_task, load_gsm8k, load_local
from .errors import DataError
from .hardware import Hardware
from .rewards import RewardFunc, brevity, correct_answer

TASKS = ("arithmetic", "gsm8k", "file")
GPU_DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


@dataclass
class Recipe:
    task: str
    train: Dataset
    test: Dataset
    reward_funcs: list[RewardFunc]
    reward_weights: list[float] | None
    match: str  # how evaluation counts a completion correct: "exact" or "final"
    max_new_tokens: int  # for evaluation


def recipe(task: str = "arithmetic", *, path: str | None = None, n_train: int = 2000, n_test: int = 50,
           seed: int = 0, template: str | None = None) -> Recipe:
    """arithmetic: 'Add a and b.' over 0..9, rewarded for a right final number (1.0) and brevity
    (0.2); accuracy counts the final number. SmolLM2-135M knows these sums but mostly talks about
    the numbers instead of answering: that behaviour is what a few minutes of RLOO on a CPU change.
    `template` rewords the question (see data.arithmetic_task).
    gsm8k: grade-school word problems, rewarded and scored on the final '#### N' answer.
    file: a local jsonl/csv/parquet with `prompt` and `answer` columns, scored like gsm8k."""
    if task == "arithmetic":
        ds = arithmetic_task(n_train=n_train, n_test=n_test, seed=seed, template=template)
        return Recipe(task, ds["train"], ds["test"], [correct_answer, brevity()], [1.0, 0.2], "final", 16)
    if task == "gsm8k":
        split = load_gsm8k(path or "openai/gsm8k").train_test_split(test_size=n_test, seed=seed)
    elif task == "file":
        if not path:
            raise DataError("task='file' needs path= a local file with 'prompt' and 'answer' columns.")
        split = load_local(path, answer_column="answer").train_test_split(test_size=n_test, seed=seed)
    else:
        raise DataError(f"Unknown task '{task}'. Choose one of {TASKS}.")
    return Recipe(task, split["train"], split["test"], [correct_answer], None, "final", 256)


def default_model(hw: Hardware) -> tuple[str, str]:
    """(model, task) a first run should use: a real 0.5B model on GSM8K on a GPU, the embedded
    SmolLM2-135M on arithmetic on a CPU."""
    return (GPU_DEFAULT_MODEL, "gsm8k") if hw.is_cuda else ("smollm2-135m", "arithmetic")
