"""A trained adapter out of the kit: a merged model any `transformers` loads without PEFT, and a GGUF file for
llama.cpp and Ollama, written with the `gguf` package the way llama.cpp's own converter writes it.

Everything is checked before the model loads (adapter, output path, quantization, architecture, shapes), and
every file is written under a temporary name in its own directory and renamed whole, so a failed or cut-short
export (a full disk) never leaves a half-written file under the name asked for.
`verify_gguf` runs the task's held-out evaluation through llama.cpp (`llama_cpp`) beside PyTorch.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ExportError, ModelSourceError
from ..models import adapter_base_model, require_adapter
from ..sources import PRE_TOKENIZERS, resolve_source

log = logging.getLogger("rloo_kit")

GGUF_QUANTS = ("f32", "f16", "bf16", "q8_0", "q4_0")
# k-quants and i-quants need llama.cpp's own quantizer (`llama-quantize`); the gguf package only reads them
_UNWRITABLE = re.compile(r"(q\d_k(_[sml])?|iq\d.*|tq\d_0)", re.IGNORECASE)


@dataclass(frozen=True)
class Architecture:
    gguf_arch: str  # the gguf.MODEL_ARCH member
    permute_qk: bool  # llama.cpp's converter undoes HF's rotary layout of q/k (LlamaModel.permute)


ARCHITECTURES = {"LlamaForCausalLM": Architecture("LLAMA", True), "Qwen2ForCausalLM": Architecture("QWEN2", False)}


# ------------------------------------------------------------------------------------------ checks, before loading

def check_quant(quant: str) -> str:
    """The quantization name, lower-cased, or ExportError saying which ones can be written."""
    q = quant.lower()
    if q in GGUF_QUANTS:
        return q
    if _UNWRITABLE.fullmatch(q):
        raise ExportError(f"GGUF type '{quant}' (a k-quant or i-quant) cannot be written by the gguf package, only by "
                          f"llama.cpp's llama-quantize: export --quant f16 and run `llama-quantize X.gguf Y.gguf "
                          f"{quant.upper()}`, or pick one of {', '.join(GGUF_QUANTS)}.")
    raise ExportError(f"Unknown GGUF type '{quant}'. Supported: {', '.join(GGUF_QUANTS)}.")


def check_output(output: str | Path, overwrite: bool) -> Path:
    out = Path(output).expanduser()
    if out.exists() and not overwrite:
        raise ExportError(f"{out} exists: choose another --output, or pass --overwrite (overwrite=True) to replace it.")
    if any(p.exists() and not p.is_dir() for p in out.parents):
        raise ExportError(f"{out.parent} is not a folder for {out.name}: choose another --output.")
    return out  # a missing folder is made when writing starts (_atomic), as train makes its --output-dir


def base_config(adapter: str | Path, model: str | None = None):
    """(base model name, its resolved source, its config) for an adapter: the base it records, or `model`."""
    from transformers import AutoConfig

    require_adapter(adapter)
    name = model or adapter_base_model(adapter)
    source = resolve_source(name)
    try:
        return name, source, AutoConfig.from_pretrained(source)
    except OSError as e:
        raise ModelSourceError(f"Cannot read the base model '{name}' of adapter {adapter}: {e}. Pass the base with "
                               "--model (model=...) as a local directory, a .gguf file or an alias.") from e


def check_architecture(config) -> Architecture:
    arch = (getattr(config, "architectures", None) or ["?"])[0]
    if arch not in ARCHITECTURES:
        raise ExportError(f"GGUF export supports {', '.join(ARCHITECTURES)}; this model is {arch}. Export it with "
                          "--format merged and convert that with llama.cpp's convert_hf_to_gguf.py.")
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ExportError(f"GGUF export supports plain RoPE; this model uses '{rope['rope_type']}' scaling. Export "
                          "--format merged and convert that with llama.cpp's convert_hf_to_gguf.py.")
    return ARCHITECTURES[arch]


def check_adapter_fits(adapter: str | Path, config, base_name: str = "the base model") -> None:
    """Refuse an adapter whose LoRA shapes do not fit the base's layers, from the base's config alone (its
    modules built on the meta device, no weights loaded): a wrong --model fails here in seconds."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    weights = Path(adapter) / "adapter_model.safetensors"
    if not weights.is_file():
        raise ExportError(f"{adapter} has no adapter_model.safetensors (pickled .bin adapters are refused for safety): "
                          "save it again with rloo_kit.save_adapter.")
    with torch.device("meta"):
        modules = dict(AutoModelForCausalLM.from_config(config).named_modules())
    with safe_open(weights, "pt") as f:
        for key in f.keys():
            m = re.fullmatch(r"base_model\.model\.(.+)\.lora_([AB])\.weight", key)
            if not m:
                continue
            module, kind = modules.get(m.group(1)), m.group(2)
            if not isinstance(module, torch.nn.Linear):
                raise ExportError(f"The adapter has LoRA weights for '{m.group(1)}', a layer {base_name} lacks: it "
                                  "was trained on another model. Pass the right base with --model (model=...).")
            got = f.get_slice(key).get_shape()[1 if kind == "A" else 0]
            want = module.in_features if kind == "A" else module.out_features
            if got != want:
                raise ExportError(f"The adapter's '{m.group(1)}' expects {got} features where {base_name} has {want}: "
                                  "it was trained on another model. Pass the right base with --model (model=...).")


