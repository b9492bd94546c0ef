"""The advantage estimators RLOO is compared with, on one group of k completions of a prompt.

RLOO (as in TRL): A_i = r_i - mean(r_j, j != i). The baseline leaves sample i out, so it does not
depend on y_i and E[b * grad log pi(y_i)] = 0: the gradient stays unbiased while its variance drops.
Equivalently A_i = k/(k-1) * (r_i - mean(r)).
"""

from __future__ import annotations

import numpy as np


def rloo(rewards) -> np.ndarray:
    """Leave-one-out advantages for one group (k >= 2)."""
    r = np.asarray(rewards, dtype=float)
    k = r.size
    if k < 2:
        raise ValueError("RLOO needs at least 2 completions per prompt.")
    return r - (r.sum() - r) / (k - 1)


def grpo(rewards, eps: float = 1e-4) -> np.ndarray:
    """GRPO's group-normalised advantages: (r - mean) / (std + eps). The mean includes y_i itself,
    and dividing by the group's std rescales each prompt differently."""
    r = np.asarray(rewards, dtype=float)
    return (r - r.mean()) / (r.std(ddof=1) + eps)


def reinforce(rewards) -> np.ndarray:
    """Plain REINFORCE: the reward itself, no baseline. Unbiased, but every sample pushes in the
    reward's direction, so the variance is large."""
    return np.asarray(rewards, dtype=float)


def kl_penalised(rewards, kl, beta: float) -> np.ndarray:
    """RLOO puts the KL into the reward, per sequence: r_i - beta * KL_i (TRL sums the per-token
    log-ratio over the completion)."""
    return np.asarray(rewards, dtype=float) - beta * np.asarray(kl, dtype=float)
