"""The clipped surrogate (PPO paper eq. (7)), on its NumPy formula and on its kernel: the six clip
cases, the band's boundary, gradients by finite differences, padding; the KL-penalty loss (eq. (8)).
(The kernel-vs-formula parity tests are in test_kernels.py.)"""
import math

import numpy as np
import pytest
from hypothesis import given

from minippo.nn.gradcheck import assert_gradients
from minippo.rl.losses import (CLIP_CASES, CLIPPED_CASES, NEG_ABOVE, NEG_CLIPPED, NEG_INSIDE, PAD, POS_BELOW,
                               POS_CLIPPED, POS_INSIDE, ZERO_ADV, clip_cases, clipped_policy_loss)
from minippo.rl.penalty import ppo_penalty_loss
from tests.helpers import with_kernels
from tests.rl.helpers import padded_batches, random_batch, right_padded_mask

# clipped_policy_loss on each path: the numba kernel, the NumPy formula
clip_kernel, clip_numpy = with_kernels(clipped_policy_loss, True), with_kernels(clipped_policy_loss, False)
KERNEL = pytest.param(clip_kernel, id="kernel", marks=pytest.mark.kernels)
NUMPY = pytest.param(clip_numpy, id="numpy")
BOTH = [KERNEL, NUMPY]
EPS = 0.2

# (code, sign of A, three ratios inside the case's range, clipped branch active?)
SIX_CASES = [
    (POS_BELOW, +1, [0.5, 0.7, 0.79], False),
    (POS_INSIDE, +1, [0.85, 1.0, 1.15], False),
    (POS_CLIPPED, +1, [1.25, 1.5, 3.0], True),
    (NEG_CLIPPED, -1, [0.3, 0.6, 0.75], True),
    (NEG_INSIDE, -1, [0.85, 1.0, 1.15], False),
    (NEG_ABOVE, -1, [1.3, 2.0, 5.0], False),
]


def cases_of(logp, logp_old, adv, mask, **band):
    """The clip case of every token (:func:`clip_cases` of the token ratios)."""
    return clip_cases(np.exp(logp - logp_old), adv, mask, **band)


def tokens_with_ratios(ratios, adv, n_pad=1, seed=0):
    """A (1, n + n_pad) batch whose valid tokens have exactly these ratios and advantages."""
    rng = np.random.default_rng(seed)
    n = len(ratios)
    logp_old = rng.uniform(-3, -0.1, size=(1, n + n_pad))
    logp = logp_old.copy()
    logp[0, :n] += np.log(ratios)
    adv_full = np.concatenate([np.asarray(adv, float), rng.standard_normal(n_pad)])[None, :]
    return logp, logp_old, adv_full, right_padded_mask([n], n + n_pad)


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("code,sign,ratios,clipped", SIX_CASES, ids=[CLIP_CASES[c][:14] for c, *_ in SIX_CASES])
def test_six_clip_cases(fn, code, sign, ratios, clipped):
    adv = sign * np.array([0.5, 1.0, 2.0])
    logp, logp_old, adv_full, mask = tokens_with_ratios(ratios, adv)
    loss, dlogp, stats = fn(logp, logp_old, adv_full, mask, clip_eps=EPS)
    r = np.exp(logp[0, :3] - logp_old[0, :3])
    n = 3
    if clipped:
        bound = 1 + EPS if sign > 0 else 1 - EPS
        assert loss == pytest.approx(-np.mean(bound * adv), rel=1e-12)
        assert (dlogp[0, :3] == 0.0).all()                    # exactly zero: the term is a constant
        assert stats["clipfrac"] == 1.0
    else:
        assert loss == pytest.approx(-np.mean(r * adv), rel=1e-12)
        np.testing.assert_allclose(dlogp[0, :3], -adv * r / n, rtol=1e-12)
        assert (dlogp[0, :3] != 0).all()
        assert stats["clipfrac"] == 0.0
    assert dlogp[0, 3] == 0.0                                  # padding
    assert cases_of(logp, logp_old, adv_full, mask, clip_eps=EPS).tolist() == [[code, code, code, PAD]]
    assert stats["n_tokens"] == 3
    assert (code in CLIPPED_CASES) == clipped


