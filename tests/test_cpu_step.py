"""The CPU step: the LM head's contiguous input, grouped attention against transformers' eager
attention, the vectorised categorical draw, the lean sampler on bf16 and fp32 bases, and a step under
bf16 LoRA compute that still trains fp32 adapters. Behaviour only, never timing (benchmarks/roofline.py and
benchmarks/step_sampler.py measure the speed)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from rloo_kit.patches import attention, compat, cpu_step, patch_trainer_with

from .helpers import length_reward, plain_trainer


def _tiny(tiny_model_dir, dtype=torch.bfloat16, attn="sdpa"):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=dtype, attn_implementation=attn)
    return model, tok


def _batch(tok, texts=("Add 3 and 4, then say the sum.", "Hi")):
    return tok(list(texts), return_tensors="pt", padding=True)  # left padding: the second row is padded


# ------------------------------------------------------------------------ the LM head's input

def test_lm_head_gets_a_contiguous_input_once_hooked(tiny_model_dir):
    model, tok = _tiny(tiny_model_dir)
    seen = []
    compat.contiguous_lm_head_input(model)
    compat.contiguous_lm_head_input(model)  # idempotent: one hook
    model.lm_head.register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous()))
    batch = _batch(tok)
    with torch.no_grad():
        last = model(**batch, logits_to_keep=1).logits  # the slice generation's first step takes
        full = model(**batch).logits
    assert seen == [True, True]
    assert len(model.lm_head._forward_pre_hooks) == 2
    torch.testing.assert_close(last[:, -1], full[:, -1])


# ------------------------------------------------------------------------ grouped attention

def _logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits.float()[batch["attention_mask"].bool()]  # padded positions are undefined


def _errors(model, reference, batch):
    """Mean and largest logit error against the same weights in fp32."""
    err = (_logits(model, batch) - _logits(reference, batch)).abs()
    return err.mean().item(), err.max().item()


def test_grouped_attention_is_as_precise_as_sdpa(tiny_model_dir):
    model, tok = _tiny(tiny_model_dir)
    reference, _ = _tiny(tiny_model_dir)
    reference.float()  # the bf16 weights, computed in fp32
    batch = _batch(tok)
    sdpa = _errors(model, reference, batch)
    assert attention.use_cpu_attention(model)
    assert model.config._attn_implementation == attention.NAME
    grouped = _errors(model, reference, batch)
    assert grouped[0] <= 1.25 * sdpa[0] and grouped[1] <= 1.25 * sdpa[1], (grouped, sdpa)
    with torch.no_grad():  # the decoding steps: one query against the cache, padding included
        cached = model(**batch, use_cache=True)
        step = {"input_ids": cached.logits[:, -1].argmax(-1, keepdim=True),
                "attention_mask": torch.cat([batch["attention_mask"], torch.ones(2, 1, dtype=torch.long)], 1)}
        one = model(**step, past_key_values=cached.past_key_values).logits[:, -1].float()
        full = model(input_ids=torch.cat([batch["input_ids"], step["input_ids"]], 1),
                     attention_mask=step["attention_mask"]).logits[:, -1].float()
    torch.testing.assert_close(one, full, rtol=0, atol=0.05)


def test_grouped_attention_trains_like_sdpa(tiny_model_dir):
    grads = {}
    for attn in ("sdpa", attention.NAME):
        model, tok = _tiny(tiny_model_dir)
        attention.use_cpu_attention(model)
        model.set_attn_implementation(attn)
        model.get_input_embeddings().weight.requires_grad_(False)
        batch = _batch(tok, ("Add 3 and 4, then say the sum.", "Hi there, friend"))  # 2nd row: left padding
        labels = batch["input_ids"].clone()
        labels[:, :-4] = -100  # the last tokens, as RLOO scores completions (never a padded position's output)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # as the bf16 CPU step runs it
            model(**batch, labels=labels).loss.backward()
        grads[attn] = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    cosine = torch.nn.functional.cosine_similarity(grads[attention.NAME], grads["sdpa"], dim=0)
    assert cosine > 0.99
    assert grads[attention.NAME].norm() == pytest.approx(grads["sdpa"].norm().item(), rel=0.05)


def test_long_sequences_and_fp32_whole_sequences_go_to_sdpa(tiny_model_dir, monkeypatch):
    calls = []
    real = attention.sdpa_attention_forward
    monkeypatch.setattr(attention, "sdpa_attention_forward",
                        lambda module, q, *a, **k: calls.append(q.shape[2]) or real(module, q, *a, **k))
    monkeypatch.setattr(attention, "SHORT_KEYS", 4)
    batch = _batch(_tiny(tiny_model_dir)[1])
    prompt = batch["input_ids"].shape[1]
    for dtype in (torch.bfloat16, torch.float32):
        model, _ = _tiny(tiny_model_dir, dtype)
        attention.use_cpu_attention(model)
        calls.clear()
        model.generate(**batch, max_new_tokens=3, do_sample=False)
        assert calls == [prompt] * 2, dtype  # the prompt's pass (2 layers) is long; the decoding steps stay grouped
    calls.clear()
    with torch.no_grad():
        model(**batch)  # fp32 over whole sequences, short ones included: SDPA is as fast there
    assert calls == [prompt] * 2


def test_fp32_decoding_grouped_gives_the_logits_of_sdpa_over_the_whole_sequence(tiny_model_dir):
    model, tok = _tiny(tiny_model_dir, dtype=torch.float32)
    assert attention.use_cpu_attention(model)
    batch = _batch(tok)  # the second row left-padded
    with torch.no_grad():
        cached = model(**batch, use_cache=True)
        step = {"input_ids": cached.logits[:, -1].argmax(-1, keepdim=True),
                "attention_mask": torch.cat([batch["attention_mask"], torch.ones(2, 1, dtype=torch.long)], 1)}
        one = model(**step, past_key_values=cached.past_key_values).logits[:, -1]
        full = model(input_ids=torch.cat([batch["input_ids"], step["input_ids"]], 1),
                     attention_mask=step["attention_mask"]).logits[:, -1]
    torch.testing.assert_close(one, full, rtol=1e-5, atol=1e-5)


def test_only_sdpa_models_are_switched(tiny_model_dir):
    model, _ = _tiny(tiny_model_dir, attn="eager")
    assert not attention.use_cpu_attention(model)
    assert model.config._attn_implementation == "eager"


# ------------------------------------------------------------------------ the categorical draw

def test_models_loaded_outside_the_kit_get_grouped_attention(tiny_model_dir, tmp_path):
    from rloo_kit import build_trainer
    from rloo_kit.tasks import load_task

    task = load_task("arithmetic", n_train=8)
    for dtype in (torch.bfloat16, torch.float32):
        model, tok = _tiny(tiny_model_dir, dtype)
        trainer = build_trainer(model, tok, task, preset="cpu", output_dir=str(tmp_path), live=False, monitor=False)
        assert trainer.model.config._attn_implementation == attention.NAME, dtype


def test_categorical_draw_follows_the_probabilities():
    torch.manual_seed(0)
    probs = torch.tensor([[0.1, 0.0, 0.2, 0.7]]).repeat(40_000, 1)
    with cpu_step.categorical_sampling():
        assert torch.multinomial is not cpu_step._multinomial
        draws = torch.multinomial(probs, num_samples=1)
    assert torch.multinomial is cpu_step._multinomial
    assert draws.shape == (40_000, 1) and draws.dtype == torch.int64
    freq = torch.bincount(draws[:, 0], minlength=4).float() / len(draws)
    torch.testing.assert_close(freq, probs[0], rtol=0, atol=0.01)  # 5 standard errors at 0.7
    assert freq[1] == 0  # zero probability is never drawn
    with cpu_step.categorical_sampling():  # nor a zero at either end, nor in unnormalised weights
        assert set(torch.multinomial(torch.tensor([[0.0, 3.0, 1.0, 0.0]]).repeat(20_000, 1), 1).unique().tolist()) \
            == {1, 2}


def test_categorical_draw_refuses_what_torch_refuses():
    for bad in ([[0.5, float("nan"), 0.5]], [[0.5, -0.1, 0.6]], [[0.5, float("inf"), 0.5]], [[0.0, 0.0]]):
        with cpu_step.categorical_sampling(), pytest.raises(RuntimeError):
            torch.multinomial(torch.tensor(bad), num_samples=1)
    with cpu_step.categorical_sampling():  # several draws per row: torch's own sampler
        assert torch.multinomial(torch.tensor([[0.5, 0.5]]), num_samples=2, replacement=True).shape == (1, 2)
    assert torch.multinomial is cpu_step._multinomial


# ------------------------------------------------------------------------ packed base weights

needs_packing = pytest.mark.skipif(not cpu_step.packing_available(), reason="oneDNN bf16 kernels need AVX512")


@needs_packing
def test_packed_weights_compute_what_the_plain_weights_do(tiny_model_dir):
    model, tok = _lora(tiny_model_dir)
    frozen = [m for m in model.modules() if type(m) is torch.nn.Linear and not m.weight.requires_grad]
    assert cpu_step.pack_frozen_weights(model) == len(frozen) > 0  # the LM head and the adapted base layers
    assert cpu_step.pack_frozen_weights(model) == 0  # once
    batch = _batch(tok)
    with torch.no_grad():
        plain = model(**batch).logits
        with cpu_step.packed_weights(model):
            assert all("forward" in vars(m) for m in frozen)
            packed = model(**batch).logits  # 2 x 11 rows: the packed path
            with torch.enable_grad():  # training calls go to the plain weights, so that gradients flow
                assert model(**batch).logits.requires_grad
        assert not any("forward" in vars(m) for m in frozen)  # put back
        with model.disable_adapter():
            lora_off = model(**batch).logits
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(packed[mask].float(), plain[mask].float(), rtol=0, atol=0.05)
    assert (plain[mask] - lora_off[mask]).abs().max() > 0.5  # the adapter counts: 10x the tolerance above
    head = model.get_base_model().lm_head
    with torch.no_grad(), cpu_step.packed_weights(model):
        x = torch.randn(4, head.in_features, dtype=torch.bfloat16)
        head.weight.mul_(2)  # a weight changed in place is no longer the packed one: the plain path
        torch.testing.assert_close(head(x), torch.nn.functional.linear(x, head.weight))
        head.weight.div_(2)


def _lora(tiny_model_dir, dtype=torch.bfloat16, **config):
    from peft import LoraConfig, get_peft_model

    model, tok = _tiny(tiny_model_dir, dtype=dtype)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "down_proj"], **config))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=2.0)  # an adapter that changes the output, so that bypassing it would show
    return model, tok


@pytest.mark.parametrize("repeat,dtype", [(1, torch.bfloat16), (8, torch.bfloat16), (1, torch.float32),
                                          (8, torch.float32)],
                         ids=["bf16 decoding rows (fp32 products)", "a prompt's rows (bf16)", "fp32 decoding rows",
                              "a prompt's rows (fp32)"])
def test_lean_lora_computes_what_peft_does(tiny_model_dir, repeat, dtype):
    model, tok = _lora(tiny_model_dir, dtype=dtype)
    adapted = [m for m in model.modules() if hasattr(m, "lora_A") and "lora_A" in vars(m)["_modules"]]
    batch = _batch(tok, ("Add 3 and 4, then say the sum.", "Hi") * repeat)
    assert (batch["input_ids"].numel() <= cpu_step.PACKED_ROWS) == (repeat == 1)
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        peft = model(**batch).logits
        with cpu_step.lean_lora(model):
            assert len(adapted) == 4 and all("forward" in vars(m) for m in adapted)
            lean = model(**batch).logits
            with torch.enable_grad():  # a training call goes to PEFT, so that the adapter gets gradients
                model(**batch).logits.float().sum().backward()
        assert not any("forward" in vars(m) for m in adapted)  # put back
    atol = 0.05 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(lean[mask].float(), peft[mask].float(), rtol=0, atol=atol)
    assert all(m.lora_A["default"].weight.grad is not None for m in adapted)


def _autocast_pass(model, batch, lean: bool):
    """Logits and adapter gradients of one bf16 autocast pass, as the CPU step runs it (PEFT's casts off)."""
    from peft.helpers import disable_input_dtype_casting

    model.zero_grad()
    mask = batch["attention_mask"].bool()
    with (torch.autocast("cpu", dtype=torch.bfloat16), disable_input_dtype_casting(model),
          cpu_step.lean_lora_training(model) if lean else contextlib.nullcontext()):
        logits = model(**batch).logits.float()[mask]
        logits.logsumexp(-1).mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_lean_lora_training_computes_and_trains_what_peft_does(tiny_model_dir):
    model, tok = _lora(tiny_model_dir)
    batch = _batch(tok)
    peft_logits, peft_grads = _autocast_pass(model, batch, lean=False)
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    lean_calls = []
    q_proj.register_forward_hook(lambda m, i, o: lean_calls.append("forward" in vars(m)))
    lean_logits, lean_grads = _autocast_pass(model, batch, lean=True)
    assert lean_calls == [True]  # the kit's forward ran, not PEFT's
    assert not any("forward" in vars(m) for m in model.modules())  # put back
    torch.testing.assert_close(lean_logits, peft_logits, rtol=0, atol=0.05)
    assert set(lean_grads) == set(peft_grads) and len(peft_grads) == 8  # A and B of 4 adapters, nothing else
    for name, grad in peft_grads.items():
        assert lean_grads[name].dtype == torch.float32
        cosine = torch.nn.functional.cosine_similarity(lean_grads[name].flatten(), grad.flatten(), dim=0)
        assert cosine > 0.99, name


def test_lean_lora_training_leaves_disabled_adapters_to_peft(tiny_model_dir):
    from peft.helpers import disable_input_dtype_casting

    model, tok = _lora(tiny_model_dir)
    batch = _batch(tok)
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), disable_input_dtype_casting(model):
        with model.disable_adapter():
            base = model(**batch).logits
        with cpu_step.lean_lora_training(model):  # as in the step: the reference pass switches adapters off inside
            assert "forward" in vars(q_proj)
            with model.disable_adapter():
                off = model(**batch).logits  # the base model alone
            on = model(**batch).logits
    torch.testing.assert_close(off, base, rtol=0, atol=0)
    assert not torch.allclose(on, base)


