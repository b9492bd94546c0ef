# Two commands are the contract (README): `make demo` and `make test`. Each sets up .venv from
# nothing on first use (a few minutes) and is quick once it exists.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# torch first and pinned: 2.13.0 is the CPU wheel here; a bare `torch` would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0
# Unsloth without its GPU dependencies, so its CPU fallback runs in CI (shared facts: these import on CPU).
UNSLOTH_NODEPS := unsloth==2026.10.9 unsloth_zoo==2026.10.9
UNSLOTH_EXTRAS := tyro msgspec cut-cross-entropy hf_transfer sentencepiece protobuf structlog json5 nest-asyncio \
                  diffusers torchao==0.18.0
STAMP := $(VENV)/.installed
export TQDM_DISABLE ?= 1
export HF_DATASETS_DISABLE_PROGRESS_BARS ?= 1

.PHONY: setup demo test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH)"
	$(PIP) -e ".[dev]"
	$(PIP) --no-deps $(UNSLOTH_NODEPS)
	$(PIP) $(UNSLOTH_EXTRAS) "$(TORCH)"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

demo: setup
	$(VENV)/bin/rloo-kit demo

test: setup
	RLOO_KIT_REQUIRE_UNSLOTH=1 $(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check rloo_kit tests benchmarks

# Benchmarks run on demand (tens of minutes on a CPU), never in CI; results go to benchmarks/results/.
bench: setup
	$(PY) benchmarks/learning.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/scaling.py
	$(PY) benchmarks/scaling.py --model random:tiny
	$(PY) benchmarks/backends.py

clean:
	rm -rf $(VENV) runs .pytest_cache
