"""Patch `group_sampler`: TRL's RLOOTrainer draws its training prompts from `_get_train_sampler` (a RepeatSampler:
uniform, each prompt K times in a row). A run given a prompt pool (`trainer.prompt_pool`, see `rloo_kit.pool`) or
choice questions in two orders (`trainer.choice_twins`, see `rloo_kit.choice_order`) draws them from
`GroupSampler` instead, with the same contract (whole groups, the generation batch repeated for its steps).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator, Mapping, Sequence

from torch.utils.data import Sampler

from ..distributed import is_main_process

log = logging.getLogger("rloo_kit")


def uniform_draw(rows: Sequence[int], seed: int) -> Callable[[int], list[int]]:
    """Like TRL's RepeatSampler: generation batches cut from a shuffled pass over `rows`, a new shuffle for each
    pass (a pass's last rows that fill no batch are left, as TRL leaves them)."""
    rng, left = random.Random(seed), []

    def choose(n: int) -> list[int]:
        nonlocal left
        if len(left) < n:
            left = rng.sample(list(rows), len(rows))
        chosen, left = left[:n], left[n:]
        return chosen

    return choose


class GroupSampler(Sampler[int]):
    """TRL's `RepeatSampler` contract (each chosen row K times in a row, whole groups, the generation batch repeated
    for `num_iterations x steps_per_generation`), with `choose(n)` choosing each generation batch's rows when it is
    drawn (a prompt pool's, or `uniform_draw`), and a row with a twin (`choice_order.with_reordered_twins`) sampled
    K - K//2 times as written and K//2 times as its twin."""

    def __init__(self, choose: Callable[[int], list[int]], n_rows: int, *, num_generations: int, batch_size: int,
                 repeat_count: int, twins: Mapping[int, int] | None = None):
        self.choose, self.k, self.batch_size, self.repeat_count = choose, num_generations, batch_size, repeat_count
        self.twins = dict(twins or {})
        self.batches = n_rows // batch_size

    def __len__(self) -> int:
        return self.batches * self.batch_size * self.k * self.repeat_count

    def group(self, row: int) -> list[int]:
        twin = self.twins.get(row)
        if twin is None:
            return [row] * self.k
        return [row] * (self.k - self.k // 2) + [twin] * (self.k // 2)

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.batches):
            rows = self.choose(self.batch_size)
            for _ in range(self.repeat_count):
                for row in rows:
                    yield from self.group(row)


def use_group_sampler(trainer) -> bool:
    """The door's entry (patch `group_sampler`): the trainer draws its training prompts with `GroupSampler`, from
    `trainer.prompt_pool` where it has one and uniformly where not, in groups of two orders where it has
    `trainer.choice_twins`. Under several processes the pool is left out (each process scores its own share of the
    groups, so their choices would differ): the uniform draw, seeded alike on each, takes its place."""
    pool, twins = getattr(trainer, "prompt_pool", None), getattr(trainer, "choice_twins", None) or {}
    if pool is not None and trainer.accelerator.num_processes > 1:
        if is_main_process():
            log.warning("prompt pool: off under %d processes (each scores its own groups, so their choices would "
                        "differ); the prompts are drawn uniformly.", trainer.accelerator.num_processes)
        pool = None
    if pool is None and not twins:
        return False
    args = trainer.args
    batch_size = args.generation_batch_size // trainer.num_generations
    twin_rows = set(twins.values())
    originals = [row for row in range(len(trainer.train_dataset)) if row not in twin_rows]
    if pool is not None:
        pool.batch = batch_size
    choose = pool.choose if pool is not None else uniform_draw(originals, args.seed)

    def group_sampler(dataset=None):
        return GroupSampler(choose, len(originals), num_generations=trainer.num_generations, batch_size=batch_size,
                            repeat_count=trainer.num_iterations * args.steps_per_generation, twins=twins)

    trainer._get_train_sampler = group_sampler
    return True