# ----------------------------------------------------------------------------------------------------- merging

def load_merged(adapter: str | Path, source: str, *, stored_as: str | None = None):
    """Base (fp32) + adapter folded in by PEFT's merge_and_unload, and the base's tokenizer: (model, tokenizer).
    stored_as: the type the merged weights will be written in (a GGUF type); a warning names a finer type when
    that one keeps too little of the adapter's effect (see `effect_kept`)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, use_safetensors=True)
    tok = AutoTokenizer.from_pretrained(source, clean_up_tokenization_spaces=False)
    adapted = PeftModel.from_pretrained(base, str(adapter))
    if stored_as in (None, "f32"):
        merged = adapted.merge_and_unload()
    else:
        merged = merge_and_check(adapted, tok, stored_as)
    merged.eval()
    return merged, tok


# Below this share of the adapter's effect kept (effect_kept), an export answered visibly unlike the adapter. Measured
# on the arithmetic task, greedy replies in llama.cpp the same as the adapter's in PyTorch, of 50: a 30-step GPU adapter
# trained at learning rate 5e-5 kept 0.43 in bf16 (35/50; accuracy 0.46 against 0.56), 0.88 in f16 (45/50); a 30-step
# CPU demo adapter kept 0.86 in bf16 and 0.83 in q8_0 (49/50 each).
EFFECT_KEPT_ENOUGH = 0.7
FINER = ("q4_0", "q8_0", "bf16", "f16", "f32")  # GGUF types, coarsest first
PROBE = ("What is 17 + 25? Reply with just the number.", "Name three colours.",
         "Explain in one sentence why the sky is blue.", "Write the word 'cat' backwards.")


def merge_and_check(adapted, tok, quant: str):
    """Merge; warn, naming the coarsest finer type that keeps enough, when `quant` keeps less than
    EFFECT_KEPT_ENOUGH of the adapter's effect on a few probe prompts."""
    adapted_names = [name.removeprefix("base_model.model.") for name, m in adapted.named_modules()
                     if hasattr(m, "get_delta_weight")]
    ids = probe_ids(tok)
    before, after = _log_probs(adapted, ids, adapter=False), _log_probs(adapted, ids)
    merged = adapted.merge_and_unload()
    layers = [merged.get_submodule(n) for n in adapted_names]

    def kept(q: str) -> float:
        return effect_kept(before, after, _log_probs(merged, ids, rounded=(layers, q)))

    share = kept(quant)
    if share < EFFECT_KEPT_ENOUGH:
        finer = ((q, kept(q)) for q in FINER[FINER.index(quant) + 1:-1])
        better = next((f"{q} (keeps {k:.0%})" for q, k in finer if k >= EFFECT_KEPT_ENOUGH), "f32 (keeps all)")
        log.warning("Stored as %s, the merged model keeps %.0f%% of what the adapter changed in its answers: the "
                    "update is smaller than %s can hold on top of the base weights (a short run, or a low learning "
                    "rate), so the export answers more like the base model. Export with --quant %s.", quant,
                    100 * share, quant, better)
    return merged


