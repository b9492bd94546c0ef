"""Export: merged safetensors and GGUF, proven in real llama.cpp (node-llama-cpp), and refused clearly when it
cannot work. Fast tests on tiny random Qwen2/Llama models with trained BPE tokenizers; `slow` on the default model."""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from rloo_kit import ExportError, ModelSourceError, export_gguf, export_merged
from rloo_kit.cli import main
from rloo_kit.evaluation import generate_ids
from rloo_kit.export import llama_cpp
from rloo_kit.export.convert import (
    check_architecture,
    check_quant,
    load_merged,
    modelfile_text,
    push_to_hub,
    write_gguf,
)
from rloo_kit.models import save_adapter
from rloo_kit.sources import repair_tokenizer, resolve_source
from rloo_kit.testing import build_tiny_bpe_model

PROMPTS = [[{"role": "user", "content": c}] for c in
           ("What is 3+4? Reply with just the number.", "Héllo wörld 🙂, naïve café", "tabs\tand  spaces 12")]
TOKENIZER_TEXTS = ["  héllo   wörld — naïve café 日本語 🙂\n\ttabs  ", "What is 12+7? 123456 x ▁ y", "a\r\nb  \n"]


def needs_llama_cpp():
    if llama_cpp.available():
        return
    if os.environ.get("RLOO_KIT_REQUIRE_LLAMA_CPP"):
        pytest.fail(f"llama.cpp runtime missing under {llama_cpp.runtime_dir()}: {llama_cpp.INSTALL_HINT}")
    pytest.skip("no llama.cpp runtime (make llama-cpp)")


def random_adapter(base_dir, out_dir, *, scale: float = 1.0, seed: int = 1):
    """A LoRA adapter with random, non-zero B (as if trained), B scaled by `scale`."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.mul_(scale)
    return save_adapter(peft, tok, out_dir)


def greedy_reference(model, tok, max_new_tokens: int) -> list[list[int]]:
    """PyTorch's greedy completions, without the end-of-turn token llama.cpp does not return."""
    return [[t for t in r[0] if t != tok.eos_token_id]
            for r in generate_ids(model, tok, PROMPTS, max_new_tokens=max_new_tokens)]


def chat_texts(tok) -> list[str]:
    return [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in PROMPTS]


def as_bf16(model):
    """The merged model with its weights rounded to bf16 (what a bf16 file holds), computing in fp32."""
    return model.to(torch.bfloat16).to(torch.float32)


