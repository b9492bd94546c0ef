"""Each failure kind from a synthetic log history; healthy runs get nothing; kinds are not confused."""

import math

import pytest

from rloo_kit import ConfigError, HealthMonitor, Thresholds
from rloo_kit.diagnostics import ANSWER_SPREAD_KEY, KINDS, SPREAD_KEY, SamplingMeasured


def healthy_step(i: int) -> dict:
    """A run that learns: reward rising smoothly, spread inside groups, small KL, short completions."""
    return {"step": i, "reward": 0.3 + 0.015 * i + 0.01 * math.sin(i), "reward_std": 0.4, "kl": 0.002 * i,
            "entropy": 1.5 - 0.005 * i, "frac_reward_zero_std": 0.25, "completions/clipped_ratio": 0.1,
            "grad_norm": 1.0 + 0.1 * math.cos(i)}


def history(n: int = 30, **changes) -> list[dict]:
    """A healthy history with some fields replaced from `start` on: changes = {field: fn(i)}."""
    start = changes.pop("start", 10)
    out = []
    for i in range(1, n + 1):
        step = healthy_step(i)
        if i >= start:
            step.update({k: f(i) for k, f in changes.items()})
        out.append(step)
    return out


CASES = {
    "high_variance": history(reward=lambda i: 0.9 if i % 2 else 0.05, reward_std=lambda i: 0.2),
    "kl_explosion": history(kl=lambda i: 0.05 * 1.6 ** (i - 9), entropy=lambda i: 1.4 - 0.05 * (i - 9)),
    "reward_collapse": history(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 0.0, reward_std=lambda i: 0.0),
    # the same flat groups, where validation (greedy, every 5 steps) answers 45% of its rows right and samples 2%
    "sampling_noise": history(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 0.02, reward_std=lambda i: 0.0,
                              **{"validation/accuracy": lambda i: 0.45 if i % 5 == 1 else None}),
    # every group flat from step 10, after the reward rose: 3 prompts of 4 always right, one always wrong
    "converged": history(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 0.75, reward_std=lambda i: 0.45,
                         entropy=lambda i: 0.01),
    "truncation": history(**{"completions/clipped_ratio": lambda i: 0.8}),
    # a held-back gold score every 3 steps: up to step 12, then down while the (proxy) reward keeps rising
    "reward_hacking": history(start=3, **{"gold/mean": lambda i: None if i % 3 else
                                          0.5 + 0.03 * i if i <= 12 else 0.86 - 0.05 * (i - 12)}),
    # validation measured every 5 steps (the first on step 1) stays at 0.4 while the training reward climbs
    "memorisation": history(start=1, **{"validation/accuracy": lambda i: 0.42 if i % 5 == 1 else None}),
    # the same, where the measurements from step 11 on find the replies picking the first choice offered
    "answer_habit": history(start=1, **{"validation/accuracy": lambda i: 0.42 if i % 5 == 1 else None,
                                        "validation/habit": lambda i: None if i % 5 != 1 or i < 11 else
                                        "most replies pick the choice offered first whatever the row"}),
    # a run with tools: calls stop at step 10; or keep coming but mostly fail
    "tool_unused": history(**{"tools/call_rate": lambda i: 0.0}),
    "tool_invalid": history(**{"tools/call_rate": lambda i: 0.6, "tools/valid_call_rate": lambda i: 0.2}),
}


def kinds(hist, **kw) -> list[str]:
    return [d.kind for d in HealthMonitor(**kw).diagnose(hist)]


def test_healthy_run_gets_no_diagnosis():
    assert kinds(history(60)) == []


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_recognised_alone(kind):
    assert kinds(CASES[kind]) == [kind]


@pytest.mark.parametrize("kind", KINDS)
def test_diagnosis_starts_after_the_change_and_says_what_to_do(kind):
    (d,) = HealthMonitor().diagnose(CASES[kind])
    assert d.step >= 10 and d.message and d.fix and str(d).startswith(f"[{kind} at step {d.step}]")


def test_grad_norm_spikes_alone_are_high_variance():
    spiky = history(grad_norm=lambda i: 50.0 if i % 3 == 0 else 1.0)
    assert kinds(spiky) == ["high_variance"]


