"""The CPU fast path: the log-prob shim against plain PyTorch (values and gradients, fp32 and bf16),
the bf16/fp32 rule from CPU flags, and TRL's scoring forward reused by the loss. Behaviour only,
never timing (benchmarks/roofline.py and benchmarks/cpu_speed.py measure speed)."""

from __future__ import annotations

import math

import pytest
import torch

from rloo_kit.hardware import CPU_DTYPE_ENV, CpuCompute, bf16_speed, bf16_speed_summary, cpu_compute, worth_timing_bf16
from rloo_kit.patches import compat

from .conftest import REPO
from .helpers import plain_trainer

OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


def reference(hidden, weight, bias, targets, temperature, softcap, logit_scale):
    """Full logits in fp64: what the shim must equal."""
    z = torch.nn.functional.linear(hidden.double(), weight.double(), None if bias is None else bias.double())
    z = z * logit_scale
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    z = z / temperature
    logp = torch.log_softmax(z, dim=-1)
    return (logp.gather(-1, targets[:, None])[:, 0], -(logp.exp() * logp).sum(-1), torch.logsumexp(2 * logp, -1),
            z.mean(-1), z.argmax(-1) == targets)


def inputs(dtype, n=37, h=24, v=301, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(n, h, generator=g) * 2).to(dtype).requires_grad_()
    weight = (torch.randn(v, h, generator=g) / h**0.5).to(dtype).requires_grad_()
    b = (torch.randn(v, generator=g) * 0.1).to(dtype).requires_grad_() if bias else None
    return hidden, weight, b, torch.randint(0, v, (n,), generator=g)


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(compat, "_TOKEN_CHUNK", 16)  # several chunks, and a ragged last one


@pytest.mark.parametrize("temperature, softcap, logit_scale, bias", [
    (1.0, None, 1.0, False), (0.7, None, 1.0, True), (1.3, 30.0, 0.5, False)])
def test_fp32_values_and_gradients_match_plain_pytorch(temperature, softcap, logit_scale, bias):
    hidden, weight, b, targets = inputs(torch.float32, bias=bias)
    got = compat.TorchChunkedLogProb.apply(hidden, weight, b, targets, temperature, 4096, softcap, logit_scale,
                                           OUTPUTS)
    want = reference(hidden, weight, b, targets, temperature, softcap, logit_scale)
    for g, w in zip(got[:4], want[:4], strict=True):
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[4], want[4])
    assert got[0].dtype == torch.float32 and got[4].dtype == torch.bool
    # gradients of a loss that uses both differentiable outputs, against autograd through fp64
    gl, ge = torch.randn(len(targets)), torch.randn(len(targets))
    params = [hidden, weight] + ([b] if bias else [])
    mine = torch.autograd.grad((got[0] * gl).sum() + (got[1] * ge).sum(), params)
    theirs = torch.autograd.grad((want[0] * gl.double()).sum() + (want[1] * ge.double()).sum(), params)
    for m, t in zip(mine, theirs, strict=True):
        assert m.dtype == torch.float32
        torch.testing.assert_close(m.double(), t.double(), rtol=1e-4, atol=1e-5)


def test_gradient_of_log_probs_alone_and_of_entropy_alone():
    hidden, weight, _, targets = inputs(torch.float32)
    want = reference(hidden, weight, None, targets, 1.0, None, 1.0)
    for k in (0, 1):
        got = compat.TorchChunkedLogProb.apply(hidden, weight, None, targets, 1.0, 4096, None, 1.0,
                                               ("log_probs", "entropy"))
        mine = torch.autograd.grad(got[k].sum(), [hidden, weight])
        theirs = torch.autograd.grad(want[k].sum(), [hidden, weight], retain_graph=True)
        for m, t in zip(mine, theirs, strict=True):
            torch.testing.assert_close(m.double(), t.double(), rtol=1e-4, atol=1e-5)


def test_bf16_path_projects_in_bf16_and_reduces_in_fp32():
    hidden, weight, _, targets = inputs(torch.bfloat16, v=2003)
    got = compat.TorchChunkedLogProb.apply(hidden, weight, None, targets, 1.0, 4096, None, 1.0, OUTPUTS)
    assert got[0].dtype == torch.float32  # statistics in fp32 whatever the projection's dtype
    # exact for the bf16 inputs up to the bf16 rounding of the projection itself
    want = reference(hidden, weight, None, targets, 1.0, None, 1.0)
    torch.testing.assert_close(got[0].double(), want[0], rtol=0, atol=0.05)
    torch.testing.assert_close(got[1].double(), want[1], rtol=0, atol=0.05)
    gl = torch.randn(len(targets))
    mine = torch.autograd.grad((got[0] * gl).sum(), [hidden, weight])
    theirs = torch.autograd.grad((want[0] * gl.double()).sum(), [hidden, weight])
    for m, t in zip(mine, theirs, strict=True):
        assert m.dtype == torch.bfloat16
        rel = (m.double() - t.double()).norm() / t.double().norm()
        assert rel < 2e-2, rel


