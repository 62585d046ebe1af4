"""Causal multi-head self-attention with a padding mask (forward with or without a KV cache,
backward), and the pre-LN transformer block built around it: ``x += attn(ln_1(x));
x += mlp(ln_2(x))``.

Legend: B batch, T tokens (queries), S keys (S = T in a full pass, S = tokens so far when
decoding), C channels, H heads, hs = C / H head size.

Scaled dot-product attention (Vaswani et al. 2017, arXiv:1706.03762, eq. (1)), per head::

    att = softmax(q @ k.T / sqrt(hs) + M)        M = 0 where allowed, -inf elsewhere
    y   = att @ v

Which key ``j`` may query ``i`` look at? (``attn_mask``: 1 = real token, 0 = padding)::

    allowed[b, i, j] = (j <= i) and (attn_mask[b, j] == 1 or j == i)

- ``j <= i``: causal, no peeking at the future.
- ``attn_mask[b, j] == 1``: padded keys are never attended to, so a real token's output does
  not depend on the padding (left padding of prompts, right padding of responses, or both).
- ``or j == i``: a *padded query* also sees itself, so every softmax row has at least one finite
  entry and padded positions produce finite numbers instead of NaN. Nothing real depends on a
  padded position (it is never an allowed key of another query), so its output only matters if
  the caller puts it into a loss: callers mask padded positions out of every loss.

Padding-free rows (``RealTokens``): only attention mixes positions. Every other layer of a block
(LayerNorm, the linears, GELU, the residual adds) works row by row, so TinyGPT runs them on the N
real tokens only, an (N, C) array, and attention puts its q, k, v back on the (B, T) grid
(``scatter``, zeros at the padding) and takes the real rows of its output (``gather``). The padded
rows, up to half of a batch of short sentences, cost no linear layer's matrix product (attention's
own products still run on the whole (B, H, T, S) grid).

Layer API as in ``layers.py``: ``out, cache = attention_forward(...)``,
``dx, *dparams = attention_backward(dout, cache)``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from minippo.nn.layers import (gelu_backward, gelu_forward, layernorm_backward, layernorm_forward,
                               linear_backward, linear_forward, masked_softmax_backward,
                               masked_softmax_forward)

LN_EPS = 1e-5   # LayerNorm's epsilon (GPT-2)


class RealTokens(NamedTuple):
    """Where the N real tokens of a (B, T) batch sit: ``rows`` (N,) their flat indices ``b * T + t``
    in increasing order, or None when every position is real (N = B T)."""
    rows: np.ndarray | None
    B: int
    T: int

    def gather(self, a: np.ndarray) -> np.ndarray:
        """(B, T, ...) -> (N, ...): the real tokens' rows (a reshape when every position is
        real)."""
        a = a.reshape(self.B * self.T, *a.shape[2:])
        return a if self.rows is None else a[self.rows]

    def scatter(self, a: np.ndarray) -> np.ndarray:
        """(N, ...) -> (B, T, ...): back on the grid, zeros at the padding (the backward of
        ``gather``, and ``gather`` is the backward of this)."""
        if self.rows is None:
            return a.reshape(self.B, self.T, *a.shape[1:])
        out = np.zeros((self.B * self.T, *a.shape[1:]), dtype=a.dtype)
        out[self.rows] = a
        return out.reshape(self.B, self.T, *a.shape[1:])


class AttentionCache(NamedTuple):
    """What :func:`attention_backward` needs: the caches of the two linear layers, and q (B, H, T,
    hs), k, v (B, H, S, hs) (the keys and values attended to, which a KV cache stores) and att
    (B, H, T, S) of the core, and the RealTokens of the call."""
    c_attn: tuple
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    att: np.ndarray
    c_proj: tuple
    tokens: RealTokens


class BlockCache(NamedTuple):
    """What :func:`block_backward` needs, one entry per sublayer of :func:`block_forward`."""
    ln_1: tuple
    attn: AttentionCache
    ln_2: tuple
    fc: tuple
    gelu: tuple
    mlp_proj: tuple


def attention_allowed(attn_mask: np.ndarray, T: int | None = None) -> np.ndarray:
    """Boolean (B, T, T) matrix: may query i attend to key j? (see the module docstring).

    ``attn_mask`` (B, T) of 0/1. The same matrix serves every head.
    """
    T = attn_mask.shape[1] if T is None else T
    causal = np.tri(T, dtype=bool)                                  # (T, T) j <= i
    key_ok = (attn_mask != 0)[:, None, :] | np.eye(T, dtype=bool)  # (B, T, T) real key or itself
    return key_ok & causal                                          # (B, T, T)


# ----------------------------------------------------------------------------------------------
# the sublayer: qkv = x W_attn + b; heads; y = softmax(q k^T / sqrt(hs) + M) v; merge;
# out = y W_proj + b
# ----------------------------------------------------------------------------------------------

def attention_forward(x: np.ndarray, w_attn: np.ndarray, b_attn: np.ndarray, w_proj: np.ndarray,
                      b_proj: np.ndarray, n_head: int, allowed: np.ndarray, tokens: RealTokens,
                      kv=None):
    """Causal multi-head self-attention (GPT-2's ``attn`` sublayer), over the whole sequence or,
    with a KV cache, over the new tokens only.

    Parameters
    ----------
    x : (N, C) the rows of the real tokens only (N = B T without padding)
    w_attn : (C, 3C), b_attn : (3C,)   the q, k, v projections side by side (``c_attn``)
    w_proj : (C, C), b_proj : (C,)     the output projection (``c_proj``)
    n_head : H, dividing C
    allowed : (B, T, S) bool: from :func:`attention_allowed` (S = T; or (1, T, T) causal only),
        or, with ``kv``, which of the S = t + T cached keys each new token may see
    kv : None, or ``(k_cache, v_cache, t)`` of a KV cache (B, H, S_max, hs) filled up to slot
        t - 1: this call's keys and values are written at slots t .. t + T - 1 (in place) and the
        queries attend to slots 0 .. t + T - 1 (decoding: T = 1, the numbers of row t of the
        full pass up to rounding)
    tokens : where the rows of ``x`` sit on the (B, T) grid (:class:`RealTokens`)

    Returns
    -------
    out : (N, C) like ``x``
    cache : AttentionCache; ``cache.k``, ``cache.v`` are the keys and values attended to
        (B, H, S, hs), which a KV cache stores
    """
    qkv, c_attn = linear_forward(x, w_attn, b_attn)   # (N, 3C)
    qkv = tokens.scatter(qkv)                         # (B, T, 3C), zeros at the padding
    B, T, C = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
    hs = C // n_head
    # split the heads: three (B, H, T, hs) views of qkv, no copy
    q, k, v = qkv.reshape(B, T, 3, n_head, hs).transpose(2, 0, 3, 1, 4)
    if kv is not None:                                # append to the cache, attend to all of it
        k_cache, v_cache, t = kv
        k_cache[:, :, t:t + T], v_cache[:, :, t:t + T] = k, v
        k, v = k_cache[:, :, :t + T], v_cache[:, :, :t + T]      # (B, H, t + T, hs)
    scores = q @ k.swapaxes(-1, -2)               # (B, H, T, S) one BLAS call per (batch, head)
    # att = softmax(scores / sqrt(hs) + M), M = -inf where not allowed (in place on scores)
    att, _ = masked_softmax_forward(scores, allowed, 1.0 / math.sqrt(hs))
    # y = att @ v, written into memory laid out (B, T, H, hs): merging the heads is a reshape
    y = np.empty((B, T, n_head, hs), dtype=v.dtype)
    np.matmul(att, v, out=y.transpose(0, 2, 1, 3))                      # (B, H, T, hs) view
    y = tokens.gather(y.reshape(B, T, C))                 # merge the heads; the real rows (N, C)
    out, c_proj = linear_forward(y, w_proj, b_proj)                    # (N, C)
    return out, AttentionCache(c_attn, q, k, v, att, c_proj, tokens)


def attention_backward(dout: np.ndarray, cache):
    """Backward of :func:`attention_forward`; returns ``(dx, dw_attn, db_attn, dw_proj,
    db_proj)``."""
    c_attn, q, k, v, att, c_proj, tokens = cache       # AttentionCache
    # out = merge(y) @ w_proj + b_proj
    dy, dw_proj, db_proj = linear_backward(dout, c_proj)   # (N, C)
    B, H, T, hs = q.shape
    C = H * hs
    dy = tokens.scatter(dy)                            # y = gather(y_grid): (B, T, C), 0 at padding
    dy = dy.reshape(B, T, H, hs).transpose(0, 2, 1, 3)      # (B, H, T, hs) = d merge(y)
    # q, k, v are the heads of qkv: their gradients go side by side into one (B, T, 3C) array,
    # written by the products below through three (B, H, T, hs) views (as y in the forward)
    dqkv = np.empty((B, T, 3, H, hs), dtype=dy.dtype)
    dq, dk, dv = dqkv.transpose(2, 0, 3, 1, 4)
    # y = att @ v  ->  datt = dy @ v.T,  dv = att.T @ dy
    datt = dy @ v.swapaxes(-1, -2)                    # (B, H, T, S)
    np.matmul(att.swapaxes(-1, -2), dy, out=dv)       # (B, H, S, hs)
    # att = softmax(scores / sqrt(hs) + M)  ->  dscores (in place on datt)
    ds = masked_softmax_backward(datt, att, 1.0 / math.sqrt(hs))
    # scores = q @ k.T  ->  dq = dscores @ k,  dk = dscores.T @ q
    np.matmul(ds, k, out=dq)                          # (B, H, T, hs)
    np.matmul(ds.swapaxes(-1, -2), q, out=dk)         # (B, H, S, hs)
    dqkv = tokens.gather(dqkv.reshape(B, T, 3 * C))   # qkv_grid = scatter(qkv): (N, 3C)
    # qkv = x @ w_attn + b_attn
    dx, dw_attn, db_attn = linear_backward(dqkv, c_attn)
    return dx, dw_attn, db_attn, dw_proj, db_proj


# ----------------------------------------------------------------------------------------------
# one transformer block (pre-LN): x += attn(ln_1(x)); x += mlp(ln_2(x))
# ----------------------------------------------------------------------------------------------

def block_forward(x, p, prefix, n_head, allowed, tokens, kv=None):
    """One pre-LN block on the rows ``x`` (N, C) of the real tokens, whose places on the (B, T)
    grid ``tokens`` holds; ``p[prefix + name]`` are its parameters, ``kv`` this layer's KV cache
    (:func:`attention_forward`). Returns ``(x, cache)``."""
    h, c_ln1 = layernorm_forward(x, p[prefix + "ln_1.w"], p[prefix + "ln_1.b"], LN_EPS)
    a, c_attn = attention_forward(h, p[prefix + "attn.c_attn.w"], p[prefix + "attn.c_attn.b"],
                                  p[prefix + "attn.c_proj.w"], p[prefix + "attn.c_proj.b"],
                                  n_head, allowed, tokens, kv)
    x = x + a                                                        # residual 1
    h, c_ln2 = layernorm_forward(x, p[prefix + "ln_2.w"], p[prefix + "ln_2.b"], LN_EPS)
    h, c_fc = linear_forward(h, p[prefix + "mlp.c_fc.w"], p[prefix + "mlp.c_fc.b"])   # (N, 4C)
    h, c_gelu = gelu_forward(h)
    m, c_mproj = linear_forward(h, p[prefix + "mlp.c_proj.w"],
                                p[prefix + "mlp.c_proj.b"])                   # (N, C)
    x = x + m                                                        # residual 2
    return x, BlockCache(c_ln1, c_attn, c_ln2, c_fc, c_gelu, c_mproj)


def block_backward(dx, cache, prefix, grads):
    """Backward of :func:`block_forward`: fills ``grads[prefix + name]`` and returns
    d loss / d x_in."""
    c_ln1, c_attn, c_ln2, c_fc, c_gelu, c_mproj = cache
    # x = x + m: the residual passes dx through unchanged, and dm = dx
    # m = h @ mlp.c_proj.w + b
    dh, grads[prefix + "mlp.c_proj.w"], grads[prefix + "mlp.c_proj.b"] = linear_backward(
        dx, c_mproj)
    # h = gelu(h)
    dh = gelu_backward(dh, c_gelu)
    # h = ln_2(x) @ mlp.c_fc.w + b
    dh, grads[prefix + "mlp.c_fc.w"], grads[prefix + "mlp.c_fc.b"] = linear_backward(dh, c_fc)
    # h = ln_2(x)
    dh, grads[prefix + "ln_2.w"], grads[prefix + "ln_2.b"] = layernorm_backward(dh, c_ln2)
    dx = dx + dh                                       # x fed the skip and ln_2: summed
    # x = x + attn(ln_1(x))
    (dh, grads[prefix + "attn.c_attn.w"], grads[prefix + "attn.c_attn.b"],
     grads[prefix + "attn.c_proj.w"], grads[prefix + "attn.c_proj.b"]) = attention_backward(
        dx, c_attn)
    dh, grads[prefix + "ln_1.w"], grads[prefix + "ln_1.b"] = layernorm_backward(dh, c_ln1)
    return dx + dh                                     # x fed the skip and ln_1: summed