def test_steps_without_spread_are_no_baseline_for_gradient_spikes():
    """A step whose groups are all flat has only the KL term's gradient: its norm near 0 does not make the next step
    with spread a spike (a converged demo run's norms alternate 0 and 6-10)."""
    alternating = {"start": 1, "reward": lambda i: 0.4, "grad_norm": lambda i: 0.0 if i % 2 else 6.0}
    flat_when_zero = history(**alternating, frac_reward_zero_std=lambda i: 1.0 if i % 2 else 0.25)
    assert kinds(flat_when_zero) == []
    assert kinds(history(**alternating)) == ["high_variance"]  # the same norms where every step had spread


def test_a_noisy_run_that_learns_is_not_high_variance():
    """The demo's first steps at its defaults (--minutes 3, seed 0): 4 prompts a step, so which 4 come up moves the
    step's reward by more than high_variance's threshold (0.705, 1.03, 0.95 at steps 6-8) while the answer's reward
    climbs. The same noise without the climb is named, once it has lasted `patience` steps."""
    rewards = [0.25, 0.58, 0.40, 1.01, 0.36, 0.28, 0.89, 0.90, 0.77, 1.15, 0.77, 0.90, 0.96, 1.15, 1.15, 0.77]
    spread = [0.42, 0.56, 0.47, 0.37, 0.48, 0.44, 0.48, 0.45, 0.50, 0.0, 0.50, 0.45, 0.40, 0.0, 0.0, 0.50]
    learning = [{**healthy_step(i), "reward": r, "reward_std": s}
                for i, (r, s) in enumerate(zip(rewards, spread, strict=True), start=1)]
    assert "high_variance" not in kinds(learning)
    level = [{**h, "reward": r} for h, r in zip(learning, [0.25, 0.58, 0.40, 1.01, 0.36, 0.28, 0.89] * 3, strict=False)]
    (d,) = [d for d in HealthMonitor().diagnose(level) if d.kind == "high_variance"]
    assert d.step == 9 and d.evidence["reward_noise"] > Thresholds().reward_noise  # above it at steps 7, 8 and 9


def test_kl_explosion_without_kl_logged_reads_entropy():
    """At beta=0 no KL is logged: an entropy collapse whose reward does not rise is the policy running away; one
    whose reward climbs is a policy growing sure of what pays (every demo run at beta 0 was named before)."""
    def without_kl(steps):
        return [{k: v for k, v in h.items() if k != "kl"} for h in steps]

    assert kinds(without_kl(history(entropy=lambda i: 0.1, reward=lambda i: 0.4))) == ["kl_explosion"]
    learning = without_kl(history(entropy=lambda i: 0.02, reward=lambda i: min(1.0, 0.3 + 0.1 * i)))
    assert "kl_explosion" not in kinds(learning)


def test_a_kl_far_from_the_reference_is_no_explosion_where_validation_answers_better():
    """Held-back word-choice runs learned to reply with the answer alone, their per-token KL 1.5-4.5 (over the 1.0
    ceiling) while validation rose to its best, and were named kl_explosion. In a run that measures validation the
    KL is judged where a measurement is logged, and not named while one of the latest measurements beats step 0."""
    measured = {1: 0.4, 6: 0.3, 11: 0.5, 16: 0.6, 21: 0.7, 26: 0.6}  # step 0's rides on step 1's log
    learned = history(**{"kl": lambda i: min(4.5, 0.05 * 1.6 ** (i - 9))}, start=1)
    for h in learned:
        h["validation/accuracy"] = measured.get(h["step"])
    assert "kl_explosion" not in kinds(learned)
    never_better = [{**h, "validation/accuracy": None if h["validation/accuracy"] is None else 0.3} for h in learned]
    (d,) = [d for d in HealthMonitor().diagnose(never_better) if d.kind == "kl_explosion"]
    assert d.step == 21  # the KL over the ceiling from step 16 (three steps by 18), named at the next measurement
    assert kinds(CASES["kl_explosion"]) == ["kl_explosion"]  # no validation: the KL alone, as before


