"""The numba kernels of minippo.rl (rl/_kernels.py) against the NumPy formulas they compile: each
public function with ``use_kernels(True)`` vs ``use_kernels(False)``, on the same inputs; and the
switch itself (with it off, no kernel is called).

Marked ``kernels``: CI runs these again with ``NUMBA_DISABLE_JIT=1`` (the kernels as plain Python).
"""
import numpy as np
import pytest

from minippo import kernels
from minippo.rl import _kernels
from minippo.rl.gae import gae, gae_classic
from minippo.rl.kl import kl_estimate
from minippo.rl.loss_variants import aggregated_policy_loss, sequence_policy_loss
from minippo.rl.losses import clipped_policy_loss
from minippo.rl.masked import masked_mean
from tests.helpers import with_kernels
from tests.rl.helpers import random_batch

gae_kernel, gae_numpy = with_kernels(gae, True), with_kernels(gae, False)
gae_classic_kernel, gae_classic_numpy = with_kernels(gae_classic, True), with_kernels(gae_classic, False)
clip_kernel, clip_numpy = with_kernels(clipped_policy_loss, True), with_kernels(clipped_policy_loss, False)


# ------------------------------------------------------------------ GAE (tokens, classic control)

@pytest.mark.kernels
@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.99, 0.95), (0.9, 0.0), (1.0, 1.0), (0.5, 0.3)])
def test_gae_kernel_matches_the_formula_float64(gamma, lam):
    rng = np.random.default_rng(0)
    (rewards, values), mask = random_batch(rng, 7, 13, 2)
    mask[0] = 0                                   # an empty row
    mask[1] = 1                                   # a full row
    adv_k, ret_k = gae_kernel(rewards, values, mask, gamma, lam)
    adv_r, ret_r = gae_numpy(rewards, values, mask, gamma, lam)
    np.testing.assert_allclose(adv_k, adv_r, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ret_k, ret_r, rtol=0, atol=1e-12)
    assert adv_k.dtype == np.float64


@pytest.mark.kernels
def test_gae_kernel_matches_the_formula_float32():
    rng = np.random.default_rng(1)
    (rewards, values), mask = random_batch(rng, 6, 40, 2, dtype=np.float32)
    adv_k, ret_k = gae_kernel(rewards, values, mask, 1.0, 0.95)
    adv_r, ret_r = gae_numpy(rewards, values, mask, 1.0, 0.95)
    assert adv_k.dtype == ret_k.dtype == np.float32
    for got, want in zip(gae_kernel(rewards, values, mask.astype(np.float64), 1.0, 0.95), (adv_k, ret_k)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)   # a float64 mask works alike
    np.testing.assert_allclose(adv_k, adv_r, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret_k, ret_r, rtol=1e-5, atol=1e-5)
    # the kernel recurses in float64: it is at least as close to the float64 result
    adv_64, _ = gae_numpy(rewards.astype(np.float64), values.astype(np.float64), mask, 1.0, 0.95)
    assert np.abs(adv_k - adv_64).max() <= np.abs(adv_r - adv_64).max() + 1e-6


@pytest.mark.kernels
def test_gae_kernel_bool_and_int_masks():
    rng = np.random.default_rng(2)
    (rewards, values), mask = random_batch(rng, 4, 6, 2)
    expected = gae_numpy(rewards, values, mask)
    for m in (mask.astype(bool), mask.astype(np.int64), mask.astype(np.float32), mask.astype(np.uint8)):
        for got, want in zip(gae_kernel(rewards, values, m), expected):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.kernels
def test_gae_classic_kernel_matches_the_formula():
    rng = np.random.default_rng(3)
    T, N = 17, 5
    rewards, values, next_values = (rng.standard_normal((T, N)) for _ in range(3))
    terminated = rng.random((T, N)) < 0.15
    truncated = rng.random((T, N)) < 0.15
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        args = [a.astype(dtype) for a in (rewards, values, next_values)]
        got = gae_classic_kernel(*args, terminated, truncated, gamma=0.99, lam=0.95)
        want = gae_classic_numpy(*args, terminated.astype(int), truncated.astype(int), gamma=0.99, lam=0.95)
        for g, w in zip(got, want):
            assert g.dtype == dtype
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# ------------------------------------------------------------------ the clipped surrogate L^CLIP

def assert_same_outputs(a, b, tol):
    loss_a, d_a, s_a = a
    loss_b, d_b, s_b = b
    assert loss_a == pytest.approx(loss_b, rel=tol, abs=tol)
    assert d_a.dtype == d_b.dtype and d_a.shape == d_b.shape
    np.testing.assert_allclose(d_a, d_b, rtol=tol, atol=tol)
    assert set(s_a) == set(s_b)
    for k in s_a:
        assert s_a[k] == pytest.approx(s_b[k], rel=tol, abs=tol), k


@pytest.mark.kernels
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
@pytest.mark.parametrize("clip_eps_high", [None, 0.28])
def test_clip_kernel_matches_the_formula(dtype, tol, clip_eps_high):
    rng = np.random.default_rng(3)
    (logp, logp_old, adv), mask = random_batch(rng, 9, 17, 3, scale=0.4, dtype=dtype)
    mask[0] = 0
    adv[1, :3] = 0.0
    other = np.float32 if dtype == np.float64 else np.float64
    for m in (mask, None, mask.astype(bool), mask.astype(other)):
        a = clip_kernel(logp, logp_old, adv, m, clip_eps=0.15, clip_eps_high=clip_eps_high)
        b = clip_numpy(logp, logp_old, adv, m, clip_eps=0.15, clip_eps_high=clip_eps_high)
        assert a[1].dtype == dtype
        assert_same_outputs(a, b, tol)
    stats = a[2]
    assert stats["approx_kl"] == pytest.approx(masked_mean(kl_estimate(logp_old, logp, "k3"), mask), rel=tol)