def prove_in_llama_cpp(tmp_path, adapter, base_dir, *, max_new_tokens: int, quants=("f16", "bf16", "q8_0"),
                       exact=("f16", "bf16"), bar: float = 0.9) -> dict:
    """Export `quants`, run each in llama.cpp; for those in `exact` greedy completions must equal the merged model's
    (f16 against fp32 weights, bf16 against bf16 weights), the others must agree on >= `bar` of teacher-forced next
    tokens (llama.cpp quantizes activations for q8_0 and rounds them to bf16 for bf16 weights)."""
    from transformers import AutoModelForCausalLM

    merged, tok = load_merged(adapter, str(base_dir))
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    assert greedy_reference(merged, tok, max_new_tokens) != greedy_reference(base, tok, max_new_tokens), \
        "the adapter must change greedy answers, or the check proves nothing"
    texts = chat_texts(tok)
    prompt_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    fp32 = greedy_reference(merged, tok, max_new_tokens)
    # the first file end to end; the others from the merged model already in memory (the same writer, less time)
    files = {q: export_gguf(adapter, tmp_path / f"model-{q}.gguf", quant=q, model=str(base_dir)) if i == 0 else
             write_gguf(merged, tok, tmp_path / f"model-{q}.gguf", q) for i, q in enumerate(quants)}
    refs = {"bf16": greedy_reference(as_bf16(merged), tok, max_new_tokens)}  # rounds `merged` in place: last
    figures = {}
    for quant, f in files.items():
        if quant == "f16":
            assert llama_cpp.tokenize(f, texts + TOKENIZER_TEXTS) == \
                [tok(t, add_special_tokens=False)["input_ids"] for t in texts + TOKENIZER_TEXTS]
        ref = refs.get(quant, fp32)
        if quant in exact:
            got = llama_cpp.greedy(f, texts, max_tokens=max_new_tokens)
            figures[quant] = sum(g == r for g, r in zip(got, ref, strict=True))
            assert got == ref, f"{quant}: llama.cpp's greedy completions differ from PyTorch's"
        else:
            top1 = llama_cpp.teacher_forced_top1(f, prompt_ids, ref)
            pairs = [(a, b) for t, r in zip(top1, ref, strict=True) for a, b in zip(t, r, strict=True)]
            figures[quant] = sum(a == b for a, b in pairs) / len(pairs)
            assert figures[quant] >= bar, f"{quant}: teacher-forced top-1 agreement {figures[quant]:.2f} < {bar}"
    return figures


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Tiny random Qwen2 and Llama (hidden 64) with BPE tokenizers, and an adapter that changes each."""
    root = tmp_path_factory.mktemp("export")
    out = {}
    for arch in ("qwen2", "llama"):
        base = build_tiny_bpe_model(root / arch, architecture=arch)
        out[arch] = (base, random_adapter(base, root / f"{arch}-adapter"))
    return out


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_gguf_runs_in_llama_cpp_as_in_pytorch(tiny, tmp_path, arch):
    needs_llama_cpp()
    base, adapter = tiny[arch]
    # a random 64-wide model has near-ties that bf16 or q8_0 activations flip (measured 0.81-0.94 of 48 tokens for
    # q8_0 over inits and adapters): exact greedy for f16 here; bf16 and q8_0 >= 0.9 teacher-forced on the real model
    figures = prove_in_llama_cpp(tmp_path, adapter, base, max_new_tokens=16, exact=("f16",), bar=0.75)
    print(arch, figures)


def test_a_real_gguf_file_is_a_model_source(tiny, tmp_path, monkeypatch):
    """A GGUF file the kit wrote (a trained adapter folded in) comes back through `--model file.gguf`:
    transformers' GGUF reader, de-quantized to safetensors, the same model to within f32 rounding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("RLOO_KIT_CACHE", str(tmp_path / "cache"))
    base, adapter = tiny["qwen2"]
    gguf_file = export_gguf(adapter, tmp_path / "model.gguf", quant="f32", model=str(base))
    source = resolve_source(str(gguf_file))
    assert (Path(source) / "model.safetensors").is_file() and Path(source).is_relative_to(tmp_path / "cache")
    back = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, use_safetensors=True)
    merged, tok = load_merged(adapter, str(base))
    again = AutoTokenizer.from_pretrained(source)
    text = chat_texts(tok)[0]
    ids = tok(text, return_tensors="pt").input_ids
    assert again(text, return_tensors="pt").input_ids.tolist() == ids.tolist()  # the tokenizer survives too
    assert (again.eos_token, again.pad_token) == (tok.eos_token, tok.pad_token)  # the GGUF's own, not its BOS
    with torch.no_grad():
        for p in merged.parameters():  # the safetensors copy is saved in bf16 (as the default model's); not the buffers
            p.copy_(p.to(torch.bfloat16))
        assert torch.allclose(back(ids).logits, merged(ids).logits, atol=1e-4)
    assert resolve_source(str(gguf_file)) == source  # converted once, then read from the cache


def test_a_gguf_transformers_cannot_read_is_refused_in_words(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("RLOO_KIT_CACHE", str(tmp_path / "cache"))
    base, adapter = tiny["llama"]  # its tokenizer has an EOS and no BOS: transformers' GGUF reader fails on that
    gguf_file = export_gguf(adapter, tmp_path / "model.gguf", quant="f32", model=str(base))
    with pytest.raises(ModelSourceError, match="no beginning-of-sequence token.*original directory or hub id"):
        resolve_source(str(gguf_file))
    assert not (tmp_path / "cache" / "gguf" / "model").exists()


def test_merged_model_loads_without_peft(tiny, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, adapter = tiny["qwen2"]
    out = export_merged(adapter, tmp_path / "merged", model=str(base))
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(out)
    assert "<|im_start|>" in tok.chat_template and not hasattr(model, "peft_config")
    merged, _ = load_merged(adapter, str(base))
    ids = tok(chat_texts(tok)[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, merged(ids).logits)


SMALL = 1e-2  # a hundredth of the random "trained" update: on the tiny model bf16 keeps ~0.4 of its effect, f16 ~0.9


def test_an_update_too_small_for_bf16_is_named_with_the_type_that_keeps_it(tiny, tmp_path, caplog):
    base, _ = tiny["qwen2"]
    warnings = {}
    for scale in (SMALL, 1.0):
        adapter = random_adapter(base, tmp_path / f"a{scale}", scale=scale)
        caplog.clear()
        export_gguf(adapter, tmp_path / f"m{scale}.gguf", model=str(base))  # bf16, the default
        warnings[scale] = [m for m in caplog.messages if "of what the adapter changed" in m]
    assert warnings[1.0] == [] and len(warnings[SMALL]) == 1
    assert "Stored as bf16" in warnings[SMALL][0] and "Export with --quant f16" in warnings[SMALL][0]


def test_the_adapter_names_its_base(tiny, tmp_path):
    base, adapter = tiny["llama"]
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base)
    assert export_merged(adapter, tmp_path / "m").is_dir()  # no --model: the recorded base


def test_quant_types_refused_with_what_to_do():
    assert check_quant("Q8_0") == "q8_0"
    with pytest.raises(ExportError, match="llama-quantize"):
        check_quant("q4_k_m")
    with pytest.raises(ExportError, match="Supported: f32, f16, bf16, q8_0, q4_0"):
        check_quant("q9_9")


def test_unsupported_architecture_named(tiny, tmp_path, monkeypatch):
    from transformers import GPT2Config

    with pytest.raises(ExportError, match="supports LlamaForCausalLM, Qwen2ForCausalLM; this model is GPT2LMHeadModel"):
        check_architecture(GPT2Config(architectures=["GPT2LMHeadModel"]))
    base, adapter = tiny["qwen2"]
    other = tmp_path / "gpt2"
    shutil.copytree(base, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"],
                                                   "model_type": "gpt2"}))
    monkeypatch.setattr("rloo_kit.export.convert.load_merged", _no_loading)
    with pytest.raises(ExportError, match="this model is GPT2LMHeadModel"):
        export_gguf(adapter, tmp_path / "x.gguf", model=str(other))


