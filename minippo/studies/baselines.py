"""Baselines of the policy gradient compared on one batch of scores: how much of the score's spread each removes.

Legend: B batch (responses), G prompts (groups), n group size (responses per prompt), B = G * n.

REINFORCE's estimate ``(s_i - b_i) grad log pi(y_i | x_i)`` stays unbiased for any baseline b_i that does
not depend on response i's own sample (Williams 1992), and its variance shrinks with the size of
``s_i - b_i``. PPO learns b = V(s_t) with a critic (the fourth of the four models, Q31); the critic-free methods
of :mod:`minippo.rl.group_advantages` take it from the other samples instead::

    "none"            b_i = 0
    "batch mean"      b_i = mean of the batch                      REINFORCE with a constant baseline
    "group mean"      b_i = mean of response i's prompt group      GRPO / Dr. GRPO (contains s_i: biased by (n-1)/n)
    "leave-one-out"   b_i = mean of the OTHER n - 1 of the group   RLOO (unbiased)

:func:`compare_baselines` measures the mean squared advantage ``mean_i (s_i - b_i)^2`` of each, relative
to the score's variance. A group baseline only beats the batch mean by the part of the variance that
depends on the prompt: :func:`between_prompt_fraction` = Var_g(group means) / Var(s). When prompts
hardly matter (every prompt is about as easy), the batch mean is as good as a group mean. The
leave-one-out residual is exactly n / (n - 1) times the group-mean one (the identity of
:func:`minippo.rl.group_advantages.rloo_advantages`), so its mean square is (n / (n - 1))^2 larger: the
price of being unbiased.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_float_array, check_range
from minippo.rl.group_advantages import batch_mean_advantages, grpo_advantages, rloo_advantages

BASELINES = ("none", "batch mean", "group mean", "leave-one-out")


def _scores(scores, group_size) -> np.ndarray:
    scores = check_float_array("scores", scores, ndim=1).astype(np.float64)
    check_range("group_size", group_size, 2, None, integer=True)
    if scores.size == 0 or scores.size % group_size:
        raise ValueError(f"`scores` must hold a positive multiple of `group_size` ({group_size}) responses, "
                         f"got {scores.size}")
    return scores


def baseline_residuals(scores, group_size: int) -> dict[str, np.ndarray]:
    """``s_i - b_i`` (B,) for each baseline of :data:`BASELINES` (rows grouped by prompt contiguously).

    Parameters
    ----------
    scores : (B,) sequence scores, B a multiple of ``group_size``; group g is rows g*n .. g*n+n-1.
    group_size : n >= 2.
    """
    s = _scores(scores, group_size)
    one = np.ones((s.size, 1))                                    # one "token" per response
    return {"none": s.copy(),
            "batch mean": batch_mean_advantages(s, one)[:, 0],
            "group mean": grpo_advantages(s, group_size, one, scale=False)[:, 0],
            "leave-one-out": rloo_advantages(s, group_size, one)[:, 0]}


def between_prompt_fraction(scores, group_size: int) -> float:
    """Share of the score variance explained by the prompt: Var_g(mean_g s) / Var(s) (0 when Var(s) = 0)."""
    s = _scores(scores, group_size).reshape(-1, group_size)         # (G, n)
    total = s.var()
    return float(s.mean(axis=1).var() / total) if total > 0 else 0.0


def compare_baselines(scores, group_size: int) -> dict[str, dict[str, float]]:
    """For each baseline: ``mse`` = mean_i (s_i - b_i)^2 and ``relative`` = mse / Var(s) (1 for the batch mean).

    Returns name -> {"mse", "relative"}, and ``"between_prompts"``: :func:`between_prompt_fraction`.
    """
    s = _scores(scores, group_size)
    var = float(s.var())
    out = {}
    for name, resid in baseline_residuals(s, group_size).items():
        mse = float(np.mean(resid ** 2))
        out[name] = {"mse": mse, "relative": mse / var if var > 0 else float("nan")}
    out["between_prompts"] = between_prompt_fraction(s, group_size)
    return out
