"""TRL's RLOO step made faster on a CPU with bf16 base weights, where small operations, not FLOPs, bound it.

While TRL samples a batch of completions:

- LoRA merged into the weights. Each generated token otherwise runs ~6 extra operations per adapted
  matrix (210 in SmolLM2) to add the adapter's low-rank product. The merged weights are new tensors,
  so the base weights come back bit for bit afterwards (a merge-then-unmerge in bf16 would not). The
  policy that samples then differs from the one the loss scores by bf16 rounding of W + BA, the same
  kind of gap as sampling with vLLM from merged weights.
- A vectorised categorical draw. `torch.multinomial` draws its exponential variates one at a time on a
  CPU: 13 ms for 16 x 49k probabilities, once per token. `argmax(p / E)` with `E = -log(U)` is the same
  draw (the exponential race torch itself runs) from a vectorised uniform in ~2.5 ms.

And for the whole step, bf16 LoRA compute: PEFT runs each adapter in its weights' dtype (fp32, which
the optimizer needs), so every adapted matrix casts its bf16 input to fp32 and its output back, on
every forward and backward. Under bf16 autocast with PEFT's input casting off, the adapter's matmuls run
in bf16 on bf16 activations (autocast casts the small fp32 adapter weights, once per step) and the fp32
weights still receive the gradients, as in GPU mixed-precision training.

Each change was measured in one process, alternating per step, on SmolLM2-135M at the cpu preset: the
merged weights and vectorised draw together -10% of the step, the bf16 LoRA compute -6%
(benchmarks/results/roofline.md has the phases).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch

_multinomial = torch.multinomial


def _categorical(probs, num_samples, replacement=False, *, generator=None, out=None):
    """torch.multinomial, vectorised for the one case generation uses: one draw per row of a CPU matrix.
    Anything else, and probabilities torch would reject (negative, inf, nan), go to torch.multinomial."""
    if (num_samples != 1 or probs.dim() != 2 or probs.device.type != "cpu" or out is not None
            or not torch.isfinite(probs).all() or (probs < 0).any()):
        return _multinomial(probs, num_samples, replacement, generator=generator, out=out)
    race = torch.rand(probs.shape, generator=generator, dtype=torch.float32).log_().neg_()
    return (probs / race).argmax(dim=-1, keepdim=True)


@contextlib.contextmanager
def categorical_sampling() -> Iterator[None]:
    """Route torch.multinomial through `_categorical` for the duration (generation calls it per token)."""
    torch.multinomial = _categorical
    try:
        yield
    finally:
        torch.multinomial = _multinomial


def _mergeable_layers(model) -> list:
    from peft.tuners.lora import LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    plain = all(type(m.base_layer) is torch.nn.Linear and m.base_layer.weight.is_floating_point()
                and not m.fan_in_fan_out and not getattr(m, "lora_variant", None)
                and not any(getattr(m, "lora_bias", {}).values()) for m in layers)
    return layers if plain else []  # 4-bit base layers, DoRA and other variants: not merged


@contextlib.contextmanager
def merged_lora(model) -> Iterator[None]:
    """Run with each active LoRA adapter merged into the weights and the adapters off; the original weight
    tensors are put back afterwards, untouched.

    W + scale * B A is one addmm in the weights' dtype (fp32 accumulation, one rounding), written into a
    buffer kept per layer: allocating ~200 MB afresh per step cost more in page faults than the merge."""
    layers = _mergeable_layers(model)
    if not layers:
        yield
        return
    originals = []
    with torch.no_grad():
        for layer in layers:
            weight = layer.base_layer.weight
            merged = getattr(layer, "_rloo_kit_merged", None)
            if merged is None or merged.shape != weight.shape or merged.dtype != weight.dtype:
                merged = layer._rloo_kit_merged = torch.empty_like(weight.data)
            merged.copy_(weight.data)
            for name in (a for a in layer.active_adapters if a in layer.lora_A):
                b, a = layer.lora_B[name].weight, layer.lora_A[name].weight
                merged.addmm_(b.to(merged.dtype), a.to(merged.dtype), alpha=layer.scaling[name])
            originals.append(weight.data)
            weight.data = merged
    try:
        with model.disable_adapter():
            yield
    finally:
        for layer, original in zip(layers, originals, strict=True):
            layer.base_layer.weight.data = original


def speed_up_cpu_step(trainer) -> bool:
    """On a CPU, with a bf16 base model under LoRA and plain transformers generation: sample with merged
    weights and the vectorised draw, and run the step under bf16 autocast without PEFT's input casts.
    Returns whether it was installed (once per trainer)."""
    from peft.helpers import disable_input_dtype_casting

    from . import compat

    model = trainer.accelerator.unwrap_model(trainer.model)
    if (trainer.accelerator.device.type != "cpu" or compat._LEGACY or getattr(trainer, "use_vllm", False)
            or getattr(trainer, "use_transformers_continuous_batching", False) or not hasattr(model, "disable_adapter")
            or model.get_base_model().dtype != torch.bfloat16 or getattr(trainer, "_rloo_kit_cpu_step", False)):
        return False
    generate, training_step = trainer._generate_single_turn, trainer.training_step

    def generate_single_turn(self, *args, **kwargs):
        with merged_lora(self.accelerator.unwrap_model(self.model)), categorical_sampling():
            return generate(*args, **kwargs)

    def bf16_training_step(self, *args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16), disable_input_dtype_casting(self.model):
            return training_step(*args, **kwargs)

    trainer._generate_single_turn = types.MethodType(generate_single_turn, trainer)
    trainer.training_step = types.MethodType(bf16_training_step, trainer)
    trainer._rloo_kit_cpu_step = True
    return True