def effect_kept(before, after, stored) -> float:
    """1 - |stored - after| / |after - before| over next-token log-probs: the share of the adapter's change to the
    model's outputs (after - before) that the stored weights still make. A short run, or one at a low learning
    rate, changes most weights by less than bf16's step at their size; rounded, such an update becomes a few whole
    steps in random places: noise, not the adapter."""
    change = float((after - before).norm())
    return 1.0 if change == 0 else max(0.0, 1.0 - float((stored - after).norm()) / change)


def probe_ids(tok):
    """The probe prompts as one token row (one forward pass, no padding)."""
    import torch

    text = "".join(tok.apply_chat_template([{"role": "user", "content": c}], tokenize=False,
                                           add_generation_prompt=True) if tok.chat_template else c for c in PROBE)
    return torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])


def _log_probs(model, ids, *, adapter: bool = True, rounded: tuple[list, str] | None = None):
    """Next-token log-probs; without the adapter (a PeftModel's), or with `rounded` = (layers, type): those layers'
    weights as the GGUF type holds them, one layer at a time (no second copy of the model)."""
    import contextlib

    import torch

    hooks = []
    for layer in rounded[0] if rounded else ():
        def swap_in(module, args, quant=rounded[1]):
            module.exact = module.weight.data
            module.weight.data = torch.from_numpy(round_trip(module.exact.numpy(), quant))

        def swap_out(module, args, output):
            module.weight.data = module.exact
            del module.exact

        hooks += [layer.register_forward_pre_hook(swap_in), layer.register_forward_hook(swap_out)]
    try:
        with torch.no_grad(), (model.disable_adapter() if not adapter else contextlib.nullcontext()):
            return model(ids).logits[0].log_softmax(-1)
    finally:
        for h in hooks:
            h.remove()


def round_trip(x, quant: str):
    """x (float32 numpy) as the GGUF type `quant` holds it (rows that do not split into blocks: F16, as written)."""
    import gguf
    import numpy as np

    qtype = gguf.GGMLQuantizationType[quant.upper()]
    try:
        return gguf.quants.dequantize(gguf.quants.quantize(x, qtype), qtype).reshape(x.shape).astype(np.float32)
    except gguf.QuantError:
        return x.astype(np.float16).astype(np.float32)


def export_merged(adapter: str | Path, output: str | Path, *, model: str | None = None, overwrite: bool = False,
                  dtype: str | None = None) -> Path:
    """Write base + adapter as one standalone model directory (safetensors, tokenizer, chat template) that
    `AutoModelForCausalLM.from_pretrained` loads without PEFT. dtype: the base's own by default.

    Args:
        adapter: the adapter directory (`output_dir/adapter` of a run, or one `save_adapter` wrote).
        output: the directory to write; it must not exist unless `overwrite`.
        model: the base model to merge into; the one the adapter's config records when None.
        overwrite: replace `output` if it exists.
        dtype: the weights' torch dtype name ("float32", "bfloat16", "float16"); the base's own when None.

    Returns:
        The path of the written directory.
    """
    import torch

    out = check_output(output, overwrite)
    name, source, config = base_config(adapter, model)
    check_adapter_fits(adapter, config, name)
    start = time.time()
    dtype = dtype or str(getattr(config, "dtype", None) or "float32").removeprefix("torch.")
    merged, tok = load_merged(adapter, source, stored_as={"bfloat16": "bf16", "float16": "f16"}.get(dtype))
    with _atomic(out, directory=True) as tmp:
        merged.to(getattr(torch, dtype)).save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    log.info("Merged model written to %s (%s, %.0f s).", out, dtype, time.time() - start)
    return out


# ---------------------------------------------------------------------------------------------------------- GGUF

