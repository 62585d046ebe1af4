"""KL(pi || pi_ref) from the taken tokens: the estimators k1, k2, k3, and the KL as a LOSS term.

Legend: B batch (responses), T tokens (right-padded), N flat tokens; "..." any leading shape.

**The estimators' values** (Schulman 2020, "Approximating KL divergence",
http://joschu.net/blog/kl-approx.html), per token a ~ pi, with x = logp - logp_ref and
log rho = logp_ref - logp = -x:

    k1 = x                       unbiased, high variance, can be negative
    k2 = x^2 / 2                 biased (low for close policies), never negative
    k3 = (rho - 1) - log rho     unbiased, low variance, never negative

In RLHF the policy is pi and the reference pi_ref is the frozen SFT model: ``kl_t`` enters the
per-token reward ``-beta * kl_t`` (Ziegler et al. 2019, arXiv:1909.08593; InstructGPT eq. (2)),
where it is a number (no gradient flows through it; the policy gradient of that reward is what
moves the KL). The exact KL from two sets of logits is :func:`minippo.rl.losses.kl_exact_from_logits`.

**The KL as a loss** (GRPO puts ``beta * k3`` in the loss, DeepSeekMath eq. (4)): the estimate is
differentiated as it stands, the sampled tokens held fixed (there is no score-function term), so
a good estimate of the KL's VALUE need not give its GRADIENT. Per state s, tokens a ~ pi (on-policy):

    kind  dk/dlogp         E_a~pi[dk/dlogp grad log pi(a|s)]
    k1    1                sum_a pi grad log pi = 0                        no KL signal at all
    k2    x                grad_theta KL(pi(.|s) || pi_ref(.|s))           the per-state KL
    k3    1 - exp(-x)      grad_theta KL(pi_ref(.|s) || pi(.|s))           the OTHER direction

(for k3: E_pi[(1 - pi_ref/pi) grad log pi] = -sum_a pi_ref grad log pi). Summed over the tokens of
a response, even k2 is only a partial gradient of the response-level KL(pi || pi_ref) =
E_y[sum_t x_t]: that gradient is E_y[sum_t grad log pi_t * sum_{t' >= t} x_t'] (Tang & Munos 2025,
"On a few pitfalls in KL divergence gradient estimation for RL", arXiv:2506.09477): it also moves
WHICH states are visited, which a per-token loss cannot see. The k1 estimate in the REWARD, with the
return to go, estimates exactly that gradient: E_y[sum_t grad log pi_t sum_{t' >= t} k1_t']. With k3
in the reward the same sum gains sum_t E[grad log pi_t (rho_t - 1)], which is
-sum_t E_{s_t}[grad KL(pi_ref(.|s_t) || pi(.|s_t))] and cancels grad KL to first order in pi - pi_ref
(lesson 22: under half its size, pointing elsewhere); k2 in the reward follows the score-function
part of the gradient of E[sum_t x_t^2 / 2]. With tokens from pi_old != pi (every minibatch after the
first) each expectation above is under pi_old. Lesson 22 measures all of them against the
exact gradient on a sequence space small enough to enumerate (:mod:`minippo.studies.exact`).
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_choice, check_float_array, check_range, check_same_shape
from minippo.rl.masked import _mask_of, aggregation_denominator, masked_aggregate, token_inputs

KL_KINDS = ("k1", "k2", "k3")


def kl_estimate(logp, logp_ref, kind="k3", mask=None):
    """Per-token estimate of KL(pi || pi_ref) from the taken tokens' log-probabilities.

    Parameters
    ----------
    logp : (...) log pi(a_t|s_t) of tokens sampled from pi (the "current" policy).
    logp_ref : (...) log pi_ref(a_t|s_t) of the same tokens.
    kind : "k1" (logp - logp_ref), "k2" (0.5 (logp - logp_ref)^2) or "k3" ((rho - 1) - log rho,
        rho = exp(logp_ref - logp)).
    mask : 0/1 like ``logp`` or None (all valid): padded entries are 0 in the result, whatever
        their (meaningless) log-probabilities.

    Returns
    -------
    kl : (...) per-token estimates, in the inputs' dtype. Average them over valid tokens (with
        :func:`minippo.rl.masked.masked_mean`) to estimate the KL.

    A valid entry whose estimate overflows (k3 with logp_ref - logp above ~88.7 in float32, ~709
    in float64: exp overflows, and the true estimate is that large) has no finite value: a
    ``ValueError`` names ``logp`` and ``logp_ref``.
    """
    check_choice("kind", kind, KL_KINDS)
    logp = check_float_array("logp", logp)
    logp_ref = check_float_array("logp_ref", logp_ref)
    check_same_shape(logp=logp, logp_ref=logp_ref)
    valid = np.ones(logp.shape, bool) if mask is None else _mask_of(mask, logp.shape, np.float64) != 0
    with np.errstate(over="ignore", invalid="ignore"):
        log_rho = logp_ref - logp                              # log pi_ref / pi
        if kind == "k1":
            kl = -log_rho
        elif kind == "k2":
            kl = 0.5 * log_rho * log_rho
        else:
            # k3 = (rho - 1) - log rho; expm1 keeps the precision when rho is close to 1
            kl = np.expm1(log_rho) - log_rho
    if mask is not None:
        kl = np.where(valid, kl, 0.0).astype(kl.dtype)
    bad = valid & ~np.isfinite(kl)
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        raise ValueError(f"`logp` = {logp[i].item()!r} and `logp_ref` = {logp_ref[i].item()!r} at "
                         f"{i if len(i) != 1 else i[0]} give {kind} = {kl[i].item()!r}: the estimate exceeds the "
                         f"range of {logp.dtype} (k3 grows like exp(logp_ref - logp)); no finite KL estimate exists")
    return kl


def kl_ref_loss(logp, logp_ref, mask=None, kl_coef=1.0, kind="k3", *, loss_agg="token-mean", norm_len=None):
    """``kl_coef * aggregate(k(logp, logp_ref))``: KL(pi || pi_ref) as a loss term, and its gradient d/dlogp.

    What the gradient of each ``kind`` estimates is in the module docstring (k1: nothing on-policy;
    k2: the per-state KL(pi || pi_ref); k3: the per-state KL(pi_ref || pi)).

    Parameters
    ----------
    logp : (B, T) or (N,) log pi(a_t|s_t) under the policy being trained.
    logp_ref : same shape, log pi_ref(a_t|s_t) under the frozen reference.
    mask : 0/1 like ``logp`` (2-D right-padded) or None (all valid).
    kl_coef : beta >= 0.
    kind : "k1", "k2" or "k3" (GRPO's).
    loss_agg, norm_len : the aggregation over tokens, :func:`minippo.rl.masked.aggregation_denominator`
        (token-mean by default; "seq-mean-token-sum-norm" with ``norm_len=1`` sums each response's
        tokens: the response-level estimate, averaged over responses).

    Returns
    -------
    loss : float, ``kl_coef * aggregate(k)`` (0 with no valid token).
    dlogp : like ``logp``, ``kl_coef * dk/dlogp / d`` on valid tokens (dk/dlogp = 1, x or
        1 - exp(-x), x = logp - logp_ref), 0 on padding.
    stats : ``kl`` (the aggregated k, without kl_coef), ``kl_max`` (largest per-token k; 0 with no
        valid token), ``n_tokens``.
    """
    check_range("kl_coef", kl_coef, 0, None)
    check_choice("kind", kind, KL_KINDS)
    (logp, logp_ref), mask = token_inputs(mask, logp=logp, logp_ref=logp_ref)
    d = aggregation_denominator(mask, loss_agg, norm_len)                # n, or (B, 1), or B L_max
    valid = mask == 1
    n = int(valid.sum())
    k = kl_estimate(logp, logp_ref, kind, mask=mask)                     # (...) 0 on padding
    kl = masked_aggregate(k, mask, loss_agg, norm_len)
    # dk/dlogp per token: k1 = x -> 1; k2 = x^2/2 -> x; k3 = e^{-x} - 1 + x -> 1 - e^{-x}  (x = logp - logp_ref)
    if kind == "k1":
        dk = np.ones_like(logp)
    elif kind == "k2":
        dk = logp - logp_ref
    else:
        dk = -np.expm1(logp_ref - logp)
    with np.errstate(over="ignore"):
        dlogp = (kl_coef * dk * mask / d).astype(logp.dtype)
    if not np.isfinite(dlogp).all():                                     # k finite, kl_coef * dk not (float32)
        i = tuple(int(j) for j in np.argwhere(~np.isfinite(dlogp))[0])
        raise ValueError(f"`logp` = {logp[i].item()!r} and `logp_ref` = {logp_ref[i].item()!r} at "
                         f"{i if len(i) != 1 else i[0]} give a gradient `kl_coef` * dk/dlogp beyond the range of "
                         f"{logp.dtype}")
    stats = {"kl": kl, "kl_max": float(k[valid].max()) if n else 0.0, "n_tokens": n}
    return kl_coef * kl, dlogp, stats
