"""Exercise ``value_clip``: the clipped value loss and its gradient (the L^VF of PPO eq. (9), clipped).

Legend: B batch (rows), T tokens; n valid tokens of the batch.

The student writes ``clipped_value_loss(values, values_old, returns, mask, clip_eps) -> (loss, dvalues)``,
the formula of :func:`minippo.rl.losses.clipped_value_loss` without its statistics. The checks: four
one-token cases (inside the band; outside with the clipped error larger, above and below; outside
with the unclipped error larger), the token-level mean, padding, random batches against the library.
"""
from __future__ import annotations

import numpy as np

from minippo.exercises.grading import Case, as_arrays, call, close, fmt, max_err
from minippo.rl.losses import clipped_value_loss as library_clipped_value_loss

NAME = "value_clip"
FUNCTION = "clipped_value_loss"
SUMMARY = "the clipped value loss 0.5 max((V - R)^2, (V_clip - R)^2) and d loss / d V"
LESSON = "lessons/l06_actor_critic_loss.py"
REFERENCE = "minippo.rl.losses.clipped_value_loss"

_HEADER = '''"""minippo exercise `value_clip`: the clipped value loss of PPO implementations (L^VF of PPO eq. (9)).

PPO paper (Schulman et al. 2017, arXiv:1707.06347) eq. (9) trains the critic on the squared error
L^VF = (V(s_t) - V_t^targ)^2. Implementations (OpenAI baselines, CleanRL's clip_vloss, TRL) also clip
the new values around the ones stored at rollout time and take the larger of the two errors.

Write the body of `clipped_value_loss` below, then run the project's checks on it:

    minippo exercise check value_clip          (add --dir D when this file is not in ./exercises)
"""
import numpy as np


'''

_SIGNATURE = '''def clipped_value_loss(values, values_old, returns, mask, clip_eps):
    """The clipped value loss and its gradient with respect to the new values.

        v_clipped = values_old + clip(values - values_old, -eps, eps)
        loss      = 0.5 * E_t[ max((values - returns)^2, (v_clipped - returns)^2) ]

    E_t is the token-level masked mean: the sum over the valid tokens (mask == 1) of the whole
    batch divided by their number n (0.0 when n = 0). The 0.5 makes the gradient of the unclipped
    error exactly (values - returns) / n.

    Parameters
    ----------
    values : (B, T) float64, V(s_t) from the critic being trained.
    values_old : (B, T) float64, the values stored at rollout time.
    returns : (B, T) float64, the regression targets R_t (= advantages + values_old).
    mask : (B, T) 0/1, 1 on valid tokens, 0 on padding (padded entries may hold any finite numbers).
    clip_eps : float > 0, in the units of the values (e.g. 0.2).

    Returns
    -------
    loss : float.
    dvalues : (B, T) float64, d loss / d values: (values - returns) / n where the unclipped error is
        selected (it is the larger one, or the two are equal), exactly 0 where the clipped error is
        strictly larger (v_clipped is then a constant: |values - values_old| > eps), 0 on padding.
    """
'''

_TODO = '''    raise NotImplementedError("clipped_value_loss: write the body (the docstring has the formula)")
'''

