"""The layers of minippo, each a forward/backward pair with no autograd, written in NumPy.

Legend: N rows (any leading batch shape, e.g. B*T), Din / Dout features, B batch, T tokens,
C channels, V vocab, H heads, S keys.

API (cs231n / llm.c style)::

    out, cache = name_forward(x, *params)
    dx, *dparams = name_backward(dout, cache)

``cache`` holds only what backward needs. Every backward quotes the forward line it differentiates.
Arrays keep the dtype they come in (float32 for speed, float64 for gradient checks). Two exceptions
to the return shape: ``embedding_backward`` returns only ``dw`` (token ids have no gradient) and the
cross-entropy's backward takes the upstream scalar ``dloss``.

Each body is the layer's formula: the code that runs with the switch of :mod:`minippo.kernels` off.
The elementwise layers (LayerNorm, GELU, masked softmax, softmax cross-entropy, embedding backward)
start with one line that, while the switch is on (the default), hands the call to their numba twin
in ``nn/_kernels.py`` (same API, parity-tested against the body below it).
"""
from __future__ import annotations

import math

import numpy as np

from minippo import kernels
from minippo._lazy import LazyModule

# the compiled twins of the elementwise layers; imported (with numba) at the first kernel call, so
# `import minippo` stays fast
_kernels = LazyModule("minippo.nn._kernels")


# ----------------------------------------------------------------------------------------------
# linear: out = x @ w + b
# ----------------------------------------------------------------------------------------------

def linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None):
    """Affine map over the last axis.

    Parameters
    ----------
    x : (..., Din)
    w : (Din, Dout)   (stored input-major, so the forward is a plain ``x @ w``)
    b : (Dout,) or None

    Returns
    -------
    out : (..., Dout)
    cache : (x, w, has_bias)
    """
    # one 2-D BLAS call over all rows (a 3-D ``x @ w`` would loop over the batch axis)
    out = (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[1])   # (..., Dout)
    if b is not None:
        out += b
    return out, (x, w, b is not None)


def linear_backward(dout: np.ndarray, cache):
    """Backward of ``out = x @ w + b``.

    Returns ``(dx, dw, db)``; ``db`` is None when the layer has no bias.
    """
    x, w, has_bias = cache
    d_out2 = dout.reshape(-1, dout.shape[-1])     # (N, Dout)
    x2 = x.reshape(-1, x.shape[-1])               # (N, Din)
    # out = x @ w  ->  dx = dout @ w.T,  dw = x.T @ dout
    dx = (d_out2 @ w.T).reshape(x.shape)          # (..., Din)
    dw = x2.T @ d_out2                            # (Din, Dout)
    # out += b  ->  db = sum of dout over every row
    db = d_out2.sum(axis=0) if has_bias else None  # (Dout,)
    return dx, dw, db


# ----------------------------------------------------------------------------------------------
# tanh: out = tanh(x)       (the nonlinearity of the classic-control MLP)
# ----------------------------------------------------------------------------------------------

def tanh_forward(x: np.ndarray):
    out = np.tanh(x)
    return out, out


def tanh_backward(dout: np.ndarray, cache):
    out = cache
    # out = tanh(x)  ->  d tanh(x)/dx = 1 - tanh(x)^2
    return dout * (1.0 - out * out)


# ----------------------------------------------------------------------------------------------
# embedding: out = w[idx]       (token and position embeddings)
# ----------------------------------------------------------------------------------------------

def embedding_forward(idx: np.ndarray, w: np.ndarray):
    """Look up rows of an embedding table.

    Parameters
    ----------
    idx : integer array of any shape (e.g. (B, T)), values in [0, V)
    w : (V, C)

    Returns
    -------
    out : idx.shape + (C,)
    cache : (idx, w.shape)
    """
    out = w[idx]                                  # (..., C)
    return out, (idx, w.shape)


