"""Exercise ``clip``: the clipped surrogate loss L^CLIP and its gradient (PPO paper eq. (7)).

Legend: B batch (rows), T tokens; n valid tokens of the batch.

The student writes ``clipped_policy_loss(logp, logp_old, adv, mask, clip_eps) -> (loss, dlogp)``, the
formula of :func:`minippo.rl.losses.clipped_policy_loss` without its statistics. The checks: the six
clip cases (value and gradient, one token each), the closed band at exactly r = 1 +/- eps, the
token-level mean, padding, an empty batch, and random batches against the library's function.
"""
from __future__ import annotations

import math

import numpy as np

from minippo import kernels
from minippo.exercises.grading import Case, as_arrays, call, close, fmt, max_err
from minippo.rl.losses import clipped_policy_loss as library_clipped_policy_loss

NAME = "clip"
FUNCTION = "clipped_policy_loss"
SUMMARY = "the PPO-Clip loss -L^CLIP (PPO eq. (7)), token-level masked mean, and d loss / d logp"
LESSON = "lessons/l04_clip_objective.py"
REFERENCE = "minippo.rl.losses.clipped_policy_loss"

_HEADER = '''"""minippo exercise `clip`: the clipped surrogate of PPO (Schulman et al. 2017, arXiv:1707.06347, eq. (7)).

Write the body of `clipped_policy_loss` below, then run the project's checks on it:

    minippo exercise check clip          (add --dir D when this file is not in ./exercises)

They are the six clip cases (value and gradient), the closed band at exactly r = 1 +/- eps, the
token-level mean, padding, an empty batch, and random batches against the library's
minippo.rl.losses.clipped_policy_loss. NumPy is all you need.
"""
import numpy as np


'''

_SIGNATURE = '''def clipped_policy_loss(logp, logp_old, adv, mask, clip_eps):
    """The PPO-Clip loss and its gradient with respect to the new log-probabilities.

        L^CLIP = E_t[ min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t) ],    r_t = exp(logp_t - logp_old_t)

    PPO maximises L^CLIP; return the LOSS to minimise, loss = -L^CLIP, where E_t is the token-level
    masked mean: the sum over the valid tokens (mask == 1) of the whole batch, divided by their
    number n (and 0.0 when n = 0).

    Parameters
    ----------
    logp : (B, T) float64, log pi_theta(a_t|s_t) of the taken tokens under the policy being trained.
    logp_old : (B, T) float64, log pi_old(a_t|s_t) of the same tokens, stored at rollout time.
    adv : (B, T) float64, the advantages A_t.
    mask : (B, T) 0/1, 1 on valid tokens, 0 on padding (padded entries may hold any finite numbers).
    clip_eps : float, epsilon > 0 (e.g. 0.2).

    Returns
    -------
    loss : float, -(1/n) * sum over the valid tokens of min(r A, clip(r, 1 - eps, 1 + eps) A).
    dlogp : (B, T) float64, d loss / d logp (not d loss / d r: dr/dlogp = r). Exactly 0 on padding
        and where min() selects the clipped term (A > 0 and r > 1 + eps; A < 0 and r < 1 - eps).

    Conventions: the band is CLOSED: at r = 1 +/- eps exactly the two terms are equal, the token
    counts as inside and gets the unclipped gradient. Compute r as exp(logp - logp_old), never as
    a quotient of probabilities (they underflow).
    """
'''

_TODO = '''    raise NotImplementedError("clipped_policy_loss: write the body (the docstring has the formula)")
'''

