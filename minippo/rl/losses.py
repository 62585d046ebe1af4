"""The losses of PPO paper eq. (9) and the distribution they are computed from, arrays in, arrays
out.

Legend: B batch, T tokens, V vocab; N flat tokens for 1-D inputs; "..." any leading shape.

Schulman et al. 2017 (arXiv:1707.06347) train with

    L^{CLIP+VF+S}(theta) = E_t[ L^CLIP_t(theta) - c1 L^VF_t(theta) + c2 S[pi_theta](s_t) ]   eq. (9)

and every term of one RLHF PPO iteration is here, in the order a reader needs them: (1) the policy's
distribution (log-prob of the taken token, entropy S, the exact KL between two sets of logits), (2)
the policy loss L^CLIP, eq. (7), with its clip cases, (3) the value loss L^VF. The KL estimators
k1/k2/k3 and the KL as a loss term are in :mod:`minippo.rl.kl`; L^KLPEN, eq. (8), in
:mod:`minippo.rl.penalty`.

Every loss returns ``(loss, d<input>, stats)``: the loss to MINIMISE (``-objective`` for the policy)
and its analytic gradient. ``mask`` is 1 on valid tokens (rows right-padded), ``mask=None`` means
all valid; means are token-level masked means over the whole batch (n valid tokens: a factor 1/n per
token). Each body is its formula in NumPy; :func:`clipped_policy_loss` also has a compiled twin in
``rl/_kernels.py`` (one pass over the tokens), called by its first line while the switch of
:mod:`minippo.kernels` is on (the default). The variants (GRPO's and Dr. GRPO's aggregations of
L^CLIP and L^VF, GSPO's sequence ratio) are :mod:`minippo.rl.loss_variants`.

## 1. The policy's distribution

``pi = softmax(logits / temperature)`` with ONE temperature (CONTRIBUTING.md) for the policy, the
old policy, the reference and the entropy alike: the sampled tokens came from the tempered
distribution. With z = logits / T and p = softmax(z): ``d log p_a / d z_j = 1[j = a] - p_j``,
``d H / d z_j = -p_j (log p_j + H)`` (H = -sum_j p_j log p_j), ``d z_j / d logits_j = 1 / T``.

## 2. The policy loss, eq. (7)

    L^CLIP = E_t[ min(r_t A_t, clip(r_t, 1-eps_low, 1+eps_high) A_t) ],   r_t = exp(logp - logp_old)

(never a quotient of probabilities, which underflow). PPO's band is symmetric, eps_high = eps_low =
``clip_eps``; ``clip_eps_high`` makes it DAPO's "Clip-Higher" (arXiv:2503.14476: 0.2 / 0.28, so that
a low-probability token with A > 0 can grow more before its gradient is cut, against entropy
collapse). Since ``min(r A, clip(r) A) = A min(r, 1+eps_high)`` for A >= 0 and
``A max(r, 1-eps_low)`` for A < 0, the objective is computed in that form: finite wherever the clip
binds, even when r overflows (A > 0: (1 + eps_high) A, zero gradient); where A < 0 and r overflows,
r A has no finite value and a ``ValueError`` names ``logp`` and ``logp_old``
(:func:`objective_error`, apart from the formula). min() selects the clipped term exactly
where the unclipped term would let the objective grow further (Q9); each token's case is
:func:`clip_cases`:

    code  advantage  ratio r                       selected term           dL/dlogp
    1     A > 0      r < 1-eps_low                 r A  (unclipped)        -A r / n
    2     A > 0      1-eps_low <= r <= 1+eps_high  r A  (both equal)       -A r / n
    3     A > 0      r > 1+eps_high                (1+eps_high) A CLIPPED  0  "good action boosted"
    4     A < 0      r < 1-eps_low                 (1-eps_low) A  CLIPPED  0  "bad action cut"
    5     A < 0      1-eps_low <= r <= 1+eps_high  r A  (both equal)       -A r / n
    6     A < 0      r > 1+eps_high                r A  (unclipped)        -A r / n
    7     A = 0      any                            0                       0   (no signal)
    0     padding                                                           0

The band is CLOSED: at r = 1 - eps_low or 1 + eps_high exactly the token is inside (case 2 or 5) and
gets the one-sided derivative from inside, as PyTorch's ``clamp``. ``clipfrac`` is the fraction of
valid tokens in cases 3 and 4, whose gradient is exactly zero (TRL's definition; CleanRL's
``|r - 1| > eps`` also counts cases 1 and 6). ``approx_kl`` = mean((r - 1) - log r), the k3 of
KL(pi_old || pi).

## 3. The value loss

L^VF = (V(s_t) - V_t^targ)^2 with ``returns = adv + values_old`` from GAE. OpenAI baselines, TRL and
CleanRL (``clip_vloss``) also clip the new values around the rollout's, and take the larger error:

    v_clipped = values_old + clip(values - values_old, -eps, eps)
    L^VF      = 0.5 * masked_mean(max((values - R)^2, (v_clipped - R)^2))

The 0.5 makes the unclipped gradient exactly ``(values - R) / n``. Where the clipped error is
strictly larger (only possible when ``|v - v_old| > eps``) v_clipped is a constant: gradient exactly
0, counted in ``vf_clipfrac``; ties go to the unclipped error. Squares are computed in float64;
where even that overflows a ``ValueError`` names ``values`` and ``returns``.
"""
from __future__ import annotations

