"""The numba kernels of minippo.nn (nn/_kernels.py) against the NumPy layers they compile: every
elementwise layer of minippo.nn.layers with ``use_kernels(True)`` vs ``use_kernels(False)``, in
float32 and float64; and the switch itself (with it off, TinyGPT calls no kernel).

Marked ``kernels``: CI runs these again with ``NUMBA_DISABLE_JIT=1``, where the kernels execute as
plain Python loops (the version a student steps through in pdb), so the sizes stay small.
"""
import numpy as np
import pytest

from minippo import kernels
from minippo.nn import _kernels, layers
from tests.helpers import KernelPath

# the layers on each path: K runs the numba kernels, N the NumPy bodies
K, N = KernelPath(layers, True), KernelPath(layers, False)

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
    out, cache = K.layernorm_forward(x, w, b)
    ref, rcache = N.layernorm_forward(x, w, b)
    assert out.dtype == dtype and out.shape == x.shape
    np.testing.assert_allclose(out, ref, **TOLS[dtype])
    for got, want in zip(K.layernorm_backward(dout, cache), N.layernorm_backward(dout, rcache)):
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, **TOLS[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_parity(dtype):
    x = _data(dtype, 3, 40, seed=5, scale=4.0)
    x[0, :6] = [0.0, 1e-8, -1e-8, 30.0, -30.0, 1e-3]     # zero, tiny, saturated, small
    dout = _data(dtype, 3, 40, seed=6)
    out, cache = K.gelu_forward(x)
    ref, rcache = N.gelu_forward(x)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, **TOLS[dtype])
    np.testing.assert_allclose(cache[1], np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)), **TOLS[dtype])
    np.testing.assert_allclose(K.gelu_backward(dout, cache), N.gelu_backward(dout, rcache),
                               **TOLS[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_softmax_parity(dtype):
    B, H, T = 2, 3, 6
    rng = np.random.default_rng(7)
    allowed = rng.random((B, T, T)) < 0.5
    allowed[:, np.arange(T), np.arange(T)] = True
    s, datt = _data(dtype, B, H, T, T, seed=8, scale=3.0), _data(dtype, B, H, T, T, seed=9)
    att, cache = K.masked_softmax_forward(s.copy(), allowed, 0.5)
    ref, rcache = N.masked_softmax_forward(s.copy(), allowed, 0.5)
    assert att.dtype == dtype
    np.testing.assert_allclose(att, ref, **TOLS[dtype])
    np.testing.assert_array_equal(att == 0, ref == 0)
    np.testing.assert_allclose(K.masked_softmax_backward(datt.copy(), cache, 0.5),
                               N.masked_softmax_backward(datt.copy(), rcache, 0.5), **TOLS[dtype])
    # a (1, T, S) mask broadcasts over the batch, as TinyGPT passes it without padding
    causal = np.tri(T, dtype=bool)[None]
    np.testing.assert_allclose(K.masked_softmax_forward(s.copy(), causal, 0.5)[0],
                               N.masked_softmax_forward(s.copy(), causal, 0.5)[0], **TOLS[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_cross_entropy_parity(dtype):
    z = _data(dtype, 2, 5, 9, seed=10, scale=5.0)
    targets = np.random.default_rng(11).integers(0, 9, (2, 5))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    loss, cache = K.softmax_cross_entropy_forward(z, targets, mask)
    rloss, rcache = N.softmax_cross_entropy_forward(z, targets, mask)
    assert loss == pytest.approx(rloss, rel=TOLS[dtype]["rtol"])
    d = K.softmax_cross_entropy_backward(0.7, cache)
    assert d.dtype == dtype
    np.testing.assert_allclose(d, N.softmax_cross_entropy_backward(0.7, rcache), **TOLS[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_backward_parity(dtype):
    idx = np.array([[3, 3, 0, 7], [3, 1, 1, 7]])
    dout = _data(dtype, 2, 4, 5, seed=12)
    cache = (idx, (9, 5))
    got = K.embedding_backward(dout, cache)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, N.embedding_backward(dout, cache), **TOLS[dtype])


def test_use_kernels_switch_routes_to_the_numpy_layer():
    x = _data(np.float32, 4, 8, seed=13)
    with kernels.use_kernels(False):
        out, _ = layers.gelu_forward(x)
    np.testing.assert_array_equal(out, N.gelu_forward(x)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 13, 64])
def test_interleaved_reductions(dtype, n):
    a, b = _data(dtype, n, seed=n), _data(dtype, n, seed=100 + n)
    np.testing.assert_allclose(_kernels._sum4(a), a.sum(), **TOLS[dtype])
    np.testing.assert_allclose(_kernels._dot4(a, b), (a * b).sum(), **TOLS[dtype])
    np.testing.assert_allclose(_kernels._sumsq4(a, a[0]), ((a - a[0]) ** 2).sum(), **TOLS[dtype])
    assert _kernels._max4(a) == a.max()
    a[n // 2] = -np.inf                                    # the masked softmax feeds -inf entries
    assert _kernels._max4(a) == a.max()


LAYER_KERNELS = ["layernorm_forward", "layernorm_backward", "gelu_forward", "gelu_backward", "masked_softmax_forward",
                 "masked_softmax_backward", "softmax_cross_entropy_forward", "softmax_cross_entropy_backward",
                 "embedding_backward"]


def test_with_the_switch_off_tinygpt_calls_no_kernel(monkeypatch):
    """Every kernel twin replaced by one that raises: with the switch off a TinyGPT training step and a
    KV-cache decode step run (the NumPy layers only); with it on, the first kernel call raises."""
    from minippo.nn.gpt import GPTConfig, TinyGPT
    model = TinyGPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8, dtype="float64"), seed=0)
    idx = np.random.default_rng(14).integers(0, 11, (2, 6))
    mask = np.ones((2, 6))

    def step():
        loss, grads = model.lm_loss_and_grads(idx, idx, mask)
        _, kv = model.prefill(idx[:, :3])
        return loss, grads, model.decode_step(kv, idx[:, 3])

    with kernels.use_kernels(True):
        loss_k, grads_k, logits_k = step()

    def raising(*args, **kwargs):
        raise AssertionError("a numba kernel was called")
    for name in LAYER_KERNELS:
        monkeypatch.setattr(_kernels, name, raising)
    with kernels.use_kernels(False):
        loss, grads, logits = step()
    assert loss == pytest.approx(loss_k, rel=1e-12)
    np.testing.assert_allclose(logits, logits_k, rtol=1e-10, atol=1e-12)
    for k in grads:
        np.testing.assert_allclose(grads[k], grads_k[k], rtol=1e-9, atol=1e-13)
    with kernels.use_kernels(True), pytest.raises(AssertionError, match="a numba kernel was called"):
        step()


@pytest.mark.parametrize("name", LAYER_KERNELS)
def test_every_elementwise_layer_dispatches_to_its_twin(monkeypatch, name):
    """Each layer's first line calls the function of the same name in nn/_kernels.py (and only when on)."""
    calls = []
    monkeypatch.setattr(_kernels, name, lambda *args, **kwargs: calls.append(args) or "kernel")
    args = [object()] * (getattr(layers, name).__code__.co_argcount)
    with kernels.use_kernels(True):
        assert getattr(layers, name)(*args) == "kernel"
    assert len(calls) == 1 and list(calls[0]) == args


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adamw_kernel_is_the_numpy_update_bit_for_bit(dtype, weight_decay):
    """AdamW.step with its kernel and with the NumPy lines: the same arithmetic in the same order on IEEE
    floats (every constant cast to the arrays' dtype as NumPy casts a Python float; division and sqrt correctly
    rounded on both paths), so the parameters and moments agree exactly, not just to a tolerance; also a
    strided parameter (updated in place) and a tensor without decay."""
    from minippo.nn.optim import AdamW
    rng = np.random.default_rng(15)
    base = {"w": rng.standard_normal((6, 7)).astype(dtype), "b": rng.standard_normal(7).astype(dtype),
            "s": rng.standard_normal((8, 6)).astype(dtype)[:, ::2]}       # a strided (8, 3) view
    steps = [{k: (rng.standard_normal(p.shape) * 10.0 ** (i - 2)).astype(dtype) for k, p in base.items()}
             for i in range(4)]
    for g in steps:
        g["b"][0] = 0.0                                                     # m = v = 0: an update of exactly 0
    runs = {}
    for flag in (True, False):
        params = {"w": base["w"].copy(), "b": base["b"].copy(), "s": base["s"].base.copy()[:, ::2]}
        opt = AdamW(params, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=weight_decay)
        with kernels.use_kernels(flag):
            for i, grads in enumerate(steps):
                opt.step({k: g.copy() for k, g in grads.items()}, lr=1e-3 * (i + 1))
        runs[flag] = (params, opt)
    (pk, ok), (pn, on) = runs[True], runs[False]
    for k in base:
        assert pk[k].dtype == dtype
        np.testing.assert_array_equal(pk[k], pn[k])
        np.testing.assert_array_equal(ok.m[k], on.m[k])
        np.testing.assert_array_equal(ok.v[k], on.v[k])


def test_adamw_dispatches_to_its_kernel_only_with_the_switch_on(monkeypatch):
    from minippo.nn.optim import AdamW
    calls = []
    monkeypatch.setattr(_kernels, "adamw_update", lambda *args: calls.append(args))
    p = {"w": np.ones(3, np.float32)}
    opt = AdamW(p, lr=0.1)
    with kernels.use_kernels(False):
        opt.step({"w": np.ones(3, np.float32)})
    assert calls == [] and np.all(p["w"] < 1)
    with kernels.use_kernels(True):
        opt.step({"w": np.ones(3, np.float32)})
    assert len(calls) == 1 and calls[0][0] is p["w"]


def _sums_of_four_lanes(a, dtype):
    """Per row, in ``dtype``: the four interleaved sums of ``_sum4`` (lane j adds columns j, j + 4,
    ...; the row length a multiple of 4), combined as (s0 + s1) + (s2 + s3)."""
    acc = np.zeros((a.shape[0], 4), dtype=dtype)
    for i in range(0, a.shape[1], 4):
        acc += a[:, i:i + 4].astype(dtype)
    return (acc[:, 0] + acc[:, 1]) + (acc[:, 2] + acc[:, 3])


def test_layernorm_kernel_statistics_dtype_is_what_the_module_docstring_says():
    """Compiled, LayerNorm's forward kernel keeps a float32 row's mean, variance, 1/std and the
    normalised values in float64 (numba promotes ``sum / C``); without the JIT, in float32. The
    kernel is replayed in NumPy in that dtype, in the kernel's summation order: equal bit for bit."""
    from numba import config
    stats = np.float32 if config.DISABLE_JIT else np.float64
    x, w, b = _data(np.float32, 64, 32, scale=3.0) + 1, _data(np.float32, 32, seed=1), _data(
        np.float32, 32, seed=2)
    out, (xhat, rstd, _) = K.layernorm_forward(x, w, b, 1e-5)
    C = stats(x.shape[1])
    mean = _sums_of_four_lanes(x, np.float32).astype(stats) / C                 # (N,)
    d = x.astype(stats) - mean[:, None]
    rs = stats(1) / np.sqrt(_sums_of_four_lanes(d * d, stats) / C + stats(np.float32(1e-5)))
    xh = d * rs[:, None]
    np.testing.assert_array_equal(rstd[:, 0], rs.astype(np.float32))
    np.testing.assert_array_equal(xhat, xh.astype(np.float32))
    np.testing.assert_array_equal(out, (xh * w.astype(stats) + b.astype(stats)).astype(np.float32))
