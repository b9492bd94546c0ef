"""The one door for patches (`rloo_kit.patches`): importing the kit changes no library; a trainer gets its
patches when it is built, with a banner line and the list on `trainer.rloo_kit_patches`; a patch whose target
is gone or whose library is outside its tested range is skipped with one log line and the run still trains;
one the run cannot go without raises, naming the versions; `rloo-kit doctor` lists them all."""

from __future__ import annotations

import ast
import inspect
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

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
# the kit's CPU log-prob patch (the name back), to show that both lists see a patch when there is one. The loggers
# of those libraries, accelerate's and bitsandbytes' (level, on/off, propagation, handlers, filters) and
# transformers' progress bars likewise: as they were, and a logger first made during the kit's import as made.
SCAN = """
import importlib, json, logging, pkgutil, sys, types
for m in ("trl.trainer.rloo_trainer", "transformers.models.llama.modeling_llama", "transformers.masking_utils",
          "transformers.cache_utils", "peft", "ipykernel.kernelbase", "ipykernel.subshell_manager", "accelerate",
          "bitsandbytes"):
    importlib.import_module(m)

LIBRARIES = ("trl", "transformers", "peft", "torch", "accelerate", "bitsandbytes", "ipykernel")
FRESH = [logging.NOTSET, False, True, [], []]

def loggers():
    from transformers.utils import logging as hf_logging
    found = {"transformers progress bars": hf_logging.is_progress_bar_enabled()}
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.split(".")[0] in LIBRARIES and isinstance(logger, logging.Logger):
            found[name] = [logger.level, logger.disabled, logger.propagate, [id(h) for h in logger.handlers],
                           [id(f) for f in logger.filters]]
    return found

def loggers_changed(before):
    return sorted(k for k, v in loggers().items() if v != before.get(k, FRESH))

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
before, levels = dict(entries()), loggers()
import rloo_kit
for m in pkgutil.walk_packages(rloo_kit.__path__, "rloo_kit."):
    importlib.import_module(m.name)
at_import = {**changes(before), "loggers": loggers_changed(levels)}
trl.trainer.utils._ChunkedLogProbFunction = kernel
before, levels = dict(entries()), loggers()
rloo_kit.patches.compat.patch_trl_for_cpu()
rloo_kit.patches.private.silence_kernel_notice()
print(json.dumps({"at_import": at_import, "patched": {**changes(before), "loggers": loggers_changed(levels)}}))
"""


def test_importing_the_kit_changes_no_library_and_needs_no_private_trl_name():
    done = subprocess.run([sys.executable, "-c", SCAN], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["at_import"] == {"changed": [], "kit": [], "loggers": []}
    patched = ["trl.trainer.utils._ChunkedLogProbFunction"]  # the scan does see a patch, and a logger set
    assert found["patched"] == {"changed": patched, "kit": patched, "loggers": ["bitsandbytes.backends.cpu.ops"]}


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
    assert trainer.rloo_kit_patches == ("contiguous_lm_head", "grouped_attention", "trl_cpu_logprob",
                                        "reuse_scoring_forward", "cpu_sampler", "task_reward_spread")  # fp32, CPU
    (banner,) = [line for line in said if line.startswith("patched ")]
    assert banner.startswith("patched contiguous_lm_head, grouped_attention, trl_cpu_logprob, reuse_scoring_forward, "
                             "cpu_sampler, task_reward_spread")
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
        f"patch {name} skipped: peft 0.22.0 is outside the ==0.21.* it was tested on; the run takes the library's "
        "own path there." for name in ("reuse_scoring_forward", "cpu_sampler")]
    assert not {"reuse_scoring_forward", "cpu_sampler"} & set(trainer.rloo_kit_patches)
    assert not {"_get_per_token_logps_and_entropies", "_generate_single_turn"} & set(vars(trainer))  # TRL's own


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


# ----------------------------------------------------------------------------- the door is the only door

