"""PPO-Penalty: the KL-penalised surrogate of PPO paper eq. (8), arrays in, arrays out.

Legend: B batch, T tokens; N flat tokens for 1-D inputs.

Schulman et al. 2017 (arXiv:1707.06347), with r_t = pi(a_t|s_t) / pi_old(a_t|s_t):

    L^KLPEN = E_t[ r_t A_t - beta KL[pi_old(.|s_t), pi(.|s_t)] ]          eq. (8)

beta comes from a controller of :mod:`minippo.rl.kl_control` (fixed, or the rule of the paper's sec. 4).
The toy bandit uses it (lesson 05); one RLHF PPO iteration (``minippo.rlhf.ppo``) uses L^CLIP,
eq. (7), of :mod:`minippo.rl.losses` instead, which is why this loss has a module of its own.
Conventions as in :mod:`minippo.rl.losses`: the loss to MINIMISE and its gradient d/dlogp, ``mask`` 1 on
valid tokens (``None``: all valid), E_t a token-level masked mean over the batch.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_range
from minippo.rl.kl import kl_estimate
from minippo.rl.losses import ratio_overflow_error, ratio_stats
from minippo.rl.masked import masked_mean, token_inputs


def ppo_penalty_loss(logp, logp_old, adv, mask=None, kl_coef=1.0):
    """KL-penalised surrogate loss, PPO paper eq. (8): ``L = -masked_mean(r A - beta KL_t)``.

    With a fixed beta it is the penalised problem of eq. (5); with the rule of sec. 4, PPO-Penalty.

    The per-token KL is the k3 estimate of KL[pi_old || pi] from tokens sampled by pi_old,
    ``KL_t = (r_t - 1) - log r_t`` (Schulman 2020, "Approximating KL divergence"): unbiased,
    never negative, and only the taken token's log-probabilities are needed. Its gradient is
    ``d KL_t / dlogp = r_t - 1``, whose expectation under pi_old equals that of the exact KL.

    Parameters
    ----------
    logp : (B, T) or (N,) log pi(a_t|s_t) under the current policy, float32 or float64.
    logp_old : same shape, log pi_old(a_t|s_t) stored at rollout time.
    adv : same shape, advantages A_t.
    mask : 0/1 like ``logp`` or None (all valid). 2-D masks must be right-padded.
    kl_coef : beta >= 0 (pair it with a controller from :mod:`minippo.rl.kl_control`).

    Returns
    -------
    loss : float. dlogp : like ``logp``, ``-(A r - beta (r - 1)) / n`` on valid tokens, 0 on padding.
    stats : ``kl`` (= ``approx_kl``, the mean k3), ``surrogate`` (mean r A), ``ratio_mean``,
        ``ratio_max``, ``ratio_min``, ``n_tokens``.
    """
    check_range("kl_coef", kl_coef, 0, None)
    (logp, logp_old, adv), mask = token_inputs(mask, logp=logp, logp_old=logp_old, adv=adv)
    n = int((mask == 1).sum())
    with np.errstate(over="ignore", invalid="ignore"):              # padding may hold any log-probs
        # the next three lines are L^KLPEN, eq. (8), with the k3 per-token KL
        ratio = np.where(mask == 1, np.exp(logp - logp_old), 1.0).astype(logp.dtype)   # r_t (1 on padding)
        _check_penalty_finite(ratio, logp - logp_old, adv, mask)
        kl = kl_estimate(logp_old, logp, kind="k3", mask=mask)      # (r_t - 1) - log r_t
        loss = -masked_mean(ratio * adv - kl_coef * kl, mask)
    # d/dlogp of (r A - beta ((r - 1) - log r)) = r A - beta (r - 1)
    dlogp = (-(ratio * adv - kl_coef * (ratio - 1.0)) * mask / max(n, 1)).astype(logp.dtype)
    if not (np.isfinite(loss) and np.isfinite(dlogp).all()):
        i = tuple(int(j) for j in np.argwhere(~np.isfinite(dlogp) | ~np.isfinite(ratio * adv))[0])
        raise ratio_overflow_error((logp - logp_old)[i].item(), adv[i].item(), i if len(i) != 1 else i[0],
                                   what="L^KLPEN = r A - beta KL", dtype=logp.dtype)
    kl_mean = masked_mean(kl, mask)
    stats = {"kl": kl_mean, "approx_kl": kl_mean, "surrogate": masked_mean(ratio * adv, mask),
             **ratio_stats(ratio, mask == 1, n), "n_tokens": n}
    return loss, dlogp, stats


def _check_penalty_finite(ratio, log_ratio, adv, mask) -> None:
    """L^KLPEN = r (A - beta) + beta (1 + log r) has no finite value where r overflows (unless A = beta exactly):
    a ``ValueError`` naming ``logp`` and ``logp_old`` (not k3's internal names) at the first such valid token."""
    bad = (mask == 1) & ~np.isfinite(ratio)
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        raise ratio_overflow_error(log_ratio[i].item(), adv[i].item(), i if len(i) != 1 else i[0],
                                   what="L^KLPEN = r A - beta KL", dtype=ratio.dtype,
                                   why="r (A - beta) grows with r, and the k3 penalty with it")
