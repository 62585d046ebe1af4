"""The PPO policy objectives: clipped surrogate L^CLIP and the KL-penalty objective L^KLPEN.

Legend: B batch (responses), T tokens; N flat tokens for 1-D inputs.

Schulman et al. 2017 (arXiv:1707.06347), with r_t = pi(a_t|s_t) / pi_old(a_t|s_t):

    L^CLIP  = E_t[ min(r_t A_t, clip(r_t, 1-eps, 1+eps) A_t) ]          eq. (7)
    L^KLPEN = E_t[ r_t A_t - beta KL[pi_old(.|s_t), pi(.|s_t)] ]          eq. (8)

Both are maximised; the functions here return the LOSS ``L = -objective`` and its gradient
``dlogp = dL/dlogp`` with respect to the current log-probabilities of the taken tokens (the
chain rule to the logits is :func:`minippo.rl.distributions.logprobs_backward`). The ratio is
computed as ``exp(logp - logp_old)``, never as a quotient of probabilities (which underflow).
E_t is a token-level masked mean over every valid token of the batch, so with n valid tokens
each token's gradient carries a factor 1/n.

The six clip cases (seed 003, section 5 "PPO-Clip 的符号理解"). Because min() picks the smaller
term, the clipped term is selected exactly where clipping would let the objective grow further:

    code  advantage  ratio r            selected term        dL/dlogp
    1     A > 0      r < 1-eps          r A  (unclipped)     -A r / n
    2     A > 0      1-eps <= r <= 1+eps r A  (both equal)    -A r / n
    3     A > 0      r > 1+eps          (1+eps) A  CLIPPED   0       "good action already boosted enough"
    4     A < 0      r < 1-eps          (1-eps) A  CLIPPED   0       "bad action already cut enough"
    5     A < 0      1-eps <= r <= 1+eps r A  (both equal)    -A r / n
    6     A < 0      r > 1+eps          r A  (unclipped)     -A r / n
    7     A = 0      any                0                    0       (no signal; neither branch active)
    0     padding                                            0

The band is CLOSED: exactly at r = 1 +/- eps the two terms are equal, the token counts as inside
(case 2 or 5), is not counted in ``clipfrac``, and gets the unclipped gradient -A r / n (the
one-sided derivative from inside the band; PyTorch's ``clamp`` gives the same). ``clipfrac`` is
the fraction of valid tokens in cases 3 and 4, i.e. whose gradient is exactly zero because of
the clip (TRL's definition; CleanRL's ``|r - 1| > eps`` also counts cases 1 and 6).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from minippo.checks import check_range
from minippo.rl._status import MASK_HOLE, MASK_VALUE, NONFINITE, OK, raise_for_status
from minippo.rl.kl import kl_estimate
from minippo.rl.masked import masked_mean, token_inputs

PAD, POS_BELOW, POS_INSIDE, POS_CLIPPED, NEG_CLIPPED, NEG_INSIDE, NEG_ABOVE, ZERO_ADV = range(8)
#: code -> description of the per-token clip cases in ``stats["clip_case"]`` (int8)
CLIP_CASES = {
    PAD: "padding",
    POS_BELOW: "A>0, r<1-eps: unclipped, grad -A r/n",
    POS_INSIDE: "A>0, r in band: unclipped, grad -A r/n",
    POS_CLIPPED: "A>0, r>1+eps: CLIPPED, grad 0",
    NEG_CLIPPED: "A<0, r<1-eps: CLIPPED, grad 0",
    NEG_INSIDE: "A<0, r in band: unclipped, grad -A r/n",
    NEG_ABOVE: "A<0, r>1+eps: unclipped, grad -A r/n",
    ZERO_ADV: "A=0: no signal, grad 0",
}
#: the codes whose clipped branch is active (zero gradient), counted by ``clipfrac``
CLIPPED_CASES = (POS_CLIPPED, NEG_CLIPPED)
_NAMES = ["logp", "logp_old", "adv"]


def _ratio_stats(ratio, mask, n):
    """ratio_mean / ratio_max / ratio_min over the valid tokens (1.0 when there are none)."""
    if n == 0:
        return {"ratio_mean": 1.0, "ratio_max": 1.0, "ratio_min": 1.0}
    valid = ratio[mask == 1]
    return {"ratio_mean": masked_mean(ratio, mask), "ratio_max": float(valid.max()),
            "ratio_min": float(valid.min())}


def clipped_policy_loss(logp, logp_old, adv, mask=None, clip_eps=0.2):
    """L^CLIP loss, its gradient and its statistics from one fused numba kernel (eq. (7) of the PPO paper).

    Parameters
    ----------
    logp : (B, T) or (N,) log pi(a_t|s_t) under the current policy, float32 or float64.
    logp_old : same shape, log pi_old(a_t|s_t) stored at rollout time.
    adv : same shape, advantages A_t (usually whitened).
    mask : 0/1 like ``logp`` or None (all valid). 2-D masks must be right-padded.
    clip_eps : epsilon > 0.

    Returns
    -------
    loss : float, ``-masked_mean(min(r A, clip(r, 1-eps, 1+eps) A))`` (0 with no valid token).
    dlogp : array like ``logp``, dL/dlogp: -A r / n where the unclipped branch is active, exactly
        0 on clipped tokens (cases 3, 4), A = 0 and padding.
    stats : dict with ``clipfrac``, ``approx_kl`` (k3 = mean((r - 1) - log r), an estimate of
        KL(pi_old || pi)), ``ratio_mean``, ``ratio_max``, ``ratio_min`` (1.0 with no valid
        token), ``n_tokens`` and ``clip_case`` (int8 array like ``logp``, codes in
        :data:`CLIP_CASES`).

    NumPy reference: :func:`clipped_policy_loss_reference` (same outputs).
    """
    check_range("clip_eps", clip_eps, 0, None, lo_open=True)
    (logp, logp_old, adv), mask = token_inputs(mask, validate_values=False,
                                               logp=logp, logp_old=logp_old, adv=adv)
    shape, one_d = logp.shape, logp.ndim == 1
    as2 = [a.reshape(1, -1) if one_d else a for a in (logp, logp_old, adv, mask)]
    dlogp = np.empty(as2[0].shape, dtype=logp.dtype)
    case = np.empty(as2[0].shape, dtype=np.int8)
    lo, hi = logp.dtype.type(1 - clip_eps), logp.dtype.type(1 + clip_eps)   # the band, in the data's dtype
    out = _clipped_policy_kernel(*as2, lo, hi, not one_d, dlogp, case)
    status, which, b, t, n, n_clipped, obj_sum, kl_sum, ratio_sum, ratio_max, ratio_min = out
    raise_for_status(status, which, b, t, _NAMES, as2[:3], as2[3], one_d)
    stats = {"clipfrac": n_clipped / n if n else 0.0, "approx_kl": kl_sum / n if n else 0.0,
             "ratio_mean": ratio_sum / n if n else 1.0, "ratio_max": ratio_max if n else 1.0,
             "ratio_min": ratio_min if n else 1.0, "n_tokens": int(n), "clip_case": case.reshape(shape)}
    return (-obj_sum / n if n else 0.0), dlogp.reshape(shape), stats


@njit(cache=True)
def _clipped_policy_kernel(logp, logp_old, adv, mask, lo, hi, check_holes, dlogp, case):
    """Per row: a validation sweep, then one pass for ratio, case, objective, gradient and sums.

    The per-token work is branch-free (selects, not if/else: the six cases come in random
    order, so branches would be mispredicted); sums are float64. A last light pass scales
    ``dlogp`` by 1/n once n is known. Returns
    ``(status, which, b, t, n, n_clipped, obj_sum, kl_sum, ratio_sum, ratio_max, ratio_min)``.
    NumPy reference: :func:`clipped_policy_loss_reference`.
    """
    B, T = logp.shape
    n = 0
    n_clipped = 0
    obj_sum = 0.0
    kl_sum = 0.0
    ratio_sum = 0.0
    ratio_max = -np.inf
    ratio_min = np.inf
    for b in range(B):
        # validation sweep over the row (vectorisable): NaN/inf and mask values
        bad = False
        for t in range(T):
            bad |= not math.isfinite(logp[b, t])
            bad |= not math.isfinite(logp_old[b, t])
            bad |= not math.isfinite(adv[b, t])
            bad |= (mask[b, t] != 0) & (mask[b, t] != 1)
        if bad:
            status, which, t = _locate_clip_error(logp, logp_old, adv, mask, b)
            return status, which, b, t, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0
        row_open = True                      # False after the row's first padding token
        for t in range(T):
            if mask[b, t] == 0:
                row_open = False
                dlogp[b, t] = 0
                case[b, t] = PAD
                continue
            if check_holes and not row_open:
                return MASK_HOLE, 0, b, t, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0
            a = adv[b, t]
            # r_t = exp(logp - logp_old)
            log_ratio = logp[b, t] - logp_old[b, t]
            ratio = np.exp(log_ratio)
            # min(r A, clip(r, 1-eps, 1+eps) A): the clipped term binds in cases 3 and 4 only
            below, above = ratio < lo, ratio > hi
            clipped = ((a > 0) & above) | ((a < 0) & below)
            obj = min(ratio * a, min(max(ratio, lo), hi) * a)
            dlogp[b, t] = 0.0 if clipped else -a * ratio     # d(-r A)/dlogp = -A r; /n below
            # case code: 2 (A > 0) or 5 (A < 0), -1 below the band, +1 above it; 7 for A = 0
            base = POS_INSIDE if a > 0 else NEG_INSIDE
            case[b, t] = ZERO_ADV if a == 0 else base + above - below
            n += 1
            n_clipped += clipped
            obj_sum += obj
            kl_sum += (ratio - 1.0) - log_ratio             # k3 = (r - 1) - log r
            ratio_sum += ratio
            ratio_max = max(ratio_max, ratio)
            ratio_min = min(ratio_min, ratio)
    if n > 0:
        inv_n = 1.0 / n
        for b in range(B):
            for t in range(T):
                dlogp[b, t] *= inv_n
    return OK, 0, 0, 0, n, n_clipped, obj_sum, kl_sum, ratio_sum, ratio_max, ratio_min


@njit(cache=True)
def _locate_clip_error(logp, logp_old, adv, mask, b):
    """The first bad entry of row ``b`` as ``(status, which, t)`` (the slow path of the sweep)."""
    for t in range(logp.shape[1]):
        if not math.isfinite(logp[b, t]):
            return NONFINITE, 0, t
        if not math.isfinite(logp_old[b, t]):
            return NONFINITE, 1, t
        if not math.isfinite(adv[b, t]):
            return NONFINITE, 2, t
        if mask[b, t] != 0 and mask[b, t] != 1:
            return MASK_VALUE, 0, t
    return OK, 0, 0  # pragma: no cover - only called on a row with a bad entry


def clipped_policy_loss_reference(logp, logp_old, adv, mask=None, clip_eps=0.2):
    """Plain NumPy L^CLIP (eq. (7)): the formula as a student writes it, with the same outputs
    (loss, dlogp, stats) as the kernel-backed :func:`clipped_policy_loss`."""
    check_range("clip_eps", clip_eps, 0, None, lo_open=True)
    (logp, logp_old, adv), mask = token_inputs(mask, logp=logp, logp_old=logp_old, adv=adv)
    lo, hi = logp.dtype.type(1 - clip_eps), logp.dtype.type(1 + clip_eps)
    valid = mask == 1
    n = int(valid.sum())
    # the next four lines are L^CLIP, eq. (7)
    ratio = np.exp(logp - logp_old)                                 # r_t
    surr_unclipped = ratio * adv                                    # r_t A_t
    surr_clipped = np.clip(ratio, lo, hi) * adv                     # clip(r_t, 1-eps, 1+eps) A_t
    loss = -masked_mean(np.minimum(surr_unclipped, surr_clipped), mask)
    # min() selects the constant clipped term where clipping binds: zero gradient there
    clipped = ((adv > 0) & (ratio > hi)) | ((adv < 0) & (ratio < lo))
    # d(-r A)/dlogp = -A r (dr/dlogp = r), averaged over the n valid tokens
    dlogp = np.where(clipped | ~valid, 0.0, -adv * ratio / max(n, 1)).astype(logp.dtype)
    case = np.select(
        [~valid, adv == 0, (adv > 0) & (ratio < lo), (adv > 0) & (ratio <= hi), adv > 0,
         ratio < lo, ratio <= hi],
        [PAD, ZERO_ADV, POS_BELOW, POS_INSIDE, POS_CLIPPED, NEG_CLIPPED, NEG_INSIDE],
        default=NEG_ABOVE).astype(np.int8)
    stats = {"clipfrac": masked_mean(clipped.astype(logp.dtype), mask),
             "approx_kl": masked_mean(kl_estimate(logp_old, logp, kind="k3"), mask),
             **_ratio_stats(ratio, mask, n), "n_tokens": n, "clip_case": case}
    return loss, dlogp, stats


def ppo_penalty_loss(logp, logp_old, adv, mask=None, kl_coef=1.0):
    """KL-penalised surrogate loss, PPO paper eq. (8): ``L = -masked_mean(r A - beta KL_t)``.

    The per-token KL is the k3 estimate of KL[pi_old || pi] from tokens sampled by pi_old,
    ``KL_t = (r_t - 1) - log r_t`` (Schulman 2020, "Approximating KL divergence"): unbiased,
    never negative, and only the taken token's log-probabilities are needed. Its gradient is
    ``d KL_t / dlogp = r_t - 1``, whose expectation under pi_old equals that of the exact KL.

    Parameters as :func:`clipped_policy_loss`, with ``kl_coef`` = beta >= 0 (pair it with a
    controller from :mod:`minippo.rl.kl`, e.g. :class:`~minippo.rl.kl.PPOPaperKLController`).

    Returns
    -------
    loss : float. dlogp : like ``logp``, ``-(A r - beta (r - 1)) / n`` on valid tokens, 0 on padding.
    stats : ``kl`` (= ``approx_kl``, the mean k3), ``surrogate`` (mean r A), ``ratio_mean``,
        ``ratio_max``, ``ratio_min``, ``n_tokens``.
    """
    check_range("kl_coef", kl_coef, 0, None)
    (logp, logp_old, adv), mask = token_inputs(mask, logp=logp, logp_old=logp_old, adv=adv)
    n = int((mask == 1).sum())
    # the next three lines are L^KLPEN, eq. (8), with the k3 per-token KL
    ratio = np.exp(logp - logp_old)                                 # r_t
    kl = kl_estimate(logp_old, logp, kind="k3")                     # (r_t - 1) - log r_t
    loss = -masked_mean(ratio * adv - kl_coef * kl, mask)
    # d/dlogp of (r A - beta ((r - 1) - log r)) = r A - beta (r - 1)
    dlogp = (-(ratio * adv - kl_coef * (ratio - 1.0)) * mask / max(n, 1)).astype(logp.dtype)
    kl_mean = masked_mean(kl, mask)
    stats = {"kl": kl_mean, "approx_kl": kl_mean, "surrogate": masked_mean(ratio * adv, mask),
             **_ratio_stats(ratio, mask, n), "n_tokens": n}
    return loss, dlogp, stats