@pytest.mark.parametrize("fn", BOTH)
def test_zero_advantage_is_its_own_case(fn):
    logp, logp_old, adv, mask = tokens_with_ratios([0.5, 1.0, 2.0], [0.0, 0.0, 0.0])
    loss, dlogp, stats = fn(logp, logp_old, adv, mask, clip_eps=EPS)
    assert loss == 0.0 and (dlogp == 0).all() and stats["clipfrac"] == 0.0
    assert cases_of(logp, logp_old, adv, mask, clip_eps=EPS).tolist() == [[ZERO_ADV] * 3 + [PAD]]


def exact_exp_point(target):
    """d near log(target) whose exp is the same double in NumPy (array and scalar) and libm,
    and the clip_eps that puts the band's edge exactly on that ratio."""
    d = math.log(target)
    for _ in range(200):
        r = math.exp(d)
        if np.exp(np.array([d]))[0] == r and np.exp(np.float64(d)) == r:
            return d, r
        d = math.nextafter(d, math.inf)
    raise AssertionError("no exactly representable point found")  # pragma: no cover


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("side", ["upper", "lower"])
def test_boundary_of_the_band_is_inside(fn, side):
    """At r = 1 +/- eps exactly both terms are equal; we return the unclipped gradient -A r / n,
    the token is 'inside' (case 2 or 5) and not counted in clipfrac. One ulp beyond, it clips."""
    d, r = exact_exp_point(1.2 if side == "upper" else 0.8)
    eps = r - 1 if side == "upper" else 1 - r                  # then 1 + eps (1 - eps) == r exactly
    sign = 1.0 if side == "upper" else -1.0                    # the sign for which this edge can clip
    logp_old = np.array([-1.0, -1.0])
    logp = logp_old + np.array([d, 0.0])
    adv = np.array([sign * 2.0, 1.0])
    loss, dlogp, stats = fn(logp, logp_old, adv, None, clip_eps=eps)
    assert np.exp(logp[0] - logp_old[0]) == r
    assert dlogp[0] == -adv[0] * r / 2
    assert cases_of(logp, logp_old, adv, None, clip_eps=eps)[0] == (POS_INSIDE if side == "upper" else NEG_INSIDE)
    assert stats["clipfrac"] == 0.0
    assert loss == pytest.approx(-(adv[0] * r + 1.0) / 2, rel=1e-15)
    # move the ratio past the edge: now the clipped branch is active and the gradient is 0
    logp2 = logp_old + np.array([d + sign * 1e-9, 0.0])
    _, dlogp2, stats2 = fn(logp2, logp_old, adv, None, clip_eps=eps)
    assert dlogp2[0] == 0.0 and stats2["clipfrac"] == 0.5


def test_clip_cases_put_both_edges_inside_for_either_sign():
    """The band is closed for either sign of A: a ratio exactly on 1 - eps or 1 + eps is case 2 (A > 0) or 5
    (A < 0), and one ulp beyond it the outer case. test_boundary_of_the_band_is_inside covers the two edges where
    the clip binds; this covers the other two (A > 0 at 1 - eps, A < 0 at 1 + eps), where only the label can go
    wrong: catches `<=` for `<` in case 1's condition and `<` for `<=` in case 5's."""
    lo, hi = 0.75, 1.25                                       # 1 -/+ eps for eps = 0.25: exact in binary
    on_edges = np.array([lo, hi])
    beyond = np.array([np.nextafter(lo, 0.0), np.nextafter(hi, 2.0)])
    pos, neg = np.array([2.0, 2.0]), np.array([-2.0, -2.0])
    assert clip_cases(on_edges, pos, clip_eps=0.25).tolist() == [POS_INSIDE, POS_INSIDE]
    assert clip_cases(on_edges, neg, clip_eps=0.25).tolist() == [NEG_INSIDE, NEG_INSIDE]
    assert clip_cases(beyond, pos, clip_eps=0.25).tolist() == [POS_BELOW, POS_CLIPPED]
    assert clip_cases(beyond, neg, clip_eps=0.25).tolist() == [NEG_CLIPPED, NEG_ABOVE]
    # an asymmetric band [0.75, 1.5]: the same at its two edges
    assert clip_cases(np.array([lo, 1.5]), pos, clip_eps=0.25, clip_eps_high=0.5).tolist() == [POS_INSIDE] * 2
    assert clip_cases(np.array([lo, 1.5]), neg, clip_eps=0.25, clip_eps_high=0.5).tolist() == [NEG_INSIDE] * 2


