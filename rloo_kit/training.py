"""Build TRL's RLOOTrainer with the kit's defaults, and run it without losing work.

`build_trainer` checks inputs up front (so a mistake fails in seconds, not an hour in), guards the
rewards, attaches the health monitor and keeps LoRA's reference model free: the base model with
the adapter switched off. `train` resumes from checkpoints, saves the adapter when interrupted,
and turns a CUDA out-of-memory into advice.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from datasets import Dataset
from transformers import TrainerCallback, TrainerState
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import TrainOutput
from trl import RLOOConfig, RLOOTrainer

from .budget import BUDGET_STEPS, StepBudget, TimeBudget, Validation, read_json
from .budget import STATE_FILE as BUDGET_STATE
from .choice_order import with_reordered_twins
from .data import validate_dataset
from .diagnostics import SHORT_ANSWER_PROMPT, HealthMonitor
from .distributed import barrier, is_main_process, shards_parameters
from .errors import ConfigError, GPUOutOfMemoryError
from .memory import ModelShape
from .models import attach_lora, require_adapter
from .notebook.live import attach_live_view
from .patches import allowed, patch_before_trainer, patch_trainer
from .patches.private import load_checkpoint
from .pool import STATE_FILE as POOL_STATE
from .pool import PoolCallback, PromptPool
from .presets import (
    GPU_PRESETS,
    SMALL_MODEL_PARAMS,
    Preset,
    changed_from_own,
    learning_rate_for,
    make_config,
    resolve_preset,
    validate_rloo_fields,
)
from .rewards import RewardFunc, guard, required_columns
from .tasks import Task
from .tools import KIT, MAX_CALLS, as_tools, in_model_format

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger("rloo_kit")

ADAPTER_DIR = "adapter"  # inside output_dir: the final adapter
INTERRUPTED_DIR = "interrupted"  # inside output_dir: the adapter saved on Ctrl-C
DEFAULT_ADAPTERS = (Path("runs/train") / ADAPTER_DIR, Path("runs/demo") / ADAPTER_DIR)  # 01_train's, make demo's


def build_trainer(model: PreTrainedModel | PeftModel, tokenizer: PreTrainedTokenizerBase, train_dataset: Dataset | Task,
                  reward_funcs: RewardFunc | Sequence[RewardFunc] | None = None, *,
                  preset: str | Preset | None = None, config: RLOOConfig | None = None,
                  output_dir: str = "runs/rloo", monitor: HealthMonitor | bool = True,
                  callbacks: Sequence[TrainerCallback] = (), strict_rewards: bool = False,
                  eval_dataset: Dataset | None = None, live: bool = True, skip_patches: Collection[str] = (),
                  minutes: float | None = None, keep_best: bool = False, prompt_pool: bool | PromptPool = False,
                  spread_filter: bool = False, mix_choice_order: bool = False,
                  tools: Sequence[Callable] = (), max_tool_calls: int = MAX_CALLS,
                  **overrides: object) -> RLOOTrainer:
    """An RLOOTrainer ready to `train()`.

    `train_dataset` is a dataset (then pass `reward_funcs`) or a `tasks.Task`, whose train split,
    rewards, reward weights and completion length are used unless `reward_funcs` / overrides say
    otherwise. The config is `config` as given, or `make_config(preset, output_dir=..., **overrides)`
    (the hardware's preset when none is named). A model without LoRA gets the preset's adapter.
    Reward functions are guarded (`rewards.guard`; strict_rewards=True makes failures raise).
    live=True shows the run with `live.attach_live_view` (a widget in a notebook, text lines elsewhere)
    in place of transformers' progress display; live=False leaves transformers' display as it is.
    The kit's changes to TRL, transformers, PEFT and torch go in here (`rloo_kit.patches`), less those named
    in `skip_patches`; `trainer.rloo_kit_patches` names the ones applied.
    minutes: train for this long rather than for max_steps (which stays a cap when given), at a constant
    learning rate, keeping the best step by greedy accuracy on validation rows carved from the task's training
    rows (`budget.TimeBudget`, `trainer.time_budget`); needs a Task with answers.
    keep_best: a run of max_steps measures the same validation rows and ends with its best step too
    (`budget.StepBudget`, also `trainer.time_budget`); what `minutes` does already.
    prompt_pool: draw each step's prompts from a `pool.PromptPool` (True: a fresh one over the training prompts) that
    rests prompts whose groups were flat, in place of TRL's uniform draw (`trainer.prompt_pool`); one process only.
    spread_filter: each step's log-prob passes and loss cover only its groups whose completions got different task
    rewards (patch `spread_filter`); one process, one micro-batch a generation.
    mix_choice_order: sample each choice question's group half as written and half with its choices one place on
    (`choice_order`, `trainer.choice_twins`), so that a habit of picking one place is right in one half and wrong in
    the other, and the group teaches; not with vLLM, whose server samples a group from one prompt.
    tools: Python functions the model may call in its rollouts (a Task made with `tools.with_tools` brings its
    own), at most `max_tool_calls` a completion; a tool's tokens weigh nothing in the loss (patch `tool_rollouts`).

    Args:
        model: the model to train; one without LoRA gets the preset's adapter (`attach_lora`).
        tokenizer: the model's tokenizer (TRL's processing_class).
        train_dataset: a dataset with a `prompt` column and the columns the rewards read, or a Task.
        reward_funcs: the rewards; the Task's when None.
        preset: where the config and the LoRA shape come from; the hardware's when None.
        config: a ready RLOOConfig, used as it is (then no field overrides); built from the preset when None.
        output_dir: where checkpoints and the adapter go, when the config is built here.
        monitor: True: a new HealthMonitor; a HealthMonitor: that one; False: none.
        callbacks: more TrainerCallbacks, after the kit's.
        strict_rewards: raise RewardError at a reward's first failure rather than score that sample None.
        eval_dataset: passed to RLOOTrainer as its eval_dataset; none when None.
        live: show the run with the kit's live view in place of transformers' progress display.
        skip_patches: names of kit patches not to apply.
        minutes: a time budget in minutes (see above); none when None.
        keep_best: keep the best validation step of a run bounded by steps (see above).
        prompt_pool: True, or a PromptPool, to draw prompts from a pool (see above); False: TRL's uniform draw.
        spread_filter: True to leave a step's flat groups out of its forward and backward passes (see above).
        mix_choice_order: True to sample choice questions in two orders within each group (see above).
        tools: Python functions (or `tools.Tool`s) the model may call; the Task's when empty.
        max_tool_calls: the most tool calls one completion may make.
        **overrides: RLOOConfig fields, over the preset's and the Task's.

    Returns:
        The RLOOTrainer, with `health_monitor`, `time_budget`, `prompt_pool`, `choice_twins`, `spread_filter` and
        `rloo_kit_patches` set.
    """
    task = train_dataset if isinstance(train_dataset, Task) else None
    validated = minutes is not None or keep_best
    if validated and (task is None or config is not None):
        raise ConfigError(f"{'minutes=' if minutes is not None else 'keep_best='} needs a Task (its validation rows "
                          "choose the best step) and no config=: pass the task, and RLOOConfig fields as keyword "
                          "arguments.")
    if task is not None:
        task, overrides = _as_trained(task, tokenizer, config, minutes, validated, overrides)
        train_dataset, reward_funcs = task.train, reward_funcs or task.reward_funcs
    if config is not None and overrides:
        raise ConfigError(f"Pass either config= or field overrides ({', '.join(overrides)}), not both: "
                          "put the overrides into the RLOOConfig, or drop config= to build one from the preset.")
    preset = resolve_preset(preset)
    if config is None:
        if "learning_rate" not in overrides:
            overrides["learning_rate"] = _learning_rate(model, preset)
        config = make_config(preset, output_dir=output_dir, **overrides)
    else:
        validate_rloo_fields(vars(config), preset.max_seq_length)
    funcs = guard(reward_funcs if reward_funcs is not None else [], strict=strict_rewards)
    pool = PromptPool(train_dataset["prompt"], seed=config.seed) if prompt_pool is True else prompt_pool or None
    if pool is not None:
        try:
            funcs = pool.recording(funcs, config.reward_weights or [1.0] * len(funcs))
        except ValueError as e:
            raise ConfigError(f"prompt_pool: {e}") from None
    validate_dataset(train_dataset, set().union(*map(required_columns, funcs)))
    train_dataset, twins = _in_two_orders(train_dataset, pool, config) if mix_choice_order else (train_dataset, {})
    if not hasattr(model, "peft_config"):
        model = attach_lora(model, preset=preset)
    patched = patch_before_trainer(model, config, skip_patches)  # a model loaded outside the kit gets them too
    budget = None
    if validated:
        validate = _validator(task, tokenizer, config)
        budget = (TimeBudget(minutes, validate, output_dir=config.output_dir) if minutes is not None
                  else StepBudget(validate, output_dir=config.output_dir))
    # a run given minutes that memorises its training prompts, or learns a habit, stops: the rest would not help
    stop_on = ("memorisation", "answer_habit") if minutes else ()
    monitor = HealthMonitor(stop_on=stop_on) if monitor is True else monitor or None
    # the budget adds its measurement to a step's log before the monitor reads it
    kit_callbacks = [budget, PoolCallback(pool, config.output_dir) if pool else None, monitor]
    trainer = RLOOTrainer(model=model, reward_funcs=funcs, args=config, train_dataset=train_dataset,
                          eval_dataset=eval_dataset, processing_class=tokenizer,
                          callbacks=[*filter(None, kit_callbacks), *callbacks])
    trainer.time_budget, trainer.prompt_pool, trainer.spread_filter = budget, pool, spread_filter
    trainer.choice_twins = twins
    trainer.kit_tools = as_tools(tools) if tools else list(task.tools) if task is not None else []
    trainer.kit_tool_format = task.tool_format if task is not None and task.tools else KIT.name
    trainer.max_tool_calls = max_tool_calls
    _use_base_as_reference(trainer.model)
    patch_trainer(trainer, patched, skip_patches)  # the banner line; trainer.rloo_kit_patches
    trainer.health_monitor = monitor
    if monitor is not None and monitor.answer_reward is None:  # the task's answer comes first among its rewards
        monitor.answer_reward = trainer.reward_func_names[0]
    if monitor is not None and task is not None:  # the pre-flight's short-answer prompt, or the user's own
        monitor.asks_short = monitor.asks_short or SHORT_ANSWER_PROMPT in task.system_prompts()
    if live:
        attach_live_view(trainer, monitor)
    return trainer


def _in_two_orders(dataset: Dataset, pool: PromptPool | None, config: RLOOConfig) -> tuple[Dataset, dict[int, int]]:
    """`mix_choice_order`: the training rows with their reordered twins and which row each is of ({} where there
    are none, or under vLLM); a pool judges a twin's groups as its row's."""
    if config.use_vllm:
        log.warning("mix_choice_order: off with vLLM, whose server samples a group from one prompt; the choice "
                    "questions are sampled as written.")
        return dataset, {}
    mixed, twins = with_reordered_twins(dataset)
    if pool is not None:
        prompts = mixed["prompt"]
        pool.add_twins((prompts[row], prompts[twin]) for row, twin in twins.items())
    if is_main_process():
        log.info(f"choice questions in two orders: {len(twins)} of {len(dataset)} training rows sampled half as "
                 "written, half with their choices one place on" if twins else
                 "mix_choice_order: no training row lists choices the kit can reorder; sampled as written.")
    return mixed, twins


def _as_trained(task: Task, tokenizer: PreTrainedTokenizerBase, config: RLOOConfig | None, minutes: float | None,
                validated: bool, overrides: dict) -> tuple[Task, dict]:
    """The task as this run trains it, and the config overrides with what the task decides beneath what was asked:
    its tools told in the model's own format where the chat template has one (as TRL does), its validation rows
    set apart where the best step is kept, and under a time budget max_steps left open, at a constant learning rate."""
    task = in_model_format(task, tokenizer)
    if validated:
        task = task.carve_validation(overrides.get("seed", 0))
    if minutes is not None:
        overrides = {"max_steps": BUDGET_STEPS, "lr_scheduler_type": "constant", **overrides}
    if config is not None:
        if task.tool_format != KIT.name and not (config.chat_template_kwargs or {}).get("tools"):
            raise ConfigError("This task's tools are told in the model's own format, which its chat template "
                              "renders from chat_template_kwargs: put task.trainer_overrides()"
                              "['chat_template_kwargs'] into the RLOOConfig's, or drop config=.")
        return task, overrides
    decided = task.trainer_overrides()
    if "chat_template_kwargs" in decided:  # the template's tools, beside what was asked (enable_thinking, ...)
        overrides = {**overrides, "chat_template_kwargs": {**decided["chat_template_kwargs"],
                                                           **(overrides.get("chat_template_kwargs") or {})}}
    return task, {**decided, **overrides}


def _learning_rate(model, preset: Preset) -> float:
    """The preset's learning rate for this model's size (`presets.learning_rate_for`), said when it differs. A
    preset whose rate was changed from its own (`dataclasses.replace`, a recipe) keeps it: that rate was asked."""
    config = getattr(model, "config", None)
    if config is None or changed_from_own(preset, "learning_rate"):
        return preset.learning_rate
    try:
        params = ModelShape.from_config(config).params
    except AttributeError:  # a config without the sizes a decoder's has
        return preset.learning_rate
    lr = learning_rate_for(preset, params)
    if lr != preset.learning_rate:
        log.info(f"learning rate {lr:g}, not the {preset.name} preset's {preset.learning_rate:g}: a model under "
                 f"{SMALL_MODEL_PARAMS / 1e9:g}B parameters needs a larger step (learning_rate= sets one).")
    return lr


def _validator(task: Task, tokenizer, config: RLOOConfig):
    """Greedy answers to the task's validation rows, at the completion length training samples: right or not, row
    by row, and the one answer or the one place in a list of choices they give whatever the row where they do (None
    for a task without answers)."""
    def validate(model) -> Validation | None:
        report = task.evaluate(model, tokenizer, dataset=task.validation, max_new_tokens=config.max_completion_length)
        if report.accuracy is None:
            return None
        return Validation.of(report)

    return validate


def _use_base_as_reference(model) -> None:
    """TRL copies a ready-made adapter into a second 'ref' adapter. For a fresh LoRA adapter
    (B = 0) that copy equals the base model, so drop it: the reference becomes the base with the
    adapter disabled, which costs no memory and keeps checkpoints to one adapter."""
    peft_config = getattr(model, "peft_config", {})
    if "ref" not in peft_config:
        return
    fresh = all(torch.count_nonzero(p) == 0 for n, p in model.named_parameters() if ".lora_B.default." in n)
    if fresh:
        model.delete_adapter("ref")
        model.set_adapter("default")


def latest_checkpoint(output_dir: str | Path, state_files: Sequence[str] = ()) -> Path | None:
    """The newest complete `checkpoint-N` directory in output_dir, or None. A checkpoint is complete once its
    trainer_state.json and the kit's `state_files` (the time budget's and the pool's, which callbacks write after
    it) are there and read as JSON: a run killed while saving leaves a checkpoint without them, or with one cut
    short (transformers writes trainer_state.json in place), and resuming from it would fail or forget them."""
    ckpts = sorted((p for p in Path(output_dir).glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                   key=lambda p: int(p.name.split("-")[-1]), reverse=True)
    for ckpt in ckpts:
        unread = [name for name in (TRAINER_STATE_NAME, *state_files) if read_json(ckpt / name) is None]
        if not unread:
            return ckpt
        if is_main_process():
            log.warning("%s is incomplete, passed over: %s missing or cut short (the run was stopped while saving "
                        "it, or it was saved by a run without this one's options).", ckpt, ", ".join(unread))
    return None


def _state_files(trainer: RLOOTrainer) -> tuple[str, ...]:
    """The files the kit's callbacks add to each checkpoint of this trainer."""
    return tuple(name for name, owner in ((BUDGET_STATE, "time_budget"), (POOL_STATE, "prompt_pool"))
                 if getattr(trainer, owner, None) is not None)