def export_gguf(adapter: str | Path, output: str | Path, *, quant: str = "bf16", model: str | None = None,
                overwrite: bool = False, modelfile: bool = True) -> Path:
    """Write base + adapter as one GGUF file (llama.cpp, Ollama, LM Studio) with the tokenizer and chat template,
    and an Ollama `Modelfile` beside it. quant: f32, f16, bf16, q8_0 or q4_0 (k-quants are llama-quantize's).

    Args:
        adapter: the adapter directory (`output_dir/adapter` of a run, or one `save_adapter` wrote).
        output: the .gguf file to write; it must not exist unless `overwrite`.
        quant: the GGUF type of the weights; a warning names a finer one when this keeps too little of the adapter.
        model: the base model to merge into; the one the adapter's config records when None.
        overwrite: replace `output` if it exists.
        modelfile: also write an Ollama `Modelfile` beside the GGUF (replacing one that is there).

    Returns:
        The path of the written GGUF file.
    """
    quant = check_quant(quant)
    out = check_output(output, overwrite)
    name, source, config = base_config(adapter, model)
    check_architecture(config)
    check_adapter_fits(adapter, config, name)
    start = time.time()
    merged, tok = load_merged(adapter, source, stored_as=quant)
    write_gguf(merged, tok, out, quant, name=f"{Path(name).name}-rloo", overwrite=overwrite)
    if modelfile:
        from ..pipeline import run_metrics

        write_modelfile(tok, out, overwrite=True, system_prompt=run_metrics(adapter).get("system_prompt"))
    log.info("GGUF (%s) written to %s in %.0f s.", quant, out, time.time() - start)
    return out


def write_gguf(model, tokenizer, output: str | Path, quant: str = "bf16", *, name: str = "model",
               overwrite: bool = False) -> Path:
    """A loaded (merged) Llama or Qwen2 model and its tokenizer as a GGUF file, as llama.cpp's
    convert_hf_to_gguf.py writes it: its tensor names, q/k layout, hyper-parameters and vocabulary keys."""
    import gguf

    quant = check_quant(quant)
    out = check_output(output, overwrite)
    arch = check_architecture(model.config)
    with _atomic(out) as tmp:
        writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH[arch.gguf_arch]])
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(name)
        _add_hyperparameters(writer, model.config, arch, quant)
        _add_vocabulary(writer, tokenizer, model.config.vocab_size)
        for tensor_name, data, qtype in _tensors(model, arch, quant):
            writer.add_tensor(tensor_name, data, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return out


_FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "bf16": "MOSTLY_BF16", "q8_0": "MOSTLY_Q8_0",
               "q4_0": "MOSTLY_Q4_0"}


def _add_hyperparameters(writer, config, arch: Architecture, quant: str) -> None:
    import gguf

    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    rope = getattr(config, "rope_parameters", None) or {}
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(heads)
    writer.add_head_count_kv(getattr(config, "num_key_value_heads", None) or heads)
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType[_FILE_TYPES[quant]])
    if getattr(config, "head_dim", None):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if arch.gguf_arch == "LLAMA":
        writer.add_vocab_size(config.vocab_size)
        writer.add_rope_dimension_count(head_dim)


