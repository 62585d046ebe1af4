"""Gradient checking: hand-written gradients against central finite differences.

Every backward pass in minippo is verified this way, in float64, tensor by tensor:

    numerical dL/dx_i  ~=  (L(x + h e_i) - L(x - h e_i)) / (2 h)        error O(h^2)

and the per-tensor relative error ``||g_analytic - g_numeric|| / max(||g_analytic||, ||g_numeric||)``
(2-norms over the tensor) must be below a tolerance: 1e-7 for a single layer, 1e-5 for the whole
model. A failure prints a readable table::

    name                 | shape      | rel err  | max abs err | ok
    h.0.attn.c_attn.w    | (8, 24)    | 3.1e-10  | 2.2e-12     | ok
    h.0.mlp.c_fc.b       | (32,)      | 2.4e-02  | 1.5e-03     | FAIL

The norm-based error is used (rather than the largest element-wise ratio) because an entry whose
true gradient is ~0 has an undefined element-wise ratio; the table also reports the worst entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np


def numerical_gradient(f: Callable[[], float], x: np.ndarray, *, h: float = 1e-6,
                       indices: np.ndarray | None = None) -> np.ndarray:
    """Central-difference gradient of the scalar ``f()`` with respect to ``x`` (perturbed in place).

    ``f`` must read ``x`` afresh at every call. ``indices`` (flat) restricts the check to some
    entries; the others are left at 0 in the result. ``x`` is restored exactly afterwards.
    """
    if x.dtype != np.float64:
        raise ValueError(f"gradient checks need float64 arrays, got {x.dtype}")
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    if not np.shares_memory(flat, x):
        raise ValueError("`x` must be contiguous so it can be perturbed in place")
    for i in (range(flat.size) if indices is None else indices):
        old = flat[i]
        flat[i] = old + h
        f_plus = f()
        flat[i] = old - h
        f_minus = f()
        flat[i] = old
        gflat[i] = (f_plus - f_minus) / (2 * h)
    return grad


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """``||a - b|| / max(||a||, ||b||)`` (0 when both are exactly zero)."""
    scale = max(np.linalg.norm(a), np.linalg.norm(b))
    return 0.0 if scale == 0 else float(np.linalg.norm(a - b) / scale)


@dataclass
class GradCheckRow:
    name: str
    shape: tuple
    rel_err: float
    max_abs_err: float
    ok: bool


class GradCheckResult(list):
    """A list of :class:`GradCheckRow` with a printable table."""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self)

    def table(self) -> str:
        w = max([len(r.name) for r in self] + [4])
        lines = [f"{'name':<{w}} | {'shape':<14} | {'rel err':>9} | {'max abs err':>11} | ok",
                 "-" * (w + 48)]
        for r in self:
            lines.append(f"{r.name:<{w}} | {str(r.shape):<14} | {r.rel_err:9.2e} | {r.max_abs_err:11.2e} | "
                         f"{'ok' if r.ok else 'FAIL'}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def check_gradients(f: Callable[[], float], params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray],
                    *, tol: float = 1e-7, h: float = 1e-6, max_entries: int | None = None,
                    rng: np.random.Generator | None = None) -> GradCheckResult:
    """Compare analytic ``grads`` with central differences of ``f`` for every tensor in ``params``.

    Parameters
    ----------
    f : zero-argument function returning the scalar loss; it must read ``params`` afresh.
    params : name -> float64 array, perturbed in place (and restored).
    grads : name -> analytic gradient, same keys and shapes.
    max_entries : if set, check at most this many randomly chosen entries per tensor (``rng`` picks them)
        and compare on those entries only.
    """
    missing = set(params) ^ set(grads)
    if missing:
        raise ValueError(f"`grads` and `params` must have the same keys; differing: {sorted(missing)}")
    result = GradCheckResult()
    for name, x in params.items():
        g = np.asarray(grads[name])
        if g.shape != x.shape:
            raise ValueError(f"gradient of {name!r} has shape {g.shape}, parameter has {x.shape}")
        idx = None
        if max_entries is not None and x.size > max_entries:
            rng = rng if rng is not None else np.random.default_rng(0)
            idx = np.sort(rng.choice(x.size, size=max_entries, replace=False))
        num = numerical_gradient(f, x, h=h, indices=idx)
        a, n = (g.reshape(-1), num.reshape(-1)) if idx is None else (g.reshape(-1)[idx], num.reshape(-1)[idx])
        err = rel_error(a, n)
        max_abs = float(np.max(np.abs(a - n))) if a.size else 0.0
        result.append(GradCheckRow(name, tuple(x.shape), err, max_abs, err <= tol))
    return result


def assert_gradients(f: Callable[[], float], params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray],
                     **kwargs) -> GradCheckResult:
    """:func:`check_gradients`, raising ``AssertionError`` with the whole table when any tensor fails."""
    result = check_gradients(f, params, grads, **kwargs)
    if not result.ok:
        raise AssertionError("gradient check failed (tol %g):\n%s" % (kwargs.get("tol", 1e-7), result.table()))
    return result
