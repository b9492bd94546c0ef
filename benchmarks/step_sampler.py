"""What the training sampler (`cpu_sampler`: rloo_kit.patches.cpu_step.lean_sampler) saves in a CPU RLOO step,
on whatever path this CPU takes (bf16 base weights with AVX512-BF16 or AMX, fp32 without), measured in one
process: one trainer at the cpu preset whose steps alternate between the kit's sampler and TRL's own
`_generate_single_turn`, so that the machine's drift falls on both alike.

    .venv/bin/python benchmarks/step_sampler.py [--steps 12] [--model smollm2-135m]

Reports the median step and the median sampling time each way. Writes benchmarks/results/step-sampler-<dtype>.
{json,md} (float32 or bfloat16: the base weights of this machine's path).
"""

from __future__ import annotations

import argparse
import time
import types

from common import load_note, median, stamp, write

import rloo_kit
from rloo_kit.tasks import load_task


def main() -> None:
    from transformers import TrainerCallback

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    result = {**stamp(), "settings": vars(args)}
    task = load_task("arithmetic", n_train=args.steps * 16, n_test=8, seed=args.seed)
    model, tok = rloo_kit.load_model(args.model, preset="cpu")
    model = rloo_kit.attach_lora(model, preset="cpu", seed=args.seed)
    dtype = str(model.get_base_model().dtype).removeprefix("torch.")
    seconds: dict[str, dict[str, list[float]]] = {w: {"step": [], "sampling": []} for w in ("kit", "trl")}
    state = {"way": "kit", "start": 0.0}

    class Alternate(TrainerCallback):
        def on_step_begin(self, args_, train_state, control, **kwargs):
            state["way"] = "kit" if train_state.global_step % 2 == 0 else "trl"
            state["start"] = time.perf_counter()

        def on_step_end(self, args_, train_state, control, **kwargs):
            seconds[state["way"]]["step"].append(round(time.perf_counter() - state["start"], 3))

    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir="runs/bench-step-sampler",
                                     max_steps=args.steps, save_strategy="no", disable_tqdm=True, seed=args.seed,
                                     callbacks=[Alternate()], monitor=False, live=False)
    assert "cpu_sampler" in trainer.rloo_kit_patches, trainer.rloo_kit_patches
    ways = {"kit": vars(trainer)["_generate_single_turn"],  # the patch's, bound on the instance
            "trl": types.MethodType(type(trainer)._generate_single_turn, trainer)}

    def timed(*a, **k):
        start = time.perf_counter()
        try:
            return ways[state["way"]](*a, **k)
        finally:
            seconds[state["way"]]["sampling"].append(round(time.perf_counter() - start, 3))

    trainer._generate_single_turn = timed  # this trainer only: the benchmark's stopwatch over either way
    trainer.train()
    result.update(dtype=dtype, seconds=seconds)
    table = ["| sampling | median step (s) | median sampling (s) | steps |", "|---|---|---|---|"]
    for way, label in (("trl", "TRL's own"), ("kit", "the kit's `cpu_sampler`")):
        s = seconds[way]
        table.append(f"| {label} | {median(s['step'][1:]):.2f} | {median(s['sampling'][1:]):.2f} | "
                     f"{len(s['step']) - 1} |")
    kit, trl = (median(seconds[w]["step"][1:]) for w in ("kit", "trl"))
    notes = (f"{dtype} base weights, the cpu preset (16 completions a step, 16 tokens at most); each way's first step "
             f"left out (warm-up). Step ratio kit / TRL: {kit / trl:.2f}. " + load_note(result))
    write(f"step-sampler-{dtype}", result, table, notes)


if __name__ == "__main__":
    main()
