"""TRL's RLOO step made faster on a CPU with bf16 base weights, where small operations, not FLOPs, bound it.

- bf16 LoRA compute. PEFT runs each adapter in its weights' dtype (fp32, which the optimizer needs), so
  every adapted matrix casts its bf16 input to fp32 and its output back, in every forward and backward,
  sampling included. Under bf16 autocast with PEFT's input casting off, the adapter's matmuls run in bf16
  on bf16 activations (autocast casts the small fp32 adapter weights once per step) and the fp32 weights
  still receive the gradients, as in GPU mixed-precision training.
- A vectorised categorical draw while TRL samples. `torch.multinomial` draws its exponential variates one
  at a time on a CPU: 13 ms for 16 x 49k probabilities, once per token. `argmax(p / E)` with `E = -log(U)`
  is the same draw (the exponential race torch itself runs) from a vectorised uniform in ~2.5 ms.

Each was measured in one process, alternating per step, on SmolLM2-135M at the cpu preset: -6% of the
step each (benchmarks/results/roofline.md has the phases). Tried and dropped: merging LoRA into the bf16
weights for sampling (-6% more). A young adapter's B A is mostly below half a bf16 step of the weight it
is added to, so the merge rounds it away and the sampler lags the policy: with B grown by the learning
rate per step, 93% of SmolLM2's merged delta entries were zero after one step, 55% after ten, 27% after
thirty. Added at each activation instead, as here, the rounding falls differently on every token and
the adapter's effect survives on average.
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


def speed_up_cpu_step(trainer) -> bool:
    """On a CPU, with a bf16 base model under LoRA and plain transformers generation: run the step under
    bf16 autocast without PEFT's input casts, and sample with the vectorised draw. Returns whether it was
    installed (once per trainer)."""
    from peft.helpers import disable_input_dtype_casting

    from . import compat

    model = trainer.accelerator.unwrap_model(trainer.model)
    if (trainer.accelerator.device.type != "cpu" or compat._LEGACY or getattr(trainer, "use_vllm", False)
            or getattr(trainer, "use_transformers_continuous_batching", False) or not hasattr(model, "peft_config")
            or model.get_base_model().dtype != torch.bfloat16 or getattr(trainer, "_rloo_kit_cpu_step", False)):
        return False
    generate, training_step = trainer._generate_single_turn, trainer.training_step

    def generate_single_turn(self, *args, **kwargs):
        with categorical_sampling():
            return generate(*args, **kwargs)

    def bf16_training_step(self, *args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16), disable_input_dtype_casting(self.model):
            return training_step(*args, **kwargs)

    trainer._generate_single_turn = types.MethodType(generate_single_turn, trainer)
    trainer.training_step = types.MethodType(bf16_training_step, trainer)
    trainer._rloo_kit_cpu_step = True
    return True
