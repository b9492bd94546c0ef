"""Named, frozen training presets per hardware class, the choice among them, and RLOOConfig building.

A preset is a tested starting point for one class of machine: the model sizes it suits, how the
model is loaded (4-bit or not), the LoRA shape and the RLOO fields. `pick_preset` chooses one for
this hardware (sizing with `memory`); `make_config` turns one into a `trl.RLOOConfig`, with the
device flags handled and every override checked against TRL.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import ConfigError, ModelTooLargeError
from .hardware import Hardware, detect_hardware
from .limits import check_numbers
from .memory import FIT_MARGIN, MemoryEstimate, ModelShape, estimate_memory, model_shape

if TYPE_CHECKING:
    from trl import RLOOConfig

LORA_ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _help(text: str, **kw):
    """A field documented the way TRL documents its configs: `dataclasses.fields(Preset)[i].metadata["help"]`."""
    return field(metadata={"help": text}, **kw)


@dataclass(frozen=True)
class Preset:
    """One hardware class: each field says what it sets and why its values were chosen (`explain()` prints
    them beside one preset's values; `rloo-kit presets --explain NAME`)."""

    name: str = _help("Its name: 'cpu', or the GPU memory class ('8gb', 't4-16gb', '24gb', '40gb', '80gb').")
    description: str = _help("The machines it is for, in a line.")
    memory_gb: float = _help(
        "The VRAM (RAM for `cpu`) it is sized for, a little under the card's nominal size: drivers and the "
        "CUDA context take the rest. `pick_preset` skips presets above this machine's memory.")
    max_params_b: float = _help(
        "The largest model, in billions of parameters, it suits: the size whose 4-bit weights, LoRA state "
        "and one step's activations at these lengths fit `memory_gb` in `memory.estimate_memory`.")
    suggested_models: tuple[str, ...] = _help("Instruct models of that size, by hub id (or the kit's alias).")
    load_in_4bit: bool = _help(
        "NF4 weights (bitsandbytes, or Unsloth's) on a GPU: a quarter of bf16's memory for a small loss in "
        "quality, the QLoRA trade. Off on the CPU, where 4-bit kernels are ~8x slower than bf16/fp32 matmuls.")
    lora_r: int = _help(
        "LoRA rank. 16 is enough for a reward that teaches a format or a skill on small models (the demo "
        "learns at r=16); the large presets raise it to 32-64 because their models have more to adapt.")
    lora_alpha: int = _help(
        "LoRA scale numerator: 2 x r everywhere, so the effective scale alpha/r stays 2 as r grows.")
    lora_target_modules: tuple[str, ...] = _help(
        "Every linear layer of attention and MLP: QLoRA's finding that all-linear adapters match full "
        "fine-tuning better than attention-only ones, for little extra memory.")
    max_seq_length: int = _help(
        "Prompt plus completion, in tokens: what the memory estimate assumes. The completion length must "
        "leave room for the prompt (the kit refuses a completion length >= this).")
    num_generations: int = _help(
        "K, the completions per prompt: RLOO's baseline is the mean of the other K-1. 4 is the least that "
        "gives a usable baseline at small batch sizes; 8-16 where memory allows lowers the advantage's variance.")
    per_device_train_batch_size: int = _help(
        "Completions per device per step (prompts x K), the most that fits with these lengths; with "
        "`gradient_accumulation_steps` it sets how many prompts one update sees.")
    gradient_accumulation_steps: int = _help(
        "Steps accumulated per update: 2 where the batch that fits is 8, so that an update still sees 16 "
        "completions (4 prompts at K=4); fewer prompts per update make the gradient noisier.")
    max_completion_length: int = _help(
        "Tokens sampled per completion. The CPU's 16 fits the demo's short answers (a step costs about linearly "
        "in it); a file task left open is fitted by the pre-flight (16 -> 64 or more when answers are cut). "
        "GPU presets leave room for reasoning before an answer.")
    learning_rate: float = _help(
        "4e-4 on the CPU, where the kit trains tiny models for tens of steps: LoRA's usual 2e-4 learned least "
        "in 30 steps there, 1e-3 collapsed the policy to one answer (entropy ~0, KL ~3), 3e-4-5e-4 learned "
        "most (benchmarks/results/learning-rate.md); 5e-5 (3e-5 at 80 GB) on GPUs, for longer runs on larger "
        "models, the usual RL-on-LoRA range. A model under 0.2B parameters trains at 4e-4 on every preset "
        "unless a rate is asked for (`learning_rate_for`: SmolLM2-135M on the 8gb preset went 0.52 -> 0.58 at "
        "5e-5 and 0.52 -> 0.84 at 4e-4 on CUDA, benchmarks/results/gpu-h200.md). Too high a rate with too small "
        "a beta explodes the KL (troubleshooting notebook, 02).")
    beta: float = _help(
        "Weight of the KL penalty to the base model, folded into the reward as TRL's RLOO does. 0.02-0.04 "
        "keeps the policy near the base without stopping it learning; raise it when the health monitor "
        "names kl_explosion or reward_hacking.")
    temperature: float = _help(
        "Sampling temperature of the K completions, as asked: 1.0 (TRL's default), so that the K samples of a "
        "prompt differ (a very low one makes K copies of one answer, and no prompt teaches anything). A small "
        "model's samples at 1.0 can be far worse than its greedy answer (SmolLM2-135M on a held-back task: 2% of "
        "samples right where its greedy answers were right on 53%; 31% right at 0.3): where the pre-flight sees "
        "that, it probes 0.5 and 0.3 and trains a task that leaves its temperature open at the one that leaves "
        "the most prompts with spread (benchmarks/results/sampling-fit.md). The GPU presets keep 1.0 as asked, "
        "where TRL's and Unsloth's RL recipes sample for 0.5B-7B models; the same pre-flight fit applies there "
        "(on an H200 it fitted 0.5 in one demo run and kept 1.0 in another; on an H100 it fitted 0.5 on word_sums, "
        "as on a CPU: benchmarks/results/gpu-h200.md). Larger models are untested here.")
    optim: str = _help(
        "The optimizer: paged or 8-bit AdamW (bitsandbytes) on GPUs to keep optimizer state small; plain "
        "AdamW on the CPU, where bitsandbytes' optimizers do not run (`make_config` swaps them there).")
    gradient_checkpointing: bool = _help(
        "Recompute activations in the backward pass: memory for time, on every GPU preset; off on the CPU, "
        "where memory is not the limit and the recomputation would only cost time.")

    def explain(self) -> str:
        """Each field, its value here, and why (the field's help), one paragraph per field."""
        return "\n".join(f"{f.name} = {getattr(self, f.name)!r}\n    {f.metadata['help']}"
                          for f in dataclasses.fields(self))

    def rloo_fields(self) -> dict:
        """The preset's fields that are `trl.RLOOConfig` arguments, by the same names."""
        return {k: getattr(self, k) for k in RLOO_FIELDS}


RLOO_FIELDS = ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
               "max_completion_length", "learning_rate", "beta", "temperature", "optim",
               "gradient_checkpointing")

