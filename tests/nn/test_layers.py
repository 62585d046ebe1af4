"""Gradient checks of every layer on its own (float64, central differences, tol 1e-7).

Each layer of minippo.nn.layers is checked on both paths of the switch of minippo.kernels: its
NumPy body and, for the elementwise layers, its numba twin (nn/_kernels.py): a loss ``sum(out * R)``
with a random ``R`` makes ``R`` the upstream gradient, so ``backward(R)`` must equal the finite
differences of the loss.
"""
import math

import numpy as np
import pytest

from minippo.nn import layers
from minippo.nn.gradcheck import assert_gradients
from tests.helpers import KernelPath

TOL = 1e-7
NUMPY, KERNEL = KernelPath(layers, False), KernelPath(layers, True)
IMPLS = [pytest.param(NUMPY, id="numpy"), pytest.param(KERNEL, id="kernel")]


def _rng(seed=0):
    return np.random.default_rng(seed)


def test_linear_gradients():
    rng = _rng()
    p = {"x": rng.standard_normal((3, 4, 5)), "w": rng.standard_normal((5, 6)), "b": rng.standard_normal(6)}
    R = rng.standard_normal((3, 4, 6))
    out, cache = layers.linear_forward(p["x"], p["w"], p["b"])
    np.testing.assert_allclose(out, np.einsum("btd,de->bte", p["x"], p["w"]) + p["b"], rtol=1e-12)
    dx, dw, db = layers.linear_backward(R, cache)
    f = lambda: float(np.sum(layers.linear_forward(p["x"], p["w"], p["b"])[0] * R))
    assert_gradients(f, p, {"x": dx, "w": dw, "b": db}, tol=TOL)


def test_linear_without_bias():
    rng = _rng(1)
    p = {"x": rng.standard_normal((7, 3)), "w": rng.standard_normal((3, 2))}
    R = rng.standard_normal((7, 2))
    out, cache = layers.linear_forward(p["x"], p["w"], None)
    dx, dw, db = layers.linear_backward(R, cache)
    assert db is None
    f = lambda: float(np.sum(layers.linear_forward(p["x"], p["w"], None)[0] * R))
    assert_gradients(f, p, {"x": dx, "w": dw}, tol=TOL)


def test_tanh_gradients():
    rng = _rng(2)
    p = {"x": rng.standard_normal((4, 5))}
    R = rng.standard_normal((4, 5))
    out, cache = layers.tanh_forward(p["x"])
    f = lambda: float(np.sum(layers.tanh_forward(p["x"])[0] * R))
    assert_gradients(f, p, {"x": layers.tanh_backward(R, cache)}, tol=TOL)


@pytest.mark.parametrize("K", IMPLS)
def test_embedding_gradients_with_repeated_ids(K):
    rng = _rng(3)
    idx = np.array([[1, 3, 1, 1], [0, 3, 5, 1]])          # id 1 four times, id 3 twice, 2 and 4 never
    p = {"w": rng.standard_normal((6, 5))}
    R = rng.standard_normal((2, 4, 5))
    out, cache = layers.embedding_forward(idx, p["w"])
    np.testing.assert_array_equal(out[0, 2], p["w"][1])
    dw = K.embedding_backward(R, cache)
    np.testing.assert_allclose(dw[1], R[0, 0] + R[0, 2] + R[0, 3] + R[1, 3], rtol=1e-12)
    np.testing.assert_array_equal(dw[[2, 4]], 0.0)
    f = lambda: float(np.sum(layers.embedding_forward(idx, p["w"])[0] * R))
    assert_gradients(f, p, {"w": dw}, tol=TOL)


@pytest.mark.parametrize("K", IMPLS)
def test_layernorm_gradients(K):
    rng = _rng(4)
    p = {"x": rng.standard_normal((3, 4, 8)) * 2 + 1, "w": rng.standard_normal(8), "b": rng.standard_normal(8)}
    R = rng.standard_normal((3, 4, 8))
    out, cache = K.layernorm_forward(p["x"], p["w"], p["b"])
    xhat = (p["x"] - p["x"].mean(-1, keepdims=True)) / np.sqrt(p["x"].var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, xhat * p["w"] + p["b"], rtol=1e-10, atol=1e-12)
    dx, dw, db = K.layernorm_backward(R, cache)
    f = lambda: float(np.sum(K.layernorm_forward(p["x"], p["w"], p["b"])[0] * R))
    assert_gradients(f, p, {"x": dx, "w": dw, "b": db}, tol=TOL)


@pytest.mark.parametrize("K", IMPLS)
def test_gelu_gradients(K):
    rng = _rng(5)
    p = {"x": rng.standard_normal((6, 7)) * 2}
    R = rng.standard_normal((6, 7))
    out, cache = K.gelu_forward(p["x"])
    x = p["x"]
    np.testing.assert_allclose(out, 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
                               rtol=1e-12, atol=1e-15)
    f = lambda: float(np.sum(K.gelu_forward(p["x"])[0] * R))
    assert_gradients(f, p, {"x": K.gelu_backward(R, cache)}, tol=TOL)


