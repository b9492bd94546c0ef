"""A health monitor that reads RLOO's logged metrics while training runs and names what went wrong.

RLOO's loss is ~0 by construction, so it says nothing; the signs are in the rewards, the KL to the
reference, the entropy and the completion lengths that TRL logs each step. Each failure is named
once when it starts, with the settings to change, and kept in `monitor.diagnoses`.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from transformers import TrainerCallback

log = logging.getLogger("rloo_kit")

# where replies ramble past the completion length: a system prompt asking for a short answer took a held-back
# hotter-or-colder file from 0.19 -> 0.25 held out (replies cut at 128 tokens) to 0.12 -> 0.94 in the same 8 minutes;
# the pre-flight of a file task whose replies ramble probes it itself (`preflight_check._rambles`)
SHORT_ANSWER_PROMPT = "Answer in one short sentence."
ASK_FOR_SHORT_ANSWERS = (f'ask for a short answer in the prompt (a system prompt such as "{SHORT_ANSWER_PROMPT}": '
                         '--system-prompt on the command line, system_prompt= in load_task)')

KINDS = ("high_variance", "kl_explosion", "reward_collapse", "sampling_noise", "converged", "truncation",
         "reward_hacking", "memorisation", "answer_habit", "tool_unused", "tool_invalid")
NOT_FAILURES = ("converged",)


@dataclass
class Thresholds:
    """When each diagnosis fires. All settable: HealthMonitor(thresholds=Thresholds(kl_max=2.0))."""

    warmup_steps: int = 3  # no judgement before this many logged steps
    window: int = 6  # recent steps that high_variance looks at
    patience: int = 3  # consecutive steps a sign must last (reward_collapse, truncation, kl, high_variance's noise)
    # high_variance: the median step-to-step change of the reward over the window (so one level
    # shift does not count), relative to the larger of |mean reward| and the mean within-step
    # reward spread (reward_std), so that it is free of the reward's scale; above reward_noise for `patience` steps,
    # or grad_spikes, where the answer's reward has not risen (`reward_rise`: a run that learns is not failing)
    reward_noise: float = 0.7
    grad_spike: float = 5.0  # a grad_norm this many times the median of the earlier steps' with spread is a spike
    grad_spikes: int = 2  # this many spikes within the window
    # kl_explosion: per-token KL (TRL's log-ratio estimate) above kl_max, or kl_growth times its
    # early level (floored at kl_floor), in a run that measures validation only where a measurement is logged and
    # none of the latest memo_points beat step 0's (`_validation_clears_kl`); above kl_runaway always (runs that
    # learned peaked at 4.5); or, when no KL is logged (beta=0), entropy under
    # entropy_drop of its early level while the answer's reward has not risen (`reward_rise`: a policy that
    # learns grows sure of its answers too; the demo's entropy falls from 0.8 to 0.02 a token in ten steps as its
    # reward triples).
    kl_max: float = 1.0
    kl_runaway: float = 10.0
    kl_growth: float = 20.0
    kl_floor: float = 0.05
    entropy_drop: float = 0.3
    # a reward has risen where its mean over the last `patience` steps is above its first `warmup_steps` by
    # reward_rise x its early spread over a step's completions; judged on the answer's reward where the monitor
    # knows it (`HealthMonitor(answer_reward=...)`; a trainer the kit builds names its first reward function), so
    # that a side reward such as brevity, paid to every emptied reply, is no rise
    reward_rise: float = 0.5
    # reward_collapse: the share of prompts whose completions all got the same reward. Its fix points by the
    # policy's per-token entropy: above noisy_entropy the samples are noise (the demo learns from ~3 at first,
    # so it takes a collapse as well), and a colder draw helps; below alike_entropy the K samples are one
    # answer, and a warmer one does; in between, neither is told.
    zero_std_frac: float = 0.9
    noisy_entropy: float = 2.0
    alike_entropy: float = 0.1
    # sampling_noise, not reward_collapse, where the groups are flat while the greedy answers are right on noise_gap
    # more of the rows than the samples (validation accuracy against the answer's reward over the same steps, or
    # the pre-flight's figures where no validation was measured), and no colder draw was measured to leave the
    # prompts as flat: 0.2 is two rows more of the eleven a small file's validation has than samples right on 2%
    noise_gap: float = 0.2
    # converged, not reward_collapse, where the answer's reward has risen (`reward_rise`) before the groups went flat:
    # the policy answers each training prompt one way, right on what it learned (the demo's --minutes 3 runs from step
    # 48-63 on, answer reward 0.19 -> 0.75-1.0 and their best validation step already behind them). Not a failure,
    # but nothing more is learned from those prompts at that temperature.
    # truncation: the share of completions cut at max_completion_length, for `patience` steps, and not falling: a
    # share that fell by more than clipped_fall of itself over those steps is a policy learning to fit (the demo
    # trains at 16 tokens with a brevity reward: 81% cut at step 1, 56% at step 3, none from step 11)
    clipped_ratio: float = 0.5
    clipped_fall: float = 0.2
    # reward_hacking (needs a held-back gold scorer, reward_models.GoldMonitor, logging gold/mean beside the proxy):
    # gold below its best by gold_drop x max(|best|, gold_floor) for gold_patience measurements in a row while the
    # proxy holds (no more than proxy_hold x |its level at the best| below it, or above); or no new gold best for
    # gold_stall measurements while the proxy held and KL grew kl_hack_growth times its level at the best (floored
    # at kl_floor). A proxy that falls with gold is a policy getting worse, not one exploiting its reward.
    proxy_hold: float = 0.02
    gold_drop: float = 0.15
    gold_floor: float = 0.2
    gold_patience: int = 2
    gold_stall: int = 3
    kl_hack_growth: float = 3.0
    # memorisation (needs `validation/accuracy`, logged by a run that keeps its best step: budget.TimeBudget): the
    # training reward's mean over the window risen by memo_reward_rise above its first window's, and above step 0's
    # validation accuracy (both read as a share of answers right), while the latest memo_points validation
    # measurements are none of them more than memo_validation_gain above the first (the latest, not all since: one
    # row right once of nine, 0.00 -> 0.11 -> 0.00, kept a held-back calendar file training 144 steps on a reward that
    # rose 0.0 -> 0.5 with validation at 0.00 five times out of six)
    memo_reward_rise: float = 0.2
    memo_validation_gain: float = 0.05
    memo_points: int = 3
    # tools (a run given tools logs tools/call_rate and tools/valid_call_rate): tool_unused when the share of
    # completions that call a tool stays at or under tool_call_min for tool_patience steps; tool_invalid when the
    # calls made are valid (parsed, a known tool, ran) at a rate under tool_valid_min as long
    tool_call_min: float = 0.0
    tool_valid_min: float = 0.5
    tool_patience: int = 5


@dataclass(frozen=True)
class Diagnosis:
    kind: str
    step: int
    message: str
    fix: str
    evidence: dict = field(default_factory=dict)

    @property
    def failure(self) -> bool:
        """False for `converged`: named so that the user knows when more steps teach little, not as a fault."""
        return self.kind not in NOT_FAILURES

    @property
    def fix_label(self) -> str:
        """What the fix is called where it is shown: 'Fix' for a failure, 'Next' for a note."""
        return "Fix" if self.failure else "Next"

    def __str__(self) -> str:
        return f"[{self.kind} at step {self.step}] {self.message}\n  {self.fix_label}: {self.fix}"


SPREAD_KEY = "frac_task_reward_zero_std"  # logged by patch task_reward_spread (patches.compat)
ANSWER_SPREAD_KEY = "frac_answer_reward_zero_std"  # the same, in the first reward function alone (several of them)
# logged by a run that measures validation (budget.TimeBudget, budget.StepBudget), at the step it measured
VALIDATION_KEY = "validation/accuracy"  # greedy accuracy on training rows set apart
HABIT_KEY = "validation/habit"  # in words, where those replies ignore the row (budget.habit_words)


@dataclass(frozen=True)
class SamplingMeasured:
    """What the pre-flight measured of the trained setup's sampling (`PreflightReport.sampling_measured()`): the
    greedy answers against the samples on the same prompts, and the colder draws it probed. Where a run's groups
    go flat, it tells samples too noisy for the model's own best answer (sampling_noise, cured by a colder draw) from
    a task the model cannot yet answer at any temperature (reward_collapse), as entropy cannot: a held-back legs
    file's samples had entropy above 2 a token, and 0.5 and 0.3 left 81% of its prompts flat all the same."""

    temperature: float  # the trained setup's
    greedy_right: float  # share of the probed prompts whose greedy answer was right
    samples_right: float  # share of the samples right at `temperature`
    greedy_better: bool  # preflight_check.greedy_beats_samples of the two
    colder: tuple[tuple[float, float], ...] = ()  # (temperature, share of prompts it left without spread), drawn below
    colder_helped: float | None = None  # the colder temperature that left clearly fewer prompts flat, if one did

    @classmethod
    def from_dict(cls, d: dict) -> SamplingMeasured:
        """From its JSON form (preflight.json's `sampling_measured`), whose pairs are lists."""
        return cls(**{**d, "colder": tuple(tuple(pair) for pair in d.get("colder", ()))})


