"""The spread filter: a step's forward and backward passes cover its groups with spread in the task reward, and
what is logged still describes every group."""

import pytest
import torch
from datasets import Dataset

import rloo_kit
from rloo_kit.patches.spread_filter import KEPT_KEY

K = 4


def flat_or_spread(prompts, completions, **_):
    """1.0 for every completion of a prompt that starts 'flat'; elsewhere 0 and 1 in turn, so each group of K
    contiguous completions has spread."""
    return [1.0 if p.startswith("flat") else float(i % 2) for i, p in enumerate(prompts)]


def prompts(n_flat: int, n_spread: int) -> list[str]:
    return [f"flat {i}: say hi" for i in range(n_flat)] + [f"spread {i}: say hi" for i in range(n_spread)]


def filtered_trainer(model_dir, tmp_path, data: Dataset, **overrides):
    model, tok = rloo_kit.load_model(str(model_dir), preset="cpu")
    return rloo_kit.build_trainer(model, tok, data, flat_or_spread, preset="cpu", output_dir=str(tmp_path),
                                  spread_filter=True, live=False, per_device_train_batch_size=2 * K,
                                  num_generations=K, max_completion_length=6, logging_steps=1, save_strategy="no",
                                  seed=0, **overrides)


@pytest.mark.parametrize("pool", [False, True], ids=["uniform", "pool"])
def test_flat_groups_stay_out_of_the_step_and_the_logs_see_them(tiny_model_dir, tmp_path, pool):
    data = Dataset.from_dict({"prompt": prompts(4, 4)})
    trainer = filtered_trainer(tiny_model_dir, tmp_path, data, max_steps=6, prompt_pool=pool)
    assert "spread_filter" in trainer.rloo_kit_patches
    scored, trained = [], []
    score = trainer.reward_funcs[0]

    def recording(prompts, **kwargs):
        scored.append(list(prompts))
        return score(prompts=prompts, **kwargs)

    recording.__name__ = score.__name__
    trainer.reward_funcs[0] = recording
    compute_loss = trainer.compute_loss

    def counting(model, inputs, *args, **kwargs):
        trained.append(trainer.processing_class.batch_decode(inputs["prompt_ids"], skip_special_tokens=True))
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = counting
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    rloo_kit.train(trainer)

    assert len(scored) == len(trained) == 6  # each step scored once, all its groups, then trained once
    logs = [h for h in trainer.state.log_history if KEPT_KEY in h]
    assert len(logs) == 6
    for step_prompts, rows, log in zip(scored, trained, logs, strict=True):
        assert len(step_prompts) == 2 * K
        spread = sum(not p.startswith("flat") for p in step_prompts[::K])
        assert len(rows) == K * max(spread, 1)  # a step whose groups are all flat keeps one, so TRL has a batch
        if spread:
            assert all(r.startswith("spread") for r in rows)
        assert log[KEPT_KEY] == pytest.approx(max(spread, 1) / 2)
        for key in ("frac_task_reward_zero_std", "frac_reward_zero_std"):  # taken before the filter
            assert log[key] == pytest.approx((2 - spread) / 2)
        # TRL's reward is put back to every group's: flat groups all 1.0, a group with spread averages 0.5
        assert log["reward"] == pytest.approx(((2 - spread) * 1.0 + spread * 0.5) / 2)
    assert any(len(rows) < 2 * K for rows in trained)  # the draw gave flat groups at least once
    if pool:  # the pool heard every group once, the flat ones too
        assert sum(r.groups for r in trainer.prompt_pool.records.values()) == 6 * 2
    changed = [n for n, p in trainer.model.named_parameters() if p.requires_grad and not torch.equal(p, before[n])]
    assert changed


def test_a_filtered_step_is_trls_step_on_the_groups_with_spread(tiny_model_dir, tmp_path):
    """The same completions, sampled once: the filtered batch equals TRL's own scoring of the groups with spread."""
    data = Dataset.from_dict({"prompt": prompts(1, 1)})
    trainer = filtered_trainer(tiny_model_dir, tmp_path, data, max_steps=1)
    tok = trainer.processing_class
    inputs = [{"prompt": p} for p in ["flat 0: say hi"] * K + ["spread 0: say hi"] * K]
    completions = [f" hello {'there ' * (i % 3)}" for i in range(2 * K)]

    def fixed(rows):
        def generate(asked):
            assert asked == [inputs[i]["prompt"] for i in rows]
            ids = [tok(inputs[i]["prompt"])["input_ids"] for i in rows]
            return ids, [tok(completions[i])["input_ids"] for i in rows], [completions[i] for i in rows]
        return generate

    trainer.model.train()
    trainer._generate = fixed(range(2 * K))
    filtered = trainer._generate_and_score_completions(inputs)
    assert list(trainer._logs["prompt"]) == [inputs[K]["prompt"]] * K  # TRL's logs: this step's kept rows
    trainer._generate = fixed(range(K, 2 * K))
    trls = type(trainer)._generate_and_score_completions(trainer, inputs[K:])
    assert set(filtered) == set(trls)
    for key, value in trls.items():
        if key == "advantages":  # as much as in the whole batch, of which they are half
            value = value / 2
        assert torch.allclose(filtered[key].detach(), value.detach()), key
    assert filtered["completion_ids"].shape[0] == K


def test_several_micro_batches_a_generation_turn_the_filter_off_with_a_word(tiny_model_dir, tmp_path, caplog):
    data = Dataset.from_dict({"prompt": prompts(2, 2)})
    with caplog.at_level("WARNING", logger="rloo_kit"):
        trainer = filtered_trainer(tiny_model_dir, tmp_path, data, max_steps=1, gradient_accumulation_steps=2)
    assert "spread_filter" not in trainer.rloo_kit_patches
    assert "_generate_and_score_completions" not in vars(trainer)
    assert "spread filter: off (steps_per_generation=2" in caplog.text