# ------------------------------------------------------------------ gradients, padding

def away_from_kinks(rng, shape, eps=EPS, margin=1e-3):
    """logp, logp_old with every ratio at least ``margin`` away from 1 +/- eps."""
    logp_old = rng.uniform(-4, -0.5, size=shape)
    log_ratio = rng.uniform(-0.6, 0.6, size=shape)
    r = np.exp(log_ratio)
    near = (np.abs(r - (1 + eps)) < margin) | (np.abs(r - (1 - eps)) < margin)
    log_ratio[near] += 5 * margin
    return logp_old + log_ratio, logp_old


@pytest.mark.parametrize("fn", BOTH)
def test_policy_gradient_finite_differences(fn):
    rng = np.random.default_rng(0)
    logp, logp_old = away_from_kinks(rng, (4, 7))
    adv = rng.standard_normal((4, 7))
    mask = right_padded_mask([7, 5, 1, 0], 7)
    _, dlogp, stats = fn(logp, logp_old, adv, mask)
    assert 0 < stats["clipfrac"] < 1                           # both kinds of tokens are present
    assert_gradients(lambda: fn(logp, logp_old, adv, mask)[0], {"logp": logp}, {"logp": dlogp}, tol=1e-7)


def test_penalty_gradient_finite_differences():
    rng = np.random.default_rng(1)
    (logp_old, adv), mask = random_batch(rng, 3, 6, 2, min_len=1)
    logp = logp_old + 0.4 * rng.standard_normal((3, 6))
    _, dlogp, _ = ppo_penalty_loss(logp, logp_old, adv, mask, kl_coef=0.7)
    f = lambda: ppo_penalty_loss(logp, logp_old, adv, mask, kl_coef=0.7)[0]  # noqa: E731
    assert_gradients(f, {"logp": logp}, {"logp": dlogp}, tol=1e-7)


def test_penalty_loss_formula():
    rng = np.random.default_rng(2)
    (logp, logp_old, adv), mask = random_batch(rng, 3, 5, 3, scale=0.5, min_len=1)
    v = mask == 1
    r = np.exp(logp - logp_old)[v]
    k3 = (r - 1) - np.log(r)
    loss, dlogp, stats = ppo_penalty_loss(logp, logp_old, adv, mask, kl_coef=0.3)
    assert loss == pytest.approx(-np.mean(r * adv[v] - 0.3 * k3), rel=1e-12)
    assert stats["kl"] == pytest.approx(np.mean(k3), rel=1e-12) and stats["kl"] >= 0
    assert (dlogp[~v] == 0).all()
    loss0, _, _ = ppo_penalty_loss(logp, logp_old, adv, mask, kl_coef=0.0)
    assert loss0 == pytest.approx(-np.mean(r * adv[v]), rel=1e-12)
    with pytest.raises(ValueError, match="`kl_coef`"):
        ppo_penalty_loss(logp, logp_old, adv, mask, kl_coef=-1.0)