def test_a_runaway_kl_is_named_after_an_early_gain():
    """One measured step above step 0 early on does not excuse the KL for the rest of the run: validation that
    fell back (0.4 at step 0, 0.5, then 0.3, 0.1, 0.0 ...) leaves the KL to be judged, and a KL past kl_runaway
    (10x kl_max: runs that learned peaked at 4.5) is named even while validation is at its best."""
    fell_back = {1: 0.4, 6: 0.5, 11: 0.3, 16: 0.1, 21: 0.0, 26: 0.0}
    moderate = history(**{"kl": lambda i: min(4.5, 0.05 * 1.6 ** (i - 9))}, start=1)
    for h in moderate:
        h["validation/accuracy"] = fell_back.get(h["step"])
    (d,) = [d for d in HealthMonitor().diagnose(moderate) if d.kind == "kl_explosion"]
    assert d.step == 21  # at step 16 the latest three measurements still held step 6's 0.5
    best = {1: 0.4, 6: 0.5, 11: 0.6, 16: 0.7, 21: 0.8, 26: 0.9}
    runaway = history(**{"kl": lambda i: 0.05 * 1.6 ** (i - 9)}, start=1)  # 12 at step 21, 967 by step 30
    for h in runaway:
        h["validation/accuracy"] = best.get(h["step"])
    (d,) = [d for d in HealthMonitor().diagnose(runaway) if d.kind == "kl_explosion"]
    assert d.evidence["kl"] > 10


def test_fix_uses_the_runs_own_settings():
    class Args:
        num_generations, learning_rate, beta, temperature, max_completion_length = 4, 2e-4, 0.02, 1.0, 16

    (d,) = HealthMonitor().diagnose(CASES["high_variance"], Args())
    assert "4 -> 8" in d.fix and "0.0002 -> 0.0001" in d.fix
    (d,) = HealthMonitor().diagnose(CASES["kl_explosion"], Args())
    assert "beta 0.02 -> 0.04" in d.fix


def test_thresholds_are_settable():
    assert kinds(CASES["truncation"], thresholds=Thresholds(clipped_ratio=0.9)) == []


def test_online_monitor_reports_once_and_stops_on_request():
    monitor = HealthMonitor(stop_on={"truncation"}, verbose=False)

    class Control:
        should_training_stop = False

    class State:
        global_step = 0

    control, state = Control(), State()
    for h in CASES["truncation"]:
        state.global_step = h["step"]
        monitor.on_log(None, state, control, logs=h)
    assert [d.kind for d in monitor.diagnoses] == ["truncation"]
    assert control.should_training_stop and monitor.stopped_by.kind == "truncation"
    assert "--system-prompt" in monitor.diagnoses[0].fix  # the fix names how to ask for short answers
    told = HealthMonitor(verbose=False, asks_short=True)  # ... where the prompts do not ask already
    (cut,) = told.diagnose(CASES["truncation"])
    assert cut.kind == "truncation" and "--system-prompt" not in cut.fix and "max_completion_length" in cut.fix


def test_unknown_stop_kind_is_refused():
    with pytest.raises(ConfigError, match="kl_explosoin"):
        HealthMonitor(stop_on={"kl_explosoin"})


def test_groups_flat_after_the_reward_rose_are_converged_not_collapsed():
    """A held-back symbols file at step 56: every completion right (reward 1.02, spread 0.008 over the step against 0.5
    at the start), entropy 0.016; and the demo's --minutes 3 runs from step 49-63 on: three prompts of a step always
    right, one always wrong. The monitor said reward_collapse, fix 'raise temperature', on runs that had learned.
    A reward that never paid, or whose only rise is a side reward's, is still a collapse."""
    solved = history(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 1.02, reward_std=lambda i: 0.008,
                     entropy=lambda i: 0.016)
    assert kinds(solved) == ["converged"]
    assert kinds(CASES["converged"]) == ["converged"]
    one_answer = history(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 0.5, reward_std=lambda i: 0.5)
    assert kinds(one_answer) == ["reward_collapse"]  # no rise past the early spread: a label task's one answer
    assert kinds(CASES["reward_collapse"]) == ["reward_collapse"]  # every completion 0 from step 10 on
    # every reply emptied: no answer right (the task's first reward stays at 0), the brevity reward paid to all
    emptied = history(start=1, frac_reward_zero_std=lambda i: 1.0 if i >= 10 else 0.3,
                      reward=lambda i: 0.2 if i >= 10 else 0.05, reward_std=lambda i: 0.0 if i >= 10 else 0.1, **{
                          "rewards/correct_answer/mean": lambda i: 0.0, "rewards/correct_answer/std": lambda i: 0.0,
                          "rewards/brevity/mean": lambda i: 0.2 if i >= 10 else 0.05})
    assert kinds(emptied, answer_reward="correct_answer") == ["reward_collapse"]
    (d,) = HealthMonitor().diagnose(emptied)  # the total's rise, brevity's alone, passes for one, and says so
    assert d.kind == "converged" and "after the reward rose" in d.message and "Next:" in str(d)