def test_sampling_inside_the_training_step_keeps_both_forwards(tiny_model_dir):
    model, _ = _lora(tiny_model_dir)
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    with cpu_step.lean_lora_training(model):
        training = vars(q)["forward"]
        with cpu_step.lean_lora(model):
            assert vars(q)["forward"] is not training
        assert vars(q)["forward"] is training  # the sampler's exit restores the step's forward
    assert "forward" not in vars(q)


def test_sampling_without_autocast_casts_inputs_for_peft(tiny_model_dir):
    model, tok = _lora(tiny_model_dir, lora_dropout=0.1)  # not a plain adapter: PEFT runs it
    model.eval()
    batch = _batch(tok)
    with torch.no_grad(), cpu_step.input_casts(model, False):
        with pytest.raises(RuntimeError):  # bf16 inputs against fp32 adapters, neither cast nor autocast
            model(**batch)
        with cpu_step.input_casts(model, True):
            assert torch.isfinite(model(**batch).logits).all()
        q = model.base_model.model.model.layers[0].self_attn.q_proj
        assert q.cast_input_dtype_enabled is False  # the step's setting is back


def test_lean_lora_leaves_dropout_and_disabled_adapters_to_peft(tiny_model_dir):
    model, tok = _lora(tiny_model_dir, lora_dropout=0.1)
    with cpu_step.lean_lora(model):
        assert not any("forward" in vars(m) for m in model.modules())
    model, tok = _lora(tiny_model_dir)
    with model.disable_adapter(), cpu_step.lean_lora(model):
        assert not any("forward" in vars(m) for m in model.modules())


