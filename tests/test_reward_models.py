"""Reward models from preferences (train-rm, load_reward_model, --reward-model), the gold monitor and the
reward_hacking diagnosis: on the tiny offline model, in seconds to a minute."""

import json
import random
from argparse import Namespace

import pytest
from datasets import Dataset

import rloo_kit
from rloo_kit import ConfigError, DataError, RewardError
from rloo_kit.cli import _with_reward_model, main
from rloo_kit.presets import RM_PRESETS, RewardModelPreset, rm_preset
from rloo_kit.reward_models import load_preferences, pair_accuracy, pair_text, split_preferences
from rloo_kit.rewards import completion_text


def preference_rows(n: int = 24, seed: int = 0) -> list[dict]:
    """A sum preferred to talk about the numbers: a cue (length, digits) a tiny model picks up in a few steps."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 60), rng.randint(0, 60)
        rows.append({"prompt": f"What is {a}+{b}?", "chosen": f"{a + b}",
                     "rejected": f"Well, {a} and {b} are both numbers, and numbers can be added."})
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def trained_rm(tiny_model_dir, tmp_path_factory):
    """A reward model trained once through the command line, on the tiny model."""
    tmp = tmp_path_factory.mktemp("rm")
    path = write_jsonl(tmp / "prefs.jsonl", preference_rows())
    out = tmp / "rm"
    code = main(["train-rm", "--path", str(path), "--output-dir", str(out), "--model", str(tiny_model_dir),
                 "--preset", "cpu", "--epochs", "3", "--learning-rate", "5e-3", "--eval-fraction", "0.25"])
    assert code == 0
    return out, path


# ------------------------------------------------------------------------------------- preferences, no model

@pytest.mark.parametrize(("rows", "match"), [
    ([{"prompt": "q", "chosen": "a"}] * 12, "'rejected'"),
    ([{"question": "q", "chosen": "a", "rejected": "b"}] * 12, "'prompt'"),
    ([{"prompt": "q", "chosen": "same", "rejected": " same"}] + preference_rows(12), "same text in 1 pair"),
    (preference_rows(5), "too few"),
    ([{"prompt": "q", "chosen": "", "rejected": "b"}] + preference_rows(12), "'chosen' is empty"),
    ([{"prompt": None, "chosen": "a", "rejected": "b"}] + preference_rows(12), "'prompt' is None"),
    ("no/such/prefs.jsonl", "No preference file"),
])
def test_bad_preferences_are_refused_before_the_model_loads(rows, match, tmp_path, monkeypatch):
    import rloo_kit.reward_models as rm

    monkeypatch.setattr(rm, "_load_for_training", lambda *a: pytest.fail("the model loaded before the check"))
    with pytest.raises(DataError, match=match):
        rloo_kit.train_reward_model(rows, tmp_path / "out", model="smollm2-135m", preset="cpu")


def test_a_finished_reward_model_is_not_overwritten_in_silence(tmp_path, monkeypatch):
    import rloo_kit.reward_models as rm

    monkeypatch.setattr(rm, "_load_for_training", lambda *a: pytest.fail("the model loaded before the check"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "reward_model.json").write_text("{}")
    with pytest.raises(ConfigError, match="overwrite"):
        rloo_kit.train_reward_model(preference_rows(), tmp_path / "out", preset="cpu")
    with pytest.raises(ConfigError, match="Unknown reward-model setting"):
        rloo_kit.train_reward_model(preference_rows(), tmp_path / "new", preset="cpu", lora_rank=8)


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_preference_files_in_each_format_read_alike(suffix, tmp_path):
    import pandas as pd

    rows = preference_rows(12)
    path = tmp_path / f"prefs.{suffix}"
    if suffix == "jsonl":
        write_jsonl(path, rows)
    else:
        getattr(pd.DataFrame(rows), f"to_{suffix}")(path, **({"index": False} if suffix == "csv" else {}))
    prefs = load_preferences(path)
    assert len(prefs) == 12 and prefs[0]["chosen"] == rows[0]["chosen"]
    assert prefs[0]["prompt"] == [{"role": "user", "content": rows[0]["prompt"]}]


def test_conversational_preferences_and_the_text_the_model_reads(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    chat = [{"prompt": [{"role": "user", "content": "What is 2+2?"}],
             "chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]}]
    prefs = load_preferences(chat * 10)
    assert prefs[0]["chosen"] == "4"
    as_text = pair_text(tok, "What is 2+2?", "4")
    assert as_text == pair_text(tok, chat[0]["prompt"], chat[0]["chosen"]) == pair_text(tok, prefs[0]["prompt"], "4")
    assert as_text.index("What is 2+2?") < as_text.rindex("4")


def test_held_out_pairs_share_no_prompt_with_training_pairs():
    rows = [dict(r, prompt=f"q{i % 10}") for i, r in enumerate(preference_rows(40))]
    train, test = split_preferences(load_preferences(rows), 0.2, seed=1)
    seen = {p[0]["content"] for p in train["prompt"]}
    assert len(train) + len(test) == 40 and len(test) >= 8
    assert not seen & {p[0]["content"] for p in test["prompt"]}


def test_presets_say_what_each_field_does():
    helps = RewardModelPreset.describe()
    assert set(helps) >= {"lora_r", "learning_rate", "max_length", "eval_fraction"} and all(helps.values())
    assert set(RM_PRESETS) == {p.name for p in rloo_kit.list_presets()}
    assert rm_preset("cpu", lora_r=4).lora_r == 4
    with pytest.raises(ConfigError, match="Unknown reward-model preset"):
        rm_preset("tiny")
    with pytest.raises(ConfigError, match="eval_fraction"):
        rm_preset("cpu", eval_fraction=1.5)
    with pytest.raises(AttributeError):
        RM_PRESETS["cpu"].lora_r = 2  # frozen


def test_loading_something_that_is_not_a_reward_model_says_how_to_get_one(tmp_path, tiny_model_dir):
    with pytest.raises(RewardError, match="train-rm"):
        rloo_kit.load_reward_model(tmp_path / "nothing")
    with pytest.raises(RewardError, match="holds no reward model"):
        rloo_kit.load_reward_model(tiny_model_dir)  # a causal LM, not written by train_reward_model


# ------------------------------------------------------------------------------------- on the tiny model

@pytest.mark.heavy
def test_train_rm_writes_a_model_that_ranks_held_out_pairs(trained_rm, capsys):
    out, path = trained_rm
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["eval_pairs"] == 6 and metrics["train_pairs"] == 18
    assert metrics["pair_accuracy"] >= 0.8, metrics  # the cue is easy: the tiny model learns it in a few steps
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    score = rloo_kit.load_reward_model(out)
    _, held_out = split_preferences(load_preferences(path), 0.25, seed=0)
    assert pair_accuracy(score, held_out) == metrics["pair_accuracy"]  # loaded = measured in training


@pytest.mark.heavy
def test_the_loaded_reward_scores_texts_and_messages_alike_in_any_batch(trained_rm):
    out, _ = trained_rm
    score = rloo_kit.load_reward_model(out, device="cpu", batch_size=3)
    prompts = [f"What is {i}+{i}?" for i in range(5)]
    answers = [str(2 * i) if i % 2 else "numbers are nice to talk about" for i in range(5)]
    as_text = score(prompts=prompts, completions=answers)
    as_chat = score(prompts=[[{"role": "user", "content": p}] for p in prompts],
                    completions=[[{"role": "assistant", "content": a}] for a in answers], answer=["x"] * 5)
    one_by_one = [score(prompts=[p], completions=[a])[0] for p, a in zip(prompts, answers, strict=True)]
    assert all(isinstance(v, float) for v in as_text)
    assert as_text == pytest.approx(as_chat, abs=1e-5) and as_text == pytest.approx(one_by_one, abs=1e-4)


@pytest.mark.heavy
def test_reward_model_alone_or_beside_the_tasks_rewards(trained_rm):
    out, _ = trained_rm
    task = rloo_kit.load_task("arithmetic", n_train=8, n_test=2)
    args = Namespace(reward_model=str(out), reward_model_weight=None)
    alone = _with_reward_model(task, args)
    assert [f.__name__ for f in alone.reward_funcs] == ["reward_model"] and alone.reward_weights is None
    beside = _with_reward_model(task, Namespace(reward_model=str(out), reward_model_weight=0.5))
    assert len(beside.reward_funcs) == 3 and beside.reward_weights == (1.0, 0.2, 0.5)
    assert _with_reward_model(task, Namespace(reward_model=None, reward_model_weight=None)) is task
    with pytest.raises(ConfigError, match="needs --reward-model"):
        _with_reward_model(task, Namespace(reward_model=None, reward_model_weight=0.5))


@pytest.mark.heavy
def test_rloo_kit_train_accepts_a_reward_model(trained_rm, tiny_model_dir, tmp_path, capsys):
    out, _ = trained_rm
    run = tmp_path / "run"
    code = main(["train", "--model", str(tiny_model_dir), "--preset", "cpu", "--task", "arithmetic", "--n-test", "2",
                 "--output-dir", str(run), "--max-steps", "2", "--batch-size", "4", "--num-generations", "2",
                 "--max-completion-length", "8", "--preflight-prompts", "2", "--reward-model", str(out),
                 "--reward-model-weight", "0.5", "--force"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "reward_model" in printed  # the pre-flight scored it like the task's own rewards
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 2 and "reward/reward_model" in metrics["after"]


# ------------------------------------------------------------------------------------- gold beside proxy

def gold_history(gold, proxy, kl=None, every: int = 3) -> list[dict]:
    """A log history with a gold measurement every `every` steps: gold[i] and proxy[i] at step every*(i+1)."""
    out = []
    for i in range(1, every * len(gold) + 1):
        h = {"step": i, "reward": 0.3 + 0.01 * i, "reward_std": 0.4, "kl": 0.01, "entropy": 1.4,
             "frac_reward_zero_std": 0.2, "completions/clipped_ratio": 0.1}
        if i % every == 0:
            j = i // every - 1
            h.update({"gold/mean": gold[j], "proxy/mean": proxy[j], **({"kl": kl[j]} if kl else {})})
        out.append(h)
    return out


class RunArgs:
    num_generations, learning_rate, beta, temperature, max_completion_length, save_steps = 4, 2e-4, 0.02, 1.0, 16, 3


def hacking(hist) -> list:
    return [d for d in rloo_kit.HealthMonitor().diagnose(hist, RunArgs()) if d.kind == "reward_hacking"]


def test_reward_hacking_is_named_when_gold_falls_as_the_proxy_rises():
    (d,) = hacking(gold_history([0.4, 0.6, 0.7, 0.55, 0.45, 0.4], [0.1, 0.5, 0.9, 1.4, 1.9, 2.5]))
    assert d.step == 15 and d.evidence["best_step"] == 9 and d.evidence["sign"] == "gold_falls"
    assert "0.7 at step 9" in d.message and "beta 0.02 -> 0.1" in d.fix and "checkpoint-9" in d.fix
    assert "preference data" in d.fix


def test_reward_hacking_is_named_when_the_proxy_saturates_as_gold_falls():
    """As measured at beta=0 against a reward model (benchmarks/results/reward-model.md): gold 0.59, 0.78, 0.62,
    0.56 while the reward model's score of the same answers stayed at 7.45."""
    (d,) = hacking(gold_history([0.41, 0.59, 0.78, 0.62, 0.56], [1.4, 6.45, 7.457, 7.446, 7.448]))
    assert d.evidence["sign"] == "gold_falls" and d.evidence["best_step"] == 9 and "reward held" in d.message