def test_converged_says_the_rise_and_how_to_stop_or_go_on():
    class Args:
        num_generations, temperature = 4, 1.0

    (d,) = HealthMonitor().diagnose(CASES["converged"], Args())
    assert "100% of the prompts" in d.message and "0.34 -> 0.75" in d.message
    assert "temperature 1 -> 1.3" in d.fix and "stop_on=['converged']" in d.fix


def test_a_share_cut_that_falls_is_a_policy_learning_to_fit():
    """make demo trains at 16 tokens with a brevity reward: 81%, 75%, 56% of completions cut at steps 1-3, none from
    step 11; the monitor named truncation at step 3 and told the user to raise the length the demo had chosen."""
    demo = [0.81, 0.75, 0.56, 0.56, 0.25, 0.38, 0.12, 0.06, 0.06, 0.12] + [0.0] * 20
    assert "truncation" not in kinds(history(start=1, **{"completions/clipped_ratio": lambda i: demo[i - 1]}))
    stuck = [0.81, 0.75, 0.6, 0.58, 0.6] + [0.6] * 25  # falls, then stays over half
    (d,) = HealthMonitor().diagnose(history(start=1, **{"completions/clipped_ratio": lambda i: stuck[i - 1]}))
    assert d.kind == "truncation" and d.step == 5 and "add rloo_kit.rewards.brevity()" in d.fix
    # a file task's run that already has the brevity reward the kit adds is not told to add one
    (d,) = HealthMonitor().diagnose(history(start=1, **{"completions/clipped_ratio": lambda i: stuck[i - 1],
                                                        "rewards/brevity/mean": lambda i: 0.05}))
    assert "give the brevity reward the run has a larger weight" in d.fix and "add rloo_kit" not in d.fix


def test_answers_never_right_while_a_side_reward_teaches_are_a_collapse():
    """A held-back file (*Which number comes right before 162?*), refused by the pre-flight and trained with --force:
    no answer right in 30 steps, but the brevity reward the kit adds gave every group a spread, so the run learned to
    empty its replies ('150') and the monitor named nothing. The answer's own spread says so."""
    side_only = history(start=1, **{SPREAD_KEY: lambda i: 0.0, ANSWER_SPREAD_KEY: lambda i: 1.0,
                                    "rewards/correct_answer/mean": lambda i: 0.0,
                                    "rewards/correct_answer/std": lambda i: 0.0,
                                    "reward": lambda i: min(0.2, 0.01 * i), "reward_std": lambda i: 0.1})
    (d,) = HealthMonitor(answer_reward="correct_answer").diagnose(side_only)
    assert d.kind == "reward_collapse" and d.step == 6  # once a rise can be judged: warmup_steps + patience
    assert "answer's reward" in d.message and "other rewards alone" in d.message and "never pays" in d.message
    assert d.fix.startswith("stop the run")
    # a run that keeps its best validation step may go on: a held-back rounding file's replies shortened to a number
    # first, and it went 0.00 -> 0.94 held out in 8 minutes
    validated = [{**h, "validation/accuracy": 0.0} if h["step"] % 5 == 1 else h for h in side_only]
    (d,) = HealthMonitor(answer_reward="correct_answer").diagnose(validated)
    assert d.kind == "reward_collapse" and d.fix.startswith("this run keeps its best validation step, so going on")
    # the answer learned, then flat in it while brevity still varies: converged, not a collapse
    learned = history(start=1, **{SPREAD_KEY: lambda i: 0.0, ANSWER_SPREAD_KEY: lambda i: 1.0 if i >= 10 else 0.2,
                                  "rewards/correct_answer/mean": lambda i: 1.0 if i >= 10 else 0.2,
                                  "rewards/correct_answer/std": lambda i: 0.0 if i >= 10 else 0.4})
    assert kinds(learned, answer_reward="correct_answer") == ["converged"]
    # a hard task's first steps: no answer right until step 4, then some: neither a collapse nor converged
    first_right = history(start=1, **{SPREAD_KEY: lambda i: 0.0, ANSWER_SPREAD_KEY: lambda i: 1.0 if i < 4 else 0.5,
                                      "rewards/correct_answer/mean": lambda i: 0.0 if i < 4 else 0.3,
                                      "rewards/correct_answer/std": lambda i: 0.0 if i < 4 else 0.45})
    assert kinds(first_right, answer_reward="correct_answer") == []
    # without knowing which reward is the answer's (a bare replay), the answer's own share is not read
    assert kinds(side_only) == []


