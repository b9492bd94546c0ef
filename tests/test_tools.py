"""RLOO with tools: calls parsed and run in the rollout, errors and runaway loops answered, a tool's tokens weighing
nothing in the KL and the loss, and a step without calls exactly TRL's."""

import pytest
import torch

import rloo_kit
from rloo_kit.errors import ConfigError
from rloo_kit.patches.tool_rollouts import use_tool_rollouts
from rloo_kit.tools import as_tools, calculator, instructions, roll_out, warm_start, with_tools, worked_examples
from rloo_kit.tools.protocol import final_message, find_call, run_call


def add(a: int, b: int) -> int:
    """Add two whole numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def broken(x: int) -> int:
    """Always fails.

    Args:
        x: anything
    """
    raise RuntimeError("the tool broke")


TOOLS = as_tools([add, broken, calculator])


def test_calls_are_parsed_never_evaluated():
    call = find_call('I will add. <tool>add(2, b=3)</tool> then', TOOLS)
    assert (call.name, call.args, call.kwargs, call.problem) == ("add", (2,), {"b": 3}, None)
    assert run_call(call, TOOLS) == ("5", True)
    assert find_call("no call here <tool>add(1, 2)", TOOLS) is None  # not closed: not a call yet
    for text, words in [("<tool>__import__('os').system('x')</tool>", "cannot read the call"),
                        ("<tool>__import__('os')</tool>", "no tool named __import__"),
                        ("<tool>add(1, len('ab'))</tool>", "cannot read the call"),
                        ("<tool>add(1,</tool>", "cannot read the call"),
                        ("<tool>add(1)</tool>", "TypeError"), ("<tool>broken(1)</tool>", "the tool broke")]:
        result, ok = run_call(find_call(text, TOOLS), TOOLS)
        assert not ok and result.startswith("error: ") and words in result, (text, result)
    assert calculator("127 * 48") == "6096" and calculator("-(3 + 4) ** 2") == "-49"
    with pytest.raises(ValueError):
        calculator("__import__('os')")


def test_a_tool_must_say_what_it_does():
    def undocumented(x: int) -> int:
        return x

    with pytest.raises(ConfigError, match="docstring"):
        as_tools([undocumented])
    with pytest.raises(ConfigError, match="share a name"):
        as_tools([add, add])
    text = instructions(as_tools([calculator]))
    assert "calculator(expression: string)" in text
    assert '<tool>calculator("127 * 48")</tool><result>6096</result>' in text


CHARS = {"decode": lambda ids: "".join(map(chr, ids)), "encode": lambda text: list(map(ord, text))}


def scripted(turns: dict[int, str]):
    """A model that writes turns[n] at its n-th turn of each row (the last one for any later turn)."""
    seen: dict[int, int] = {}

    def generate(rows, begun):
        out = []
        for row in rows:
            seen[row] = seen.get(row, 0) + 1
            out.append(CHARS["encode"](turns[min(seen[row], max(turns))]))
        return out

    return generate


def test_a_rollout_runs_calls_and_weighs_the_tools_tokens_zero():
    first = [CHARS["encode"]("<tool>add(2, 3)</tool> and some more"), CHARS["encode"]("It is 4.")]
    rollouts = roll_out(scripted({1: " So 5."}), first, **CHARS, tools=TOOLS, max_length=100)
    called, alone = rollouts
    text = CHARS["decode"](called.ids)
    assert text == "<tool>add(2, 3)</tool><result>5</result> So 5."  # what followed the call was not kept
    assert [w for w, c in zip(called.weights, text, strict=True) if w == 0] == [0] * len("<result>5</result>")
    assert text[called.weights.index(0):].startswith("<result>")
    assert (called.calls, called.valid) == (1, 1) and final_message(text) == "So 5."
    assert alone.ids == first[1] and alone.weights == [1] * len(first[1]) and alone.calls == 0


def test_errors_come_back_and_the_cap_ends_a_loop():
    loop = "<tool>broken(1)</tool>"
    rollouts = roll_out(scripted({1: loop}), [CHARS["encode"](loop)], **CHARS, tools=TOOLS, max_calls=3,
                        max_length=400)
    (r,) = rollouts
    assert (r.calls, r.valid) == (3, 0) and CHARS["decode"](r.ids).count("error: RuntimeError: the tool broke") == 3
    (cut,) = roll_out(scripted({1: loop}), [CHARS["encode"](loop)], **CHARS, tools=TOOLS, max_length=30)
    assert len(cut.ids) == 30 and cut.calls == 1  # the length cap holds whatever the tools write


def _trainer(tiny_model_dir, tmp_path, task, length: int = 12):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    return rloo_kit.build_trainer(model, tok, task, preset="cpu", output_dir=str(tmp_path), max_steps=2,
                                  per_device_train_batch_size=4, num_generations=2, max_completion_length=length,
                                  save_strategy="no", live=False, seed=3, beta=0.1)


@pytest.mark.heavy
def test_without_calls_a_step_is_trls_step(tiny_model_dir, tmp_path):
    task = with_tools(rloo_kit.load_task("arithmetic", n_train=16, n_test=4), [add])
    assert task.tools and task.train[0]["prompt"][0]["role"] == "system"
    runs = []
    for tools in (True, False):
        trainer = _trainer(tiny_model_dir, tmp_path / str(tools), task if tools else task.replace(tools=()))
        assert ("tool_rollouts" in trainer.rloo_kit_patches) is tools
        rloo_kit.train(trainer)
        runs.append(trainer)
    logs = [[h for h in t.state.log_history if "reward" in h] for t in runs]
    assert len(logs[0]) == 2 and all(h["tools/call_rate"] == 0 for h in logs[0])  # the tiny model never calls
    for key in ("reward", "reward_std", "loss", "kl", "completions/mean_length"):
        assert [h[key] for h in logs[0]] == [h[key] for h in logs[1]], key
    weights = [{n: p.detach() for n, p in t.model.named_parameters() if "lora_" in n} for t in runs]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][n], weights[1][n]) for n in weights[0])


@pytest.mark.heavy
def test_a_tools_tokens_weigh_nothing_and_errors_come_back_as_results(tiny_model_dir, tmp_path):
    """A scripted first turn calls `add`; its result's tokens have weight 0 in the reference log-probs (the KL)
    and in the log-probs the loss is computed from; the rewards read the last message."""
    task = with_tools(rloo_kit.load_task("arithmetic", n_train=8, n_test=4), [add])
    trainer = _trainer(tiny_model_dir, tmp_path, task.replace(tools=()), length=64)
    tok = trainer.processing_class
    eos = tok.eos_token_id

    def single_turn(prompt_ids, images, fields):  # the model: a call first, an answer once it has a result
        said = [tok.decode(ids) for ids in prompt_ids]
        text = [" So 5." if s.endswith("</result>") else "<tool>add(2, 3)</tool>" for s in said]
        return [tok(t, add_special_tokens=False)["input_ids"] + [eos] for t in text]

    trainer._generate_single_turn = single_turn
    trainer.kit_tools, trainer.max_tool_calls = as_tools([add]), 2
    assert use_tool_rollouts(trainer)
    seen = []
    trainer.reward_funcs[0] = _spy(trainer.reward_funcs[0], seen)
    captured = []
    inner = trainer._get_per_token_logps_and_entropies

    def spy(*args, **kwargs):  # what the scoring pass (old and reference log-probs) and the loss receive
        got = inner(*args, **kwargs)
        captured.append(got[0])
        return got

    trainer._get_per_token_logps_and_entropies = spy
    inputs = [task.train[i] for i in range(2) for _ in range(2)]
    trainer.model.train()
    tokens_before = trainer.state.num_input_tokens_seen
    out = trainer._generate_and_score_completions(inputs)
    weights, mask = out["tool_weights"], out["completion_mask"]
    result = tok("<result>5</result>", add_special_tokens=False)["input_ids"]
    ids = out["completion_ids"][0].tolist()
    start = next(i for i in range(len(ids)) if ids[i:i + len(result)] == result)
    assert weights[0, start:start + len(result)].eq(0).all() and weights[0, :start].eq(1).all()
    assert len(captured) == 2  # the policy's (old) and the reference's log-probs, from which the KL is taken
    for logps in captured:
        assert logps[weights == 0].eq(0).all() and logps[(weights == 1) & (mask == 1)].ne(0).all()
    assert all(c == [{"role": "assistant", "content": "So 5."}] for c in seen[0])  # the last message only
    logged = trainer._metrics["train"]  # the whole rollouts' lengths, not the first turn's; each ended
    first_turn = len(tok("<tool>add(2, 3)</tool>", add_special_tokens=False)["input_ids"]) + 1
    assert logged["completions/mean_length"][-1] == mask.sum(1).float().mean().item() > first_turn
    assert logged["completions/clipped_ratio"][-1] == 0.0
    counted = trainer.state.num_input_tokens_seen - tokens_before
    assert counted == out["prompt_mask"].sum().item() + mask.sum().item()  # every token of the rollouts, not the turn's
    assert logged["num_tokens"] == [trainer.state.num_input_tokens_seen]
    captured.clear()
    trainer.compute_loss(trainer.model, out)
    assert captured and captured[-1][weights == 0].eq(0).all() and captured[-1].requires_grad

    def answer_cut(prompt_ids, images, fields):  # the first turn ends; the answer after the result does not
        said = [tok.decode(ids) for ids in prompt_ids]
        return [tok(" So 5" if s.endswith("</result>") else "<tool>add(2, 3)</tool>", add_special_tokens=False)
                ["input_ids"] + ([] if s.endswith("</result>") else [eos]) for s in said]

    trainer._generate_single_turn = answer_cut
    trainer._generate_and_score_completions(inputs)
    assert logged["completions/clipped_ratio"][-1] == 1.0  # cut, though TRL logged its first turn as ended


def _spy(fn, seen):
    def reward(prompts, completions, **kwargs):
        seen.append(completions)
        return fn(prompts=prompts, completions=completions, **kwargs)

    reward.__name__ = getattr(fn, "__name__", "reward")
    return reward


def test_evaluation_runs_the_same_tool_loop(tiny_model_dir, monkeypatch):
    from rloo_kit import evaluation

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    data = with_tools(rloo_kit.load_task("arithmetic", n_train=8, n_test=4), [add]).test.select(range(2))

    def scripted_ids(model, tokenizer, prompts, *, samples=1, prefixes=None, **kw):
        text = (lambda i: " So 5.") if prefixes else (lambda i: "<tool>add(2, 3)</tool>" if i == 0 else "It is 7.")
        return [[tok(text(i), add_special_tokens=False)["input_ids"]] * samples for i in range(len(prompts))]

    monkeypatch.setattr(evaluation, "generate_ids", scripted_ids)
    report = evaluation.evaluate(model, tok, data, tools=as_tools([add]), max_new_tokens=64)
    assert [r["completion"] for r in report.completions] == ["So 5.", "It is 7."]
    assert [r["tool_calls"] for r in report.completions] == [1, 0] and report.tools["call_rate"] == 0.5
    assert set(report.summary()) >= {"tools/call_rate", "tools/accuracy_with_call", "tools/accuracy_without_call"}


def test_the_preflight_rolls_out_with_tools_and_names_a_tool_never_called(tiny_model_dir):
    """The tiny random model never writes a call: the pre-flight measures it with the tools in the rollout and
    says so, blocking where the answers are wrong without the tool."""
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    task = with_tools(rloo_kit.load_task("arithmetic", n_train=16, n_test=4), [calculator]).replace(
        max_completion_length=8)
    report = rloo_kit.preflight(model, tok, task, preset="cpu", n_prompts=4, num_generations=2, progress=False)
    assert report.tools == {"call_rate": 0.0, "calls": 0.0, "valid_call_rate": None, "cannot_demonstrate": []}
    (unused,) = [p for p in report.problems if p.kind == "tool_unused"]
    assert unused.blocking and "0% of 8 samples" in unused.message and "--tool-warm-start" in unused.fix
    assert "demonstrate" not in unused.fix  # the calculator shows its own worked calls
    assert "tools: 0% of the samples call one" in str(report)
    own = rloo_kit.preflight(model, tok, task.replace(tools=tuple(as_tools([add]))), preset="cpu", n_prompts=4,
                             num_generations=2, progress=False)
    (unused,) = [p for p in own.problems if p.kind == "tool_unused"]
    assert "`add.demonstrate = my_function`" in unused.fix  # a tool of one's own: how to make the warm-start work


def test_a_task_with_tools_gets_room_for_a_call_unless_it_has_a_length():
    from rloo_kit.tools import TOOL_COMPLETION_LENGTH

    file_task = rloo_kit.load_task("products", n_train=8, n_test=2).replace(max_completion_length=None)
    assert with_tools(file_task, [calculator]).max_completion_length == TOOL_COMPLETION_LENGTH
    assert with_tools(file_task.replace(max_completion_length=24), [calculator]).max_completion_length == 24


def test_the_command_line_names_tools_built_in_or_from_a_file(tmp_path, capsys):
    from rloo_kit.cli import main
    from rloo_kit.tools import load_tools

    mine = tmp_path / "my_tools.py"
    mine.write_text('def double(x: int) -> int:\n    """Twice x.\n\n    Args:\n        x: a number\n    """\n'
                    "    return 2 * x\n\n\ndef bare(x):\n    return x\n")
    assert [t.name for t in load_tools(["calculator", f"{mine}:double"])] == ["calculator", "double"]
    for spec, words in [("abacus", "name a built-in tool (calculator)"), (f"{mine}:bare", "docstring"),
                        (f"{mine}:missing", "has no function 'missing'"), ("nowhere.py:f", "not a file")]:
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            load_tools([spec])
    assert main(["preflight", "--task", "arithmetic", "--tools", "abacus"]) == 2
    err = capsys.readouterr().err
    assert "--tools 'abacus'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.heavy
def test_a_run_with_tools_through_the_command(tiny_model_dir, tmp_path, capsys):
    import json

    from rloo_kit.cli import main

    from .helpers import train_args

    out, tools = tmp_path / "run", tmp_path / "t.py"  # a terse tool: the tiny model's tokens are single bytes
    tools.write_text('def add(a: int, b: int) -> int:\n    """Sum.\n\n    Args:\n        a: a\n        b: b\n    """\n'
                     "    return a + b\n")
    assert main(train_args(tiny_model_dir, out, "--tools", f"{tools}:add", "--max-tool-calls", "2",
                           "--max-completion-length", "16", steps=2)) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert "tool_rollouts" in m["config"]["patches"]
    assert m["config"]["tool_format"] == "kit"  # the tiny model's template, as SmolLM2's, has no tool messages
    assert m["before"]["tools/call_rate"] == 0.0 and "tools/call_rate" in m["after"]
    assert f"{tools}:add" in (out / "recipe.yaml").read_text()  # the recipe runs it again with its tool
    assert "| tool calls 0.00 |" in capsys.readouterr().out  # each step's line shows the call rate


def test_worked_examples_come_from_training_rows_and_give_their_answers():
    task = with_tools(rloo_kit.load_task("products", n_train=40, n_test=4), [calculator])
    shown = worked_examples(task, task.tools[0], n=6)
    assert len(shown) == 6 and set(map(str, shown["prompt"])) <= set(map(str, task.train["prompt"]))
    for prompt, completion in zip(shown["prompt"], shown["completion"], strict=True):
        text = completion[0]["content"]
        (a, op, b) = prompt[-1]["content"].removeprefix("What is ").rstrip("?").split()
        answer = str(int(a) * int(b) if op == "*" else int(a) + int(b))
        assert text == f'<tool>calculator("{a} {op} {b}")</tool><result>{answer}</result> The answer is {answer}.'
    with pytest.raises(ValueError, match="demonstrate"):
        worked_examples(task, as_tools([add])[0])


@pytest.mark.heavy
def test_a_warm_start_trains_the_adapter_on_the_completions(tiny_model_dir, tmp_path):
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    model = rloo_kit.attach_lora(model, preset="cpu")
    task = with_tools(rloo_kit.load_task("products", n_train=16, n_test=4), [calculator])
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    model = warm_start(model, tok, worked_examples(task, task.tools[0], n=4), output_dir=str(tmp_path), epochs=1,
                       batch_size=4)
    after = {n: p.detach() for n, p in model.named_parameters() if "lora_B" in n}
    assert before.keys() == after.keys() and any(not torch.equal(before[n], after[n]) for n in before)


def test_a_warm_start_takes_the_same_steps_whatever_trainer_defaults_unsloth_sets(monkeypatch, tmp_path):
    # on an H100, Unsloth's SFTConfig (accumulation 2, 10% warm-up) turned 16 examples x 3 epochs into 3 optimizer
    # steps, the first at learning rate 0, and the model still never called its tool
    import dataclasses

    import trl

    import rloo_kit.patches

    @dataclasses.dataclass
    class UnslothLikeConfig(trl.SFTConfig):
        warmup_steps: float = 0.1
        weight_decay: float = 0.001
        gradient_accumulation_steps: int = 2

    built = []

    class Stop(Exception):
        pass

    def recording_trainer(*, args, **_):
        built.append(args)
        raise Stop

    monkeypatch.setattr(trl, "SFTConfig", UnslothLikeConfig)
    monkeypatch.setattr(trl, "SFTTrainer", recording_trainer)
    monkeypatch.setattr(rloo_kit.patches, "patch_before_trainer", lambda model, config: None)
    task = with_tools(rloo_kit.load_task("products", n_train=16, n_test=4), [calculator])
    with pytest.raises(Stop):
        warm_start(None, None, worked_examples(task, task.tools[0], n=4), output_dir=str(tmp_path), preset="cpu")
    (args,) = built
    assert (args.gradient_accumulation_steps, args.warmup_steps, args.weight_decay) == (1, 0, 0.0)


@pytest.mark.heavy
def test_a_resumed_warmed_run_keeps_the_warmed_model_as_its_reference(tiny_model_dir, tmp_path):
    """RLOO keeps a warmed model near the warmed model, not the base: a resumed run restores the warm-up's adapter
    before TRL copies it into its reference (the checkpoint then restores the trained adapter over it)."""
    from peft import load_peft_weights

    from rloo_kit.cli import main
    from rloo_kit.pipeline import Run
    from rloo_kit.tasks import plan_run

    from .helpers import train_args

    out, tools = tmp_path / "run", tmp_path / "t.py"  # terse: the tiny model's tokens are single bytes
    tools.write_text('import re\n\n\ndef add(a: int, b: int) -> int:\n    """Sum.\n\n    Args:\n        a: a\n'
                     '        b: b\n    """\n    return a + b\n\n\ndef shown(question):\n'
                     '    found = re.search(r"(\\d+) \\+ (\\d+)", question)\n'
                     '    return found and f"add({found[1]}, {found[2]})"\n\n\nadd.demonstrate = shown\n')
    assert main(train_args(tiny_model_dir, out, "--task", "products", "--tools", f"{tools}:add", "--tool-warm-start",
                           "4", "--preflight-prompts", "2", "--max-completion-length", "16", "--force", steps=1)) == 0
    warmed = load_peft_weights(str(out / "warmup" / "adapter"))
    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    (add_tool,) = rloo_kit.tools.load_tools([f"{tools}:add"])
    task = with_tools(rloo_kit.load_task("products", n_test=4), [add_tool]).replace(max_completion_length=16)
    run = Run(plan_run(str(tiny_model_dir), "products", "cpu"), task, rloo_kit.attach_lora(model, preset="cpu"), tok,
              output_dir=out, per_device_train_batch_size=4, num_generations=2, save_strategy="no")
    run.refit()
    ref = {n.replace(".ref.", "."): p for n, p in run.build_trainer().model.named_parameters() if ".ref." in n}
    assert ref and ref.keys() == warmed.keys() and any(w.abs().sum() > 0 for k, w in warmed.items() if "lora_B" in k)
    assert all(torch.equal(ref[k].detach().cpu(), warmed[k].to(ref[k].dtype)) for k in ref)
    assert run.report.warm_up["examples"] == 4