import numpy as np

from minippo import kernels
from minippo._lazy import LazyModule
from minippo.checks import check_float_array, check_int_array, check_range, check_same_shape
from minippo.rl.masked import masked_mean, token_inputs

# the compiled twin of clipped_policy_loss; imported (with numba) at its first call, so `import
# minippo` stays fast
_kernels = LazyModule("minippo.rl._kernels")

# ----------------------------------------------------------------------------------------------
# 1. the policy's distribution: log-probs of the taken tokens, entropy, exact KL
# ----------------------------------------------------------------------------------------------

def log_softmax(logits, temperature=1.0):
    """Stable ``log softmax(logits / temperature)`` over the last axis:
    ``z - max - log sum exp(z - max)``."""
    logits = check_float_array("logits", logits)
    if logits.ndim < 1 or logits.shape[-1] == 0:
        raise ValueError("`logits` must have a non-empty last (vocab) axis, got shape "
                         f"{logits.shape}")
    check_range("temperature", temperature, 0, None, lo_open=True)
    z = logits / logits.dtype.type(temperature)                       # z, (..., V): a new array
    z -= z.max(axis=-1, keepdims=True)                                # shift: the largest exp is 1
    z -= np.log(np.exp(z).sum(axis=-1, keepdims=True))                # (..., V), in place
    return z


def logprobs_from_logits(logits, actions, temperature=1.0):
    """Log-probability of the taken tokens: ``logp = log_softmax(logits / T)[..., actions]``.

    Parameters
    ----------
    logits : (..., V) float32/float64.
    actions : (...) integer token ids in [0, V).
    temperature : > 0.

    Returns
    -------
    logp : (...) in the logits' dtype.
    cache : what :func:`logprobs_backward` needs (the probabilities, the actions, T).
    """
    logq = log_softmax(logits, temperature)                           # (..., V)
    return logprobs_from_logq(logq, np.exp(logq), actions, temperature)


def logprobs_from_logq(logq, probs, actions, temperature=1.0):
    """:func:`logprobs_from_logits` given ``logq = log_softmax(logits / T)`` and ``probs =
    exp(logq)`` (..., V) already computed (the PPO loss reads them for the entropy too)."""
    V = logq.shape[-1]
    actions = check_int_array("actions", actions, shape=logq.shape[:-1], low=0, high=V)
    logp = np.take_along_axis(logq, actions[..., None], axis=-1)[..., 0]    # (...)
    return logp, (probs, actions, float(temperature))


def logprobs_backward(dlogp, cache):
    """dL/dlogits from dL/dlogp: ``dlogits = dlogp[..., None] * (onehot(a) - p) / T``."""
    probs, actions, temperature = cache
    dlogp = check_float_array("dlogp", dlogp, shape=probs.shape[:-1])
    # logp = z[a] - logsumexp(z)  ->  d/dz = onehot(a) - softmax(z)
    onehot = np.zeros_like(probs)                                     # (..., V)
    np.put_along_axis(onehot, actions[..., None], 1.0, axis=-1)
    dz = (onehot - probs) * dlogp[..., None]                          # (..., V)
    return (dz / temperature).astype(probs.dtype)                     # z = logits / T