NOISY_FLAT = dict(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 0.02, reward_std=lambda i: 0.0,
                  entropy=lambda i: 2.6)  # flat groups of noisy samples, 2% of them right


def test_flat_groups_whose_greedy_answers_beat_the_samples_are_noise_and_the_fix_is_colder():
    """The pre-flight's figures name it before any validation: a held-back numeric file answered 53% greedily and 2%
    sampled, and learned to 0.97 at temperature 0.3 (FACTS). Validation measured during the run speaks over them."""
    noisy = SamplingMeasured(1.0, greedy_right=0.53, samples_right=0.02, greedy_better=True)
    (d,) = HealthMonitor(sampling=noisy).diagnose(history(**NOISY_FLAT))
    assert d.kind == "sampling_noise" and "greedy answers right on 53% (pre-flight), samples on 2%" in d.message
    assert "lower temperature 1 -> 0.5" in d.fix and "a higher temperature makes this worse" in d.fix
    measured = SamplingMeasured(1.0, 0.53, 0.02, True, colder=((0.5, 0.7), (0.3, 0.16)), colder_helped=0.3)
    (d,) = HealthMonitor(sampling=measured).diagnose(history(**NOISY_FLAT))
    assert "lower temperature 1 -> 0.3 (the pre-flight measured 16% of the prompts without spread there)" in d.fix
    (d,) = HealthMonitor().diagnose(CASES["sampling_noise"])
    assert "greedy answers right on 45% (validation at step 11), samples on 2%" in d.message
    # validation no better than the samples: the pre-flight's older figures give way, and it is a collapse
    no_better = history(**NOISY_FLAT, **{"validation/accuracy": lambda i: 0.0 if i % 5 == 1 else None})
    (d,) = HealthMonitor(sampling=noisy).diagnose(no_better)
    assert d.kind == "reward_collapse" and "lower temperature" not in d.fix
    assert "greedy answers right on 0%, validation at step 11, samples on 2%: fewer than 20% of the rows more" in d.fix


def test_flat_noisy_samples_that_colder_draws_left_as_flat_are_a_collapse_and_no_colder_draw_is_advised():
    """A held-back legs file: samples noisy (entropy above 2 a token), greedy answers right on a few prompts, and the
    pre-flight's draws at 0.5 and 0.3 left 81% of the prompts flat. The monitor told it, at step 6, to lower the
    temperature 'if the greedy answers are better'; the pre-flight had measured that it does not help."""
    legs = SamplingMeasured(1.0, 0.25, 0.02, True, colder=((0.5, 0.84), (0.3, 0.81)))
    (d,) = HealthMonitor(sampling=legs).diagnose(history(**NOISY_FLAT))
    assert d.kind == "reward_collapse"
    assert "a colder draw does not help here (the pre-flight measured the prompts left without spread: 84% at 0.5, " \
           "81% at 0.3); raise num_generations 4 -> 8" in d.fix and "lower temperature" not in d.fix
    (d,) = HealthMonitor().diagnose(history(**NOISY_FLAT))  # nothing measured: entropy alone, and a conditional fix
    assert d.kind == "reward_collapse" and "if the greedy answers are better" in d.fix and "-> 0.5" in d.fix
    alike = dict(NOISY_FLAT, entropy=lambda i: 0.05)  # one answer per prompt: warmer, whatever greedy did
    (d,) = HealthMonitor(sampling=legs).diagnose(history(**alike))
    assert "raise temperature 1 -> 1.3" in d.fix