def test_reference_switch_computes_the_base_model_and_restores_the_adapters(tiny_model_dir, monkeypatch):
    from peft import PeftModel

    model, tok = _lora(tiny_model_dir)
    batch = _batch(tok)
    scans = []
    real_status = PeftModel.get_model_status
    monkeypatch.setattr(PeftModel, "get_model_status", lambda self: scans.append(1) or real_status(self))
    switch = cpu_step._no_grad_disable_adapter(model, cpu_step.tuner_layers(model))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    with torch.no_grad():
        with model.disable_adapter():
            base = model(**batch).logits
        assert len(scans) == 1
        with switch():
            assert model._adapters_disabled and all(m.disable_adapters for m in cpu_step.tuner_layers(model))
            off = model(**batch).logits
        on = model(**batch).logits
    assert len(scans) == 1  # no status scan for the no-grad pass
    torch.testing.assert_close(off, base, rtol=0, atol=0)
    assert not torch.allclose(on, base) and not model._adapters_disabled
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable
    with switch():  # gradients on: PEFT's own switch, status scan and all
        pass
    assert len(scans) == 2


def test_reference_switch_leaves_prompt_learning_to_peft(tiny_model_dir):
    from peft import PromptTuningConfig, get_peft_model

    model, tok = _tiny(tiny_model_dir)
    model = get_peft_model(model, PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4))
    batch = _batch(tok)
    switch = cpu_step._no_grad_disable_adapter(model, cpu_step.tuner_layers(model))
    with torch.no_grad():
        with model.disable_adapter():
            base = model(**batch).logits
        with switch():
            off = model(**batch).logits
    torch.testing.assert_close(off, base, rtol=0, atol=0)  # no LoRA layers to flip: PEFT's own switch