def _allowed(B, T, S, rng):
    allowed = rng.random((B, T, S)) < 0.6
    allowed[:, np.arange(T), np.arange(T)] = True      # every row keeps at least one key
    return allowed


@pytest.mark.parametrize("K", IMPLS)
def test_masked_softmax_gradients(K):
    rng = _rng(6)
    B, H, T = 2, 3, 5
    allowed = _allowed(B, T, T, rng)
    scale = 0.37
    p = {"s": rng.standard_normal((B, H, T, T))}
    R = rng.standard_normal((B, H, T, T))
    att, cache = K.masked_softmax_forward(p["s"].copy(), allowed, scale)
    # independent check: exp over the allowed entries, normalised per row
    e = np.where(allowed[:, None], np.exp(scale * p["s"]), 0.0)
    np.testing.assert_allclose(att, e / e.sum(-1, keepdims=True), rtol=1e-12, atol=1e-15)
    assert np.all(att[~np.broadcast_to(allowed[:, None], att.shape)] == 0.0)
    ds = K.masked_softmax_backward(R.copy(), cache, scale)
    f = lambda: float(np.sum(K.masked_softmax_forward(p["s"].copy(), allowed, scale)[0] * R))
    assert_gradients(f, p, {"s": ds}, tol=TOL)


@pytest.mark.parametrize("K", IMPLS)
def test_softmax_cross_entropy_gradients_with_mask(K):
    rng = _rng(7)
    B, T, V = 3, 4, 7
    p = {"z": rng.standard_normal((B, T, V)) * 3}
    targets = rng.integers(0, V, (B, T))
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=float)
    loss, cache = K.softmax_cross_entropy_forward(p["z"], targets, mask)
    # independent check: a loop over the valid tokens
    nll = [np.log(np.exp(p["z"][b, t]).sum()) - p["z"][b, t, targets[b, t]]
           for b in range(B) for t in range(T) if mask[b, t]]
    assert loss == pytest.approx(np.mean(nll), rel=1e-12)
    dz = K.softmax_cross_entropy_backward(1.0, cache)
    assert np.all(dz[mask == 0] == 0.0)
    f = lambda: K.softmax_cross_entropy_forward(p["z"], targets, mask)[0]
    assert_gradients(f, p, {"z": dz}, tol=TOL)
    # an upstream scale multiplies the gradient
    np.testing.assert_allclose(K.softmax_cross_entropy_backward(2.5, cache), 2.5 * dz, rtol=1e-12)


@pytest.mark.parametrize("K", IMPLS)
def test_softmax_cross_entropy_rejects_empty_mask(K):
    with pytest.raises(ValueError, match="`mask`"):
        K.softmax_cross_entropy_forward(np.zeros((1, 2, 3)), np.zeros((1, 2), int), np.zeros((1, 2)))


def test_layers_keep_float32():
    rng = _rng(8)
    x = rng.standard_normal((4, 8), dtype=np.float32)
    w, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    for K in (NUMPY, KERNEL):
        out, cache = K.layernorm_forward(x, w, b)
        assert out.dtype == np.float32 and K.layernorm_backward(x, cache)[0].dtype == np.float32
        out, cache = K.gelu_forward(x)
        assert out.dtype == np.float32 and K.gelu_backward(x, cache).dtype == np.float32
        loss, cache = K.softmax_cross_entropy_forward(x[None], np.zeros((1, 4), int), np.ones((1, 4)))
        assert K.softmax_cross_entropy_backward(1.0, cache).dtype == np.float32


@pytest.mark.parametrize("K", IMPLS)
def test_masked_softmax_is_stable_for_large_scores(K):
    """Mutation audit: the softmax must subtract the row max before ``exp``; without it, scores of
    about 1000 overflow (exp(1000) = inf in float64) and the row becomes inf / inf = NaN. Hand-worked:
    scores (1000, 999) give weights (1, e^-1) / (1 + e^-1); a padded key (-inf) stays exactly 0.
    float64, rtol 1e-14: a handful of roundings (exp, sum, division) of ~1.1e-16 each."""
    scores = np.array([[[[1000.0, 999.0, 5000.0], [1000.0, 999.0, 5000.0]]]])   # (1, 1, 2, 3)
    allowed = np.array([[[True, True, False], [True, False, False]]])            # (1, 2, 3)
    att, _ = K.masked_softmax_forward(scores.copy(), allowed, 1.0)
    e = math.exp(-1.0)
    np.testing.assert_allclose(att[0, 0, 0], [1 / (1 + e), e / (1 + e), 0.0], rtol=1e-14, atol=0)
    np.testing.assert_array_equal(att[0, 0, 1], [1.0, 0.0, 0.0])                 # one key: weight 1
