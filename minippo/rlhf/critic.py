"""The critic of RLHF-PPO, set up before the first iteration: which network, which weights, which
units.

Legend: B batch (responses), Tn response tokens.

Of the four models the critic is the one whose form varies most between implementations. Canonical
PPO (:mod:`minippo.rlhf.ppo`) trains a separate TinyGPT beside the actor, which :func:`build_critic`
initialises from the reward model (Ziegler et al. 2019 initialise the value function from the reward
model: it already reads responses the way the score does), from the SFT trunk, or at random
(``cfg.critic_init``). The other arrangements are knobs of :mod:`minippo.rlhf.ppo_knobs`
(``cfg.critic``):

* ``"shared"``: the scalar head of the actor's own TinyGPT (one forward pass gives logits and
  values). With ``shared_stop_gradient`` the value loss trains only the head and never pushes on the
  shared trunk (``TinyGPT.backward(scalar_into_trunk=False)``).
* ``"none"``: no critic (values are 0); the critic-free family is :mod:`minippo.rlhf.grpo`: three
  models.

Value normalisation (a knob, ``cfg.value_norm``, :class:`ValueNorm`): the head predicts
``h = (V - mu) / sigma`` where mu, sigma are running statistics of the returns; the value is
``V = sigma h + mu`` and the loss compares h with the normalised targets. When the statistics move,
the head's weight and bias are rescaled so that every V stays exactly the same ("preserving
outputs", PopArt, van Hasselt et al. 2016, arXiv:1602.07714). Switched off, :class:`ValueNorm` is
the identity (mu = 0, sigma = 1).

The bias init (canonical; the knob ``critic_bias_init = "keep"`` leaves it out;
:func:`init_bias_to_mean_score`): at the first rollout the value head's bias is shifted so that the
mean value equals the mean score, so the critic does not start an arbitrary distance away from the
returns (lesson 16 measures what that costs).
"""
from __future__ import annotations

import math

import numpy as np

from minippo.checks import check_float_array, check_range
from minippo.nn.gpt import TinyGPT
from minippo.rl.masked import masked_mean

SEED_CRITIC = 7         # np.random.default_rng([cfg.seed, SEED_CRITIC]) initialises a random critic


def build_critic(critic_init: str, sft_model: TinyGPT, reward_model, seed: int) -> TinyGPT:
    """The separate critic's TinyGPT: ``critic_init`` "reward_model" (the RM's trunk and head, its
    normalisation folded in: Ziegler et al. 2019), "sft" (the SFT trunk, head 0) or "random" (a
    fresh TinyGPT of ``np.random.default_rng([seed, SEED_CRITIC])``)."""
    if critic_init == "reward_model":
        return reward_model.normalized_model()     # trunk + head of the RM, normalisation folded in
    if critic_init == "sft":
        model = sft_model.copy()
        model.params["scalar_head.w"][...] = 0.0
        model.params["scalar_head.b"][...] = 0.0
        return model
    return TinyGPT(sft_model.cfg, rng=np.random.default_rng([seed, SEED_CRITIC]))


class ValueNorm:
    """Running mean and variance of the returns (Chan et al.'s parallel update, float64) and the
    PopArt rescaling of a value head; the identity while ``enabled`` is False or nothing has been
    seen."""

    def __init__(self, enabled: bool, mean: float = 0.0, var: float = 1.0, count: float = 0.0):
        self.enabled = bool(enabled)
        self.mean, self.var, self.count = float(mean), float(var), float(count)

    @property
    def mu_sigma(self) -> tuple[float, float]:
        """(mu, sigma) of ``V = sigma h + mu``: (0, 1) until the first batch of returns."""
        if not self.enabled or self.count == 0:
            return 0.0, 1.0
        return self.mean, math.sqrt(max(self.var, 1e-8))

    def normalise(self, x):
        """(x - mu) / sigma: values or returns into the units the head predicts."""
        mu, sigma = self.mu_sigma
        return (x - mu) / sigma

    def denormalise(self, h) -> np.ndarray:
        """V = sigma h + mu, in float64 (the head's raw output to return units)."""
        mu, sigma = self.mu_sigma
        return np.asarray(h).astype(np.float64) * sigma + mu

    def update(self, returns, mask, head_params: dict | None) -> None:
        """Merge the valid ``returns`` into the statistics; rescale ``head_params``
        (``scalar_head.w|b``) so that every V stays the same (PopArt). A no-op when disabled or
        without a head."""
        if not self.enabled or head_params is None:
            return
        mu, sigma = self.mu_sigma
        x = np.asarray(returns, dtype=np.float64)[np.asarray(mask) != 0]
        if x.size:
            b_mean, b_var, n = float(x.mean()), float(x.var()), float(x.size)
            if self.count == 0:
                self.mean, self.var, self.count = b_mean, b_var, n
            else:
                total = self.count + n
                delta = b_mean - self.mean
                # the next two lines merge two (mean, M2) summaries
                m2 = self.var * self.count + b_var * n + delta * delta * self.count * n / total
                self.mean, self.var, self.count = self.mean + delta * n / total, m2 / total, total
        new_mu, new_sigma = self.mu_sigma
        # V = sigma (x w + b) + mu = new_sigma (x w' + b') + new_mu  ->  the next two lines (PopArt)
        head_params["scalar_head.w"] *= head_params["scalar_head.w"].dtype.type(sigma / new_sigma)
        b = head_params["scalar_head.b"]
        b[...] = (sigma * b + mu - new_mu) / new_sigma

    def state_dict(self) -> dict:
        return {"enabled": self.enabled, "mean": self.mean, "var": self.var, "count": self.count}

    @classmethod
    def from_state(cls, state: dict) -> "ValueNorm":
        """The statistics of :meth:`state_dict`, checked: ``enabled`` a bool, ``mean`` finite,
        ``var`` and ``count`` finite and >= 0 (a ``ValueError`` naming the entry otherwise)."""
        if not isinstance(state, dict) or set(state) != {"enabled", "mean", "var", "count"}:
            raise ValueError("`value_norm` must be a dict with enabled, mean, var, count; got "
                             f"{state!r}")
        if not isinstance(state["enabled"], bool):
            raise ValueError(f"`value_norm.enabled` must be true or false, got "
                             f"{state['enabled']!r}")
        check_range("value_norm.mean", state["mean"])
        check_range("value_norm.var", state["var"], 0, None)
        check_range("value_norm.count", state["count"], 0, None)
        return cls(**state)


def init_bias_to_mean_score(head_params: dict, values, scores, mask, sigma: float = 1.0) -> float:
    """Shift a value head so that its mean value over the valid tokens equals the mean score;
    returns the shift added to every value (the head's bias moves by shift / sigma: sigma of
    :class:`ValueNorm`, 1 without value normalisation)."""
    delta = float(np.mean(scores)) - masked_mean(np.asarray(values, dtype=np.float64), mask)
    check_float_array("delta", np.asarray([delta], dtype=np.float64))
    b = head_params["scalar_head.b"]
    b += b.dtype.type(delta / sigma)
    return delta
