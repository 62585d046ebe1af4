"""Masked statistics: sums/means/variances against NumPy on the valid entries, whitening,
explained variance, and the documented values of the degenerate cases."""
import numpy as np
import pytest
from hypothesis import assume, given

from minippo.rl.masked import explained_variance, masked_mean, masked_sum, masked_var, masked_whiten
from tests.rl.helpers import padded_batches, random_batch, right_padded_mask


def test_sum_mean_var_match_numpy_on_valid_entries():
    rng = np.random.default_rng(0)
    (x,), mask = random_batch(rng, 5, 8, 1, min_len=2)
    v = mask == 1
    assert masked_sum(x, mask) == pytest.approx(x[v].sum(), rel=1e-12)
    assert masked_mean(x, mask) == pytest.approx(x[v].mean(), rel=1e-12)
    assert masked_var(x, mask) == pytest.approx(x[v].var(ddof=1), rel=1e-12)
    assert masked_var(x, mask, unbiased=False) == pytest.approx(x[v].var(), rel=1e-12)
    rows = masked_mean(x, mask, axis=1)
    np.testing.assert_allclose(rows, [x[b, v[b]].mean() for b in range(5)], rtol=1e-12)
    np.testing.assert_allclose(masked_sum(x, mask, axis=0), (x * mask).sum(0), rtol=1e-12)
    assert masked_mean(x, None) == pytest.approx(x.mean(), rel=1e-12)


def test_float32_accumulates_in_float64():
    x = np.full(3_000_000, 0.1, dtype=np.float32)
    assert masked_mean(x, None) == pytest.approx(float(np.float32(0.1)), rel=1e-9)


def test_degenerate_cases_have_documented_values():
    x = np.array([[3.0, 7.0, 1.0]])
    empty = np.zeros((1, 3))
    one = right_padded_mask([1], 3)
    assert masked_mean(x, empty) == 0.0
    assert masked_mean(x, np.vstack([one, empty])[:1], axis=1).tolist() == [3.0]
    np.testing.assert_array_equal(masked_mean(np.vstack([x, x]), np.vstack([one, empty]), axis=1), [3.0, 0.0])
    assert masked_var(x, one) == 0.0 and masked_var(x, empty, unbiased=False) == 0.0
    assert masked_var(x, one, unbiased=False) == 0.0
    # whitening: one valid element -> 0 with the mean shift, unchanged without it
    np.testing.assert_array_equal(masked_whiten(x, one), [[0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(masked_whiten(x, one, shift_mean=False), [[3.0, 0.0, 0.0]])
    # constant values (std = 0) likewise, even when the mean is not exactly representable
    c = np.full((2, 3), 0.1)
    np.testing.assert_array_equal(masked_whiten(c, None), np.zeros((2, 3)))
    np.testing.assert_array_equal(masked_whiten(c, None, shift_mean=False), c)
    np.testing.assert_array_equal(masked_whiten(x, empty), np.zeros((1, 3)))
    # explained variance with constant returns: 0.0, not NaN
    assert explained_variance(np.array([1.0, 2.0]), np.array([5.0, 5.0]), None) == 0.0
    assert explained_variance(x, x, one) == 0.0


@given(padded_batches(1, scale=3.0))
def test_whitening_gives_mean_zero_std_one_on_valid_tokens(batch):
    (x,), mask, _ = batch
    v = mask == 1
    assume(v.sum() >= 2 and x[v].std() > 1e-3)
    w = masked_whiten(x + 5.0, mask, eps=0.0)
    assert abs(w[v].mean()) < 1e-9
    assert w[v].std() == pytest.approx(1.0, rel=1e-9)
    assert (w[~v] == 0).all()
    w2 = masked_whiten(x + 5.0, mask, shift_mean=False, eps=0.0)
    assert w2[v].mean() == pytest.approx((x[v] + 5.0).mean(), rel=1e-9)
    assert w2[v].std() == pytest.approx(1.0, rel=1e-9)
    # with the default eps the std is sqrt(var / (var + eps))
    var = x[v].var()
    assert masked_whiten(x, mask)[v].std() == pytest.approx(np.sqrt(var / (var + 1e-8)), rel=1e-9)


def test_whiten_float32():
    rng = np.random.default_rng(1)
    (x,), mask = random_batch(rng, 4, 10, 1, dtype=np.float32, min_len=3)
    w = masked_whiten(x, mask)
    assert w.dtype == np.float32
    assert abs(w[mask == 1].mean()) < 1e-6 and w[mask == 1].std() == pytest.approx(1.0, abs=1e-5)


def test_explained_variance():
    rng = np.random.default_rng(2)
    (values, returns), mask = random_batch(rng, 4, 9, 2, min_len=2)
    v = mask == 1
    expect = 1 - np.var(returns[v] - values[v]) / np.var(returns[v])
    assert explained_variance(values, returns, mask) == pytest.approx(expect, rel=1e-12)
    assert explained_variance(returns, returns, mask) == 1.0              # perfect critic
    mean_pred = np.full_like(returns, returns[v].mean())
    assert explained_variance(mean_pred, returns, mask) == pytest.approx(0.0, abs=1e-12)
    assert explained_variance(returns + 3.0, returns, mask) == pytest.approx(1.0)  # offsets are ignored


def test_bad_input():
    x = np.zeros((2, 3))
    with pytest.raises(ValueError, match="`mask` must contain only 0 and 1"):
        masked_mean(x, np.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="`mask` has shape"):
        masked_sum(x, np.ones((2, 2)))
    with pytest.raises(ValueError, match="`x` must be finite"):
        masked_var(np.array([np.nan, 1.0]), None)
    with pytest.raises(ValueError, match="`eps`"):
        masked_whiten(x, None, eps=-1.0)
    with pytest.raises(ValueError, match="`returns` has shape"):
        explained_variance(x, np.zeros(3), None)
