"""KL divergence: per-token estimators, the exact value from logits, and the beta controllers.

Legend: B batch, T tokens, V vocab; "..." is any leading shape.

Per-token estimators of KL(pi || pi_ref) from tokens a ~ pi (Schulman 2020, "Approximating KL
divergence", http://joschu.net/blog/kl-approx.html), with log rho = logp_ref - logp:

    k1 = -log rho = logp - logp_ref          unbiased, high variance, can be negative
    k2 = 0.5 (log rho)^2                     biased (low for close policies), never negative
    k3 = (rho - 1) - log rho                 unbiased, low variance, never negative

In RLHF the policy is pi and the reference pi_ref is the frozen SFT model: ``kl_t`` enters the
per-token reward ``-beta * kl_t`` (Ziegler et al. 2019; InstructGPT eq. (2)). In the PPO
losses the samples come from pi_old, so ``approx_kl = kl_estimate(logp_old, logp, "k3")``
estimates KL(pi_old || pi), the direction of PPO paper eq. (8).

Controllers of the coefficient beta (``kl_coef``): each has ``.value`` and
``.update(current_kl, n_steps=1) -> new value``:

* :class:`FixedKLController` - beta never changes.
* :class:`AdaptiveKLController` - Ziegler et al. 2019 (arXiv:1909.08593) sec. 2.2:
  ``err = clip(KL / target - 1, -0.2, 0.2)``, ``beta *= 1 + err * n_steps / horizon`` (the
  paper's ``beta *= 1 + K_beta err`` with K_beta = n_steps / horizon, as in their code and TRL).
* :class:`PPOPaperKLController` - PPO paper sec. 4: after each policy update, with
  ``d = KL``: ``d < d_targ / 1.5 -> beta / 2``; ``d > 1.5 d_targ -> beta * 2``.
"""
from __future__ import annotations

import math

import numpy as np

from minippo.checks import check_choice, check_float_array, check_range, check_same_shape
from minippo.rl.distributions import log_softmax

KL_KINDS = ("k1", "k2", "k3")


def kl_estimate(logp, logp_ref, kind="k3"):
    """Per-token estimate of KL(pi || pi_ref) from the taken tokens' log-probabilities.

    Parameters
    ----------
    logp : (...) log pi(a_t|s_t) of tokens sampled from pi (the "current" policy).
    logp_ref : (...) log pi_ref(a_t|s_t) of the same tokens.
    kind : "k1" (logp - logp_ref), "k2" (0.5 (logp - logp_ref)^2) or "k3" ((rho - 1) - log rho,
        rho = exp(logp_ref - logp)).

    Returns
    -------
    kl : (...) per-token estimates, in the inputs' dtype. Average them over valid tokens (with
        :func:`minippo.rl.masked.masked_mean`) to estimate the KL.
    """
    check_choice("kind", kind, KL_KINDS)
    logp = check_float_array("logp", logp)
    logp_ref = check_float_array("logp_ref", logp_ref)
    check_same_shape(logp=logp, logp_ref=logp_ref)
    log_rho = logp_ref - logp                                  # log pi_ref / pi
    if kind == "k1":
        return -log_rho
    if kind == "k2":
        return 0.5 * log_rho * log_rho
    # k3 = (rho - 1) - log rho; expm1 keeps the precision when rho is close to 1
    return np.expm1(log_rho) - log_rho


def kl_exact_from_logits(logits, logits_ref, temperature=1.0):
    """Exact KL(pi || pi_ref) at each position from the full distributions.

    ``KL = sum_v pi(v) (log pi(v) - log pi_ref(v))`` with both distributions
    ``softmax(logits / temperature)``. Shapes (..., V) -> (...), computed in float64.
    """
    logits = check_float_array("logits", logits)
    logits_ref = check_float_array("logits_ref", logits_ref)
    check_same_shape(logits=logits, logits_ref=logits_ref)
    logq = log_softmax(logits.astype(np.float64), temperature)            # (..., V)
    logq_ref = log_softmax(logits_ref.astype(np.float64), temperature)    # (..., V)
    return np.sum(np.exp(logq) * (logq - logq_ref), axis=-1)              # (...)


def _check_kl_value(current_kl, n_steps) -> float:
    check_range("current_kl", current_kl)
    if not math.isfinite(float(current_kl)):
        raise ValueError(f"`current_kl` must be finite, got {current_kl!r}")
    check_range("n_steps", n_steps, 0, None, integer=True)
    return float(current_kl)


class FixedKLController:
    """beta fixed at ``kl_coef`` (>= 0); ``update`` returns it unchanged."""

    def __init__(self, kl_coef: float):
        check_range("kl_coef", kl_coef, 0, None)
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int = 1) -> float:
        _check_kl_value(current_kl, n_steps)
        return self.value


class AdaptiveKLController:
    """Proportional controller of Ziegler et al. 2019, sec. 2.2 (the one TRL ships).

    ``err = clip(current_kl / target - 1, -0.2, 0.2)``; ``beta <- beta * (1 + err * n_steps / horizon)``.
    ``n_steps`` is the number of samples (e.g. responses) since the last update; ``horizon``
    sets how many samples it takes to move beta by e^{0.2}-ish at the clipped error.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float):
        check_range("init_kl_coef", init_kl_coef, 0, None)
        check_range("target", target, 0, None, lo_open=True)
        check_range("horizon", horizon, 0, None, lo_open=True)
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int = 1) -> float:
        kl = _check_kl_value(current_kl, n_steps)
        # the next two lines are the proportional rule with the error clipped to +/- 0.2
        err = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + err * n_steps / self.horizon
        return self.value


class PPOPaperKLController:
    """The adaptive-beta rule of the PPO paper, sec. 4 (with its constants 1.5 and 2).

    After each policy update, with d the KL of that update:
    ``d < d_targ / 1.5 -> beta / 2``; ``d > d_targ * 1.5 -> beta * 2``; otherwise unchanged.
    ``n_steps`` is accepted for a common interface and ignored.
    """

    def __init__(self, init_kl_coef: float, d_targ: float):
        check_range("init_kl_coef", init_kl_coef, 0, None)
        check_range("d_targ", d_targ, 0, None, lo_open=True)
        self.value = float(init_kl_coef)
        self.d_targ = float(d_targ)

    def update(self, current_kl: float, n_steps: int = 1) -> float:
        d = _check_kl_value(current_kl, n_steps)
        if d < self.d_targ / 1.5:
            self.value /= 2.0
        elif d > self.d_targ * 1.5:
            self.value *= 2.0
        return self.value
