"""A real CUDA out-of-memory in the middle of a run: does the kit name the fix and keep what was trained?

    python benchmarks/cuda_oom.py                         # on a GPU; writes benchmarks/results/cuda-oom.json
    python benchmarks/cuda_oom.py --backend transformers  # skips Unsloth's compile (~50 s on the first step)

The default model trains two steps; then the process is allowed only the memory it already holds
(torch.cuda.set_per_process_memory_fraction), so the third step's generation is refused by CUDA's
caching allocator exactly as on a card that is too small. Checked: rloo_kit.train raises
GPUOutOfMemoryError with advice, and `interrupted/` holds an adapter that differs from the initial one.
Without a GPU the same path runs with the out-of-memory error raised by hand (a dry run of the script).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from common import RESULTS, stamp
from safetensors.torch import load_file
from transformers import TrainerCallback

import rloo_kit
from rloo_kit.choices import BACKENDS

OUTPUT = Path("runs/cuda-oom")


class StarveAfter(TrainerCallback):
    """After `step` steps, leave the process no more GPU memory than it already holds."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step != self.step:
            return
        if not torch.cuda.is_available():
            raise torch.cuda.OutOfMemoryError("dry run: no GPU, raised by hand")
        torch.cuda.empty_cache()
        held = torch.cuda.memory_reserved()
        torch.cuda.set_per_process_memory_fraction(held / torch.cuda.get_device_properties(0).total_memory)


def lora_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items() if "lora_" in k}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="auto", choices=BACKENDS)
    args = ap.parse_args()
    gpu = torch.cuda.is_available()
    model, tok = rloo_kit.load_model("smollm2-135m", preset="8gb" if gpu else "cpu", backend=args.backend)
    model = rloo_kit.attach_lora(model, seed=0)
    before = lora_weights(model)
    task = rloo_kit.load_task("arithmetic", n_train=64, seed=0)
    trainer = rloo_kit.build_trainer(model, tok, task, output_dir=str(OUTPUT), max_steps=6, num_generations=4,
                                     per_device_train_batch_size=8, max_completion_length=64, save_strategy="no",
                                     report_to="none", callbacks=[StarveAfter(2)])
    result: dict = {**stamp()}
    try:
        rloo_kit.train(trainer)
        result["raised"] = None
    except rloo_kit.GPUOutOfMemoryError as e:
        result["raised"] = type(e).__name__
        result["message"] = str(e)
        result["cause"] = repr(e.__cause__)[:400]
    finally:
        if gpu:
            torch.cuda.set_per_process_memory_fraction(1.0)
    kept = OUTPUT / "interrupted" / "adapter_model.safetensors"
    result["adapter_kept"] = kept.is_file()
    if kept.is_file():
        saved = load_file(kept)  # PEFT saves lora_A.weight for the model's lora_A.default.weight
        deltas = [float((v.float() - before[k.replace(".weight", ".default.weight")]).abs().max())
                  for k, v in saved.items() if k.replace(".weight", ".default.weight") in before]
        result["kept_tensors"], result["matched_tensors"] = len(saved), len(deltas)
        result["kept_differs_from_initial"] = bool(deltas) and max(deltas) > 0
    result["step_reached"] = trainer.state.global_step
    RESULTS.mkdir(exist_ok=True)
    name = "cuda-oom" if gpu else "cuda-oom-dry-run"
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "versions"}, indent=2))


if __name__ == "__main__":
    main()