def test_reused_tiles_serve_calls_of_every_size_in_turn():
    """The head's scratch tiles outlive a call: a smaller call after a larger one (and another vocabulary) reads
    only its own part of them, in forward and in backward."""
    for n, v, dtype in ((40, 2003, torch.bfloat16), (5, 301, torch.float32), (37, 301, torch.bfloat16),
                        (3, 2003, torch.float32)):
        hidden, weight, _, targets = inputs(dtype, n=n, v=v, seed=n)
        got = compat.TorchChunkedLogProb.apply(hidden, weight, None, targets, 1.0, 4096, None, 1.0, OUTPUTS)
        want = reference(hidden, weight, None, targets, 1.0, None, 1.0)
        tol = 0.05 if dtype == torch.bfloat16 else 1e-5
        for g, w in zip(got[:4], want[:4], strict=True):
            torch.testing.assert_close(g.double(), w, rtol=0, atol=tol)
        (mine,) = torch.autograd.grad(got[0].sum(), [hidden])
        (theirs,) = torch.autograd.grad(want[0].sum(), [hidden])
        rel = (mine.double() - theirs.double()).norm() / theirs.double().norm()
        assert rel < (2e-2 if dtype == torch.bfloat16 else 1e-5), (n, v, rel)


def test_frozen_weight_gets_no_gradient_and_no_weight_product():
    hidden, weight, _, targets = inputs(torch.float32)
    weight = weight.detach()  # LoRA: the tied embedding / LM head is frozen
    got = compat.TorchChunkedLogProb.apply(hidden, weight, None, targets, 1.0, 4096, None, 1.0, ("log_probs",))
    assert got[1] is None and got[2] is None
    (g,) = torch.autograd.grad(got[0].sum(), [hidden])
    want = reference(hidden, weight, None, targets, 1.0, None, 1.0)
    (g_ref,) = torch.autograd.grad(want[0].sum(), [hidden])
    torch.testing.assert_close(g.double(), g_ref.double(), rtol=1e-4, atol=1e-5)


