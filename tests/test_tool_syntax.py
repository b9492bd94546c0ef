"""A model whose chat template has its own tool-call format (Qwen2.5, Llama 3.x) is told its tools in it, calls in
it, and reads its results as the template's tool messages, as TRL's GRPOTrainer does; a model without one (SmolLM2)
gets the kit's `<tool>` syntax. The templates are TRL's own copies, set on the tiny test tokenizer."""

import json
from pathlib import Path

import pytest
import torch
import trl
from transformers import AutoTokenizer

import rloo_kit
from rloo_kit.tools import (
    TEMPLATE_TOOL_COMPLETION_LENGTH,
    TOOL_COMPLETION_LENGTH,
    calculator,
    in_model_format,
    roll_out,
    warm_start,
    with_tools,
    worked_examples,
)
from rloo_kit.tools.protocol import Call, run_call
from rloo_kit.tools.rollout import answer_text, text_codec
from rloo_kit.tools.syntax import TemplateSyntax, has_own_tool_format

TEMPLATES = Path(trl.__file__).parent / "chat_templates"


def _with_template(tok, name: str):
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return tok


@pytest.fixture
def qwen_tok(tiny_model_dir):
    return _with_template(AutoTokenizer.from_pretrained(tiny_model_dir), "qwen2_5")


