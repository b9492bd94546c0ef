"""A CUDA out-of-memory, in training or in generation, becomes advice that names what fits, and
keeps the adapter trained so far. CUDA's error is raised by hand here: CI has no GPU to fill."""

import pytest
import torch
from transformers import TrainerCallback

import rloo_kit
from rloo_kit import GPUOutOfMemoryError, build_trainer, train
from rloo_kit.evaluation import generate
from rloo_kit.presets import make_config
from rloo_kit.training import _oom_advice

from .helpers import arithmetic_rows as data
from .helpers import length_reward


class OutOfMemoryAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize("preset,smaller", [("24gb", "t4-16gb"), ("40gb", "24gb"), ("80gb", "40gb")])
def test_advice_names_the_preset_one_size_down(preset, smaller):
    advice = _oom_advice(make_config(preset, output_dir="unused"))
    assert f"preset='{smaller}'" in advice
    assert "gradient_accumulation_steps=" in advice and "resume=True" in advice


@pytest.mark.heavy
def test_training_oom_keeps_the_adapter_and_says_what_fits(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = build_trainer(model, tok, data(), [length_reward], preset="cpu", output_dir=str(tmp_path), max_steps=4,
                            learning_rate=5e-2, **cpu_tiny_overrides)
    trainer.add_callback(OutOfMemoryAt(step=2))
    with pytest.raises(GPUOutOfMemoryError) as err:
        train(trainer)
    message = str(err.value)
    assert "per_device_train_batch_size=4" in message and "max_completion_length=8" in message
    assert "gradient_accumulation_steps=2" in message and "step 2" in message
    assert isinstance(err.value.__cause__, torch.cuda.OutOfMemoryError)
    saved = tmp_path / "interrupted"
    assert str(saved) in message
    fresh, _ = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    reloaded = rloo_kit.load_adapter(fresh, saved)
    lora = {n: p for n, p in reloaded.named_parameters() if "lora_B" in n}
    assert lora and any(p.abs().sum() > 0 for p in lora.values())  # trained weights, not a fresh LoRA (B = 0)


def test_generation_oom_says_what_to_lower(tiny_model_dir, monkeypatch):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory.")

    monkeypatch.setattr(model, "generate", out_of_memory)
    tok.padding_side = "right"
    model.train()
    with pytest.raises(GPUOutOfMemoryError, match="batch_size=.*samples="):
        generate(model, tok, ["What is 1+1?"], samples=4, greedy=False, batch_size=8)
    assert tok.padding_side == "right" and model.training  # the caller's state is restored
