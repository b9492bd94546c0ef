"""The Unsloth backend through Unsloth 2026.10's CPU fallback. Importing Unsloth patches transformers
and TRL process-wide, so it runs in a subprocess of its own."""

import os
import subprocess
import sys
import textwrap
from importlib.util import find_spec

import pytest

REQUIRED = os.environ.get("RLOO_KIT_REQUIRE_UNSLOTH") == "1"  # set by `make test`: CI must not skip this


@pytest.mark.unsloth
@pytest.mark.skipif(find_spec("unsloth") is None and not REQUIRED, reason="Unsloth not installed")
def test_unsloth_backend_loads_4bit_and_attaches_lora(tiny_model_dir):
    script = textwrap.dedent(f"""
        import rloo_kit
        model, tok = rloo_kit.load_model({str(tiny_model_dir)!r}, preset="cpu", backend="unsloth",
                                         load_in_4bit=True, max_seq_length=128)
        assert model._rloo_kit_backend == "unsloth"
        model = rloo_kit.attach_lora(model, preset="cpu", r=4, alpha=8)
        trainable = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad)
        assert trainable > 0 and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
        out = model.generate(**tok("What is 1+1?", return_tensors="pt"), max_new_tokens=4, do_sample=False)
        assert out.shape[1] > 0
        print("UNSLOTH_OK", type(model).__name__, trainable)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "UNSLOTH_OK" in done.stdout, (done.stdout + done.stderr)[-4000:]
