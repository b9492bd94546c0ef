"""The benchmark worker still runs, both ways, so `make bench` cannot rot between measurements."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO


@pytest.mark.heavy
@pytest.mark.parametrize("via", ["kit", "trl"])
def test_worker_measures_a_tiny_run(via, tmp_path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "rloo_run.py"), "--via", via, "--model", "random:tiny",
           "--steps", "3", "--gens", "2", "--batch", "4", "--mcl", "8", "--fixed-length", "--output-dir", "run"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["via"] == via and len(result["step_seconds"]) == 3 and len(result["rewards"]) == 3
    assert result["mean_completion_length"] == 8  # --fixed-length: every completion runs to --mcl
    assert result["peak_rss_gb"] > 0.1 and result["estimate_gb"] > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_roofline_replays_each_phases_matmuls(tiny_model_dir, dtype, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    import rloo_kit
    from rloo_kit.patches.cpu_step import packing_available

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from roofline import matmul_seconds

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=getattr(torch, dtype))
    model = rloo_kit.attach_lora(model, preset="cpu")
    shapes = {"batch": 4, "seq": 12, "completion": 4, "prefill_rows": 2, "prefill_tokens": 7}
    packed = dtype == "bfloat16" and packing_available()
    seconds = matmul_seconds(model, shapes, lora_r=4, packed=packed, legacy=dtype == "float32", repeats=1)
    assert set(seconds) == {"generate_prefill", "generate_decode", "reference_fwd", "policy_fwd", "backward"}
    assert all(s > 0 for s in seconds.values())


def test_sample_efficiency_pairs_arms_by_seed(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from sample_efficiency import paired, row

    runs = [{"task": "t", "arm": arm, "seed": s, "before": 0.4, "after": after, "steps": 10, "minutes": 1.0,
             "spread_groups_per_minute": 5.0}
            for s, (plain, pool) in enumerate([(0.5, 0.6), (0.5, 0.7), (0.6, 0.7)])
            for arm, after in (("plain", plain), ("pool", pool))]
    d = paired(runs, "t", "pool")
    assert d["n"] == 3 and abs(d["mean"] - 0.4 / 3) < 1e-9 and 0 < d["low"] <= d["mean"] <= d["high"]
    assert d["p"] == 0.25  # 3 of 3 better: 2 / 2**3
    assert "| t | pool | 3 | 0.40 -> 0.67 | +0.267 | +0.133 [" in row(runs, "t", "pool")
    assert paired(runs, "t", "double") == {"n": 0}
    assert "+0.133 [" in row(runs, "t", "pool") and "| 0 | 10 |" in row(runs, "t", "pool")  # no run named a habit


def test_sample_efficiency_sets_apart_the_gain_of_runs_that_learned_a_habit(monkeypatch):
    """A larger run's +0.38 picked the first number on 21 of 24 held-out pairs: the gain without such runs is shown."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from sample_efficiency import habit, row

    assert habit({"one_place": {"place": 1, "replies": 24, "given": 21, "against": 9, "kept": 7}}) == "place 1"
    assert habit({"one_answer": {"answer": "positive"}}) == "answers 'positive'" and habit({}) is None
    runs = [{"task": "t", "arm": "plain", "seed": s, "before": 0.25, "after": after, "steps": 30, "minutes": 9.0,
             "spread_groups_per_minute": None, "habit": named} for s, (after, named) in
            enumerate([(0.71, None), (0.33, None), (0.67, "place 1")])]
    assert "| 0.25 -> 0.57 | +0.320 | - | 1 (+0.270) | 30 |" in row(runs, "t", "plain")


