"""Exercise ``gae``: generalized advantage estimation on a right-padded batch of responses.

Legend: B batch (responses), T tokens.

The student writes ``gae(rewards, values, mask, gamma, lam) -> (advantages, returns)``, the contract of
:func:`minippo.rl.gae.gae`. The oracle is the library's own NumPy formula (:func:`library_gae`:
``minippo.rl.gae.gae`` with the kernels switched off, the code the student reads); lambda = 0 is checked
against the TD errors and lambda = 1 against the discounted reward-to-go, both computed here
independently (GAE paper eqs. (17)-(18)).
"""
from __future__ import annotations

import numpy as np

from minippo import kernels
from minippo.rl.gae import gae as _gae
from minippo.exercises.grading import Case, as_arrays, call, close, fmt, max_err

NAME = "gae"
FUNCTION = "gae"
SUMMARY = "GAE-lambda advantages and returns of a right-padded batch (GAE eq. (16))"
LESSON = "lessons/l07_gae.py"
REFERENCE = "minippo.rl.gae.gae"

_HEADER = '''"""minippo exercise `gae`: generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438).

Write the body of `gae` below, then run the project's checks on it:

    minippo exercise check gae          (add --dir D when this file is not in ./exercises)

They compare your advantages with minippo's own NumPy formula on random batches, with the TD errors
at lambda = 0 and the discounted reward-to-go at lambda = 1, and check padding, one-token and
empty rows.
"""
import numpy as np


'''

_SIGNATURE = '''def gae(rewards, values, mask, gamma, lam):
    """GAE-lambda advantages and returns of a right-padded batch of responses.

        delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)                        the TD error
        A_t     = sum_l (gamma * lam)^l * delta_{t+l}                     GAE paper eq. (16)
                = delta_t + gamma * lam * A_{t+1}                         (run it backwards in t)
        R_t     = A_t + V(s_t)                                            the critic's target

    A row is one response (one finished episode): its valid tokens are positions 0 .. n_b - 1
    (mask 1), then padding (mask 0). The value after a row's last valid token is 0 (the episode
    ended: there is no V(s_{n_b}) to bootstrap from, whatever number the padding holds), and the
    recursion starts there with A_{n_b} = 0.

    Parameters
    ----------
    rewards : (B, T) float64, per-token rewards r_t (padded entries may hold any finite numbers).
    values : (B, T) float64, critic values V(s_t) of the same tokens (same for the padding).
    mask : (B, T) 0/1, right-padded: valid tokens contiguous from position 0 (a row may be empty).
    gamma : float in [0, 1], the discount (1 for text).
    lam : float in [0, 1], the GAE lambda (0 gives the TD errors, 1 the reward-to-go minus V).

    Returns
    -------
    advantages : (B, T) float64, A_t on valid tokens, exactly 0 on padding.
    returns : (B, T) float64, advantages + values on valid tokens, exactly 0 on padding.
    """
'''

_TODO = '''    raise NotImplementedError("gae: write the body (the docstring has the formula)")
'''

