"""Patch `prompt_pool`: TRL's RLOOTrainer draws its training prompts from `_get_train_sampler` (a RepeatSampler,
uniform); a run given a prompt pool (`trainer.prompt_pool`, see `rloo_kit.pool`) draws them from the pool's
sampler instead, with the same contract (whole groups, the generation batch repeated for its steps).
"""

from __future__ import annotations

import logging

from ..distributed import is_main_process
from ..pool import PoolSampler

log = logging.getLogger("rloo_kit")


def use_prompt_pool(trainer) -> bool:
    """The door's entry (patch `prompt_pool`): the trainer draws its training prompts from `trainer.prompt_pool`.
    Declines (False) a trainer without a pool, and one of several processes."""
    pool = getattr(trainer, "prompt_pool", None)
    if pool is None:
        return False
    if trainer.accelerator.num_processes > 1:
        if is_main_process():
            log.warning("prompt pool: off under %d processes (each scores its own groups, so their choices would "
                        "differ); TRL's sampler draws the prompts.", trainer.accelerator.num_processes)
        return False
    args = trainer.args

    def pool_sampler(dataset=None):
        return PoolSampler(pool, num_generations=trainer.num_generations,
                           batch_size=args.generation_batch_size // trainer.num_generations,
                           repeat_count=trainer.num_iterations * args.steps_per_generation)

    trainer._get_train_sampler = pool_sampler
    return True