_SOLUTION_BODY = '''    valid = mask == 1                                              # (B, T)
    n = max(int(valid.sum()), 1)                                   # valid tokens (1 if none: loss 0)
    # the next four lines are the clipped value loss
    v_clipped = values_old + np.clip(values - values_old, -clip_eps, clip_eps)
    err_unclipped = (values - returns) ** 2                        # (V - R)^2
    err_clipped = (v_clipped - returns) ** 2                       # (V_clip - R)^2
    loss = 0.5 * np.sum(np.maximum(err_unclipped, err_clipped)[valid]) / n
    # max() picks the clipped error only where it is strictly larger, which needs v outside the band;
    # v_clipped is constant there: no gradient
    clipped = (np.abs(values - values_old) > clip_eps) & (err_clipped > err_unclipped)
    dvalues = np.where(valid & ~clipped, (values - returns) / n, 0.0)   # d(0.5 e^2)/dv = e, / n
    return float(loss), dvalues
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY
EPS = 0.2


def reference(values, values_old, returns, mask, clip_eps):
    """``(loss, dvalues)`` of the library's :func:`~minippo.rl.losses.clipped_value_loss`."""
    loss, dvalues, _ = library_clipped_value_loss(values, values_old, returns, mask, clip_eps)
    return loss, dvalues


def _student(fn, values, values_old, returns, mask, clip_eps):
    return as_arrays(call(fn, values, values_old, returns, mask, clip_eps), ("loss", "dvalues"),
                     (None, values.shape))


# (description, V, V_old, R, gradient exactly 0?, hint for the value, hint for the gradient)
FOUR_CASES = [
    ("inside the band", 1.1, 1.0, 2.0, False,
     "inside the band v_clipped = v, both errors are (V - R)^2: loss 0.5 (V - R)^2 / n",
     "inside the band the gradient is d(0.5 (V - R)^2)/dV / n = (V - R) / n"),
    ("above the band, clipped error larger", 1.5, 1.0, 2.0, True,
     "V moved past V_old + eps towards R: v_clipped = V_old + eps is farther from R, and max() picks its error",
     "the clipped error is selected and v_clipped = V_old + eps does not depend on V: the gradient must be "
     "exactly 0; did you take the max of the two errors?"),
    ("below the band, clipped error larger", 0.5, 1.0, 0.0, True,
     "V moved past V_old - eps towards R: v_clipped = V_old - eps is farther from R, and max() picks its error",
     "the clipped error is selected and v_clipped = V_old - eps does not depend on V: the gradient must be "
     "exactly 0"),
    ("above the band, unclipped error larger", 1.5, 1.0, 0.8, False,
     "V moved away from R: the unclipped error (V - R)^2 is the larger one and max() picks it",
     "the unclipped error is selected: the gradient is (V - R) / n, not 0 (clipping removes the gradient only "
     "where max() picks the clipped error)"),
]


def _value_hint(got: float, expected: float, hint: str) -> str:
    if expected != 0 and close(got, 2 * expected):
        return "your loss is twice the expected one: the loss has the factor 0.5"
    return hint


def case_checks() -> list[Case]:
    cases = []
    for what, v, v_old, R, zero, value_hint, grad_hint in FOUR_CASES:
        args = (np.array([[v]]), np.array([[v_old]]), np.array([[R]]), np.ones((1, 1)), EPS)
        loss, dvalues = reference(*args)
        g = float(dvalues[0, 0])

        def run_value(fn, args=args, loss=loss, hint=value_hint):
            got, _ = _student(fn, *args)
            return f"loss {fmt(got)}", close(got, loss), _value_hint(got, loss, hint)

        def run_grad(fn, args=args, g=g, zero=zero, hint=grad_hint):
            _, d = _student(fn, *args)
            got = float(d[0, 0])
            ok = got == 0.0 if zero else close(got, g)
            if not zero and close(got, 2 * g):
                hint = "your gradient is 2 (V - R) / n: the 0.5 of the loss cancels the 2 of the square"
            return f"dvalues {fmt(got)}", ok, hint

        label = f"{what} (V={v:g}, V_old={v_old:g}, R={R:g})"
        cases.append(Case(f"{label}: value", f"loss {fmt(loss)}", run_value))
        cases.append(Case(f"{label}: gradient", "dvalues exactly 0" if zero else f"dvalues {fmt(g)}", run_grad))
    return cases


def random_batch(seed: int, B: int, T: int, empty_row: bool = True):
    """A right-padded (B, T) batch; new values within +/- 0.5 of the old ones (inside and outside the band)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, size=B)
    if empty_row:
        lengths[0] = 0
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    values_old = rng.standard_normal((B, T))
    values = values_old + rng.uniform(-0.5, 0.5, size=(B, T))
    returns = values_old + rng.standard_normal((B, T))
    return values, values_old, returns, mask


def batch_checks() -> list[Case]:
    args = random_batch(3, 2, 4, empty_row=False)
    mask = args[3]
    n, size = int(mask.sum()), mask.size
    loss, dvalues = reference(*args, EPS)

    def run_mean(fn):
        got, _ = _student(fn, *args, EPS)
        hint = "E_t is the mean over the n valid tokens of the whole batch: the sum divided by n = mask.sum()"
        if close(got, n * loss):
            hint = f"your loss is n = {n} times too large: a sum instead of a mean? divide by n = mask.sum()"
        elif close(got, loss * n / size):
            hint = f"you divided by B*T = {size}: divide by the number of valid tokens, n = mask.sum() = {n}"
        return f"loss {fmt(got)}", close(got, loss), _value_hint(got, loss, hint)

    rng = np.random.default_rng(5)
    pad = mask == 0
    garbage = [a.copy() for a in args[:3]]
    for a in garbage:
        a[pad] = rng.uniform(-3, 3, size=int(pad.sum()))

    def run_padding(fn):
        got, d = _student(fn, *garbage, mask, EPS)
        on_pad = float(np.max(np.abs(d[pad])))
        ok = close(got, loss) and on_pad == 0.0 and close(d[~pad], dvalues[~pad])
        clean_loss, clean_d = _student(fn, *(a * mask for a in args[:3]), mask, EPS)   # zeros in the padding
        if on_pad == 0.0 and not (close(clean_loss, loss) and close(clean_d[~pad], dvalues[~pad])):
            return f"loss {fmt(got)}, |dvalues| on padding 0", ok, ("wrong with zeros in the padding too: fix the "
                                                                     "failing cases above first")
        return f"loss {fmt(got)}, |dvalues| on padding {fmt(on_pad)}", ok, (
            "use the mask: padded tokens (mask == 0) must not enter the mean, and their gradient must be exactly 0")

    cases = [Case(f"token-level mean over n = {n} valid tokens", f"loss {fmt(loss)}", run_mean),
             Case("padding holds other numbers: loss and gradient unchanged",
                  f"loss {fmt(loss)}, |dvalues| on padding 0", run_padding)]
    for seed, (B, T), eps in ((0, (4, 7), 0.2), (1, (8, 16), 0.1), (2, (16, 32), 0.3)):
        rargs = random_batch(seed, B, T)
        rloss, rd = reference(*rargs, eps)

        def run(fn, rargs=rargs, rloss=rloss, rd=rd, eps=eps):
            got, d = _student(fn, *rargs, eps)
            return f"loss {fmt(got)}, dvalues {max_err(d, rd)}", close(got, rloss) and close(d, rd), (
                "differs from minippo.rl.losses.clipped_value_loss on this random batch (it has an empty row); "
                "fix the failing cases above first")

        cases.append(Case(f"random batch {B}x{T}, eps={eps:g} vs the library",
                          f"loss {fmt(rloss)}, dvalues as the library", run))
    return cases


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    return case_checks() + batch_checks()