def _series(history: list[dict], key: str) -> list[float]:
    return [h[key] for h in history if h.get(key) is not None]


def _detect(history: list[dict], t: Thresholds, answer_reward: str | None = None,
            sampling: SamplingMeasured | None = None) -> dict[str, dict]:
    """The failure signs present at the end of `history` (training logs only), with their evidence; `answer_reward`
    and `sampling` as `HealthMonitor`'s."""
    found: dict[str, dict] = {}
    if len(history) < t.warmup_steps:
        return found
    recent = history[-t.patience:]
    rise = _reward_rise(history, t, answer_reward)  # a run learning: judged once, read by three signs

    noisy = _noisy(history, t, rising=rise is not None)
    if noisy:
        found["high_variance"] = noisy

    kl = _series(history, "kl")
    if kl:
        early = max(statistics.median(kl[:t.warmup_steps]), t.kl_floor)
        last = kl[-min(t.patience, len(kl)):]
        if (len(last) >= min(t.patience, 2) and all(k > min(t.kl_max, t.kl_growth * early) for k in last)
                and (min(last) > t.kl_runaway or not _validation_clears_kl(history, t))):
            found["kl_explosion"] = {"kl": round(kl[-1], 4), "early_kl": round(early, 4)}
    else:
        ent = _series(history, "entropy")
        if len(ent) > t.warmup_steps + t.patience:
            early = statistics.median(ent[:t.warmup_steps])
            if (all(e < t.entropy_drop * early for e in ent[-t.patience:])
                    and not rise):
                found["kl_explosion"] = {"entropy": round(ent[-1], 4), "early_entropy": round(early, 4),
                                         "kl": "not logged (beta=0)"}

    flat = _flat(history, t, answer_reward)
    if flat:
        evidence = {**flat, "reward": recent[-1].get("reward")}
        if recent[-1].get(f"rewards/{answer_reward}/mean") is not None:
            evidence["answer_reward"] = round(recent[-1][f"rewards/{answer_reward}/mean"], 4)
        if recent[-1].get("entropy") is not None:
            evidence["entropy"] = round(recent[-1]["entropy"], 4)
        if rise:
            found["converged"] = {**evidence, "rose": rise[2], "early": round(rise[0], 3), "now": round(rise[1], 3)}
        else:
            noise, cause = _greedy_against_samples(history, t, answer_reward, sampling)
            found["sampling_noise" if noise else "reward_collapse"] = {**evidence, **cause}

    clipped = [h.get("completions/clipped_ratio") for h in recent]
    if (len(recent) == t.patience and all(c is not None and c >= t.clipped_ratio for c in clipped)
            and clipped[-1] >= (1 - t.clipped_fall) * clipped[0]):
        found["truncation"] = {"clipped_ratio": clipped[-1]}
        if any("rewards/brevity/mean" in h for h in recent):
            found["truncation"]["brevity"] = "in the run"
    hacking = _reward_hacking(history, t)
    if hacking:
        found["reward_hacking"] = hacking
    memorising = _memorisation(history, t, answer_reward)
    if memorising:
        found["answer_habit" if "habit" in memorising else "memorisation"] = memorising
    found.update(_tool_signs(history, t))
    return found


