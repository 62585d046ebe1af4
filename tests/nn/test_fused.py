"""Parity of every fused numba kernel with its NumPy reference (float32 and float64).

Marked ``kernels``: CI runs these again with ``NUMBA_DISABLE_JIT=1``, where the kernels execute as
plain Python loops (the version a student steps through in pdb), so the sizes stay small.
"""
import numpy as np
import pytest

from minippo import kernels
from minippo.nn import fused

pytestmark = pytest.mark.kernels

# float32 compares at float32 rounding (different summation order), float64 near exactly
TOLS = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}
DTYPES = [np.float32, np.float64]


def _data(dtype, *shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_parity(dtype):
    x, dout = _data(dtype, 2, 5, 16, seed=1, scale=3.0) + 1, _data(dtype, 2, 5, 16, seed=2)
    w, b = _data(dtype, 16, seed=3), _data(dtype, 16, seed=4)
    out, cache = fused.layernorm_forward(x, w, b)
    ref, rcache = fused.layernorm_forward_reference(x, w, b)
    assert out.dtype == dtype and out.shape == x.shape
    np.testing.assert_allclose(out, ref, **TOLS[dtype])
    for got, want in zip(fused.layernorm_backward(dout, cache), fused.layernorm_backward_reference(dout, rcache)):
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, **TOLS[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_parity(dtype):
    x = _data(dtype, 3, 40, seed=5, scale=4.0)
    x[0, :6] = [0.0, 1e-8, -1e-8, 30.0, -30.0, 1e-3]     # zero, tiny, saturated, small
    dout = _data(dtype, 3, 40, seed=6)
    out, cache = fused.gelu_forward(x)
    ref, rcache = fused.gelu_forward_reference(x)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, **TOLS[dtype])
    np.testing.assert_allclose(cache[1], np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)), **TOLS[dtype])
    np.testing.assert_allclose(fused.gelu_backward(dout, cache), fused.gelu_backward_reference(dout, rcache),
                               **TOLS[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_softmax_parity(dtype):
    B, H, T = 2, 3, 6
    rng = np.random.default_rng(7)
    allowed = rng.random((B, T, T)) < 0.5
    allowed[:, np.arange(T), np.arange(T)] = True
    s, datt = _data(dtype, B, H, T, T, seed=8, scale=3.0), _data(dtype, B, H, T, T, seed=9)
    att, cache = fused.masked_softmax_forward(s.copy(), allowed, 0.5)
    ref, rcache = fused.masked_softmax_forward_reference(s.copy(), allowed, 0.5)
    assert att.dtype == dtype
    np.testing.assert_allclose(att, ref, **TOLS[dtype])
    np.testing.assert_array_equal(att == 0, ref == 0)
    np.testing.assert_allclose(fused.masked_softmax_backward(datt.copy(), cache, 0.5),
                               fused.masked_softmax_backward_reference(datt.copy(), rcache, 0.5), **TOLS[dtype])
    # a (1, T, S) mask broadcasts over the batch, as TinyGPT passes it without padding
    causal = np.tri(T, dtype=bool)[None]
    np.testing.assert_allclose(fused.masked_softmax_forward(s.copy(), causal, 0.5)[0],
                               fused.masked_softmax_forward_reference(s.copy(), causal, 0.5)[0], **TOLS[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_cross_entropy_parity(dtype):
    z = _data(dtype, 2, 5, 9, seed=10, scale=5.0)
    targets = np.random.default_rng(11).integers(0, 9, (2, 5))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    loss, cache = fused.softmax_cross_entropy_forward(z, targets, mask)
    rloss, rcache = fused.softmax_cross_entropy_forward_reference(z, targets, mask)
    assert loss == pytest.approx(rloss, rel=TOLS[dtype]["rtol"])
    d = fused.softmax_cross_entropy_backward(0.7, cache)
    assert d.dtype == dtype
    np.testing.assert_allclose(d, fused.softmax_cross_entropy_backward_reference(0.7, rcache), **TOLS[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_backward_parity(dtype):
    idx = np.array([[3, 3, 0, 7], [3, 1, 1, 7]])
    dout = _data(dtype, 2, 4, 5, seed=12)
    cache = (idx, (9, 5))
    got = fused.embedding_backward(dout, cache)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, fused.embedding_backward_reference(dout, cache), **TOLS[dtype])


def test_use_kernels_switch_routes_to_the_reference():
    x = _data(np.float32, 4, 8, seed=13)
    with kernels.use_kernels(False):
        out, _ = fused.gelu_forward(x)
    np.testing.assert_array_equal(out, fused.gelu_forward_reference(x)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 13, 64])
def test_interleaved_reductions(dtype, n):
    a, b = _data(dtype, n, seed=n), _data(dtype, n, seed=100 + n)
    np.testing.assert_allclose(fused._sum4(a), a.sum(), **TOLS[dtype])
    np.testing.assert_allclose(fused._dot4(a, b), (a * b).sum(), **TOLS[dtype])
    np.testing.assert_allclose(fused._sumsq4(a, a[0]), ((a - a[0]) ** 2).sum(), **TOLS[dtype])
    assert fused._max4(a) == a.max()
    a[n // 2] = -np.inf                                    # the masked softmax feeds -inf entries
    assert fused._max4(a) == a.max()