def embedding_backward(dout: np.ndarray, cache):
    """Backward of ``out = w[idx]``: returns ``dw`` only (an integer input has no gradient).

    A row of ``w`` that is looked up several times receives the *sum* of the gradients of all its
    uses: ``np.add.at`` accumulates over repeated indices (plain ``dw[idx] += dout`` would keep only
    one of them).
    """
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.embedding_backward(dout, cache)
    idx, w_shape = cache
    dw = np.zeros(w_shape, dtype=dout.dtype)      # (V, C)
    # out = w[idx]  ->  dw[idx[n]] += dout[n] for every n, repeats accumulated
    np.add.at(dw, idx.reshape(-1), dout.reshape(-1, w_shape[1]))
    return dw


# ----------------------------------------------------------------------------------------------
# layernorm: out = (x - mean) / sqrt(var + eps) * w + b      over the last axis
# ----------------------------------------------------------------------------------------------

def layernorm_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5):
    """Layer normalisation over the last axis (Ba, Kiros & Hinton 2016, arXiv:1607.06450).

    Parameters
    ----------
    x : (..., C)
    w, b : (C,) gain and bias
    eps : added to the (biased) variance

    Returns
    -------
    out : (..., C)
    cache : (xhat, rstd, w)
    """
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.layernorm_forward(x, w, b, eps)
    mean = x.mean(axis=-1, keepdims=True)         # (..., 1)
    xc = x - mean                                 # (..., C)
    var = np.mean(xc * xc, axis=-1, keepdims=True)  # (..., 1) biased variance
    rstd = 1.0 / np.sqrt(var + eps)               # (..., 1)
    xhat = xc * rstd                              # (..., C) zero mean, unit variance
    out = xhat * w + b                            # (..., C)
    return out, (xhat, rstd, w)


def layernorm_backward(dout: np.ndarray, cache):
    """Backward of LayerNorm; returns ``(dx, dw, db)``.

    With ``xhat = (x - mean) * rstd`` and ``g = dout * w``, the gradient through the mean and the
    variance collapses to ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`` (means over C).
    """
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.layernorm_backward(dout, cache)
    xhat, rstd, w = cache
    C = xhat.shape[-1]
    dout2, xhat2 = dout.reshape(-1, C), xhat.reshape(-1, C)   # (N, C)
    # out = xhat * w + b  ->  dw = sum_rows dout * xhat,  db = sum_rows dout,  dxhat = dout * w
    dw = np.sum(dout2 * xhat2, axis=0)            # (C,)
    db = dout2.sum(axis=0)                        # (C,)
    g = dout * w                                  # (..., C) = dxhat
    # xhat = (x - mean(x)) / sqrt(var(x) + eps)  ->  the projection below
    dx = rstd * (g - g.mean(axis=-1, keepdims=True)
                 - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, dw, db


# ----------------------------------------------------------------------------------------------
# gelu (tanh form, GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
# ----------------------------------------------------------------------------------------------

GELU_K = math.sqrt(2.0 / math.pi)   # sqrt(2/pi)
GELU_A = 0.044715


def gelu_forward(x: np.ndarray):
    """GELU, tanh approximation (Hendrycks & Gimpel 2016, arXiv:1606.08415, as in GPT-2).

    Returns ``(out, cache)`` with ``cache = (x, t)``, ``t = tanh(sqrt(2/pi) (x + 0.044715 x^3))``.
    """
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.gelu_forward(x)
    u = GELU_K * (x + GELU_A * (x * x * x))       # (...) the tanh argument
    t = np.tanh(u)
    out = 0.5 * x * (1.0 + t)
    return out, (x, t)


def gelu_backward(dout: np.ndarray, cache):
    """Backward of the tanh-form GELU.

    out = 0.5 x (1 + t),  t = tanh(u),  u = k (x + a x^3)
    d out/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2)
    """
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.gelu_backward(dout, cache)
    x, t = cache
    dudx = GELU_K * (1.0 + 3.0 * GELU_A * (x * x))
    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dudx)


# ----------------------------------------------------------------------------------------------
# masked softmax (attention weights): att = softmax(scale * s + M), M = 0 if allowed else -inf
# ----------------------------------------------------------------------------------------------

