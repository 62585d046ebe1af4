"""Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438).

Legend: B batch (responses), T tokens; for classic control T time steps and N environments.

The TD error and the advantage are

    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)                     GAE paper sec. 3 (TD residual)
    A_t     = sum_l (gamma * lam)^l * delta_{t+l}                   GAE paper eq. (16)
            = delta_t + gamma * lam * A_{t+1}                       (the recursion we run)

and PPO uses the version truncated at the end of the rollout, PPO paper eqs. (11)-(12).
``lam = 0`` gives the one-step TD error (low variance, biased by the critic), ``lam = 1`` the
Monte-Carlo return minus the value (unbiased, high variance), GAE paper eqs. (17)-(18). The
critic's regression target is ``returns = adv + values``.

Two entry points:

* :func:`gae` for language-model rollouts, (B, T) batch-major, right-padded: one response per
  row, ``mask`` 1 on its tokens. A response ends at its last valid token, so the value after
  it is 0 (the episode terminated); padded positions get advantage 0 and return 0.
* :func:`gae_classic` for vectorised environments, (T, N) time-major as in CleanRL, with
  separate ``terminated`` / ``truncated`` flags: truncation bootstraps, termination does not.

Each has a numba kernel (what the trainers call), a vectorised NumPy reference (what a student
reads: a loop over time, vectorised over rows) and, for :func:`gae`, a pure-Python double loop
(the benchmark's baseline and a test oracle; the tests also check the explicit sum of eq. (16)).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from minippo.checks import check_float_array, check_mask, check_range, check_same_shape
from minippo.rl._status import MASK_HOLE, MASK_VALUE, NONFINITE, OK, raise_for_status
from minippo.rl.masked import token_inputs


def _check_coefficients(gamma, lam) -> None:
    check_range("gamma", gamma, 0, 1)
    check_range("lam", lam, 0, 1)


def _check_2d(names, arrays) -> None:
    for n, a in zip(names, arrays):
        if a.ndim != 2:
            raise ValueError(f"`{n}` must be 2-D (B, T), got shape {a.shape}")


# ----------------------------------------------------------------------------------------------
# GAE for right-padded token batches
# ----------------------------------------------------------------------------------------------

def gae(rewards, values, mask, gamma=1.0, lam=0.95):
    """GAE-lambda advantages and returns of a right-padded batch of responses (numba kernel).

    Parameters
    ----------
    rewards : (B, T) float32 or float64, per-token rewards (e.g. -beta * kl_t, plus the score
        on the last valid token).
    values : (B, T) critic values V(s_t) of the same tokens.
    mask : (B, T) 0/1, valid tokens contiguous from position 0 (rows may be empty), or None.
    gamma : discount in [0, 1] (1 for RLHF). lam : GAE lambda in [0, 1].

    Returns
    -------
    adv : (B, T) A_t (PPO paper eqs. (11)-(12)), 0 on padding.
    returns : (B, T) adv + values on valid tokens, 0 on padding.

    The value after a row's last valid token is 0: a response is a finished episode.
    Arrays are returned in the inputs' common dtype; the recursion runs in float64.
    NumPy reference: :func:`gae_reference`; oracle: :func:`gae_loop`.
    """
    _check_coefficients(gamma, lam)
    (rewards, values), mask = token_inputs(mask, validate_values=False, rewards=rewards, values=values)
    _check_2d(("rewards", "values"), (rewards, values))
    adv = np.empty_like(rewards)
    returns = np.empty_like(rewards)
    status, which, b, t = _gae_kernel(rewards, values, mask, float(gamma), float(lam), adv, returns)
    raise_for_status(status, which, b, t, ["rewards", "values"], [rewards, values], mask, one_d=False)
    return adv, returns


@njit(cache=True)
def _gae_kernel(rewards, values, mask, gamma, lam, adv, returns):
    """GAE in three light passes; writes ``adv`` and ``returns``, returns ``(status, which, b, t)``.

    1. per row, forward: validation flags (NaN/inf, mask 0/1, holes) and the masked TD errors
       ``delta_t * mask_t`` written into ``adv`` (simple forward loops that LLVM vectorises);
    2. the recursion ``A_t = delta_t + gamma lam A_{t+1}`` backwards in time, four rows at a
       time: one row alone is bound by the latency of its multiply-add chain, four independent
       chains keep the CPU busy (float64 accumulators);
    3. ``returns = (adv + values) * mask``, forward.

    Padding has delta = 0, so the chain enters a row's last valid token with A = 0; V(s_{t+1})
    is ``values[t+1] * mask[t+1]``, 0 after the last valid token. The arithmetic is that of
    :func:`gae_reference` (same operations in the same order; the kernel keeps A in float64).
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
        for t in range(T - 1):
            next_value = values[b, t + 1] * mask[b, t + 1]
            adv[b, t] = (rewards[b, t] + gamma * next_value - values[b, t]) * mask[b, t]
        if T > 0:
            adv[b, T - 1] = (rewards[b, T - 1] - values[b, T - 1]) * mask[b, T - 1]
    # pass 2: A_t = delta_t + gamma lam A_{t+1}, rows b..b+3 interleaved, then the leftover rows
    for b in range(0, B - B % 4, 4):
        a0 = a1 = a2 = a3 = 0.0
        for t in range(T - 1, -1, -1):
            a0 = adv[b, t] + gl * a0
            a1 = adv[b + 1, t] + gl * a1
            a2 = adv[b + 2, t] + gl * a2
            a3 = adv[b + 3, t] + gl * a3
            adv[b, t] = a0
            adv[b + 1, t] = a1
            adv[b + 2, t] = a2
            adv[b + 3, t] = a3
    for b in range(B - B % 4, B):
        a0 = 0.0
        for t in range(T - 1, -1, -1):
            a0 = adv[b, t] + gl * a0
            adv[b, t] = a0
    # pass 3: returns = A + V on valid tokens, 0 on padding
    for b in range(B):
        for t in range(T):
            returns[b, t] = (adv[b, t] + values[b, t]) * mask[b, t]
    return OK, 0, 0, 0