LIBRARIES = ("trl", "transformers", "peft", "torch", "accelerate", "ipykernel", "bitsandbytes")
PACKAGE, DOOR = REPO / "rloo_kit", REPO / "rloo_kit" / "patches"
# argparse's parser internals (cli, recipes): the standard library's, versioned with Python, which no patch pins
STDLIB_PRIVATE = frozenset({"_actions", "_SubParsersAction"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def kit_private_names() -> set[str]:
    """The `_name`s the kit defines anywhere (functions, classes, globals, what its classes set on self or cls,
    the `_rloo_kit*` marks it leaves on other objects), less the names the door knows as another library's."""
    own: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                own.add(node.attr)
            elif isinstance(node, ast.alias):
                own.add(node.asname or node.name)
            elif isinstance(node, (ast.Attribute, ast.Constant)):
                name = node.attr if isinstance(node, ast.Attribute) else node.value
                if isinstance(name, str) and name.startswith("_rloo_kit"):
                    own.add(name)
    foreign = {t.split("().")[-1].rsplit(".", 1)[-1] for p in PATCHES for t in p.targets}
    return {n for n in own if _private(n)} - foreign


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _instance_dict(node: ast.expr) -> bool:
    """`x.__dict__` or `vars(x)`: where a private attribute can be reached by a string."""
    return ((isinstance(node, ast.Attribute) and node.attr == "__dict__")
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"))


def foreign_touches(path: Path, own: set[str]) -> list[str]:
    """Where `path` reads or writes another library's private attribute, changes one of its modules or classes,
    or takes one of its loggers: 'path:line: what', for each."""
    tree = ast.parse(path.read_text())
    libraries = set()  # the names this module binds to the libraries' modules, classes and functions
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            libraries |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in LIBRARIES}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in LIBRARIES:
            libraries |= {a.asname or a.name for a in node.names}

    def foreign(name: object) -> bool:
        return isinstance(name, str) and _private(name) and name not in own and name not in STDLIB_PRIVATE

    def literal(node: ast.expr) -> object:
        return node.value if isinstance(node, ast.Constant) else None

    found, kept = [], set()  # kept: `self._x` where the kit's class itself defines `_x` (a library may use it too)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        mine = [n for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id in ("self", "cls")]
        defined = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        defined |= {t.id for n in cls.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        defined |= {n.attr for n in mine if isinstance(n.ctx, ast.Store)}
        kept |= {id(n) for n in mine if n.attr in defined}
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Attribute) and foreign(node.attr) and id(node) not in kept:
            what = f"{'reads' if isinstance(node.ctx, ast.Load) else 'writes'} .{node.attr}"
        elif isinstance(node, ast.Call):
            func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            args = node.args
            if func in ("getattr", "setattr", "hasattr", "delattr") and len(args) >= 2 and foreign(literal(args[1])):
                what = f"{func}(..., {literal(args[1])!r})"
            elif func in ("setattr", "delattr") and args and _root(args[0]) in libraries:
                what = f"{func} on {_root(args[0])}, a library's"
            elif (func == "getLogger" and args and isinstance(literal(args[0]), str)
                  and literal(args[0]).split(".")[0] in LIBRARIES):
                what = f"the logger {literal(args[0])!r}"
            elif (isinstance(node.func, ast.Attribute) and _instance_dict(node.func.value) and args
                  and foreign(literal(args[0]))):
                what = f"the instance dict's {literal(args[0])!r}"
        elif isinstance(node, ast.Subscript) and _instance_dict(node.value) and foreign(literal(node.slice)):
            what = f"the instance dict's {literal(node.slice)!r}"
        elif (isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn))
              and _instance_dict(node.comparators[0]) and foreign(literal(node.left))):
            what = f"the instance dict's {literal(node.left)!r}"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            changed = [t for t in targets if isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in libraries]
            what = f"changes {ast.unparse(changed[0])}, a library's" if changed else None
        if what:
            found.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{node.lineno}: {what}")
    return found