def test_reward_hacking_is_named_when_kl_grows_while_gold_stalls():
    (d,) = hacking(gold_history([0.4, 0.6, 0.58, 0.6, 0.59, 0.6], [0.1, 0.5, 0.9, 1.4, 1.9, 2.5],
                                kl=[0.01, 0.02, 0.05, 0.1, 0.2, 0.4]))
    assert d.evidence["sign"] == "kl_grows" and d.evidence["best_step"] == 6 and "grew 0.02 -> 0.2" in d.message


@pytest.mark.parametrize(("gold", "proxy"), [
    ([0.4, 0.5, 0.6, 0.7, 0.8, 0.85], [0.1, 0.5, 0.9, 1.4, 1.9, 2.5]),  # both rise: learning
    ([0.6, 0.62, 0.58, 0.61, 0.59, 0.6], [0.1, 0.5, 0.9, 1.4, 1.9, 2.5]),  # gold flat within noise, KL small
    ([0.4, 0.6, 0.7, 0.5, 0.45, 0.4], [0.1, 0.5, 0.9, 0.8, 0.7, 0.6]),  # both fall: not hacking, something else
])
def test_no_reward_hacking_when_gold_keeps_up_or_the_proxy_falls_too(gold, proxy):
    assert hacking(gold_history(gold, proxy)) == []