@pytest.fixture
def llama_tok(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.add_special_tokens({"additional_special_tokens": ["<|begin_of_text|>", "<|start_header_id|>",
                                                          "<|end_header_id|>", "<|eot_id|>"]})
    tok.eos_token = "<|eot_id|>"
    return _with_template(tok, "llama3_2")


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


CALLED = Call(0, "", "calculator", (), {"expression": "3*4"})
QWEN_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call><|im_end|>'


def test_a_model_with_its_own_tool_format_is_told_in_it(tiny_model_dir, qwen_tok):
    plain = AutoTokenizer.from_pretrained(tiny_model_dir)  # ChatML without tool messages, as SmolLM2's
    task = rloo_kit.load_task("arithmetic", n_train=8, n_test=4)
    brief = lambda row: {"prompt": [{"role": "system", "content": "Be brief."}, *row["prompt"]]}  # noqa: E731
    task = task.replace(train=task.train.map(brief), test=task.test.map(brief), max_completion_length=None)
    assert not has_own_tool_format(plain) and has_own_tool_format(qwen_tok)
    assert with_tools(task, [calculator], tokenizer=plain).tool_format == "kit"
    own = with_tools(task, [calculator], tokenizer=qwen_tok)
    assert own.tool_format == "template" and own.train["prompt"] == task.train["prompt"]
    assert own.trainer_overrides()["chat_template_kwargs"]["tools"][0]["function"]["name"] == "calculator"
    kit = with_tools(task, [calculator])  # made before the model was loaded: the kit's syntax, in the system message
    assert "<tool>" in kit.train[0]["prompt"][0]["content"]
    assert kit.trainer_overrides().get("chat_template_kwargs") is None
    met = in_model_format(kit, qwen_tok)  # training, the pre-flight and evaluation switch it when they meet the model
    assert met.tool_format == "template" and met.test["prompt"] == task.test["prompt"]
    assert kit.max_completion_length == TOOL_COMPLETION_LENGTH  # room for a call in the kit's syntax
    assert met.max_completion_length == own.max_completion_length == TEMPLATE_TOOL_COMPLETION_LENGTH
    assert in_model_format(kit.replace(max_completion_length=200), qwen_tok).max_completion_length == 200
    assert in_model_format(met, qwen_tok) is met and in_model_format(kit, plain) is kit
    rendered = qwen_tok.apply_chat_template(met.test[0]["prompt"], tokenize=False, add_generation_prompt=True,
                                            **met.trainer_overrides()["chat_template_kwargs"])
    assert '"name": "calculator"' in rendered and "Be brief." in rendered and "<tool>" not in rendered


@pytest.mark.parametrize("template", ["qwen2_5", "llama3_2"])
def test_the_models_own_calls_are_read_and_answered_in_its_template(template, qwen_tok, llama_tok):
    tok = qwen_tok if template == "qwen2_5" else llama_tok
    syntax, tools = TemplateSyntax(tok), rloo_kit.tools.as_tools([calculator])
    decode, encode = text_codec(tok)
    llama_call = '{"name": "calculator", "parameters": {"expression": "3*4"}}<|eot_id|>'
    call = QWEN_CALL if template == "qwen2_5" else llama_call
    turn = _ids(tok, call)
    (found,), keep = syntax.read_turn(turn, decode, tools)
    assert (found.name, found.kwargs, found.problem, keep) == ("calculator", {"expression": "3*4"}, None, len(turn))
    assert run_call(found, tools) == ("12", True)
    result = tok.decode(syntax.result_ids([(found, "12")], encode))
    expected = ("\n<|im_start|>user\n<tool_response>\n12\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
                if template == "qwen2_5" else "ipython")
    assert expected in result and "12" in result
    assert syntax.read_turn(_ids(tok, f"The answer is 12.{tok.eos_token}"), decode, tools) is None
    if template == "qwen2_5":
        ((bad,), _) = syntax.read_turn(_ids(tok, '<tool_call>\n{"name": calc}\n</tool_call><|im_end|>'), decode, tools)
        assert bad.problem and not run_call(bad, tools)[1]  # an unreadable call is a call that failed, not text
        ((other,), _) = syntax.read_turn(_ids(tok, QWEN_CALL.replace("calculator", "abacus")), decode, tools)
        assert "no tool named abacus" in run_call(other, tools)[0]


def test_a_rollout_in_the_models_format_weighs_only_what_the_model_wrote(qwen_tok):
    tok, tools = qwen_tok, rloo_kit.tools.as_tools([calculator])
    syntax = TemplateSyntax(tok)
    answer = _ids(tok, "The answer is 12.<|im_end|>")

    def generate(rows, begun):
        assert all(tok.decode(b).endswith("<|im_start|>assistant\n") for b in begun)  # a new assistant turn
        return [answer for _ in rows]

    (r,) = roll_out(generate, [_ids(tok, QWEN_CALL)], *text_codec(tok), tools, max_length=200, syntax=syntax)
    call, result = _ids(tok, QWEN_CALL), syntax.result_ids([(CALLED, "12")], text_codec(tok)[1])
    assert (r.calls, r.valid) == (1, 1) and r.ids == call + result + answer
    assert r.weights == [1] * len(call) + [0] * len(result) + [1] * len(answer)
    decode = text_codec(tok)[0]
    assert answer_text(r, decode) == "The answer is 12."
    (cut,) = roll_out(generate, [_ids(tok, QWEN_CALL)], *text_codec(tok), tools,
                      max_length=len(call) + len(result) - 3, syntax=syntax)  # cut inside the new turn's header
    assert "12" in decode(cut.ids) and answer_text(cut, decode) == ""  # a tool's cut result is never scored


def test_the_cap_counts_calls_within_a_turn(qwen_tok):
    """The model's format may hold several calls in one turn: those past the cap are answered with an error, and
    the turn after the last one allowed is the answer, not read for calls."""
    tok, tools = qwen_tok, rloo_kit.tools.as_tools([calculator])
    syntax, (decode, encode) = TemplateSyntax(tok), text_codec(tok)
    two = QWEN_CALL.replace("<|im_end|>", "\n" + QWEN_CALL)
    again = _ids(tok, QWEN_CALL)
    (r,) = roll_out(lambda rows, begun: [again for _ in rows], [_ids(tok, two)], decode, encode, tools, max_calls=1,
                    max_length=400, syntax=syntax)
    assert (r.calls, r.valid) == (2, 1) and "at most 1 tool calls" in decode(r.ids)
    assert r.ids[-len(again):] == again  # the turn after the last call allowed is kept as written, never run


def test_worked_examples_are_written_in_the_models_format(qwen_tok):
    task = with_tools(rloo_kit.load_task("products", n_train=40, n_test=4), [calculator], tokenizer=qwen_tok)
    shown = worked_examples(task, task.tools[0], n=3, tokenizer=qwen_tok)
    assert json.loads(shown["tools"][0])[0]["function"]["name"] == "calculator"  # as JSON: TRL reads it so
    call, result, reply = shown[0]["completion"]
    a, op, b = shown[0]["prompt"][-1]["content"].removeprefix("What is ").rstrip("?").split()
    assert call["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": f"{a} {op} {b}"}}
    assert result["role"] == "tool" and reply["content"] == f"The answer is {result['content']}."