def train(trainer: RLOOTrainer, *, resume: bool = False) -> TrainOutput:
    """Run training; returns TRL's TrainOutput. The final adapter goes to `output_dir/adapter`.

    resume=True continues from the latest checkpoint in output_dir (adapter, optimizer, RNG and
    step), or starts fresh when there is none; a run whose checkpoint already holds its last step trains
    nothing and writes that checkpoint's adapter. Ctrl-C (KeyboardInterrupt, SIGINT) saves the adapter
    to `output_dir/interrupted` and re-raises. A CUDA out-of-memory saves the adapter there too and
    is re-raised as GPUOutOfMemoryError naming the preset one size down. Under `accelerate launch`
    every process calls this; only the main one writes the adapters and the messages.

    Args:
        trainer: a trainer from `build_trainer`.
        resume: continue from the latest checkpoint in output_dir (a fresh start when there is none).

    Returns:
        TRL's TrainOutput: the steps taken, the mean training loss and the metrics.
    """
    out = Path(trainer.args.output_dir)
    checkpoint = latest_checkpoint(out, _state_files(trainer)) if resume else None
    if checkpoint is not None and _finished(trainer, checkpoint) and allowed("load_checkpoint"):
        return _finish_from(trainer, checkpoint)  # else transformers' own resume: one step past max_steps
    if resume and is_main_process():
        log.warning("Resuming from %s.", checkpoint) if checkpoint else log.warning(
            "No checkpoint in %s to resume from (a run stopped before its first checkpoint has learned nothing worth "
            "keeping): training starts again from step 0.", out)
    try:
        with _ctrl_c_kept(trainer):
            result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except KeyboardInterrupt:
        saved = _save_interrupted(trainer)
        if is_main_process() and saved:
            log.warning("Interrupted at step %d: adapter saved to %s. %s, or load that adapter.",
                        trainer.state.global_step, saved, RESUME_HINT)
        elif is_main_process():
            log.warning("Interrupted at step %d. %s %s.", trainer.state.global_step, _NOT_GATHERED, RESUME_HINT)
        raise
    except torch.cuda.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        saved = _save_interrupted(trainer)
        kept = f"The adapter as it was at step {trainer.state.global_step} is in {saved}." if saved else _NOT_GATHERED
        raise GPUOutOfMemoryError(f"{_oom_advice(trainer.args)} {kept}") from e
    trainer.save_model(str(out / ADAPTER_DIR))  # every process takes part (ZeRO-3 gathers); the main one writes
    barrier()  # no process goes on before the adapter is on disk
    return result


