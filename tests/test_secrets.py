"""A hub token lives in the environment only: never in a log, a checkpoint, a config or an adapter."""

import os
import subprocess
import sys

import pytest

from .helpers import TOKEN, train_cmd


@pytest.mark.heavy
def test_hub_token_never_reaches_output_or_files(tiny_model_dir, tmp_path):
    env = {**os.environ, "HF_TOKEN": TOKEN, "HUGGING_FACE_HUB_TOKEN": TOKEN, "TQDM_DISABLE": "1"}
    out = tmp_path / "run"
    cmd = train_cmd(tiny_model_dir, out)
    cmd[cmd.index("--max-steps") + 1] = "2"
    runs = [subprocess.run(c, env=env, capture_output=True, text=True, timeout=300)
            for c in (cmd, [sys.executable, "-m", "rloo_kit.cli", "doctor"])]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
        assert TOKEN not in r.stdout + r.stderr
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "training_args.bin" for p in written) and any(p.name == "adapter_config.json" for p in written)
    leaked = [p for p in written if TOKEN.encode() in p.read_bytes()]
    assert not leaked