@pytest.mark.heavy
def test_gold_monitor_logs_gold_beside_the_proxy_on_a_real_run(tiny_model_dir, tmp_path, cpu_tiny_overrides, capsys):
    from rloo_kit.notebook import curves
    from rloo_kit.notebook.plots import plot_training

    from .helpers import arithmetic_rows, length_reward

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = rloo_kit.build_trainer(model, tok, arithmetic_rows(), [length_reward], preset="cpu",
                                     output_dir=str(tmp_path), max_steps=3, **cpu_tiny_overrides)
    calls = []

    def short_is_good(prompts, completions, **kw):  # the gold rule: a rule training never sees
        calls.append(len(completions))
        return [1.0 / (1 + len(c)) for c in completions]

    held_out = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Add {i} and 2."}] for i in range(3)]})
    gold = rloo_kit.GoldMonitor(short_is_good, held_out, every=2).attach(trainer)
    rloo_kit.train(trainer)
    assert [r["step"] for r in gold.records] == [0, 2, 3] and calls == [3, 3, 3]  # start, every 2, the last step
    logged = [h for h in trainer.state.log_history if "gold/mean" in h]
    assert [h["step"] for h in logged] == [0, 2, 3] and all("reward" in h and "kl" in h for h in logged[1:])
    assert all(h["proxy/mean"] is not None for h in logged)  # length_reward on the held-out greedy completions
    assert "gold " in capsys.readouterr().out  # the live view's text line
    fig = plot_training(trainer.state.log_history)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]  # twin axes have no title
    assert titles == [p.title for p in curves.PANELS] + [curves.GOLD.title]
    with pytest.raises(ConfigError, match="every"):
        rloo_kit.GoldMonitor(short_is_good, held_out, every=0)
    with pytest.raises(DataError, match="held-out prompts"):
        rloo_kit.GoldMonitor(short_is_good, held_out.select([]))


