"""Advantage estimators of the RLHF trainer, by name: the step between rewards and the PPO update.

Legend: B batch (responses), Tn response tokens (right-padded).

An estimator is a function ``fn(rollout, cfg) -> (adv, returns)``, both (B, Tn) float arrays that are 0
on padding. ``adv`` feeds the clipped policy loss; ``returns`` are the critic's regression targets
(ignored when the config has ``critic="none"``). :func:`compute_advantages` calls the estimator named
by ``cfg.advantage_estimator`` and then, for GAE only, whitens the advantages over the batch's valid tokens.

``"gae"`` is GAE-lambda on the per-token rewards and the critic's values (Schulman et al. 2016,
arXiv:1506.02438; PPO paper eqs. (11)-(12)), with the DESIGN conventions: the value after a response's
last valid token is 0, padded positions get advantage 0 and return 0, returns = adv + values.

The critic-free estimators of :mod:`minippo.rl.group_advantages` are registered here too: one
sequence-level advantage per response from the scores of the other responses to the same prompt
(``cfg.samples_per_prompt`` = n rows per prompt, contiguous, as ``collect_rollout`` lays them out),
broadcast to its valid tokens; ``returns`` are then ``adv + values`` (the critic, if any, still trains)::

    "grpo"       (s_i - mean_g s) / (std_g s + eps)            Shao et al. 2024
    "dr_grpo"    s_i - mean_g s                                Liu et al. 2025
    "rloo"       s_i - mean of the other n - 1 scores          Ahmadian et al. 2024
    "reinforce"  s_i - mean of the batch                       Williams 1992

The sequence score s_i they use is ``score_i + sum_t non_score_reward_t``: the RM score with the KL
penalty of the reward (set ``kl_coef = 0`` and ``kl_loss_coef > 0`` for GRPO's KL-as-a-loss). Further
estimators plug in with :func:`register_advantage_estimator`.

**Whitening (our choice).** ``cfg.whiten_advantages`` whitens GAE's advantages (seed 003 sec. 12, TRL's
PPO) but NOT the critic-free ones, which are used as their papers define them: GRPO's are already
normalised per group (DeepSeekMath sec. 4.1.2; TRL's GRPOTrainer adds no batch whitening), Dr. GRPO
removes the std divide on purpose, and RLOO (Ahmadian et al. 2024; TRL's RLOOTrainer has
``normalize_advantage=False`` by default) and REINFORCE keep the score's units. Whitening them again
over the batch's TOKENS would also subtract a length-weighted mean: the group-mean-zero advantages of
GRPO / RLOO get shifted by a constant that depends on which responses are long, and a group whose
responses all scored the same (no signal, advantage exactly 0) would be pushed up or down (tested).
Each registered estimator says whether it is whitened (``register_advantage_estimator(whiten=...)``).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from minippo.rl.gae import gae
from minippo.rl.group_advantages import batch_mean_advantages, grpo_advantages, rloo_advantages
from minippo.rl.masked import masked_whiten


def gae_advantages(rollout, cfg):
    """GAE-lambda over each response: ``(adv, returns)`` from ``rollout.rewards`` and ``rollout.values``.

    delta_t = r_t + gamma V(s_{t+1}) - V(s_t), A_t = delta_t + gamma lam A_{t+1} (PPO eqs. (11)-(12)).
    """
    return gae(rollout.rewards, rollout.values, rollout.response_mask, gamma=cfg.gamma, lam=cfg.lam)


def sequence_returns(rollout) -> np.ndarray:
    """(B,) the whole return of each response: score plus its summed per-token KL penalty."""
    return rollout.scores + rollout.non_score_reward.sum(axis=1)


def _critic_free(adv_fn):
    """An estimator from a function ``(returns (B,), rollout, cfg) -> adv (B, Tn)``."""
    def estimator(rollout, cfg):
        adv = adv_fn(sequence_returns(rollout), rollout, cfg).astype(np.float64)
        return adv, (adv + rollout.values) * rollout.response_mask
    return estimator


#: name -> (estimator, needs a critic, whitened when ``cfg.whiten_advantages``: see "Whitening" above)
ADVANTAGE_ESTIMATORS: dict[str, tuple[Callable, bool, bool]] = {
    "gae": (gae_advantages, True, True),
    "grpo": (_critic_free(lambda s, ro, cfg: grpo_advantages(s, cfg.samples_per_prompt, ro.response_mask)),
             False, False),
    "dr_grpo": (_critic_free(lambda s, ro, cfg: grpo_advantages(s, cfg.samples_per_prompt, ro.response_mask,
                                                                scale=False)), False, False),
    "rloo": (_critic_free(lambda s, ro, cfg: rloo_advantages(s, cfg.samples_per_prompt, ro.response_mask)),
             False, False),
    "reinforce": (_critic_free(lambda s, ro, cfg: batch_mean_advantages(s, ro.response_mask)), False, False),
}


def register_advantage_estimator(name: str, fn: Callable, *, needs_critic: bool, whiten: bool = True) -> None:
    """Make ``fn(rollout, cfg) -> (adv, returns)`` available as ``PPOConfig(advantage_estimator=name)``;
    ``whiten``: whiten its advantages when ``cfg.whiten_advantages`` (False for an already normalised one)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise ValueError(f"`fn` must be callable, got {fn!r}")
    ADVANTAGE_ESTIMATORS[name] = (fn, bool(needs_critic), bool(whiten))


def compute_advantages(rollout, cfg):
    """``(adv, returns)`` of the estimator ``cfg.advantage_estimator``, advantages whitened if
    ``cfg.whiten_advantages`` and the estimator is registered as whitened (GAE; not the critic-free ones):
    over the batch's valid tokens, mean 0, std 1; 0 on padding."""
    fn, _, whiten = ADVANTAGE_ESTIMATORS[cfg.advantage_estimator]
    adv, returns = fn(rollout, cfg)
    if cfg.whiten_advantages and whiten:
        adv = masked_whiten(adv, rollout.response_mask)
    return adv, returns


def needs_critic(name: str) -> bool:
    """Whether the estimator ``name`` reads the critic's values."""
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"`name` must be one of {sorted(ADVANTAGE_ESTIMATORS)}, got {name!r}")
    return ADVANTAGE_ESTIMATORS[name][1]