def _greedy_against_samples(history: list[dict], t: Thresholds, answer_reward: str | None,
                            sampling: SamplingMeasured | None) -> tuple[bool, dict]:
    """Whether flat groups are noise, and the evidence: the greedy answers' accuracy against the samples', where it
    was measured: the latest validation pass (greedy, on training rows set apart) against the answer's reward over
    the latest `patience` steps (sampled; read as a share right where it lies in [0, 1]), else the pre-flight's
    (`sampling`); with the colder draws the pre-flight probed, and `validated` where the run keeps its best
    validation step (going on then costs only time). Noise: the greedy answers right on `noise_gap` more, no colder
    draw measured to leave the prompts as flat, and samples not nearly one answer (entropy over `alike_entropy`):
    such samples are the greedy answers, and a gap between the validation rows and the training reward is the rows'
    own. A held-back true-or-false file, 100% of its groups flat at entropy 0.08 a token, validation 0.75 against a
    training reward of 0.42, was told to sample colder; and again where the latest validation pass was 'false' to
    most rows (`HABIT_KEY`): right on the half of the rows that answer fits, which says nothing of noise."""
    mean_key = _answer_keys(history, answer_reward)[0]
    validation = [h for h in history if h.get(VALIDATION_KEY) is not None]
    sampled = _series(history[-t.patience:], mean_key)
    found: dict = {"validated": True} if validation else {}
    if validation and sampled and all(0.0 <= s <= 1.0 for s in sampled):
        greedy, right = validation[-1][VALIDATION_KEY], statistics.fmean(sampled)
        found.update(greedy_right=round(greedy, 3), samples_right=round(right, 3),
                     measured=f"validation at step {validation[-1]['step']}")
        habit = validation[-1].get(HABIT_KEY)  # its accuracy is the rows its one answer fits, not what it knows
        if habit:
            found["greedy_habit"] = habit
        noise = greedy >= right + t.noise_gap and not habit
    elif sampling is not None:
        found.update(greedy_right=round(sampling.greedy_right, 3), samples_right=round(sampling.samples_right, 3),
                     measured="pre-flight")
        noise = sampling.greedy_better
    else:
        return False, found
    entropy = history[-1].get("entropy")
    if entropy is not None and entropy <= t.alike_entropy:
        noise = False  # the samples are the greedy answers: no draw is noisier than the model's best
    if sampling is not None and sampling.colder:
        found["colder_flat"] = {f"{colder:g}": round(flat, 3) for colder, flat in sampling.colder}
        if sampling.colder_helped is None:
            noise = False  # measured: the colder draws left the prompts as flat
        else:
            found["colder_helped"] = sampling.colder_helped
    return noise, found


def _reward_noise(history: list[dict], t: Thresholds) -> float | None:
    """The median step-to-step change of the reward over the last `window` steps, relative to the larger of its
    mean's size and its spread over a step's completions; None before `window` steps."""
    rewards = _series(history, "reward")[-t.window:]
    spread = _series(history, "reward_std")[-t.window:]
    if len(rewards) < t.window:
        return None
    scale = max(abs(statistics.fmean(rewards)), statistics.fmean(spread) if spread else 0.0, 1e-3)
    return statistics.median(abs(b - a) for a, b in zip(rewards, rewards[1:], strict=False)) / scale


def _noisy(history: list[dict], t: Thresholds, rising: bool) -> dict | None:
    """The reward noisy (`reward_noise`) at each of the last `patience` steps, or the gradient norm spiking, in a run
    whose answer's reward has not risen (`rising`: `_reward_rise`). A run that learns is noisy too: the demo's step
    means rest on 4 prompts, so which 4 come up moves them (0.40 -> 1.01 -> 0.36 at steps 3-5 of a --minutes 3 run whose
    validation accuracy went 0.28 -> 0.78 by step 7); its noise costs it nothing that more completions or a lower
    learning rate would buy back (results/learning-rate.md: 2e-4 learned least)."""
    found: dict = {}
    noise = [_reward_noise(history[:len(history) - k], t) for k in range(t.patience)]
    if all(n is not None and n > t.reward_noise for n in noise):
        found["reward_noise"] = round(noise[0], 3)
    spikes = _grad_spikes(history, t)
    if spikes >= t.grad_spikes:
        found["grad_spikes"] = spikes
    return found if found and not rising else None


