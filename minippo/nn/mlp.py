"""The multilayer perceptron of classic control: linear -> tanh -> ... -> linear, hand-written
backprop.

CleanRL's CartPole agent is two such networks, ``4 -> 64 -> 64 -> 2`` (actor: action logits) and
``4 -> 64 -> 64 -> 1`` (critic: the state value), each initialised orthogonally (Saxe et al. 2014)
with CleanRL's gains: sqrt(2) on hidden layers, 0.01 on the actor's output (initial policy close to
uniform), 1.0 on the critic's output; biases are zero.

Parameters are a flat dict with names ``{prefix}{i}.w (Din, Dout)`` and ``{prefix}{i}.b (Dout,)``,
i = 0 .. L-1, e.g. ``actor.0.w``; gradients are a dict with the same keys.

Legend: B rows (batch), Din / Dout features of a layer, L layers.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from minippo.checks import check_float_array, check_range
from minippo.nn.layers import linear_backward, linear_forward, tanh_backward, tanh_forward


def orthogonal(d_in: int, d_out: int, gain: float, rng: np.random.Generator,
               dtype=np.float64) -> np.ndarray:
    """A ``(d_in, d_out)`` weight with orthonormal rows or columns, times ``gain``.

    The recipe of ``torch.nn.init.orthogonal_``: QR-decompose a Gaussian matrix of shape
    ``(max, min)``, fix the signs with ``sign(diag(R))`` so the result is uniformly (Haar)
    distributed, transpose to the wanted shape. Columns are orthonormal when ``d_in >= d_out``
    (``W^T W = I``), rows when ``d_in < d_out`` (``W W^T = I``).
    """
    check_range("d_in", d_in, 1, None, integer=True)
    check_range("d_out", d_out, 1, None, integer=True)
    big, small = max(d_in, d_out), min(d_in, d_out)
    a = rng.standard_normal((big, small))             # (big, small)
    q, r = np.linalg.qr(a)                            # q: (big, small) with orthonormal columns
    q *= np.sign(np.diag(r))                          # Haar-uniform: fix the sign ambiguity of QR
    w = q if d_in >= d_out else q.T                   # (d_in, d_out)
    return np.ascontiguousarray(gain * w, dtype=dtype)


def mlp_init(sizes: Sequence[int], rng: np.random.Generator, *, out_gain: float,
             hidden_gain: float = math.sqrt(2.0), prefix: str = "",
             dtype=np.float64) -> dict[str, np.ndarray]:
    """Orthogonally initialised weights and zero biases for layer widths
    ``sizes = [Din, H, ..., Dout]``."""
    if len(sizes) < 2:
        raise ValueError(f"`sizes` needs at least an input and an output width, got {list(sizes)}")
    params = {}
    n_layers = len(sizes) - 1
    for i in range(n_layers):
        gain = out_gain if i == n_layers - 1 else hidden_gain
        params[f"{prefix}{i}.w"] = orthogonal(sizes[i], sizes[i + 1], gain, rng, dtype)
        params[f"{prefix}{i}.b"] = np.zeros(sizes[i + 1], dtype=dtype)
    return params


def mlp_num_layers(params: Mapping[str, np.ndarray], prefix: str = "") -> int:
    """L, the number of ``{prefix}{i}.w`` weights in ``params``."""
    n = 0
    while f"{prefix}{n}.w" in params:
        n += 1
    if n == 0:
        raise ValueError(f"`params` has no MLP weights named {prefix}0.w, {prefix}1.w, ...")
    return n


def mlp_forward(params: Mapping[str, np.ndarray], x: np.ndarray, prefix: str = "", *,
                check: bool = True):
    """``out = tanh(... tanh(x W_0 + b_0) ...) W_{L-1} + b_{L-1}`` (no nonlinearity on the output).

    Parameters
    ----------
    params : the dict from :func:`mlp_init`.
    x : (B, Din) inputs.
    check : validate ``x`` (the rollout loop turns this off for its tiny per-step calls).

    Returns
    -------
    out : (B, Dout)
    cache : what :func:`mlp_backward` needs.
    """
    if check:
        check_float_array("x", x, ndim=2)
    n_layers = mlp_num_layers(params, prefix)
    caches = []
    h = x                                                          # (B, Din)
    for i in range(n_layers):
        h, lin_cache = linear_forward(h, params[f"{prefix}{i}.w"], params[f"{prefix}{i}.b"])
        act_cache = None
        if i < n_layers - 1:
            h, act_cache = tanh_forward(h)                         # (B, H)
        caches.append((lin_cache, act_cache))
    return h, (prefix, caches)


def mlp_backward(dout: np.ndarray, cache):
    """Backward of :func:`mlp_forward`: ``(dx (B, Din), grads)`` with ``grads`` keyed like
    ``params``."""
    prefix, caches = cache
    grads = {}
    dh = dout                                                      # (B, Dout)
    for i in reversed(range(len(caches))):
        lin_cache, act_cache = caches[i]
        if act_cache is not None:
            # h = tanh(h_pre)
            dh = tanh_backward(dh, act_cache)
        # h_pre = h_prev @ w + b
        dh, grads[f"{prefix}{i}.w"], grads[f"{prefix}{i}.b"] = linear_backward(dh, lin_cache)
    return dh, grads