_HUB = {  # models each GPU class suits, as hub ids
    "small": ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct"),
    "mid": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct", "meta-llama/Llama-3.2-3B-Instruct"),
    "large": ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    "xl": ("Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
    "xxl": ("Qwen/Qwen2.5-32B-Instruct", "Qwen/Qwen2.5-14B-Instruct"),
}

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("cpu", "Laptop or CI CPU: bf16 where the CPU has it, else fp32 (4-bit is ~8x slower on CPU); tiny "
           "models, short answers.",
           memory_gb=8, max_params_b=0.5, suggested_models=("smollm2-135m", "HuggingFaceTB/SmolLM2-360M-Instruct"),
           load_in_4bit=False, lora_r=16, lora_alpha=32, lora_target_modules=LORA_ALL_LINEAR, max_seq_length=256,
           num_generations=4, per_device_train_batch_size=16, gradient_accumulation_steps=1,
           max_completion_length=16, learning_rate=4e-4, beta=0.02, temperature=1.0, optim="adamw_torch",
           gradient_checkpointing=False),
    Preset("8gb", "8 GB consumer GPU (RTX 3060 Ti/3070/4060): 4-bit models up to ~1.5B.",
           memory_gb=8, max_params_b=1.5, suggested_models=_HUB["small"], load_in_4bit=True, lora_r=16,
           lora_alpha=32, lora_target_modules=LORA_ALL_LINEAR, max_seq_length=768, num_generations=4,
           per_device_train_batch_size=8, gradient_accumulation_steps=2, max_completion_length=256,
           learning_rate=5e-5, beta=0.04, temperature=1.0, optim="paged_adamw_8bit", gradient_checkpointing=True),
    Preset("t4-16gb", "16 GB GPU, e.g. Colab's free T4 (no bf16: fp16 is used): 4-bit models up to ~3B.",
           memory_gb=15, max_params_b=3.0, suggested_models=_HUB["mid"], load_in_4bit=True, lora_r=16,
           lora_alpha=32, lora_target_modules=LORA_ALL_LINEAR, max_seq_length=1024, num_generations=8,
           per_device_train_batch_size=8, gradient_accumulation_steps=2, max_completion_length=384,
           learning_rate=5e-5, beta=0.04, temperature=1.0, optim="paged_adamw_8bit", gradient_checkpointing=True),
    Preset("24gb", "24 GB GPU (RTX 3090/4090, A10G, L4): 4-bit models up to ~8B.",
           memory_gb=22, max_params_b=8.0, suggested_models=_HUB["large"], load_in_4bit=True, lora_r=32,
           lora_alpha=64, lora_target_modules=LORA_ALL_LINEAR, max_seq_length=1536, num_generations=8,
           per_device_train_batch_size=16, gradient_accumulation_steps=1, max_completion_length=512,
           learning_rate=5e-5, beta=0.04, temperature=1.0, optim="adamw_8bit", gradient_checkpointing=True),
    Preset("40gb", "40-48 GB GPU (A100-40GB, A6000, L40S): 4-bit models up to ~14B.",
           memory_gb=38, max_params_b=14.0, suggested_models=_HUB["xl"], load_in_4bit=True, lora_r=32,
           lora_alpha=64, lora_target_modules=LORA_ALL_LINEAR, max_seq_length=2048, num_generations=8,
           per_device_train_batch_size=16, gradient_accumulation_steps=2, max_completion_length=768,
           learning_rate=5e-5, beta=0.04, temperature=1.0, optim="adamw_8bit", gradient_checkpointing=True),
    Preset("80gb", "80 GB GPU (A100-80GB, H100): 4-bit models up to ~32B.",
           memory_gb=76, max_params_b=32.0, suggested_models=_HUB["xxl"], load_in_4bit=True, lora_r=64,
           lora_alpha=128, lora_target_modules=LORA_ALL_LINEAR, max_seq_length=3072, num_generations=16,
           per_device_train_batch_size=32, gradient_accumulation_steps=1, max_completion_length=1024,
           learning_rate=3e-5, beta=0.04, temperature=1.0, optim="adamw_8bit", gradient_checkpointing=True),
)}

