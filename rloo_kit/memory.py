"""The memory model: how big a model is, and how much memory one RLOO step of it needs.

It knows nothing of presets or loading: `estimate_memory` takes any object with a preset's
training fields, and `model_shape` reads a model's config (no weights) through `sources`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from .errors import ConfigError

PARAMS_PATTERN = re.compile(r"\s*([\d.]+)\s*([kKmMbB]?)\s*")  # '135M', '1.5B', '7b'
FIT_MARGIN = {"cuda": 0.92, "cpu": 0.8}  # share of VRAM / RAM a run may plan to use
OVERHEAD_GB = {"cuda": 1.0, "cpu": 0.6}  # runtime, CUDA context and allocator slack
GIB = 1024**3


class TrainingShape(Protocol):
    """What the estimate needs from a preset (a `presets.Preset` has all of it)."""

    load_in_4bit: bool
    lora_r: int
    per_device_train_batch_size: int
    max_completion_length: int
    gradient_checkpointing: bool


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
        """The shape a transformers config describes (text config for multimodal models)."""
        cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
        h, n, v = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
        inter = getattr(cfg, "intermediate_size", 4 * h)
        heads = getattr(cfg, "num_attention_heads", 1)
        kv = getattr(cfg, "num_key_value_heads", heads) or heads
        kv_dim = getattr(cfg, "head_dim", None) or h // heads
        attn = h * (h + 2 * kv * kv_dim) + h * h
        params = n * (attn + 3 * h * inter) + v * h * (1 if getattr(cfg, "tie_word_embeddings", True) else 2)
        return cls(float(params), h, n, v, inter, kv * kv_dim)


def is_param_count(text: str | float | int) -> bool:
    """True for 1.5e9 or strings such as '135M' / '1.5B' (as opposed to a model name or path)."""
    return isinstance(text, (int, float)) or PARAMS_PATTERN.fullmatch(str(text)) is not None


def parse_params(text: str | float | int) -> float:
    """'135M', '1.5B', '7b', 1.5e9 -> parameter count."""
    if isinstance(text, (int, float)):
        return float(text)
    m = PARAMS_PATTERN.fullmatch(str(text))
    if not m:
        raise ConfigError(f"Cannot read a parameter count from '{text}'. Write it like 135M, 1.5B or 7e9.")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}[m.group(2).lower()]


def model_shape(model: ModelShape | float | str) -> ModelShape:
    """A shape from a shape, a parameter count ('1.5B'), or a model name/path (its config only)."""
    if isinstance(model, ModelShape):
        return model
    if is_param_count(model):
        return ModelShape.from_params(parse_params(model))
    from transformers import AutoConfig

    from .sources import resolve_source

    return ModelShape.from_config(AutoConfig.from_pretrained(resolve_source(model), trust_remote_code=False))


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gb: float
    lora_gb: float
    activations_gb: float
    overhead_gb: float

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.lora_gb + self.activations_gb + self.overhead_gb


def estimate_memory(model: ModelShape | float | str, preset: TrainingShape, *, prompt_length: int = 64,
                    device: str | None = None, cpu_bf16: bool = False) -> MemoryEstimate:
    """Peak training memory of one RLOO step on one device, in GiB. The formula, term by term:

    - weights: 4-bit NF4 is 0.5 byte per parameter plus a 1/16 block-scale overhead for the linear
      layers; embeddings stay 16-bit. Otherwise 2 bytes (bf16/fp16 on a GPU) or 4 bytes on a CPU: fp32
      weights, or bf16 ones plus the packed bf16 copy the sampler keeps (`cpu_step.pack_frozen_weights`);
      `cpu_bf16` is `Hardware.cpu_bf16`, whether the CPU trains on that bf16 path (the copy exists where
      oneDNN runs bf16, which that path's own check asks for; forced bf16 elsewhere makes this an overestimate).
    - LoRA: r x (in + out) per adapted matrix per layer (about 11*hidden + 3*intermediate per layer
      for all-linear targets); 16 bytes each (fp32 weight, grad, two Adam moments).
    - activations (2 bytes a value, 4 on a CPU in fp32): B = per_device_train_batch_size completions of
      T = prompt_length + max_completion_length tokens. The KV cache while generating, 2 x layers x B x T x
      kv_dim, plus what backward keeps: ~18 x hidden + 4 x intermediate values per token per layer (one
      layer's worth with gradient checkpointing, plus a hidden-size input per layer), plus one chunk of
      log-softmax over the vocabulary.
    - overhead: OVERHEAD_GB for the device (default: "cpu" for the cpu preset, else "cuda").
    Under data parallelism every process holds all of this: it is the memory each GPU needs.

    Args:
        model: a ModelShape, a parameter count (1.5e9 or '1.5B'), or a model name or path (its config is read).
        preset: a preset object (`presets.get_preset(name)`), or anything with its training fields.
        prompt_length: the prompt tokens assumed per completion.
        device: "cuda", "cpu" or "mps" (counted as "cpu"); "cpu" for the cpu preset, else "cuda", when None.
        cpu_bf16: whether the CPU trains on the bf16 path (`Hardware.cpu_bf16`).

    Returns:
        A MemoryEstimate: weights, LoRA, activations and overhead in GiB, and their `total_gb`.
    """
    if isinstance(preset, str):
        raise ConfigError(f"estimate_memory takes a preset object: estimate_memory(model, get_preset('{preset}')).")
    shape = model_shape(model)
    device = device or ("cpu" if getattr(preset, "name", None) == "cpu" else "cuda")
    device = "cuda" if device == "cuda" else "cpu"  # mps trains as cpu
    bf16_cpu = device == "cpu" and cpu_bf16 and not preset.load_in_4bit
    act_bytes = 4 if device == "cpu" and not bf16_cpu else 2
    embed = shape.vocab * shape.hidden
    if preset.load_in_4bit:
        weights = (shape.params - embed) * 0.5 * (1 + 1 / 16) + embed * 2
    else:
        weights = shape.params * (4 if device == "cpu" else 2)  # CPU: fp32, or bf16 + its packed copy
    lora_params = shape.layers * preset.lora_r * (11 * shape.hidden + 3 * shape.intermediate)
    tokens = preset.per_device_train_batch_size * (prompt_length + preset.max_completion_length)
    kv_cache = 2 * shape.layers * tokens * shape.kv_dim * act_bytes
    per_layer = (18 * shape.hidden + 4 * shape.intermediate) * tokens * act_bytes
    kept = per_layer + shape.layers * shape.hidden * tokens * act_bytes if preset.gradient_checkpointing \
        else per_layer * shape.layers
    vocab_chunk = min(tokens, 1024) * shape.vocab * 4 * 3
    return MemoryEstimate(weights / GIB, lora_params * 16 / GIB, (kv_cache + kept + vocab_chunk) / GIB,
                          OVERHEAD_GB[device])