def _add_vocabulary(writer, tok, vocab_size: int) -> None:
    """The byte-level BPE vocabulary as llama.cpp's converter writes it (its `_set_vocab_gpt2`): tokens with their
    types, merges and special ids (gguf.SpecialVocab), whether BOS is added, end of turn, chat template."""
    import gguf

    data = json.loads(tok.backend_tokenizer.to_str())
    model = data.get("model", {})
    if model.get("type") != "BPE" or model.get("byte_fallback") or data.get("decoder", {}).get("type") != "ByteLevel":
        raise ExportError("GGUF export needs a byte-level BPE tokenizer (GPT-2 style, as SmolLM2 and Qwen2 have); "
                          "this one is not. For the kit's default model, `rloo-kit fetch-model` repairs an old build.")
    pre = next((n for n, spec in PRE_TOKENIZERS.items() if _same_pre(data.get("pre_tokenizer"), spec)), None)
    if pre is None:
        raise ExportError(f"Unknown pre-tokenizer {json.dumps(data.get('pre_tokenizer'))[:200]}: GGUF export knows "
                          f"{', '.join(PRE_TOKENIZERS)}. Export --format merged, convert with convert_hf_to_gguf.py.")
    vocab = {i: t for t, i in tok.get_vocab().items()}
    added = tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in vocab:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(vocab[i])
            types.append(gguf.TokenType.NORMAL if i not in added else
                         gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        special = gguf.SpecialVocab(tmp, load_merges=True, n_vocab=len(tokens))
    if not special.merges:
        raise ExportError("This tokenizer has no BPE merges, and llama.cpp cannot load a byte-level vocabulary "
                          "without them: train its merges (tokenizers' BpeTrainer) or use a real model's tokenizer.")
    probe = tok("a", add_special_tokens=True)["input_ids"]
    special.add_special_token = {"bos": tok.bos_token_id is not None and probe[:1] == [tok.bos_token_id],
                                 "eos": tok.eos_token_id is not None and probe[-1:] == [tok.eos_token_id]}
    if (eot := turn_end_token(tok)) is not None:
        special.special_token_ids["eot"] = tok.convert_tokens_to_ids(eot)
    special.chat_template = special.chat_template or tok.chat_template
    special.add_to_gguf(writer, quiet=True)


def _same_pre(a: dict | None, b: dict) -> bool:
    """Two HF pre-tokenizers that split text alike (flags that do not change the split ignored)."""
    keys = ("type", "individual_digits", "add_prefix_space", "use_regex", "pattern", "behavior", "invert")
    if not a or a.get("type") != b.get("type"):
        return False
    if a["type"] == "Sequence":
        return len(a["pretokenizers"]) == len(b["pretokenizers"]) and all(
            _same_pre(x, y) for x, y in zip(a["pretokenizers"], b["pretokenizers"], strict=True))
    return all(a.get(k) == b.get(k) for k in keys if k in b)


def turn_end_token(tok) -> str | None:
    """The token that closes a chat turn in this tokenizer's template (ChatML's <|im_end|>), else its EOS."""
    template = tok.chat_template or ""
    return "<|im_end|>" if "<|im_end|>" in template and "<|im_end|>" in tok.get_vocab() else tok.eos_token


def _tensors(model, arch: Architecture, quant: str) -> Iterator[tuple[str, object, object]]:
    """(GGUF name, data, GGML type) for every weight, named by gguf's own tensor map, with the converter's rules:
    1-D tensors stay F32; q4_0 keeps the token embedding (also the output head when tied) at Q8_0, where llama.cpp's
    quantizer would use Q6_K, which the gguf package cannot write; a row that does not split into blocks is F16."""
    import gguf
    import numpy as np

    config = model.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.gguf_arch], config.num_hidden_layers)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    wanted = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0"}[quant]
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # llama.cpp uses token_embd as the output head when output.weight is absent
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ExportError(f"No GGUF name for tensor '{hf_name}' of {arch.gguf_arch}: this model has layers "
                              "llama.cpp's converter would not expect.")
        data = tensor.detach().float().cpu().numpy()
        if arch.permute_qk and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            data = _permute(data, heads, heads)
        elif arch.permute_qk and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            data = _permute(data, heads, kv_heads)
        qname = "F32" if data.ndim <= 1 else "Q8_0" if quant == "q4_0" and name == "token_embd.weight" else wanted
        qtype = gguf.GGMLQuantizationType[qname]
        try:
            yield name, gguf.quants.quantize(data, qtype), qtype
        except gguf.QuantError:
            log.warning("%s: rows of %d do not split into %s blocks; written as F16.", name, data.shape[-1], qname)
            yield name, data.astype(np.float16), gguf.GGMLQuantizationType.F16


def _permute(weights, n_head: int, n_head_kv: int):
    """llama.cpp's LlamaModel.permute: HF's rotary half-split layout of q/k rows back to interleaved pairs."""
    if n_head_kv != n_head:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


# ------------------------------------------------------------------------------------------------------ Ollama

def modelfile_text(tok, gguf_name: str, system_prompt: str | None = None) -> str:
    """An Ollama Modelfile for a GGUF: the chat template in Ollama's Go-template form (ChatML, with the default
    system message the HF template adds when there is none), the tokens that end a turn as stops, and the system
    prompt the adapter was trained with (`system_prompt`: the pre-flight's short-answer one), which Ollama puts
    before a conversation that has none, as training did."""
    stops = dict.fromkeys(t for t in (turn_end_token(tok), tok.eos_token) if t)
    lines = [f"FROM ./{gguf_name}"]
    if system_prompt:
        lines.append(f'SYSTEM """{system_prompt}"""')
    template = _ollama_chatml(tok)
    if template is None:
        log.warning("The chat template is not ChatML: the Modelfile leaves it to Ollama (read from the GGUF).")
    else:
        lines.append(f'TEMPLATE """{template}"""')
    lines += [f'PARAMETER stop "{s}"' for s in stops]
    return "\n".join(lines) + "\n"