def test_flat_groups_of_samples_that_are_one_answer_are_not_noise_whatever_validation_says():
    """A held-back true-or-false file: every group flat, entropy 0.08 a token (each training prompt answered one way,
    some right, some wrong), validation 0.75 against a training reward of 0.42. The samples are the greedy answers;
    the gap is the rows'. Told to sample colder, it is told to sample warmer. Nor is a validation pass whose replies
    ignore the row a measure of noise: its accuracy is the share of rows its favourite answer fits."""
    one_way = history(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 0.42, reward_std=lambda i: 0.0,
                      entropy=lambda i: 0.08, **{"validation/accuracy": lambda i: 0.75 if i % 5 == 1 else None})
    (d,) = HealthMonitor().diagnose(one_way)
    assert d.kind == "reward_collapse" and "raise temperature 1 -> 1.3" in d.fix and "lower temperature" not in d.fix
    noisy = history(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 0.42, reward_std=lambda i: 0.0,
                    entropy=lambda i: 1.2, **{"validation/accuracy": lambda i: 0.75 if i % 5 == 1 else None})
    assert kinds(noisy) == ["sampling_noise"]
    # the latest pass said 'false' to most rows: right on the half it fits, no measure of what the samples miss
    habit = history(frac_reward_zero_std=lambda i: 1.0, reward=lambda i: 0.25, reward_std=lambda i: 0.0,
                    entropy=lambda i: 0.27, **{"validation/accuracy": lambda i: 0.5 if i % 5 == 1 else None,
                                               "validation/habit": lambda i: "most replies 'false' whatever the row"
                                               if i % 5 == 1 else None})
    (d,) = [d for d in HealthMonitor().diagnose(habit) if d.kind in ("sampling_noise", "reward_collapse")]
    assert d.kind == "reward_collapse" and "lower temperature" not in d.fix
    assert "where most replies 'false' whatever the row: the rows that answer fits" in d.fix


def test_reward_collapse_is_read_from_the_rewards_before_the_kl_penalty():
    # TRL's share moves with beta x KL once the policy has left the reference; the kit's does not
    hist = history(frac_reward_zero_std=lambda i: 0.1, frac_task_reward_zero_std=lambda i: 1.0,
                   reward=lambda i: 0.0, reward_std=lambda i: 0.0)
    assert "reward_collapse" in kinds(hist)
    assert "reward_collapse" not in kinds([{k: v for k, v in h.items() if k != "frac_task_reward_zero_std"}
                                           for h in hist])  # TRL's alone misses it