GPU_PRESETS = tuple(p for p in PRESETS.values() if p.name != "cpu")  # ascending memory

SMALL_MODEL_PARAMS = 0.2e9  # below this a model trains at SMALL_MODEL_LEARNING_RATE whatever the preset
SMALL_MODEL_LEARNING_RATE = 4e-4


def learning_rate_for(preset: Preset, params: float) -> float:
    """The learning rate a model of `params` parameters trains at under `preset`, unless one is asked for.

    The GPU presets' rates (5e-5, 3e-5) are for their 0.5B-32B models; a LoRA adapter on a model of under 0.2B
    parameters needs a larger step. Measured on SmolLM2-135M: 4e-4 on a CPU (benchmarks/results/learning-rate.md),
    and on CUDA with the 8gb preset, 30 demo steps moved held-out accuracy 0.52 -> 0.58 at its 5e-5 and
    0.52 -> 0.84 at 4e-4 (benchmarks/results/gpu-h200.md).

    Args:
        preset: the run's preset.
        params: the model's parameter count (`memory.ModelShape.params`).

    Returns:
        The preset's learning rate, raised to SMALL_MODEL_LEARNING_RATE for a model under SMALL_MODEL_PARAMS.
    """
    if params < SMALL_MODEL_PARAMS:
        return max(preset.learning_rate, SMALL_MODEL_LEARNING_RATE)
    return preset.learning_rate