# ------------------------------------------------------------------------ prompts read once

def _generate(model, batch, shared: bool):
    from transformers import GenerationConfig

    shapes = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape[:2])))
    config = GenerationConfig(do_sample=False, max_new_tokens=6, min_new_tokens=6, pad_token_id=0,
                              output_logits=True, return_dict_in_generate=True)
    with torch.no_grad(), cpu_step.shared_prompts(model) if shared else contextlib.nullcontext():
        out = model.generate(**batch, generation_config=config)
    hook.remove()
    return out, shapes


def test_repeated_prompts_are_read_once_and_generate_the_same(tiny_model_dir):
    model, tok = _tiny(tiny_model_dir, dtype=torch.float32)  # fp32: the same tokens exactly
    texts = ["Add 3 and 4, then say the sum.", "Hi"]
    batch = _batch(tok, [t for t in texts for _ in range(3)])  # 3 completions a prompt, one prompt padded
    plain, plain_shapes = _generate(model, batch, shared=False)
    shared, shared_shapes = _generate(model, batch, shared=True)
    assert torch.equal(shared.sequences, plain.sequences)
    torch.testing.assert_close(torch.stack(shared.logits), torch.stack(plain.logits))
    n = batch["input_ids"].shape[1]
    assert plain_shapes[0] == (6, n) and shared_shapes[:2] == [(2, n - 1), (6, 1)]  # 2 prompts, then 6 rows
    assert "generate" not in vars(model)  # put back
    distinct = _batch(tok, texts)
    assert _generate(model, distinct, shared=True)[1][0] == (2, distinct["input_ids"].shape[1])  # as before


