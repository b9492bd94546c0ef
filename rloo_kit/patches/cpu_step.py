"""TRL's RLOO step made faster on a CPU, where small operations, not FLOPs, bound it. Two patches, applied by
`rloo_kit.patches`: `bf16_step` (the first point, bf16 base weights only) and `lean_sampler` (the second; on an
fp32 base, the CPU's path without a bf16 unit, all of it but the packed weights).

- bf16 LoRA compute. PEFT runs each adapter in its weights' dtype (fp32, which the optimizer needs), so
  every adapted matrix casts its bf16 input to fp32 and its output back, in every forward and backward.
  Under bf16 autocast with PEFT's input casting off, the adapter's matmuls run in bf16 on bf16
  activations and the fp32 weights still receive the gradients, as in GPU mixed-precision training.
  The adapter adds its rank-r product to the base output in one `addmm` (`lean_lora_training`), so that
  backward scales the small product, not the layer's whole output.
- Sampling, a token at a time for 16 rows, pays per call, not per FLOP:
  - packed base weights: oneDNN re-lays a bf16 weight out for its kernel on every call, a quarter of
    each decoding matmul and half of the 49k-wide LM head. The frozen base matrices are packed once (a
    second copy of them in memory) and used for every no-grad batch: sampling, and the step's reference
    pass (-3% there);
  - a lean LoRA forward: PEFT's runs four module calls and four more operations per layer and token,
    which cost more than its two matmuls: 29% of sampling went to the adapters. Base output plus the
    adapter's product added in place, with the adapter cast once per generation; a decoding token's
    rank-16 products in fp32, where oneDNN's bf16 kernel costs more to set up than to run. Sampling runs
    outside the step's autocast, which would turn those back into bf16;
  - each distinct prompt read once: RLOO samples several completions per prompt, and transformers
    repeats the prompt's pass for every one of them (`shared_prompts`);
  - inference mode (TRL hands the completions back as lists: nothing of it reaches autograd);
  - a cheaper categorical draw: `torch.multinomial` draws one exponential variate per vocabulary entry,
    one at a time, on a CPU: 13 ms for 16 x 49k probabilities, once per token. Inverting the cumulative
    distribution at one uniform per row is the same draw in 0.4 ms.

Measured in one process, alternating variants per step, on SmolLM2-135M at the cpu preset: sampling
-29%, the step -12% for the packed weights, lean LoRA, inference mode and the draw together; the shared
prompts then -14% of sampling, -11% of the step; fp32 decoding adapters outside autocast, the training
step's `addmm` and the fused RMSNorm (`norms`) -7% of the step together (benchmarks/results/roofline.md
has the phases).

Tried and dropped: fp32 adapters for a prompt's many rows too (bf16 added to fp32 tensors is slow there);
glibc's allocator thresholds (`GLIBC_TUNABLES` mmap/trim: page faults a step 100k -> 30k, the step no
faster in four alternating pairs of processes); merging LoRA into the bf16
weights for sampling: a young adapter's B A is mostly below half a bf16 step of the weight it is added
to, so the merge rounds it away and the sampler lags the policy (93% of SmolLM2's merged delta entries
were zero after one step, 27% after thirty); torch.compile of the decoder layers: 15 s to compile, then
a recompile per layer as the cache grows; transformers' own compiled decoding (a static cache and a
CompileConfig that allows CPUs): 68 s to compile, then 1.37 s a generation against this sampler's 0.96 s;
the training adapters' product added in place (`addmm_`) and an autograd Function pairing the fused RMSNorm
kernel with a hand-written backward: each faster alone, together the step 2.5% slower (49 alternating steps
each).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from .patch import overriding

_multinomial = torch.multinomial
PACKED_ROWS = 64  # the batch oneDNN packs a weight for (it serves any batch); up to it, a decoding token's rows


def _categorical(probs, num_samples, replacement=False, *, generator=None, out=None):
    """torch.multinomial for the one case generation uses: one draw per row of a CPU matrix, by inverting
    the cumulative distribution. Anything else, and probabilities torch would reject (negative, inf, nan,
    all zero), go to torch.multinomial."""
    if num_samples != 1 or probs.dim() != 2 or probs.device.type != "cpu" or out is not None:
        return _multinomial(probs, num_samples, replacement, generator=generator, out=out)
    cdf = probs.float().cumsum(dim=-1)
    total = cdf[:, -1:]
    if not bool((probs.min() >= 0) & torch.isfinite(total).all() & (total > 0).all()):
        return _multinomial(probs, num_samples, replacement, generator=generator, out=out)
    # u in [0, total): the first entry whose cumulative sum exceeds u has nonzero probability
    u = torch.minimum(torch.rand(total.shape, generator=generator) * total, torch.nextafter(total, torch.zeros(())))
    return torch.searchsorted(cdf, u, right=True)


@contextlib.contextmanager
def categorical_sampling() -> Iterator[None]:
    """Route torch.multinomial through `_categorical` for the duration (generation calls it per token)."""
    torch.multinomial = _categorical
    try:
        yield
    finally:
        torch.multinomial = _multinomial


def _packable(module: torch.nn.Module) -> bool:
    return (type(module) is torch.nn.Linear and module.weight.dtype == torch.bfloat16
            and module.weight.device.type == "cpu" and not module.weight.requires_grad)


def _packed_forward(module: torch.nn.Linear):
    """`module.forward` with its weight packed for oneDNN once, for no-grad bf16 batches: 8-12% off a
    decoding token's products, 3-9% off a prompt's or the reference pass's (848 rows)."""
    weight = module.weight
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_ROWS)
    version = weight._version

    def forward(x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != torch.bfloat16 or weight._version != version:
            return F.linear(x, weight, module.bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, module.bias, "none", [], "")

    return forward


def packing_available() -> bool:
    """Whether this torch build and CPU run oneDNN's bf16 kernels (AVX512 at least)."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def pack_frozen_weights(model: torch.nn.Module) -> int:
    """Give each frozen bf16 `nn.Linear` of `model` a packed copy of its weight, to be used by
    `packed_weights`. Returns how many were packed (0 where oneDNN cannot run bf16 here)."""
    if not packing_available():
        return 0
    n = 0
    for module in model.modules():
        if _packable(module) and "_rloo_kit_packed" not in vars(module):
            module._rloo_kit_packed = _packed_forward(module)
            n += 1
    return n


def packed_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules of `model` that `pack_frozen_weights` packed."""
    return [m for m in model.modules() if "_rloo_kit_packed" in vars(m)]


@contextlib.contextmanager
def packed_weights(model: torch.nn.Module, modules: list[torch.nn.Module] | None = None) -> Iterator[None]:
    """For the duration, linear layers packed by `pack_frozen_weights` (`modules`, found in `model` when
    None) compute no-grad bf16 batches with their packed weight; everything else runs as before."""
    modules = packed_modules(model) if modules is None else modules
    with overriding("forward", [(m, m._rloo_kit_packed) for m in modules]):
        yield


def _lean_lora_forward(layer, adapter: str):
    """A plain LoRA layer's forward for no-grad batches: the base output plus `scaling * x A^T B^T` added in
    place. PEFT's own forward runs four module calls and four more operations per layer and token, which cost
    as much as the two matmuls. On a bf16 base a decoding token's rank-16 products run in fp32 on the
    adapter's own weights (18 against 37 us a layer for 16 rows: bf16's kernel pays ~15 us a call to set up);
    a prompt's many rows in bf16, as the training step computes them, the adapter cast once it is needed. On
    an fp32 base everything is fp32."""
    a = layer.lora_A[adapter].weight.detach().t().float()  # views of fp32 adapters: nothing copied
    b = layer.lora_B[adapter].weight.detach().t().float()
    scalings, base, peft_forward = layer.scaling, layer.base_layer, type(layer).forward  # scaling read per call
    bf16: list[torch.Tensor] = []

    def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if args or kwargs or torch.is_grad_enabled() or x.dtype not in (torch.bfloat16, torch.float32):
            return peft_forward(layer, x, *args, **kwargs)
        out = base(x)
        if not out.is_contiguous():
            out = out.contiguous()
        rows, flat = x.reshape(-1, x.shape[-1]), out.view(-1, out.shape[-1])
        if x.dtype == torch.float32:  # an fp32 model: the adapter's own weights, one product added in place
            flat.addmm_(rows @ a, b, alpha=scalings[adapter])
        elif len(rows) <= PACKED_ROWS:
            flat.add_((rows.float() @ a) @ b, alpha=scalings[adapter])
        else:
            if not bf16:
                bf16.extend((a.to(torch.bfloat16), b.to(torch.bfloat16)))
            flat.addmm_(rows @ bf16[0], bf16[1], alpha=scalings[adapter])
        return out

    return forward


def _lean_lora_training_forward(layer, adapter: str):
    """A plain LoRA layer's forward under CPU autocast, with gradients: `base(x) + scaling * (x A^T) B^T` as
    one `addmm`, whose backward scales the rank-r product instead of the layer's whole output (PEFT multiplies
    the (tokens x out) output by `scaling` and adds it, an operation each way more per layer). Anything else
    (adapters off or switched, no autocast, extra arguments) goes to PEFT."""
    lora_a, lora_b = layer.lora_A[adapter], layer.lora_B[adapter]
    scalings, base, peft_forward = layer.scaling, layer.base_layer, type(layer).forward

    def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if (args or kwargs or layer.disable_adapters or layer.merged or layer.active_adapters != [adapter]
                or not torch.is_autocast_enabled("cpu")):
            return peft_forward(layer, x, *args, **kwargs)
        out = base(x)
        xa = F.linear(x, lora_a.weight)
        return torch.addmm(out.reshape(-1, out.shape[-1]), xa.reshape(-1, xa.shape[-1]), lora_b.weight.t(),
                           alpha=scalings[adapter]).view(out.shape)

    return forward


def _plain_lora(layer) -> str | None:
    """The one active adapter of a vanilla, unmerged LoRA `Linear` without dropout or bias, else None."""
    from peft.tuners.lora import Linear as LoraLinear

    if type(layer) is not LoraLinear or layer.disable_adapters or layer.merged or len(layer.active_adapters) != 1:
        return None
    name = layer.active_adapters[0]
    plain = (name in layer.lora_A and name not in layer.lora_variant and not layer.lora_bias.get(name, False)
             and isinstance(layer.lora_dropout[name], torch.nn.Identity) and type(layer.base_layer) is torch.nn.Linear)
    return name if plain else None


def tuner_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """PEFT's tuner layers in `model`, found once: a walk over a 135M model's 2,500 modules takes ~4 ms, and
    the step enters several of the contexts below."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


def _plain_lora_overrides(layers: list[torch.nn.Module], make_forward) -> list[tuple[torch.nn.Module, object]]:
    """(layer, forward) for each plain LoRA layer of `layers`, its forward made by `make_forward(layer, adapter)`."""
    return [(m, make_forward(m, name)) for m in layers if (name := _plain_lora(m)) is not None]


@contextlib.contextmanager
def lean_lora(model: torch.nn.Module, layers: list[torch.nn.Module] | None = None) -> Iterator[None]:
    """For the duration (sampling, where the adapters do not change), plain LoRA layers (of `layers`, found
    in `model` when None) compute no-grad bf16 or fp32 batches with `_lean_lora_forward`; anything else goes to
    PEFT."""
    layers = tuner_layers(model) if layers is None else layers
    with overriding("forward", _plain_lora_overrides(layers, _lean_lora_forward)):
        yield


@contextlib.contextmanager
def lean_lora_training(model: torch.nn.Module, layers: list[torch.nn.Module] | None = None) -> Iterator[None]:
    """For the duration (a training step under CPU autocast), plain LoRA layers run
    `_lean_lora_training_forward`; any other layer goes to PEFT."""
    layers = tuner_layers(model) if layers is None else layers
    with overriding("forward", _plain_lora_overrides(layers, _lean_lora_training_forward)):
        yield


@contextlib.contextmanager
def input_casts(model: torch.nn.Module, enabled: bool, layers: list[torch.nn.Module] | None = None) -> Iterator[None]:
    """PEFT's casts of a layer's input to its adapter's dtype on or off for the duration: off for the training
    step, where autocast picks the dtypes (what `peft.helpers.disable_input_dtype_casting` does, without its
    two walks over the model); on again while sampling, which runs without autocast."""
    layers = tuner_layers(model) if layers is None else layers
    with overriding("cast_input_dtype_enabled", [(m, enabled) for m in layers]):
        yield


def _no_grad_disable_adapter(model, layers: list[torch.nn.Module]):
    """`model.disable_adapter` that, for a no-grad pass (TRL's reference log-probabilities), only flips the
    LoRA layers' switch. PEFT's also scans the whole model's adapter status (~25 ms for SmolLM2) and turns
    every adapter's requires_grad off and back on (~10 ms), once per step; neither matters without gradients.
    Anything else (gradients on, adapters already off, other tuners, biases, modules to save) gets PEFT's."""
    from peft import LoraConfig
    from peft.tuners.lora import LoraLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    peft_disable = type(model).disable_adapter
    simple = (bool(layers) and all(isinstance(c, LoraConfig) and c.bias == "none" for c in model.peft_config.values())
              and all(isinstance(m, LoraLayer) and hasattr(m, "_disable_adapters") for m in layers)
              and not any(isinstance(m, AuxiliaryTrainingWrapper) for m in model.modules()))

    @contextlib.contextmanager
    def disable_adapter() -> Iterator[None]:
        if (not simple or torch.is_grad_enabled() or model._adapters_disabled
                or any(m.disable_adapters for m in layers)):
            with peft_disable(model):
                yield
            return
        model._adapters_disabled = True
        for m in layers:
            m._disable_adapters = True
        try:
            yield
        finally:
            for m in layers:
                m._disable_adapters = False
            model._adapters_disabled = False

    return disable_adapter


def narrowable(cache) -> bool:
    """Whether every layer of `cache` keeps plain keys and values, which `batch_select_indices` selects rows of
    whole (a static, quantized or recurrent cache it would not)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    return type(cache) is DynamicCache and all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer)
                                               for layer in cache.layers)


def _shared_prompt_generate(model: torch.nn.Module, generate):
    """`model.generate` that reads each distinct prompt once. RLOO samples several completions per prompt,
    and transformers repeats the prompt's whole pass for each: here the distinct prompts (all but their
    last token) fill a KV cache, copied to every row that repeats them, and generation goes on from it.
    Anything it does not know how to share goes to `generate` as it came."""

    def shared(*args, input_ids=None, attention_mask=None, **kwargs):
        config = kwargs.get("generation_config")
        if (args or input_ids is None or attention_mask is None or input_ids.shape[1] < 2
                or kwargs.get("past_key_values") is not None or getattr(config, "cache_implementation", None)
                or any(isinstance(v, torch.Tensor) for v in kwargs.values())):
            return generate(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        n = input_ids.shape[1]
        distinct, row = torch.unique(torch.cat([input_ids, attention_mask], 1), dim=0, return_inverse=True)
        if len(distinct) == len(input_ids):
            return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        ids, mask = distinct[:, :n - 1], distinct[:, n:-1]
        positions = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 1)  # as generate numbers left-padded rows
        cache = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                      logits_to_keep=1).past_key_values
        if not narrowable(cache):  # a recurrent state or a quantized cache: not copied row by row here
            return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        cache.batch_select_indices(row)
        return generate(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, **kwargs)

    return shared


@contextlib.contextmanager
def shared_prompts(model: torch.nn.Module) -> Iterator[None]:
    """For the duration, `model.generate` reads each distinct prompt once (`_shared_prompt_generate`)."""
    with overriding("generate", [(model, _shared_prompt_generate(model, model.generate))]):
        yield


def _cpu_lora_model(trainer, dtypes: tuple[torch.dtype, ...]):
    """The trainer's PEFT model when its step runs on a CPU on a base of one of `dtypes` with transformers
    generation, else None: what the bf16 step and the lean sampler are for."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if (trainer.accelerator.device.type != "cpu" or getattr(trainer, "use_vllm", False)
            or getattr(trainer, "use_transformers_continuous_batching", False) or not hasattr(model, "peft_config")
            or model.get_base_model().dtype not in dtypes):
        return None
    return model


