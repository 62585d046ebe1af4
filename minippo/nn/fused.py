"""Fused numba kernels for the elementwise passes of TinyGPT, each beside its NumPy reference.

Legend: N rows (B*T), C channels, V vocab, B batch, H heads, T queries, S keys.

Why: in plain NumPy every line of GELU, LayerNorm or a softmax is a separate pass over memory with a
fresh temporary, and at TinyGPT's sizes those passes cost as much as the matrix products (profile
with ``minippo bench --only gpt``: the fused step is ~1.3x faster than the NumPy layers). Each kernel
below does one layer's forward or backward in one to three passes. Transcendentals (exp, tanh) are
left to NumPy's vectorised ``np.exp`` / ``np.tanh``, which on x86 are several times faster than
numba's scalar libm calls (no Intel SVML here).

The kernels are serial. ``prange`` marks the loops whose iterations are independent (each row is
written by one iteration only), so ``parallel=True`` would be safe; but on a 2-core machine the
OpenMP threads and OpenBLAS's threads spin against each other between the matrix products: the
bench step took 98 ms with these serial kernels and 296 ms with ``parallel=True`` versions
(alternating measurements in one process), and small inputs (gradient checks, decoding) paid the
thread start-up on every call.

Every public function here has exactly the API of its NumPy reference, imported under the name
``<name>_reference`` from :mod:`minippo.nn.layers` (the textbook version to read); the tests check
that both agree (``pytest -m kernels``, also with ``NUMBA_DISABLE_JIT=1``). With the switch of
:mod:`minippo.kernels` off every function here calls its NumPy reference (the bench does this to
show the difference).

Kernels compute in the dtype of their inputs (constants are made with ``x.dtype.type``), so float32
stays float32 and float64 gradient checks run through these very kernels.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from minippo import kernels
from minippo.nn.layers import GELU_A, GELU_K
from minippo.nn.layers import embedding_backward as embedding_backward_reference
from minippo.nn.layers import gelu_backward as gelu_backward_reference
from minippo.nn.layers import gelu_forward as gelu_forward_reference
from minippo.nn.layers import layernorm_backward as layernorm_backward_reference
from minippo.nn.layers import layernorm_forward as layernorm_forward_reference
from minippo.nn.layers import masked_softmax_backward as masked_softmax_backward_reference
from minippo.nn.layers import masked_softmax_forward as masked_softmax_forward_reference
from minippo.nn.layers import softmax_cross_entropy_backward as softmax_cross_entropy_backward_reference
from minippo.nn.layers import softmax_cross_entropy_forward as softmax_cross_entropy_forward_reference


def _rows(x: np.ndarray) -> np.ndarray:
    """(..., C) -> (N, C) C-contiguous (a view when possible)."""
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])


# ----------------------------------------------------------------------------------------------
# row reductions with four interleaved accumulators
# ----------------------------------------------------------------------------------------------
# A sum written as one loop is a chain of dependent additions: each waits for the previous one
# (~4 cycles), and without fastmath the compiler may not reorder them. Four accumulators make four
# independent chains (LayerNorm's forward kernel: 0.53 -> 0.33 ms on (2048, 128)); the result
# differs from NumPy's pairwise sum only by rounding.
# References: a.sum(), (a * b).sum(), ((a - m) ** 2).sum(), a.max().

@njit(cache=True)
def _sum4(a):
    s0 = s1 = s2 = s3 = a.dtype.type(0)
    n = a.shape[0]
    for i in range(0, n - 3, 4):
        s0 += a[i]
        s1 += a[i + 1]
        s2 += a[i + 2]
        s3 += a[i + 3]
    for i in range(n - n % 4, n):
        s0 += a[i]
    return (s0 + s1) + (s2 + s3)


@njit(cache=True)
def _dot4(a, b):
    s0 = s1 = s2 = s3 = a.dtype.type(0)
    n = a.shape[0]
    for i in range(0, n - 3, 4):
        s0 += a[i] * b[i]
        s1 += a[i + 1] * b[i + 1]
        s2 += a[i + 2] * b[i + 2]
        s3 += a[i + 3] * b[i + 3]
    for i in range(n - n % 4, n):
        s0 += a[i] * b[i]
    return (s0 + s1) + (s2 + s3)


@njit(cache=True)
def _sumsq4(a, m):
    s0 = s1 = s2 = s3 = a.dtype.type(0)
    n = a.shape[0]
    for i in range(0, n - 3, 4):
        d0, d1, d2, d3 = a[i] - m, a[i + 1] - m, a[i + 2] - m, a[i + 3] - m
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
    for i in range(n - n % 4, n):
        s0 += (a[i] - m) * (a[i] - m)
    return (s0 + s1) + (s2 + s3)


@njit(cache=True)
def _max4(a):
    m0 = m1 = m2 = m3 = a[0]
    n = a.shape[0]
    for i in range(0, n - 3, 4):
        m0 = max(m0, a[i])
        m1 = max(m1, a[i + 1])
        m2 = max(m2, a[i + 2])
        m3 = max(m3, a[i + 3])
    for i in range(n - n % 4, n):
        m0 = max(m0, a[i])
    return max(max(m0, m1), max(m2, m3))


# ----------------------------------------------------------------------------------------------
# LayerNorm                                  reference: layers.layernorm_forward / _backward
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _layernorm_forward_kernel(x, w, b, eps, out, xhat, rstd):
    """Per row: mean, biased variance (two passes), then xhat and out = xhat * w + b."""
    N, C = x.shape
    one = x.dtype.type(1)
    for r in prange(N):
        mean = _sum4(x[r]) / C
        rs = one / np.sqrt(_sumsq4(x[r], mean) / C + eps)
        rstd[r] = rs
        for c in range(C):
            xh = (x[r, c] - mean) * rs
            xhat[r, c] = xh
            out[r, c] = xh * w[c] + b[c]


@njit(cache=True)
def _layernorm_backward_kernel(dout, xhat, rstd, w, dx):
    """Per row: g = dout * w;  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))."""
    N, C = dout.shape
    g = np.empty(C, dtype=dout.dtype)
    for r in prange(N):
        for c in range(C):
            g[c] = dout[r, c] * w[c]
        mg, mgx = _sum4(g) / C, _dot4(g, xhat[r]) / C
        for c in range(C):
            dx[r, c] = rstd[r] * (g[c] - mg - xhat[r, c] * mgx)


@njit(cache=True)
def _column_sums_kernel(dout, xhat, dw, db):
    """dw[c] = sum_r dout[r, c] * xhat[r, c],  db[c] = sum_r dout[r, c]  (serial: each c its own sum)."""
    N, C = dout.shape
    for r in range(N):
        for c in range(C):
            dw[c] += dout[r, c] * xhat[r, c]
            db[c] += dout[r, c]


def layernorm_forward(x, w, b, eps=1e-5):
    """Fused :func:`minippo.nn.layers.layernorm_forward` (same arguments, same returns)."""
    if not kernels.enabled():
        return layernorm_forward_reference(x, w, b, eps)
    x2 = _rows(x)                                   # (N, C)
    out, xhat = np.empty_like(x2), np.empty_like(x2)
    rstd = np.empty((x2.shape[0], 1), dtype=x.dtype)  # (N, 1)
    _layernorm_forward_kernel(x2, w, b, x.dtype.type(eps), out, xhat, rstd[:, 0])
    lead = x.shape[:-1]
    return out.reshape(x.shape), (xhat.reshape(x.shape), rstd.reshape(*lead, 1), w)


def layernorm_backward(dout, cache):
    """Fused :func:`minippo.nn.layers.layernorm_backward` (returns ``dx, dw, db``)."""
    if not kernels.enabled():
        return layernorm_backward_reference(dout, cache)
    xhat, rstd, w = cache
    C = xhat.shape[-1]
    d2, xh2 = _rows(dout), xhat.reshape(-1, C)
    dx = np.empty_like(d2)
    _layernorm_backward_kernel(d2, xh2, rstd.reshape(-1), w, dx)
    dw, db = np.zeros(C, dtype=dout.dtype), np.zeros(C, dtype=dout.dtype)
    _column_sums_kernel(d2, xh2, dw, db)
    return dx.reshape(dout.shape), dw, db


# ----------------------------------------------------------------------------------------------
# GELU, tanh form                            reference: layers.gelu_forward / _backward
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _gelu_arg_kernel(x, k, a, u):
    """u = k (x + a x^3), the argument of the tanh."""
    N, C = x.shape
    for r in prange(N):
        for c in range(C):
            v = x[r, c]
            u[r, c] = k * (v + a * v * v * v)


@njit(cache=True)
def _gelu_out_kernel(x, t, out):
    """out = 0.5 x (1 + t)."""
    N, C = x.shape
    half, one = x.dtype.type(0.5), x.dtype.type(1)
    for r in prange(N):
        for c in range(C):
            out[r, c] = half * x[r, c] * (one + t[r, c])


@njit(cache=True)
def _gelu_backward_kernel(dout, x, t, k, a, dx):
    """dx = dout * (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2))."""
    N, C = x.shape
    half, one, three = x.dtype.type(0.5), x.dtype.type(1), x.dtype.type(3)
    for r in prange(N):
        for c in range(C):
            v, th = x[r, c], t[r, c]
            dx[r, c] = dout[r, c] * (half * (one + th) + half * v * (one - th * th) * k * (one + three * a * v * v))


def gelu_forward(x):
    """Fused :func:`minippo.nn.layers.gelu_forward`.

    Three passes: the tanh argument (numba), ``np.tanh`` in place (NumPy's SIMD tanh: numba's scalar
    tanh is ~40x slower on x86 without Intel SVML), the output (numba).
    """
    if not kernels.enabled():
        return gelu_forward_reference(x)
    x2 = _rows(x)
    t, out = np.empty_like(x2), np.empty_like(x2)
    dt = x.dtype.type
    _gelu_arg_kernel(x2, dt(GELU_K), dt(GELU_A), t)
    np.tanh(t, out=t)                               # t = tanh(u)
    _gelu_out_kernel(x2, t, out)
    return out.reshape(x.shape), (x2.reshape(x.shape), t.reshape(x.shape))


def gelu_backward(dout, cache):
    """Fused :func:`minippo.nn.layers.gelu_backward`."""
    if not kernels.enabled():
        return gelu_backward_reference(dout, cache)
    x, t = cache
    d2 = _rows(dout)
    dx = np.empty_like(d2)
    dt = x.dtype.type
    _gelu_backward_kernel(d2, _rows(x), _rows(t), dt(GELU_K), dt(GELU_A), dx)
    return dx.reshape(dout.shape)


# ----------------------------------------------------------------------------------------------
# masked softmax of attention scores         reference: layers.masked_softmax_forward / _backward
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _masked_softmax_shift_kernel(att, allowed, scale):
    """In place, per (b, h, i) row: att = scale * att - max over allowed j, and -inf where not allowed."""
    B, H, T, S = att.shape
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        for i in range(T):
            row = att[b, h, i]
            for j in range(S):
                row[j] = row[j] * scale if allowed[b, i, j] else -np.inf
            m = _max4(row)                          # finite: every row allows at least one key
            for j in range(S):
                row[j] -= m


@njit(cache=True)
def _normalize_rows_kernel(e):
    """In place: every row of the (N, S) array ``e`` divided by its sum."""
    N, S = e.shape
    for r in prange(N):
        s = _sum4(e[r])
        for j in range(S):
            e[r, j] /= s


@njit(cache=True)
def _masked_softmax_backward_kernel(datt, att, scale):
    """In place, per row: datt = scale * att * (datt - sum_j datt_j att_j)."""
    B, H, T, S = att.shape
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        for i in range(T):
            s = _dot4(datt[b, h, i], att[b, h, i])
            for j in range(S):
                datt[b, h, i, j] = scale * att[b, h, i, j] * (datt[b, h, i, j] - s)


def masked_softmax_forward(scores, allowed, scale):
    """Fused :func:`minippo.nn.layers.masked_softmax_forward` (in place on ``scores``)."""
    if not kernels.enabled():
        return masked_softmax_forward_reference(scores, allowed, scale)
    B, H, T, S = scores.shape
    allowed = np.broadcast_to(allowed, (B, T, S))
    _masked_softmax_shift_kernel(scores, allowed, scores.dtype.type(scale))
    np.exp(scores, out=scores)                      # NumPy's SIMD exp; exp(-inf) = 0 exactly
    _normalize_rows_kernel(scores.reshape(-1, S))
    return scores, scores


def masked_softmax_backward(datt, cache, scale):
    """Fused :func:`minippo.nn.layers.masked_softmax_backward` (in place on ``datt``)."""
    if not kernels.enabled():
        return masked_softmax_backward_reference(datt, cache, scale)
    _masked_softmax_backward_kernel(datt, cache, datt.dtype.type(scale))
    return datt


# ----------------------------------------------------------------------------------------------
# softmax cross-entropy with a mask          reference: layers.softmax_cross_entropy_forward / _backward
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _shift_rows_kernel(z, shifted, zmax):
    """Per row: zmax = max_j z, shifted = z - zmax."""
    N, V = z.shape
    for r in prange(N):
        m = _max4(z[r])
        zmax[r] = m
        for j in range(V):
            shifted[r, j] = z[r, j] - m


@njit(cache=True)
def _xent_normalize_kernel(z, targets, zmax, probs, nll):
    """Per row, given probs = exp(z - zmax): s = sum, probs /= s, nll = log(s) + zmax - z[target]."""
    N, V = z.shape
    for r in prange(N):
        s = _sum4(probs[r])
        for j in range(V):
            probs[r, j] /= s
        nll[r] = np.log(s) + zmax[r] - z[r, targets[r]]


@njit(cache=True)
def _softmax_xent_backward_kernel(probs, targets, w, dlogits):
    """Per row: dlogits = w[r] * (probs - onehot(target)),  w = dloss * mask / n."""
    N, V = probs.shape
    for r in prange(N):
        for j in range(V):
            dlogits[r, j] = w[r] * probs[r, j]
        dlogits[r, targets[r]] -= w[r]


def softmax_cross_entropy_forward(logits, targets, mask):
    """Fused :func:`minippo.nn.layers.softmax_cross_entropy_forward`."""
    if not kernels.enabled():
        return softmax_cross_entropy_forward_reference(logits, targets, mask)
    n = float(np.sum(mask))
    if n == 0:
        raise ValueError("`mask` must contain at least one 1: the loss is a mean over mask == 1 tokens")
    z = _rows(logits)                               # (N, V)
    t = np.ascontiguousarray(targets).reshape(-1).astype(np.int64, copy=False)
    probs, zmax = np.empty_like(z), np.empty(z.shape[0], dtype=z.dtype)
    nll = np.empty(z.shape[0], dtype=z.dtype)
    _shift_rows_kernel(z, probs, zmax)
    np.exp(probs, out=probs)                        # NumPy's SIMD exp, in place
    _xent_normalize_kernel(z, t, zmax, probs, nll)
    m = np.asarray(mask).reshape(-1).astype(logits.dtype)
    loss = float(np.dot(nll.astype(np.float64), m.astype(np.float64)) / n)
    return loss, (probs, t, m, n, logits.shape)


def softmax_cross_entropy_backward(dloss, cache):
    """Fused :func:`minippo.nn.layers.softmax_cross_entropy_backward`."""
    if not kernels.enabled():
        return softmax_cross_entropy_backward_reference(dloss, cache)
    probs, t, m, n, shape = cache
    dlogits = np.empty_like(probs)
    _softmax_xent_backward_kernel(probs, t, (m * (dloss / n)).astype(probs.dtype), dlogits)
    return dlogits.reshape(shape)


# ----------------------------------------------------------------------------------------------
# embedding backward (scatter-add)           reference: layers.embedding_backward (np.add.at)
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _scatter_add_rows_kernel(idx, dout, dw):
    """dw[idx[n]] += dout[n] for every n, in order (serial: repeated ids would race in parallel)."""
    N, C = dout.shape
    for n in range(N):
        row = idx[n]
        for c in range(C):
            dw[row, c] += dout[n, c]


def embedding_backward(dout, cache):
    """Fused :func:`minippo.nn.layers.embedding_backward` (repeated ids accumulate)."""
    if not kernels.enabled():
        return embedding_backward_reference(dout, cache)
    idx, w_shape = cache
    dw = np.zeros(w_shape, dtype=dout.dtype)
    _scatter_add_rows_kernel(np.ascontiguousarray(idx).reshape(-1).astype(np.int64, copy=False),
                             _rows(dout), dw)
    return dw