def test_a_cache_that_cannot_be_copied_row_by_row_generates_from_the_prompts_as_they_came(tiny_model_dir,
                                                                                           monkeypatch):
    """A quantized cache or a recurrent state is not narrowed by `batch_select_indices`: generation then reads
    every row's prompt itself, and gives what it gives without the kit."""
    model, tok = _tiny(tiny_model_dir, dtype=torch.float32)
    batch = _batch(tok, [t for t in ["Add 3 and 4, then say the sum.", "Hi"] for _ in range(3)])
    plain, _ = _generate(model, batch, shared=False)
    monkeypatch.setattr(cpu_step, "narrowable", lambda cache: False)
    fallen_back, shapes = _generate(model, batch, shared=True)
    assert torch.equal(fallen_back.sequences, plain.sequences)
    n = batch["input_ids"].shape[1]
    assert shapes[:2] == [(2, n - 1), (6, n)]  # the distinct prompts read, then every row from its start


@needs_packing
def test_fp32_and_trainable_layers_are_not_packed(tiny_model_dir):
    model, _ = _tiny(tiny_model_dir, dtype=torch.float32)
    assert cpu_step.pack_frozen_weights(model) == 0
    model, _ = _tiny(tiny_model_dir)
    for p in model.parameters():
        p.requires_grad_(True)  # trainable weights change every step: never packed
    assert cpu_step.pack_frozen_weights(model) == 0


# ------------------------------------------------------------------------ the whole step

def _trainer(tiny_model_dir, tmp_path, overrides, dtype):
    model, tok = _tiny(tiny_model_dir, dtype=dtype)
    attention.use_cpu_attention(model)
    return plain_trainer(model, tok, tmp_path / str(dtype), overrides, length_reward, targets=("q_proj", "down_proj"))


