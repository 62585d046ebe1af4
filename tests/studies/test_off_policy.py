"""The off-policy lab's exact moments: the mean and the U-statistic variance against every batch of a small space
enumerated outright, sequence-level IS unbiased wherever the sampler covers pi, Monte Carlo agreement, the
samplers and the clip-band statistics."""
import itertools

import numpy as np
import pytest

from minippo import kernels
from minippo.rl.losses import log_softmax
from minippo.studies import exact as ex
from minippo.studies import off_policy as op


@pytest.fixture(scope="module")
def small():
    """V = 3, L = 3 (13 responses): every ordered batch of 3 can be listed."""
    space = ex.SequenceSpace.build(3, 3)
    reward = ex.length_reward(space)
    theta0 = ex.random_policy(space, np.random.default_rng(0), 1.0)
    theta, stale = op.trained_world(space, theta0, reward, steps=2, lr=3.0)
    return space, reward, theta, op.sampler_tables(theta, stale, 10.0)


@pytest.mark.slow      # 12 enumerations; the Monte Carlo tests below run by default
@pytest.mark.parametrize("sampler", ["stale by 2", "top-p 0.9", "bf16 logits"])
@pytest.mark.parametrize("estimator", ["uncorrected", "IS, token", "TIS C=1.2, sequence", "IcePop [0.5, 2], token"])
def test_exact_moments_equal_every_batch_enumerated(small, sampler, estimator):
    """E[g] and tr Cov[g] of the batch gradient (the library's code) over all N^3 ordered batches of n = 3,
    weighted by their probability, against the closed forms (Hoeffding's U-statistic variance)."""
    space, reward, theta, tables = small
    logq = tables[sampler]
    mu = op.sampler_probabilities(space, logq)
    support = np.flatnonzero(mu > 0)
    g, p = [], []
    for batch in itertools.product(support, repeat=3):
        rows = np.array(batch)
        g.append(op.batch_gradient(space, rows, theta, logq, reward, estimator).ravel())
        p.append(np.prod(mu[rows]))
    g, p = np.array(g), np.array(p) / np.sum(p)
    mean = p @ g
    var = p @ ((g - mean) ** 2).sum(axis=1)
    mo = op.exact_moments(space, theta, logq, reward, estimator, 3)
    # float64 sums of ~2000 terms of size ~1: 1e-12 absolute
    np.testing.assert_allclose(mo["mean"].ravel(), mean, rtol=0, atol=1e-12)
    assert mo["var"] == pytest.approx(var, rel=1e-10)
    assert op.batch_variance(mo["zeta1"], mo["zeta2"], 2) == pytest.approx(mo["zeta2"], rel=1e-12)


def test_sequence_is_is_unbiased_exactly_where_mu_covers_pi(small):
    space, reward, theta, tables = small
    table = op.bias_table(space, theta, tables, reward, 8)
    for name, s in table["samplers"].items():
        rel = s["rows"]["IS, sequence"]["rel_bias"]
        covers = np.isfinite(tables[name]).all()
        assert (rel < 1e-9) == covers, (name, rel)
        same = np.allclose(tables[name], log_softmax(theta), rtol=0, atol=1e-12)    # top-k 3 of V = 3 is pi
        assert (s["rows"]["uncorrected"]["rel_bias"] > 1e-9) == (not same), name
    assert table["samplers"]["top-p 0.9"]["kl"] > 0 and table["samplers"]["fp16 logits"]["kl"] >= 0


@pytest.mark.slow      # Monte Carlo runs of a study
def test_monte_carlo_agrees_with_the_exact_moments(small):
    space, reward, theta, tables = small
    sub = {k: tables[k] for k in ("stale by 1", "top-k 3")}
    table = op.bias_table(space, theta, sub, reward, 8)
    mc = op.monte_carlo_check(space, theta, sub, reward, table, 8, 150, np.random.default_rng(5))
    assert len(mc) == 2 * len(op.ESTIMATORS)
    for key, v in mc.items():
        assert v["z"] <= 5.0, key                                         # exact.bias_z: a few units when they agree
        assert abs(v["spread_ratio"] - 1) < 4 / np.sqrt(2 * 149), key     # the spread's relative se ~ 1/sqrt(2M)


@pytest.mark.slow      # Monte Carlo runs of a study
def test_the_monte_carlo_check_can_fail(small):
    """Against a wrong target (the uncorrected mean for the IS estimator) bias_z is large."""
    space, reward, theta, tables = small
    sub = {"stale by 2": tables["stale by 2"]}
    table = op.bias_table(space, theta, sub, reward, 8)
    rows = table["samplers"]["stale by 2"]["rows"]
    rows["IS, sequence"]["mean"] = rows["uncorrected"]["mean"]
    mc = op.monte_carlo_check(space, theta, sub, reward, table, 8, 300, np.random.default_rng(6))
    assert mc[("stale by 2", "IS, sequence")]["z"] > 5.0


def test_samplers(small):
    space, _, theta, tables = small
    for name, logq in tables.items():
        with np.errstate(invalid="ignore"):
            assert np.allclose(np.exp(logq).sum(axis=1), 1.0), name
    assert np.isneginf(tables["top-p 0.9"]).any() and np.isneginf(tables["top-k 3"]).sum() == 0  # V = 3: k = 3 keeps all
    mu = op.sampler_probabilities(space, tables["stale by 1"])
    assert mu.sum() == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="`steps`"):
        op.trained_world(space, theta, ex.length_reward(space), steps=1, lr=1.0, stale=(1, 2))


def test_band_stats():
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
    logp = np.zeros((2, 4), np.float32)
    logp_sampler = np.array([[0.0, 0.3, -0.1, 9.0], [0.19, -0.25, 5.0, 5.0]], np.float32)
    s = op.band_stats(logp, logp_sampler, mask, 0.2)
    # r = exp(-(logp_sampler)): 1, 0.741 (out), 1.105, 0.827, 1.284 (out)
    assert s["count"] == 2 and s["n_tokens"] == 5 and s["outside"] == pytest.approx(0.4)
    assert s["se"] == pytest.approx(np.sqrt(0.4 * 0.6 / 5))
    assert s["max_abs_log_ratio"] == pytest.approx(0.3, rel=1e-6)


def test_the_batch_gradient_is_the_same_on_both_kernel_paths(small):
    """The identity behind the Monte Carlo check (E[g] = the exact mean) rests on batch_gradient, which runs
    clipped_policy_loss: its numba kernel and its NumPy formula give the same gradient."""
    space, reward, theta, tables = small
    rows = np.array([0, 3, 3, 7, 11, 12])
    for est in op.ESTIMATORS:
        with kernels.use_kernels(True):
            a = op.batch_gradient(space, rows, theta, tables["stale by 2"], reward, est)
        with kernels.use_kernels(False):
            b = op.batch_gradient(space, rows, theta, tables["stale by 2"], reward, est)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)     # float64, the same sums in another order
