"""Controllers of a KL coefficient beta: fixed, adaptive (Ziegler et al. 2019) and the PPO paper's
rule; and the learning rate adapted from the KL to pi_old (rsl_rl / rl_games).

Each has ``.value`` and ``.update(current_kl, n_steps=1) -> new value``:

* :class:`FixedKLController` - beta never changes.
* :class:`AdaptiveKLController` - Ziegler et al. 2019 (arXiv:1909.08593) sec. 2.2:
  ``err = clip(KL / target - 1, -0.2, 0.2)``, ``beta *= 1 + err * n_steps / horizon`` (the
  paper's ``beta *= 1 + K_beta err`` with K_beta = n_steps / horizon, as in their code and TRL).
* :class:`PPOPaperKLController` - PPO paper sec. 4: after each policy update, with
  ``d = KL``: ``d < d_targ / 1.5 -> beta / 2``; ``d > 1.5 d_targ -> beta * 2``.

A controller only sees the number it is given, and that number decides what it controls. The PPO
paper feeds its rule d = E_t[KL[pi_old(.|s_t), pi(.|s_t)]], the KL of the update just made, whose
beta weighs the same KL in the penalty objective L^KLPEN (eq. (8)); ``minippo.toy.bandit`` does
exactly that (lesson 05, ``kl_old_coef`` / ``kl_old_target``). RLHF-PPO (``minippo.rlhf``,
``kl_ref_controller``) feeds every controller the KL to the frozen reference per response, whose
beta weighs the KL penalty in the reward (Ziegler et al. 2019): with
``kl_ref_controller="ppo_paper"`` that is the paper's halve / double rule and constants applied to
another KL, not the paper's adaptive KL penalty.

:func:`kl_adaptive_lr` controls another number with the per-update KL(pi_old || pi): the learning
rate, instead of stopping the epochs early (rsl_rl's ``schedule="adaptive"``, rl_games'
``AdaptiveScheduler``; Q45)::

    KL > KL_LR_MARGIN * target          ->  lr <- max(lr / KL_LR_FACTOR, lr_min)
    0 < KL < target / KL_LR_MARGIN      ->  lr <- min(lr * KL_LR_FACTOR, lr_max)
    otherwise                           ->  lr unchanged

with rsl_rl's constants: margin 2, factor 1.5, lr in [1e-5, 1e-2].
"""
from __future__ import annotations

from minippo.checks import check_range

KL_LR_MARGIN = 2.0          # kl_adaptive_lr: act when the KL leaves [target / 2, 2 target]
KL_LR_FACTOR = 1.5          # ... dividing or multiplying the lr by 1.5
KL_LR_MIN, KL_LR_MAX = 1e-5, 1e-2   # ... within these bounds (rsl_rl's)


class FixedKLController:
    """beta fixed at ``kl_coef`` (>= 0); ``update`` returns it unchanged."""

    def __init__(self, kl_coef: float):
        check_range("kl_coef", kl_coef, 0, None)
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int = 1) -> float:
        check_range("current_kl", current_kl)                  # a finite number
        check_range("n_steps", n_steps, 0, None, integer=True)
        return self.value


class AdaptiveKLController:
    """Proportional controller of Ziegler et al. 2019, sec. 2.2 (the one TRL ships).

    ``err = clip(current_kl / target - 1, -0.2, 0.2)``; ``beta <- beta * (1 + err * n_steps /
    horizon)``. ``n_steps`` is the number of samples (e.g. responses) since the last update;
    ``horizon`` sets how many samples it takes to move beta by e^{0.2}-ish at the clipped error.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float):
        check_range("init_kl_coef", init_kl_coef, 0, None)
        check_range("target", target, 0, None, lo_open=True)
        check_range("horizon", horizon, 0, None, lo_open=True)
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int = 1) -> float:
        check_range("current_kl", current_kl)                  # a finite number
        check_range("n_steps", n_steps, 0, None, integer=True)
        kl = float(current_kl)
        # the next two lines are the proportional rule with the error clipped to +/- 0.2
        err = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + err * n_steps / self.horizon
        return self.value


class PPOPaperKLController:
    """The adaptive-beta rule of the PPO paper, sec. 4 (with its constants 1.5 and 2).

    After each policy update, with d the KL passed to :meth:`update`:
    ``d < d_targ / 1.5 -> beta / 2``; ``d > d_targ * 1.5 -> beta * 2``; otherwise unchanged.
    ``n_steps`` is accepted for a common interface and ignored.

    Which KL d is decides what is controlled (module docstring): the paper's d is the KL(pi_old, pi)
    of the update just made, the KL its penalty objective (eq. (8)) weighs with beta; that is what
    ``minippo.toy.bandit.ppo_train`` passes (lesson 05). RLHF-PPO's
    ``kl_ref_controller="ppo_paper"`` passes the KL to the reference per response (the reward
    penalty's KL): the same rule, applied to another KL.
    """

    def __init__(self, init_kl_coef: float, d_targ: float):
        check_range("init_kl_coef", init_kl_coef, 0, None)
        check_range("d_targ", d_targ, 0, None, lo_open=True)
        self.value = float(init_kl_coef)
        self.d_targ = float(d_targ)

    def update(self, current_kl: float, n_steps: int = 1) -> float:
        check_range("current_kl", current_kl)                  # a finite number
        check_range("n_steps", n_steps, 0, None, integer=True)
        d = float(current_kl)
        if d < self.d_targ / 1.5:
            self.value /= 2.0
        elif d > self.d_targ * 1.5:
            self.value *= 2.0
        return self.value


def kl_adaptive_lr(lr: float, kl: float, target: float, lr_min: float = KL_LR_MIN,
                   lr_max: float = KL_LR_MAX) -> float:
    """The next learning rate from a measured KL(pi_old || pi): rsl_rl's adaptive schedule (module
    docstring).

    ``lr / 1.5`` (not below ``lr_min``) when ``kl > 2 * target``; ``lr * 1.5`` (not above
    ``lr_max``) when ``0 < kl < target / 2``; else ``lr``. rsl_rl (``rsl_rl/algorithms/ppo.py``,
    ``schedule="adaptive"``, ``desired_kl`` 0.01) measures the KL of each minibatch in its forward
    pass and sets the rate of that minibatch's own step; rl_games' ``AdaptiveScheduler``
    (``kl_threshold``, bounds [1e-6, 1e-2]) applies the same rule after each minibatch ("legacy") or
    each epoch ("standard"). A KL of exactly 0 (or a rounding-negative one) leaves the rate as it
    is, as in rsl_rl: a policy that has not moved says nothing about the step size.

    Parameters
    ----------
    lr : the current rate, in [lr_min, lr_max]
    kl : the measured KL (e.g. approx KL, k3 per token), finite
    target : the desired KL, > 0
    lr_min, lr_max : the bounds, 0 < lr_min <= lr_max
    """
    check_range("lr_min", lr_min, 0, None, lo_open=True)
    check_range("lr_max", lr_max, lr_min, None)
    check_range("lr", lr, lr_min, lr_max)
    check_range("kl", kl)
    check_range("target", target, 0, None, lo_open=True)
    if kl > KL_LR_MARGIN * target:
        # the step moved pi too far from pi_old: smaller steps
        return max(lr / KL_LR_FACTOR, lr_min)
    if 0.0 < kl < target / KL_LR_MARGIN:
        return min(lr * KL_LR_FACTOR, lr_max)          # it hardly moved: larger steps
    return float(lr)
