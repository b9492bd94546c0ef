"""The prompt pool: which prompts each step draws, learned from the rewards the run computes; TRL's sampler
contract kept; its state resumed with the run."""

import json
from collections import Counter

import pytest

import rloo_kit
from rloo_kit.patches.group_sampler import GroupSampler
from rloo_kit.pool import STATE_FILE, PromptPool


def flat_then_spread(pool: PromptPool, flat: set[int], n: int) -> None:
    """Groups of K=4: prompts in `flat` all 0, the others 0/1 mixed."""
    prompts = [f"p{i}" for i in range(n) for _ in range(4)]
    rewards = [0.0 if i // 4 in flat else float(i % 2) for i in range(4 * n)]
    pool.observe(prompts, rewards)


def test_the_group_sampler_keeps_trls_sampler_contract():
    """Each generation batch: `batch` distinct prompts, each K times in a row, the batch repeated repeat_count
    times (TRL's RepeatSampler, so groups stay whole on every step); as long as TRL's over the same rows."""
    from trl.trainer.utils import RepeatSampler

    prompts = [f"p{i}" for i in range(10)]
    sampler = GroupSampler(PromptPool(prompts, seed=1).choose, len(prompts), num_generations=3, batch_size=2,
                           repeat_count=2)
    drawn = list(sampler)
    assert len(drawn) == len(sampler) == len(RepeatSampler(prompts, mini_repeat_count=3, batch_size=2,
                                                           repeat_count=2))
    for start in range(0, len(drawn), 12):
        block = drawn[start:start + 12]
        assert block[:6] == block[6:]  # repeated for the iterations / steps of one generation
        groups = [block[i:i + 3] for i in range(0, 6, 3)]
        assert all(len(set(g)) == 1 for g in groups) and groups[0][0] != groups[1][0]


def test_flat_prompts_rest_and_come_back_spread_ones_are_drawn():
    n = 20
    pool = PromptPool([f"p{i}" for i in range(n)], explore=0.0, seed=0)
    pool.batch = 2
    flat_then_spread(pool, flat=set(range(10)), n=n)
    assert all(pool.rested(f"p{i}") for i in range(10)) and not any(pool.rested(f"p{i}") for i in range(10, n))
    drawn = Counter(row for _ in range(2) for row in pool.choose(2))
    assert set(drawn) <= set(range(10, n))  # while rested, the flat ones are not drawn
    for _ in range(10):
        pool.choose(2)
    assert not pool.rested("p0")  # a quarter pass later (20 rows / 2 a draw / 4 = 2-3 draws), back
    flat_then_spread(pool, flat={0}, n=1)  # flat again: rested twice as long
    assert pool.records["p0"].flat_streak == 2 and pool.records["p0"].rest_until - pool.draws >= 5


def test_exploration_keeps_drawing_rested_prompts():
    pool = PromptPool([f"p{i}" for i in range(10)], explore=0.5, seed=0)
    pool.batch = 1
    flat_then_spread(pool, flat=set(range(9)), n=10)
    drawn = Counter(pool.choose(1)[0] for _ in range(400))
    assert drawn[9] > 150 and sum(drawn[i] for i in range(9)) > 100  # the floor reaches every prompt


def test_solved_and_failed_are_told_apart_and_summarised():
    pool = PromptPool(["a", "b", "c"], seed=0)
    pool.observe(["a"] * 2 + ["b"] * 2 + ["c"] * 2, [1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    assert [pool.records[k].last for k in "abc"] == ["solved", "failed", "spread"]
    summary = pool.summary()
    assert summary["pool/flat_groups"] == summary["pool/rested"] == pytest.approx(2 / 3, abs=1e-3)
    assert "pool/flat_groups" not in pool.summary()  # per window: nothing judged since


def test_the_pools_state_round_trips():
    pool = PromptPool([f"p{i}" for i in range(6)], seed=3)
    flat_then_spread(pool, flat={1, 2}, n=6)
    pool.choose(2)
    again = PromptPool([f"p{i}" for i in range(6)], seed=99)
    again.load(json.loads(json.dumps(pool.state())))
    assert again.records == pool.records and again.draws == pool.draws
    assert [again.choose(2) for _ in range(5)] == [pool.choose(2) for _ in range(5)]


def test_recording_sums_the_weighted_rewards_as_trl_does():
    pool = PromptPool(["a", "b"], seed=0)

    def right(prompts, completions, **kw):
        return [1.0 if c == "y" else 0.0 for c in completions]

    def unscored(prompts, completions, **kw):
        return [None] * len(completions)

    funcs = pool.recording([right, unscored], [0.5, 1.0])
    assert [f.__name__ for f in funcs] == ["right", "unscored"]
    prompts, completions = ["a", "a", "b", "b"], ["y", "y", "y", "n"]
    for f in funcs:
        f(prompts=prompts, completions=completions, completion_ids=[[1]] * 4)
    assert pool.records["a"].last == "solved" and pool.records["b"].last == "spread" and pool.high == 0.5
    with pytest.raises(ValueError, match="reward models"):
        pool.recording(["org/reward-model"], [1.0])


def test_the_preflight_seeds_the_pool():
    pool = PromptPool(["a", "b", [{"role": "user", "content": "c"}]], seed=0)
    pool.seed(["a", [{"role": "user", "content": "c"}], "not in the data"], [True, False, True])
    assert pool.rested("a") and pool.records["a"].last == "flat" and not pool.rested("b")
    assert list(pool.records) == ["a", '[{"content": "c", "role": "user"}]']


@pytest.mark.heavy
def test_a_pooled_run_trains_and_its_pool_resumes(tiny_model_dir, tmp_path):
    """Through the door: the trainer draws from the pool, the pool hears every group, its state goes into each
    checkpoint, and --resume takes it back."""
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    task = rloo_kit.load_task("arithmetic", n_train=24, n_test=4)
    kwargs = dict(preset="cpu", output_dir=str(tmp_path), prompt_pool=True, per_device_train_batch_size=4,
                  num_generations=2, max_completion_length=6, save_steps=2, live=False)
    trainer = rloo_kit.build_trainer(model, tok, task, max_steps=4, **kwargs)
    assert "group_sampler" in trainer.rloo_kit_patches
    rloo_kit.train(trainer)
    pool = trainer.prompt_pool
    assert sum(r.groups for r in pool.records.values()) == 4 * 2  # 4 steps x 2 prompts, each group judged
    assert all(h.get("pool/rested") is not None for h in trainer.state.log_history if "reward" in h)
    saved = json.loads((tmp_path / "checkpoint-4" / STATE_FILE).read_text())
    assert saved["draws"] >= 4 and len(saved["records"]) == len(pool.records)

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    again = rloo_kit.build_trainer(model, tok, task, max_steps=6, **kwargs)
    rloo_kit.train(again, resume=True)
    records = again.prompt_pool.records
    assert sum(r.groups for r in records.values()) == 6 * 2  # the 4 steps' records and 2 more steps
    assert again.state.global_step == 6


def test_without_the_pool_trl_draws(tiny_model_dir, tmp_path):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    task = rloo_kit.load_task("arithmetic", n_train=12, n_test=4)
    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir=str(tmp_path), max_steps=1,
                                     live=False)
    assert trainer.prompt_pool is None and "group_sampler" not in trainer.rloo_kit_patches
    assert "_get_train_sampler" not in vars(trainer)


@pytest.mark.heavy
def test_the_command_trains_with_a_pool_the_preflight_seeded(tiny_model_dir, tmp_path):
    from rloo_kit.cli import main

    out = tmp_path / "run"
    code = main(["train", "--model", str(tiny_model_dir), "--preset", "cpu", "--output-dir", str(out), "--max-steps",
                 "2", "--save-steps", "2", "--batch-size", "4", "--num-generations", "2", "--max-completion-length",
                 "8", "--n-test", "4", "--preflight-prompts", "6", "--force", "--prompt-pool"])
    assert code == 0
    assert "group_sampler" in json.loads((out / "metrics.json").read_text())["config"]["patches"]
    saved = json.loads((out / "checkpoint-2" / STATE_FILE).read_text())
    seeded = sum(r["groups"] for r in saved["records"].values()) - 2 * 2  # the 2 steps' groups set apart
    assert seeded == 6  # each pre-flight prompt told the pool what its samples gave
