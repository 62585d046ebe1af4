"""Exercise ``layernorm_backward``: the backward pass of LayerNorm, checked by central differences.

Legend: N rows (any leading axes, flattened), C channels.

The student writes ``layernorm_backward(dout, cache) -> (dx, dgamma, dbeta)`` for the forward
:func:`minippo.nn.layers.layernorm_forward` (its NumPy formula), whose cache is ``(xhat, rstd, w)``.
Checked tensor by tensor with :func:`minippo.nn.gradcheck.check_gradients` (float64 central
differences, relative error <= 1e-7, the project's tolerance for one layer), on a 3-D and a 2-D input,
and against the library's own :func:`minippo.nn.layers.layernorm_backward`.
"""
from __future__ import annotations

import numpy as np

from minippo import kernels
from minippo.exercises.grading import Case, as_arrays, call, close, max_err
from minippo.nn import layers
from minippo.nn.gradcheck import check_gradients

NAME = "layernorm_backward"
FUNCTION = "layernorm_backward"
SUMMARY = "LayerNorm's backward pass: dx, dgamma, dbeta from dout and the cache"
LESSON = "lessons/l10_tiny_transformer.py"
REFERENCE = "minippo.nn.layers.layernorm_backward"

_HEADER = '''"""minippo exercise `layernorm_backward`: backprop through LayerNorm by hand (Ba, Kiros & Hinton 2016).

The forward is minippo.nn.layers.layernorm_forward(x, w, b, eps), over the last axis:

    mean = x.mean(-1);  var = ((x - mean)^2).mean(-1)  (biased);  rstd = 1 / sqrt(var + eps)
    xhat = (x - mean) * rstd;  out = xhat * w + b                       returns out, cache = (xhat, rstd, w)

Write the body of `layernorm_backward` below, then run the project's checks on it:

    minippo exercise check layernorm_backward          (add --dir D when this file is not in ./exercises)

They compare every gradient with central differences of the forward in float64 (relative error
<= 1e-7 per tensor), as the project checks each of its own layers (minippo.nn.gradcheck).
"""
import numpy as np


'''

_SIGNATURE = '''def layernorm_backward(dout, cache):
    """Gradients of LayerNorm given d loss / d out.

    Parameters
    ----------
    dout : (..., C) float64, d loss / d out.
    cache : (xhat, rstd, w) from layernorm_forward: xhat (..., C) the normalised input,
        rstd (..., 1) = 1 / sqrt(var + eps) per row, w (C,) the gain (gamma).

    Returns
    -------
    dx : (..., C) float64, d loss / d x.
    dgamma : (C,) float64, d loss / d w, summed over every leading axis (every row).
    dbeta : (C,) float64, d loss / d b, summed over every leading axis.

    Hints: out = xhat * w + b gives dgamma, dbeta and dxhat = dout * w at once. Then xhat depends
    on x directly AND through the mean and the variance of its row; all three paths add up to
        dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))        (means over C)
    which you can derive (or just check) from the forward above.
    """
'''

_TODO = '''    raise NotImplementedError("layernorm_backward: write the body (the docstring has the hints)")
'''

