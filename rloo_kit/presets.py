"""Named, frozen training presets per hardware class, their memory estimate, and RLOOConfig building.

A preset is a tested starting point for one class of machine: the model sizes it suits, how the
model is loaded (4-bit or not), the LoRA shape and the RLOO fields. `make_config` turns one into
a `trl.RLOOConfig`, with the device flags handled and every override checked against TRL.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass

from .errors import ConfigError, ModelTooLargeError
from .hardware import Hardware, detect_hardware

LORA_ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Preset:
    """One hardware class. `per_device_train_batch_size` counts completions: prompts x num_generations."""

    name: str
    description: str
    memory_gb: float  # the VRAM (RAM for `cpu`) this preset is sized for
    max_params_b: float  # largest model, in billions of parameters, it suits
    suggested_models: tuple[str, ...]
    load_in_4bit: bool
    lora_r: int
    lora_alpha: int
    lora_target_modules: tuple[str, ...]
    max_seq_length: int
    num_generations: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    max_completion_length: int
    learning_rate: float
    beta: float
    temperature: float
    optim: str
    gradient_checkpointing: bool

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
    Preset("cpu", "Laptop or CI CPU. fp32 (4-bit is ~8x slower on CPU), tiny models, short answers.",
           memory_gb=8, max_params_b=0.5, suggested_models=("smollm2-135m", "HuggingFaceTB/SmolLM2-360M-Instruct"),
           load_in_4bit=False, lora_r=16, lora_alpha=32, lora_target_modules=LORA_ALL_LINEAR, max_seq_length=256,
           num_generations=4, per_device_train_batch_size=16, gradient_accumulation_steps=1,
           max_completion_length=16, learning_rate=2e-4, beta=0.02, temperature=1.0, optim="adamw_torch",
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


def list_presets() -> list[Preset]:
    return list(PRESETS.values())


def get_preset(preset: str | Preset) -> Preset:
    """The preset by name; an unknown name raises ConfigError listing the valid ones."""
    if isinstance(preset, Preset):
        return preset
    if preset not in PRESETS:
        close = difflib.get_close_matches(str(preset), PRESETS, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"Unknown preset '{preset}'. Valid presets: {', '.join(PRESETS)}.{hint}")
    return PRESETS[preset]


# ---------------------------------------------------------------------------------------------- memory

@dataclass(frozen=True)
class ModelShape:
    """What the memory estimate needs to know about a model."""

    params: float  # total parameter count
    hidden: int
    layers: int
    vocab: int
    intermediate: int
    kv_dim: int  # key/value width per layer (hidden when there is no grouped-query attention)

    @classmethod
    def from_params(cls, params: float, vocab: int = 151_936) -> ModelShape:
        """A typical decoder of that size (Qwen2.5/Llama proportions) when only the count is known:
        solves 12 * layers * hidden^2 + vocab * hidden = params for hidden."""
        layers = 24 if params < 1e9 else 28 if params < 1e10 else 48 if params < 2e10 else 64
        hidden = int((-vocab + (vocab**2 + 48 * layers * params) ** 0.5) / (24 * layers))
        hidden = max(64, hidden // 64 * 64)
        return cls(params, hidden, layers, vocab, hidden * 8 // 3, max(64, hidden // 4))

    @classmethod
    def from_config(cls, config) -> ModelShape:
        cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
        h, n, v = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
        inter = getattr(cfg, "intermediate_size", 4 * h)
        heads = getattr(cfg, "num_attention_heads", 1)
        kv = getattr(cfg, "num_key_value_heads", heads) or heads
        kv_dim = getattr(cfg, "head_dim", None) or h // heads
        attn = h * (h + 2 * kv * kv_dim) + h * h
        params = n * (attn + 3 * h * inter) + v * h * (1 if getattr(cfg, "tie_word_embeddings", True) else 2)
        return cls(float(params), h, n, v, inter, kv * kv_dim)

    @classmethod
    def from_model(cls, model) -> ModelShape:
        return cls.from_config(model.config)


def parse_params(text: str | float | int) -> float:
    """'135M', '1.5B', '7b', 1.5e9 -> parameter count."""
    if isinstance(text, (int, float)):
        return float(text)
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMbB]?)\s*", str(text))
    if not m:
        raise ConfigError(f"Cannot read a parameter count from '{text}'. Write it like 135M, 1.5B or 7e9.")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}[m.group(2).lower()]


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gb: float
    lora_gb: float
    activations_gb: float
    overhead_gb: float

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.lora_gb + self.activations_gb + self.overhead_gb


def estimate_memory(model: ModelShape | float | str, preset: str | Preset, *, prompt_length: int = 64,
                    device: str | None = None) -> MemoryEstimate:
    """Peak training memory of one RLOO step, in GiB. The formula, term by term:

    - weights: 4-bit NF4 is 0.5 byte per parameter plus a 1/16 block-scale overhead for the linear
      layers; embeddings stay 16-bit. Otherwise 2 bytes (bf16/fp16 on a GPU) or 4 bytes (fp32 on CPU).
    - LoRA: r x (in + out) per adapted matrix per layer (about 11*hidden + 3*intermediate per layer
      for all-linear targets); 16 bytes each (fp32 weight, grad, two Adam moments).
    - activations: B = per_device_train_batch_size completions of T = prompt_length + max_completion_length
      tokens. The KV cache while generating, 2 x layers x B x T x kv_dim, plus what backward keeps:
      ~18 x hidden + 4 x intermediate values per token per layer (one layer's worth with gradient
      checkpointing, plus a hidden-size input per layer), plus one chunk of log-softmax over the vocabulary.
    - overhead: runtime, CUDA context and allocator slack (1.0 GiB on a GPU, 0.6 GiB for a CPU process).
    """
    preset = get_preset(preset)
    shape = _shape(model)
    device = device or ("cpu" if preset.name == "cpu" else "cuda")
    act_bytes = 4 if device == "cpu" else 2
    embed = shape.vocab * shape.hidden
    if preset.load_in_4bit:
        weights = (shape.params - embed) * 0.5 * (1 + 1 / 16) + embed * 2
    else:
        weights = shape.params * act_bytes
    lora_params = shape.layers * preset.lora_r * (11 * shape.hidden + 3 * shape.intermediate)
    tokens = preset.per_device_train_batch_size * (prompt_length + preset.max_completion_length)
    kv_cache = 2 * shape.layers * tokens * shape.kv_dim * act_bytes
    per_layer = (18 * shape.hidden + 4 * shape.intermediate) * tokens * act_bytes
    kept = per_layer + shape.layers * shape.hidden * tokens * act_bytes if preset.gradient_checkpointing \
        else per_layer * shape.layers
    vocab_chunk = min(tokens, 1024) * shape.vocab * 4 * 3
    gib = 1024**3
    return MemoryEstimate(weights / gib, lora_params * 16 / gib, (kv_cache + kept + vocab_chunk) / gib,
                          0.6 if device == "cpu" else 1.0)


def _shape(model: ModelShape | float | str) -> ModelShape:
    if isinstance(model, ModelShape):
        return model
    if isinstance(model, str) and not re.fullmatch(r"\s*[\d.]+\s*[kKmMbB]?\s*", model):
        from .models import model_shape

        return model_shape(model)
    return ModelShape.from_params(parse_params(model))


def pick_preset(hardware: Hardware | None = None, model: ModelShape | float | str | None = None) -> Preset:
    """The largest preset this machine can hold, stepping down until the model's estimate fits.

    On a CPU (or Apple MPS) the answer is `cpu`. On a GPU, presets sized above its VRAM are skipped;
    the first remaining one whose memory estimate for `model` fits in 92% of the VRAM wins.
    A model that fits none raises ModelTooLargeError with the estimate and what to do.
    """
    hw = hardware or detect_hardware()
    if not hw.is_cuda:
        candidates = [PRESETS["cpu"]]
        budget = hw.total_memory_gb * 0.8
    else:
        candidates = [p for p in reversed(GPU_PRESETS) if p.memory_gb <= hw.total_memory_gb * 1.05]
        candidates = candidates or [GPU_PRESETS[0]]
        budget = hw.total_memory_gb * 0.92
    if model is None:
        return candidates[0]
    for preset in candidates:
        if estimate_memory(model, preset, device=hw.device if not hw.is_cuda else "cuda").total_gb <= budget:
            return preset
    smallest = candidates[-1]
    need = estimate_memory(model, smallest, device="cpu" if not hw.is_cuda else "cuda").total_gb
    raise ModelTooLargeError(
        f"The model needs about {need:.1f} GiB with the smallest fitting preset '{smallest.name}', but this "
        f"{hw.device} ({hw.name}) has {hw.total_memory_gb:.1f} GiB. Pick a smaller model (the '{smallest.name}' "
        f"preset suits up to {smallest.max_params_b:g}B parameters, e.g. {', '.join(smallest.suggested_models[:2])}), "
        f"or lower max_completion_length / per_device_train_batch_size.")


# ---------------------------------------------------------------------------------------------- config

KIT_DEFAULTS = dict(logging_steps=1, report_to="none", save_strategy="steps", save_steps=25, save_total_limit=2,
                    seed=42, log_completions=False, disable_tqdm=False)


def make_config(preset: str | Preset, *, output_dir: str = "runs/rloo", hardware: Hardware | None = None,
                max_seq_length: int | None = None, **overrides):
    """A `trl.RLOOConfig` from a preset, the kit's defaults, the device flags, then `overrides`.

    Overrides are checked against the installed RLOOConfig: a misspelt field raises ConfigError
    naming the closest real one. The RLOO invariants (group size >= 2, batch divisible by the
    group size, completion shorter than the sequence) are checked here with a fix in the message.
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
    fields = {**preset.rloo_fields(), **KIT_DEFAULTS, **_device_flags(hw, preset), **overrides}
    validate_rloo_fields(fields, max_seq_length or preset.max_seq_length)
    return RLOOConfig(output_dir=output_dir, **fields)