def _grad_spikes(history: list[dict], t: Thresholds) -> int:
    """Steps of the last `window` whose gradient norm is `grad_spike` x the median of the earlier steps' that had a
    group with spread. A step whose groups were all flat has no policy gradient, only the KL term's: its norm near 0
    is no baseline (a converged demo run alternates 0 and 6-10, and every 6 read as a spike against them)."""
    steps = [(h["grad_norm"], h.get(SPREAD_KEY, h.get("frac_reward_zero_std"))) for h in history
             if h.get("grad_norm") is not None]
    if len(steps) <= t.window:
        return 0
    spikes = 0
    for i in range(max(len(steps) - t.window, t.warmup_steps), len(steps)):
        baseline = [g for g, flat in steps[:i] if flat is None or flat < 1]
        if baseline and steps[i][0] > t.grad_spike * statistics.median(baseline):
            spikes += 1
    return spikes


def _flat(history: list[dict], t: Thresholds, answer_reward: str | None) -> dict | None:
    """The share of prompts without a reward spread, where it stayed at `zero_std_frac` or more over the last
    `patience` steps, in the total reward before the KL penalty, keyed by which share; or, where the monitor knows
    the answer's reward, in that alone over the last `warmup_steps + patience` (the other rewards alone gave the
    groups their spread): a hard task's first steps often have no right answer while brevity varies, and a rise
    from its first right answers cannot be judged sooner. None where neither."""
    total = SPREAD_KEY if any(SPREAD_KEY in h for h in history[-t.patience:]) else "frac_reward_zero_std"
    windows = [(total, t.patience)] + ([(ANSWER_SPREAD_KEY, t.warmup_steps + t.patience)] if answer_reward else [])
    for key, steps in windows:
        shares = [h.get(key) for h in history[-steps:]]
        if len(shares) == steps and all(z is not None and z >= t.zero_std_frac for z in shares):
            return {key: shares[-1]}
    return None


def _reward_rise(history: list[dict], t: Thresholds,
                 answer_reward: str | None) -> tuple[float, float, str] | None:
    """The answer's reward (TRL's `rewards/<answer_reward>/mean` where it is logged, else the total) at the run's start
    and now, and which of the two it is ("answer's reward" or "reward"), where it rose by `reward_rise` x its early
    spread over a step's completions: a policy converging on what pays, not one running away or emptying its replies
    for a side reward. None where it did not, and where the spread is not logged, as a rise cannot then be told from
    noise."""
    mean, std, name = _answer_keys(history, answer_reward)
    steps = [(h[mean], h[std]) for h in history if h.get(mean) is not None and h.get(std) is not None]
    if len(steps) < t.warmup_steps + t.patience:
        return None
    early = statistics.median(r for r, _ in steps[:t.warmup_steps])
    now = statistics.fmean(r for r, _ in steps[-t.patience:])
    noise = max(statistics.median(s for _, s in steps[:t.warmup_steps]), 1e-3)  # a run flat from the start: not 0
    return (early, now, name) if now > early + t.reward_rise * noise else None


def _answer_keys(history: list[dict], answer_reward: str | None) -> tuple[str, str, str]:
    """The log keys of the answer's reward (mean, spread) and what to call it, where TRL logs it per function; else
    the total reward's. A side reward (brevity, format) can rise on its own while the answers do not."""
    key = f"rewards/{answer_reward}"
    if answer_reward is not None and any(f"{key}/mean" in h for h in history):
        return f"{key}/mean", f"{key}/std", "answer's reward"
    return "reward", "reward_std", "reward"


def _tool_signs(history: list[dict], t: Thresholds) -> dict[str, dict]:
    """A run with tools whose completions stopped calling them (or never did), or whose calls mostly fail."""
    calls = [h["tools/call_rate"] for h in history if "tools/call_rate" in h][-t.tool_patience:]
    valid = [h["tools/valid_call_rate"] for h in history if h.get("tools/valid_call_rate") is not None]
    valid = valid[-t.tool_patience:]
    found = {}
    if len(calls) == t.tool_patience and max(calls) <= t.tool_call_min:
        found["tool_unused"] = {"tools/call_rate": calls[-1], "steps": len(calls)}
    if len(valid) == t.tool_patience and max(valid) < t.tool_valid_min:
        found["tool_invalid"] = {"tools/valid_call_rate": round(valid[-1], 3), "steps": len(valid)}
    return found


def _validation_clears_kl(history: list[dict], t: Thresholds) -> bool:
    """Whether a run that measures validation (greedy accuracy on training rows set apart) has one of its latest
    `memo_points` measurements answer better than step 0, or logs no measurement at this step to judge by. Its KL far
    from the reference is then the price of better answers, not a runaway, and a budget keeps that step. Runs on
    held-back word-choice files that learned to reply with the answer alone ("Saw." where the base model wrote a
    paragraph: the first token's distribution moves far) logged a per-token KL of 1.5-4.5 from step 11-22 on, over
    the 1.0 ceiling, while validation rose to its best (0.17 -> 0.75, 0.42 -> 0.92; held out 0.12 -> 0.81,
    0.25 -> 0.56), and were named `kl_explosion` with a fix that would slow them. The latest, not the best so far:
    a run that gained early and then fell back to step 0's level has nothing left to pay for. A run without
    validation is judged on its KL alone."""
    validation = _series(history, VALIDATION_KEY)
    if not validation:
        return False
    fresh = history[-1].get(VALIDATION_KEY) is not None
    return not fresh or max(validation[1:][-t.memo_points:], default=validation[0]) > validation[0]


