"""Exercise ``bradley_terry``: the reward model's loss (InstructGPT eq. (1)) and its gradient.

Legend: N pairs.

The student writes ``bradley_terry(r_chosen, r_rejected) -> (loss, dr_chosen, dr_rejected)``: the loss
of :func:`minippo.rlhf.reward_model.bradley_terry_forward` and the gradients of
:func:`~minippo.rlhf.reward_model.bradley_terry_backward` (with ``dloss = 1``). Checked: ln 2 at
equal scores, values and gradients against the library, central differences in float64, the mean
over pairs, shift invariance, and large margins (no overflow).
"""
from __future__ import annotations

import math

import numpy as np

from minippo.exercises.grading import Case, as_arrays, call, close, fmt, max_err
from minippo.nn.gradcheck import numerical_gradient
from minippo.rlhf.reward_model import bradley_terry_backward, bradley_terry_forward

NAME = "bradley_terry"
FUNCTION = "bradley_terry"
SUMMARY = "the reward model's loss -mean log sigmoid(r_w - r_l) (InstructGPT eq. (1)), gradients"
LESSON = "lessons/l11_reward_model.py"
REFERENCE = "minippo.rlhf.reward_model.bradley_terry_forward / bradley_terry_backward"

_HEADER = '''"""minippo exercise `bradley_terry`: the reward model's loss (Ouyang et al. 2022, arXiv:2203.02155, eq. (1)).

The reward model says P(y_w preferred over y_l) = sigmoid(r(x, y_w) - r(x, y_l)) (Bradley & Terry
1952) and is trained to maximise the likelihood of the human labels of N pairs.

Write the body of `bradley_terry` below, then run the project's checks on it:

    minippo exercise check bradley_terry          (add --dir D when this file is not in ./exercises)
"""
import numpy as np


'''

_SIGNATURE = '''def bradley_terry(r_chosen, r_rejected):
    """The Bradley-Terry loss of N pairs and its gradients with respect to the two scores.

        margin_i = r_chosen_i - r_rejected_i
        loss     = -(1/N) sum_i log sigmoid(margin_i)  =  (1/N) sum_i softplus(-margin_i)
        d loss / d r_chosen_i   = -sigmoid(-margin_i) / N
        d loss / d r_rejected_i = +sigmoid(-margin_i) / N

    Parameters
    ----------
    r_chosen : (N,) float64, scores r(x, y_w) of the preferred responses.
    r_rejected : (N,) float64, scores r(x, y_l) of the other responses of the same pairs.

    Returns
    -------
    loss : float.
    dr_chosen, dr_rejected : (N,) float64, the gradients.

    Stability: margins can be large (|margin| of hundreds); log sigmoid(m) = -softplus(-m) is
    np.logaddexp(0, -m) with a minus sign, and sigmoid(-m) = exp(-softplus(m)), both without overflow.
    """
'''

_TODO = '''    raise NotImplementedError("bradley_terry: write the body (the docstring has the formula)")
'''

