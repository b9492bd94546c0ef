"""The one door for patches (`rloo_kit.patches`): importing the kit changes no library; a trainer gets its
patches when it is built, with a banner line and the list on `trainer.rloo_kit_patches`; a patch whose target
is gone or whose library is outside its tested range is skipped with one log line and the run still trains;
one the run cannot go without raises, naming the versions; `rloo-kit doctor` lists them all."""

from __future__ import annotations

import inspect
import json
import logging
import subprocess
import sys
import textwrap

import pytest
import torch

import rloo_kit
from rloo_kit import patches
from rloo_kit.cli import main as cli_main
from rloo_kit.errors import ConfigError
from rloo_kit.patches import PATCHES, PatchError, plan
from rloo_kit.patches import patch as patch_module

from .conftest import REPO
from .helpers import length_reward

# Snapshots the modules (and their classes) of TRL, transformers, PEFT, torch and ipykernel that hold the kit's
# patch targets; with TRL's `_ChunkedLogProbFunction` gone (as if TRL had renamed it) imports every module of
# the kit; then lists what changed in the snapshot, and what anywhere in those libraries is the kit's. Again after
# the kit's CPU log-prob patch (the name back), to show that both lists see a patch when there is one.
SCAN = """
import importlib, json, pkgutil, sys, types
for m in ("trl.trainer.rloo_trainer", "transformers.models.llama.modeling_llama", "transformers.masking_utils",
          "transformers.cache_utils", "peft", "ipykernel.kernelbase", "ipykernel.subshell_manager"):
    importlib.import_module(m)

def entries():
    for name, mod in list(sys.modules.items()):
        if name.split(".")[0] in ("trl", "transformers", "peft", "torch", "ipykernel") and isinstance(
                mod, types.ModuleType):
            for attr, value in list(vars(mod).items()):
                yield f"{name}.{attr}", value
                if isinstance(value, type) and value.__module__ == name:
                    yield from ((f"{name}.{attr}.{a}", v) for a, v in list(vars(value).items()))

def of_kit(obj):
    try:
        return str(getattr(obj, "__module__", None) or "").startswith("rloo_kit")
    except Exception:
        return False

def changes(before):
    now = dict(entries())
    from transformers import AttentionInterface
    return {"changed": sorted(k for k, v in before.items() if now.get(k) is not v and "__" not in k),
            "kit": sorted(k for k, v in now.items() if of_kit(v))
            + [f"attention {k}" for k in AttentionInterface._global_mapping if k.startswith("rloo_kit")]}

import trl.trainer.utils
kernel = trl.trainer.utils._ChunkedLogProbFunction
del trl.trainer.utils._ChunkedLogProbFunction
before = dict(entries())
import rloo_kit
for m in pkgutil.walk_packages(rloo_kit.__path__, "rloo_kit."):
    importlib.import_module(m.name)
at_import = changes(before)
trl.trainer.utils._ChunkedLogProbFunction = kernel
before = dict(entries())
rloo_kit.patches.compat.patch_trl_for_cpu()
print(json.dumps({"at_import": at_import, "patched": changes(before)}))
"""


def test_importing_the_kit_changes_no_library_and_needs_no_private_trl_name():
    done = subprocess.run([sys.executable, "-c", SCAN], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["at_import"] == {"changed": [], "kit": []}
    patched = ["trl.trainer.utils._ChunkedLogProbFunction"]  # the scan does see a patch
    assert found["patched"] == {"changed": patched, "kit": patched}


@pytest.fixture
def said(monkeypatch) -> list[str]:
    """The kit's log lines during the test (the door says each skip once per process: here, afresh)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("rloo_kit")
    logger.addHandler(handler)
    monkeypatch.setattr(patches, "_said", set())
    yield lines
    logger.removeHandler(handler)


def tiny_trainer(tiny_model_dir, tmp_path, overrides, dtype=torch.float32, **kwargs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=dtype)
    data = rloo_kit.arithmetic_task(n_train=8, n_test=2)["train"]
    return rloo_kit.build_trainer(model, tok, data, length_reward, preset="cpu", output_dir=str(tmp_path),
                                  max_steps=1, monitor=False, live=False, **{**overrides, **kwargs})


def test_a_built_trainer_lists_its_patches_in_one_banner_line(tiny_model_dir, tmp_path, cpu_tiny_overrides, said):
    trainer = tiny_trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides)
    assert trainer.rloo_kit_patches == ("contiguous_lm_head", "trl_cpu_logprob", "reuse_scoring_forward",
                                        "task_reward_spread")  # fp32 on a CPU, one process
    (banner,) = [line for line in said if line.startswith("patched ")]
    assert banner.startswith("patched contiguous_lm_head, trl_cpu_logprob, reuse_scoring_forward, task_reward_spread")
    assert f"rloo-kit {rloo_kit.__version__}" in banner
    assert all(f"{dist} {patch_module.version(dist)}" in banner for dist in ("trl", "transformers", "peft", "torch"))
    assert not [line for line in said if line.startswith("patch ")]  # nothing skipped


def renamed_in_trl(monkeypatch, old: str, new: str) -> None:
    """RLOOTrainer as a TRL release that renamed its private method `old` to `new` would be: the method under
    its new name, and TRL's own callers calling that."""
    import trl.trainer.rloo_trainer as module

    cls = module.RLOOTrainer
    for name, fn in list(vars(cls).items()):
        if inspect.isfunction(fn) and name != old and f"self.{old}(" in inspect.getsource(fn):
            source = textwrap.dedent(inspect.getsource(fn)).replace(f"self.{old}(", f"self.{new}(")
            assert "super()" not in source  # a function compiled outside its class has no `super()`
            scope: dict = {}
            exec(source, vars(module), scope)
            monkeypatch.setattr(cls, name, scope[name])
    monkeypatch.setattr(cls, new, vars(cls)[old], raising=False)
    monkeypatch.delattr(cls, old)


def test_a_patch_whose_trl_name_is_gone_is_skipped_and_the_run_trains(tiny_model_dir, tmp_path, cpu_tiny_overrides,
                                                                        monkeypatch, said):
    renamed_in_trl(monkeypatch, "_generate_single_turn", "_sample_one_turn")
    trainer = tiny_trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides, dtype=torch.bfloat16)
    (skip,) = [line for line in said if line.startswith("patch ")]
    assert skip.startswith("patch cpu_sampler skipped: trl.trainer.rloo_trainer.RLOOTrainer._generate_single_turn "
                           "not found in trl 1.15.0")
    assert "cpu_sampler" not in trainer.rloo_kit_patches and "cpu_bf16_step" in trainer.rloo_kit_patches
    assert "1 skipped" in said[-1]  # the banner
    trainer.train()
    assert [h["step"] for h in trainer.state.log_history if "reward" in h] == [1]