def _device_flags(hw: Hardware, preset: Preset) -> dict:
    if hw.is_cuda:
        return {"bf16": hw.bf16, "fp16": not hw.bf16}
    # bitsandbytes' paged/8-bit optimizers need CUDA; gradient checkpointing only costs time on CPU
    flags = {"use_cpu": True, "bf16": False, "fp16": False}
    if "8bit" in preset.optim:
        flags["optim"] = "adamw_torch"
    return flags


def validate_rloo_fields(fields: dict, max_seq_length: int) -> None:
    """Raise ConfigError, with what to change, for settings RLOO cannot run with."""
    g = fields.get("num_generations", 2)
    if g is None or g < 2:
        raise ConfigError(f"num_generations={g}: RLOO needs at least 2 completions per prompt, because each "
                          "completion's baseline is the mean reward of the others. Use 4 or more.")
    batch = fields.get("per_device_train_batch_size", 8)
    steps = fields.get("steps_per_generation") or fields.get("gradient_accumulation_steps", 1)
    gen_batch = fields.get("generation_batch_size") or batch * steps
    if gen_batch % g:
        raise ConfigError(
            f"The generation batch ({gen_batch} completions = per_device_train_batch_size {batch} x {steps} "
            f"steps) is not divisible by num_generations={g}, so prompts would be split across groups. "
            f"Set per_device_train_batch_size to a multiple of {g} (e.g. {max(g, batch // g * g)}).")
    mcl = fields.get("max_completion_length")
    if mcl is not None and mcl >= max_seq_length:
        raise ConfigError(f"max_completion_length={mcl} leaves no room for the prompt within max_seq_length="
                          f"{max_seq_length}. Lower max_completion_length or raise max_seq_length.")