_SOLUTION_BODY = '''    B, T = rewards.shape
    advantages = np.zeros((B, T))
    last_adv = np.zeros(B)                                         # A_{t+1}, (B,)
    for t in reversed(range(T)):
        # V(s_{t+1}): the next token's value where it is valid, else 0 (the episode ended)
        next_values = values[:, t + 1] * mask[:, t + 1] if t + 1 < T else np.zeros(B)
        # the next two lines are GAE-lambda; "* mask" zeroes padding, so each row starts at A = 0
        delta = rewards[:, t] + gamma * next_values - values[:, t]              # delta_t, (B,)
        last_adv = (delta + gamma * lam * last_adv) * mask[:, t]                # A_t, (B,)
        advantages[:, t] = last_adv
    returns = (advantages + values) * mask                                      # (B, T)
    return advantages, returns
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY


def _student(fn, rewards, values, mask, gamma, lam):
    return as_arrays(call(fn, rewards, values, mask, gamma, lam), ("advantages", "returns"),
                     (rewards.shape, rewards.shape))


def ragged_batch(seed: int, B: int, T: int, *, empty_row: bool = True, garbage: bool = True):
    """A right-padded (B, T) batch with random lengths (one row empty, one full); the padding holds
    random numbers (``garbage``) or zeros."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, size=B)
    lengths[-1] = T
    if empty_row:
        lengths[0] = 0
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    rewards, values = rng.standard_normal((B, T)), rng.standard_normal((B, T))
    if not garbage:
        rewards, values = rewards * mask, values * mask
    return rewards, values, mask


def td_errors(rewards, values, mask, gamma):
    """delta_t with V = 0 after each row's last valid token, 0 on padding (lambda = 0, GAE eq. (17))."""
    next_values = np.zeros_like(values)
    next_values[:, :-1] = values[:, 1:] * mask[:, 1:]
    return (rewards + gamma * next_values - values) * mask


def reward_to_go(rewards, values, mask, gamma):
    """sum_l gamma^l r_{t+l} - V(s_t) on valid tokens, 0 on padding (lambda = 1, GAE eq. (18))."""
    B, T = rewards.shape
    out = np.zeros_like(rewards)
    for b in range(B):
        n = int(mask[b].sum())
        for t in range(n):
            out[b, t] = sum(gamma ** l * rewards[b, t + l] for l in range(n - t)) - values[b, t]
    return out


def _diagnose(adv, ret, rewards, values, mask, expected_adv, gamma, lam) -> str:
    """What the student's advantages look like, when they are wrong."""
    pad = mask == 0
    if np.any(adv[pad] != 0) or np.any(ret[pad] != 0):
        return "padded positions must hold exactly 0, in the advantages and in the returns: multiply by the mask"
    if close(adv, _slip(rewards, values, mask, gamma, lam, mask_next=False)):
        return ("the value after a row's last valid token is 0: do not bootstrap from the padding "
                "(use values[:, t + 1] * mask[:, t + 1])")
    if gamma != 1 and close(adv, _slip(rewards, values, mask, gamma, lam, gamma_in_recursion=False)):
        return "the recursion is A_t = delta_t + gamma * lam * A_{t+1}: you left out gamma"
    return "run A_t = delta_t + gamma * lam * A_{t+1} backwards in t, starting from A = 0 after each row's end"


def _slip(rewards, values, mask, gamma, lam, *, mask_next=True, gamma_in_recursion=True):
    """GAE with one of two common slips (the padded value used as V(s_{t+1}); gamma left out of the
    recursion), recognised in the hints."""
    B, T = rewards.shape
    adv = np.zeros_like(rewards)
    nxt_adv = np.zeros(B)
    for t in reversed(range(T)):
        nxt_v = (values[:, t + 1] * (mask[:, t + 1] if mask_next else 1.0)) if t + 1 < T else np.zeros(B)
        delta = rewards[:, t] + gamma * nxt_v - values[:, t]
        nxt_adv = (delta + (gamma if gamma_in_recursion else 1.0) * lam * nxt_adv) * mask[:, t]
        adv[:, t] = nxt_adv
    return adv


def library_gae(rewards, values, mask, gamma, lam):
    """The oracle: :func:`minippo.rl.gae.gae`'s NumPy body (the kernels switched off for the call)."""
    with kernels.use_kernels(False):
        return _gae(rewards, values, mask, gamma, lam)


def loop_checks() -> list[Case]:
    cases = []
    for seed, (B, T), gamma, lam in ((0, (4, 6), 0.99, 0.95), (1, (8, 16), 1.0, 0.95), (2, (16, 32), 0.9, 0.8)):
        args = ragged_batch(seed, B, T)
        adv, ret = library_gae(*args, gamma, lam)

        def run(fn, args=args, adv=adv, ret=ret, gamma=gamma, lam=lam):
            a, r = _student(fn, *args, gamma, lam)
            ok = close(a, adv) and close(r, ret)
            return f"adv {max_err(a, adv)}, returns {max_err(r, ret)}", ok, _diagnose(
                a, r, *args, adv, gamma, lam)

        cases.append(Case(f"random batch {B}x{T}, gamma={gamma:g}, lam={lam:g} vs the library",
                          "adv, returns as minippo.rl.gae.gae", run))
    return cases


def special_checks() -> list[Case]:
    rewards, values, mask = ragged_batch(3, 6, 8)
    delta = td_errors(rewards, values, mask, 0.9)
    to_go = reward_to_go(rewards, values, mask, 0.9)

    def run_td(fn):
        a, r = _student(fn, rewards, values, mask, 0.9, 0.0)
        return max_err(a, delta), close(a, delta), (
            "with lam = 0, A_t = delta_t = r_t + gamma V(s_{t+1}) - V(s_t) (V = 0 after a row's last token)")

    def run_mc(fn):
        a, r = _student(fn, rewards, values, mask, 0.9, 1.0)
        return max_err(a, to_go), close(a, to_go), (
            "with lam = 1, A_t = sum_l gamma^l r_{t+l} - V(s_t), the discounted reward-to-go minus the value")

    def run_returns(fn):
        a, r = _student(fn, rewards, values, mask, 0.95, 0.9)
        valid = mask == 1
        ok = close(r[valid], (a + values)[valid])
        return f"returns - (adv + values) {max_err(r[valid], (a + values)[valid])}", ok, (
            "returns = advantages + values on the valid tokens (the critic's regression target)")

    # the value after the last valid token: row [r0, r1 | pad] with a large value in the padding
    end_r, end_v, end_m = np.array([[1.0, 2.0, 0.0]]), np.array([[0.5, 0.25, 9.0]]), np.array([[1.0, 1.0, 0.0]])
    end_adv, _ = library_gae(end_r, end_v, end_m, 1.0, 0.95)

    def run_end(fn):
        a, _ = _student(fn, end_r, end_v, end_m, 1.0, 0.95)
        return f"adv {fmt(a[0, :2])}", close(a, end_adv), (
            "the value after a row's last valid token is 0 (the response ended): here the padding holds V = 9, "
            "which must not be used; A_1 = r_1 - V(s_1)")

    one_r, one_v = np.array([[1.5, 7.0], [-0.5, 3.0]]), np.array([[0.5, 2.0], [0.25, 1.0]])
    one_m = np.array([[1.0, 0.0], [1.0, 0.0]])

    def run_one(fn):
        a, r = _student(fn, one_r, one_v, one_m, 0.99, 0.95)
        want = np.array([[1.0, 0.0], [-0.75, 0.0]])
        ok = close(a, want) and close(r, np.array([[1.5, 0.0], [-0.5, 0.0]]))
        return f"adv {fmt(a)}", ok, "a one-token row has A_0 = r_0 - V(s_0) (nothing after it) and R_0 = r_0"

    def run_empty(fn):
        r_, v_ = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.5, 0.5], [0.5, 0.5]])
        m_ = np.array([[0.0, 0.0], [1.0, 1.0]])
        a, r = _student(fn, r_, v_, m_, 1.0, 0.95)
        ok = bool(np.all(a[0] == 0) and np.all(r[0] == 0)) and close(a[1], library_gae(r_, v_, m_, 1.0, 0.95)[0][1])
        return f"empty row adv {fmt(a[0])}, returns {fmt(r[0])}", ok, (
            "an empty row (mask all 0) has advantages and returns exactly 0")

    pad_r, pad_v, pad_m = ragged_batch(4, 5, 6, garbage=False)
    pad_adv, pad_ret = library_gae(pad_r, pad_v, pad_m, 1.0, 0.95)
    rng = np.random.default_rng(9)
    pad = pad_m == 0
    g_r, g_v = pad_r.copy(), pad_v.copy()
    g_r[pad], g_v[pad] = rng.uniform(-5, 5, int(pad.sum())), rng.uniform(-5, 5, int(pad.sum()))

    def run_padding(fn):
        a, r = _student(fn, g_r, g_v, pad_m, 1.0, 0.95)
        ok = close(a, pad_adv) and close(r, pad_ret) and bool(np.all(a[pad] == 0) and np.all(r[pad] == 0))
        return f"adv {max_err(a, pad_adv)}, returns {max_err(r, pad_ret)}", ok, (
            "padding may hold any numbers: mask the next value (V = 0 after the last valid token) and zero the "
            "padded advantages and returns")

    return [Case("lam = 0: the TD errors (GAE eq. (17))", "adv = delta_t", run_td),
            Case("lam = 1: discounted reward-to-go minus V (GAE eq. (18))", "adv = sum gamma^l r - V", run_mc),
            Case("returns = advantages + values", "max|err| 0", run_returns),
            Case("value after a row's last valid token is 0", f"adv {fmt(end_adv[0, :2])}", run_end),
            Case("one-token rows: A = r - V", "adv [1, 0, -0.75, 0]", run_one),
            Case("empty row: all 0", "adv [0, 0], returns [0, 0]", run_empty),
            Case("padding holds other numbers: nothing changes", "adv, returns as with zeros", run_padding)]


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    return special_checks() + loop_checks()