def changed_from_own(preset: Preset, field: str) -> bool:
    """Whether `preset`'s `field` differs from its named preset's own (`dataclasses.replace`, a recipe), or the preset
    has no known name: a value asked for, which the kit's rules for a model's size leave as it is."""
    own = PRESETS.get(preset.name)
    return own is None or getattr(own, field) != getattr(preset, field)


def load_in_4bit_for(preset: Preset, params: float) -> bool:
    """Whether a model of `params` parameters loads in 4-bit under `preset`, unless 4-bit is asked for or against.

    NF4 saves the GPU presets' 0.5B-32B models most of their memory; a model under SMALL_MODEL_PARAMS weighs under
    0.4 GiB in bf16, so 4-bit saves next to nothing, and it costs what the small model knows. Measured on
    SmolLM2-135M, greedy on the same prompts, unquantized against NF4: unit conversions 0.20 -> 0.02, word sums
    0.64 -> 0.39, opposites 0.44 -> 0.27, the demo's sums 0.42 -> 0.50 (benchmarks/results/small-model-4bit.md); on
    an H200 in 4-bit the pre-flight found greedy unit conversions right on 0% (benchmarks/results/gpu-h200.md).
    Unquantized, the adapter also trains on the weights an export merges it into.

    Args:
        preset: the run's preset.
        params: the model's parameter count (`memory.ModelShape.params`).

    Returns:
        The preset's `load_in_4bit`, False for a model under SMALL_MODEL_PARAMS unless the preset's 4-bit was changed
        from its own (`changed_from_own`: asked for).
    """
    return preset.load_in_4bit and (params >= SMALL_MODEL_PARAMS or changed_from_own(preset, "load_in_4bit"))


def estimate_as_loaded(model: ModelShape | float | str, preset: Preset, *, device: str | None = None,
                       cpu_bf16: bool = False) -> MemoryEstimate:
    """`memory.estimate_memory` of the weights as the kit loads them (`load_in_4bit_for`): a 135M model under a 4-bit
    GPU preset is counted in bf16, as it trains, not in NF4."""
    shape = model_shape(model)
    loaded = dataclasses.replace(preset, load_in_4bit=load_in_4bit_for(preset, shape.params))
    return estimate_memory(shape, loaded, device=device, cpu_bf16=cpu_bf16)


def list_presets() -> list[Preset]:
    """Every RLOO preset, the cpu one first, then the GPU ones from the smallest memory up.

    Returns:
        The presets, as a new list.
    """
    return list(PRESETS.values())


def get_preset(preset: str | Preset) -> Preset:
    """The preset by name; an unknown name raises ConfigError listing the valid ones.

    Args:
        preset: a preset's name ("cpu", "8gb", ...), or a Preset, which is returned as it is.

    Returns:
        The Preset.
    """
    if isinstance(preset, Preset):
        return preset
    if preset not in PRESETS:
        close = difflib.get_close_matches(str(preset), PRESETS, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"Unknown preset '{preset}'. Valid presets: {', '.join(PRESETS)}.{hint}")
    return PRESETS[preset]