RESUME_HINT = ("Resume from the last checkpoint with the same command and --resume (resume=True in Python; a "
               "run stopped before its first checkpoint starts again from step 0)")


def _finished(trainer: RLOOTrainer, checkpoint: Path) -> bool:
    """Whether `checkpoint` already holds the run's last step (max_steps). transformers checks for max_steps
    only after a step, so resuming such a run would train one step past it. (A run planned in epochs ends at
    an epoch boundary, which transformers' resume does respect; DeepSpeed and FSDP load checkpoints only
    once the trainer has prepared the model: both are left to `trainer.train`.)"""
    if trainer.args.max_steps <= 0 or trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        return False
    state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE_NAME))
    budget = getattr(trainer, "time_budget", None)
    saved = read_json(checkpoint / BUDGET_STATE) if budget is not None else None  # a run bounded by time
    if saved is not None and (saved["spent_seconds"] >= budget.seconds or saved.get("solved_at") is not None):
        return True  # spent, or solved
    return state.global_step >= trainer.args.max_steps


def _train_on(trainer: RLOOTrainer) -> str:
    """What a finished run would need to train on: more steps, more minutes, or (solved) harder rows."""
    budget = getattr(trainer, "time_budget", None)
    if budget is None or budget.minutes is None:
        return "Raise max_steps to train on."
    if budget.solved_at is not None:
        return ("It stopped solved (every validation row right twice running, its training prompts answered one "
                "way): more minutes would keep no better step; harder or more varied rows would.")
    return "Raise the minutes to train on."


