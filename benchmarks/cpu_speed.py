"""Is the CPU fast path faster, and does it learn as well? Today's (0.1) fp32 path and the new
default, side by side in one run: two worker processes (so each has its own peak memory) that take
their RLOO steps in lockstep, alternating who goes first, so that machine noise falls on both alike.
Same model, task, preset (cpu), seed and step count; then held-out greedy accuracy of each.

    .venv/bin/python benchmarks/cpu_speed.py [--steps 30] [--model smollm2-135m] [--learning-seeds 1 2]

  legacy  RLOO_KIT_CPU_DTYPE=fp32 and 0.1's log-prob path (benchmarks/legacy.py): fp32 weights, log-softmax
          over the vocabulary through autograd in fp32, TRL's separate no-grad policy pass
  fast    the default: bf16 base weights where the CPU has native bf16 (hardware.cpu_compute; fp32 LoRA
          weights and Adam states), the chunked log-prob function, the scoring forward reused by the loss,
          grouped attention (rloo_kit.patches.attention), and rloo_kit.patches.cpu_step: bf16 LoRA compute; while
          sampling, packed base weights, a lean LoRA forward, each distinct prompt read once and a
          cheaper categorical draw. Both paths give the LM head a contiguous input
          (rloo_kit.patches.compat), so the baseline is if anything a little faster than 0.1's

--learning-seeds repeats the training of both paths with other seeds, one run per core at a time on
one thread each (their timings are not used; more at once would hold several models in memory for
nothing): one run's held-out accuracy moves by several points with the luck of its samples, so the
accuracy goal is judged on the mean over all seeds.

Writes benchmarks/results/cpu-speed.{json,md}. Goals: median step time fast / legacy <= 0.5; mean held-out
accuracy after the run within 0.05 of legacy's.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

PROTOCOL = "@@"  # worker lines for the parent start with this; everything else is the trainer's chatter


def worker(path: str, steps: int, model_name: str, seed: int, n_test: int, lockstep: bool) -> None:
    import torch
    from legacy import SKIP, use_legacy_log_probs
    from transformers import TrainerCallback

    import rloo_kit
    from rloo_kit.tasks import load_task

    def say(**msg):
        print(PROTOCOL + json.dumps(msg), flush=True)

    task = load_task("arithmetic", n_train=steps * 16, n_test=n_test, seed=seed)
    model, tok = rloo_kit.load_model(model_name, preset="cpu")
    model = rloo_kit.attach_lora(model, preset="cpu", seed=seed)
    t = time.perf_counter()
    before = task.evaluate(model, tok).accuracy
    eval_before = time.perf_counter() - t

    class Lockstep(TrainerCallback):
        def __init__(self):
            self.start, self.seconds = 0.0, []

        def on_step_begin(self, args, state, control, **kwargs):
            if lockstep:
                say(ready=state.global_step)
                sys.stdin.readline()  # wait for the parent's turn signal
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)
            say(done=state.global_step, seconds=self.seconds[-1])

    clock = Lockstep()
    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir=f"runs/bench-cpu-speed-{path}",
                                     max_steps=steps, save_strategy="no", disable_tqdm=True, seed=seed,
                                     callbacks=[clock], monitor=False, live=False,
                                     skip_patches=SKIP if path == "legacy" else ())
    if path == "legacy":
        use_legacy_log_probs()  # the 0.1 log-prob path, and (SKIP) no reuse of the scoring forward
    weights = {str(p.dtype).replace("torch.", "") for n, p in trainer.model.named_parameters() if "lora_" not in n}
    lora = {str(p.dtype).replace("torch.", "") for n, p in trainer.model.named_parameters() if "lora_" in n}
    trainer.train()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    t = time.perf_counter()
    after = task.evaluate(trainer.model, tok).accuracy
    logs = [h for h in trainer.state.log_history if "reward" in h]
    say(result={"path": path, "base_weights": sorted(weights), "lora_weights": sorted(lora),
                "reuse_policy_forward": bool(getattr(trainer, "_rloo_kit_reuse", False)),
                "step_seconds": [round(s, 3) for s in clock.seconds], "peak_rss_gb": round(peak, 3),
                "accuracy_before": before, "accuracy_after": after,
                "eval_seconds": round(eval_before + time.perf_counter() - t, 1),
                "rewards": [round(h["reward"], 4) for h in logs], "kl": [round(h["kl"], 5) for h in logs],
                "mean_length": [round(h["completions/mean_length"], 2) for h in logs],
                "torch_threads": torch.get_num_threads()})


def start(path: str, a, seed: int, lockstep: bool = True) -> subprocess.Popen:
    env = dict(os.environ, TQDM_DISABLE="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1")
    if path == "legacy":
        env["RLOO_KIT_CPU_DTYPE"] = "fp32"
    if not lockstep:
        env["OMP_NUM_THREADS"] = "1"  # several runs share the cores
    cmd = [sys.executable, __file__, "--worker", path, "--steps", str(a.steps), "--model", a.model,
           "--seed", str(seed), "--n-test", str(a.n_test), *([] if lockstep else ["--free-running"])]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            stderr=open(f"runs/bench-cpu-speed-{path}-{seed}.log", "w"))


def free_run(path: str, a, seed: int) -> dict:
    """One training run of `path` on one thread, not in lockstep; its result message."""
    proc = start(path, a, seed, lockstep=False)
    result = expect(proc, "result")["result"]
    proc.wait()
    return result


def expect(proc: subprocess.Popen, key: str) -> dict:
    for line in proc.stdout:
        if line.startswith(PROTOCOL):
            msg = json.loads(line[len(PROTOCOL):])
            if key in msg:
                return msg
    raise RuntimeError(f"worker exited (code {proc.wait()}) before sending '{key}': see runs/bench-cpu-speed-*.log")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-test", type=int, default=50)
    ap.add_argument("--learning-seeds", type=int, nargs="*", default=[])
    ap.add_argument("--worker", choices=("legacy", "fast"))
    ap.add_argument("--free-running", action="store_true")
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.steps, a.model, a.seed, a.n_test, lockstep=not a.free_running)

    sys.path.insert(0, str(Path(__file__).parent))
    from common import load_note, median, stamp, write

    from rloo_kit.hardware import cpu_compute

    Path("runs").mkdir(exist_ok=True)
    paths = ("legacy", "fast")
    procs = {p: start(p, a, a.seed) for p in paths}
    for step in range(a.steps):
        for p in (paths if step % 2 == 0 else paths[::-1]):  # alternate who goes first
            expect(procs[p], "ready")
            procs[p].stdin.write("go\n")
            procs[p].stdin.flush()
            msg = expect(procs[p], "done")
            print(f"step {step + 1} {p}: {msg['seconds']:.2f} s", flush=True)
    runs = {p: expect(procs[p], "result")["result"] for p in paths}
    for p in paths:
        procs[p].wait()
    keys = [(p, s) for s in a.learning_seeds for p in paths]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        done = pool.map(lambda key: free_run(key[0], a, key[1]), keys)
        more = dict(zip(keys, done, strict=True))
    accuracy = {p: [runs[p]["accuracy_after"], *(more[p, s]["accuracy_after"] for s in a.learning_seeds)]
                for p in paths}
    mean_accuracy = {p: sum(accuracy[p]) / len(accuracy[p]) for p in paths}
    choice = cpu_compute()
    step = {p: median(runs[p]["step_seconds"][1:]) for p in paths}  # the first step pays for warm-up
    ratio = step["fast"] / step["legacy"]
    gap = mean_accuracy["fast"] - mean_accuracy["legacy"]
    result = {**stamp(), "cpu_flags": list(choice.flags), "cpu_path": choice.describe(), "settings": vars(a),
              "median_step_seconds": step, "step_time_ratio_fast_over_legacy": round(ratio, 4),
              "goal_ratio": "<= 0.5", "ratio_met": ratio <= 0.5, "accuracy_gap": round(gap, 4),
              "seeds": [a.seed, *a.learning_seeds], "accuracy_after_by_seed": accuracy,
              "mean_accuracy_after": mean_accuracy,
              "goal_accuracy": "mean within 0.05 of legacy", "accuracy_met": abs(gap) <= 0.05 or gap > 0, "runs": runs,
              "learning_runs": {f"{p}-seed{s}": r for (p, s), r in more.items()}}
    seeds = ", ".join(str(s) for s in [a.seed, *a.learning_seeds])
    rows = ["| path | base weights | median step (s) | peak RSS (GiB) | held-out accuracy before -> after | "
            f"after, seeds {seeds} | mean after |", "|---|---|---|---|---|---|---|"]
    for p in paths:
        r = runs[p]
        rows.append(f"| {p} | {', '.join(r['base_weights'])} | {step[p]:.2f} | {r['peak_rss_gb']:.2f} | "
                    f"{r['accuracy_before']:.2f} -> {r['accuracy_after']:.2f} | "
                    f"{' / '.join(f'{x:.2f}' for x in accuracy[p])} | {mean_accuracy[p]:.3f} |")
    met = "met" if ratio <= 0.5 else "NOT met"
    acc_met = "met" if result["accuracy_met"] else "NOT met"
    rows += ["", f"median step time fast / legacy: **{ratio:.2f}** (goal <= 0.5: {met}); mean held-out accuracy "
             f"after {a.steps} steps, fast - legacy: **{gap:+.3f}** (goal: within 0.05, or better: {acc_met})"]
    write("cpu-speed", result, rows, notes=(
        f"CPU flags: {', '.join(choice.flags) or 'none reported'}. This machine's path: {choice.describe()}. "
        f"{a.steps} RLOO steps each (cpu preset: 4 prompts x 4 completions of up to 16 tokens, SmolLM2-135M, "
        f"LoRA r=16), seed {a.seed}, taken in lockstep from two processes, alternating who goes first; the first "
        f"step of each is left out; step times and memory come from that pair (seed {a.seed}). Held-out: {a.n_test} "
        f"arithmetic prompts, greedy. Peak RSS includes the evaluation before training. {load_note(result)}"))


if __name__ == "__main__":
    main()
