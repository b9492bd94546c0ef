"""One measured RLOO run, in its own process, printed as a JSON line: the worker behind
overhead.py, scaling.py and backends.py. Two ways to build the same run:

  --via kit  rloo_kit.load_model + attach_lora + build_trainer (what users call)
  --via trl  transformers + a hand-written trl.RLOOConfig/RLOOTrainer with peft_config

Both take every RLOO setting from the command line, so they run identical settings and seed.
--model is a path, an alias (smollm2-135m), or random:tiny / random:qwen2.5-0.5b / random:qwen2.5-1.5b
(a real architecture with random weights, built once under runs/bench-models: no hub needed).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from dataclasses import replace
from pathlib import Path

import torch
from transformers import TrainerCallback

import rloo_kit
from rloo_kit.memory import ModelShape, estimate_memory
from rloo_kit.patches.compat import patch_trl_for_cpu
from rloo_kit.presets import LORA_ALL_LINEAR, get_preset
from rloo_kit.sources import ALIASES, fetch_model
from rloo_kit.tasks import load_task
from rloo_kit.testing import build_tiny_model

MODELS_DIR = Path("runs/bench-models")
QWEN_SHAPES = {  # from the hub configs of Qwen/Qwen2.5-{0.5B,1.5B}-Instruct
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, tie_word_embeddings=True),
}


def model_path(name: str) -> str:
    """A loadable directory for --model; random:* shapes are written once with the default model's tokenizer."""
    if name in ALIASES:
        return fetch_model(name)
    if not name.startswith("random:"):
        return name
    shape = name.split(":", 1)[1]
    out = (MODELS_DIR / shape).resolve()
    if shape == "tiny":
        return str(build_tiny_model(out))
    if not (out / "config.json").is_file():
        from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

        tok = AutoTokenizer.from_pretrained(fetch_model())
        config = Qwen2Config(vocab_size=151_936, max_position_embeddings=4096, bos_token_id=tok.bos_token_id,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **QWEN_SHAPES[shape])
        torch.manual_seed(0)
        Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
    return str(out)


class WallClock(TrainerCallback):
    """Seconds between consecutive step ends: generation, rewards, backward and callbacks, all in."""

    def __init__(self):
        self.marks: list[float] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.marks.append(time.perf_counter())

    def on_step_end(self, args, state, control, **kwargs):
        self.marks.append(time.perf_counter())

    @property
    def step_seconds(self) -> list[float]:
        return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]


def settings(a) -> dict:
    return dict(num_generations=a.gens, per_device_train_batch_size=a.batch, gradient_accumulation_steps=1,
                max_completion_length=a.mcl, learning_rate=a.lr, beta=a.beta, temperature=1.0,
                optim=a.optim, gradient_checkpointing=a.gradient_checkpointing, max_steps=a.steps, logging_steps=1,
                save_strategy="no", report_to="none", disable_tqdm=True, seed=a.seed, bf16=a.dtype == "bf16",
                generation_kwargs={"min_new_tokens": a.mcl} if a.fixed_length else None)


def build_with_kit(a, path, task, clock):
    model, tok = rloo_kit.load_model(path, preset=a.preset, backend=a.backend, load_in_4bit=a.load_in_4bit,
                                     max_seq_length=a.max_seq_length)
    model = rloo_kit.attach_lora(model, preset=a.preset, r=a.lora_r, alpha=2 * a.lora_r, seed=a.seed)
    trainer = rloo_kit.build_trainer(model, tok, task, preset=a.preset, output_dir=a.output_dir,
                                     callbacks=[clock], **settings(a))
    return trainer


def build_by_hand(a, path, task, clock):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import RLOOConfig, RLOOTrainer

    patch_trl_for_cpu()  # without it TRL 1.15 cannot take a step on CPU (see rloo_kit/patches/compat.py)
    tok = AutoTokenizer.from_pretrained(path)
    tok.pad_token = tok.pad_token or tok.eos_token
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    config = RLOOConfig(output_dir=a.output_dir, reward_weights=list(task.reward_weights), **settings(a))
    lora = LoraConfig(r=a.lora_r, lora_alpha=2 * a.lora_r, target_modules=list(LORA_ALL_LINEAR), lora_dropout=0.0,
                      task_type="CAUSAL_LM")
    trainer = RLOOTrainer(model=model, reward_funcs=list(task.reward_funcs), args=config, train_dataset=task.train,
                          processing_class=tok, peft_config=lora, callbacks=[clock])
    return trainer


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux reports KiB


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--via", choices=("kit", "trl"), default="kit")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--backend", default="transformers", choices=("transformers", "unsloth"))
    ap.add_argument("--load-in-4bit", action="store_true")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--gens", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="completions per step (prompts x gens)")
    ap.add_argument("--mcl", type=int, default=16)
    ap.add_argument("--fixed-length", action="store_true", help="every completion runs to --mcl tokens")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--beta", type=float, default=0.02)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--optim", default="adamw_torch")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--max-seq-length", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output-dir", default="runs/bench-run")
    a = ap.parse_args()

    path = model_path(a.model)
    task = load_task("arithmetic", n_train=a.steps * a.batch, seed=a.seed)
    clock = WallClock()
    torch.manual_seed(a.seed)
    start = time.perf_counter()
    trainer = (build_with_kit if a.via == "kit" else build_by_hand)(a, path, task, clock)
    built = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    shape = ModelShape.from_config(trainer.model.config)
    base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    bf16_base = not torch.cuda.is_available() and base.dtype == torch.bfloat16  # the kit's bf16 CPU path
    preset = get_preset(a.preset)
    tok = trainer.processing_class
    prompt_tokens = max(len(tok(tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True),
                                add_special_tokens=False).input_ids) for p in task.train["prompt"][:32])
    sized = replace(preset, per_device_train_batch_size=a.batch, max_completion_length=a.mcl, lora_r=a.lora_r,
                    load_in_4bit=a.load_in_4bit, gradient_checkpointing=a.gradient_checkpointing)
    lengths = [h["completions/mean_length"] for h in logs]
    steady = clock.step_seconds[1:]  # the first step pays for warm-up
    print(json.dumps({
        "via": a.via, "model": a.model, "backend": a.backend, "load_in_4bit": a.load_in_4bit, "dtype": a.dtype,
        "gens": a.gens, "batch": a.batch, "mcl": a.mcl, "steps": a.steps,
        "build_seconds": round(built - start, 2),
        "step_seconds": [round(s, 4) for s in clock.step_seconds],
        "median_step_seconds": round(sorted(steady)[len(steady) // 2], 4) if steady else None,
        "trl_step_time": [round(h.get("step_time", float("nan")), 4) for h in logs],
        "mean_completion_length": round(sum(lengths) / len(lengths), 2),
        "tokens_per_second": round(sum(lengths[1:]) * a.batch / sum(steady), 1) if steady else None,
        "rewards": [round(h["reward"], 4) for h in logs],
        "peak_rss_gb": round(peak_rss_gb(), 3),
        "cuda_peak_gb": round(torch.cuda.max_memory_allocated() / 1024**3, 3) if torch.cuda.is_available() else None,
        "estimate_gb": round(estimate_memory(shape, sized, device="cuda" if torch.cuda.is_available() else "cpu",
                                             prompt_length=prompt_tokens, cpu_bf16=bf16_base).total_gb, 3),
        "params": shape.params, "prompt_tokens": prompt_tokens,
    }))


if __name__ == "__main__":
    main()
