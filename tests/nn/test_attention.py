"""Causal multi-head self-attention with a padding mask: values against a per-head loop, gradients
against finite differences (float64, tol 1e-7), padding behaviour, and the KV-cache step."""
import math

import numpy as np
import pytest

from minippo.nn.attention import RealTokens, attention_allowed, attention_backward, attention_forward
from minippo.nn.gradcheck import assert_gradients

# one row of each kind: no padding, left padding, right padding, both
ATTN_MASK = np.array([[1, 1, 1, 1, 1],
                      [0, 0, 1, 1, 1],
                      [1, 1, 1, 0, 0],
                      [0, 1, 1, 1, 0]])
B, T, C, H = 4, 5, 8, 2


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((B, T, C)), "w_attn": rng.standard_normal((C, 3 * C)) * 0.5,
            "b_attn": rng.standard_normal(3 * C) * 0.1, "w_proj": rng.standard_normal((C, C)) * 0.5,
            "b_proj": rng.standard_normal(C) * 0.1}


def _forward(p, allowed, tokens=RealTokens(None, B, T)):
    """Attention on the grid x (B, T, C): every position a row (``tokens`` None rows), or only the
    real ones (padding-free rows); returns out on the grid (zeros at rows not computed)."""
    out, cache = attention_forward(tokens.gather(p["x"]), p["w_attn"], p["b_attn"], p["w_proj"],
                                   p["b_proj"], H, allowed, tokens)
    return tokens.scatter(out), cache


def _backward(dout, cache):
    """attention_backward from d out on the grid (B, T, C); dx back on the grid."""
    dx, *dparams = attention_backward(cache.tokens.gather(dout), cache)
    return (cache.tokens.scatter(dx), *dparams)


def _loop_reference(p, attn_mask):
    """Attention written as explicit loops over batch, head and query (independent of the vectorised code)."""
    hs = C // H
    qkv = p["x"] @ p["w_attn"] + p["b_attn"]
    y = np.zeros((B, T, C))
    for b in range(B):
        for h in range(H):
            q = qkv[b, :, h * hs:(h + 1) * hs]
            k = qkv[b, :, C + h * hs:C + (h + 1) * hs]
            v = qkv[b, :, 2 * C + h * hs:2 * C + (h + 1) * hs]
            for i in range(T):
                keys = [j for j in range(i + 1) if attn_mask[b, j] == 1 or j == i]
                s = np.array([q[i] @ k[j] / math.sqrt(hs) for j in keys])
                w = np.exp(s - s.max())
                w /= w.sum()
                y[b, i, h * hs:(h + 1) * hs] = sum(wj * v[j] for wj, j in zip(w, keys))
    return y @ p["w_proj"] + p["b_proj"]


def test_allowed_matrix():
    allowed = attention_allowed(ATTN_MASK)
    assert allowed.shape == (B, T, T)
    # row 1 (two left pads): query 3 sees keys 2 and 3 only; pad query 0 sees only itself
    np.testing.assert_array_equal(allowed[1, 3], [0, 0, 1, 1, 0])
    np.testing.assert_array_equal(allowed[1, 0], [1, 0, 0, 0, 0])
    # row 2 (right pads): pad query 4 sees the real prefix and itself, never pad key 3
    np.testing.assert_array_equal(allowed[2, 4], [1, 1, 1, 0, 1])
    # nothing above the diagonal
    assert not np.any(allowed & ~np.tri(T, dtype=bool))


def test_forward_matches_loop_reference():
    p = _params()
    out, _ = _forward(p, attention_allowed(ATTN_MASK))
    np.testing.assert_allclose(out, _loop_reference(p, ATTN_MASK), rtol=1e-12, atol=1e-12)


def test_gradients_with_padding_mask():
    p = _params(1)
    allowed = attention_allowed(ATTN_MASK)
    R = np.random.default_rng(2).standard_normal((B, T, C))
    out, cache = _forward(p, allowed)
    dx, dwa, dba, dwp, dbp = _backward(R, cache)
    grads = {"x": dx, "w_attn": dwa, "b_attn": dba, "w_proj": dwp, "b_proj": dbp}
    # the loss includes padded positions too: backward is the exact gradient of the forward
    assert_gradients(lambda: float(np.sum(_forward(p, allowed)[0] * R)), p, grads, tol=1e-7)