def entropy_from_logits(logits, temperature=1.0):
    """Entropy of the tempered categorical at each position: ``H = -sum_v p_v log p_v``.

    Returns ``ent`` (...) in the logits' dtype and the cache for :func:`entropy_backward`.
    The entropy bonus of PPO paper eq. (9) is ``c2 * mean(H)``.
    """
    logq = log_softmax(logits, temperature)                           # (..., V)
    return entropy_from_logq(logq, np.exp(logq), temperature)


def entropy_from_logq(logq, probs, temperature=1.0):
    """:func:`entropy_from_logits` given ``logq = log_softmax(logits / T)`` and
    ``probs = exp(logq)``."""
    ent = -np.sum(probs * logq, axis=-1)                              # (...)
    return ent, (probs, logq, ent, float(temperature))


def entropy_backward(dent, cache):
    """dL/dlogits from dL/dH: ``dlogits = dent[..., None] * (-p (log p + H)) / T``."""
    probs, logq, ent, temperature = cache
    dent = check_float_array("dent", dent, shape=probs.shape[:-1])
    # H = -sum_j p_j log p_j  ->  dH/dz_j = -p_j (log p_j + H)
    dz = -probs * (logq + ent[..., None]) * dent[..., None]           # (..., V)
    return (dz / temperature).astype(probs.dtype)                     # z = logits / T


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


# ----------------------------------------------------------------------------------------------
# 2. the policy loss L^CLIP, eq. (7)
# ----------------------------------------------------------------------------------------------

PAD, POS_BELOW, POS_INSIDE, POS_CLIPPED, NEG_CLIPPED, NEG_INSIDE, NEG_ABOVE, ZERO_ADV = range(8)
#: code -> description of the per-token clip cases of :func:`clip_cases` (int8)
CLIP_CASES = {
    PAD: "padding",
    POS_BELOW: "A>0, r<1-eps_low: unclipped, grad -A r/n",
    POS_INSIDE: "A>0, r in band: unclipped, grad -A r/n",
    POS_CLIPPED: "A>0, r>1+eps_high: CLIPPED, grad 0",
    NEG_CLIPPED: "A<0, r<1-eps_low: CLIPPED, grad 0",
    NEG_INSIDE: "A<0, r in band: unclipped, grad -A r/n",
    NEG_ABOVE: "A<0, r>1+eps_high: unclipped, grad -A r/n",
    ZERO_ADV: "A=0: no signal, grad 0",
}
#: the codes whose clipped branch is active (zero gradient), counted by ``clipfrac``
CLIPPED_CASES = (POS_CLIPPED, NEG_CLIPPED)


def clip_band(clip_eps, clip_eps_high, dtype):
    """``(1 - eps_low, 1 + eps_high)`` in ``dtype``: eps_low = ``clip_eps`` > 0, eps_high =
    ``clip_eps_high`` > 0 (None: the same as eps_low, PPO's symmetric band)."""
    check_range("clip_eps", clip_eps, 0, None, lo_open=True)
    if clip_eps_high is not None:
        check_range("clip_eps_high", clip_eps_high, 0, None, lo_open=True)
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    return np.dtype(dtype).type(1 - clip_eps), np.dtype(dtype).type(1 + eps_high)


