"""A tiny random model built offline in a second, for smoke runs and tests of the whole flow.

It learns nothing useful, but it has a real tokenizer (byte level, ChatML template), a Llama
architecture that Unsloth and bitsandbytes both accept, and safetensors on disk like a hub model.
"""

from __future__ import annotations

from pathlib import Path

import torch

CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_model(out_dir: str | Path, *, hidden: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """Write a random Llama (hidden 64, 2 layers) and a byte-level tokenizer to out_dir."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out_dir)
    if (out / "model.safetensors").is_file():
        return out
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for b in sorted(pre_tokenizers.ByteLevel.alphabet()):  # a set underneath: its order changes per process
        vocab.setdefault(b, len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", padding_side="left")
    tok.chat_template = CHATML
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=True,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = LlamaForCausalLM(config)
    return _save(model, tok, out)


def build_tiny_bpe_model(out_dir: str | Path, *, architecture: str = "qwen2", hidden: int = 64, layers: int = 2,
                         vocab_size: int = 320, init: float = 0.3, seed: int = 0) -> Path:
    """A random Qwen2 (or Llama) whose tokenizer is byte-level BPE with real merges, trained here on a few lines,
    and the pre-tokenizer of the real family (Qwen2's split, or SmolLM2's digits): what GGUF export and llama.cpp
    need, in a second. Weights drawn wider than usual (`init`) so greedy choices are not near-ties."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    from .sources import byte_level_tokenizer

    out = Path(out_dir)
    if (out / "model.safetensors").is_file():
        return out
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    lines = [f"What is {a}+{b}? Reply with just the number. The answer is {a + b}." for a in range(13)
             for b in range(13)]
    lines += ["Héllo wörld, naïve café — 日本語 🙂 tabs\tand  spaces.", "user assistant system message content"] * 20
    core.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    pre = "qwen2" if architecture == "qwen2" else "smollm"
    core = Tokenizer.from_str(json.dumps(byte_level_tokenizer(json.loads(core.to_str()), pre)))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  padding_side="left", clean_up_tokenization_spaces=False)
    tok.chat_template = CHATML
    torch.manual_seed(seed)
    shape = dict(vocab_size=core.get_vocab_size(), hidden_size=hidden, intermediate_size=2 * hidden,
                 num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                 tie_word_embeddings=True, initializer_range=init, eos_token_id=tok.eos_token_id,
                 pad_token_id=tok.pad_token_id)
    config, cls = (Qwen2Config(**shape), Qwen2ForCausalLM) if architecture == "qwen2" else \
        (LlamaConfig(**shape), LlamaForCausalLM)
    model = cls(config)
    return _save(model, tok, out)


def _save(model, tok, out: Path) -> Path:
    """A tiny model as a user's checkpoint: safetensors, its tokenizer, and generation that stops at EOS."""
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
