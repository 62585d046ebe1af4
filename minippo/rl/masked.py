"""Masked statistics: sums, means, variances and whitening that padding never enters.

Legend: B batch (rows = responses or environments), T tokens (or time steps). Every function
here takes an array ``x`` of any shape and a ``mask`` of the same shape that is 1 on valid
entries and 0 on padding; ``mask=None`` means "all valid" (this holds everywhere in
``minippo.rl``). Sums are accumulated in float64 whatever the input dtype.

The token-level losses of ``minippo.rl`` (policy, value, penalty) are ``masked_mean`` over the whole
batch by default: every valid token weighs the same, a long response counts more than a short one
(the CONTRIBUTING.md convention, as in TRL). :func:`aggregation_denominator` and
:func:`masked_aggregate` give the other two normalisations practitioners argue about: GRPO's
per-response 1/|o| and Dr. GRPO's constant normaliser (their ``loss_agg`` argument). Empty
selections have documented values instead of NaN, so a logged metric is always a finite number:

    masked_mean of no valid entry          -> 0.0
    masked_var of < 2 valid (unbiased)     -> 0.0   (< 1 valid when biased)
    masked_whiten of a constant selection  -> zeros, or x unchanged without the mean shift
    explained_variance with Var[R] = 0     -> 0.0

These functions accept any 0/1 mask (``layout="any"``): a statistic does not care where the
valid entries sit. The losses and GAE additionally require right-padded rows, see
:func:`token_inputs`.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import (check_choice, check_float_array, check_mask, check_range,
                            check_same_shape)

# ----------------------------------------------------------------------------------------------
# input handling shared by every function of minippo.rl that takes (arrays, mask)
# ----------------------------------------------------------------------------------------------

def _mask_of(mask, shape: tuple, dtype, *, layout: str = "any", name: str = "mask") -> np.ndarray:
    """Validate ``mask`` against ``shape`` and return it as an array of ``dtype`` (ones if None).

    ``layout`` is checked on 2-D masks only ("right": each row's valid entries start at
    position 0 and are contiguous); masks of other ranks only need to be 0/1.
    """
    if mask is None:
        return np.ones(shape, dtype=dtype)
    mask = np.asarray(mask)
    if mask.shape != tuple(shape):
        raise ValueError(f"`{name}` has shape {mask.shape} but the data have shape {tuple(shape)}; "
                         "they must match")
    as_2d = mask.reshape(1, -1) if mask.ndim != 2 else mask      # check_mask wants (B, T)
    check_mask(name, as_2d, layout=layout if mask.ndim == 2 else "any")
    return mask.astype(dtype, copy=False)


def token_inputs(mask, layout: str = "right", validate_values: bool = True, **arrays):
    """Validate the per-token arrays of a loss or of GAE and bring them to one float dtype.

    Parameters
    ----------
    mask : (B, T) or (N,) 0/1 array or None. 2-D masks must follow ``layout`` (right padding:
        valid tokens contiguous from position 0; rows may be empty). 1-D masks (a flat batch
        of tokens) only need to be 0/1.
    validate_values : if False only the cheap checks run here (dtype, rank, shapes); finiteness
        and the mask's 0/1 values and holes are left to a numba kernel that checks them while
        it computes (see ``minippo.rl._kernels``). The mask then keeps a float dtype of its own
        (bool and integer masks are converted exactly) so the kernel still sees a 0.5.
    **arrays : name -> float array, all with the same shape, 1-D or 2-D.

    Returns
    -------
    arrays : list of C-contiguous arrays in their common float dtype (float32 if all are
        float32, else float64), in the order given.
    mask : C-contiguous array of that dtype (ones when ``mask`` is None).
    """
    names = list(arrays)
    checked = [check_float_array(n, arrays[n], finite=validate_values) for n in names]
    for n, a in zip(names, checked):
        if a.ndim not in (1, 2):
            raise ValueError(f"`{n}` must be 1-D (N,) or 2-D (B, T), got shape {a.shape}")
    check_same_shape(**dict(zip(names, checked)))
    dtype = np.result_type(*checked)
    out = [np.ascontiguousarray(a, dtype=dtype) for a in checked]
    if validate_values or mask is None:
        return out, np.ascontiguousarray(_mask_of(mask, out[0].shape, dtype, layout=layout))
    mask = np.asarray(mask)
    if mask.shape != out[0].shape:
        raise ValueError(f"`mask` has shape {mask.shape} but `{names[0]}` has shape "
                         f"{out[0].shape}; "
                         f"they must match")
    if mask.dtype != np.bool_ and not np.issubdtype(mask.dtype, np.number):
        raise ValueError(f"`mask` must be numeric or bool, got dtype {mask.dtype}")
    keep = mask.dtype in (np.float32, np.float64)
    return out, np.ascontiguousarray(mask, dtype=mask.dtype if keep else dtype)


# ----------------------------------------------------------------------------------------------
# sums, means, variances
# ----------------------------------------------------------------------------------------------

def masked_sum(x, mask, axis=None):
    """Sum of ``x`` over the entries where ``mask`` is 1, accumulated in float64.

    Returns a float when ``axis`` is None, else a float64 array reduced over ``axis``.
    """
    x = check_float_array("x", x)
    m = _mask_of(mask, x.shape, x.dtype)
    s = np.sum(x * m, axis=axis, dtype=np.float64)          # x * m is exact: m is 0 or 1
    return float(s) if axis is None else s


def masked_mean(x, mask, axis=None):
    """Mean of ``x`` over the valid entries: ``sum(x * mask) / sum(mask)``.

    Where there is no valid entry (an empty batch, or an empty row with ``axis=1``) the mean
    is defined as 0.0, so that a loss built on it is 0 with zero gradient.
    """
    x = check_float_array("x", x)
    m = _mask_of(mask, x.shape, x.dtype)
    s = np.sum(x * m, axis=axis, dtype=np.float64)
    n = np.sum(m, axis=axis, dtype=np.float64)
    if axis is None:
        return float(s / n) if n > 0 else 0.0
    return np.divide(s, n, out=np.zeros_like(s), where=n > 0)


def masked_var(x, mask, unbiased=True):
    """Variance of ``x`` over all valid entries (a scalar), two-pass in float64.

    ``unbiased=True`` divides by n - 1 (Bessel's correction), else by n. With too few valid
    entries for the chosen divisor (n < 2 unbiased, n < 1 biased) the variance is 0.0.
    """
    x = check_float_array("x", x)
    m = _mask_of(mask, x.shape, x.dtype)
    n = float(np.sum(m, dtype=np.float64))
    if n < (2 if unbiased else 1):
        return 0.0
    mean = np.sum(x * m, dtype=np.float64) / n
    centered = (x.astype(np.float64) - mean) * m                # padding contributes 0
    return float(np.sum(centered * centered) / (n - 1 if unbiased else n))


def masked_whiten(x, mask, shift_mean=True, eps=1e-8):
    """Whiten ``x`` over its valid entries: ``(x - mean) / sqrt(var + eps)`` (advantage
    normalisation).

    Parameters
    ----------
    x : float array, any shape.
    mask : 0/1 array like ``x``, or None.
    shift_mean : if False the mean is added back, ``(x - mean) / std + mean`` (TRL uses this to
        whiten rewards without moving their level).
    eps : added to the variance before the square root.

    Returns
    -------
    Array like ``x`` (same dtype), 0 on padding. The variance is the biased one (divide by n),
    so ``np.std(out[mask == 1])`` is 1 up to ``eps`` and the mean is 0 when ``shift_mean``.

    Guards: when the valid entries are constant (a single valid entry, or all equal up to
    float rounding: std <= 16 ulp of their magnitude) there is no scale to divide by; the
    result is then exactly zeros with ``shift_mean`` (x - mean), and ``x`` unchanged (0 on
    padding) without it, instead of the ``x / sqrt(eps)`` blow-up (x 10^4) of the naive
    formula. No valid entry at all returns zeros.
    """
    x = check_float_array("x", x)
    m = _mask_of(mask, x.shape, x.dtype)
    check_range("eps", eps, 0, None)
    n = float(np.sum(m, dtype=np.float64))
    if n == 0:
        return np.zeros_like(x)
    mean = np.sum(x * m, dtype=np.float64) / n
    centered = (x.astype(np.float64) - mean) * m                # padding contributes 0
    var = float(np.sum(centered * centered) / n)                # the biased variance
    # "constant" = the spread is within float rounding of the values' magnitude
    scale_of_x = float(np.max(np.abs(x * m)))
    if np.sqrt(var) <= 16 * np.finfo(x.dtype).eps * scale_of_x:
        return (x * m).astype(x.dtype) if not shift_mean else np.zeros_like(x)
    # the next lines are the whitening itself, in float64 then back to x's dtype
    out = (x.astype(np.float64) - mean) / np.sqrt(var + eps)
    if not shift_mean:
        out += mean
    return (out * m).astype(x.dtype)


def explained_variance(values, returns, mask) -> float:
    """Explained variance of the critic: ``1 - Var[R - V] / Var[R]`` over the valid tokens.

    1 is a perfect critic, 0 a critic no better than predicting the mean return, negative a
    critic worse than that (the CleanRL / TRL ``val/explained_variance`` metric; variances are
    the biased ones over the valid tokens).

    NaN-safe definition: when ``Var[R] = 0`` (constant returns, or fewer than two valid tokens)
    the ratio is 0/0; we return 0.0 rather than NaN (CleanRL and SB3 return NaN) so that the
    logged metric is always finite, and 0 is what a constant prediction scores.
    """
    (values, returns), m = token_inputs(mask, layout="any", values=values, returns=returns)
    var_r = masked_var(returns, m, unbiased=False)
    if var_r == 0.0:
        return 0.0
    return 1.0 - masked_var(returns - values, m, unbiased=False) / var_r


# ----------------------------------------------------------------------------------------------
# loss aggregation: how per-token terms become one loss (token-mean, the GRPO 1/|o|, Dr. GRPO's
# constant)
# ----------------------------------------------------------------------------------------------

#: the three normalisations of verl's ``loss_agg_mode`` / TRL's ``loss_type``
LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def aggregation_denominator(mask, loss_agg: str = "token-mean", norm_len=None):
    """The divisor d of each valid token's term: an aggregated loss is
    ``sum_{b,t} m_bt l_bt / d_bt``.

    With B rows (responses), |o_b| valid tokens in row b and n = sum_b |o_b|::

        "token-mean"               d = n                L = sum_{b,t} m l / n
        "seq-mean-token-mean"      d_b = B max(|o_b|, 1)  L = 1/B sum_b (1/|o_b|) sum_t m l
        "seq-mean-token-sum-norm"  d = B norm_len       L = 1/(B L_max) sum_{b,t} m l

    "token-mean" is DAPO's token-level loss (arXiv:2503.14476; TRL ``loss_type="bnpo"``, verl
    ``token-mean``) and every loss of minippo by default: each valid token weighs the same.
    "seq-mean-token-mean" is GRPO's objective (DeepSeekMath, arXiv:2402.03300): each response's
    tokens are averaged first, so a token of a long response weighs less (TRL ``"grpo"``; an
    empty row counts in B and contributes 0, TRL's ``clamp(min=1)``). "seq-mean-token-sum-norm" is
    Dr. GRPO's fix (arXiv:2503.20783: the 1/|o| term is what lengthens wrong answers): a CONSTANT
    normaliser, TRL ``"dr_grpo"`` = ``sum / (B * max_completion_length)``; verl's mode of that name
    divides by the padded width ``mask.shape[-1]`` and not by B (its source asks for the divisor to
    stay constant). Here ``norm_len`` is that constant and must be given (the trainers pass
    ``max_new_tokens``, which does not change with the batch's padding); ``norm_len = 1`` gives
    the mean over responses of each response's token SUM.

    Parameters
    ----------
    mask : (B, T) 0/1 (1-D (N,) masks only for "token-mean": a flat batch has no responses).
    loss_agg : one of :data:`LOSS_AGGS`.
    norm_len : > 0, the constant L_max of "seq-mean-token-sum-norm" (ignored otherwise).

    Returns
    -------
    d : a float (token-mean: max(n, 1); sum-norm: B norm_len) or a (B, 1) float64 array (seq-mean).
    """
    check_choice("loss_agg", loss_agg, LOSS_AGGS)
    m = np.asarray(mask)
    if loss_agg == "token-mean":
        return float(max(int((m != 0).sum()), 1))
    if m.ndim != 2:
        raise ValueError(f"`loss_agg` {loss_agg!r} needs 2-D (B, T) inputs (one row per response), "
                         f"got shape {m.shape}")
    B = m.shape[0]
    if loss_agg == "seq-mean-token-mean":
        lengths = (m != 0).sum(axis=1, keepdims=True).astype(np.float64)      # (B, 1) |o_b|
        return B * np.maximum(lengths, 1.0)
    if norm_len is None:
        raise ValueError("`norm_len` must be given for loss_agg 'seq-mean-token-sum-norm' (the "
                         "constant "
                         "normaliser, e.g. max_new_tokens; a batch's padded width changes with the "
                         "batch)")
    check_range("norm_len", norm_len, 0, None, lo_open=True)
    return float(B * norm_len)


def masked_aggregate(x, mask, loss_agg: str = "token-mean", norm_len=None) -> float:
    """``sum_{b,t} m x / d`` with the divisor of :func:`aggregation_denominator` (float64 sums).

    ``"token-mean"`` is exactly :func:`masked_mean` (the same computation, so the same bits).
    """
    if loss_agg == "token-mean":
        return masked_mean(x, mask)
    d = aggregation_denominator(mask, loss_agg, norm_len)
    x = check_float_array("x", x)
    m = _mask_of(mask, x.shape, x.dtype)
    return float(np.sum((x * m).astype(np.float64) / d))
