"""Patch `spread_filter`: a step's forward and backward passes spend only on the groups that teach.

A group whose K completions all got the same task reward has leave-one-out advantages of zero before the KL
penalty: it moves the policy only by the KL term. DAPO's dynamic sampling drops such groups and samples more
(verl's `filter_groups`, OpenRLHF's `--dynamic_filtering`); Axolotl skips them. On a CPU a step's policy and
reference passes, forward and backward, are about two thirds of it, so leaving the flat groups out of them
buys steps without sampling more.

The step's completions are sampled and scored first (TRL's `_generate` and `_calculate_rewards`, so the prompt
pool and the task-reward spread see every group). TRL's `_generate_and_score_completions` then runs on the
groups whose task rewards differ, its `_generate` and `_calculate_rewards` answered with what was already sampled
and scored, so the log-prob passes, the KL and the loss cover just those. Their advantages are scaled by the
share of groups kept, so that they move the policy as much as in the whole batch: the update is the unfiltered
step's less the flat groups' KL pull (with `normalize_advantages`, TRL's statistics are the kept groups'). A step
whose groups are all flat keeps its first, so TRL still has a batch.

What is logged describes every group: the completion lengths, `frac_task_reward_zero_std`, and TRL's reward
metrics (put back to every group's); `frac_reward_zero_std` becomes the task reward's share of flat groups, since
TRL's own, taken after the KL penalty, would see only the kept ones. The KL, entropy and clip ratios are the kept
groups', and so are the completions the live view shows (TRL's `_logs`, cleared each step). The share kept is
logged as `spread_filter/kept_groups`.

One process, one micro-batch a generation (the CPU preset's), text prompts, no tools: elsewhere it declines,
with a line saying why.
"""

from __future__ import annotations

import logging

import torch

from .compat import group_spread, task_rewards, zero_spread_share
from .patch import overriding
from .private import trl_metrics

log = logging.getLogger("rloo_kit")
KEPT_KEY = "spread_filter/kept_groups"


def use_spread_filter(trainer) -> bool:
    """The door's entry (patch `spread_filter`): `trainer` trains each step on its groups with spread only, where
    it asks (`trainer.spread_filter`). Declines (False) where it does not ask, and where the filter would change
    more than which groups train (several processes, micro-batches split from one generation, tools)."""
    if not getattr(trainer, "spread_filter", False):
        return False
    reason = _unsupported(trainer)
    if reason:
        log.warning("spread filter: off (%s); every group trains.", reason)
        return False
    score = trainer._generate_and_score_completions

    def generate_and_score(inputs: list[dict]) -> dict:
        if not trainer.model.training or "image" in inputs[0] or "images" in inputs[0]:
            return score(inputs)
        prompts = [x["prompt"] for x in inputs]
        prompt_ids, completion_ids, completions = trainer._generate(prompts)
        per_func = trainer._calculate_rewards(inputs, prompts, completions, completion_ids)
        spread = group_spread(trainer, per_func)
        flat = ~(spread > 0) | torch.isclose(spread, torch.zeros_like(spread))  # a NaN spread teaches nothing
        kept = [g for g, is_flat in enumerate(flat.tolist()) if not is_flat] or [0]
        rows = [g * trainer.num_generations + j for g in kept for j in range(trainer.num_generations)]

        def sampled(_prompts):
            return [prompt_ids[i] for i in rows], [completion_ids[i] for i in rows], [completions[i] for i in rows]

        def scored(*_args, **_kwargs):
            return per_func[rows]

        _keep_rows_of_step_logs(trainer, rows, len(inputs))
        with overriding("_generate", [(trainer, sampled)]), overriding("_calculate_rewards", [(trainer, scored)]):
            out = score([inputs[i] for i in rows])
        out["advantages"] = out["advantages"] * (len(kept) / len(flat))
        metrics = trl_metrics(trainer)
        every_group = {**reward_metrics(trainer, per_func), "frac_reward_zero_std": zero_spread_share(spread)}
        for key, value in every_group.items():
            if metrics.get(key):
                metrics[key][-1] = value  # TRL's figure for the kept groups, put back to every group's
        metrics[KEPT_KEY].append(len(kept) / len(flat))
        return out

    trainer._generate_and_score_completions = generate_and_score
    return True


def _unsupported(trainer) -> str | None:
    """Why the filter would change more than which groups train here, or None."""
    if trainer.accelerator.num_processes > 1:
        return f"{trainer.accelerator.num_processes} processes score their own groups"
    if trainer.args.steps_per_generation > 1:
        return (f"steps_per_generation={trainer.args.steps_per_generation} splits a generation into micro-batches "
                "of a fixed size")
    if getattr(trainer, "kit_tools", None):
        return "rollouts with tools"
    if getattr(trainer, "use_vllm", False):
        return "vLLM generation"
    return None


def _keep_rows_of_step_logs(trainer, rows: list[int], n: int) -> None:
    """TRL's logs of the step about to be scored on `rows` of its `n`: the last step's completions cleared (they
    would pass for this one's beside fewer rows), and the columns reward functions logged for every row
    (`log_extra`) narrowed to `rows`, so they stay beside their completions."""
    for value in trainer._logs.values():
        value.clear()  # a deque of rows, or a dict of them by reward or column
    pending = trainer._pending_extra_logs
    for column, values in list(pending.items()):
        if len(values) == n:
            pending[column] = [values[i] for i in rows]


def reward_metrics(trainer, per_func: torch.Tensor) -> dict[str, float]:
    """TRL's reward metrics of a step, as it logs them, from its rewards per function (a row per completion)."""
    from trl.trainer.utils import nanstd

    out = {}
    for i, name in enumerate(trainer.reward_func_names):
        out[f"rewards/{name}/mean"] = torch.nanmean(per_func[:, i]).item()
        out[f"rewards/{name}/std"] = nanstd(per_func[:, i]).item()
    rewards = task_rewards(trainer, per_func)
    out["reward"] = torch.nanmean(rewards).item()
    out["reward_std"] = nanstd(rewards).item()
    return out
