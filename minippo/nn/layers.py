"""Elementwise and affine layers, each a forward/backward pair with no autograd.

Legend: N rows (any leading batch shape, e.g. B*T), Din / Dout features.

API (cs231n / llm.c style)::

    out, cache = name_forward(x, *params)
    dx, *dparams = name_backward(dout, cache)

``cache`` holds only what backward needs. Every backward quotes the forward line it differentiates.
Arrays keep the dtype they come in (float32 for speed, float64 for gradient checks).
"""
from __future__ import annotations

import numpy as np


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
    out = x @ w                                   # (..., Dout)
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