def _ollama_chatml(tok) -> str | None:
    """The HF template as Ollama's Go template when it renders ChatML; None otherwise."""
    def render(messages: list[dict]) -> str:
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    try:
        with_system = render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
        without = render([{"role": "user", "content": "U"}])
    except Exception:  # no template, or one that needs other messages
        return None
    turn = "<|im_start|>{role}\n{content}<|im_end|>\n"
    prompt = "<|im_start|>assistant\n"
    if with_system != turn.format(role="system", content="S") + turn.format(role="user", content="U") + prompt:
        return None
    default = without.removesuffix(turn.format(role="user", content="U") + prompt)
    body = ("{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
            "<|im_start|>assistant\n")
    if not default:
        return body
    m = re.fullmatch(r"<\|im_start\|>system\n(.*)<\|im_end\|>\n", default, re.DOTALL)
    if m is None or '"""' in m.group(1):
        return None
    return ('{{- if or (not .Messages) (ne (index .Messages 0).Role "system") }}<|im_start|>system\n'
            f"{m.group(1)}<|im_end|>\n{{{{ end }}}}" + body)


def write_modelfile(tok, gguf_file: str | Path, *, overwrite: bool = False, system_prompt: str | None = None) -> Path:
    """`Modelfile` beside the GGUF (`ollama create NAME -f Modelfile` in that folder)."""
    gguf_file = Path(gguf_file)
    out = check_output(gguf_file.with_name("Modelfile"), overwrite)
    with _atomic(out) as tmp:
        tmp.write_text(modelfile_text(tok, gguf_file.name, system_prompt), encoding="utf-8")
    return out


# --------------------------------------------------------------------------------------------------- the hub

def push_to_hub(folder: str | Path, repo_id: str, *, private: bool = True, token: str | None = None) -> str:
    """Upload an exported folder (merged model, or a GGUF with its Modelfile) to a Hugging Face model repo, with
    the token in $HF_TOKEN (never written to disk by the kit). Returns the repo's URL.

    Args:
        folder: the exported directory to upload.
        repo_id: the model repo, "user/name"; created if missing.
        private: whether a repo created here is private.
        token: a Hugging Face token with write access; $HF_TOKEN when None.

    Returns:
        The repo's URL.
    """
    from huggingface_hub import HfApi

    token = token or os.environ.get("HF_TOKEN")
    if not token:
        raise ExportError("push_to_hub needs a Hugging Face token with write access in $HF_TOKEN (or token=...).")
    if not Path(folder).is_dir():
        raise ExportError(f"{folder} is not a folder: push the directory that export_merged wrote, or the one "
                          "holding the GGUF and its Modelfile.")
    api = HfApi(token=token)
    url = api.create_repo(repo_id, private=private, exist_ok=True)
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message="Upload from rloo-kit export")
    return str(url)


# ------------------------------------------------------------------------------------- the file, whole or not at all