_SOLUTION_BODY = '''    valid = mask == 1                                              # (B, T)
    n = max(int(valid.sum()), 1)                                   # valid tokens (1 if none: loss 0)
    # the next four lines are L^CLIP, eq. (7), as a loss
    ratio = np.exp(logp - logp_old)                                # r_t
    surr_unclipped = ratio * adv                                   # r_t A_t
    surr_clipped = np.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv
    loss = -np.sum(np.minimum(surr_unclipped, surr_clipped)[valid]) / n
    # min() selects the constant clipped term where clipping binds: zero gradient there
    clipped = ((adv > 0) & (ratio > 1 + clip_eps)) | ((adv < 0) & (ratio < 1 - clip_eps))
    # d(-r A)/dlogp = -A r (dr/dlogp = r), divided by the n valid tokens of the mean
    dlogp = np.where(valid & ~clipped, -adv * ratio / n, 0.0)      # (B, T)
    return float(loss), dlogp
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY
EPS = 0.2


def reference(logp, logp_old, adv, mask, clip_eps):
    """``(loss, dlogp)`` of the library's :func:`~minippo.rl.losses.clipped_policy_loss` (its NumPy formula)."""
    with kernels.use_kernels(False):
        loss, dlogp, _ = library_clipped_policy_loss(logp, logp_old, adv, mask, clip_eps)
    return loss, dlogp


def _student(fn, logp, logp_old, adv, mask, clip_eps):
    result = call(fn, logp, logp_old, adv, mask, clip_eps)
    return as_arrays(result, ("loss", "dlogp"), (None, logp.shape))


# ----------------------------------------------------------------------------------------------
# the six clip cases, one valid token each (n = 1)
# ----------------------------------------------------------------------------------------------

# (case, description, A, r, clipped?, hint for the value, hint for the gradient)
SIX_CASES = [
    (1, "A>0, r<1-eps", 2.0, 0.5, False,
     "A > 0 and r < 1 - eps: min(r A, (1 - eps) A) is r A (the unclipped term): loss -r A / n",
     "A > 0 and r < 1 - eps: the unclipped term r A is selected, so the gradient is -A r / n, not 0"),
    (2, "A>0, r in band", 2.0, 1.1, False,
     "A > 0 and r inside [1 - eps, 1 + eps]: both terms are r A: loss -r A / n",
     "r inside the band: the gradient is d(-r A)/dlogp / n = -A r / n"),
    (3, "A>0, r>1+eps", 2.0, 1.5, True,
     "A > 0 and r > 1 + eps: min picks the clipped term (1 + eps) A; did you take the min of the two terms?",
     "A > 0 and r > 1 + eps: this token's gradient must be exactly 0 (the selected term (1 + eps) A is a "
     "constant); did you take the min of the two terms?"),
    (4, "A<0, r<1-eps", -2.0, 0.5, True,
     "A < 0 and r < 1 - eps: min picks the clipped term (1 - eps) A (it is below r A); did you clip for A < 0 "
     "too?",
     "A < 0 and r < 1 - eps: this token's gradient must be exactly 0; did you take the min of the two terms?"),
    (5, "A<0, r in band", -2.0, 0.9, False,
     "A < 0 and r inside [1 - eps, 1 + eps]: both terms are r A: loss -r A / n",
     "r inside the band: the gradient is d(-r A)/dlogp / n = -A r / n"),
    (6, "A<0, r>1+eps", -2.0, 1.5, False,
     "A < 0 and r > 1 + eps: min picks r A (the unclipped term, below (1 + eps) A); did you clip r whatever "
     "the sign of A?",
     "A < 0 and r > 1 + eps: the unclipped term r A is selected: gradient -A r / n, not 0 (clipping zeroes "
     "the gradient only where min() picks the clipped term)"),
]


def one_token(adv: float, ratio: float):
    """(1, 1) arrays of one valid token with this advantage and ratio."""
    logp_old = np.array([[math.log(0.3)]])
    return logp_old + math.log(ratio), logp_old, np.array([[adv]]), np.ones((1, 1))


def gradient_diagnosis(got: float, expected: float, ratio: float, hint: str) -> str:
    """The hint, sharpened by what the student's number looks like."""
    if expected != 0 and got == 0:
        return hint + " (yours is 0: this token is not clipped)"
    if expected != 0 and close(got, expected / ratio):
        return (f"your gradient is -A / n: that is d loss / d r; d loss / d logp = -A r / n "
                f"(chain rule, dr/dlogp = r = {ratio:g})")
    if expected != 0 and close(got, -expected):
        return "the sign is flipped: the loss is -L^CLIP, so its gradient on an unclipped token is -A r / n"
    return hint


def case_checks() -> list[Case]:
    cases = []
    for code, what, A, r, clipped, value_hint, grad_hint in SIX_CASES:
        args = one_token(A, r)
        loss, dlogp = reference(*args, EPS)
        g = float(dlogp[0, 0])

        def run_value(fn, args=args, loss=loss, hint=value_hint):
            got, _ = _student(fn, *args, EPS)
            return f"loss {fmt(got)}", close(got, loss), hint

        def run_grad(fn, args=args, g=g, r=r, clipped=clipped, hint=grad_hint):
            _, d = _student(fn, *args, EPS)
            got = float(d[0, 0])
            ok = got == 0.0 if clipped else close(got, g)
            return f"dlogp {fmt(got)}", ok, hint if clipped else gradient_diagnosis(got, g, r, hint)

        label = f"case {code}: {what} (A={A:g}, r={r:g})"
        cases.append(Case(f"{label}: value", f"loss {fmt(loss)}", run_value))
        cases.append(Case(f"{label}: gradient", "dlogp exactly 0" if clipped else f"dlogp {fmt(g)}", run_grad))
    return cases


# ----------------------------------------------------------------------------------------------
# the closed band: r exactly 1 +/- eps
# ----------------------------------------------------------------------------------------------

def exact_edge(target: float) -> tuple[float, float]:
    """``(d, r)`` with exp(d) == r exactly in NumPy and math, r next to ``target``: the clip_eps that puts
    the band's edge on r is then r - 1 (or 1 - r), and 1 + eps (1 - eps) == r exactly."""
    d = math.log(target)
    for _ in range(200):
        r = math.exp(d)
        if np.exp(np.array([d]))[0] == r and np.exp(np.float64(d)) == r:
            return d, r
        d = math.nextafter(d, math.inf)
    raise AssertionError("no exactly representable point found")  # pragma: no cover


def band_checks() -> list[Case]:
    cases = []
    for side, target, A in (("1 + eps", 1.2, 2.0), ("1 - eps", 0.8, -2.0)):
        d, r = exact_edge(target)
        eps = r - 1 if A > 0 else 1 - r
        # logp_old = 0, so logp - logp_old is d exactly and exp gives r exactly
        args = (np.array([[d]]), np.zeros((1, 1)), np.array([[A]]), np.ones((1, 1)), eps)
        _, dlogp = reference(*args)
        g = float(dlogp[0, 0])
        hint = (f"at r = {side} exactly the band is CLOSED: both terms are equal, the token counts as inside and "
                f"gets the unclipped gradient -A r / n; compare with a strict inequality "
                f"({'r > 1 + eps' if A > 0 else 'r < 1 - eps'}) to decide that a token is clipped")

        def run(fn, args=args, g=g, hint=hint):
            _, dd = _student(fn, *args)
            got = float(dd[0, 0])
            return f"dlogp {fmt(got)}", close(got, g), hint

        cases.append(Case(f"closed band at r = {side} exactly (A={A:g}): gradient", f"dlogp {fmt(g)}", run))
    return cases


# ----------------------------------------------------------------------------------------------
# the token-level mean, padding, an empty batch, random batches
# ----------------------------------------------------------------------------------------------

def mean_batch():
    """(2, 4): rows of 4 and 2 valid tokens (n = 6), ratios inside the band, zeros in the padding."""
    rng = np.random.default_rng(7)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=np.float64)
    logp_old = rng.uniform(-3, -0.5, size=(2, 4)) * mask
    logp = (logp_old + rng.uniform(-0.1, 0.1, size=(2, 4))) * mask
    adv = rng.standard_normal((2, 4)) * mask
    return logp, logp_old, adv, mask


def mean_checks() -> list[Case]:
    args = mean_batch()
    loss, dlogp = reference(*args, EPS)
    n, size = int(args[3].sum()), args[3].size
    row_means = np.mean([-np.mean((np.exp(args[0] - args[1]) * args[2])[b, args[3][b] == 1]) for b in range(2)])

    def run_loss(fn):
        got, _ = _student(fn, *args, EPS)
        hint = "E_t is the mean over the n valid tokens of the whole batch: the sum divided by n = mask.sum()"
        if close(got, n * loss):
            hint = f"your loss is n = {n} times too large: a sum instead of a mean? divide by n = mask.sum()"
        elif close(got, loss * n / size):
            hint = f"you divided by B*T = {size}: divide by the number of valid tokens, n = mask.sum() = {n}"
        elif close(got, row_means):
            hint = "you averaged each row first: the mean is over all valid tokens of the batch at once (token-level)"
        return f"loss {fmt(got)}", close(got, loss), hint

    def run_grad(fn):
        _, d = _student(fn, *args, EPS)
        hint = f"each valid token's gradient carries the 1/n of the mean, n = {n} valid tokens"
        if close(d, n * dlogp):
            hint = f"your gradient is n = {n} times too large: the loss is a mean, so divide by n"
        return max_err(d, dlogp), close(d, dlogp), hint

    return [Case(f"token-level mean over n = {n} valid tokens: loss", f"loss {fmt(loss)}", run_loss),
            Case(f"token-level mean over n = {n} valid tokens: gradient", "dlogp as the library", run_grad)]


def padding_checks() -> list[Case]:
    rng = np.random.default_rng(11)
    logp, logp_old, adv, mask = mean_batch()
    pad = mask == 0
    garbage = [a.copy() for a in (logp, logp_old, adv)]
    for a in garbage[1:]:
        a[pad] = rng.uniform(-3, 3, size=int(pad.sum()))
    # ratios inside the band on the padding: an unmasked gradient there is -A r / n, not 0 by clipping
    garbage[0][pad] = garbage[1][pad] + rng.uniform(-0.1, 0.1, size=int(pad.sum()))
    loss, dlogp = reference(logp, logp_old, adv, mask, EPS)

    def run(fn):
        got, d = _student(fn, *garbage, mask, EPS)
        on_pad = float(np.max(np.abs(d[pad])))
        ok = close(got, loss) and on_pad == 0.0 and close(d[~pad], dlogp[~pad])
        clean_loss, clean_d = _student(fn, logp, logp_old, adv, mask, EPS)        # zeros in the padding
        if on_pad == 0.0 and not (close(clean_loss, loss) and close(clean_d[~pad], dlogp[~pad])):
            return f"loss {fmt(got)}, |dlogp| on padding 0", ok, ("wrong with zeros in the padding too: fix the "
                                                                   "failing cases above first")
        return f"loss {fmt(got)}, |dlogp| on padding {fmt(on_pad)}", ok, (
            "use the mask: padded tokens (mask == 0) must not enter the mean, and their gradient must be exactly 0")

    def run_empty(fn):
        z = np.zeros((2, 3))
        got, d = _student(fn, z, z, np.ones((2, 3)), z, EPS)
        ok = got == 0.0 and bool(np.all(d == 0))
        hint = ("with no valid token the loss is 0.0 and the gradient 0: divide by max(n, 1), not by n" if got != 0.0
                else "every token is padding here: the gradient must be exactly 0 on padding (use the mask)")
        return f"loss {fmt(got)}, dlogp {fmt(np.max(np.abs(d)))}", ok, hint

    return [Case("padding holds other numbers: loss and gradient unchanged",
                 f"loss {fmt(loss)}, |dlogp| on padding 0", run),
            Case("empty batch (no valid token)", "loss 0, dlogp 0", run_empty)]


def random_batch(seed: int, B: int, T: int):
    """A right-padded (B, T) batch (one row empty), ratios exp(N(0, 0.3^2)): most clip cases occur."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, size=B)
    lengths[0] = 0
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    logp_old = rng.uniform(-4, -0.1, size=(B, T))
    logp = logp_old + 0.3 * rng.standard_normal((B, T))
    return logp, logp_old, rng.standard_normal((B, T)), mask


def random_checks() -> list[Case]:
    cases = []
    for seed, (B, T), eps in ((0, (4, 7), 0.2), (1, (8, 16), 0.1), (2, (16, 32), 0.3)):
        args = random_batch(seed, B, T)
        loss, dlogp = reference(*args, eps)

        def run(fn, args=args, loss=loss, dlogp=dlogp, eps=eps):
            got, d = _student(fn, *args, eps)
            ok = close(got, loss) and close(d, dlogp)
            return f"loss {fmt(got)}, dlogp {max_err(d, dlogp)}", ok, (
                "differs from minippo.rl.losses.clipped_policy_loss on this random batch; fix the "
                "failing cases above first")

        cases.append(Case(f"random batch {B}x{T}, eps={eps:g} vs the library",
                          f"loss {fmt(loss)}, dlogp as the library", run))
    return cases


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    return case_checks() + band_checks() + mean_checks() + padding_checks() + random_checks()