@njit(cache=True)
def _locate_gae_error(rewards, values, mask, b):
    """The first bad entry of row ``b`` as ``(status, which, b, t)`` (the slow path of pass 1)."""
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


def gae_reference(rewards, values, mask, gamma=1.0, lam=0.95):
    """NumPy reference of :func:`gae`: a loop over time, vectorised over the B rows.

    Same arguments, returns and checks as :func:`gae`; computes in the inputs' dtype.
    """
    _check_coefficients(gamma, lam)
    (rewards, values), mask = token_inputs(mask, rewards=rewards, values=values)
    _check_2d(("rewards", "values"), (rewards, values))
    B, T = rewards.shape
    adv = np.zeros_like(rewards)
    last_adv = np.zeros(B, dtype=rewards.dtype)                         # A_{t+1}, (B,)
    for t in reversed(range(T)):
        # V(s_{t+1}): the next token's value where it is valid, else 0 (the episode ended)
        next_values = values[:, t + 1] * mask[:, t + 1] if t + 1 < T else 0.0   # (B,)
        # the next two lines are GAE-lambda; "* mask" zeroes padding so A_{T_b} starts at 0
        delta = rewards[:, t] + gamma * next_values - values[:, t]             # (B,)
        last_adv = (delta + gamma * lam * last_adv) * mask[:, t]               # (B,)
        adv[:, t] = last_adv
    returns = (adv + values) * mask                                            # (B, T)
    return adv, returns


def gae_loop(rewards, values, mask, gamma=1.0, lam=0.95):
    """Pure-Python double loop (rows, then time backwards) on Python floats: what one writes
    without NumPy. It is the benchmark's "pure Python" baseline and a test oracle (it shares no
    array code with the kernel or the reference). Same arguments, returns and checks as :func:`gae`.
    """
    _check_coefficients(gamma, lam)
    (rewards, values), mask = token_inputs(mask, rewards=rewards, values=values)
    _check_2d(("rewards", "values"), (rewards, values))
    B, T = rewards.shape
    adv = np.zeros_like(rewards)
    returns = np.zeros_like(rewards)
    for b in range(B):
        n = int(mask[b].sum())                            # valid tokens of row b
        r = rewards[b, :n].tolist()
        v = values[b, :n].tolist() + [0.0]                # V after the last valid token is 0
        last_adv = 0.0
        for t in range(n - 1, -1, -1):
            delta = r[t] + gamma * v[t + 1] - v[t]        # delta_t
            last_adv = delta + gamma * lam * last_adv     # A_t = delta_t + gamma lam A_{t+1}
            adv[b, t] = last_adv
            returns[b, t] = last_adv + v[t]
    return adv, returns