@contextmanager
def _atomic(out: Path, *, directory: bool = False) -> Iterator[Path]:
    """A temporary path beside `out` (same file system) that replaces `out` only when the block finishes; on any
    error it is removed and `out` is left as it was. A full disk becomes an ExportError saying so."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    remove: Callable[[Path], None] = shutil.rmtree if directory else Path.unlink
    if directory:
        tmp.unlink()
        tmp.mkdir()
    try:
        yield tmp
        if out.is_dir() and not out.is_symlink():
            shutil.rmtree(out)  # --overwrite of a directory: os.replace cannot replace a non-empty one
        os.replace(tmp, out)
    except OSError as e:
        _discard(tmp, remove)
        if e.errno in (28, 122):  # ENOSPC, EDQUOT
            raise ExportError(f"The disk is full writing {out} (nothing was left under that name): free space in "
                              f"{out.parent} or write elsewhere.") from e
        raise
    except BaseException:
        _discard(tmp, remove)
        raise


def _discard(tmp: Path, remove: Callable[[Path], None]) -> None:
    if tmp.exists():
        remove(tmp)


# ---------------------------------------------------------------------------------------------------- verifying

@dataclass
class GGUFCheck:
    """The task's held-out accuracy answered greedily by llama.cpp from the GGUF and by the merged model in PyTorch
    (fp32), and how many of the greedy replies are the same text."""

    task: str
    prompts: int
    max_new_tokens: int
    accuracy_pytorch: float | None
    accuracy_llama_cpp: float | None
    same_replies: int
    accuracy_recorded: float | None = None  # accuracy_after in the metrics.json beside the adapter, if any

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        def fmt(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.3f}"

        recorded = "" if self.accuracy_recorded is None else f" (training recorded {fmt(self.accuracy_recorded)})"
        return (f"held-out {self.task} ({self.prompts} prompts, greedy, {self.max_new_tokens} tokens): accuracy in "
                f"llama.cpp {fmt(self.accuracy_llama_cpp)} · adapter in PyTorch {fmt(self.accuracy_pytorch)}{recorded}"
                f" · same reply on {self.same_replies}/{self.prompts}")


def verify_gguf(gguf_file: str | Path, adapter: str | Path, *, model: str | None = None, task: str | None = None,
                path: str | None = None, n_test: int | None = None, max_new_tokens: int | None = None) -> GGUFCheck:
    """The held-out evaluation of the task the adapter was trained on (from the recipe.yaml and metrics.json
    `rloo-kit train` wrote beside it, unless `task` is given: its file, columns and held-out split), greedy, in
    llama.cpp from the GGUF and in PyTorch.

    Args:
        gguf_file: the GGUF file to check.
        adapter: the adapter it was exported from; merged in PyTorch (fp32) for the comparison.
        model: the adapter's base model; the one the adapter's config records when None.
        task: the task to evaluate on; the one training recorded (else "arithmetic") when None.
        path: the task's file, needed for a "file" task; the recorded one when None.
        n_test: held-out rows to evaluate; the recorded number, else the task's default, when None.
        max_new_tokens: the reply length; the trained completion length (else the task's, else 64) when None.

    Returns:
        A GGUFCheck: accuracy in llama.cpp and in PyTorch, how many replies are the same text, and the accuracy
        training recorded (when `task` is None).
    """
    from ..pipeline import asked_as_trained, run_metrics
    from ..recipes import eval_task_options, trained_task
    from ..rewards import is_correct, row_rules
    from ..tasks import load_task
    from . import llama_cpp

    metrics = run_metrics(adapter)
    older = None if task or trained_task(adapter) else metrics.get("task")  # a run from before recipes were kept
    options = eval_task_options(adapter, task=task or older, n_test=n_test, path=path)
    options.pop("tools", None)  # llama.cpp answers without the kit's tool loop
    task_name = options["name"]
    if task_name == "file" and not options.get("path"):
        raise ExportError("The adapter was trained on a file task: pass its file with --path (path=...).")
    if not llama_cpp.available():
        raise ExportError(f"No llama.cpp runtime to verify with: {llama_cpp.INSTALL_HINT}.")
    t = load_task(**options) if task else asked_as_trained(load_task(**options), adapter)  # as trained
    length = max_new_tokens or metrics.get("max_completion_length") or t.max_completion_length or 64
    t = t.replace(max_completion_length=length)
    _, source, _ = base_config(adapter, model)
    merged, tok = load_merged(adapter, source)
    torch_report = t.evaluate(merged, tok, batch_size=16)
    prompts = list(t.test["prompt"])
    texts = [p if isinstance(p, str) else tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
             for p in prompts]
    replies = [tok.decode(ids, skip_special_tokens=True)
               for ids in llama_cpp.greedy(gguf_file, texts, max_tokens=length)]
    answers = list(t.test["answer"]) if "answer" in t.test.column_names else None
    accuracy = (sum(is_correct(r, a, t.match, prompt=p, **rules)
                    for r, a, rules, p in zip(replies, answers, row_rules(t.test), prompts, strict=True)) / len(prompts)
                if answers else None)
    same = sum(r == row["completion"] for r, row in zip(replies, torch_report.completions, strict=True))
    return GGUFCheck(task_name, len(prompts), length, torch_report.accuracy, accuracy, same,
                     metrics.get("accuracy_after") if task is None else None)
