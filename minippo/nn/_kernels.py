"""The numba kernels of minippo.nn: the elementwise layers of ``layers.py``, fused and compiled.

Legend: N rows (B*T), C channels, V vocab, B batch, H heads, T queries, S keys.

Nothing here is new math. Each layer below has the NumPy formula as its body in
:mod:`minippo.nn.layers` (the version to read), and its first line calls the function of the same
name here while the switch of :mod:`minippo.kernels` is on (the default)::

    layers.layernorm_forward / _backward                  layers.gelu_forward / _backward
    layers.masked_softmax_forward / _backward             layers.softmax_cross_entropy_forward / _backward
    layers.embedding_backward                             optim.AdamW.step (its loop's update lines: adamw_update)

Each function here has exactly the API of its layer (same arguments, same returns, same dtypes);
the parity tests (``tests/nn/test_kernels.py``, ``pytest -m kernels``, also with
``NUMBA_DISABLE_JIT=1``) compare both paths, and ``minippo bench --only gpt`` times TinyGPT's step
both ways.

Why: in plain NumPy every line of GELU, LayerNorm or a softmax is a separate pass over memory with a
fresh temporary, and at TinyGPT's sizes those passes cost as much as the matrix products (profile
with ``minippo bench --only gpt``, which prints the step's time with these kernels against the NumPy
layers: "fused kernels vs NumPy layers"). Each kernel below does one layer's forward or backward in
one to three passes. Transcendentals (exp, tanh) are left to NumPy's vectorised ``np.exp`` /
``np.tanh``, which on x86 are several times faster than numba's scalar libm calls (no Intel SVML
here).

The kernels are serial. ``prange`` marks the loops whose rows are written by one iteration only;
``parallel=True`` would also need LayerNorm's backward kernel to give each row its own scratch
``g`` (it reuses one); but on a 2-core machine the
OpenMP threads and OpenBLAS's threads spin against each other between the matrix products: the
bench step took 98 ms with these serial kernels and 296 ms with ``parallel=True`` versions
(alternating measurements in one process), and small inputs (gradient checks, decoding) paid the
thread start-up on every call.

Kernels compute in the dtype of their inputs (constants are made with ``x.dtype.type``), so float64
gradient checks run through these very kernels. One exception: compiled, LayerNorm's two kernels
divide a row's float32 sum by the integer C, which numba promotes to float64; the row's mean,
variance and 1/std, and the products that use them, then run in float64 and are rounded to float32
where they are stored (under ``NUMBA_DISABLE_JIT=1``, NumPy's rules keep them float32). The parity
tests' float32 tolerance covers both. Numba rules (CONTRIBUTING.md):
``@njit(cache=True)``, no ``fastmath``; ``NUMBA_DISABLE_JIT=1`` runs every kernel as plain Python.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from minippo.nn.layers import GELU_A, GELU_K


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
# Formulas: a.sum(), (a * b).sum(), ((a - m) ** 2).sum(), a.max().

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
# LayerNorm                                  formula: layers.layernorm_forward / _backward
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _layernorm_forward_kernel(x, w, b, eps, out, xhat, rstd):
    """Per row: mean, biased variance (two passes), then xhat and out = xhat * w + b.
    Formula: :func:`minippo.nn.layers.layernorm_forward`."""
    N, C = x.shape
    one = x.dtype.type(1)
    for r in prange(N):
        mean = _sum4(x[r]) / C                     # float64: / the integer C (module docstring)
        rs = one / np.sqrt(_sumsq4(x[r], mean) / C + eps)
        rstd[r] = rs
        for c in range(C):
            xh = (x[r, c] - mean) * rs
            xhat[r, c] = xh
            out[r, c] = xh * w[c] + b[c]


@njit(cache=True)
def _layernorm_backward_kernel(dout, xhat, rstd, w, dx):
    """Per row: g = dout * w;  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    Formula: :func:`minippo.nn.layers.layernorm_backward`."""
    N, C = dout.shape
    g = np.empty(C, dtype=dout.dtype)
    for r in prange(N):
        for c in range(C):
            g[c] = dout[r, c] * w[c]
        mg, mgx = _sum4(g) / C, _dot4(g, xhat[r]) / C   # float64 (module docstring)
        for c in range(C):
            dx[r, c] = rstd[r] * (g[c] - mg - xhat[r, c] * mgx)


@njit(cache=True)
def _column_sums_kernel(dout, xhat, dw, db):
    """dw[c] = sum_r dout[r, c] * xhat[r, c],  db[c] = sum_r dout[r, c]  (serial: each c its own sum).
    Formula: :func:`minippo.nn.layers.layernorm_backward`."""
    N, C = dout.shape
    for r in range(N):
        for c in range(C):
            dw[c] += dout[r, c] * xhat[r, c]
            db[c] += dout[r, c]


def layernorm_forward(x, w, b, eps=1e-5):
    """:func:`minippo.nn.layers.layernorm_forward` by numba kernels (same arguments, same returns)."""
    x2 = _rows(x)                                   # (N, C)
    out, xhat = np.empty_like(x2), np.empty_like(x2)
    rstd = np.empty((x2.shape[0], 1), dtype=x.dtype)  # (N, 1)
    _layernorm_forward_kernel(x2, w, b, x.dtype.type(eps), out, xhat, rstd[:, 0])
    lead = x.shape[:-1]
    return out.reshape(x.shape), (xhat.reshape(x.shape), rstd.reshape(*lead, 1), w)


def layernorm_backward(dout, cache):
    """:func:`minippo.nn.layers.layernorm_backward` by numba kernels (returns ``dx, dw, db``)."""
    xhat, rstd, w = cache
    C = xhat.shape[-1]
    d2, xh2 = _rows(dout), xhat.reshape(-1, C)
    dx = np.empty_like(d2)
    _layernorm_backward_kernel(d2, xh2, rstd.reshape(-1), w, dx)
    dw, db = np.zeros(C, dtype=dout.dtype), np.zeros(C, dtype=dout.dtype)
    _column_sums_kernel(d2, xh2, dw, db)
    return dx.reshape(dout.shape), dw, db


# ----------------------------------------------------------------------------------------------
# GELU, tanh form                            formula: layers.gelu_forward / _backward
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _gelu_arg_kernel(x, k, a, u):
    """u = k (x + a x^3), the argument of the tanh. Formula: :func:`minippo.nn.layers.gelu_forward`."""
    N, C = x.shape
    for r in prange(N):
        for c in range(C):
            v = x[r, c]
            u[r, c] = k * (v + a * v * v * v)


@njit(cache=True)
def _gelu_out_kernel(x, t, out):
    """out = 0.5 x (1 + t). Formula: :func:`minippo.nn.layers.gelu_forward`."""
    N, C = x.shape
    half, one = x.dtype.type(0.5), x.dtype.type(1)
    for r in prange(N):
        for c in range(C):
            out[r, c] = half * x[r, c] * (one + t[r, c])


@njit(cache=True)
def _gelu_backward_kernel(dout, x, t, k, a, dx):
    """dx = dout * (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2)).
    Formula: :func:`minippo.nn.layers.gelu_backward`."""
    N, C = x.shape
    half, one, three = x.dtype.type(0.5), x.dtype.type(1), x.dtype.type(3)
    for r in prange(N):
        for c in range(C):
            v, th = x[r, c], t[r, c]
            dx[r, c] = dout[r, c] * (half * (one + th) + half * v * (one - th * th) * k * (one + three * a * v * v))


def gelu_forward(x):
    """:func:`minippo.nn.layers.gelu_forward` by numba kernels.

    Three passes: the tanh argument (numba), ``np.tanh`` in place (NumPy's SIMD tanh: numba's scalar
    tanh is ~40x slower on x86 without Intel SVML), the output (numba).
    """
    x2 = _rows(x)
    t, out = np.empty_like(x2), np.empty_like(x2)
    dt = x.dtype.type
    _gelu_arg_kernel(x2, dt(GELU_K), dt(GELU_A), t)
    np.tanh(t, out=t)                               # t = tanh(u)
    _gelu_out_kernel(x2, t, out)
    return out.reshape(x.shape), (x2.reshape(x.shape), t.reshape(x.shape))


def gelu_backward(dout, cache):
    """:func:`minippo.nn.layers.gelu_backward` by numba kernels."""
    x, t = cache
    d2 = _rows(dout)
    dx = np.empty_like(d2)
    dt = x.dtype.type
    _gelu_backward_kernel(d2, _rows(x), _rows(t), dt(GELU_K), dt(GELU_A), dx)
    return dx.reshape(dout.shape)


# ----------------------------------------------------------------------------------------------
# masked softmax of attention scores         formula: layers.masked_softmax_forward / _backward
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _masked_softmax_shift_kernel(att, allowed, scale):
    """In place, per (b, h, i) row: att = scale * att - max over allowed j, and -inf where not allowed.
    Formula: :func:`minippo.nn.layers.masked_softmax_forward`."""
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
    """In place: every row of the (N, S) array ``e`` divided by its sum.
    Formula: :func:`minippo.nn.layers.masked_softmax_forward`."""
    N, S = e.shape
    for r in prange(N):
        s = _sum4(e[r])
        for j in range(S):
            e[r, j] /= s


@njit(cache=True)
def _masked_softmax_backward_kernel(datt, att, scale):
    """In place, per row: datt = scale * att * (datt - sum_j datt_j att_j).
    Formula: :func:`minippo.nn.layers.masked_softmax_backward`."""
    B, H, T, S = att.shape
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        for i in range(T):
            s = _dot4(datt[b, h, i], att[b, h, i])
            for j in range(S):
                datt[b, h, i, j] = scale * att[b, h, i, j] * (datt[b, h, i, j] - s)


def masked_softmax_forward(scores, allowed, scale):
    """:func:`minippo.nn.layers.masked_softmax_forward` by numba kernels (in place on ``scores``)."""
    B, H, T, S = scores.shape
    allowed = np.broadcast_to(allowed, (B, T, S))
    _masked_softmax_shift_kernel(scores, allowed, scores.dtype.type(scale))
    np.exp(scores, out=scores)                      # NumPy's SIMD exp; exp(-inf) = 0 exactly
    _normalize_rows_kernel(scores.reshape(-1, S))
    return scores, scores


def masked_softmax_backward(datt, cache, scale):
    """:func:`minippo.nn.layers.masked_softmax_backward` by numba kernels (in place on ``datt``)."""
    _masked_softmax_backward_kernel(datt, cache, datt.dtype.type(scale))
    return datt


# ----------------------------------------------------------------------------------------------
# softmax cross-entropy with a mask          formula: layers.softmax_cross_entropy_forward / _backward
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _shift_rows_kernel(z, shifted, zmax):
    """Per row: zmax = max_j z, shifted = z - zmax.
    Formula: :func:`minippo.nn.layers.softmax_cross_entropy_forward`."""
    N, V = z.shape
    for r in prange(N):
        m = _max4(z[r])
        zmax[r] = m
        for j in range(V):
            shifted[r, j] = z[r, j] - m


@njit(cache=True)
def _xent_normalize_kernel(z, targets, zmax, probs, nll):
    """Per row, given probs = exp(z - zmax): s = sum, probs /= s, nll = log(s) + zmax - z[target].
    Formula: :func:`minippo.nn.layers.softmax_cross_entropy_forward`."""
    N, V = z.shape
    for r in prange(N):
        s = _sum4(probs[r])
        for j in range(V):
            probs[r, j] /= s
        nll[r] = np.log(s) + zmax[r] - z[r, targets[r]]


@njit(cache=True)
def _softmax_xent_backward_kernel(probs, targets, w, dlogits):
    """Per row: dlogits = w[r] * (probs - onehot(target)),  w = dloss * mask / n.
    Formula: :func:`minippo.nn.layers.softmax_cross_entropy_backward`."""
    N, V = probs.shape
    for r in prange(N):
        for j in range(V):
            dlogits[r, j] = w[r] * probs[r, j]
        dlogits[r, targets[r]] -= w[r]


def softmax_cross_entropy_forward(logits, targets, mask):
    """:func:`minippo.nn.layers.softmax_cross_entropy_forward` by numba kernels."""
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
    """:func:`minippo.nn.layers.softmax_cross_entropy_backward` by numba kernels."""
    probs, t, m, n, shape = cache
    dlogits = np.empty_like(probs)
    _softmax_xent_backward_kernel(probs, t, (m * (dloss / n)).astype(probs.dtype), dlogits)
    return dlogits.reshape(shape)


# ----------------------------------------------------------------------------------------------
# embedding backward (scatter-add)           formula: layers.embedding_backward (np.add.at)
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _scatter_add_rows_kernel(idx, dout, dw):
    """dw[idx[n]] += dout[n] for every n, in order (serial: repeated ids would race in parallel).
    Formula: :func:`minippo.nn.layers.embedding_backward`."""
    N, C = dout.shape
    for n in range(N):
        row = idx[n]
        for c in range(C):
            dw[row, c] += dout[n, c]


def embedding_backward(dout, cache):
    """:func:`minippo.nn.layers.embedding_backward` by numba kernels (repeated ids accumulate)."""
    idx, w_shape = cache
    dw = np.zeros(w_shape, dtype=dout.dtype)
    _scatter_add_rows_kernel(np.ascontiguousarray(idx).reshape(-1).astype(np.int64, copy=False),
                             _rows(dout), dw)
    return dw


# ----------------------------------------------------------------------------------------------
# AdamW's update of one tensor                formula: optim.AdamW.step (the NumPy lines of its loop)
# ----------------------------------------------------------------------------------------------

@njit(cache=True, error_model="numpy")
def _adamw_kernel(p, g, m, v, lr, b1, one_minus_b1, b2, one_minus_b2, c1, c2, eps, weight_decay, decay):
    """Per element, in place, the arithmetic of the NumPy lines in their order (every constant already in the
    arrays' dtype, as NumPy casts a Python float): m = m b1 + (1 - b1) g;  v = v b2 + (1 - b2) g^2;
    update = (m / c1) / (sqrt(v / c2) + eps) [+ weight_decay p];  p -= lr update.
    ``error_model="numpy"``: a division by zero gives inf / nan as in NumPy instead of raising, which lets
    the loop run on SIMD registers (4.5x faster; the same IEEE results). Formula: :meth:`minippo.nn.optim.AdamW.step`."""
    n = p.shape[0]
    if decay:
        for i in range(n):
            mi = m[i] * b1 + one_minus_b1 * g[i]
            vi = v[i] * b2 + one_minus_b2 * (g[i] * g[i])
            m[i] = mi
            v[i] = vi
            p[i] = p[i] - lr * ((mi / c1) / (np.sqrt(vi / c2) + eps) + weight_decay * p[i])
    else:
        for i in range(n):
            mi = m[i] * b1 + one_minus_b1 * g[i]
            vi = v[i] * b2 + one_minus_b2 * (g[i] * g[i])
            m[i] = mi
            v[i] = vi
            p[i] = p[i] - lr * ((mi / c1) / (np.sqrt(vi / c2) + eps))


def adamw_update(p, g, m, v, lr, b1, b2, c1, c2, eps, weight_decay):
    """One tensor's AdamW update in place, as the NumPy lines of :meth:`minippo.nn.optim.AdamW.step`
    compute it (``g`` has ``p``'s dtype; ``weight_decay`` 0 = no decay on this tensor)."""
    dt = p.dtype.type
    consts = (dt(lr), dt(b1), dt(1.0 - b1), dt(b2), dt(1.0 - b2), dt(c1), dt(c2), dt(eps), dt(weight_decay))
    if p.flags.c_contiguous and m.flags.c_contiguous and v.flags.c_contiguous:     # always, in minippo
        _adamw_kernel(p.reshape(-1), np.ascontiguousarray(g).reshape(-1), m.reshape(-1), v.reshape(-1),
                      *consts, weight_decay != 0)
        return
    flat = [np.ascontiguousarray(a) for a in (p, m, v)]              # a strided array: on a copy, ...
    _adamw_kernel(flat[0].reshape(-1), np.ascontiguousarray(g).reshape(-1), flat[1].reshape(-1),
                  flat[2].reshape(-1), *consts, weight_decay != 0)
    for a, f in zip((p, m, v), flat):
        a[...] = f                                                   # ... written back
