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

The body of each function is the formula in NumPy: a loop over time, vectorised over the rows.
With the switch of :mod:`minippo.kernels` on (the default) its first line hands the call to the
same recursion compiled by numba in ``rl/_kernels.py`` (a few passes over memory, the NaN / inf
check of ``gae``'s inputs inside its loop; parity-tested).
"""
from __future__ import annotations

import numpy as np

from minippo import kernels
from minippo._lazy import LazyModule
from minippo.checks import check_float_array, check_mask, check_range, check_same_shape
from minippo.rl.masked import token_inputs

# the compiled twins; imported (with numba) at the first kernel call, so `import minippo` stays fast
_kernels = LazyModule("minippo.rl._kernels")


# ----------------------------------------------------------------------------------------------
# GAE for right-padded token batches
# ----------------------------------------------------------------------------------------------

def _gae_inputs(rewards, values, mask, gamma, lam, validate_values=True):
    """Checked (B, T) ``rewards``, ``values`` and ``mask`` in one float dtype
    (:func:`token_inputs`).

    With ``validate_values=False`` (the kernel path) finiteness and the mask's 0/1 values and holes
    are left to the kernel, which checks them while it computes.
    """
    check_range("gamma", gamma, 0, 1)
    check_range("lam", lam, 0, 1)
    (rewards, values), mask = token_inputs(mask, validate_values=validate_values, rewards=rewards,
                                           values=values)
    if rewards.ndim != 2:                                # values has the same shape (checked above)
        raise ValueError(f"`rewards` must be 2-D (B, T), got shape {rewards.shape}")
    return rewards, values, mask


def gae(rewards, values, mask, gamma=1.0, lam=0.95):
    """GAE-lambda advantages and returns of a right-padded batch of responses.

    A_t = sum_l (gamma lam)^l delta_{t+l}, GAE paper eq. (16); lam = 0 is the TD error delta_t
    (eq. (17)), lam = 1 the reward-to-go minus V (eq. (18)). In the PPO paper these are
    eqs. (11)-(12), and eq. (10) at lam = 1 (here with V = 0 after the last token: a response is a
    finished episode).

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

    The value after a row's last valid token is 0: a response is a finished episode. Arrays are
    returned in the inputs' common dtype; the recursion runs in float64 on both paths (the NumPy
    body and the kernel), so float32 inputs round once, at the end. An advantage or return beyond
    that dtype's range (finite inputs can overflow float32) is a ``ValueError``, not an inf.
    """
    if kernels.ON:                   # the same formula, compiled: rl/_kernels.py
        return _kernels.gae(rewards, values, mask, gamma, lam)
    rewards, values, mask = _gae_inputs(rewards, values, mask, gamma, lam)
    dtype = rewards.dtype
    # the recursion runs in float64
    rewards, values = rewards.astype(np.float64), values.astype(np.float64)
    B, T = rewards.shape
    adv = np.zeros_like(rewards)                                        # (B, T)
    last_adv = np.zeros(B, dtype=rewards.dtype)                         # A_{t+1}, (B,)
    with np.errstate(over="ignore", invalid="ignore"):    # an overflow is reported below
        for t in reversed(range(T)):
            # V(s_{t+1}): the next token's value where it is valid, else 0 (the episode ended)
            next_values = values[:, t + 1] * mask[:, t + 1] if t + 1 < T else 0.0   # (B,)
            # the next two lines are GAE-lambda; "* mask" zeroes padding so A_{T_b} starts at 0
            delta = rewards[:, t] + gamma * next_values - values[:, t]             # (B,) delta_t
            last_adv = (delta + gamma * lam * last_adv) * mask[:, t]               # (B,) A_t
            adv[:, t] = last_adv
        returns = (adv + values) * mask                                            # (B, T)
        out = adv.astype(dtype), returns.astype(dtype)              # in the inputs' dtype
    if not (np.isfinite(out[0]).all() and np.isfinite(out[1]).all()):
        _narrowed(dtype, adv=adv, returns=returns)                  # raises, naming the entry
    return out


def _narrowed(dtype, **arrays):
    """The float64 results of :func:`gae` in the inputs' ``dtype``; a ``ValueError`` where one is
    not finite.

    Finite float32 inputs can have an advantage beyond float32's range (3.4e38); finite float64
    inputs one beyond float64's. There is no finite answer in that dtype, so instead of an inf the
    error says where and what to do (float64 keeps float32's overflows finite)."""
    out = []
    for name, a in arrays.items():
        with np.errstate(over="ignore"):
            x = a.astype(dtype)
        if not np.isfinite(x).all():
            i = tuple(int(j) for j in np.argwhere(~np.isfinite(x))[0])
            why = (" (pass float64 arrays)" if np.isfinite(a[i])
                   else " (rewards or values too large)")
            raise ValueError(f"`rewards` and `values` are finite but the {name} at {i} is "
                             f"{a[i].item()!r} in float64, beyond the range of {np.dtype(dtype)}: "
                             f"no finite GAE in that dtype{why}")
        out.append(x)
    return tuple(out)


# ----------------------------------------------------------------------------------------------
# GAE for classic control: time-major (T, N), terminated vs truncated
# ----------------------------------------------------------------------------------------------

def _classic_inputs(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Checked (T, N) float arrays in one dtype and the two flags as bool arrays."""
    check_range("gamma", gamma, 0, 1)
    check_range("lam", lam, 0, 1)
    names = ("rewards", "values", "next_values")
    given = (rewards, values, next_values)
    arrays = [check_float_array(n, a, ndim=2) for n, a in zip(names, given)]
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
    """GAE for a (T, N) rollout of N vectorised environments, CleanRL style.

    GAE paper eq. (16) truncated at the rollout's end as in PPO paper eqs. (11)-(12), bootstrapped
    with V(s_T) (PPO eq. (10)'s last term) where an episode was truncated or the rollout stops.

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

        t  terminated truncated next_values    delta          A
        0  0          0         0.5 (= V(s_1)) 1.0            1.0 + 1*1*A_1 = 1.5
        1  1          0         (ignored)      1 - 0.5 = 0.5  0.5   (no bootstrap, chain cut)
        2  0          1         0.8            1.3            1.3   (bootstraps V=0.8, chain cut)
        3  0          0         0.5 (V(s_4))   1.0            1.0   (last row bootstraps)
    """
    if kernels.ON:                   # the same formula, compiled: rl/_kernels.py
        return _kernels.gae_classic(rewards, values, next_values, terminated, truncated, gamma, lam)
    (rewards, values, next_values), (terminated, truncated) = _classic_inputs(
        rewards, values, next_values, terminated, truncated, gamma, lam)
    T, N = rewards.shape
    not_terminated = 1.0 - terminated.astype(rewards.dtype)                # (T, N)
    not_done = 1.0 - (terminated | truncated).astype(rewards.dtype)        # (T, N)
    adv = np.zeros_like(rewards)
    last_adv = np.zeros(N, dtype=rewards.dtype)                            # A_{t+1}, (N,)
    for t in reversed(range(T)):
        # terminated: no bootstrap; terminated or truncated: the chain stops at this step
        delta = rewards[t] + gamma * not_terminated[t] * next_values[t] - values[t]   # (N,) delta_t
        last_adv = delta + gamma * lam * not_done[t] * last_adv                         # (N,) A_t
        adv[t] = last_adv
    return adv, adv + values