def test_label_guessing_scores_a_model_naming_one_label_whatever_the_prompt_at_chance(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from label_guessing import balanced

    gold = ["odd"] * 3 + ["even"] * 7  # a guesser scores 1/2 balanced whatever the labels' shares and its bias
    always_even = balanced(["even"] * 10, gold)
    assert always_even["right"] == 0.7 and always_even["balanced"] == 0.5 and always_even["named"] == 1.0
    knows = balanced(["odd", "odd", None, "even", "even", "even", "even", "even", "even", "odd"], gold)
    assert knows["named"] == 0.9 and knows["per_label"] == {"even": 6 / 7, "odd": 1.0}
    assert knows["balanced"] == (1.0 + 6 / 7) / 2


def test_compare_results_pairs_two_versions_runs_by_task_and_seed(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from compare_results import compare

    def run(seed, after, right):
        return {"task": "demo", "seed": seed, "before": 0.4, "after": after, "steps": 50, "right_after": right}

    before = {("demo", 0): run(0, 0.5, [True, False, False]), ("demo", 1): run(1, 0.5, [True, True, False]),
              ("other", 0): {}}  # a task only one side measured is left out
    after = {("demo", 0): run(0, 0.75, [True, True, True]), ("demo", 1): run(1, 0.25, [False, True, False]),
             ("demo", 2): run(2, 1.0, [True] * 3)}  # a seed only one side measured is left out
    (row,) = compare(before, after)
    assert row["seeds"] == [0, 1] and row["diffs"] == [0.25, -0.25] and row["paired"]["mean"] == 0
    assert (row["prompts_better"], row["prompts_worse"]) == (2, 1) and row["before"] == 0.5 and row["after"] == 0.5


def test_a_benchmark_reuses_a_finished_run_only_where_the_same_code_and_settings_made_it(monkeypatch, tmp_path):
    """`--reuse` once assembled a run of a tried-and-reverted change into a table of the defaults: a run folder now
    says what made it, and one made by other code or settings is trained again."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import common

    trained, real_run = [], subprocess.run

    def fake_train(cmd, **kwargs):  # the CLI's run: a metrics.json in the output folder
        out = Path(cmd[cmd.index("--output-dir") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps({"accuracy_after": 0.5 + len(trained)}))
        trained.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(common.subprocess, "run", lambda cmd, **kw: fake_train(cmd, **kw) if "rloo_kit.cli" in cmd
                        else real_run(cmd, **kw))
    out = tmp_path / "run"
    assert common.cli_train(out, ["--task", "arithmetic"], "first", reuse=True)[0]["accuracy_after"] == 0.5
    assert common.cli_train(out, ["--task", "arithmetic"], "same", reuse=True)[0]["accuracy_after"] == 0.5
    assert len(trained) == 1
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE" if common.os.environ.get("OMP_WAIT_POLICY") != "PASSIVE" else "")
    assert common.cli_train(out, ["--task", "arithmetic"], "other env", reuse=True)[0]["accuracy_after"] == 1.5
    (out / common.RUN_STAMP).write_text(json.dumps({**json.loads((out / common.RUN_STAMP).read_text()),
                                                    "rloo_kit": "another tree"}))
    assert common.cli_train(out, ["--task", "arithmetic"], "other code", reuse=True)[0]["accuracy_after"] == 2.5
    assert common.cli_train(out, ["--task", "arithmetic"], "no reuse", reuse=False)[0]["accuracy_after"] == 3.5


def test_a_results_page_that_gathers_runs_keeps_every_invocations_note(monkeypatch, tmp_path):
    """sampling-fit gathers seeds from several invocations; a `--note` that replaced the page's earlier one lost the
    conditions of the runs still on it. Notes now accumulate, and the command line no longer carries them."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import common

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(common.sys, "argv", [str(REPO / "benchmarks" / "sampling_fit.py"), "--seeds", "3",
                                             "--note", "Seeds 3-4 on an Intel Xeon."])
    assert common._split_note(["--seeds", "3", "--note", "N"]) == (["--seeds", "3"], "N")
    (tmp_path / "page.json").write_text(json.dumps(  # a page written before notes were kept: its note in the command
        {"command": ".venv/bin/python benchmarks/sampling_fit.py --seeds 0 --note Seed 0 on an AMD EPYC."}))
    result = {"command": common.stamp()["command"]}
    assert "--note" not in result["command"] and result["command"].endswith("sampling_fit.py --seeds 3")
    notes = common.accumulated_notes("page", result, "Seeds 3-4 on an Intel Xeon.")
    assert result["notes"] == ["Seed 0 on an AMD EPYC.", "Seeds 3-4 on an Intel Xeon."]
    assert notes == "Seed 0 on an AMD EPYC.\n\nSeeds 3-4 on an Intel Xeon."
    (tmp_path / "page.json").write_text(json.dumps(result))
    assert common.accumulated_notes("page", {}, "Seeds 3-4 on an Intel Xeon.") == notes  # a re-report adds nothing


def test_the_keep_rule_replay_holds_each_rule_to_its_own_test(monkeypatch):
    """benchmarks/keep_rule.py: a step whose greedy rows tie step 0's but whose sampled answers are right more often
    on most rows is kept by the kit's rule (the later of equals) and by "sampled", not by "lead"; one right on fewer
    rows by none of them, and by "latest" only while no earlier step leads it."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from keep_rule import choose

    step0 = {"step": 0, "accuracy": 0.25, "rows": [True, False, False, False], "sampled_rows": [2, 0, 0, 0]}
    later = {"step": 9, "accuracy": 0.25, "rows": [False, True, False, False], "sampled_rows": [3, 2, 1, 2]}
    assert [choose([step0, later], rule)["step"] for rule in ("kept", "lead", "sampled")] == [9, 0, 9]
    worse = {"step": 12, "accuracy": 0.0, "rows": [False] * 4, "sampled_rows": [0, 0, 0, 1]}
    assert [choose([step0, later, worse], rule)["step"] for rule in ("kept", "lead", "sampled", "latest")] == \
        [9, 0, 9, 12]  # a row worse than step 0 is a lead chance gives too often