def _memorisation(history: list[dict], t: Thresholds, answer_reward: str | None = None) -> dict | None:
    """The answer's training reward climbing while greedy accuracy on validation rows (training rows set apart) is,
    over its latest measurements, where it started: the policy is learning its training prompts, not the rule that
    answers them (a run that learned the rule earlier keeps that step's adapter: a budget keeps the best validation
    step). The answer's reward, not the total: a held-back multiple-choice file's total rose 0.15 -> 0.38 in 16
    steps as the brevity reward shortened the replies, while the answer's reward moved 0.10 -> 0.26, within noise,
    and a total-reward rule stopped the run at 4 of its 8 minutes. Judged on a step that carries a measurement, never
    on one measured steps before while the reward has moved since: a held-back smallest-of-three file was stopped at
    step 35 on its step-28 validation (0.43 against 0.64 at step 0), and step 35, measured as it stopped, was 0.79.

    Where the latest measurement's replies ignore the row (`HABIT_KEY`), the evidence says how, and the run is named
    `answer_habit`: the reward climbed on the training rows that the habit happens to fit. A held-back number-choice
    run's training reward rose 0.28 -> 0.50 in 24 steps while its validation replies picked the first number offered
    whatever the row (validation 0.47 at step 0, 0.37 at step 24): more rows and a lower learning rate, memorisation's
    fix, do not touch a habit.

    Only a reward risen above step 0's validation accuracy counts: the training reward is the samples' score, and
    samples that come to answer as the greedy replies did score what those already scored. A held-back alphabetical-
    order file (validation 0.75 at step 0 on 16 rows, held out 0.50) was stopped at 4 of its 8 minutes as memorising
    while its answer's reward rose 0.30 -> 0.64 with the entropy 2.4 -> 0.1 a token: its samples had caught up with
    its greedy answers, no more."""
    if history[-1].get(VALIDATION_KEY) is None:
        return None
    validation = _series(history, VALIDATION_KEY)
    mean, _, name = _answer_keys(history, answer_reward)
    rewards = _series(history, mean)
    if len(validation) < t.memo_points + 1 or len(rewards) < 2 * t.window:
        return None
    early, now = statistics.fmean(rewards[:t.window]), statistics.fmean(rewards[-t.window:])
    latest = validation[-t.memo_points:]
    if (now - early < t.memo_reward_rise or now <= validation[0]
            or max(latest) > validation[0] + t.memo_validation_gain):
        return None
    evidence = {"scored_by": name, "reward_early": round(early, 3), "reward_now": round(now, 3),
                "validation_start": validation[0], "validation_latest": [round(v, 3) for v in latest],
                "validation_best_since": max(validation[1:]), "measurements": len(validation)}
    if history[-1].get(HABIT_KEY):
        evidence["habit"] = history[-1][HABIT_KEY]
    return evidence


def _reward_hacking(history: list[dict], t: Thresholds) -> dict | None:
    """The proxy (the trained-on reward, `proxy/mean`, else the step's `reward`) rising or holding while a held-back
    gold score (`gold/mean`) falls from its best, or stalls while the KL to the reference grows. A proxy that
    saturates while gold falls is the common case: the reward model rates the new answers as highly as the best
    ones, the gold rule does not."""
    points = [h for h in history if h.get("gold/mean") is not None]
    if len(points) < max(3, t.gold_patience + 1):
        return None
    gold = [h["gold/mean"] for h in points]
    best = max(range(len(gold)), key=gold.__getitem__)  # the first best

    def proxy(h):
        return h.get("proxy/mean", h.get("reward"))

    last, at_best = points[-1], points[best]
    if proxy(last) is None or proxy(at_best) is None:
        return None
    if proxy(last) < proxy(at_best) - t.proxy_hold * abs(proxy(at_best)):
        return None  # the proxy fell with gold
    ev = {"best_step": at_best["step"], "gold_best": round(gold[best], 4), "gold_now": round(gold[-1], 4),
          "proxy_at_best": round(proxy(at_best), 4), "proxy_now": round(proxy(last), 4), "step_now": last["step"]}
    drop = t.gold_drop * max(abs(gold[best]), t.gold_floor)
    if best < len(gold) - t.gold_patience and all(g < gold[best] - drop for g in gold[-t.gold_patience:]):
        return {**ev, "sign": "gold_falls"}
    kl_best, kl_now = at_best.get("kl"), last.get("kl")
    if (best <= len(gold) - 1 - t.gold_stall and kl_best is not None and kl_now is not None
            and kl_now > t.kl_hack_growth * max(kl_best, t.kl_floor)):
        return {**ev, "sign": "kl_grows", "kl_at_best": round(kl_best, 4), "kl_now": round(kl_now, 4)}
    return None


