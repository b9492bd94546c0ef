import re
import subprocess
import sys

import tomllib
import yaml

from rloo_kit.cli import main

from .conftest import REPO


def test_environment_yml_is_valid_and_installs_the_package():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    assert env["name"] == "rloo-kit" and "conda-forge" in env["channels"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(p.startswith("-e .") for p in pip)


def test_pyproject_script_extras_and_unsloth_compatible_ranges():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["scripts"]["rloo-kit"] == "rloo_kit.cli:main"
    assert {"unsloth", "notebooks", "dev"} <= set(meta["optional-dependencies"])
    deps = {re.split(r"[<>=!; ]", d)[0]: d for d in meta["dependencies"]}
    assert "<=5.17.0" in deps["transformers"] and "<=1.15.0" in deps["trl"] and "<5" in deps["datasets"]


def test_readme_names_the_two_commands_first():
    readme = (REPO / "README.md").read_text()
    first_block = readme.split("```")[1]
    assert re.findall(r"^make (\w+)", first_block, re.M) == ["demo", "test"]
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_doctor(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for field in ("trl", "device", "hub reachable", "default model", "preset it would pick"):
        assert field in out


def test_presets_table_with_model_estimate(capsys):
    assert main(["presets", "--model", "1.5B"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("cpu", "8gb", "t4-16gb", "24gb", "40gb", "80gb"))
    assert "estimate" in out and "GiB" in out


def test_bad_input_is_a_clear_error_and_exit_code():
    done = subprocess.run([sys.executable, "-m", "rloo_kit.cli", "train", "--preset", "16gb", "--model",
                           "smollm2-135m"], capture_output=True, text=True)
    assert done.returncode == 2 and "Unknown preset '16gb'" in done.stderr and "t4-16gb" in done.stderr