@pytest.mark.heavy
def test_training_evaluation_and_warm_start_run_in_the_models_format(tiny_model_dir, tmp_path, monkeypatch):
    """The trainer renders the tools through the template, reads a scripted call in the model's format, and gives
    its result weight 0; the pre-flight renders the same prompts; a warm-start trains on its worked examples."""
    from rloo_kit import preflight_check

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    _with_template(tok, "qwen2_5")
    eos = tok.eos_token_id

    def single_turn(prompt_ids, images, fields):  # a call first, an answer once the tool has answered
        said = [tok.decode(ids) for ids in prompt_ids]
        text = ["So 12." if "<tool_response>" in s else QWEN_CALL.removesuffix("<|im_end|>") for s in said]
        assert all('"name": "calculator"' in s for s in said)  # the template told the tools
        return [_ids(tok, t) + [eos] for t in text]

    task = with_tools(rloo_kit.load_task("products", n_train=16, n_test=4), [calculator]).replace(
        max_completion_length=200)  # the tiny tokenizer spends a token a byte
    trainer = rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir=str(tmp_path / "rl"), max_steps=1,
                                     per_device_train_batch_size=4, num_generations=2, save_strategy="no",
                                     live=False, seed=3, beta=0.1, chat_template_kwargs={"enable_thinking": False})
    assert trainer.kit_tool_format == "template" and trainer.args.chat_template_kwargs["tools"]
    assert trainer.args.chat_template_kwargs["enable_thinking"] is False  # asked for beside the template's tools
    assert "tool_rollouts" in trainer.rloo_kit_patches
    trainer._generate_single_turn = single_turn  # the model, scripted: what the rollout samples its turns with
    out = trainer._generate_and_score_completions([task.train[i] for i in range(2) for _ in range(2)])
    ids, weights = out["completion_ids"][0].tolist(), out["tool_weights"][0]
    result = TemplateSyntax(tok).result_ids([(CALLED, "12")], text_codec(tok)[1])
    start = next(i for i in range(len(ids)) if ids[i:i + len(result)] == result)
    assert weights[start:start + len(result)].eq(0).all() and weights[:start].eq(1).all()

    rendered = []
    real = preflight_check.generate_ids
    monkeypatch.setattr(preflight_check, "generate_ids",
                        lambda *a, **kw: rendered.append(kw.get("template_kwargs")) or real(*a, **kw))
    report = rloo_kit.preflight(model, tok, task, preset="cpu", n_prompts=2, num_generations=2, progress=False,
                                max_completion_length=8)
    assert report.tools is not None and rendered and all(r and r["tools"] for r in rendered)

    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    shown = worked_examples(in_model_format(task, tok), task.tools[0], n=4, tokenizer=tok)
    warmed = warm_start(trainer.model, tok, shown, output_dir=str(tmp_path / "sft"), epochs=1, batch_size=4)
    after = {n: p.detach() for n, p in warmed.named_parameters() if "lora_B" in n}
    assert any(not torch.equal(before[n], after[n]) for n in before)