def letter_share(prompts, completions, **kw) -> list[float]:
    """The proxy: a scorer that likes words, as a reward model that rates wordy answers highly does."""
    texts = map(completion_text, completions)
    return [sum(ch.isascii() and ch.isalpha() for ch in t) / max(len(t), 1) for t in texts]


def not_letters(prompts, completions, **kw) -> list[float]:
    """A gold rule the proxy works against: what was wanted is whatever the letters crowd out."""
    return [1 - v for v in letter_share(prompts, completions)]


def no_digits(prompts, completions, **kw) -> list[float]:
    """A gold rule the proxy serves without being it: completions free of digits."""
    texts = map(completion_text, completions)
    return [1 - sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


@pytest.fixture(scope="module")
def sharp_model_dir(tmp_path_factory):
    """A tiny model whose weights are drawn wide enough that RLOO moves its samples in sixteen steps (the plain
    tiny model's logits are too flat for its sampling to change in that time)."""
    from rloo_kit.testing import build_tiny_bpe_model

    return build_tiny_bpe_model(tmp_path_factory.mktemp("sharp") / "llama", architecture="llama")


def run_with_gold(model_dir, out, gold) -> tuple:
    """Sixteen real RLOO steps on `letter_share` at beta 0, gold measured every 2 steps on 16 held-out prompts."""
    from .helpers import arithmetic_rows

    model, tok = rloo_kit.load_model(str(model_dir), preset="cpu")
    trainer = rloo_kit.build_trainer(model, tok, arithmetic_rows(32), [letter_share], preset="cpu", output_dir=str(out),
                                     max_steps=16, per_device_train_batch_size=8, num_generations=4,
                                     max_completion_length=8, learning_rate=3e-2, beta=0.0, logging_steps=1,
                                     save_strategy="no", disable_tqdm=True, seed=0)
    held_out = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Add {i} and 2."}] for i in range(16)]})
    monitor = rloo_kit.GoldMonitor(gold, held_out, every=2).attach(trainer)
    rloo_kit.train(trainer)
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return monitor.records, rewards, trainer.health_monitor.diagnoses


@pytest.mark.heavy
def test_reward_hacking_appears_on_a_real_run_whose_proxy_works_against_gold_and_not_on_its_twin(sharp_model_dir,
                                                                                                tmp_path):
    """One training run, twice: same seed, same proxy, so the same policy step for step; only the held-back gold
    differs. Against a gold the proxy works against, the monitor names reward_hacking while the run trains; against
    a gold the proxy serves, the same run is left alone."""
    hacked, rewards, diagnoses = run_with_gold(sharp_model_dir, tmp_path / "against", not_letters)
    assert sum(rewards[-4:]) / 4 > sum(rewards[:4]) / 4 + 0.1, rewards  # the policy really learned the proxy
    assert hacked[-1]["proxy/mean"] > hacked[0]["proxy/mean"] and hacked[-1]["gold/mean"] < hacked[0]["gold/mean"]
    (d,) = [d for d in diagnoses if d.kind == "reward_hacking"]
    assert d.evidence["sign"] == "gold_falls" and d.step <= 16 and "beta 0 -> 0.1" in d.fix

    healthy, rewards_again, diagnoses = run_with_gold(sharp_model_dir, tmp_path / "serves", no_digits)
    assert rewards_again == pytest.approx(rewards)  # the same training: gold is measured, never optimised
    assert [r["proxy/mean"] for r in healthy] == pytest.approx([r["proxy/mean"] for r in hacked])
    assert "reward_hacking" not in {d.kind for d in diagnoses}


def test_preferences_from_the_policys_own_samples_follow_the_gold_rule(tiny_model_dir):
    from rloo_kit.reward_models import gold_summary, sample_preferences

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    prompts = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Add {i} and 1."}] for i in range(4)],
                                 "answer": [str(i + 1) for i in range(4)]})

    def gold(prompts, completions, answer, **kw):  # reads a dataset column, as rewards do
        assert len(answer) == len(completions)
        return [float(len(c)) for c in completions]

    pairs = sample_preferences(model, tok, prompts, gold, samples=4, max_new_tokens=6, pairs_per_prompt=2)
    assert 0 < len(pairs) <= 8 and all(len(p["chosen"]) > len(p["rejected"]) for p in pairs)
    assert {json.dumps(p["prompt"]) for p in pairs} <= {json.dumps(p) for p in prompts["prompt"]}
    history = gold_history([0.4, 0.6, 0.5], [0.1, 0.2, 0.3])
    assert gold_summary(history) == {"gold_before": 0.4, "gold_after": 0.5, "gold_best": 0.6, "best_step": 6,
                                     "proxy_before": 0.1, "proxy_after": 0.3, "kl_last": 0.01}
    with pytest.raises(DataError, match="GoldMonitor"):
        gold_summary(history[:2])