def pick_preset(hardware: Hardware | None = None, model: ModelShape | float | str | None = None) -> Preset:
    """The largest preset this machine can hold, stepping down until the model's estimate fits.

    On a CPU (or Apple MPS) the answer is `cpu`. On a GPU, presets sized above its VRAM are skipped;
    the first remaining one whose memory estimate for `model` fits in FIT_MARGIN of the memory wins.
    A model that fits none raises ModelTooLargeError with the estimate and what to do.

    Args:
        hardware: the machine to pick for; detected when None.
        model: a ModelShape, a parameter count (1.5e9 or '1.5B') or a model name or path; when None, the
            largest preset the memory allows, without an estimate.

    Returns:
        The chosen Preset.
    """
    hw = hardware or detect_hardware()
    device = "cuda" if hw.is_cuda else "cpu"
    if not hw.is_cuda:
        candidates = [PRESETS["cpu"]]
    else:
        candidates = [p for p in reversed(GPU_PRESETS) if p.memory_gb <= hw.total_memory_gb * 1.05]
        candidates = candidates or [GPU_PRESETS[0]]
    if model is None:
        return candidates[0]
    budget = hw.total_memory_gb * FIT_MARGIN[device]
    shape = model_shape(model)
    for preset in candidates:
        if estimate_as_loaded(shape, preset, device=device, cpu_bf16=hw.cpu_bf16).total_gb <= budget:
            return preset
    smallest = candidates[-1]
    need = estimate_as_loaded(shape, smallest, device=device, cpu_bf16=hw.cpu_bf16).total_gb
    raise ModelTooLargeError(
        f"The model needs about {need:.1f} GiB with the smallest fitting preset '{smallest.name}', but this "
        f"{hw.device} ({hw.name}) has {hw.total_memory_gb:.1f} GiB. Pick a smaller model (the '{smallest.name}' "
        f"preset suits up to {smallest.max_params_b:g}B parameters, e.g. {', '.join(smallest.suggested_models[:2])}), "
        f"or lower max_completion_length / per_device_train_batch_size.")


def resolve_preset(preset: str | Preset | None = None, hardware: Hardware | None = None) -> Preset:
    """The one rule for a preset left open: None or "auto" is this hardware's pick, a name is that preset."""
    if preset is None or preset == "auto":
        return pick_preset(hardware)
    return get_preset(preset)


# ---------------------------------------------------------------------------------------------- config

# TrainingArguments' own defaults, said explicitly: Unsloth's trainer configs start from others (10% warm-up,
# weight decay 0.001, accumulation 2, seed 3407), so a run left to them would differ between a GPU and a CPU.
# Measured on an H100: a 16-example warm-start got 3 optimizer steps, the first at learning rate 0
# (benchmarks/results/gpu-h200.md). Every trainer the kit builds takes these.
PINNED_TRAINING_DEFAULTS = dict(warmup_steps=0, weight_decay=0.0, gradient_accumulation_steps=1)

KIT_DEFAULTS = dict(PINNED_TRAINING_DEFAULTS, logging_steps=1, report_to="none", save_strategy="steps", save_steps=25,
                    save_total_limit=2, seed=42, log_completions=False, disable_tqdm=False)


def make_config(preset: str | Preset, *, output_dir: str = "runs/rloo", hardware: Hardware | None = None,
                max_seq_length: int | None = None, **overrides: object) -> RLOOConfig:
    """A `trl.RLOOConfig` from a preset, the kit's defaults, the device flags, then `overrides`.

    Args:
        preset: a preset's name or a Preset.
        output_dir: where checkpoints go.
        hardware: the machine to set device flags for (detected when None).
        max_seq_length: the sequence length a completion must fit in (the preset's when None).
        overrides: RLOOConfig fields. A misspelt one raises ConfigError naming the closest real one; every
            number is checked against its range (`limits`).

    Returns:
        The config. TRL's own checks (group size >= 2, a generation batch of whole groups across all processes)
        come back as ConfigError with the fix.
    """
    from trl import RLOOConfig

    preset = get_preset(preset)
    valid = {f.name for f in dataclasses.fields(RLOOConfig)}
    unknown = [k for k in overrides if k not in valid]
    if unknown:
        hints = [f"'{k}'" + (f" (did you mean '{m[0]}'?)" if (m := difflib.get_close_matches(k, valid, n=1)) else "")
                 for k in unknown]
        raise ConfigError(f"Unknown RLOOConfig field(s): {', '.join(hints)}. See `trl.RLOOConfig` for the list.")
    hw = hardware or detect_hardware()
    fields = {**KIT_DEFAULTS, **preset.rloo_fields(), **device_flags(hw, preset), **overrides}
    validate_rloo_fields(fields, max_seq_length or preset.max_seq_length)
    try:
        return RLOOConfig(output_dir=output_dir, **fields)
    except ValueError as e:
        raise _explain_trl_error(e, fields) from e