def _finish_from(trainer: RLOOTrainer, checkpoint: Path) -> TrainOutput:
    """Resuming a finished run: no step to take. The checkpoint's adapter and state become the trainer's,
    and the adapter is (re)written to `output_dir/adapter`, as at the end of `train`."""
    trainer.state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE_NAME))
    load_checkpoint(trainer, checkpoint)  # what trainer.train(resume_from_checkpoint=...) loads
    if getattr(trainer, "time_budget", None) is not None:  # its adapter is the step it kept, not the last
        trainer.time_budget.finish_resumed(trainer.model, trainer.state.global_step)
    out = Path(trainer.args.output_dir)
    trainer.save_model(str(out / ADAPTER_DIR))
    barrier()
    if is_main_process():
        log.warning("The run in %s already finished, at step %d: nothing to train. Its adapter, from %s, is in %s. "
                    "%s", out, trainer.state.global_step, checkpoint.name, out / ADAPTER_DIR, _train_on(trainer))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return TrainOutput(trainer.state.global_step, sum(losses) / len(losses) if losses else 0.0, {})


@contextlib.contextmanager
def _ctrl_c_kept(trainer: RLOOTrainer) -> Iterator[None]:
    """Make sure a Ctrl-C stops the run. Python raises KeyboardInterrupt wherever the main thread happens
    to be, and where that is a finalizer (`__del__`, a weakref callback) the exception is printed as
    "Exception ignored" and lost: the run went on to its last step. Here the handler also notes the
    interrupt, and the end of the step it landed in raises it again. Main thread only (signals are)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def on_sigint(signum, frame):
        noted.append(signum)
        raise KeyboardInterrupt

    class RaiseNotedInterrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if noted:
                raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    check = RaiseNotedInterrupt()
    trainer.add_callback(check)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
        trainer.remove_callback(check)


_NOT_GATHERED = ("The weights are split across processes (DeepSpeed ZeRO-3 or FSDP), so no adapter was gathered "
                 "after the stop: the last checkpoint holds the run.")


def _save_interrupted(trainer: RLOOTrainer) -> Path | None:
    """Keep what a run had learned when it stops early: the adapter goes to output_dir/interrupted,
    written by the main process. When the weights are split across processes, gathering them would
    need every process to take part, which an interruption cannot promise: nothing is written (None)."""
    if shards_parameters(trainer):
        return None
    saved = Path(trainer.args.output_dir) / INTERRUPTED_DIR
    trainer.save_model(str(saved))
    return saved


def _oom_advice(args: RLOOConfig) -> str:
    smaller = [p for p in GPU_PRESETS if p.per_device_train_batch_size * p.max_completion_length <
               args.per_device_train_batch_size * args.max_completion_length]
    hint = (f"Try preset='{smaller[-1].name}' (batch {smaller[-1].per_device_train_batch_size}, "
            f"max_completion_length {smaller[-1].max_completion_length})" if smaller else "Use a smaller model")
    g = args.num_generations
    return (f"CUDA ran out of memory with per_device_train_batch_size={args.per_device_train_batch_size}, "
            f"max_completion_length={args.max_completion_length}, num_generations={g}. {hint}, or keep the "
            f"batch and fit it in memory: per_device_train_batch_size={max(g, args.per_device_train_batch_size // 2)} "
            f"with gradient_accumulation_steps={args.gradient_accumulation_steps * 2}, gradient_checkpointing=True. "
            "Checkpoints already written are kept: resume=True continues from the last one.")


def quick_run(model_name: str, task: Task, *, preset: str | Preset, steps: int, output_dir: str,
              monitor: HealthMonitor | None = None, **overrides) -> RLOOTrainer:
    """Load the model fresh, train `steps` steps on a task and return the trainer (its
    state.log_history and health_monitor.diagnoses hold the outcome). For side-by-side
    experiments such as a broken setting and its fix."""
    from .models import load_model

    model, tok = load_model(model_name, preset=preset)
    trainer = build_trainer(model, tok, task, preset=preset, output_dir=output_dir,
                            monitor=monitor or HealthMonitor(), max_steps=steps, save_strategy="no",
                            disable_tqdm=True, **overrides)
    train(trainer)
    return trainer


def find_adapter(*candidates: str | Path) -> Path | None:
    """The first directory that holds a saved adapter, among `candidates` (default: what 01_train
    and `make demo` write, runs/train/adapter and runs/demo/adapter); None when there is none."""
    for path in map(Path, candidates or DEFAULT_ADAPTERS):
        if (path / "adapter_config.json").is_file():
            return path
    return None


def adapter_or_quick_run(adapter_dir: str | Path | None, model_name: str, task: Task, *, preset: str | Preset,
                         steps: int, output_dir: str | Path) -> tuple[Path, bool]:
    """The adapter to evaluate, and whether it was trained just now (03_evaluation stands on its own).

    `adapter_dir` when given (it must hold an adapter); else the one a previous run wrote (01_train's
    runs/train/adapter, `make demo`'s runs/demo/adapter, here or one folder up, as from notebooks/);
    when there is none, says so and trains a quick one, `steps` steps of `task`, into output_dir/adapter."""
    if adapter_dir:
        require_adapter(adapter_dir)
        return Path(adapter_dir), False
    looked = [*DEFAULT_ADAPTERS, *(Path("..") / p for p in DEFAULT_ADAPTERS)]
    found = find_adapter(*looked)
    if found is not None:
        return found, False
    log.warning("No adapter from a previous run (looked in %s): training a quick one, %d steps of %s with %s, "
                "into %s. Run 01_train (or `make demo`) for a real one.", ", ".join(map(str, looked)), steps,
                task.name, model_name, output_dir)
    quick_run(model_name, task, preset=preset, steps=steps, output_dir=str(output_dir))
    return Path(output_dir) / ADAPTER_DIR, True