def _advice(kind: str, ev: dict, args, t: Thresholds | None = None, asks_short: bool = False) -> tuple[str, str]:
    """Plain-words message and the concrete fix, using the run's own settings where known (`asks_short`: the prompts
    ask for a short answer already)."""
    g = getattr(args, "num_generations", None) or 4
    lr = getattr(args, "learning_rate", None) or 1e-5
    beta = getattr(args, "beta", None)
    temp = getattr(args, "temperature", None) or 1.0
    mcl = getattr(args, "max_completion_length", None) or 256
    if kind == "high_variance":
        return (f"The reward jumps from step to step far more than it trends, and the answer's reward has not risen "
                f"({ev}). Each step's gradient rests on too few completions, so updates are mostly noise.",
                f"raise num_generations {g} -> {2 * g} (and the batch with it), or gradient_accumulation_steps "
                f"x2; halve learning_rate {lr:g} -> {lr / 2:g}.")
    if kind == "kl_explosion":
        b = f"{beta:g} -> {max(2 * beta, 0.04):g}" if beta else "0 -> 0.04"
        return (f"The policy is running away from the reference model ({ev}): it is exploiting the reward "
                "or degenerating, and its text will stop resembling the base model's.",
                f"raise beta {b}; halve learning_rate {lr:g} -> {lr / 2:g}; keep max_grad_norm at 1.0.")
    if kind == "reward_collapse":
        return _collapse_advice(ev, g, temp, t or Thresholds())
    if kind == "sampling_noise":
        return _noise_advice(ev, g, temp)
    if kind == "converged":
        alone = ANSWER_SPREAD_KEY in ev  # flat in the answer's reward alone
        share = next(v for k, v in ev.items() if k.endswith("zero_std"))
        entropy = f" (entropy {ev['entropy']:.3f} a token)" if ev.get("entropy") is not None else ""
        return (f"{share:.0%} of the prompts of the latest steps got the same {'answer ' * alone}reward on all "
                f"their completions, after the {ev['rose']} rose {ev['early']:.2f} -> {ev['now']:.2f}: the policy now "
                f"answers each training prompt one way{entropy}, so further steps learn little from them"
                f"{' (the other rewards, such as brevity, still move it)' if alone else ''}. Not a failure in itself: "
                "the validation curve (of a run given --minutes or --keep best), or the held-out evaluation, "
                "tells whether it learned the task or settled on one answer for every prompt.",
                "where validation has stopped rising or the reward is at its maximum, stop: a run that measures "
                "validation keeps its best step (HealthMonitor(stop_on=['converged']) stops here). To learn the "
                f"prompts still answered wrong, raise temperature {temp:g} -> {min(temp + 0.3, 1.5):g} or "
                f"num_generations {g} -> {2 * g}, or draw solved prompts less (--prompt-pool).")
    if kind == "reward_hacking":
        return _hacking_advice(ev, args, beta)
    if kind == "tool_unused":
        return (f"No completion has called a tool for {ev['steps']} steps ({ev}): RLOO reinforces the calls it "
                "samples, so a call that is never sampled is never learned.",
                "show a worked call in the prompt (rloo_kit.tools.with_tools(task, tools, example=...)), raise "
                f"temperature {temp:g} or num_generations {g} -> {2 * g} so that a call is sampled now and then, "
                "or warm the model up on a handful of worked examples with TRL's SFTTrainer.")
    if kind == "tool_invalid":
        return (f"Most tool calls fail ({ev}): they do not parse, name no tool, or the tool raises; their error "
                "comes back as the result, so the answer after it is rarely right.",
                "look at a few calls (the live view's latest completions); make the call syntax in the prompt's "
                "example match the tool's arguments exactly, and let the tool accept the forms the model writes.")
    if kind in ("memorisation", "answer_habit"):
        return _memorisation_advice(ev, lr)
    return (f"Most completions are cut at max_completion_length={mcl} ({ev}); a cut answer usually has "
            "no final answer to score.",
            f"raise max_completion_length {mcl} -> {2 * mcl}, {'' if asks_short else ASK_FOR_SHORT_ANSWERS + ', '}or "
            + ("give the brevity reward the run has a larger weight." if ev.get("brevity") else
               "add rloo_kit.rewards.brevity() with a small weight."))


def _memorisation_advice(ev: dict, lr: float) -> tuple[str, str]:
    """The training reward up, validation where it started: prompts learned by heart, or a habit (`ev["habit"]`)
    that the reward pays on the rows it happens to fit. Neither is the task; only the fixes differ."""
    of_answers = " of the answers" if ev.get("scored_by") == "answer's reward" else ""
    flat = (f"The training reward{of_answers} rose {ev['reward_early']:g} -> {ev['reward_now']:g}, but greedy "
            f"accuracy on training rows set apart is no better than at the start ({ev['validation_start']:g}) over "
            f"the latest {len(ev['validation_latest'])} measurements (at best {ev['validation_best_since']:g} over the "
            f"{ev['measurements'] - 1} since the start)")
    if "habit" not in ev:
        return (f"{flat}: the policy is learning its training prompts, not the rule that answers them.",
                "keep the best validation step's adapter (a run that measures validation does; one given --minutes "
                f"stops here); give more and more varied training rows; halve learning_rate {lr:g} -> {lr / 2:g} or "
                "raise beta so that the policy stays nearer the base model.")
    return (f"{flat}, and {ev['habit']}: the policy learned a habit, which the reward pays on the training rows it "
            "happens to fit, not the task.",
            "keep the best validation step's adapter (a run that measures validation does, and never keeps a step "
            "whose replies ignore the row; one given --minutes stops here); count the training rows' answers by label "
            "and by place in their lists, and even them out where one is far commoner, as a habit earns its answer's "
            "share of the rows; read the kept step's validation replies (best/replies.json) beside the base model's "
            "(rloo-kit eval) before training longer.")


