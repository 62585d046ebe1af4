"""Advantage estimators of the RLHF trainer, by name: the step between rewards and the PPO update.

Legend: B batch (responses), Tn response tokens (right-padded).

An estimator is a function ``fn(rollout, cfg) -> (adv, returns)``, both (B, Tn) float arrays that are 0
on padding. ``adv`` feeds the clipped policy loss; ``returns`` are the critic's regression targets
(ignored when the config has ``critic="none"``). :func:`compute_advantages` calls the estimator named
by ``cfg.advantage_estimator`` and then whitens the advantages over the batch's valid tokens.

``"gae"`` is GAE-lambda on the per-token rewards and the critic's values (Schulman et al. 2016,
arXiv:1506.02438; PPO paper eqs. (11)-(12)), with the DESIGN conventions: the value after a response's
last valid token is 0, padded positions get advantage 0 and return 0, returns = adv + values.

Critic-free estimators (GRPO, RLOO, REINFORCE with a baseline) plug in with
:func:`register_advantage_estimator` and need only ``rollout.scores`` / ``rollout.rewards`` and the
prompt groups ``rollout.prompt_index`` (``cfg.samples_per_prompt`` responses per prompt).
"""
from __future__ import annotations

from typing import Callable

from minippo.checks import check_range
from minippo.rl.gae import gae
from minippo.rl.masked import masked_whiten


def gae_advantages(rollout, cfg):
    """GAE-lambda over each response: ``(adv, returns)`` from ``rollout.rewards`` and ``rollout.values``.

    delta_t = r_t + gamma V(s_{t+1}) - V(s_t), A_t = delta_t + gamma lam A_{t+1} (PPO eqs. (11)-(12)).
    """
    return gae(rollout.rewards, rollout.values, rollout.response_mask, gamma=cfg.gamma, lam=cfg.lam)


#: name -> (estimator, needs a critic)
ADVANTAGE_ESTIMATORS: dict[str, tuple[Callable, bool]] = {"gae": (gae_advantages, True)}


def register_advantage_estimator(name: str, fn: Callable, *, needs_critic: bool) -> None:
    """Make ``fn(rollout, cfg) -> (adv, returns)`` available as ``PPOConfig(advantage_estimator=name)``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise ValueError(f"`fn` must be callable, got {fn!r}")
    ADVANTAGE_ESTIMATORS[name] = (fn, bool(needs_critic))


def compute_advantages(rollout, cfg):
    """``(adv, returns)`` of the estimator ``cfg.advantage_estimator``, advantages whitened if
    ``cfg.whiten_advantages`` (over the batch's valid tokens: mean 0, std 1; 0 on padding)."""
    fn, _ = ADVANTAGE_ESTIMATORS[cfg.advantage_estimator]
    adv, returns = fn(rollout, cfg)
    if cfg.whiten_advantages:
        adv = masked_whiten(adv, rollout.response_mask)
    return adv, returns


def needs_critic(name: str) -> bool:
    """Whether the estimator ``name`` reads the critic's values."""
    check_range("len(name)", len(name), 1, None, integer=True)
    return ADVANTAGE_ESTIMATORS[name][1]