def masked_softmax_forward(scores: np.ndarray, allowed: np.ndarray, scale: float):
    """Softmax over the last axis of ``scale * scores`` restricted to the ``allowed`` entries.

    Parameters
    ----------
    scores : (B, H, T, S) raw attention scores ``q @ k.T``; overwritten (the result is written in
        place)
    allowed : bool (B, T, S), broadcast over the heads; every row must allow at least one entry
    scale : 1 / sqrt(hs)

    Returns
    -------
    att : (B, H, T, S), the same array as ``scores``; 0 exactly where not allowed
    cache : att
    """
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.masked_softmax_forward(scores, allowed, scale)
    att = scores
    att *= scale
    # M = -inf where not allowed: exp(-inf) = 0 exactly, so those keys get weight 0
    np.copyto(att, -np.inf, where=~allowed[:, None])
    # softmax over the keys, stabilised by the row max
    att -= att.max(axis=-1, keepdims=True)
    np.exp(att, out=att)
    att /= att.sum(axis=-1, keepdims=True)        # (B, H, T, S) rows sum to 1
    return att, att


def masked_softmax_backward(datt: np.ndarray, cache, scale: float):
    """Backward of :func:`masked_softmax_forward` with respect to the raw ``scores``.

    ``datt`` is overwritten and returned as ``dscores``:
    att = softmax(z), z = scale * scores  ->  dz = att * (datt - sum_j datt_j att_j),
    dscores = scale * dz
    (0 where not allowed, because att is 0 there).
    """
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.masked_softmax_backward(datt, cache, scale)
    att = cache
    ds = datt
    ds -= np.sum(datt * att, axis=-1, keepdims=True)
    ds *= att
    ds *= scale
    return ds


# ----------------------------------------------------------------------------------------------
# softmax cross-entropy with a mask: loss = sum(mask * -log softmax(logits)[target]) / sum(mask)
# ----------------------------------------------------------------------------------------------

def softmax_cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, mask: np.ndarray):
    """Mean negative log-likelihood of ``targets`` over the positions where ``mask == 1``.

    Parameters
    ----------
    logits : (..., V) unnormalised scores, e.g. (B, T, V)
    targets : (...) integer ids in [0, V), e.g. (B, T)
    mask : (...) 0/1; padding (mask 0) never enters the mean

    Returns
    -------
    loss : float, ``sum(mask * nll) / sum(mask)`` (the token-level masked mean)
    cache : (probs, targets, mask, n, logits' shape), flattened to rows: what the backward needs

    ``mask`` must contain at least one 1 (a mean over zero tokens is undefined).
    """
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.softmax_cross_entropy_forward(logits, targets, mask)
    n = float(np.sum(mask))
    if n == 0:
        raise ValueError("`mask` must contain at least one 1: the loss is a mean over mask == 1 "
                         "tokens")
    V = logits.shape[-1]
    z = logits.reshape(-1, V)                     # (N, V)
    t = targets.reshape(-1)                       # (N,)
    # log softmax, stabilised by subtracting the row max
    zmax = z.max(axis=-1, keepdims=True)          # (N, 1)
    probs = np.exp(z - zmax)                      # (N, V) unnormalised
    sumexp = probs.sum(axis=-1, keepdims=True)    # (N, 1)
    probs /= sumexp
    logz = (np.log(sumexp) + zmax)[:, 0]          # (N,) log sum exp
    nll = logz - z[np.arange(z.shape[0]), t]      # (N,) -log p(target)
    m = mask.reshape(-1).astype(logits.dtype)     # (N,)
    loss = float(np.dot(nll.astype(np.float64), m.astype(np.float64)) / n)
    return loss, (probs, t, m, n, logits.shape)


def softmax_cross_entropy_backward(dloss: float, cache):
    """Backward of the masked mean cross-entropy:
    ``dlogits = dloss * mask * (softmax - onehot) / n``."""
    if kernels.ON:                   # the same layer, compiled: nn/_kernels.py
        return _kernels.softmax_cross_entropy_backward(dloss, cache)
    probs, t, m, n, shape = cache
    dlogits = probs.copy()                        # (N, V)
    # nll = logsumexp(z) - z[target]  ->  d nll/dz = softmax(z) - onehot(target)
    dlogits[np.arange(dlogits.shape[0]), t] -= 1.0
    # loss = sum(mask * nll) / n
    dlogits *= (m * (dloss / n))[:, None].astype(dlogits.dtype)
    return dlogits.reshape(shape)