def _flat_in(ev: dict) -> tuple[str, str, str]:
    """What the groups are flat in, what the fix says first where it is the answer's reward alone, and the cause of a
    reward that never pays: shared by reward_collapse and sampling_noise. Flat in the answer's reward while the
    others spread, a run learns those alone, which often only empties its replies ('150' for *the number right before
    162*) but can make a few right answers common (a rounding file's replies shortened to a number and went 0.00 ->
    0.94 held out in 8 minutes): a run that keeps its best validation step is told it may go on, any other to stop."""
    reward = ev.get("answer_reward", ev.get("reward"))
    scorer = "the answer's reward" if "answer_reward" in ev else "the reward"
    cause = (f" Every completion scores 0 from {scorer}: it never pays (an answer format the model never writes, "
             "or answers that never match; rloo_kit.preflight(...) shows completions and their scores)."
             if reward is not None and abs(reward) < 1e-9 else "")
    if ANSWER_SPREAD_KEY not in ev:
        return "reward", "", cause
    first = ("this run keeps its best validation step, so going on costs only time: shorter replies sometimes make a "
             "few right answers common (a rounding file's did, in 8 minutes), and where none come the step kept is no "
             "worse; "
             if ev.get("validated") else "stop the run, as what it learns now is the other rewards' alone; ")
    return ("answer's reward", first,
            cause + " The spread the groups have comes from the other rewards alone (such as brevity), so the run "
                    "learns those: the replies change, and no answer gets better until right ones are sampled.")


def _collapse_advice(ev: dict, g: int, temp: float, t: Thresholds) -> tuple[str, str]:
    """No reward spread: a reward that never pays, samples too alike (warmer), or noisy where nothing says a colder
    draw would not help (colder). Where the greedy answers were measured no better than the samples, or colder draws
    as flat, a colder draw is not advised: the model does not know these answers yet."""
    what, stop, cause = _flat_in(ev)
    entropy = ev.get("entropy")
    if entropy is not None and entropy <= t.alike_entropy:
        sampling = (f"the samples are nearly one answer (entropy {entropy:.3f} a token): raise temperature "
                    f"{temp:g} -> {min(temp + 0.3, 1.5):g} and num_generations")
    elif "colder_flat" in ev and "colder_helped" not in ev:
        drawn = ", ".join(f"{flat:.0%} at {colder}" for colder, flat in ev["colder_flat"].items())
        sampling = (f"a colder draw does not help here (the pre-flight measured the prompts left without spread: "
                    f"{drawn}); raise num_generations")
    elif "greedy_habit" in ev:
        sampling = (f"a colder draw is not likely to help here (greedy answers right on {ev['greedy_right']:.0%}, "
                    f"{ev['measured']}, where {ev['greedy_habit']}: the rows that answer fits, not what the model "
                    "knows); raise num_generations")
    elif "greedy_right" in ev:
        sampling = (f"a colder draw is not likely to help here (greedy answers right on {ev['greedy_right']:.0%}, "
                    f"{ev['measured']}, samples on {ev['samples_right']:.0%}: fewer than {t.noise_gap:.0%} of the "
                    "rows more); raise num_generations")
    elif entropy is not None and entropy >= t.noisy_entropy:
        sampling = (f"the samples are noisy (entropy {entropy:.2f} a token): if the greedy answers are better "
                    f"(rloo-kit eval shows both), lower temperature {temp:g} -> {round(temp / 2, 2):g} or set "
                    "min_p=0.1, and num_generations")
    else:
        sampling = "raise num_generations"
    return (f"Most groups have no spread in the {what} ({ev}): every completion of a prompt scores the same, so "
            f"the leave-one-out advantage is zero and nothing is learned.{cause}",
            f"{stop}check the reward on a few completions by hand (a constant or always-zero reward does this); "
            f"if the task is too hard, make it easier or give partial credit; {sampling} {g} -> {2 * g}. If the "
            "reward is at its maximum, the task is solved: stop.")


def _noise_advice(ev: dict, g: int, temp: float) -> tuple[str, str]:
    """No reward spread because the samples are wrong where the greedy answers are right: a colder draw, at the
    temperature the pre-flight measured to help where it did; never a warmer one."""
    what, stop, _ = _flat_in(ev)
    helped = ev.get("colder_helped")
    lower = (f"lower temperature {temp:g} -> {helped:g} (the pre-flight measured "
             f"{ev['colder_flat'][f'{helped:g}']:.0%} of the prompts without spread there)"
             if helped is not None and helped < temp else f"lower temperature {temp:g} -> {round(temp / 2, 2):g}")
    return (f"Most groups have no spread in the {what} ({ev}), and the samples are wrong where the model's greedy "
            f"answers are right: greedy answers right on {ev['greedy_right']:.0%} ({ev['measured']}), samples on "
            f"{ev['samples_right']:.0%}. The samples are noisier than the model's best answer, so each group is "
            "wrong together and nothing is learned.",
            f"{stop}{lower}, or cut the sampling tail with min_p=0.1 (a recipe key), and raise num_generations "
            f"{g} -> {2 * g}; a higher temperature makes this worse.")