def test_no_module_outside_the_door_touches_another_librarys_private_parts():
    """Every private attribute of TRL, transformers, PEFT, torch, accelerate, ipykernel or bitsandbytes that the
    kit reads or writes, and every change to their modules, classes and loggers, is made in rloo_kit/patches/
    (a registered patch, or an accessor of `patches.private`); a `_name` the kit does not define is another's."""
    own = kit_private_names()
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if not path.is_relative_to(DOOR)
             for hit in foreign_touches(path, own)]
    assert not found, "outside rloo_kit/patches/:\n" + "\n".join(found)


PLANTED = '''
import logging
import torch
from transformers import Trainer


class Kept:
    def __init__(self):
        self._start = self._generate()

    def _generate(self):
        return 0


def resume(trainer, model, path, fn):
    trainer._load_from_checkpoint(path)
    trainer._metrics["train"]["gold"].append(1.0)
    setattr(trainer, "_logs", {})
    vars(trainer.args)["_setup_devices"] = None
    torch.multinomial = None
    setattr(Trainer, "log", None)
    logging.getLogger("transformers.trainer").setLevel(logging.ERROR)
    model._rloo_kit_backend, kept = "transformers", Kept()
    return kept._start, getattr(fn, "_rloo_kit_safe", False), "_rloo_kit_packed" in vars(model)
'''


def test_the_door_check_finds_a_planted_touch(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    # `Kept` is the kit's, as if in a kit module; its `_generate` is its own, though RLOOTrainer has one too
    found = foreign_touches(planted, kit_private_names() | {"_start"})
    body = PLANTED.splitlines().index("def resume(trainer, model, path, fn):") + 2  # its first line, from 1
    # each of the seven planted touches, once, and nothing of the kit's own below them
    assert len(found) == 7 and {int(hit.split(":")[1]) for hit in found} == set(range(body, body + 7))
    assert sorted(hit.split(": ", 1)[1] for hit in found) == sorted([
        "reads ._load_from_checkpoint", "reads ._metrics", "setattr(..., '_logs')",
        "the instance dict's '_setup_devices'", "changes torch.multinomial, a library's",
        "setattr on Trainer, a library's", "the logger 'transformers.trainer'"])


def test_the_accessors_fall_back_where_the_door_says_no(monkeypatch, said):
    """A TRL outside the tested range: the live view shows no completions rather than read TRL's `_logs`, and the
    gold monitor's measurement becomes a log entry of its own rather than go into TRL's `_metrics`."""
    import collections
    import types

    from datasets import Dataset
    from transformers import TrainerState

    from rloo_kit.notebook.live import LiveView
    from rloo_kit.reward_models import GOLD_KEY, GoldMonitor

    logs = {"prompt": ["p", "p"], "completion": ["a", "b"], "rewards": {"r": [1.0, 0.0]}, "advantages": [1.0, -1.0]}
    metrics = {"train": collections.defaultdict(list)}
    trainer = types.SimpleNamespace(_logs=logs, _metrics=metrics, reward_weights=torch.tensor([1.0]), model=None,
                                    processing_class=None)
    view = LiveView(trainer)
    gold = GoldMonitor(lambda prompts, completions, **kw: [1.0], Dataset.from_dict({"prompt": ["q"]}), every=1)
    gold.trainer = trainer
    monkeypatch.setattr(gold, "measure", lambda model, tokenizer: {GOLD_KEY: 0.5})
    state = TrainerState(global_step=1, max_steps=2)
    assert [c["reward"] for c in view.latest_groups()[0]["completions"]] == [1.0, 0.0]  # trusted: TRL's own
    gold.on_step_end(None, state, None)
    assert metrics["train"][GOLD_KEY] == [0.5] and not state.log_history

    real = patch_module.version
    monkeypatch.setattr(patch_module, "version", lambda dist: "1.16.0" if dist == "trl" else real(dist))
    assert view.latest_groups() == []
    gold.on_step_end(None, state, None)
    assert metrics["train"][GOLD_KEY] == [0.5] and state.log_history == [{"step": 1, GOLD_KEY: 0.5}]
    assert [line for line in said if line.startswith("patch ")] == [
        f"patch {name} skipped: trl 1.16.0 is outside the ==1.15.* it was tested on; the library's own behaviour "
        "is kept." for name in ("trl_logs", "trl_metrics")]