def device_flags(hw: Hardware, preset: Preset) -> dict:
    """The TrainingArguments flags a run on `hw` with `preset` takes: bf16/fp16 on a GPU; on a CPU, use_cpu and full
    precision arguments (the kit's patches compute in bf16 where the CPU has it) and an optimizer without CUDA."""
    if hw.is_cuda:
        return {"bf16": hw.bf16, "fp16": not hw.bf16}
    # bitsandbytes' paged/8-bit optimizers need CUDA; gradient checkpointing only costs time on CPU
    flags = {"use_cpu": True, "bf16": False, "fp16": False}
    if "8bit" in preset.optim:
        flags["optim"] = "adamw_torch"
    return flags


def validate_rloo_fields(fields: dict, max_seq_length: int) -> None:
    """The kit's own checks, which RLOOConfig does not make: the completion must leave room for a prompt;
    vLLM generation (use_vllm=True) needs vLLM and a CUDA GPU, which TRL finds out only as the trainer starts;
    and every number in its range (`limits.check_numbers`), which TRL finds out, if at all, steps later."""
    check_numbers(fields)
    mcl = fields.get("max_completion_length")
    if mcl is not None and mcl >= max_seq_length:
        raise ConfigError(f"max_completion_length={mcl} leaves no room for the prompt within max_seq_length="
                          f"{max_seq_length}. Lower max_completion_length or raise max_seq_length.")
    if fields.get("use_vllm"):
        _check_vllm(fields.get("vllm_mode", "colocate"))


def _check_vllm(mode: str) -> None:
    """TRL's vLLM generation (use_vllm=True): 'colocate' runs vLLM inside each training process, on its GPU
    (one GPU, or each of several); 'server' sends prompts to a `trl vllm-serve` process on GPUs of its own."""
    import torch
    from trl.import_utils import is_vllm_available

    if mode not in ("colocate", "server"):
        raise ConfigError(f"vllm_mode={mode!r}: use 'colocate' (vLLM shares each training GPU) or 'server' (a "
                          "`trl vllm-serve` process on GPUs of its own, for runs on several GPUs).")
    no_gpu = "" if torch.cuda.is_available() else " vLLM needs a CUDA GPU, and this machine has none."
    if not is_vllm_available():
        raise ConfigError("use_vllm=True but vLLM is not installed. On a Linux machine with a CUDA GPU: "
                          "`pip install \"trl[vllm]\"` (TRL 1.15 supports vLLM 0.21 to 0.31)." + no_gpu +
                          " Or drop use_vllm: TRL then generates with transformers (slower, nothing to install).")
    if no_gpu:
        raise ConfigError(f"use_vllm=True:{no_gpu} Drop use_vllm to generate with transformers.")


_TRL_RULES = (  # TRL's own checks in RLOOConfig.__post_init__, and the kit's advice for each
    (re.compile(r"generation_batch_size \((\d+)\) must be divisible by num_generations \((\d+)\)"), "divisible"),
    (re.compile(r"at least 2 generations"), "group"),
)