@pytest.mark.kernels
def test_clip_kernel_1d_inputs_any_mask_and_empty():
    rng = np.random.default_rng(4)
    logp, logp_old, adv = (0.5 * rng.standard_normal(11) for _ in range(3))
    holes = (rng.random(11) < 0.6).astype(float)           # a flat token batch needs no contiguity
    for m in (None, holes):
        assert_same_outputs(clip_kernel(logp, logp_old, adv, m),
                            clip_numpy(logp, logp_old, adv, m), 1e-12)
    empty = np.zeros(11)
    for fn in (clip_kernel, clip_numpy):
        loss, dlogp, stats = fn(logp, logp_old, adv, empty)
        assert loss == 0.0 and (dlogp == 0).all()
        assert stats["clipfrac"] == 0.0 and stats["approx_kl"] == 0.0 and stats["ratio_mean"] == 1.0


# ------------------------------------------------------------------ errors

def _with(a, index, value):
    a = a.copy()
    a[index] = value
    return a


Z, M = np.zeros((2, 4)), np.ones((2, 4))
BAD_INPUTS = {
    "gae rewards nan": lambda: gae(_with(Z, (1, 2), np.nan), Z, M),
    "gae values inf": lambda: gae(Z, _with(Z, (0, 3), np.inf), M),
    "gae mask 0.5": lambda: gae(Z, Z, _with(M, (0, 1), 0.5)),
    "gae mask hole": lambda: gae(Z, Z, _with(M, (1, 1), 0.0)),
    "gae_classic next_values nan": lambda: gae_classic(Z, Z, _with(Z, (1, 0), np.nan), Z, Z),
    "clip logp_old nan (1-D)": lambda: clipped_policy_loss(Z[0], _with(Z[0], 2, np.nan), Z[0]),
    "clip adv -inf": lambda: clipped_policy_loss(Z, Z, _with(Z, (1, 3), -np.inf), M),
    "clip mask 3.0": lambda: clipped_policy_loss(Z, Z, Z, _with(M, (1, 2), 3.0)),
    "clip mask hole": lambda: clipped_policy_loss(Z, Z, Z, _with(M, (1, 1), 0.0)),
}


@pytest.mark.kernels
@pytest.mark.parametrize("name", BAD_INPUTS)
def test_both_paths_raise_the_same_error(name):
    """The kernel validates while it computes, the formula through minippo.checks: same message."""
    messages = []
    for flag in (True, False):
        with kernels.use_kernels(flag), pytest.raises(ValueError) as info:
            BAD_INPUTS[name]()
        messages.append(str(info.value))
    assert messages[0] == messages[1]


# ------------------------------------------------------------------ the switch

def assert_same(got, want):
    """Equal up to 1e-12 entry by entry, through the tuples and stats dicts the functions return."""
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            assert_same(got[k], want[k])
    elif isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def raising(name):
    def kernel(*args, **kwargs):
        raise AssertionError(f"the kernel {name} was called")
    return kernel


@pytest.mark.kernels
@pytest.mark.parametrize("name,call", [
    ("gae", lambda: gae(np.ones((2, 3)), np.zeros((2, 3)), None)),
    ("gae_classic", lambda: gae_classic(*(np.ones((3, 2)),) * 3, np.zeros((3, 2)), np.zeros((3, 2)))),
    ("clipped_policy_loss", lambda: clipped_policy_loss(np.zeros((2, 3)), np.full((2, 3), -0.5), np.ones((2, 3)))),
])
def test_the_switch_routes_every_call(monkeypatch, name, call):
    """Off: the NumPy body runs and the kernel is never called; on: the kernel is called."""
    with kernels.use_kernels(True):
        want = call()
    monkeypatch.setattr(_kernels, name, raising(name))
    with kernels.use_kernels(False):
        got = call()
    assert_same(got, want)
    with kernels.use_kernels(True), pytest.raises(AssertionError, match=f"the kernel {name} was called"):
        call()


@pytest.mark.kernels
@pytest.mark.parametrize("variant, options", [(aggregated_policy_loss, dict(loss_agg="seq-mean-token-mean")),
                                              (aggregated_policy_loss, dict(loss_agg="seq-mean-token-sum-norm",
                                                                            norm_len=4)),
                                              (sequence_policy_loss, {})])
def test_variants_the_kernel_lacks_run_the_formula(monkeypatch, variant, options):
    """The kernel covers clipped_policy_loss (token-mean, the token ratio); the variants of rl/loss_variants.py
    run their formula on both switch settings, with the same numbers."""
    args = (np.zeros((2, 3)), np.full((2, 3), -0.1), np.array([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]]))
    with kernels.use_kernels(False):
        want = variant(*args, **options)
    monkeypatch.setattr(_kernels, "clipped_policy_loss", raising("clipped_policy_loss"))
    with kernels.use_kernels(True):
        got = variant(*args, **options)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