def test_penalty_statistics_are_over_the_valid_tokens():
    """ratio_mean, ratio_max, ratio_min and surrogate (mean r A) of ppo_penalty_loss count the valid tokens only,
    against a loop over them in Python floats. The padding holds the ratio 1 and an advantage of 100 here, and
    every valid ratio is above 1: catches a statistic that sees the padding (a mean over all B*T entries, a
    minimum that finds the padding's 1)."""
    rng = np.random.default_rng(3)
    mask = right_padded_mask([4, 1, 0, 3], 4)
    logp_old = rng.uniform(-3, -0.5, (4, 4))
    logp = logp_old + rng.uniform(0.1, 0.5, (4, 4))                   # every ratio in (1.1, 1.65)
    adv = np.where(mask == 1, rng.uniform(0.5, 2.0, (4, 4)), 100.0)   # positive: no cancellation in the mean
    _, _, stats = ppo_penalty_loss(logp, logp_old, adv, mask, kl_coef=0.3)
    valid = [(b, t) for b in range(4) for t in range(4) if mask[b, t]]
    r = [math.exp(logp[i] - logp_old[i]) for i in valid]
    assert stats["n_tokens"] == len(valid) == 8
    # float64: math.exp and np.exp may differ by an ulp, and 8 positive terms are summed in another order, so
    # the relative error is a few ulps (2.2e-16 each); 1e-13 is ample
    assert stats["ratio_mean"] == pytest.approx(sum(r) / len(r), rel=1e-13)
    assert stats["ratio_max"] == pytest.approx(max(r), rel=1e-13)
    assert stats["ratio_min"] == pytest.approx(min(r), rel=1e-13)
    assert stats["surrogate"] == pytest.approx(sum(ri * adv[i] for ri, i in zip(r, valid)) / len(r), rel=1e-13)


@given(padded_batches(3, scale=0.5))
def test_padding_never_changes_loss_or_gets_gradient(batch):
    (logp, logp_old, adv), mask, seed = batch
    rng = np.random.default_rng(seed)
    pad = mask == 0
    changed = [a.copy() for a in (logp, logp_old, adv)]
    for a in changed:
        a[pad] = 10 * rng.standard_normal(pad.sum())
    for fn in (clip_kernel, clip_numpy, ppo_penalty_loss):
        loss, dlogp, stats = fn(logp, logp_old, adv, mask)
        loss2, dlogp2, stats2 = fn(*changed, mask)
        assert loss == loss2
        np.testing.assert_array_equal(dlogp, dlogp2)
        assert (dlogp[pad] == 0).all()
        for k in ("approx_kl", "ratio_mean", "ratio_max", "ratio_min"):
            assert stats[k] == stats2[k]


@pytest.mark.parametrize("fn", BOTH)
def test_bad_input_names_the_argument(fn):
    z = np.zeros((2, 3))
    m = right_padded_mask([3, 1], 3)
    for i, name in enumerate(["logp", "logp_old", "adv"]):
        args = [z.copy(), z.copy(), z.copy()]
        args[i][1, 0] = np.nan
        with pytest.raises(ValueError, match=f"`{name}` must be finite"):
            fn(*args, m)
    half = m.copy(); half[0, 1] = 2.0
    hole = m.copy(); hole[0, 1] = 0
    with pytest.raises(ValueError, match="`mask` must contain only 0 and 1"):
        fn(z, z, z, half)
    with pytest.raises(ValueError, match="`mask` row 0 has a hole"):
        fn(z, z, z, hole)
    for eps in (0.0, -0.1):
        with pytest.raises(ValueError, match="`clip_eps`"):
            fn(z, z, z, m, clip_eps=eps)
    with pytest.raises(ValueError, match="`adv` has shape"):
        fn(z, z, np.zeros((2, 4)), m)
    with pytest.raises(ValueError, match="`logp` must be 1-D"):
        fn(np.zeros((2, 3, 1)), np.zeros((2, 3, 1)), np.zeros((2, 3, 1)))