def _explain_trl_error(err: ValueError, fields: dict) -> ConfigError:
    """TRL's RLOOConfig error, restated with what to change."""
    text = str(err)
    for pattern, rule in _TRL_RULES:
        m = pattern.search(text)
        if not m:
            continue
        if rule == "group":
            return ConfigError(f"num_generations={fields.get('num_generations')}: RLOO needs at least 2 completions "
                               "per prompt, because each completion's baseline is the mean reward of the others. "
                               f"Use 4 or more. (TRL: {text})")
        gen_batch, g = int(m.group(1)), int(m.group(2))
        batch = fields.get("per_device_train_batch_size", 8)
        steps = fields.get("steps_per_generation") or fields.get("gradient_accumulation_steps", 1)
        processes = max(1, gen_batch // max(1, batch * steps))
        return ConfigError(
            f"The generation batch ({gen_batch} completions = per_device_train_batch_size {batch} x {processes} "
            f"process(es) x {steps} step(s)) is not divisible by num_generations={g}, so prompts would be split "
            f"across groups. Make processes x per_device_train_batch_size a multiple of {g}: e.g. "
            f"per_device_train_batch_size={max(g, batch // g * g)}. (TRL: {text})")
    return ConfigError(f"TRL's RLOOConfig refused these settings: {text}")


# Reward models (rloo_kit.reward_models) train on the same hardware classes, with settings of their own.

@dataclass(frozen=True)
class RewardModelPreset:
    """How to train a reward model on one hardware class (LoRA on a sequence-classification head)."""

    name: str = _help("The hardware class, as the RLOO presets name it (rloo_kit.presets).")
    lora_r: int = _help("LoRA rank of the adapter on every linear layer; the new score head trains in full.",
                        default=16)
    lora_alpha: int = _help("LoRA scale alpha (the update is scaled by alpha/r).", default=32)
    learning_rate: float = _help("AdamW learning rate of the adapter and the score head.", default=5e-4)
    num_train_epochs: float = _help("Passes over the training pairs. A small model on a few hundred pairs "
                                    "reaches its held-out accuracy in 2-3.", default=3.0)
    per_device_train_batch_size: int = _help("Preference pairs per step (each pair is two sequences).",
                                             default=8)
    gradient_accumulation_steps: int = _help("Steps whose gradients are summed before an update.", default=1)
    max_length: int = _help("Tokens the model reads of prompt + completion; longer texts keep their end "
                            "(the completion), as the score is read at the last token.", default=512)
    eval_fraction: float = _help("Share of the pairs held out to measure pair accuracy; pairs with the "
                                 "same prompt stay on one side.", default=0.2)
    gradient_checkpointing: bool = _help("Recompute activations in the backward pass: less memory, ~30% "
                                         "slower. For long texts on small GPUs.", default=False)

    @staticmethod
    def describe() -> dict[str, str]:
        """Each field's help text, for a command line or a table."""
        return {f.name: f.metadata["help"] for f in dataclasses.fields(RewardModelPreset)}


RM_PRESETS: dict[str, RewardModelPreset] = {p.name: p for p in (
    RewardModelPreset("cpu", max_length=256, num_train_epochs=2.0),
    RewardModelPreset("8gb", learning_rate=2e-4, max_length=1024, per_device_train_batch_size=4,
                      gradient_accumulation_steps=2, gradient_checkpointing=True, num_train_epochs=2.0),
    RewardModelPreset("t4-16gb", learning_rate=2e-4, max_length=1024, gradient_checkpointing=True,
                      num_train_epochs=2.0),
    RewardModelPreset("24gb", lora_r=32, lora_alpha=64, learning_rate=2e-4, max_length=2048, num_train_epochs=2.0),
    RewardModelPreset("40gb", lora_r=32, lora_alpha=64, learning_rate=2e-4, max_length=2048,
                      per_device_train_batch_size=16, num_train_epochs=2.0),
    RewardModelPreset("80gb", lora_r=64, lora_alpha=128, learning_rate=1e-4, max_length=4096,
                      per_device_train_batch_size=16, num_train_epochs=2.0),
)}


def rm_preset(preset: str | RewardModelPreset = "auto", **overrides) -> RewardModelPreset:
    """A reward-model preset by name ("auto": the hardware's, as for RLOO), with fields overridden."""
    if isinstance(preset, str):
        if preset == "auto":
            preset = pick_preset().name
        if preset not in RM_PRESETS:
            raise ConfigError(f"Unknown reward-model preset '{preset}'. Choose auto or one of: "
                              f"{', '.join(RM_PRESETS)}.")
        preset = RM_PRESETS[preset]
    unknown = set(overrides) - {f.name for f in dataclasses.fields(RewardModelPreset)}
    if unknown:
        raise ConfigError(f"Unknown reward-model setting(s) {sorted(unknown)}. Settable: "
                          f"{', '.join(RewardModelPreset.describe())}.")
    preset = dataclasses.replace(preset, **{k: v for k, v in overrides.items() if v is not None})
    if not 0 < preset.eval_fraction < 1:
        raise ConfigError(f"eval_fraction {preset.eval_fraction}: hold out a share between 0 and 1 (e.g. 0.2) of the "
                          "pairs to measure the reward model on.")
    return preset
