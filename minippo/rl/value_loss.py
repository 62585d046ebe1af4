"""The critic's loss: squared error to the returns, optionally clipped around the old values.

Legend: B batch (responses), T tokens; N flat tokens for 1-D inputs.

The value term of PPO paper eq. (9) is ``L^VF = (V(s_t) - V_t^targ)^2`` with the targets
``returns = adv + values_old`` from GAE. Implementations (OpenAI baselines, TRL, CleanRL's
``clip_vloss``) also clip the new values around the ones stored at rollout time, so the critic
cannot move more than ``clip_eps`` per update, and take the larger of the two errors:

    v_clipped = values_old + clip(values - values_old, -eps, eps)
    L^VF      = 0.5 * masked_mean(max((values - R)^2, (v_clipped - R)^2))

The factor 0.5 makes the gradient of the unclipped term exactly ``(values - R) / n``. As in
the policy loss, the mean is over all valid tokens of the batch and padding gets no gradient.

Gradient of the clipped form, per valid token (n valid tokens):
* the unclipped error is selected (it is >= the clipped one; ties go here): ``(v - R) / n``;
* the clipped error is strictly larger: ``(v_clipped - R) * dv_clipped/dv / n``, and
  ``dv_clipped/dv = 0`` there (the larger clipped error only happens when ``|v - v_old| > eps``),
  so the gradient is exactly 0. ``vf_clipfrac`` is the fraction of valid tokens in this case.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_range
from minippo.rl.masked import masked_mean, token_inputs


def value_loss(values, returns, mask=None):
    """Unclipped value loss ``0.5 * masked_mean((values - returns)^2)``.

    Parameters
    ----------
    values : (B, T) or (N,) V(s_t) from the critic being trained.
    returns : same shape, the regression targets R_t (adv + values_old).
    mask : 0/1 like ``values`` or None (all valid); 2-D masks must be right-padded.

    Returns
    -------
    loss : float. dvalues : like ``values``, ``(values - returns) / n``, 0 on padding.
    stats : ``vf_clipfrac`` (0.0: nothing is clipped), ``values_mean``, ``returns_mean``, ``n_tokens``.
    """
    (values, returns), mask = token_inputs(mask, values=values, returns=returns)
    n = int((mask == 1).sum())
    error = values - returns                                          # V(s_t) - R_t
    loss = 0.5 * masked_mean(error * error, mask)
    dvalues = (error * mask / max(n, 1)).astype(values.dtype)        # d(0.5 e^2)/dv = e, /n
    stats = {"vf_clipfrac": 0.0, "values_mean": masked_mean(values, mask),
             "returns_mean": masked_mean(returns, mask), "n_tokens": n}
    return loss, dvalues, stats


def clipped_value_loss(values, values_old, returns, mask=None, clip_eps=0.2):
    """Clipped value loss ``0.5 * masked_mean(max((v - R)^2, (v_old + clip(v - v_old, -eps, eps) - R)^2))``.

    Parameters
    ----------
    values : (B, T) or (N,) V(s_t) from the critic being trained.
    values_old : same shape, the values stored at rollout time.
    returns : same shape, R_t = adv + values_old.
    mask : 0/1 like ``values`` or None; 2-D masks must be right-padded.
    clip_eps : > 0, in the units of the values (its own hyperparameter: ``clip_eps_value``
        in the trainers' configs).

    Returns
    -------
    loss : float. dvalues : like ``values`` (see the module docstring; 0 on padding).
    stats : ``vf_clipfrac`` (fraction of valid tokens where the clipped error is strictly the
        larger: their gradient is 0), ``values_mean``, ``returns_mean``, ``n_tokens``.
    """
    check_range("clip_eps", clip_eps, 0, None, lo_open=True)
    (values, values_old, returns), mask = token_inputs(
        mask, values=values, values_old=values_old, returns=returns)
    valid = mask == 1
    n = int(valid.sum())
    # the next four lines are the clipped value loss
    v_clipped = values_old + np.clip(values - values_old, -clip_eps, clip_eps)
    err_unclipped = (values - returns) ** 2                           # (V - R)^2
    err_clipped = (v_clipped - returns) ** 2                          # (V_clip - R)^2
    loss = 0.5 * masked_mean(np.maximum(err_unclipped, err_clipped), mask)
    # max() picks the clipped error only where it is strictly larger, which needs v outside the
    # band (inside it v_clipped = v up to rounding); v_clipped is then constant: no gradient
    outside = np.abs(values - values_old) > clip_eps
    clipped = outside & (err_clipped > err_unclipped) & valid
    dvalues = np.where(clipped | ~valid, 0.0, (values - returns) / max(n, 1)).astype(values.dtype)
    stats = {"vf_clipfrac": masked_mean(clipped.astype(values.dtype), mask),
             "values_mean": masked_mean(values, mask), "returns_mean": masked_mean(returns, mask),
             "n_tokens": n}
    return loss, dvalues, stats