def _no_loading(*a, **k):
    raise AssertionError("the model was loaded before the input was checked")


def test_bad_input_refused_before_loading(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr("rloo_kit.export.convert.load_merged", _no_loading)
    base, adapter = tiny["qwen2"]
    with pytest.raises(ModelSourceError, match="adapter_config.json missing"):
        export_gguf(tmp_path, tmp_path / "x.gguf")
    (tmp_path / "x.gguf").write_text("mine")
    with pytest.raises(ExportError, match="exists: .*--overwrite"):
        export_gguf(adapter, tmp_path / "x.gguf")
    with pytest.raises(ExportError, match="k-quant"):
        export_gguf(adapter, tmp_path / "y.gguf", quant="q4_k_m")
    wider = build_tiny_bpe_model(tmp_path / "wider", architecture="qwen2", hidden=32)
    with pytest.raises(ExportError, match="trained on another model"):
        export_gguf(adapter, tmp_path / "y.gguf", model=str(wider))
    with pytest.raises(ExportError, match="trained on another model"):
        export_merged(adapter, tmp_path / "m", model=str(wider))
    assert (tmp_path / "x.gguf").read_text() == "mine" and not (tmp_path / "y.gguf").exists()


def test_full_disk_leaves_no_file_under_the_name(tiny, tmp_path, monkeypatch):
    import gguf

    base, adapter = tiny["llama"]
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "model.gguf"

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", full)
    with pytest.raises(ExportError, match="disk is full"):
        export_gguf(adapter, target, quant="f16")
    assert list((tmp_path / "out").iterdir()) == []  # neither the file nor its temporary
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "keep").write_text("old")
    monkeypatch.setattr("transformers.PreTrainedModel.save_pretrained", full)
    with pytest.raises(ExportError, match="disk is full"):
        export_merged(adapter, tmp_path / "m", overwrite=True)
    assert (tmp_path / "m" / "keep").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_the_output_folder_is_made_as_train_makes_its_own(tiny, tmp_path):
    base, adapter = tiny["qwen2"]
    assert export_gguf(adapter, tmp_path / "new" / "deeper" / "m.gguf", model=str(base)).is_file()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ExportError, match="is not a folder"):
        export_gguf(adapter, tmp_path / "a-file" / "m.gguf", model=str(base))
    with pytest.raises(ExportError, match="is not a folder"):
        export_gguf(adapter, tmp_path / "a-file" / "sub" / "m.gguf", model=str(base))
    with pytest.raises(ExportError):  # refused before writing: no folder made for nothing
        export_gguf(adapter, tmp_path / "refused" / "m.gguf", model=str(base), quant="q4_k_m")
    assert not (tmp_path / "refused").exists()


def test_overwrite_replaces(tiny, tmp_path):
    base, adapter = tiny["llama"]
    target = tmp_path / "model.gguf"
    target.write_text("old")
    export_gguf(adapter, target, quant="q4_0", overwrite=True)
    assert target.read_bytes()[:4] == b"GGUF"


def test_modelfile_matches_the_tokenizer(tiny, tmp_path):
    from transformers import AutoTokenizer

    base, adapter = tiny["qwen2"]
    export_gguf(adapter, tmp_path / "m.gguf", quant="q8_0")
    text = (tmp_path / "Modelfile").read_text()
    tok = AutoTokenizer.from_pretrained(base)
    assert text.startswith("FROM ./m.gguf\n")
    assert 'PARAMETER stop "<|im_end|>"' in text and tok.eos_token == "<|im_end|>"
    template = text.split('TEMPLATE """', 1)[1].split('"""', 1)[0]
    # rendered by hand as Ollama would for one user turn: the same text as the tokenizer's own template
    rendered = template.replace("{{- range .Messages }}", "").replace("{{ .Role }}", "user") \
        .replace("{{ .Content }}", "Hi").replace("{{ end }}", "")
    assert rendered == tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                               add_generation_prompt=True)


