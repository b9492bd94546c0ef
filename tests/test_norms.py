"""The fused RMSNorm: the same function as transformers' for every class it replaces, bf16 on a CPU only."""

from __future__ import annotations

import copy
import importlib
import io

import pytest
import torch

from rloo_kit.patches.norms import LLAMA_RMS_NORMS, use_fused_rms_norm


def _norm_class(name: str):
    family = name.removesuffix("RMSNorm").lower()
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    return getattr(module, name)


@pytest.mark.parametrize("name", sorted(LLAMA_RMS_NORMS))
def test_fused_norm_computes_what_transformers_does(name):
    torch.manual_seed(0)
    norm = _norm_class(name)(64, eps=1e-5).to(torch.bfloat16)
    torch.nn.init.normal_(norm.weight, mean=1.0, std=0.5)
    x = torch.randn(3, 7, 64, dtype=torch.bfloat16) * 4
    expected = norm(x)
    # the same function without the bf16 roundings (transformers computes it in fp32 whatever the input)
    exact = _norm_class(name).forward(norm.to(torch.float64), x.double()).float()
    norm.to(torch.bfloat16)
    holder = torch.nn.Sequential(norm)
    assert use_fused_rms_norm(holder) == 1 and use_fused_rms_norm(holder) == 0  # idempotent
    assert "forward" in vars(norm)
    fused = norm(x)
    assert fused.dtype == torch.bfloat16
    # one rounding instead of transformers' two: at least as close to the fp64 value, within a bf16 step of it
    assert (fused.float() - exact).abs().mean() <= (expected.float() - exact).abs().mean()
    torch.testing.assert_close(fused.float(), expected.float(), rtol=2 ** -7, atol=1e-2)


def test_other_dtypes_and_norms_run_transformers_own():
    llama = _norm_class("LlamaRMSNorm")
    torch.manual_seed(0)
    norm = llama(64)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(2, 64)
    expected = norm(x)
    use_fused_rms_norm(torch.nn.Sequential(norm))
    torch.testing.assert_close(norm(x), expected, rtol=0, atol=0)  # fp32: the original, bit for bit
    gemma = _norm_class("GemmaRMSNorm")(64)  # (1 + weight): a different function, left alone
    assert use_fused_rms_norm(torch.nn.Sequential(gemma)) == 0 and "forward" not in vars(gemma)


def test_a_copied_or_pickled_model_uses_its_own_norm():
    norm = _norm_class("LlamaRMSNorm")(8).to(torch.bfloat16)
    model = torch.nn.Sequential(norm)
    use_fused_rms_norm(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)  # a whole-model pickle, as some users save
    buffer.seek(0)
    for twin in (copy.deepcopy(model), torch.load(buffer, weights_only=False)):
        with torch.no_grad():
            twin[0].weight.mul_(2)
        x = torch.randn(1, 8, dtype=torch.bfloat16)
        torch.testing.assert_close(twin(x), 2 * model(x))