def test_benchmarks_legacy_path_computes_what_the_kits_does(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from legacy import LegacyChunkedLogProb

    hidden, weight, _, targets = inputs(torch.float32)
    new = compat.TorchChunkedLogProb.apply(hidden, weight, None, targets, 1.0, 4096, None, 1.0, OUTPUTS)
    old = LegacyChunkedLogProb.apply(hidden, weight, None, targets, 1.0, 4096, None, 1.0, OUTPUTS)
    for a, b in zip(new, old, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_no_tokens_gives_empty_outputs_and_zero_gradient():
    hidden, weight, _, targets = inputs(torch.float32, n=0)
    got = compat.TorchChunkedLogProb.apply(hidden, weight, None, targets, 1.0, 4096, None, 1.0, ("entropy",))
    assert got[0].shape == (0,) and got[1].shape == (0,)
    (g,) = torch.autograd.grad(got[0].sum() + got[1].sum(), [weight], allow_unused=True)
    assert g is None or not g.any()


# ------------------------------------------------------------------------------------ bf16 or fp32

@pytest.mark.parametrize("flags, bf16, says", [
    (["fpu", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"], True, "AMX-BF16"),
    (["avx2", "avx512f", "avx512_bf16"], True, "AVX512-BF16 (no AMX)"),
    (["avx2", "avx512f", "avx512_vnni"], False, "no AVX512-BF16"),
    (["avx2", "fma"], False, "no AVX512-BF16"),
    ([], False, "no AVX512-BF16"),
])
def test_cpu_dtype_follows_the_flags(flags, bf16, says):
    choice = cpu_compute(flags=flags, env="auto")
    assert isinstance(choice, CpuCompute)
    assert choice.bf16 is bf16 and says in choice.reason
    assert choice.dtype == (torch.bfloat16 if bf16 else torch.float32)
    assert choice.describe().startswith("bf16" if bf16 else "fp32")


def test_environment_overrides_the_flags(monkeypatch):
    assert not cpu_compute(flags=["avx512_bf16", "amx_bf16"], env="fp32").bf16
    assert cpu_compute(flags=["avx2"], env="bf16").bf16
    monkeypatch.setenv(CPU_DTYPE_ENV, "fp32")
    choice = cpu_compute(flags=["amx_bf16"])
    assert not choice.bf16 and CPU_DTYPE_ENV in choice.reason


def test_failed_quick_check_falls_back_to_fp32(monkeypatch):
    from rloo_kit import hardware

    monkeypatch.setattr(hardware, "_bf16_matmul_ok", lambda: False)
    choice = cpu_compute(flags=["avx512_bf16"], env="auto")
    assert not choice.bf16 and "quick check" in choice.reason


def test_doctor_names_fp32_where_bf16_was_chosen_and_measured_slower():
    bf16 = cpu_compute(flags=["avx512_bf16"], env="bf16")
    fp32 = cpu_compute(flags=["avx2"], env="auto")
    assert f"{CPU_DTYPE_ENV}=fp32" in bf16_speed_summary(bf16, 0.53)  # an Intel Xeon with AVX512-BF16, no AMX
    assert "0.53x fp32's speed" in bf16_speed_summary(bf16, 0.53)
    assert CPU_DTYPE_ENV not in bf16_speed_summary(bf16, 4.0)  # an AMD EPYC's
    assert CPU_DTYPE_ENV not in bf16_speed_summary(fp32, 0.3)  # already fp32
    assert "not timed" in bf16_speed_summary(fp32, None)
    assert not worth_timing_bf16(fp32)  # emulated bf16: the timing would be slow and tell nothing new
    assert worth_timing_bf16(bf16) and worth_timing_bf16(cpu_compute(flags=["avx512_bf16"], env="fp32"))
    speed = bf16_speed(m=64, k=64, n=64, repeats=1)
    assert math.isfinite(speed) and speed > 0


# ------------------------------------------------------------------------ the reused policy forward

def _tiny_trainer(tiny_model_dir, tmp_path, overrides, reuse):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)

    def short(completions, **_):
        return [-float(len(c[0]["content"] if isinstance(c, list) else c)) for c in completions]
    # Adam's epsilon at 1e-4: with the default 1e-8 an element whose gradient is float noise (~1e-9) takes a
    # full step of either sign, and which way it goes depends on the order of float sums
    overrides = {**overrides, "adam_epsilon": 1e-4}
    trainer = plain_trainer(model, tok, tmp_path / ("reuse" if reuse else "plain"), overrides, short)
    if reuse:
        assert compat.reuse_policy_forward(trainer)
    return trainer


def test_reused_forward_trains_exactly_like_trl(tiny_model_dir, tmp_path, cpu_tiny_overrides, monkeypatch):
    runs = {}
    scored = compat._ChunkedLogProb.apply
    for reuse in (False, True):
        trainer = _tiny_trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides, reuse)
        heads = []  # one LM-head pass per scoring forward
        monkeypatch.setattr(compat._ChunkedLogProb, "apply", lambda *a, _heads=heads: _heads.append(1) or scored(*a))
        trainer.train()
        logs = [h for h in trainer.state.log_history if "reward" in h]
        lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
        runs[reuse] = (logs, lora, len(heads))
    (plain_logs, plain_lora, plain_passes), (fast_logs, fast_lora, fast_passes) = runs[False], runs[True]
    assert (plain_passes, fast_passes) == (3 * 2, 2 * 2)  # per step: old + ref + loss, then ref + loss
    for a, b in zip(plain_logs, fast_logs, strict=True):
        for key in ("reward", "kl", "entropy", "completions/mean_length", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
        assert b["clip_ratio/region_mean"] == 0.0
    for name, p in plain_lora.items():  # 1% of an Adam step (lr 1e-2)
        torch.testing.assert_close(fast_lora[name], p, rtol=0, atol=1e-4)
    assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in fast_lora.items() if "lora_B" in n)


def test_reuse_is_refused_where_it_would_change_training(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    for extra in (dict(num_iterations=2), dict(gradient_accumulation_steps=2), dict(gradient_checkpointing=True)):
        trainer = _tiny_trainer(tiny_model_dir, tmp_path, {**cpu_tiny_overrides, **extra}, reuse=False)
        assert not compat.reuse_policy_forward(trainer), extra