def clipped_policy_loss(logp, logp_old, adv, mask=None, clip_eps=0.2, clip_eps_high=None):
    """L^CLIP of PPO paper eq. (7) as a token-mean loss, its gradient and its statistics.

    Parameters
    ----------
    logp : (B, T) or (N,) log pi(a_t|s_t) under the current policy, float32 or float64.
    logp_old : same shape, log pi_old(a_t|s_t) stored at rollout time.
    adv : same shape, advantages A_t (usually whitened).
    mask : 0/1 like ``logp`` or None (all valid). 2-D masks must be right-padded.
    clip_eps : eps_low > 0 (the band's lower edge is 1 - eps_low); 0.2 typical.
    clip_eps_high : eps_high > 0, or None for eps_low (symmetric); DAPO's clip-higher uses 0.28.

    Returns
    -------
    loss : float, ``-mean_t min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` over the n valid tokens (0
        with none).
    dlogp : like ``logp``: -A r / n where the unclipped branch is active, exactly 0 on clipped
        tokens (cases 3, 4 of :func:`clip_cases`), A = 0 and padding.
    stats : ``clipfrac``, ``approx_kl`` (k3 = mean((r - 1) - log r), an estimate of KL(pi_old ||
        pi); +inf when a ratio overflows), ``ratio_mean``, ``ratio_max``, ``ratio_min`` (1.0 with no
        valid token), ``n_tokens``.

    Raises ``ValueError`` naming ``logp`` and ``logp_old`` where ``r A`` has no finite value (A < 0
    and the ratio overflows). The other aggregations and GSPO's sequence ratio are
    :mod:`minippo.rl.loss_variants`.
    """
    if kernels.ON:                            # the same formula, compiled: rl/_kernels.py
        return _kernels.clipped_policy_loss(logp, logp_old, adv, mask, clip_eps, clip_eps_high)
    (logp, logp_old, adv), mask = token_inputs(mask, logp=logp, logp_old=logp_old, adv=adv)
    # the band, in the data's dtype
    lo, hi = clip_band(clip_eps, clip_eps_high, logp.dtype)
    valid = mask == 1
    n = int(valid.sum())
    log_ratio = logp - logp_old                                           # log r_t
    with np.errstate(over="ignore", invalid="ignore"):
        # r_t; +inf where log r_t exceeds the dtype's range
        ratio = np.exp(log_ratio)
        # the next two lines are L^CLIP, eq. (7): min(r A, clip(r) A) = A min(r, 1+eps_high) (A >=
        # 0), A max(r, 1-eps_low) (A < 0); finite wherever the clip binds, even where r overflows
        # (float64 terms)
        a64 = adv.astype(np.float64)
        surr = np.where(valid, np.where(adv >= 0, a64 * np.minimum(ratio, hi),
                                        a64 * np.maximum(ratio, lo)), 0.0)
        # min() selects the constant clipped term where clipping binds: zero gradient there
        clipped = valid & (((adv > 0) & (ratio > hi)) | ((adv < 0) & (ratio < lo)))
        # d(-r A)/dlogp = -A r (dr/dlogp = r) on the tokens whose term moves with logp, / n
        dlogp = np.where(valid & ~clipped & (adv != 0), -adv * ratio / max(n, 1),
                         0.0).astype(logp.dtype)
        if not (np.isfinite(np.sum(surr)) and np.isfinite(dlogp).all()):  # no finite r A
            raise objective_error(surr, dlogp, valid, log_ratio, adv)
    loss = -masked_mean(surr, mask)
    return loss, dlogp, policy_stats(ratio, log_ratio, clipped, valid, n)


def policy_stats(ratio, log_ratio, clipped, valid, n) -> dict:
    """The statistics of a clipped loss over its ``n`` ``valid`` tokens: ``clipfrac`` (clipped / n),
    ``approx_kl`` (k3 = mean((r - 1) - log r) of the token log-ratios), :func:`ratio_stats` of
    ``ratio`` and ``n_tokens`` (float64 sums; 0 with no valid token; inf allowed: a ratio may
    overflow)."""
    if n == 0:
        return {"clipfrac": 0.0, "approx_kl": 0.0, **ratio_stats(ratio, valid, n), "n_tokens": n}
    with np.errstate(over="ignore", invalid="ignore"):
        k3 = np.expm1(log_ratio) - log_ratio                             # (r - 1) - log r per token
    return {"clipfrac": float(np.sum(clipped, dtype=np.float64) / n),
            "approx_kl": float(np.sum(np.where(valid, k3, 0), dtype=np.float64) / n),
            "ratio_mean": float(np.sum(np.where(valid, ratio, 0), dtype=np.float64) / n),
            "ratio_max": float(ratio[valid].max()), "ratio_min": float(ratio[valid].min()),
            "n_tokens": n}


