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
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
