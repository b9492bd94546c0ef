"""A GGUF file run in real llama.cpp, to prove an export works where users will run it.

Why this runtime: llama.cpp must not be downloaded or compiled at run time (offline machines, CI), and PyPI's
`llama-cpp-python` ships source only while other PyPI wheels need a newer glibc or crash here. The npm package
`node-llama-cpp` carries prebuilt llama.cpp libraries for Linux x64 (`@node-llama-cpp/linux-x64`), installs in
seconds with `npm install --ignore-scripts` and loads them without building anything. `make llama-cpp` installs
the pinned version into `.llama-cpp/` (or point $RLOO_KIT_LLAMA_CPP at such a folder); `llama_runner.mjs`, shipped
in this package, drives it: greedy completions and teacher-forced top-1 tokens, as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..errors import ExportError

NODE_LLAMA_CPP_VERSION = "3.22.1"  # the Makefile's pin; both packages at this version
RUNNER = Path(__file__).with_name("llama_runner.mjs")
INSTALL_HINT = ("`make llama-cpp` in a clone of rloo-kit, or `npm install --prefix DIR --ignore-scripts "
                f"--omit=optional node-llama-cpp@{NODE_LLAMA_CPP_VERSION} "
                f"@node-llama-cpp/linux-x64@{NODE_LLAMA_CPP_VERSION}` and RLOO_KIT_LLAMA_CPP=DIR")


def runtime_dir() -> Path:
    """Where node-llama-cpp is installed: $RLOO_KIT_LLAMA_CPP, else `.llama-cpp/` in the clone."""
    default = Path(__file__).resolve().parents[2] / ".llama-cpp"
    return Path(os.environ.get("RLOO_KIT_LLAMA_CPP", default)).expanduser()


def _entry() -> Path:
    return runtime_dir() / "node_modules" / "node-llama-cpp" / "dist" / "index.js"


def available() -> bool:
    """Whether Node and the pinned node-llama-cpp are both here."""
    return shutil.which("node") is not None and _entry().is_file()


def run(gguf_file: str | Path, requests: Sequence[dict], *, threads: int | None = None, context: int = 1024,
        timeout: float = 1800) -> list[dict]:
    """Send requests (see llama_runner.mjs) to llama.cpp with one load of the model; the answers in order."""
    if not available():
        raise ExportError(f"No llama.cpp runtime (Node and node-llama-cpp under {runtime_dir()}): {INSTALL_HINT}.")
    payload = {"model": str(Path(gguf_file).resolve()), "threads": threads or os.cpu_count() or 1,
               "context": context, "requests": list(requests)}
    env = {**os.environ, "RLOO_KIT_NODE_LLAMA_CPP": str(_entry())}
    done = subprocess.run(["node", str(RUNNER)], input=json.dumps(payload), capture_output=True, text=True,
                          env=env, timeout=timeout)
    if done.returncode:
        raise ExportError(f"llama.cpp could not run {gguf_file}: {done.stderr.strip()[-600:] or done.returncode}")
    return json.loads(done.stdout)["results"]


def greedy(gguf_file: str | Path, prompts: Sequence[str | Sequence[int]], *, max_tokens: int = 32,
           **kw) -> list[list[int]]:
    """Greedy completions (token ids, up to an end-of-generation token). A prompt is token ids, or text that
    llama.cpp tokenizes itself with its special tokens parsed (a chat-templated prompt as it is)."""
    reqs = [{"op": "greedy", "max_tokens": max_tokens, **_prompt(p)} for p in prompts]
    return [r["tokens"] for r in run(gguf_file, reqs, **kw)]


def teacher_forced_top1(gguf_file: str | Path, prompts: Sequence[Sequence[int]],
                        targets: Sequence[Sequence[int]], **kw) -> list[list[int]]:
    """For each prompt, llama.cpp's argmax next token after prompt + target[:i], for every i."""
    reqs = [{"op": "forced", "tokens": list(p), "targets": list(t)} for p, t in zip(prompts, targets, strict=True)]
    return [r["top1"] for r in run(gguf_file, reqs, **kw)]


def tokenize(gguf_file: str | Path, texts: Sequence[str], **kw) -> list[list[int]]:
    """llama.cpp's own tokenization of each text (special tokens parsed), to compare with the HF tokenizer's."""
    return [r["tokens"] for r in run(gguf_file, [{"op": "tokenize", "text": t} for t in texts], **kw)]


def _prompt(p: str | Sequence[int]) -> dict:
    return {"text": p} if isinstance(p, str) else {"tokens": list(p)}
