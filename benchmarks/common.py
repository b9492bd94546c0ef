"""What every benchmark shares: the stamp (command, device, versions), running one measured RLOO
run in a fresh process (so peak memory is that run's alone), and writing results."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
WORKER = Path(__file__).parent / "rloo_run.py"
LOAD_AT_START = os.getloadavg()[0]  # benchmarks import this module before they start work


def stamp() -> dict:
    import torch

    import rloo_kit
    from rloo_kit.hardware import package_versions

    hw = rloo_kit.detect_hardware()
    versions = package_versions()
    script = Path(sys.argv[0]).resolve().relative_to(REPO)
    argv, note = _split_note(sys.argv[1:])
    return {"command": " ".join([".venv/bin/python", str(script), *argv]), **({"note": note} if note else {}),
            "device": f"{hw.device} ({hw.name})", "cpu_count": hw.cpu_count,
            "torch_threads": torch.get_num_threads(), "load_average_at_start": round(LOAD_AT_START, 2),
            "memory_gb": round(hw.total_memory_gb, 1), "python": platform.python_version(), "versions": versions}


def measure(**settings) -> dict:
    """One RLOO run in a subprocess (benchmarks/rloo_run.py); its JSON summary."""
    args = [sys.executable, str(WORKER)]
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value not in (None, False):
            args += [flag, str(value)]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def bootstrap(diffs: list[float], resamples: int = 2000) -> dict:
    """Paired differences (one per seed): their mean, a bootstrap 95% interval of it, and the sign test's p."""
    from rloo_kit.evaluation import sign_test

    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(resamples))
    return {"n": len(diffs), "mean": statistics.fmean(diffs), "low": means[int(0.025 * resamples)],
            "high": means[int(0.975 * resamples) - 1],
            "p": sign_test(sum(d > 0 for d in diffs), sum(d < 0 for d in diffs))}


def load_note(result: dict) -> str:
    """One sentence on how busy the machine was when the stamp was taken: quiet, or shared and so noisy."""
    load, cores = result["load_average_at_start"], result["cpu_count"]
    busy = load > 0.5 * cores
    return (f"Load average {load} on {cores} cores at the start: "
            + ("other processes shared the cores, so compare ratios, not seconds." if busy else "a quiet machine."))


def _split_note(argv: list[str]) -> tuple[list[str], str]:
    """The arguments less `--note TEXT`, and TEXT: the note is a paragraph of the page, not its command line."""
    out, note, take = [], "", False
    for arg in argv:
        if take:
            note, take = arg, False
        elif arg.startswith("--note="):
            note = arg.split("=", 1)[1]
        elif arg == "--note":
            take = True
        else:
            out.append(arg)
    return out, note


def accumulated_notes(name: str, result: dict, note: str) -> str:
    """The notes of results page `name`: each earlier invocation's `--note`, kept from its JSON, then this one's.

    A page that gathers runs from several invocations (a seed added later, a task measured again) needs the
    conditions of each; a note that replaced the page's earlier one would lose them. Stored as result["notes"];
    a page written before notes were kept has its note inside the recorded command, and it is taken from there.
    """
    earlier: list[str] = []
    page = RESULTS / f"{name}.json"
    if page.is_file():
        old = json.loads(page.read_text())
        command = old.get("command", "")
        earlier = old.get("notes") or ([command.split(" --note ", 1)[1].strip()] if " --note " in command else [])
    result["notes"] = earlier + ([note] if note and note not in earlier else [])
    return "\n\n".join(result["notes"])


def write(name: str, result: dict, table: list[str], notes: str = "") -> None:
    """benchmarks/results/<name>.json (everything) and <name>.md (the table, stamped)."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    head = (f"`{result['command']}` on {result['device']}, {result['cpu_count']} cores; "
            + ", ".join(f"{k} {v}" for k, v in result["versions"].items() if v) + "\n\n")
    (RESULTS / f"{name}.md").write_text(head + "\n".join(table) + "\n" + (f"\n{notes}\n" if notes else ""))
    print("\n".join(table) + ("\n\n" + notes if notes else ""))


RUN_STAMP = "benchmark_stamp.json"  # beside a run's metrics.json: what made it, checked before it is reused
RUN_ENV = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "RLOO_KIT_CPU_DTYPE")  # settings that change a run, not its command


def run_stamp(args: list[str]) -> dict:
    """What makes a run: the kit's source (its git tree and any change not committed), the command's options and the
    contents of the files they name, the libraries' versions and the environment variables that change a run. A run
    made otherwise is not this run."""
    from importlib.metadata import version

    def git(*cmd: str) -> bytes:
        return subprocess.run(["git", *cmd], cwd=REPO, capture_output=True).stdout

    changed = git("diff", "HEAD", "--", "rloo_kit") + git("status", "--porcelain", "--", "rloo_kit")
    files = {a: hashlib.sha256(Path(a).read_bytes()).hexdigest()[:16] for a in args if Path(a).is_file()}
    return {"rloo_kit": git("rev-parse", "HEAD:rloo_kit").decode().strip(),
            "uncommitted": hashlib.sha256(changed).hexdigest()[:16] if changed else None,
            "args": args, "files": files, "versions": {m: version(m) for m in ("torch", "transformers", "trl", "peft")},
            "env": {k: os.environ.get(k) for k in RUN_ENV}}


def cli_train(out: Path, args: list[str], label: str, reuse: bool = False, train: bool = True) -> tuple[dict, str]:
    """`rloo-kit train ARGS --output-dir OUT` in a process of its own, as a user runs it (with `reuse`: read what a
    finished earlier run left there if the same code, options and settings made it (`run_stamp`), train otherwise;
    with `train=False`, train none): its metrics.json ({} when there is none), and the command as typed."""
    cmd = [sys.executable, "-m", "rloo_kit.cli", "train", *args, "--output-dir", str(out)]
    stamp_now, stamp_file = run_stamp(args), out / RUN_STAMP
    finished = (out / "metrics.json").is_file()
    if train and reuse and finished and (not stamp_file.is_file() or json.loads(stamp_file.read_text()) != stamp_now):
        print(f"== {label}: the run in {out} was made by other code or settings; training it again", flush=True)
        finished = False
    if train and not (reuse and finished):
        shutil.rmtree(out, ignore_errors=True)
        start = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True)
        print(f"== {label} (exit {done.returncode}, {(time.time() - start) / 60:.1f} min)\n"
              f"{done.stdout[-3000:]}{done.stderr[-1500:]}", flush=True)
        if out.is_dir():
            stamp_file.write_text(json.dumps(stamp_now, indent=1))
    metrics = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").is_file() else {}
    return metrics, " ".join(["rloo-kit", *cmd[3:]]).replace(str(REPO) + "/", "")
