"""Value losses: the formula by hand, which branch max() selects, gradients by finite differences, padding."""
import numpy as np
import pytest
from hypothesis import given

from minippo.nn.gradcheck import assert_gradients
from minippo.rl.losses import clipped_value_loss, value_loss
from tests.rl.helpers import padded_batches, random_batch, right_padded_mask


def test_value_loss_formula_and_gradient():
    rng = np.random.default_rng(0)
    (values, returns), mask = random_batch(rng, 4, 6, 2, min_len=1)
    v = mask == 1
    loss, dvalues, stats = value_loss(values, returns, mask)
    assert loss == pytest.approx(0.5 * np.mean((values[v] - returns[v]) ** 2), rel=1e-12)
    np.testing.assert_allclose(dvalues[v], (values[v] - returns[v]) / v.sum(), rtol=1e-12)
    assert (dvalues[~v] == 0).all() and stats["vf_clipfrac"] == 0.0
    assert_gradients(lambda: value_loss(values, returns, mask)[0], {"values": values}, {"values": dvalues})


def test_clipped_value_loss_by_hand():
    """eps = 0.2, one token per situation (R = 0 everywhere):
    0: v inside the band                  -> both errors equal, unclipped gradient
    1: v moved away from R past the band  -> unclipped error larger, gradient (v - R) / n
    2: v moved toward R past the band     -> clipped error larger: gradient 0, counted in vf_clipfrac
    3: v jumped over R past the band      -> depends on which side is farther; here clipped larger"""
    values_old = np.array([1.0, 1.0, 1.0, 0.3])
    values = np.array([1.1, 1.5, 0.5, -0.2])
    returns = np.zeros(4)
    v_clip = np.array([1.1, 1.2, 0.8, 0.1])
    loss, dvalues, stats = clipped_value_loss(values, values_old, returns, None, clip_eps=0.2)
    err = np.maximum(values ** 2, v_clip ** 2)
    assert loss == pytest.approx(0.5 * err.mean(), rel=1e-12)
    np.testing.assert_allclose(dvalues, [1.1 / 4, 1.5 / 4, 0.0, -0.2 / 4], rtol=1e-12)
    assert stats["vf_clipfrac"] == 0.25
    # token 3 jumped over R: |v - R| = 0.2 > |v_clip - R| = 0.1, unclipped selected (not counted)


def test_vf_clipfrac_is_a_share_of_the_valid_tokens():
    """One clipped token among four valid ones (and four padded): vf_clipfrac = 1/4, not 1/8. Catches a share
    taken over every entry of the batch. R = 0, eps = 0.2; the valid tokens by hand:
    (0, 0) inside the band, error 1.1^2; (0, 1) v = 0.5 moved toward R past the band, v_clipped = 0.8 gives the
    larger error 0.64: clipped; (0, 2) v = v_old, error 1; (1, 0) inside, error 0.2^2."""
    values_old = np.array([[1.0, 1.0, 1.0, 7.0], [0.3, 5.0, 5.0, 5.0]])
    values = np.array([[1.1, 0.5, 1.0, -9.0], [0.2, 9.0, 9.0, 9.0]])
    mask = right_padded_mask([3, 1], 4)
    loss, dvalues, stats = clipped_value_loss(values, values_old, np.zeros((2, 4)), mask, clip_eps=0.2)
    assert stats["vf_clipfrac"] == 0.25                        # 1 / 4: exact in binary
    # float64: four squares and their sum, rounding only (a few ulps of 2.2e-16)
    assert loss == pytest.approx(0.5 * (1.1 ** 2 + 0.64 + 1.0 + 0.2 ** 2) / 4, rel=1e-14)
    np.testing.assert_allclose(dvalues, [[1.1 / 4, 0.0, 1.0 / 4, 0.0], [0.2 / 4, 0.0, 0.0, 0.0]], rtol=1e-15)


def test_a_tie_between_the_two_errors_goes_to_the_unclipped_one():
    """v jumped over R to the mirror image of v_clipped, so (v - R)^2 = (v_clipped - R)^2 exactly: v_old = 0.5,
    v = -0.25, eps = 0.25 give v_clipped = 0.25, both errors 0.0625 (every number dyadic: no rounding anywhere).
    The docstring gives the tie to the unclipped error: gradient (v - R) / n, not counted in vf_clipfrac.
    Catches `>=` for `>` in the choice of the clipped branch."""
    loss, dvalues, stats = clipped_value_loss(np.array([-0.25, 1.0]), np.array([0.5, 1.0]), np.zeros(2), None,
                                              clip_eps=0.25)
    assert loss == 0.5 * (0.0625 + 1.0) / 2                  # exact: dyadic numbers throughout
    assert dvalues.tolist() == [-0.25 / 2, 1.0 / 2]
    assert stats["vf_clipfrac"] == 0.0


def test_clipped_equals_unclipped_for_huge_eps():
    rng = np.random.default_rng(1)
    (values, values_old, returns), mask = random_batch(rng, 3, 5, 3)
    a = clipped_value_loss(values, values_old, returns, mask, clip_eps=1e9)
    b = value_loss(values, returns, mask)
    assert a[0] == pytest.approx(b[0], rel=1e-12)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12)
    assert a[2]["vf_clipfrac"] == 0.0


def test_clipped_value_gradient_finite_differences():
    rng = np.random.default_rng(2)
    (values_old, returns), mask = random_batch(rng, 5, 6, 2, min_len=1)
    step = rng.uniform(-0.6, 0.6, size=values_old.shape)
    step[np.abs(np.abs(step) - 0.2) < 1e-3] += 1e-2          # away from the band's edges
    values = values_old + step
    _, dvalues, stats = clipped_value_loss(values, values_old, returns, mask)
    assert 0 < stats["vf_clipfrac"] < 1
    f = lambda: clipped_value_loss(values, values_old, returns, mask)[0]  # noqa: E731
    assert_gradients(f, {"values": values}, {"values": dvalues}, tol=1e-7)


@given(padded_batches(3))
def test_padding_never_matters(batch):
    (values, values_old, returns), mask, seed = batch
    rng = np.random.default_rng(seed)
    pad = mask == 0
    changed = [a.copy() for a in (values, values_old, returns)]
    for a in changed:
        a[pad] = 50 * rng.standard_normal(pad.sum())
    calls = [(clipped_value_loss, lambda a: a), (value_loss, lambda a: (a[0], a[2]))]  # (values, returns)
    for fn, pick in calls:
        loss, d, stats = fn(*pick((values, values_old, returns)), mask)
        loss2, d2, stats2 = fn(*pick(changed), mask)
        assert loss == loss2 and stats["vf_clipfrac"] == stats2["vf_clipfrac"]
        np.testing.assert_array_equal(d, d2)
        assert (d[pad] == 0).all()


def test_bad_input():
    z = np.zeros((2, 3))
    m = right_padded_mask([3, 1], 3)
    with pytest.raises(ValueError, match="`clip_eps`"):
        clipped_value_loss(z, z, z, m, clip_eps=0.0)
    bad = z.copy(); bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="`returns` must be finite"):
        clipped_value_loss(z, z, bad, m)
    with pytest.raises(ValueError, match="`values_old` has shape"):
        clipped_value_loss(z, np.zeros(3), z, m)
    with pytest.raises(ValueError, match="`mask` row 1 has a hole"):
        value_loss(z, z, np.array([[1, 1, 1], [0, 1, 1]]))
