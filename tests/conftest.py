import os
from pathlib import Path

import pytest

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
# TRL sends telemetry from a thread of its own for every trainer built, and that thread's DNS lookup reads the
# environment while tests change it (monkeypatch.setenv): glibc's getenv racing setenv killed a test worker with a
# segfault in getaddrinfo. Set before any thread starts; CI cannot reach the hub anyway.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "train.jsonl"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from rloo_kit.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def default_model_dir() -> str:
    """The real default model (SmolLM2-135M-Instruct), fetched or built once per machine."""
    from rloo_kit.sources import fetch_model

    return fetch_model(prefer_hub=False)


@pytest.fixture
def cpu_tiny_overrides() -> dict:
    """RLOO settings small enough for a step of the tiny model to take well under a second."""
    return dict(per_device_train_batch_size=4, num_generations=2, max_completion_length=8, logging_steps=1,
                save_strategy="no", disable_tqdm=True, seed=0)