def ratio_stats(ratio, valid, n):
    """ratio_mean / ratio_max / ratio_min over the ``n`` ``valid`` tokens (float64 sums, inf
    allowed: a ratio may overflow; 1.0 when there are none)."""
    if n == 0:
        return {"ratio_mean": 1.0, "ratio_max": 1.0, "ratio_min": 1.0}
    return {"ratio_mean": float(np.sum(np.where(valid, ratio, 0), dtype=np.float64) / n),
            "ratio_max": float(ratio[valid].max()), "ratio_min": float(ratio[valid].min())}


def clip_cases(ratio, adv, mask=None, clip_eps=0.2, clip_eps_high=None) -> np.ndarray:
    """The case of every token in the table of the module docstring (int8 codes of
    :data:`CLIP_CASES`) for the ratio ``ratio`` (r_t, or GSPO's s_b on each token of row b),
    advantages ``adv`` and the band [1 - clip_eps, 1 + clip_eps_high]: which tokens the clip zeroes
    (cases 3, 4) and why the others move."""
    (ratio, adv), mask = token_inputs(mask, layout="any", validate_values=False, ratio=ratio,
                                      adv=adv)
    lo, hi = clip_band(clip_eps, clip_eps_high, ratio.dtype)
    return np.select(
        [mask != 1, adv == 0, (adv > 0) & (ratio < lo), (adv > 0) & (ratio <= hi), adv > 0,
         ratio < lo, ratio <= hi],
        [PAD, ZERO_ADV, POS_BELOW, POS_INSIDE, POS_CLIPPED, NEG_CLIPPED, NEG_INSIDE],
        default=NEG_ABOVE).astype(np.int8)


def objective_error(surr, dlogp, valid, log_ratio, adv, what="L^CLIP = r A") -> ValueError:
    """The overflow diagnostics of a clipped loss, called only when its objective ``surr`` (0 on
    padding) or its gradient ``dlogp`` has a non-finite entry or sum: the ``ValueError`` at the
    first valid token whose objective or gradient has no finite value
    (:func:`ratio_overflow_error`), else the one saying that the sum overflows float64."""
    bad = valid & ~(np.isfinite(surr) & np.isfinite(dlogp))
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        return ratio_overflow_error(log_ratio[i].item(), adv[i].item(),
                                    i if len(i) != 1 else i[0], what=what, dtype=dlogp.dtype)
    return ValueError(f"the sum of {what.split(' =')[0]} over the tokens overflows float64; "
                      "check `logp` and `logp_old`")


def ratio_overflow_error(log_ratio, adv, pos, what="L^CLIP = r A", dtype=np.float64,
                         why="the clip bounds r only on the side A pushes it") -> ValueError:
    """The ``ValueError`` of both paths of :func:`clipped_policy_loss` (and its variants and
    :func:`ppo_penalty_loss`) where the objective or its gradient has no finite value in ``dtype``:
    the ratio overflows (named: ``logp`` and ``logp_old``), or the ratio is finite and the advantage
    makes ``-A r / n`` overflow (named: ``adv``)."""
    with np.errstate(over="ignore"):
        r = float(np.exp(np.float64(log_ratio)))
    if r <= float(np.finfo(dtype).max):
        return ValueError(f"`adv` = {adv!r} at {pos} with the ratio r = {r!r} gives {what} or its "
                          "gradient beyond "
                          f"the range of {np.dtype(dtype)}; check `adv`")
    return ValueError(f"`logp` - `logp_old` = {log_ratio!r} at {pos} gives the ratio r = {r!r} "
                      "with the advantage "
                      f"A = {adv!r}: {what} is not finite there ({why}); check `logp` and "
                      "`logp_old`")


# ----------------------------------------------------------------------------------------------
# 3. the value loss L^VF
# ----------------------------------------------------------------------------------------------

def value_overflow_error(err, values, returns, names,
                         what="a squared error beyond float64's range: no finite value loss"):
    """``ValueError`` naming the inputs where the float64 squared error (or the gradient in the
    values' dtype) has no finite value."""
    i = tuple(int(j) for j in np.argwhere(~np.isfinite(err))[0])
    pos = i if len(i) != 1 else i[0]
    return ValueError(f"{' and '.join(f'`{n}`' for n in names)} at {pos} (values "
                      f"{values[i].item()!r}, returns "
                      f"{returns[i].item()!r}) give {what}")