_SOLUTION_BODY = '''    xhat, rstd, w = cache
    C = xhat.shape[-1]
    dout2, xhat2 = dout.reshape(-1, C), xhat.reshape(-1, C)        # (N, C): every leading axis is a row
    # out = xhat * w + b  ->  dgamma = sum_rows dout * xhat,  dbeta = sum_rows dout,  dxhat = dout * w
    dgamma = np.sum(dout2 * xhat2, axis=0)                         # (C,)
    dbeta = dout2.sum(axis=0)                                      # (C,)
    g = dout * w                                                   # (..., C) dxhat
    # xhat = (x - mean(x)) * rstd: the direct path minus its projections through the mean and the variance
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, dgamma, dbeta
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY
TOL = 1e-7                           # per-tensor relative error of a single layer (CONTRIBUTING.md)


def forward(x, w, b):
    """``layernorm_forward`` by its NumPy formula (the cache a student reads is the readable one)."""
    with kernels.use_kernels(False):
        return layers.layernorm_forward(x, w, b)


def problem(seed: int, shape: tuple):
    """x, w, b, dout in float64; rows with different means and scales."""
    rng = np.random.default_rng(seed)
    C = shape[-1]
    x = rng.standard_normal(shape) * rng.uniform(0.5, 3.0, size=shape[:-1] + (1,)) + rng.normal(0, 2, shape[:-1] + (1,))
    return x, rng.normal(1.0, 0.3, size=C), rng.normal(0.0, 0.3, size=C), rng.standard_normal(shape)


def _student(fn, dout, cache):
    xhat, rstd, w = cache
    cache = (xhat.copy(), rstd.copy(), w.copy())
    return as_arrays(call(fn, dout, cache), ("dx", "dgamma", "dbeta"), (dout.shape, (w.size,), (w.size,)))


def _dx_hint(dx, dout, cache) -> str:
    xhat, rstd, w = cache
    g = dout * w
    if close(dx, rstd * g):
        return "dx misses the paths through the mean and the variance: subtract mean(dxhat) and xhat * mean(dxhat * xhat)"
    if close(dx, rstd * (g - g.mean(axis=-1, keepdims=True))):
        return "dx misses the path through the variance: subtract xhat * mean(dxhat * xhat) too"
    if close(dx, rstd * (dout - dout.mean(-1, keepdims=True) - xhat * np.mean(dout * xhat, -1, keepdims=True))):
        return "dx forgets the gain: dxhat = dout * w, since out = xhat * w + b"
    return "dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), means over the last axis, dxhat = dout * w"


def _param_hint(name: str, got, dout, xhat) -> str:
    C = xhat.shape[-1]
    if name == "dgamma" and close(got, dout.reshape(-1, C).sum(0)):
        return "dgamma = sum over rows of dout * xhat (sum of dout is dbeta): swapped?"
    if name == "dbeta" and close(got, (dout * xhat).reshape(-1, C).sum(0)):
        return "dbeta = sum over rows of dout (dout * xhat is dgamma): swapped?"
    if dout.ndim > 2:
        first = dout[0] * xhat[0] if name == "dgamma" else dout[0]
        if close(got, first.sum(0)):
            return f"{name} must be summed over EVERY leading axis (reshape to (-1, C) first), not only axis 0"
    return ("dgamma = sum over rows of dout * xhat; dbeta = sum over rows of dout (every leading axis is a row)")


def fd_checks(shape: tuple, seed: int) -> list[Case]:
    x, w, b, dout = problem(seed, shape)
    cache = forward(x, w, b)[1]
    names = ("dx", "dgamma", "dbeta")
    label = "x".join(str(s) for s in shape)
    cases = []
    for i, (name, tensor) in enumerate(zip(names, ("x", "w", "b"))):
        def run(fn, i=i, name=name, tensor=tensor):
            grads = _student(fn, dout, cache)
            params = {"x": x.copy(), "w": w.copy(), "b": b.copy()}
            # the loss sum(out * dout) has d loss / d out = dout: its central differences are the true gradients
            f = lambda: float(np.sum(forward(params["x"], params["w"], params["b"])[0] * dout))  # noqa: E731
            row = check_gradients(f, {tensor: params[tensor]}, {tensor: grads[i]}, tol=TOL)[0]
            hint = _dx_hint(grads[0], dout, cache) if name == "dx" else _param_hint(name, grads[i], dout, cache[0])
            return f"rel err {row.rel_err:.1e}", row.ok, hint

        cases.append(Case(f"{name} vs central differences, x {label}", f"rel err <= {TOL:g}", run))
    return cases


def library_check() -> list[Case]:
    x, w, b, dout = problem(5, (32, 16))
    cache = forward(x, w, b)[1]
    with kernels.use_kernels(False):
        want = layers.layernorm_backward(dout, cache)

    def run(fn):
        got = _student(fn, dout, cache)
        ok = all(close(g, e) for g, e in zip(got, want))
        return "dx " + max_err(got[0], want[0]), ok, _dx_hint(got[0], dout, cache) if not close(
            got[0], want[0]) else _param_hint("dgamma", got[1], dout, cache[0])

    return [Case("32x16 vs minippo.nn.layers.layernorm_backward", "dx, dgamma, dbeta as the library", run)]


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    return fd_checks((2, 3, 5), 0) + fd_checks((4, 6), 1) + library_check()
