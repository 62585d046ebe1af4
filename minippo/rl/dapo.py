"""Two reward-side pieces of DAPO (Yu et al. 2025, arXiv:2503.14476): which prompt groups carry no
signal (the filter of its "dynamic sampling"), and the soft punishment of overlong responses.

Legend: B batch (responses), G prompt groups, n group size (responses per prompt), B = G * n.
Rows are grouped by prompt contiguously, as everywhere in ``minippo.rl`` (group g is rows
g*n .. g*n + n - 1).

**Zero-variance groups.** A group-relative advantage (GRPO, Dr. GRPO, RLOO:
:mod:`minippo.rl.group_advantages`) is a response's reward minus its group's mean. When the n
rewards of a prompt are all equal (a 0/1 verifier: every answer right, or every answer wrong)
every advantage of the group is exactly 0 and so is its policy gradient: the group costs
generation and update compute and teaches nothing. DAPO's dynamic sampling keeps only the groups
with ``0 < #right < n`` and samples more prompts until the batch is full.
:func:`zero_variance_groups` is that test for any reward (all n equal, compared exactly: the test
under which ``grpo_advantages`` returns exactly 0); :func:`zero_variance_share` is the share of
such groups, the metric that says how much of a batch is wasted.

**Soft overlong punishment**, DAPO eq. (13). With a length budget ``L_max`` and a soft zone of
``L_cache`` tokens before it, the reward of a response of ``|y|`` tokens gets the term::

    R_length(y) = 0                                      |y| <= L_max - L_cache
                = ((L_max - L_cache) - |y|) / L_cache     L_max - L_cache < |y| <= L_max
                = -1                                      L_max < |y|

(from 0 down to -1 across the zone; ``L_cache = 0``: no zone, -1 only beyond ``L_max``). A
response cut at the budget is not a wrong answer by necessity: the term says "too long" in
proportion, instead of a verifier's flat 0 for a truncated answer.

Arrays in, arrays out: these functions know no model and no sampler. Exercise: write the filter
yourself, `minippo exercise start zero_variance` (graded by `minippo exercise check zero_variance`).
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_float_array, check_int_array, check_range


def zero_variance_groups(rewards, group_size: int) -> np.ndarray:
    """(G,) bool: True for a prompt group whose ``group_size`` rewards are all equal (no signal).

    Parameters
    ----------
    rewards : (B,) finite float32 / float64 (a verifier's 0.0 / 1.0), B = G * group_size,
        grouped by prompt contiguously
    group_size : n >= 2, responses per prompt; must divide B

    Returns
    -------
    (G,) bool array, ``max_g(r) == min_g(r)`` per group: exactly the groups whose group-relative
    advantages are all 0 (exactly 0 under GRPO and Dr. GRPO; under RLOO to rounding, exactly for 0/1
    rewards) (DAPO keeps the others: ``0 < #right < n`` for a 0/1 reward).
    """
    r = check_float_array("rewards", rewards, ndim=1)
    check_range("group_size", group_size, 2, None, integer=True)
    B = r.shape[0]
    if B == 0 or B % group_size:
        raise ValueError(f"`group_size` ({group_size}) must divide the number of rewards B = {B} "
                         f"(group g is rows g*n .. g*n+n-1), and B must be >= 1")
    groups = r.reshape(B // group_size, group_size)                    # (G, n)
    return groups.max(axis=1) == groups.min(axis=1)                    # (G,)


def zero_variance_share(rewards, group_size: int) -> float:
    """The share of prompt groups whose rewards are all equal, in [0, 1]."""
    return float(np.mean(zero_variance_groups(rewards, group_size)))


def overlong_penalty(lengths, max_len: int, cache_len: int) -> np.ndarray:
    """DAPO eq. (13), the soft overlong punishment R_length of each response (module docstring).

    Parameters
    ----------
    lengths : (B,) int >= 0, tokens per response |y| (the EOS included, as ``response/length``)
    max_len : L_max >= 1, the length budget
    cache_len : L_cache in [0, max_len], the soft zone before the budget (0: none)

    Returns
    -------
    (B,) float64 in [-1, 0]: 0 up to ``max_len - cache_len`` tokens, then falling linearly to -1
    at ``max_len``, -1 beyond it. Add it to the verifier's reward.
    """
    lengths = check_int_array("lengths", lengths, ndim=1, low=0)
    check_range("max_len", max_len, 1, None, integer=True)
    check_range("cache_len", cache_len, 0, max_len, integer=True)
    y = lengths.astype(np.float64)                                   # (B,) |y|
    soft_start = max_len - cache_len                                 # L_max - L_cache
    # the next four lines are the three branches of eq. (13), from the longest to the shortest
    penalty = np.full(y.shape, -1.0)                                 # L_max < |y|
    in_zone = (y > soft_start) & (y <= max_len)
    penalty[in_zone] = (soft_start - y[in_zone]) / cache_len         # the soft zone
    penalty[y <= soft_start] = 0.0                                   # within the budget
    return penalty
