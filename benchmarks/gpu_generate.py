"""How fast the kit's own generation (pre-flight, validation, evaluation: `evaluation.generate_ids`) runs on a GPU,
as it runs today and under the switches Unsloth and torch offer: `torch.inference_mode`, and Unsloth's
`FastLanguageModel.for_inference` (its documented "2x faster inference"), undone by `for_training` after.
A validation pass at 256 tokens cost about as much as several training steps in the fourth GPU session.

    python3 benchmarks/gpu_generate.py --name gpu-generate        # on a GPU machine, the default model built

The default model with a fresh LoRA adapter (as during training), 32 prompts of a file task, greedy, up to
`--tokens` new tokens, each mode timed twice after one warm-up; greedy completions are compared with the first
mode's, so a faster mode must not answer differently. Both backends where Unsloth is present: a user without it
gets transformers + bitsandbytes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import torch

from rloo_kit.evaluation import generate_ids
from rloo_kit.models import attach_lora, load_model, unsloth_available

RESULTS = Path(__file__).parent / "results"
TASK = Path(__file__).parent / "tasks" / "word_sums.jsonl"


@contextlib.contextmanager
def unsloth_inference(model):
    from unsloth import FastLanguageModel

    FastLanguageModel.for_inference(model)
    try:
        yield
    finally:
        FastLanguageModel.for_training(model)


def modes(backend: str) -> dict:
    found = {"as today": lambda m: contextlib.nullcontext(), "inference_mode": lambda m: torch.inference_mode()}
    if backend == "unsloth":
        found["unsloth for_inference"] = unsloth_inference
        found["for_inference + inference_mode"] = _both
    return found


@contextlib.contextmanager
def _both(model):
    with unsloth_inference(model), torch.inference_mode():
        yield


def timed(model, tok, switch, prompts: list, tokens: int) -> tuple[float, list]:
    with switch(model):
        torch.cuda.synchronize()
        start = time.perf_counter()
        ids = generate_ids(model, tok, prompts, max_new_tokens=tokens, batch_size=len(prompts))
        torch.cuda.synchronize()
        return time.perf_counter() - start, ids


def time_backend(backend: str, prompts: list, tokens: int) -> list[dict]:
    model, tok = load_model("smollm2-135m", backend=backend, load_in_4bit=True)
    model = attach_lora(model, preset="8gb")
    rows, reference = [], None
    for name, switch in modes(backend).items():
        try:
            timed(model, tok, switch, prompts, tokens)  # warm-up (Unsloth compiles its inference path on first use)
            (first, ids), (second, _) = (timed(model, tok, switch, prompts, tokens) for _ in range(2))
        except Exception as e:  # a mode that fails is a finding, not the end of the benchmark
            rows.append({"backend": backend, "mode": name, "error": f"{type(e).__name__}: {e}"[:300]})
            continue
        reference = reference or ids
        same = sum(a == b for a, b in zip(ids, reference, strict=True))
        rows.append({"backend": backend, "mode": name, "seconds": min(first, second),
                     "tokens_per_second": sum(len(c[0]) for c in ids) / min(first, second),
                     "greedy_same_as_first_mode": f"{same}/{len(prompts)}"})
        print(rows[-1], flush=True)
    # the model still trains after the switches: one backward pass through the adapter
    model.train()
    batch = tok(["Ben has 5 apples."], return_tensors="pt").to(model.device)
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    grads = sum(p.grad is not None for p in model.parameters() if p.requires_grad)
    rows.append({"backend": backend, "mode": "backward after the switches", "adapter_tensors_with_grad": grads})
    print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--name", default="gpu-generate")
    args = parser.parse_args()
    lines = [json.loads(line) for line in TASK.read_text().splitlines()[:args.prompts]]
    prompts = [[{"role": "user", "content": row["question"]}] for row in lines]
    rows = []
    for backend in (["unsloth"] if unsloth_available() else []) + ["transformers"]:
        rows += time_backend(backend, prompts, args.tokens)
    out = {"device": torch.cuda.get_device_name(0), "tokens": args.tokens, "prompts": args.prompts, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
