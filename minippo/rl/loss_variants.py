"""The variants of L^CLIP and L^VF: other loss aggregations and GSPO's sequence ratio.

Legend: B batch (responses), T tokens (right-padded), n valid tokens, |o_b| the valid tokens of row
b.

PPO's :func:`minippo.rl.losses.clipped_policy_loss` averages its per-token terms over the n valid
tokens of the batch. Two other normalisations of the same terms (the ``loss_agg`` of verl, the
``loss_type`` of TRL; :func:`minippo.rl.masked.aggregation_denominator`) divide token t of row b by
d_bt instead of n:

    "token-mean"               d = n           every valid token weighs the same (PPO, DAPO)
    "seq-mean-token-mean"      d_b = B |o_b|   GRPO (DeepSeekMath, arXiv:2402.03300, eq. (3))
    "seq-mean-token-sum-norm"  d = B norm_len  Dr. GRPO (arXiv:2503.20783): a constant

so the gradient of an unclipped token reads ``-A r / d_bt``: :func:`aggregated_policy_loss`. The
value losses aggregate their squared errors the same way (the gradient of an unclipped token reads
``(V - R) / d_bt``): :func:`aggregated_value_loss` and :func:`aggregated_clipped_value_loss`.

**Sequence-level ratio** (GSPO: Zheng et al. 2025, arXiv:2507.18071, eq. (5)). Every token of
response b uses the length-normalised sequence ratio

    s_b = (pi(y_b|x) / pi_old(y_b|x))^(1/|o_b|) = exp(1/|o_b| sum_t (logp_t - logp_old_t))

in place of r_t, clipped per sequence: token t's objective is ``A_t min(s_b, 1+eps_high)`` (A >= 0)
or ``A_t max(s_b, 1-eps_low)`` (A < 0), aggregated by ``loss_agg`` (GSPO: one advantage per
response, ``"seq-mean-token-mean"``, a band of 3e-4 / 4e-4). Since ds_b/dlogp_t = s_b / |o_b|, the
gradient of token t is ``-(s_b / |o_b|) sum_t' A_t' / d_bt'`` over the tokens t' of its row whose
clip does not bind: the same for every token of a row, 0 for a clipped response:
:func:`sequence_policy_loss`.

Both return what :func:`~minippo.rl.losses.clipped_policy_loss` returns (``(loss, dlogp, stats)``,
the same statistics, the same ``ValueError`` where ``r A`` has no finite value); with
``loss_agg="token-mean"`` :func:`aggregated_policy_loss` IS ``clipped_policy_loss`` (its kernel
included), and the value variants are ``value_loss`` and ``clipped_value_loss``. The per-token
case of a variant's tokens is :func:`~minippo.rl.losses.clip_cases` of its ratio.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_range
from minippo.rl.losses import (clip_band, clipped_policy_loss, clipped_value_loss,
                               gradient_overflow_error, objective_error, policy_stats,
                               value_loss, value_overflow_error)
from minippo.rl.masked import aggregation_denominator, masked_aggregate, masked_mean, token_inputs


def aggregated_policy_loss(logp, logp_old, adv, mask=None, clip_eps=0.2, clip_eps_high=None, *,
                           loss_agg="token-mean", norm_len=None):
    """L^CLIP's token terms ``min(r A, clip(r) A)`` aggregated by ``loss_agg`` (module docstring):
    the loss, dlogp (``-A r / d_bt`` where the unclipped branch is active, 0 elsewhere) and the
    statistics of :func:`~minippo.rl.losses.clipped_policy_loss`. Not token-mean needs 2-D (B, T)
    inputs; ``norm_len`` > 0 is the constant of "seq-mean-token-sum-norm" (e.g. ``max_new_tokens``).
    """
    if loss_agg == "token-mean":
        return clipped_policy_loss(logp, logp_old, adv, mask, clip_eps, clip_eps_high)
    (logp, logp_old, adv), mask = token_inputs(mask, logp=logp, logp_old=logp_old, adv=adv)
    d = aggregation_denominator(mask, loss_agg, norm_len)                 # (B, 1) or B L_max
    valid, log_ratio = mask == 1, logp - logp_old
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = np.exp(log_ratio)                                         # r_t
        band = clip_band(clip_eps, clip_eps_high, logp.dtype)            # (1 - eps, 1 + eps_high)
        surr, clipped, active = _clipped_terms(ratio, adv, valid, band)
        # d(-r A)/dlogp = -A r on the tokens whose term moves with logp, over the aggregation's d
        dlogp = np.where(active, -adv * ratio / d, 0.0).astype(logp.dtype)
        if not (np.isfinite(np.sum(surr)) and np.isfinite(dlogp).all()):  # no finite r A
            raise objective_error(surr, dlogp, valid, log_ratio, adv)
    loss = -masked_aggregate(surr, mask, loss_agg, norm_len)
    return loss, dlogp, policy_stats(ratio, log_ratio, clipped, valid, int(valid.sum()))


def sequence_policy_loss(logp, logp_old, adv, mask=None, clip_eps=0.2, clip_eps_high=None, *,
                         loss_agg="token-mean", norm_len=None):
    """GSPO's clipped surrogate with the sequence ratio s_b on every token of row b (module
    docstring), aggregated by ``loss_agg``: the loss, dlogp (the row's common gradient on its valid
    tokens, 0 for a clipped response) and the statistics (``ratio_*`` of s_b on each token,
    ``approx_kl`` of the TOKEN ratios). ``logp``, ``logp_old``, ``adv`` and ``mask``: (B, T), rows
    right-padded."""
    (logp, logp_old, adv), mask = token_inputs(mask, logp=logp, logp_old=logp_old, adv=adv)
    if logp.ndim != 2:
        raise ValueError("`logp` must be 2-D (B, T) for the sequence ratio (one row per "
                         "response), got shape "
                         f"{logp.shape}")
    d = aggregation_denominator(mask, loss_agg, norm_len)                 # n, or (B, 1), or B L_max
    valid, log_ratio = mask == 1, logp - logp_old
    lengths = np.maximum(valid.sum(axis=1), 1)                            # (B,) |o_b|
    with np.errstate(over="ignore", invalid="ignore"):
        log_s = np.where(valid, log_ratio, 0).sum(axis=1) / lengths       # (B,) log s_b
        # s_b on row b
        ratio = np.broadcast_to(np.exp(log_s)[:, None], logp.shape).astype(logp.dtype)
        band = clip_band(clip_eps, clip_eps_high, logp.dtype)            # (1 - eps, 1 + eps_high)
        surr, clipped, active = _clipped_terms(ratio, adv, valid, band)
        # d(-s_b A_t')/dlogp_t = -A_t' s_b / |o_b| for every unclipped t' of row b, each over its d
        row = np.where(active, adv / d, 0.0).sum(axis=1)                  # (B,) sum_t' A_t' / d_bt'
        coef = np.where(row == 0, 0.0, -ratio[:, 0] / lengths * row)      # (B,)
        dlogp = np.where(valid, coef[:, None], 0.0).astype(logp.dtype)
        if not (np.isfinite(np.sum(surr)) and np.isfinite(dlogp).all()):  # no finite r A
            raise objective_error(surr, dlogp, valid, log_ratio, adv)
    loss = -masked_aggregate(surr, mask, loss_agg, norm_len)
    return loss, dlogp, policy_stats(ratio, log_ratio, clipped, valid, int(valid.sum()))


def _clipped_terms(ratio, adv, valid, band):
    """``(surr, clipped, active)`` per token: L^CLIP's objective ``A min(r, hi)`` (A >= 0) or
    ``A max(r, lo)`` (A < 0) in float64 (0 on padding), the valid tokens where the clip binds, the
    valid unclipped tokens with A != 0 (those whose term moves with logp)."""
    lo, hi = band
    a64 = adv.astype(np.float64)
    surr = np.where(adv >= 0, a64 * np.minimum(ratio, hi), a64 * np.maximum(ratio, lo))
    surr = np.where(valid, surr, 0.0)
    clipped = valid & (((adv > 0) & (ratio > hi)) | ((adv < 0) & (ratio < lo)))
    return surr, clipped, valid & ~clipped & (adv != 0)


def aggregated_value_loss(values, returns, mask=None, *, loss_agg="token-mean", norm_len=None):
    """L^VF = 0.5 (V - R)^2 aggregated by ``loss_agg`` (module docstring): the loss, dvalues
    (``(V - R) / d_bt``, 0 on padding) and the statistics of :func:`~minippo.rl.losses.value_loss`,
    which it is for "token-mean"."""
    if loss_agg == "token-mean":
        return value_loss(values, returns, mask)
    (values, returns), mask = token_inputs(mask, values=values, returns=returns)
    return _aggregated_value_terms(values, None, returns, mask, None, loss_agg, norm_len)


def aggregated_clipped_value_loss(values, values_old, returns, mask=None, clip_eps=0.2, *,
                                  loss_agg="token-mean", norm_len=None):
    """The clipped L^VF, ``0.5 max((V - R)^2, (V_clip - R)^2)`` with V_clip = V_old +
    clip(V - V_old, -eps, eps), aggregated by ``loss_agg``: the loss, dvalues (0 where the clipped
    error is strictly the larger) and the statistics of
    :func:`~minippo.rl.losses.clipped_value_loss`, which it is for "token-mean"."""
    if loss_agg == "token-mean":
        return clipped_value_loss(values, values_old, returns, mask, clip_eps)
    check_range("clip_eps", clip_eps, 0, None, lo_open=True)
    (values, values_old, returns), mask = token_inputs(
        mask, values=values, values_old=values_old, returns=returns)
    return _aggregated_value_terms(values, values_old, returns, mask, clip_eps, loss_agg, norm_len)


def _aggregated_value_terms(values, values_old, returns, mask, clip_eps, loss_agg, norm_len):
    """``(loss, dvalues, stats)`` of the two value variants on checked inputs (``values_old`` None:
    not clipped); squares in float64."""
    valid, n = mask == 1, int((mask == 1).sum())
    d = aggregation_denominator(mask, loss_agg, norm_len)                 # (B, 1) or B L_max
    names = ("values", "returns") if values_old is None else ("values", "values_old", "returns")
    v, R = values.astype(np.float64), returns.astype(np.float64)
    clipped = np.zeros(valid.shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        err = (v - R) ** 2                                                # (V - R)^2
        if values_old is not None:      # the larger of the two errors; the clipped one is constant
            v_old = values_old.astype(np.float64)
            err_clipped = (v_old + np.clip(v - v_old, -clip_eps, clip_eps) - R) ** 2
            clipped = (np.abs(v - v_old) > clip_eps) & (err_clipped > err) & valid
            err = np.maximum(err, err_clipped)
        err = np.where(valid, err, 0.0)
    if not np.isfinite(err).all():
        raise value_overflow_error(err, values, returns, names)
    loss = 0.5 * masked_aggregate(err, mask, loss_agg, norm_len)
    with np.errstate(over="ignore"):
        dvalues = np.where(clipped | ~valid, 0.0, (v - R) / d).astype(values.dtype)
    if not np.isfinite(dvalues).all():
        raise gradient_overflow_error(dvalues, values, returns, names)
    vf_clipfrac = 0.0 if values_old is None else masked_mean(clipped.astype(values.dtype), mask)
    return loss, dvalues, {"vf_clipfrac": vf_clipfrac, "values_mean": masked_mean(values, mask),
                           "returns_mean": masked_mean(returns, mask), "n_tokens": n}
