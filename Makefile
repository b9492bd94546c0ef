# Two commands are the contract (README): `make demo` and `make test`. Each sets up .venv from
# nothing on first use (a few minutes) and is quick once it exists.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# torch first and pinned: 2.13.0 is the CPU wheel here; a bare `torch` would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0
# Unsloth without its GPU dependencies, so its CPU fallback runs in CI (shared facts: these import on CPU).
# Not torchao: Unsloth's CPU fallback runs without it, and once installed transformers and PEFT import it
# in every process, which prints a dozen CUDA-library and pytree warnings on a CPU.
UNSLOTH_NODEPS := unsloth==2026.10.9 unsloth_zoo==2026.10.9
UNSLOTH_EXTRAS := tyro msgspec cut-cross-entropy hf_transfer sentencepiece protobuf structlog json5 nest-asyncio \
                  diffusers
STAMP := $(VENV)/.installed
# Chromium for the browser test (tests/test_browser.py): Debian's package, which Playwright (pinned in the
# `browser` extra) launches by path; `playwright install` would download a browser from a host CI cannot reach.
# Installed only when missing (CI runs as root); point CHROMIUM at another build to use that one.
CHROMIUM ?= /usr/lib/chromium/chromium
export TQDM_DISABLE ?= 1
export HF_DATASETS_DISABLE_PROGRESS_BARS ?= 1

.PHONY: setup demo test test-fast lint bench clean llama-cpp docs docs-build

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH)"
	$(PIP) -e ".[dev,browser,docs]"
	$(PIP) --no-deps $(UNSLOTH_NODEPS)
	$(PIP) $(UNSLOTH_EXTRAS) "$(TORCH)"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

demo: setup
	$(VENV)/bin/rloo-kit demo

$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium

# llama.cpp, to prove GGUF exports in a real runtime (rloo_kit/export/llama_cpp.py): the npm package node-llama-cpp and its
# prebuilt Linux x64 llama.cpp, pinned, into a project-local folder. --ignore-scripts: nothing is downloaded or
# compiled beyond the two packages.
LLAMA_CPP_DIR ?= .llama-cpp
NODE_LLAMA_CPP ?= 3.22.1
LLAMA_CPP_STAMP := $(LLAMA_CPP_DIR)/.installed-$(NODE_LLAMA_CPP)

llama-cpp: $(LLAMA_CPP_STAMP)

$(LLAMA_CPP_STAMP):
	mkdir -p $(LLAMA_CPP_DIR)
	npm install --prefix $(LLAMA_CPP_DIR) --ignore-scripts --omit=optional --no-audit --no-fund --save-exact \
		node-llama-cpp@$(NODE_LLAMA_CPP) @node-llama-cpp/linux-x64@$(NODE_LLAMA_CPP)
	touch $@

# Everything, the browser test included: the REQUIRE variables make a missing Unsloth, browser or llama.cpp fail, not skip.
# Two pytest-xdist workers, each notebook's tests on one of them (tests/notebook_runs.py), with OpenMP threads that sleep
# rather than spin while they wait: two 2-thread processes that spin on 2 cores took 3x as long as one alone, two that
# sleep 1.3x (CONTRIBUTING.md). Then the documentation site, after the tests, so that it renders the notebooks they
# executed (build/notebooks/).
# A worker that crashes fails the run (no restart: a restarted worker lost its lane's tests and the run hung).
PYTEST_WORKERS ?= 2
PYTEST := OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --max-worker-restart 0
test: setup $(CHROMIUM) $(LLAMA_CPP_STAMP)
	$(VENV)/bin/ruff check rloo_kit tests benchmarks
	RLOO_KIT_REQUIRE_UNSLOTH=1 RLOO_KIT_REQUIRE_BROWSER=1 RLOO_KIT_REQUIRE_LLAMA_CPP=1 RLOO_KIT_CHROMIUM=$(CHROMIUM) \
		RLOO_KIT_LLAMA_CPP=$(abspath $(LLAMA_CPP_DIR)) $(PYTEST) --durations=25  # the slowest, for the suite's time
	$(VENV)/bin/mkdocs build --strict

# The lane for working: lint, unit and in-process tiny-model tests; no notebook run, real model, browser, Unsloth or
# subprocess run (their markers: slow, browser, unsloth, heavy), no multi-process `accelerate launch`
# (test_distributed.py). CI's `make test` runs all of it.
test-fast: setup $(LLAMA_CPP_STAMP)
	$(VENV)/bin/ruff check rloo_kit tests benchmarks
	$(PYTEST) -q -m "not slow and not browser and not unsloth and not heavy" --ignore=tests/test_distributed.py

lint: setup
	$(VENV)/bin/ruff check rloo_kit tests benchmarks

# Benchmarks run on demand (tens of minutes on a CPU), never in CI; results go to benchmarks/results/.
bench: setup
	$(PY) benchmarks/learning.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/scaling.py
	$(PY) benchmarks/scaling.py --model random:tiny
	$(PY) benchmarks/backends.py
	$(PY) benchmarks/preflight.py
	$(PY) benchmarks/preflight_verdicts.py
	$(PY) benchmarks/sampling_fit.py
	$(PY) benchmarks/cpu_speed.py --steps 30
	$(PY) benchmarks/roofline.py --steps 4
	$(PY) benchmarks/roofline.py --steps 4 --path legacy

# The documentation site (mkdocs.yml): served with live reload at http://127.0.0.1:8000, or built into site/. Strict: a
# broken link, a page missing from the nav or a docstring the API reference cannot read fails the build.
docs: setup
	$(VENV)/bin/mkdocs serve

docs-build: setup
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) runs .pytest_cache $(LLAMA_CPP_DIR) site build