# ----------------------------------------------------------------------------------------------
# GAE for classic control: time-major (T, N), terminated vs truncated
# ----------------------------------------------------------------------------------------------

def _classic_inputs(rewards, values, next_values, terminated, truncated, gamma, lam):
    _check_coefficients(gamma, lam)
    names = ("rewards", "values", "next_values")
    arrays = [check_float_array(n, a, ndim=2) for n, a in zip(names, (rewards, values, next_values))]
    check_same_shape(**dict(zip(names, arrays)))
    dtype = np.result_type(*arrays)
    arrays = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
    flags = []
    for n, f in (("terminated", terminated), ("truncated", truncated)):
        f = np.asarray(f)
        check_same_shape(rewards=arrays[0], **{n: f})
        check_mask(n, f, layout="any")                  # 0/1 (or bool) values
        flags.append(np.ascontiguousarray(f, dtype=np.bool_))
    return arrays, flags


def gae_classic(rewards, values, next_values, terminated, truncated, gamma=0.99, lam=0.95):
    """GAE for a (T, N) rollout of N vectorised environments, CleanRL style (numba kernel).

    Parameters
    ----------
    rewards : (T, N) r_t, the reward of the transition taken at step t.
    values : (T, N) V(s_t) of the observation the action was taken in.
    next_values : (T, N) V(s_{t+1}) of the TRUE next observation of step t: for a truncated
        step, the final observation before the auto-reset (so truncation bootstraps); for a
        terminated step it is ignored (must still be finite); for the last row it is the
        bootstrap value of the observation after the rollout.
    terminated, truncated : (T, N) 0/1 or bool, the flags returned by the environment AT step t
        (Gymnasium's ``step`` result for the action taken in s_t). A step with both set counts
        as terminated.
    gamma, lam : in [0, 1].

    Returns
    -------
    adv, returns : (T, N), with

        delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
        A_t     = delta_t + gamma * lam * (1 - (terminated_t or truncated_t)) * A_{t+1},  A_T = 0
        returns = adv + values

    Done-index convention: step t's own flags decide (i) whether ``next_values[t]`` is used
    (not if terminated_t) and (ii) whether the recursion continues into step t+1 (not if
    either flag is set: s_{t+1} in the buffer is then the first observation of a new episode).
    CleanRL stores ``dones[t+1]`` on the next observation instead; the content is the same.

    Worked example, gamma = lam = 1, one environment, values all 0.5, rewards all 1::

        t   terminated truncated next_values   delta        A
        0   0          0         0.5 (= V(s_1)) 1.0          1.0 + 1*1*A_1 = 1.5
        1   1          0         (ignored)     1 - 0.5 = 0.5 0.5          (no bootstrap, chain cut)
        2   0          1         0.8           1.3          1.3          (bootstraps V=0.8, chain cut)
        3   0          0         0.5 (V(s_4))  1.0          1.0          (last row bootstraps)

    NumPy reference: :func:`gae_classic_reference`.
    """
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
    """Backward recursion per environment column; NaN/inf check fused. Reference: gae_classic_reference."""
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


def gae_classic_reference(rewards, values, next_values, terminated, truncated, gamma=0.99, lam=0.95):
    """NumPy reference of :func:`gae_classic`: a loop over time, vectorised over environments."""
    (rewards, values, next_values), (terminated, truncated) = _classic_inputs(
        rewards, values, next_values, terminated, truncated, gamma, lam)
    T, N = rewards.shape
    not_terminated = 1.0 - terminated.astype(rewards.dtype)                # (T, N)
    not_done = 1.0 - (terminated | truncated).astype(rewards.dtype)        # (T, N)
    adv = np.zeros_like(rewards)
    last_adv = np.zeros(N, dtype=rewards.dtype)                            # A_{t+1}, (N,)
    for t in reversed(range(T)):
        delta = rewards[t] + gamma * not_terminated[t] * next_values[t] - values[t]   # (N,)
        last_adv = delta + gamma * lam * not_done[t] * last_adv                         # (N,)
        adv[t] = last_adv
    return adv, adv + values