def test_bf16_step_trains_fp32_adapters_and_leaves_the_base_alone(tiny_model_dir, tmp_path, cpu_tiny_overrides,
                                                                   monkeypatch):
    trainer = _trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides, torch.bfloat16)
    assert cpu_step.speed_up_cpu_step(trainer)
    assert not cpu_step.speed_up_cpu_step(trainer)  # once per trainer
    draws, autocast = [], []
    real = cpu_step._categorical
    monkeypatch.setattr(cpu_step, "_categorical", lambda *a, **k: draws.append(1) or real(*a, **k))
    q_proj = trainer.model.base_model.model.model.layers[0].self_attn.q_proj
    q_proj.register_forward_hook(lambda m, i, o: autocast.append((torch.is_autocast_enabled("cpu"), o.dtype)))
    switched = []  # the reference pass's adapter switch, PEFT's or the kit's
    q_proj.register_forward_hook(
        lambda m, i, o: None if torch.is_grad_enabled() else switched.append(m.disable_adapters))
    scans = []
    real_status = type(trainer.model).get_model_status
    monkeypatch.setattr(type(trainer.model), "get_model_status", lambda self: scans.append(1) or real_status(self))
    base = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" not in n}
    trainer.train()
    # bf16 out of the adapted layer: sampling without autocast (the sampler picks dtypes), scoring under it
    assert set(autocast) == {(False, torch.bfloat16), (True, torch.bfloat16)}
    lora = {n: p for n, p in trainer.model.named_parameters() if "lora_" in n}
    assert {p.dtype for p in lora.values()} == {torch.float32}
    assert any(p.abs().sum() > 0 for n, p in lora.items() if "lora_B" in n)  # zero at the start: it learned
    assert all(torch.equal(p, base[n]) for n, p in trainer.model.named_parameters() if "lora_" not in n)
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2 and all(h["completions/mean_length"] > 0 for h in logs)
    assert trainer.args.beta > 0 and switched.count(True) == 2 and not scans  # one reference pass a step, no scan
    assert len(draws) == sum(h["completions/max_length"] for h in logs)  # one draw per token of the longest
    packed = hasattr(trainer.model.get_base_model().lm_head, "_rloo_kit_packed")
    assert packed == cpu_step.packing_available()  # sampled with packed weights where oneDNN can


def test_fp32_steps_sample_lean_and_train_in_fp32(tiny_model_dir, tmp_path, cpu_tiny_overrides, monkeypatch):
    """A CPU without a bf16 unit: the sampler's lean LoRA, shared prompts and draw, no bf16 autocast anywhere."""
    trainer = _trainer(tiny_model_dir, tmp_path, cpu_tiny_overrides, torch.float32)
    outcomes = {o.patch.name: o.status for o in patch_trainer_with(trainer, ("cpu_sampler", "cpu_bf16_step"))}
    assert outcomes == {"cpu_sampler": "applied", "cpu_bf16_step": "not needed"}
    draws, calls = [], []
    real = cpu_step._categorical
    monkeypatch.setattr(cpu_step, "_categorical", lambda *a, **k: draws.append(1) or real(*a, **k))
    q_proj = trainer.model.base_model.model.model.layers[0].self_attn.q_proj
    q_proj.register_forward_hook(lambda m, i, o: calls.append((torch.is_grad_enabled(), "forward" in vars(m),
                                                               torch.is_autocast_enabled("cpu"), o.dtype)))
    base = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" not in n}
    trainer.train()
    sampling = [c for c in calls if not c[0] and c[1]]  # no-grad passes through the kit's lean forward
    assert sampling and all(c[3] == torch.float32 for c in calls) and not any(c[2] for c in calls)
    assert any(c[0] and not c[1] for c in calls)  # the loss's forward is PEFT's, with gradients
    assert "training_step" not in vars(trainer)
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(draws) == sum(h["completions/max_length"] for h in logs)  # one draw per token of the longest
    lora = {n: p for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert any(p.abs().sum() > 0 for p in lora.values())  # zero at the start: it learned
    assert all(torch.equal(p, base[n]) for n, p in trainer.model.named_parameters() if "lora_" not in n)