_SOLUTION_BODY = '''    N = r_chosen.shape[0]
    margin = r_chosen - r_rejected                                 # (N,) r_w - r_l
    loss = np.mean(np.logaddexp(0.0, -margin))                     # mean softplus(-margin)
    dmargin = -np.exp(-np.logaddexp(0.0, margin)) / N              # -sigmoid(-margin) / N, (N,)
    return float(loss), dmargin, -dmargin                          # margin = r_w - r_l: + to r_w, - to r_l
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY


def reference(r_chosen, r_rejected):
    loss, cache = bradley_terry_forward(r_chosen, r_rejected)
    dr_chosen, dr_rejected = bradley_terry_backward(1.0, cache)
    return loss, dr_chosen, dr_rejected


def _student(fn, r_chosen, r_rejected):
    N = r_chosen.shape
    return as_arrays(call(fn, r_chosen, r_rejected), ("loss", "dr_chosen", "dr_rejected"), (None, N, N))


def _hint(loss, dc, dr, r_chosen, r_rejected) -> str:
    """What the student's numbers look like, when they are wrong."""
    want_loss, want_dc, want_dr = reference(r_chosen, r_rejected)
    N = r_chosen.size
    if not close(loss, want_loss):
        if close(loss, reference(r_rejected, r_chosen)[0]):
            return "the chosen response must score higher: the loss is -log sigmoid(r_chosen - r_rejected)"
        if N > 1 and close(loss, N * want_loss):
            return f"your loss is N = {N} times too large: the loss is the MEAN over the N pairs"
        return "loss = mean over the pairs of softplus(-(r_chosen - r_rejected))"
    if N > 1 and close(dc, N * want_dc):
        return f"your gradients are N = {N} times too large: the loss is a mean, so each carries 1/N"
    if close(dc, -np.exp(-np.logaddexp(0.0, -(r_chosen - r_rejected))) / N):
        return "d loss / d r_chosen = -sigmoid(-margin) / N, not -sigmoid(margin) / N"
    if close(dc, -dr) is False and close(dc, want_dc):
        return "d loss / d r_rejected = -d loss / d r_chosen: the loss depends on the difference only"
    return "d loss / d r_chosen = -sigmoid(-margin) / N and d loss / d r_rejected = +sigmoid(-margin) / N"


def _compare(fn, r_chosen, r_rejected):
    loss, dc, dr = _student(fn, r_chosen, r_rejected)
    want = reference(r_chosen, r_rejected)
    ok = close(loss, want[0]) and close(dc, want[1]) and close(dr, want[2])
    got = f"loss {fmt(loss)}, dr_chosen {max_err(dc, want[1])}, dr_rejected {max_err(dr, want[2])}"
    return got, ok, _hint(loss, dc, dr, r_chosen, r_rejected)


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    rng = np.random.default_rng(0)
    rc, rr = rng.normal(0.5, 1.5, size=16), rng.normal(0.0, 1.5, size=16)          # (16,) random pairs
    want = reference(rc, rr)
    equal = (np.array([0.3]), np.array([0.3]))
    big = (np.array([400.0, -400.0, 2.0]), np.array([-400.0, 400.0, 2.0]))          # margins +800, -800, 0
    big_want = reference(*big)

    def run_ln2(fn):
        loss, dc, dr = _student(fn, *equal)
        ok = close(loss, math.log(2)) and close(dc, [-0.5]) and close(dr, [0.5])
        return f"loss {fmt(loss)}, dr_chosen {fmt(dc)}", ok, (
            "equal scores: P(chosen) = sigmoid(0) = 1/2, so loss = ln 2 and the gradients -1/2, +1/2")

    def run_mean(fn):
        four = (np.full(4, 1.0), np.full(4, -0.5))
        loss, _, _ = _student(fn, *four)
        one = reference(np.array([1.0]), np.array([-0.5]))[0]
        return f"loss {fmt(loss)}", close(loss, one), _hint(loss, *_student(fn, *four)[1:], *four)

    def run_shift(fn):
        loss, dc, dr = _student(fn, rc + 3.0, rr + 3.0)
        ok = close(loss, want[0], rtol=1e-9) and close(dc, want[1], rtol=1e-9)
        wrong_anyway = not all(close(a, b) for a, b in zip(_student(fn, rc, rr), want))   # unshifted: wrong too
        return f"loss {fmt(loss)}", ok, _hint(*_student(fn, rc, rr), rc, rr) if wrong_anyway else (
            "the loss depends on r_chosen - r_rejected only: a shift changes nothing")

    def run_fd(fn):
        _, dc, dr = _student(fn, rc, rr)
        xc, xr = rc.copy(), rr.copy()
        f = lambda: float(bradley_terry_forward(xc, xr)[0])  # noqa: E731 - the true loss, read afresh
        num_c, num_r = numerical_gradient(f, xc), numerical_gradient(f, xr)
        # h = 1e-6 central differences of an O(1) smooth loss: error ~ 1e-10
        ok = close(dc, num_c, rtol=1e-6, atol=1e-9) and close(dr, num_r, rtol=1e-6, atol=1e-9)
        return f"dr_chosen {max_err(dc, num_c)}, dr_rejected {max_err(dr, num_r)}", ok, _hint(
            *_student(fn, rc, rr), rc, rr)

    def run_big(fn):
        loss, dc, dr = _student(fn, *big)
        finite = bool(np.isfinite(loss) and np.all(np.isfinite(dc)) and np.all(np.isfinite(dr)))
        ok = finite and close(loss, big_want[0]) and close(dc, big_want[1]) and close(dr, big_want[2])
        return f"loss {fmt(loss)}, dr_chosen {fmt(dc)}", ok, _hint(loss, dc, dr, *big) if finite else (
            "margins of +/-800 overflow exp(): use np.logaddexp(0, -margin) for softplus(-margin) and "
            "exp(-logaddexp(0, margin)) for sigmoid(-margin)")

    return [Case("equal scores: loss ln 2", "loss 0.6931, dr_chosen [-0.5]", run_ln2),
            Case(f"random {rc.size} pairs vs the library", f"loss {fmt(want[0])}, gradients as the library",
                 lambda fn: _compare(fn, rc, rr)),
            Case("gradients vs central differences (float64)", "|err| <= 1e-9 + 1e-6 |grad|", run_fd),
            Case("mean over pairs: 4 equal pairs = 1 pair", "loss of one pair", run_mean),
            Case("shift invariance: every score + 3", f"loss {fmt(want[0])}", run_shift),
            Case("large margins (+800, -800, 0): no overflow", f"loss {fmt(big_want[0])}, finite gradients", run_big)]