def lean_sampler(trainer) -> bool:
    """Sample with the lean LoRA forward, each distinct prompt read once and the cheaper draw, in inference mode
    and without the step's autocast; on a bf16 base with packed base weights too. Returns whether it was
    installed (once per trainer)."""
    model = _cpu_lora_model(trainer, (torch.bfloat16, torch.float32))
    if model is None or getattr(trainer, "_rloo_kit_sampler", False):
        return False
    pack_frozen_weights(model)
    packed, layers = packed_modules(model), tuner_layers(model)  # found once: sampling enters these every time
    generate = trainer._generate_single_turn

    def generate_single_turn(self, *args, **kwargs):
        # inference mode: TRL returns the completions as lists, so no tensor of it reaches autograd
        # and without the step's autocast: the sampler picks each product's dtype itself
        with (torch.inference_mode(), torch.autocast("cpu", enabled=False), input_casts(model, True, layers),
              categorical_sampling(), packed_weights(model, packed), lean_lora(model, layers), shared_prompts(model)):
            return generate(*args, **kwargs)

    trainer._generate_single_turn = types.MethodType(generate_single_turn, trainer)
    trainer._rloo_kit_sampler = True
    return True


def bf16_step(trainer) -> bool:
    """Run the training step under bf16 autocast without PEFT's input casts, LoRA's product in one `addmm`, the
    reference pass on the weights `lean_sampler` packed (if it did) and switching only the LoRA layers. Returns
    whether it was installed (once per trainer)."""
    model = _cpu_lora_model(trainer, (torch.bfloat16,))
    if model is None or getattr(trainer, "_rloo_kit_bf16_step", False):
        return False
    packed, layers = packed_modules(model), tuner_layers(model)
    reference_switch = [(model, _no_grad_disable_adapter(model, layers))]
    training_step = trainer.training_step

    def bf16_training_step(self, *args, **kwargs):
        with (torch.autocast("cpu", dtype=torch.bfloat16), input_casts(model, False, layers),
              packed_weights(model, packed), lean_lora_training(model, layers),
              overriding("disable_adapter", reference_switch)):
            return training_step(*args, **kwargs)

    trainer.training_step = types.MethodType(bf16_training_step, trainer)
    trainer._rloo_kit_bf16_step = True
    return True


def speed_up_cpu_step(trainer) -> bool:
    """The door's `cpu_sampler` and `cpu_bf16_step` on a trainer built by hand, with the versions and targets
    checked as `build_trainer` checks them. Returns whether either was installed."""
    from . import patch_trainer_with

    return any(o.status == "applied" for o in patch_trainer_with(trainer, ("cpu_sampler", "cpu_bf16_step")))