def gradient_overflow_error(dvalues, values, returns, names):
    """The gradient ``(v - R) / n`` is finite in float64 but not in the values' dtype (float32
    beyond 3.4e38)."""
    return value_overflow_error(dvalues, values, returns, names,
                                "a gradient (values - returns) / n beyond the range of "
                                f"{dvalues.dtype}: no finite "
                                "gradient in that dtype (pass float64 values)")


def value_loss(values, returns, mask=None):
    """Unclipped value loss ``0.5 * masked_mean((values - returns)^2)``: L^VF of PPO paper eq. (9),
    with 0.5.

    Parameters
    ----------
    values : (B, T) or (N,) V(s_t) from the critic being trained.
    returns : same shape, the regression targets R_t (adv + values_old).
    mask : 0/1 like ``values`` or None (all valid); 2-D masks must be right-padded.

    Returns
    -------
    loss : float. dvalues : like ``values``, ``(values - returns) / n``, 0 on padding.
    stats : ``vf_clipfrac`` (0.0: nothing is clipped), ``values_mean``, ``returns_mean``,
    ``n_tokens``.
    """
    (values, returns), mask = token_inputs(mask, values=values, returns=returns)
    n = int((mask == 1).sum())
    with np.errstate(over="ignore", invalid="ignore"):
        error = values.astype(np.float64) - returns.astype(np.float64)   # V(s_t) - R_t, float64
        sq = np.where(mask == 1, error * error, 0.0)
    if not np.isfinite(sq).all():
        raise value_overflow_error(sq, values, returns, ("values", "returns"))
    loss = 0.5 * masked_mean(sq, mask)
    with np.errstate(over="ignore"):
        dvalues = np.where(mask == 1, error / float(max(n, 1)), 0.0).astype(values.dtype)  # e / n
    if not np.isfinite(dvalues).all():
        raise gradient_overflow_error(dvalues, values, returns, ("values", "returns"))
    stats = {"vf_clipfrac": 0.0, "values_mean": masked_mean(values, mask),
             "returns_mean": masked_mean(returns, mask), "n_tokens": n}
    return loss, dvalues, stats


def clipped_value_loss(values, values_old, returns, mask=None, clip_eps=0.2):
    """Clipped value loss ``0.5 * masked_mean(max((v - R)^2, (v_old + clip(v - v_old, -eps, eps) -
    R)^2))``.

    L^VF of PPO paper eq. (9), clipped around the rollout's values (the paper has no value
    clipping).

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
    v, v_old, R = (a.astype(np.float64) for a in (values, values_old, returns))      # float64
    # the next four lines are the clipped value loss
    with np.errstate(over="ignore", invalid="ignore"):
        v_clipped = v_old + np.clip(v - v_old, -clip_eps, clip_eps)
        err_unclipped = (v - R) ** 2                                  # (V - R)^2
        err_clipped = (v_clipped - R) ** 2                            # (V_clip - R)^2
        err = np.where(valid, np.maximum(err_unclipped, err_clipped), 0.0)
    if not np.isfinite(err).all():
        raise value_overflow_error(err, values, returns, ("values", "values_old", "returns"))
    loss = 0.5 * masked_mean(err, mask)
    # max() picks the clipped error only where it is strictly larger, which needs v outside the
    # band (inside it v_clipped = v up to rounding); v_clipped is then constant: no gradient
    outside = np.abs(v - v_old) > clip_eps
    clipped = outside & (err_clipped > err_unclipped) & valid
    with np.errstate(over="ignore"):
        dvalues = np.where(clipped | ~valid, 0.0, (v - R) / float(max(n, 1))).astype(values.dtype)
    if not np.isfinite(dvalues).all():
        names = ("values", "values_old", "returns")
        raise gradient_overflow_error(dvalues, values, returns, names)
    stats = {"vf_clipfrac": masked_mean(clipped.astype(values.dtype), mask),
             "values_mean": masked_mean(values, mask), "returns_mean": masked_mean(returns, mask),
             "n_tokens": n}
    return loss, dvalues, stats