def test_a_library_outside_the_tested_range_is_skipped(tiny_model_dir, tmp_path, cpu_tiny_overrides, monkeypatch,
                                                        said):
    real = patch_module.version
    monkeypatch.setattr(patch_module, "version", lambda dist: "0.22.0" if dist == "peft" else real(dist))
    trainer = tiny_trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides)
    assert [line for line in said if line.startswith("patch ")] == [
        "patch reuse_scoring_forward skipped: peft 0.22.0 is outside the ==0.21.* it was tested on; the run takes "
        "the library's own path there."]
    assert "reuse_scoring_forward" not in trainer.rloo_kit_patches
    assert "_get_per_token_logps_and_entropies" not in vars(trainer)  # TRL's own method


@pytest.mark.parametrize("how", ["gone", "newer"])
def test_a_patch_the_run_needs_raises_naming_the_versions(tiny_model_dir, tmp_path, cpu_tiny_overrides, monkeypatch,
                                                          how):
    import trl.trainer.utils

    if how == "gone":
        monkeypatch.delattr(trl.trainer.utils, "_ChunkedLogProbFunction")
        why = "trl.trainer.utils._ChunkedLogProbFunction not found in trl 1.15.0"
    else:
        real = patch_module.version
        monkeypatch.setattr(patch_module, "version", lambda dist: "1.16.0" if dist == "trl" else real(dist))
        why = "trl 1.16.0 is outside the ==1.15.* it was tested on"
    with pytest.raises(PatchError, match="trl_cpu_logprob") as e:
        tiny_trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides)
    assert why in str(e.value) and 'pip install "trl==1.15.*" "torch==2.13.*"' in str(e.value)


def test_patches_can_be_left_out_by_name(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    trainer = tiny_trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides, skip_patches=["reuse_scoring_forward"])
    assert "reuse_scoring_forward" not in trainer.rloo_kit_patches
    with pytest.raises(ConfigError, match="No patch named reuse_forward"):
        tiny_trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides, skip_patches=["reuse_forward"])


def test_doctor_lists_every_patch_and_why(capsys, monkeypatch):
    assert cli_main(["doctor"]) == 0
    out = capsys.readouterr().out
    for p in PATCHES:
        (row,) = [line for line in out.splitlines() if line.split()[:2] == ["patch", p.name]]
        assert row.split()[2] in ("applies:", "not", "skipped:", "blocked:"), row
    real = patch_module.version
    monkeypatch.setattr(patch_module, "version", lambda dist: "1.16.0" if dist == "trl" else real(dist))
    verdicts = {o.patch.name: (o.status, o.reason) for o in plan("cpu", torch.bfloat16)}
    assert verdicts["trl_cpu_logprob"] == ("blocked", "trl 1.16.0 is outside the ==1.15.* it was tested on")
    assert verdicts["cpu_sampler"][0] == "skipped" and verdicts["grouped_attention"][0] == "applies"
    assert {o.patch.name: o.status for o in plan("cuda", torch.bfloat16)}["trl_cpu_logprob"] == "not needed"


def test_the_command_silences_the_kernel_notice_and_import_leaves_loggers_alone():
    code = ("import logging, json, rloo_kit\n"
            "name = 'bitsandbytes.backends.cpu.ops'\n"
            "after_import = logging.getLogger(name).level\n"
            "from rloo_kit.cli import _quiet_libraries\n"
            "_quiet_libraries()\n"
            "print(json.dumps([after_import, logging.getLogger(name).level]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [logging.NOTSET, logging.ERROR], done.stderr[-2000:]
    cli = subprocess.run([sys.executable, "-m", "rloo_kit.cli", "doctor"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)  # doctor imports PEFT, and so bitsandbytes
    assert cli.returncode == 0 and "kernels-community" not in cli.stderr, cli.stderr[-2000:]
    assert "patch bitsandbytes_notice" in cli.stdout and "patch cpu_generation" in cli.stdout


def test_every_patch_is_trusted_on_the_pinned_versions_and_names_real_tests():
    """Fails on a library upgrade that leaves a patch untested: run its tests, then widen its range."""
    assert len({p.name for p in PATCHES}) == len(PATCHES)
    for p in PATCHES:
        assert p.unsupported() is None, (p.name, p.unsupported())
        if p.apply:
            module, _, name = p.apply.partition(":")
            assert callable(getattr(__import__(module, fromlist=[name]), name)), p.apply
        for node in p.tests:
            path, _, test = node.partition("::")
            assert f"def {test}(" in (REPO / path).read_text(), node