def test_a_constant_reward_after_the_policy_moved_is_logged_as_no_spread(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    import torch

    import rloo_kit

    from .helpers import arithmetic_rows

    def constant(prompts, completions, **kwargs):
        return [1.0] * len(completions)

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = rloo_kit.build_trainer(model, tok, arithmetic_rows(8), [constant], preset="cpu",
                                     output_dir=str(tmp_path), live=False, monitor=False, max_steps=2, beta=0.1,
                                     **cpu_tiny_overrides)
    torch.manual_seed(0)
    with torch.no_grad():  # the policy leaves the reference (the base, adapter off): each completion's KL differs
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2 and all(h["kl"] != 0 for h in logs)
    assert [h[SPREAD_KEY] for h in logs] == [1.0, 1.0]
    assert all(h["frac_reward_zero_std"] < 1.0 for h in logs)  # why the monitor reads the kit's share
    assert not any(ANSWER_SPREAD_KEY in h for h in logs)  # one reward: its share is the total's


def test_the_answers_own_spread_is_logged_beside_a_side_rewards(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    """The answer's reward never pays while a second reward varies: the total has spread, the answer's has none."""
    import rloo_kit

    from .helpers import arithmetic_rows

    def never_right(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    def has_e(prompts, completions, **kwargs):
        return [float("e" in (c[0]["content"] if isinstance(c, list) else c)) for c in completions]

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    trainer = rloo_kit.build_trainer(model, tok, arithmetic_rows(32), [never_right, has_e], preset="cpu",
                                     output_dir=str(tmp_path), live=False, max_steps=3,
                                     **{**cpu_tiny_overrides, "per_device_train_batch_size": 8})
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert [h[ANSWER_SPREAD_KEY] for h in logs] == [1.0, 1.0, 1.0]
    assert min(h[SPREAD_KEY] for h in logs) < 1.0  # has_e gave some groups a spread
    assert trainer.health_monitor.answer_reward == "never_right"


def test_the_spread_is_taken_as_trl_takes_its_rewards():
    import collections
    import types

    import torch

    from rloo_kit.patches.compat import log_task_reward_spread

    nan = float("nan")
    per_func = torch.tensor([[1.0, 0.0], [1.0, 0.0],  # one reward for both: no spread
                             [nan, nan], [nan, nan],  # unscorable (TRL: NaN, not 0): not counted as no spread
                             [0.2, 1.0], [0.9, 0.0],  # weighted 0.2 + 0.5 and 0.9: spread, unless clipped to <= 0.5
                             [1.0, nan], [1.0, 1.0]])  # None from one function is left out of the sum: 1 and 1.5
    trainer = types.SimpleNamespace(_calculate_rewards=lambda: per_func, reward_weights=torch.tensor([1.0, 0.5]),
                                    num_generations=2, model=types.SimpleNamespace(training=True),
                                    reward_clip_range=None, _metrics=collections.defaultdict(
                                        lambda: collections.defaultdict(list)))
    log_task_reward_spread(trainer)
    assert trainer._calculate_rewards() is per_func
    trainer.reward_clip_range = (-1.0, 0.5)
    trainer._calculate_rewards()
    assert trainer._metrics["train"][SPREAD_KEY] == [0.25, 0.75]  # clipped at 0.5, the last two groups lose theirs
    # the first function alone: 1 and 1, unscorable, 0.2 and 0.9, 1 and 1; the total's clip is not its
    assert trainer._metrics["train"][ANSWER_SPREAD_KEY] == [0.5, 0.5]


def test_with_beta_zero_the_spread_equals_trls_every_step(tiny_model_dir, tmp_path, cpu_tiny_overrides):
    """Without a KL term the task reward is TRL's reward: the kit's share must be TRL's frac_reward_zero_std."""
    import rloo_kit

    from .helpers import arithmetic_rows

    def has_e(prompts, completions, **kwargs):  # 0/1, so some groups have spread and some do not
        return [float("e" in (c[0]["content"] if isinstance(c, list) else c)) for c in completions]

    model, tok = rloo_kit.load_model(str(tiny_model_dir), preset="cpu")
    model = rloo_kit.attach_lora(model, preset="cpu", r=4, alpha=8)
    trainer = rloo_kit.build_trainer(model, tok, arithmetic_rows(32), [has_e], preset="cpu", output_dir=str(tmp_path),
                                     live=False, monitor=False, max_steps=6, beta=0.0,
                                     **{**cpu_tiny_overrides, "per_device_train_batch_size": 8})
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 6
    assert [h[SPREAD_KEY] for h in logs] == pytest.approx([h["frac_reward_zero_std"] for h in logs])
    assert len({h["frac_reward_zero_std"] for h in logs}) > 1  # the shares vary, so the equality says something


def test_one_row_right_once_does_not_hide_memorisation():
    """Validation 0.00 -> 0.11 (one row of nine, once) -> 0.00 x3 while the reward climbs: the latest measurements
    are where the run started, so the run is learning its training prompts."""
    blip = {1: 0.0, 6: 0.11, 11: 0.0, 16: 0.0, 21: 0.0}
    (d,) = [d for d in HealthMonitor().diagnose(history(start=1, **{"validation/accuracy": blip.get}))
            if d.kind == "memorisation"]
    assert d.evidence["validation_latest"] == [0.0, 0.0, 0.0] and d.evidence["validation_best_since"] == 0.11
    assert "no better than at the start (0) over the latest 3 measurements (at best 0.11" in d.message
    learned = {**blip, 16: 0.33, 21: 0.33}  # two of the latest three above the start: not memorisation
    assert "memorisation" not in kinds(history(start=1, **{"validation/accuracy": learned.get}))


def test_memorisation_is_judged_on_a_fresh_measurement_not_one_steps_old():
    """A held-back smallest-of-three file (answer's reward and validation from its run, 8 minutes): the monitor named
    memorisation at step 35 on step 28's validation, 0.43 against 0.64 at step 0, and stopped the run; step 35,
    measured as it stopped, was 0.79. Judged where a measurement is logged, the run goes on
    to its next one, and is named only if that one is no better."""
    answers = [0.438, 0.438, 0.312, 0.375, 0.375, 0.312, 0.438, 0.312, 0.438, 0.312, 0.438, 0.375, 0.500, 0.625,
               0.562, 0.625, 0.438, 0.812, 0.375, 0.250, 0.562, 0.250, 0.562, 0.625, 0.562, 0.438, 0.188, 0.438,
               0.375, 0.688, 0.688, 0.562, 0.438, 0.688, 0.812, 0.750]
    measured = {1: 0.64, 5: 0.5, 12: 0.29, 20: 0.43, 28: 0.43}

    def run(last: float) -> list:
        return HealthMonitor(answer_reward="correct_answer").diagnose(history(
            n=36, start=1, **{"rewards/correct_answer/mean": lambda i: answers[i - 1],
                              "rewards/correct_answer/std": lambda i: 0.45,
                              "validation/accuracy": {**measured, 36: last}.get}))

    assert not [d for d in run(0.79) if d.kind == "memorisation"]  # step 35 is no longer judged on step 28's 0.43
    (named,) = [d for d in run(0.43) if d.kind == "memorisation"]
    assert named.step == 36 and named.evidence["validation_latest"] == [0.43, 0.43, 0.43]


def test_samples_catching_up_with_the_greedy_answers_are_not_memorisation():
    """A held-back alphabetical-order file: validation 0.75 at step 0 (16 rows) and flat, while the answer's reward
    rose 0.30 -> 0.64 as the entropy fell 2.4 -> 0.1 a token. The samples came to score what the greedy answers
    already did; the run was stopped as memorising at 4 of its 8 minutes. Where the reward passes step 0's greedy
    accuracy, it is named."""
    def run(validation: float) -> list[str]:
        return kinds(history(start=1, reward=lambda i: 0.3 + 0.012 * i,
                             **{"validation/accuracy": lambda i: validation if i % 5 == 1 else None}))

    assert "memorisation" not in run(0.75)
    assert "memorisation" in run(0.5)


def test_validation_that_rises_with_the_reward_is_learning_not_memorisation():
    learning = history(start=1, **{"validation/accuracy": lambda i: 0.4 + 0.01 * i if i % 5 == 1 else None})
    assert "memorisation" not in kinds(learning)
    flat_reward = history(start=1, reward=lambda i: 0.3, **{"validation/accuracy": lambda i: 0.4 if i % 5 == 1
                                                             else None})
    assert "memorisation" not in kinds(flat_reward)


def test_a_side_reward_that_climbs_alone_is_not_memorisation():
    """A held-back multiple-choice file: the total reward rose 0.15 -> 0.38 as the brevity reward shortened the
    replies while the answer's reward stayed within noise, and the run was stopped as memorising at 4 of its 8
    minutes. Memorisation is judged on the answer's reward where it is logged."""
    validation = {"validation/accuracy": lambda i: 0.38 if i % 5 == 1 else None}
    answers_flat = history(start=1, **validation, **{"rewards/correct_answer/mean": lambda i: 0.15 + 0.03 * (i % 3)})
    assert "memorisation" in kinds(answers_flat)  # judged on the total, as before: it climbs
    assert "memorisation" not in kinds(answers_flat, answer_reward="correct_answer")
    answers_climb = history(start=1, **validation, **{"rewards/correct_answer/mean": lambda i: 0.1 + 0.02 * i})
    (d,) = [d for d in HealthMonitor(answer_reward="correct_answer").diagnose(answers_climb)
            if d.kind == "memorisation"]
    assert d.evidence["scored_by"] == "answer's reward" and d.message.startswith("The training reward of the answers")
