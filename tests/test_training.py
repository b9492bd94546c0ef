"""Integration on the tiny offline model: real RLOO steps through the kit, in seconds."""

import contextlib
import os
import signal
import time

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback

import rloo_kit
from rloo_kit import ConfigError, DataError, RewardError, build_trainer, train
from rloo_kit.rewards import correct_answer

from .helpers import arithmetic_rows as data
from .helpers import length_reward, logits


def lora_state(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def base_state(model) -> dict:
    return {n: p.detach().clone().float() for n, p in model.named_parameters() if "lora_" not in n}


@pytest.mark.heavy
def test_4bit_lora_two_steps_change_adapter_not_base(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu", backend="transformers", load_in_4bit=True)
    assert getattr(model, "is_loaded_in_4bit", False)
    assert any("Linear4bit" in type(m).__name__ for m in model.modules())
    model = rloo_kit.attach_lora(model, preset="cpu", r=4, alpha=8)
    lora_before, base_before = lora_state(model), base_state(model)
    trainer = build_trainer(model, tok, data(), [length_reward], preset="cpu", output_dir=str(tmp_path),
                            max_steps=2, **cpu_tiny_overrides)
    assert "ref" not in trainer.model.peft_config  # reference = the base with the adapter off
    train(trainer)
    assert trainer.state.global_step == 2
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert len(rewards) == 2 and all(r > 0 for r in rewards)
    lora_after, base_after = lora_state(trainer.model), base_state(trainer.model)
    assert any(not torch.equal(lora_before[n], lora_after[n]) for n in lora_before)
    assert all(torch.equal(base_before[n], base_after[n]) for n in base_before)
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()


def test_adapter_save_reload_gives_same_outputs(tiny_model_dir, tmp_path, cpu_tiny_overrides, monkeypatch):
    monkeypatch.setenv("RLOO_KIT_CPU_DTYPE", "fp32")  # merging into bf16 weights rounds; this checks the plumbing
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    model = rloo_kit.attach_lora(model, r=4, alpha=8)
    trainer = build_trainer(model, tok, data(), [length_reward], preset="cpu", output_dir=str(tmp_path),
                            max_steps=1, learning_rate=5e-2, **cpu_tiny_overrides)
    train(trainer)
    ids = tok("What is 2+2?", return_tensors="pt").input_ids
    trained = trainer.model.eval()
    with torch.no_grad():
        expected = trained(ids).logits
        with trained.disable_adapter():
            base_logits = trained(ids).logits
    assert not torch.allclose(expected, base_logits)  # the adapter does something
    saved = rloo_kit.save_adapter(trained, tok, tmp_path / "saved")
    fresh, _ = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    reloaded = rloo_kit.load_adapter(fresh, saved).eval()
    with torch.no_grad():
        assert torch.allclose(reloaded(ids).logits, expected, atol=1e-5)
    merged_dir = rloo_kit.merge_and_save(reloaded, tok, tmp_path / "merged")
    merged, _ = rloo_kit.load_model(str(merged_dir), preset="cpu")
    with torch.no_grad():
        assert torch.allclose(merged.eval()(ids).logits, expected, atol=1e-4)


def test_small_model_gets_the_small_model_rate_unless_one_is_asked(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    """The tiny model is under 0.2B parameters: the 8gb preset's own 5e-5 becomes 4e-4; a rate asked for, as an
    override or as a preset changed from its own, is kept."""
    import dataclasses

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    for n, (preset, asked, expected) in enumerate([("8gb", {}, 4e-4), ("8gb", {"learning_rate": 2e-5}, 2e-5),
                                                   (dataclasses.replace(rloo_kit.get_preset("8gb"), learning_rate=1e-5),
                                                    {}, 1e-5)]):
        trainer = build_trainer(model, tok, data(), [length_reward], preset=preset, output_dir=str(tmp_path / str(n)),
                                **asked, **cpu_tiny_overrides)
        model = trainer.model
        assert trainer.args.learning_rate == expected, (preset, asked)


def test_dataset_without_prompt_is_refused_before_training(tiny_model_dir, tmp_path):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    with pytest.raises(DataError, match="no 'prompt' column"):
        build_trainer(model, tok, Dataset.from_dict({"question": ["x"], "answer": ["1"]}), [correct_answer],
                      preset="cpu", output_dir=str(tmp_path))
    with pytest.raises(DataError, match="'answer'"):
        build_trainer(model, tok, Dataset.from_dict({"prompt": ["x"]}), [correct_answer], preset="cpu",
                      output_dir=str(tmp_path))


def test_reward_of_wrong_length_fails_with_its_name(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    def one_value(prompts, completions, **kwargs):
        return [1.0]

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = build_trainer(model, tok, data(), [one_value], preset="cpu", output_dir=str(tmp_path), max_steps=1,
                            **cpu_tiny_overrides)
    with pytest.raises(RewardError, match="one_value"):
        train(trainer)


def test_config_and_overrides_together_are_refused(tiny_model_dir, tmp_path):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    cfg = rloo_kit.make_config("cpu", output_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="not both"):
        build_trainer(model, tok, data(), [length_reward], config=cfg, max_steps=3)


class InterruptAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


def test_interrupt_saves_adapter(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = build_trainer(model, tok, data(), [length_reward], preset="cpu", output_dir=str(tmp_path),
                            max_steps=5, callbacks=[InterruptAt(2)], **cpu_tiny_overrides)
    with pytest.raises(KeyboardInterrupt):
        train(trainer)
    saved = tmp_path / "interrupted"
    assert (saved / "adapter_model.safetensors").is_file()
    assert trainer.state.global_step == 2
    fresh, _ = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    reloaded = rloo_kit.load_adapter(fresh, saved)
    assert torch.allclose(logits(reloaded, tok), logits(trainer.model, tok), atol=1e-5)  # the adapter as trained


class SwallowedCtrlC(TrainerCallback):
    """Ctrl-C during step 2, landing where Python cannot raise it: as in a `__del__`, the
    KeyboardInterrupt is raised and lost."""

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 1:
            with contextlib.suppress(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # the handler runs at the next bytecode; suppress() is the finalizer here


def test_a_swallowed_ctrl_c_still_stops_at_the_end_of_its_step(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = build_trainer(model, tok, data(), [length_reward], preset="cpu", output_dir=str(tmp_path),
                            max_steps=5, callbacks=[SwallowedCtrlC()], **cpu_tiny_overrides)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        train(trainer)
    assert trainer.state.global_step == 2  # step 2 finished, step 3 never began
    assert (tmp_path / "interrupted" / "adapter_model.safetensors").is_file()
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is back


def test_constant_reward_is_diagnosed_as_collapse_and_can_stop(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    def constant(prompts, completions, **kwargs):
        return [1.0] * len(completions)

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    monitor = rloo_kit.HealthMonitor(stop_on={"reward_collapse"}, verbose=False)
    trainer = build_trainer(model, tok, data(), [constant], preset="cpu", output_dir=str(tmp_path), max_steps=8,
                            monitor=monitor, **cpu_tiny_overrides)
    assert monitor.answer_reward == "constant"  # the run's first reward scores the answer
    train(trainer)
    assert "reward_collapse" in [d.kind for d in monitor.diagnoses]
    assert monitor.stopped_by.kind == "reward_collapse"
    assert trainer.state.global_step == monitor.thresholds.warmup_steps < 8  # stopped early, cleanly
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()


@pytest.mark.slow
def test_tiny_beta_and_huge_learning_rate_explode_kl(default_model_dir, tmp_path, cpu_tiny_overrides):
    """On the real default model: the tiny random model's logits are too flat for KL to run away. The monitor
    asked to stop on it ends the run there (diagnosed at step 4 of 8 when measured)."""
    model, tok = rloo_kit.load_model(default_model_dir, preset="cpu")
    monitor = rloo_kit.HealthMonitor(verbose=False, stop_on={"kl_explosion"})
    overrides = {**cpu_tiny_overrides, "max_completion_length": 16}
    trainer = build_trainer(model, tok, data(64), [length_reward], preset="cpu", output_dir=str(tmp_path),
                            max_steps=8, beta=1e-4, learning_rate=5e-2, monitor=monitor, **overrides)
    train(trainer)
    kl = [h["kl"] for h in trainer.state.log_history if "kl" in h]
    assert "kl_explosion" in [d.kind for d in monitor.diagnoses], kl
    assert max(kl) > monitor.thresholds.kl_max, kl
    assert trainer.state.global_step < 8, kl  # stopped where it was named, not at max_steps


def test_a_task_brings_its_rewards_weights_and_length(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    task = rloo_kit.load_task("arithmetic", n_train=16, n_test=4)
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    overrides = {k: v for k, v in cpu_tiny_overrides.items() if k != "max_completion_length"}
    trainer = build_trainer(model, tok, task, preset="cpu", output_dir=str(tmp_path), max_steps=1, **overrides)
    assert trainer.args.reward_weights == [1.0, 0.2] and trainer.args.max_completion_length == 16
    assert trainer.reward_func_names == ["correct_answer", "brevity"]
    train(trainer)
    assert "rewards/brevity/mean" in trainer.state.log_history[0]


@pytest.mark.heavy
def test_a_reward_that_scores_nothing_stops_the_run(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    def as_text(prompts, completions, **kwargs):
        return ["1.0" for _ in completions]

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = build_trainer(model, tok, data(), [as_text], preset="cpu", output_dir=str(tmp_path), max_steps=6,
                            **cpu_tiny_overrides)
    with pytest.raises(RewardError, match=r"'as_text' scored no sample in the last 3 batches \(returned str"):
        train(trainer)
    assert trainer.state.global_step == 2  # stopped in the third step, not after six silent ones


def test_a_hub_reward_model_offline_fails_before_training(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    with pytest.raises(RewardError, match="hub is not reachable"):
        build_trainer(model, tok, data(), ["OpenAssistant/reward-model-deberta-v3-large"], preset="cpu",
                      output_dir=str(tmp_path))


def test_evaluation_without_an_adapter_trains_a_quick_one_and_then_finds_it(tiny_model_dir, tmp_path, monkeypatch,
                                                                             caplog):
    """03_evaluation stands on its own: with no run's adapter about it says so and trains one; the next time, or
    after 01_train, it evaluates the adapter it finds."""
    import shutil

    from rloo_kit.training import adapter_or_quick_run

    monkeypatch.chdir(tmp_path)  # a folder where no run wrote an adapter
    task = rloo_kit.load_task("arithmetic", n_train=16, n_test=2, seed=0)
    with caplog.at_level("WARNING", logger="rloo_kit"):
        adapter, trained = adapter_or_quick_run("", str(tiny_model_dir), task, preset="cpu", steps=1,
                                                output_dir=tmp_path / "quick")
    assert trained and adapter == tmp_path / "quick" / "adapter" and (adapter / "adapter_config.json").is_file()
    assert "No adapter from a previous run" in caplog.text
    shutil.copytree(adapter, tmp_path / "runs" / "train" / "adapter")  # what 01_train leaves
    found, trained = adapter_or_quick_run("", str(tiny_model_dir), task, preset="cpu", steps=1,
                                          output_dir=tmp_path / "again")
    assert found.resolve() == (tmp_path / "runs" / "train" / "adapter").resolve() and not trained
    assert not (tmp_path / "again").exists()
