"""The numba kernels of minippo.rl: formulas of ``gae.py`` and ``losses.py``, compiled.

Legend: B batch (rows), T tokens; for classic control T time steps and N environments.

Nothing here is new math. Each public function of ``gae.py`` / ``losses.py`` listed below has the
NumPy formula as its body, and its first line calls the function of the same name here when the
switch of :mod:`minippo.kernels` is on (the default)::

    minippo.rl.gae.gae                      -> gae                  (_gae_kernel)
    minippo.rl.gae.gae_classic              -> gae_classic          (_gae_classic_kernel)
    minippo.rl.losses.clipped_policy_loss   -> clipped_policy_loss  (_clipped_policy_kernel)
                                               (token-mean, token ratio, either band)

Each function here takes the same arguments and returns the same outputs as its public twin (same
dtypes, same stats keys, the same ``ValueError`` naming the argument): it runs the cheap checks in
Python, hands the arrays to a kernel that computes the result (and checks the values for NaN / inf
in the same loops, where Python has not already), and turns the kernel's status code into the error
the NumPy body would have raised. The parity tests
(``tests/rl/test_kernels.py``, ``pytest -m kernels``) compare the two paths on the same inputs.

Why kernels: the NumPy formulas make one pass over memory (and one temporary) per line. At
(B, T) = (512, 256) float32, ``minippo bench --only gae clip`` times each kernel against its NumPy
reference on your machine and prints the ratio beside its target (the GAE kernel at least 8x faster
than the NumPy loop over T, the clipped-surrogate kernel at least 3x faster than its expression).

Numba rules (CONTRIBUTING.md): ``@njit(cache=True)``; no ``fastmath`` (it lets LLVM assume that no NaN
occurs and drop the ``isfinite`` checks); fixed dtypes (float32/float64 arrays in, running sums in
float64); serial loops. ``NUMBA_DISABLE_JIT=1`` runs every kernel as plain Python, so a student can
step through it in pdb, and the tests pass that way too.

Status codes: a kernel cannot raise a ``ValueError`` with a good message, so on the first bad entry
it returns ``(status, which, b, t)``: the code, the index of the offending array in the caller's
list of names, and the position; :func:`raise_for_status` raises the same ``ValueError`` as the
checks of ``minippo.checks`` do (for float inputs word for word; an integer mask reaches a kernel as
floats, so its bad value prints as 2.0). The codes live here because nothing but these kernels uses them.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from minippo.rl.gae import _classic_inputs, _gae_inputs, _narrowed
from minippo.rl.losses import clip_band, ratio_overflow_error
from minippo.rl.masked import token_inputs

OK = 0
NONFINITE = 1     # an input array holds NaN or +/-inf          (argument index = which array)
MASK_VALUE = 2    # the mask holds something other than 0 or 1
MASK_HOLE = 3     # a valid token follows a padding token in a row (mask not right-padded)
OVERFLOW = 4      # finite inputs, but r A (or the sum over tokens) is not finite: no finite loss exists


def raise_for_status(status: int, which: int, b: int, t: int, names: list[str],
                     arrays: list[np.ndarray], mask: np.ndarray, one_d: bool,
                     mask_name: str = "mask") -> None:
    """Raise the ``ValueError`` described by a kernel's ``(status, which, b, t)``; no-op on OK.

    ``one_d``: the caller's arrays were 1-D and reshaped to (1, N) for the kernel, so the
    position is reported as ``t`` alone.
    """
    if status == OK:
        return
    pos = t if one_d else (b, t)
    # .item(): the value as minippo.checks prints it (nan, not np.float64(nan))
    if status == NONFINITE:
        raise ValueError(f"`{names[which]}` must be finite, found {arrays[which][b, t].item()!r} at {pos}")
    if status == MASK_VALUE:
        raise ValueError(f"`{mask_name}` must contain only 0 and 1, found {mask[b, t].item()!r} at {pos}")
    if status == MASK_HOLE:
        row = (np.asarray(mask[b]) != 0).astype(int).tolist()
        raise ValueError(f"`{mask_name}` row {b} has a hole: valid tokens must be contiguous and start at "
                         f"position 0 (right padding); row is {row}")
    raise RuntimeError(f"unknown kernel status {status}")  # pragma: no cover - a bug in a kernel


# ----------------------------------------------------------------------------------------------
# GAE for right-padded token batches                            formula: minippo.rl.gae.gae
# ----------------------------------------------------------------------------------------------

def gae(rewards, values, mask, gamma, lam):
    """:func:`minippo.rl.gae.gae` by :func:`_gae_kernel` (same arguments, returns and errors)."""
    rewards, values, mask = _gae_inputs(rewards, values, mask, gamma, lam, validate_values=False)
    work = np.empty(rewards.shape, dtype=np.float64)            # the recursion runs in float64, as in the formula
    adv = np.empty(rewards.shape, dtype=rewards.dtype)          # the results, in the inputs' dtype
    returns = np.empty(rewards.shape, dtype=rewards.dtype)
    with np.errstate(over="ignore"):     # without the JIT, NumPy would warn on a cast beyond float32: reported below
        status, which, b, t = _gae_kernel(rewards, values, mask, float(gamma), float(lam), work, adv, returns)
    if status == OVERFLOW:           # rare: the float64 results again, for the formula's error message
        adv64, returns64 = np.empty(rewards.shape), np.empty(rewards.shape)
        _gae_kernel(rewards, values, mask, float(gamma), float(lam), work, adv64, returns64)
        _narrowed(rewards.dtype, adv=adv64, returns=returns64)                 # raises, naming the entry
    raise_for_status(status, which, b, t, ["rewards", "values"], [rewards, values], mask, one_d=False)
    return adv, returns


@njit(cache=True)
def _gae_kernel(rewards, values, mask, gamma, lam, work, adv, returns):
    """The recursion of :func:`minippo.rl.gae.gae` in three light passes over a float64 ``work`` array;
    writes ``adv`` and ``returns`` (of any float dtype), returns ``(status, which, b, t)``.

    1. per row, forward: validation flags (NaN/inf, mask 0/1, holes) and the masked TD errors
       ``delta_t * mask_t`` written into ``work`` (simple forward loops that LLVM vectorises);
    2. the recursion ``A_t = delta_t + gamma lam A_{t+1}`` backwards in time in ``work``, four rows at a
       time: one row alone is bound by the latency of its multiply-add chain, four independent
       chains keep the CPU busy;
    3. ``adv = work`` and ``returns = (work + values) * mask``, forward, rounded once to their dtype on
       the store; whether a stored value is not finite (finite inputs beyond that dtype's range) is
       collected branch-free and returned as ``OVERFLOW``.

    Padding has delta = 0, so the chain enters a row's last valid token with A = 0; V(s_{t+1})
    is ``values[t+1] * mask[t+1]``, 0 after the last valid token. The arithmetic is that of the
    NumPy body (same operations in the same order, in float64).
    """
    B, T = rewards.shape
    gl = gamma * lam
    # pass 1: validation flags, then delta_t = r_t + gamma V(s_{t+1}) - V(s_t) on valid tokens
    for b in range(B):
        bad = False
        for t in range(T):
            bad |= not math.isfinite(rewards[b, t])
            bad |= not math.isfinite(values[b, t])
            bad |= (mask[b, t] != 0.0) & (mask[b, t] != 1.0)
        for t in range(1, T):
            bad |= mask[b, t] > mask[b, t - 1]            # a valid token after padding: a hole
        if bad:
            return _locate_gae_error(rewards, values, mask, b)
        for t in range(T - 1):       # in float64 whatever the inputs (np.float64: also without the JIT)
            next_value = np.float64(values[b, t + 1]) * mask[b, t + 1]
            work[b, t] = (np.float64(rewards[b, t]) + gamma * next_value - values[b, t]) * mask[b, t]
        if T > 0:
            work[b, T - 1] = (np.float64(rewards[b, T - 1]) - values[b, T - 1]) * mask[b, T - 1]
    # pass 2: A_t = delta_t + gamma lam A_{t+1}, rows b..b+3 interleaved, then the leftover rows
    for b in range(0, B - B % 4, 4):
        a0 = a1 = a2 = a3 = 0.0
        for t in range(T - 1, -1, -1):
            a0 = work[b, t] + gl * a0
            a1 = work[b + 1, t] + gl * a1
            a2 = work[b + 2, t] + gl * a2
            a3 = work[b + 3, t] + gl * a3
            work[b, t] = a0
            work[b + 1, t] = a1
            work[b + 2, t] = a2
            work[b + 3, t] = a3
    for b in range(B - B % 4, B):
        a0 = 0.0
        for t in range(T - 1, -1, -1):
            a0 = work[b, t] + gl * a0
            work[b, t] = a0
    # pass 3: the results in their dtype: A, and A + V on valid tokens (0 on padding)
    finite = True
    for b in range(B):
        for t in range(T):
            adv[b, t] = work[b, t]
            returns[b, t] = (work[b, t] + values[b, t]) * mask[b, t]
            finite &= math.isfinite(adv[b, t]) & math.isfinite(returns[b, t])
    return (OK if finite else OVERFLOW), 0, 0, 0


@njit(cache=True)
def _locate_gae_error(rewards, values, mask, b):
    """The first bad entry of row ``b`` as ``(status, which, b, t)`` (the slow path of pass 1 of
    :func:`_gae_kernel`, for :func:`minippo.rl.gae.gae`)."""
    T = rewards.shape[1]
    for t in range(T):
        if not math.isfinite(rewards[b, t]):
            return NONFINITE, 0, b, t
        if not math.isfinite(values[b, t]):
            return NONFINITE, 1, b, t
        if mask[b, t] != 0.0 and mask[b, t] != 1.0:
            return MASK_VALUE, 0, b, t
        if t > 0 and mask[b, t] > mask[b, t - 1]:
            return MASK_HOLE, 0, b, t
    return OK, 0, b, 0  # pragma: no cover - only called on a row with a bad entry


# ----------------------------------------------------------------------------------------------
# GAE for classic control: time-major (T, N)                    formula: minippo.rl.gae.gae_classic
# ----------------------------------------------------------------------------------------------

def gae_classic(rewards, values, next_values, terminated, truncated, gamma, lam):
    """:func:`minippo.rl.gae.gae_classic` by :func:`_gae_classic_kernel` (same arguments, returns, errors)."""
    (rewards, values, next_values), (terminated, truncated) = _classic_inputs(
        rewards, values, next_values, terminated, truncated, gamma, lam)
    adv = np.empty_like(rewards)
    status, which, t, n = _gae_classic_kernel(rewards, values, next_values, terminated, truncated,
                                              float(gamma), float(lam), adv)
    raise_for_status(status, which, t, n, ["rewards", "values", "next_values"],
                     [rewards, values, next_values], terminated, one_d=False)
    return adv, adv + values


@njit(cache=True)
def _gae_classic_kernel(rewards, values, next_values, terminated, truncated, gamma, lam, adv):
    """The recursion of :func:`minippo.rl.gae.gae_classic`, backwards in time per environment
    column, the NaN/inf check fused; returns ``(status, which, t, n)``."""
    T, N = rewards.shape
    for n in range(N):
        last_adv = 0.0
        for t in range(T - 1, -1, -1):
            r = rewards[t, n]
            v = values[t, n]
            nv = next_values[t, n]
            if not math.isfinite(r):
                return NONFINITE, 0, t, n
            if not math.isfinite(v):
                return NONFINITE, 1, t, n
            if not math.isfinite(nv):
                return NONFINITE, 2, t, n
            # terminated: no bootstrap; terminated or truncated: the chain stops at this step
            not_terminated = 0.0 if terminated[t, n] else 1.0
            not_done = 0.0 if (terminated[t, n] or truncated[t, n]) else 1.0
            delta = r + gamma * not_terminated * nv - v
            last_adv = delta + gamma * lam * not_done * last_adv
            adv[t, n] = last_adv
    return OK, 0, 0, 0


# ----------------------------------------------------------------------------------------------
# the clipped surrogate L^CLIP, eq. (7)               formula: minippo.rl.losses.clipped_policy_loss
# ----------------------------------------------------------------------------------------------

def clipped_policy_loss(logp, logp_old, adv, mask, clip_eps, clip_eps_high=None):
    """:func:`minippo.rl.losses.clipped_policy_loss` by :func:`_clipped_policy_kernel` (same arguments,
    returns and errors; token-mean and the token ratio, either band): the loss, dlogp and every
    statistic from one pass over the tokens."""
    (logp, logp_old, adv), mask = token_inputs(mask, validate_values=False,
                                               logp=logp, logp_old=logp_old, adv=adv)
    lo, hi = clip_band(clip_eps, clip_eps_high, logp.dtype)                # the band, in the data's dtype
    shape, one_d = logp.shape, logp.ndim == 1
    as2 = [a.reshape(1, -1) if one_d else a for a in (logp, logp_old, adv, mask)]
    dlogp = np.empty(as2[0].shape, dtype=logp.dtype)
    out = _clipped_policy_kernel(*as2, lo, hi, not one_d, dlogp)
    status, which, b, t, n, n_clipped, obj_sum, kl_sum, ratio_sum, ratio_max, ratio_min = out
    if status == OVERFLOW:
        if b < 0:
            raise ValueError("the sum of L^CLIP over the tokens overflows float64; check `logp` and `logp_old`")
        raise ratio_overflow_error((as2[0][b, t] - as2[1][b, t]).item(), as2[2][b, t].item(), t if one_d else (b, t),
                                   dtype=logp.dtype)
    raise_for_status(status, which, b, t, ["logp", "logp_old", "adv"], as2[:3], as2[3], one_d)
    stats = {"clipfrac": n_clipped / n if n else 0.0, "approx_kl": kl_sum / n if n else 0.0,
             "ratio_mean": ratio_sum / n if n else 1.0, "ratio_max": ratio_max if n else 1.0,
             "ratio_min": ratio_min if n else 1.0, "n_tokens": int(n)}
    return (-obj_sum / n if n else 0.0), dlogp.reshape(shape), stats


@njit(cache=True)
def _clipped_policy_kernel(logp, logp_old, adv, mask, lo, hi, check_holes, dlogp):
    """L^CLIP of :func:`minippo.rl.losses.clipped_policy_loss`, per row: a validation sweep, then one
    pass for ratio, objective, gradient and sums.

    The per-token work is branch-free (selects, not if/else: the six clip cases come in random
    order, so branches would be mispredicted); sums are float64. The objective is
    ``A min(r, hi)`` (A >= 0) or ``A max(r, lo)`` (A < 0), finite where the clip binds even when r
    overflows. Whether some token's ``r A`` is not finite is collected branch-free; only then a slow
    pass (:func:`_first_overflow`) finds the first such token (an input error found in a later row
    still wins, as in the formula, which validates the inputs first). A last light pass scales
    ``dlogp`` by 1/n once n is known. Returns
    ``(status, which, b, t, n, n_clipped, obj_sum, kl_sum, ratio_sum, ratio_max, ratio_min)``.
    """
    B, T = logp.shape
    n = 0
    n_clipped = 0
    obj_sum = 0.0
    kl_sum = 0.0
    ratio_sum = 0.0
    ratio_max = -np.inf
    ratio_min = np.inf
    overflow = False                         # some token's r A has no finite value
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
                continue
            if check_holes and not row_open:
                return MASK_HOLE, 0, b, t, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0
            a = adv[b, t]
            log_ratio = logp[b, t] - logp_old[b, t]
            ratio, clipped, obj, grad = _clip_token(a, log_ratio, lo, hi)
            overflow |= not (math.isfinite(obj) & math.isfinite(grad))
            dlogp[b, t] = grad
            n += 1
            n_clipped += clipped
            obj_sum += obj
            kl_sum += (ratio - 1.0) - log_ratio             # k3 = (r - 1) - log r
            ratio_sum += ratio
            ratio_max = max(ratio_max, ratio)
            ratio_min = min(ratio_min, ratio)
    if overflow:
        over_b, over_t = _first_overflow(logp, logp_old, adv, mask, lo, hi)
        return OVERFLOW, 0, over_b, over_t, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0
    if not math.isfinite(obj_sum):
        return OVERFLOW, 0, -1, -1, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0
    if n > 0:
        inv_n = 1.0 / n
        for b in range(B):
            for t in range(T):
                dlogp[b, t] *= inv_n
    return OK, 0, 0, 0, n, n_clipped, obj_sum, kl_sum, ratio_sum, ratio_max, ratio_min


@njit(cache=True)
def _clip_token(a, log_ratio, lo, hi):
    """One token of L^CLIP: ``(ratio, clipped, obj, grad)`` for advantage ``a`` and log-ratio
    ``log_ratio`` (the per-token arithmetic :func:`_clipped_policy_kernel` and :func:`_first_overflow` share)."""
    # r_t = exp(logp - logp_old)  (+inf where the log-ratio exceeds the dtype's range)
    ratio = np.exp(log_ratio)
    # min(r A, clip(r, lo, hi) A) = A min(r, hi) for A >= 0, A max(r, lo) for A < 0
    clipped = ((a > 0) & (ratio > hi)) | ((a < 0) & (ratio < lo))
    # the objective's terms in float64 (selects, not branches)
    obj = np.float64(a) * (min(ratio, hi) if a >= 0 else max(ratio, lo))
    grad = 0.0 if (clipped | (a == 0)) else -a * ratio         # d(-r A)/dlogp = -A r; /n by the caller
    return ratio, clipped, obj, grad


@njit(cache=True)
def _first_overflow(logp, logp_old, adv, mask, lo, hi):
    """``(b, t)`` of the first valid token whose objective ``r A`` or gradient ``-A r`` has no finite value
    (the slow path of :func:`_clipped_policy_kernel`, token by token through :func:`_clip_token`)."""
    B, T = logp.shape
    for b in range(B):
        for t in range(T):
            if mask[b, t] == 0:
                continue
            obj, grad = _clip_token(adv[b, t], logp[b, t] - logp_old[b, t], lo, hi)[2:]
            if not (math.isfinite(obj) and math.isfinite(grad)):
                return b, t
    return -1, -1  # pragma: no cover - only called when the kernel saw such a token


@njit(cache=True)
def _locate_clip_error(logp, logp_old, adv, mask, b):
    """The first bad entry of row ``b`` as ``(status, which, t)`` (the slow path of the validation
    sweep of :func:`_clipped_policy_kernel`)."""
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