def _hacking_advice(ev: dict, args, beta: float | None) -> tuple[str, str]:
    """Reward hacking in the run's numbers: the best gold step to keep, beta raised, better preferences."""
    step = ev["best_step"]
    if ev["sign"] == "gold_falls":
        what = (f"the held-back gold score fell from {ev['gold_best']:g} at step {step} to {ev['gold_now']:g} at step "
                f"{ev['step_now']}")
    else:
        what = (f"the held-back gold score has not improved since step {step} ({ev['gold_best']:g}, now "
                f"{ev['gold_now']:g}) while the KL to the reference grew {ev['kl_at_best']:g} -> {ev['kl_now']:g}")
    save_steps = getattr(args, "save_steps", None)
    kept = (f"checkpoint-{step} in the output directory" if save_steps and step and step % save_steps == 0 else
            f"the checkpoint nearest step {step}; set save_steps so that one falls on each gold measurement")
    b = f"{beta:g} -> {max(4 * beta, 0.1):g}" if beta else "0 -> 0.1"
    trend = "kept rising" if ev["proxy_now"] > ev["proxy_at_best"] else "held"
    return (f"Reward hacking: the trained-on (proxy) reward {trend} ({ev['proxy_at_best']:g} -> "
            f"{ev['proxy_now']:g}) while {what}. The policy is exploiting the reward model's mistakes, not getting "
            "better at what the reward model stood for.",
            f"stop at the best gold step, {step}, and keep it: {kept} (HealthMonitor(stop_on=['reward_hacking']) stops "
            f"a run when it names this); raise beta {b} to keep the policy near the model the reward model was trained "
            "on; give the reward model more and better preference data, above all pairs of this policy's own recent "
            "samples labelled by the gold judgement, so that it stops rewarding what it now rewards wrongly.")


class HealthMonitor(TrainerCallback):
    """Watches every training log; names the failures in `KINDS` (reward_hacking where a held-back gold score is logged,
    reward_models.GoldMonitor), and a run that has converged on its training prompts.

    Each diagnosis is reported once, when it starts (a warning on the 'rloo_kit' logger, which a
    notebook shows) and kept in `diagnoses`. Kinds in `stop_on` end training cleanly: the Trainer
    stops after the step, and the adapter is saved as usual. `answer_reward` names the reward function that scores
    the answer (TRL's `rewards/<name>/mean`), whose rise tells a run that learns from one that runs away or empties
    its replies for a side reward, and one converged from one collapsed; `build_trainer` sets it to the first of the
    run's rewards, else the total counts. `sampling`, the pre-flight's figures of greedy answers against samples
    (`PreflightReport.sampling_measured()`, which `pipeline.Run` passes), tells flat groups of noisy samples
    (sampling_noise) from a task not yet known at any temperature (reward_collapse) before validation is measured.
    """

    def __init__(self, thresholds: Thresholds | None = None, stop_on: Iterable[str] = (), verbose: bool = True,
                 answer_reward: str | None = None, sampling: SamplingMeasured | None = None, asks_short: bool = False):
        unknown = set(stop_on) - set(KINDS)
        if unknown:
            from .errors import ConfigError

            raise ConfigError(f"stop_on has unknown kind(s) {sorted(unknown)}; choose from {KINDS}.")
        self.thresholds = thresholds or Thresholds()
        self.stop_on = set(stop_on)
        self.verbose = verbose
        self.answer_reward = answer_reward  # the reward function that scores the answer; None: the total reward
        self.sampling = sampling  # the pre-flight's greedy-against-sampled figures; None: not measured
        self.asks_short = asks_short  # the prompts ask for a short answer already: the truncation fix does not again
        self.history: list[dict] = []
        self.diagnoses: list[Diagnosis] = []
        self.stopped_by: Diagnosis | None = None

    def observe(self, logs: dict, step: int, args=None) -> list[Diagnosis]:
        """Take one step's metrics; return the diagnoses that start at this step."""
        if "reward" not in logs:
            return []  # eval or end-of-training summary logs
        self.history.append({**logs, "step": step})
        seen = {d.kind for d in self.diagnoses}
        new = []
        for kind, evidence in _detect(self.history, self.thresholds, self.answer_reward, self.sampling).items():
            if kind not in seen:
                message, fix = _advice(kind, evidence, args, self.thresholds, self.asks_short)
                new.append(Diagnosis(kind, step, message, fix, evidence))
        self.diagnoses.extend(new)
        return new

    def diagnose(self, log_history: list[dict], args=None) -> list[Diagnosis]:
        """Replay a finished run's `trainer.state.log_history`; the diagnoses, in the order they started."""
        replay = HealthMonitor(self.thresholds, verbose=False, answer_reward=self.answer_reward, sampling=self.sampling,
                               asks_short=self.asks_short)
        for entry in log_history:
            replay.observe(entry, entry.get("step", len(replay.history) + 1), args)
        return replay.diagnoses

    # TrainerCallback ------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self.history, self.diagnoses, self.stopped_by = [], [], None

    def on_log(self, args, state, control, logs=None, **kwargs):
        # Under `accelerate launch` every process sees the same metrics (TRL gathers them across processes)
        # and so takes the same stop decision; only the main process reports.
        report = getattr(state, "is_world_process_zero", True)  # True outside a Trainer, e.g. a replay
        for d in self.observe(logs or {}, state.global_step, args):
            if self.verbose and report:
                log.warning("Health monitor: %s", d)
            if d.kind in self.stop_on and self.stopped_by is None:
                self.stopped_by = d
                control.should_training_stop = True
                if report:
                    log.warning("Health monitor: stopping training on %s (stop_on); the adapter is kept.", d.kind)
        return control
