"""The classic-control MLP: orthogonal init (CleanRL's gains), forward shape, hand-written backprop."""
import math

import numpy as np
import pytest

from minippo.nn.gradcheck import assert_gradients
from minippo.nn.mlp import mlp_backward, mlp_forward, mlp_init, mlp_num_layers, orthogonal


@pytest.mark.parametrize("d_in, d_out", [(4, 64), (64, 64), (64, 2), (64, 1), (1, 1)])
def test_orthogonal_init(d_in, d_out):
    w = orthogonal(d_in, d_out, gain=2.0, rng=np.random.default_rng(0))
    assert w.shape == (d_in, d_out)
    gram = w.T @ w if d_in >= d_out else w @ w.T                   # the smaller Gram matrix
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(d_in, d_out)), atol=1e-12)
    np.testing.assert_array_equal(w, orthogonal(d_in, d_out, 2.0, np.random.default_rng(0)))


def test_mlp_init_cleanrl_gains():
    p = mlp_init([4, 64, 64, 2], np.random.default_rng(1), out_gain=0.01, prefix="actor.")
    assert sorted(p) == ["actor.0.b", "actor.0.w", "actor.1.b", "actor.1.w", "actor.2.b", "actor.2.w"]
    assert mlp_num_layers(p, "actor.") == 3
    # singular values = gain: sqrt(2) on hidden layers, out_gain on the output
    for name, gain in [("actor.0.w", math.sqrt(2)), ("actor.1.w", math.sqrt(2)), ("actor.2.w", 0.01)]:
        np.testing.assert_allclose(np.linalg.svd(p[name], compute_uv=False), gain, rtol=1e-12)
    assert all(not p[f"actor.{i}.b"].any() for i in range(3))
    # an output gain of 0.01 makes the initial policy almost uniform
    logits, _ = mlp_forward(p, np.random.default_rng(2).standard_normal((8, 4)), "actor.")
    assert logits.shape == (8, 2) and np.abs(logits).max() < 0.1


def test_forward_matches_a_direct_formula():
    rng = np.random.default_rng(3)
    p = mlp_init([3, 5, 4, 2], rng, out_gain=1.0)
    for k in p:
        p[k] = p[k] + 0.1 * rng.standard_normal(p[k].shape)           # nonzero biases too
    x = rng.standard_normal((6, 3))
    out, _ = mlp_forward(p, x)
    h = np.tanh(np.tanh(x @ p["0.w"] + p["0.b"]) @ p["1.w"] + p["1.b"])
    np.testing.assert_allclose(out, h @ p["2.w"] + p["2.b"], rtol=1e-14)


@pytest.mark.parametrize("sizes", [[4, 64, 64, 2], [4, 64, 64, 1], [3, 7, 1]])
def test_gradients(sizes):
    rng = np.random.default_rng(4)
    params = mlp_init(sizes, rng, out_gain=1.0, prefix="net.")
    for k in params:
        params[k] += 0.1 * rng.standard_normal(params[k].shape)
    x = rng.standard_normal((5, sizes[0]))
    weights = rng.standard_normal((5, sizes[-1]))                     # loss = sum(weights * out)
    tensors = dict(params, x=x)

    def loss():
        out, _ = mlp_forward(params, tensors["x"], "net.")
        return float(np.sum(weights * out))

    out, cache = mlp_forward(params, x, "net.")
    dx, grads = mlp_backward(weights, cache)
    assert_gradients(loss, tensors, dict(grads, x=dx), tol=1e-7)


def test_bad_input():
    p = mlp_init([4, 8, 2], np.random.default_rng(0), out_gain=1.0)
    with pytest.raises(ValueError, match="`x`"):
        mlp_forward(p, np.ones((2, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="`x`"):
        mlp_forward(p, np.full((2, 4), np.nan))
    with pytest.raises(ValueError, match="actor.0.w"):
        mlp_forward(p, np.ones((2, 4)), "actor.")
    with pytest.raises(ValueError, match="sizes"):
        mlp_init([4], np.random.default_rng(0), out_gain=1.0)