def test_padding_gets_no_gradient_from_real_positions():
    p = _params(3)
    allowed = attention_allowed(ATTN_MASK)
    R = np.random.default_rng(4).standard_normal((B, T, C)) * ATTN_MASK[..., None]   # loss on real tokens only
    out, cache = _forward(p, allowed)
    dx = _backward(R, cache)[0]
    assert np.all(dx[ATTN_MASK == 0] == 0.0)
    assert np.all(np.isfinite(out))
    # and the real outputs do not change whatever sits at the padded positions
    p2 = dict(p, x=np.where(ATTN_MASK[..., None] == 1, p["x"], 100.0))
    out2, _ = _forward(p2, allowed)
    np.testing.assert_allclose(out2[ATTN_MASK == 1], out[ATTN_MASK == 1], rtol=1e-12, atol=1e-12)


def test_decode_step_matches_full_forward():
    p = _params(5)
    allowed = attention_allowed(ATTN_MASK)
    full, _ = _forward(p, allowed)
    hs = C // H
    k_cache, v_cache = np.zeros((B, H, T, hs)), np.zeros((B, H, T, hs))
    for t in range(T):
        allowed_t = ATTN_MASK[:, None, :t + 1] != 0          # (B, 1, t + 1) real keys so far
        allowed_t[..., t] = True                             # and itself
        out, _ = attention_forward(p["x"][:, t], p["w_attn"], p["b_attn"], p["w_proj"], p["b_proj"],
                                   H, allowed_t, RealTokens(None, B, 1), kv=(k_cache, v_cache, t))
        np.testing.assert_allclose(out, full[:, t], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(dtype):
    p = {k: v.astype(dtype) for k, v in _params(6).items()}
    out, cache = _forward(p, attention_allowed(ATTN_MASK))
    assert out.dtype == dtype
    assert all(g.dtype == dtype for g in _backward(out, cache))


def test_padding_free_rows_match_the_grid():
    """On the N real rows only (the padded rows never computed): the same real outputs as the
    whole-grid call, and the exact gradient of its own forward (float64 central differences)."""
    p = _params(7)
    allowed = attention_allowed(ATTN_MASK)
    real = RealTokens(np.flatnonzero(ATTN_MASK), B, T)
    full, _ = _forward(p, allowed)
    out, cache = _forward(p, allowed, real)
    assert cache.c_attn[0].shape == (int(ATTN_MASK.sum()), C)          # q, k, v from N rows
    np.testing.assert_allclose(out[ATTN_MASK == 1], full[ATTN_MASK == 1], rtol=1e-12, atol=1e-12)
    assert np.all(out[ATTN_MASK == 0] == 0.0)
    R = np.random.default_rng(8).standard_normal((B, T, C))
    dx, dwa, dba, dwp, dbp = _backward(R, cache)
    grads = {"x": dx, "w_attn": dwa, "b_attn": dba, "w_proj": dwp, "b_proj": dbp}
    assert_gradients(lambda: float(np.sum(_forward(p, allowed, real)[0] * R)), p, grads, tol=1e-7)


def test_kv_cache_with_several_new_tokens_per_call_matches_full_forward():
    """Mutation audit: the KV-cache path must write this call's T keys at slots t .. t + T - 1 and attend
    to slots 0 .. t + T - 1; a cache attended only up to slot t (``k_cache[:, :, :t + 1]``, right for
    decoding's T = 1 only) fails here. The prompt is fed in chunks of 2 and 3 tokens (float64: the
    same products as the full pass, summed in another order, so rtol/atol 1e-12)."""
    p = _params(9)
    allowed = attention_allowed(ATTN_MASK)
    full, _ = _forward(p, allowed)
    hs = C // H
    k_cache, v_cache = np.zeros((B, H, T, hs)), np.zeros((B, H, T, hs))
    for t, n in ((0, 2), (2, 3)):
        allowed_t = allowed[:, t:t + n, :t + n]            # the new queries' rows of the full mask
        out, _ = attention_forward(p["x"][:, t:t + n].reshape(B * n, C), p["w_attn"], p["b_attn"],
                                   p["w_proj"], p["b_proj"], H, allowed_t, RealTokens(None, B, n),
                                   kv=(k_cache, v_cache, t))
        np.testing.assert_allclose(out.reshape(B, n, C), full[:, t:t + n], rtol=1e-12, atol=1e-12)