def test_modelfile_keeps_a_default_system_message(tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny["llama"][0])
    tok.chat_template = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nBe brief.<|im_end|>\n{% endif %}"
                         + tok.chat_template)
    text = modelfile_text(tok, "m.gguf")
    assert '(ne (index .Messages 0).Role "system") }}<|im_start|>system\nBe brief.<|im_end|>\n{{ end }}' in text
    assert "SYSTEM" not in text  # ... and an adapter trained with the pre-flight's short-answer prompt is asked so
    told = "Answer in one short sentence."
    assert f'SYSTEM """{told}"""' in modelfile_text(tok, "m.gguf", told)
    tok.chat_template = "{{ messages[0]['content'] }}"
    assert "TEMPLATE" not in modelfile_text(tok, "m.gguf") and 'PARAMETER stop "<|im_end|>"' in modelfile_text(
        tok, "m.gguf")


def test_repair_makes_the_tokenizer_byte_level_and_round_trip(tiny, tmp_path):
    from transformers import AutoTokenizer

    broken = tmp_path / "tok"
    AutoTokenizer.from_pretrained(tiny["llama"][0]).save_pretrained(broken)
    data = json.loads((broken / "tokenizer.json").read_text())
    data["model"]["byte_fallback"] = True  # as transformers' GGUF loader wrote it
    data["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}
    (broken / "tokenizer.json").write_text(json.dumps(data))
    assert repair_tokenizer(broken, "smollm") and not repair_tokenizer(broken, "smollm")  # idempotent
    fixed = json.loads((broken / "tokenizer.json").read_text())
    assert fixed["model"]["byte_fallback"] is False and fixed["decoder"]["type"] == "ByteLevel"
    tok = AutoTokenizer.from_pretrained(broken)
    for text in TOKENIZER_TEXTS:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_push_to_hub_calls_the_hub_with_the_token(tmp_path, monkeypatch):
    calls = []

    class FakeApi:
        def __init__(self, token):
            calls.append(("token", token))

        def create_repo(self, repo_id, private, exist_ok):
            calls.append(("create", repo_id, private))
            return f"https://hub.example/{repo_id}"

        def upload_folder(self, folder_path, repo_id, commit_message):
            calls.append(("upload", folder_path, repo_id))

    monkeypatch.setattr("huggingface_hub.HfApi", FakeApi)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(ExportError, match="HF_TOKEN"):
        push_to_hub(tmp_path, "me/model")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert push_to_hub(tmp_path, "me/model").endswith("me/model")
    assert calls == [("token", "hf_secret"), ("create", "me/model", True), ("upload", str(tmp_path), "me/model")]


def test_cli_export_and_verify(tiny, tmp_path, capsys):
    needs_llama_cpp()
    base, adapter = tiny["qwen2"]
    assert main(["export", "--adapter", str(adapter), "--format", "gguf", "--quant", "q6_k",
                 "--output", str(tmp_path / "a.gguf")]) == 2
    assert "llama-quantize" in capsys.readouterr().err
    assert main(["export", "--adapter", str(adapter), "--quant", "f16", "--output", str(tmp_path / "a.gguf"),
                 "--verify", "--task", "arithmetic", "--n-test", "6", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "accuracy in llama.cpp" in out and "adapter in PyTorch" in out and "same reply on 6/6" in out
    assert main(["export", "--adapter", str(adapter), "--format", "merged", "--output", str(tmp_path / "m")]) == 0


# ------------------------------------------------------------------------------------- the real default model

@pytest.mark.slow
def test_default_model_tokenizer_round_trips(default_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(default_model_dir)
    data = json.loads(tok.backend_tokenizer.to_str())
    assert data["model"]["byte_fallback"] is False and data["decoder"]["type"] == "ByteLevel"
    for text in TOKENIZER_TEXTS:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


@pytest.mark.slow
def test_default_model_gguf_in_llama_cpp(default_model_dir, tmp_path):
    needs_llama_cpp()
    adapter = random_adapter(default_model_dir, tmp_path / "adapter", scale=0.1)
    # bf16 by teacher-forced agreement, not exact greedy: on an Intel Xeon with AVX512F and no bf16 unit llama.cpp's
    # token-by-token decode flipped a near-tie at token 21 of 24 of one prompt, where its batched pass over the same
    # tokens agreed on every one (1.0); the AMD EPYC with AVX512-BF16 had matched exactly
    figures = prove_in_llama_cpp(tmp_path, adapter, default_model_dir, max_new_tokens=24, exact=("f16",))
    print("SmolLM2-135M:", figures)
