"""Critic-free advantages (GRPO, Dr. GRPO, RLOO, batch-mean REINFORCE) against naive loops and their
group statistics; the leave-one-out identity; GRPO's k3 KL loss against finite differences."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minippo.nn.gradcheck import assert_gradients
from minippo.rl.group_advantages import (batch_mean_advantages, grpo_advantages, grpo_kl_loss,
                                         rloo_advantages)
from tests.rl.helpers import padded_batches, right_padded_mask


def batch(seed=0, G=4, n=5, T=7, min_len=1, dtype=np.float64):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=G * n).astype(dtype)
    mask = right_padded_mask(rng.integers(min_len, T + 1, size=G * n), T)
    return scores, mask


# ---- naive loops: one response at a time, the formulas as written in the papers ----------------

def grpo_loop(scores, n, mask, eps=1e-6, scale=True):
    out = np.zeros(mask.shape)
    for i in range(len(scores)):
        g = i // n
        group = [float(scores[j]) for j in range(g * n, g * n + n)]
        mean = sum(group) / n
        std = (sum((x - mean) ** 2 for x in group) / (n - 1)) ** 0.5       # sample std
        a = float(scores[i]) - mean
        if scale:
            a = a / (std + eps)
        if max(group) == min(group):
            a = 0.0
        for t in range(mask.shape[1]):
            out[i, t] = a if mask[i, t] else 0.0
    return out


def rloo_loop(scores, n, mask):
    out = np.zeros(mask.shape)
    for i in range(len(scores)):
        g = i // n
        others = [float(scores[j]) for j in range(g * n, g * n + n) if j != i]
        a = float(scores[i]) - sum(others) / len(others)
        for t in range(mask.shape[1]):
            out[i, t] = a if mask[i, t] else 0.0
    return out


def test_grpo_matches_loop_and_has_group_mean_0_std_1():
    scores, mask = batch()
    n = 5
    for scale in (True, False):
        adv = grpo_advantages(scores, n, mask, scale=scale)
        np.testing.assert_allclose(adv, grpo_loop(scores, n, mask, scale=scale), rtol=1e-12, atol=1e-14)
    per_response = grpo_advantages(scores, n, np.ones((20, 1)))[:, 0].reshape(4, n)
    np.testing.assert_allclose(per_response.mean(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(per_response.std(axis=1, ddof=1), 1.0, rtol=1e-5)     # 1 up to eps
    exact = grpo_advantages(scores, n, np.ones((20, 1)), eps=0.0)[:, 0].reshape(4, n)
    np.testing.assert_allclose(exact.std(axis=1, ddof=1), 1.0, rtol=1e-12)
    # Dr. GRPO: the division is gone, the group mean is still removed
    drgrpo = grpo_advantages(scores, n, np.ones((20, 1)), scale=False)[:, 0].reshape(4, n)
    np.testing.assert_allclose(drgrpo, scores.reshape(4, n) - scores.reshape(4, n).mean(1, keepdims=True),
                               atol=1e-15)


def test_every_valid_token_gets_the_response_advantage_and_padding_gets_0():
    scores, mask = batch(seed=1, min_len=0)
    for adv in (grpo_advantages(scores, 5, mask), rloo_advantages(scores, 5, mask),
                batch_mean_advantages(scores, mask)):
        assert adv.shape == mask.shape
        assert np.all(adv[mask == 0] == 0.0)
        for i in range(len(scores)):
            row = adv[i, mask[i] == 1]
            assert np.all(row == row[0]) if row.size else True


def test_constant_group_gives_exact_zeros_not_nan():
    """0.1 + 0.1 + 0.1 != 0.3 in floats: the mean of a constant group is off by one ulp, yet the
    group's advantages must be exactly 0 (no rounding noise divided by eps)."""
    scores = np.array([0.1, 0.1, 0.1, 1.0, 2.0, 3.0, 7.0, 7.0, 7.0])
    mask = np.ones((9, 4))
    for eps in (1e-6, 0.0):
        for scale in (True, False):
            adv = grpo_advantages(scores, 3, mask, eps=eps, scale=scale)
            assert np.isfinite(adv).all()
            assert np.all(adv[:3] == 0.0) and np.all(adv[6:] == 0.0)
            assert np.all(adv[[3, 5], 0] != 0.0)
    np.testing.assert_allclose(grpo_advantages(scores, 3, mask)[3:6, 0], [-1, 0, 1], atol=1e-5)
    assert np.all(rloo_advantages(scores, 3, mask)[6:] == 0.0)


def test_rloo_matches_loop_and_the_leave_one_out_identity():
    for n in (2, 3, 8):
        scores, mask = batch(seed=n, G=3, n=n)
        adv = rloo_advantages(scores, n, mask)
        np.testing.assert_allclose(adv, rloo_loop(scores, n, mask), rtol=1e-12, atol=1e-14)
        s = scores.reshape(3, n)
        identity = (n / (n - 1) * (s - s.mean(axis=1, keepdims=True))).reshape(-1)
        np.testing.assert_allclose(adv[:, 0], identity, rtol=1e-12, atol=1e-14)
        # RLOO = Dr. GRPO * n / (n - 1)
        np.testing.assert_allclose(adv, n / (n - 1) * grpo_advantages(scores, n, mask, scale=False),
                                   rtol=1e-12, atol=1e-14)


def test_rloo_baseline_excludes_own_score():
    """Changing s_i moves every OTHER response's baseline but not its own."""
    scores, mask = batch(seed=3, G=1, n=4, T=1)
    bumped = scores.copy()
    bumped[2] += 5.0
    a, b = rloo_advantages(scores, 4, mask)[:, 0], rloo_advantages(bumped, 4, mask)[:, 0]
    baseline_a, baseline_b = scores - a, bumped - b
    assert baseline_a[2] == pytest.approx(baseline_b[2], abs=1e-12)
    np.testing.assert_allclose(np.delete(baseline_b - baseline_a, 2), 5.0 / 3, rtol=1e-12)


def test_batch_mean_baseline():
    scores, mask = batch(seed=4)
    adv = batch_mean_advantages(scores, mask)
    np.testing.assert_allclose(adv, (scores - scores.mean())[:, None] * mask, atol=1e-14)
    assert batch_mean_advantages(scores, np.ones((20, 1)))[:, 0].sum() == pytest.approx(0.0, abs=1e-12)


def test_dtype_follows_scores_and_mask_dtype_is_free():
    scores, mask = batch(seed=5, dtype=np.float32)
    for adv in (grpo_advantages(scores, 5, mask.astype(bool)), rloo_advantages(scores, 5, mask.astype(np.int64)),
                batch_mean_advantages(scores, mask.astype(np.float32))):
        assert adv.dtype == np.float32
    np.testing.assert_allclose(grpo_advantages(scores, 5, mask),
                               grpo_advantages(scores.astype(np.float64), 5, mask), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn", ["grpo", "rloo"])
def test_validation_names_the_argument(fn):
    f = {"grpo": grpo_advantages, "rloo": rloo_advantages}[fn]
    scores, mask = batch()
    with pytest.raises(ValueError, match="`group_size`"):
        f(scores, 1, mask)                                     # a group needs two responses
    with pytest.raises(ValueError, match="`group_size`"):
        f(scores, 3, mask)                                     # 20 rows do not split into groups of 3
    with pytest.raises(ValueError, match="`group_size`"):
        f(scores, 2.0, mask)
    bad = scores.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="`scores` must be finite"):
        f(bad, 5, mask)
    with pytest.raises(ValueError, match="`scores`"):
        f(scores.reshape(4, 5), 5, mask)
    with pytest.raises(ValueError, match="`scores`"):
        f(scores.astype(np.int64), 5, mask)
    holes = mask.copy()
    holes[0, :3] = [1, 0, 1]
    with pytest.raises(ValueError, match="`mask` row 0 has a hole"):
        f(scores, 5, holes)
    with pytest.raises(ValueError, match="`mask` must have shape"):
        f(scores, 5, mask[:10])
    with pytest.raises(ValueError, match="`mask` must contain only 0 and 1"):
        f(scores, 5, mask * 2)


def test_validation_of_batch_mean_and_grpo_eps():
    scores, mask = batch()
    with pytest.raises(ValueError, match="`scores` must hold at least one"):
        batch_mean_advantages(np.zeros(0), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="`mask` must have shape"):
        batch_mean_advantages(scores, mask.T)
    with pytest.raises(ValueError, match="`eps`"):
        grpo_advantages(scores, 5, mask, eps=-1e-3)


@given(G=st.integers(1, 4), n=st.integers(2, 6), T=st.integers(1, 5), seed=st.integers(0, 2**31 - 1),
       scale=st.floats(1e-3, 1e3))
def test_properties_group_sums_and_invariances(G, n, T, seed, scale):
    """Per group: GRPO and RLOO advantages sum to 0; GRPO is invariant to s -> a s + b (a > 0, up to
    eps), RLOO and Dr. GRPO to the shift b; scores in ties give ties."""
    rng = np.random.default_rng(seed)
    scores = scale * rng.normal(size=G * n)
    mask = np.ones((G * n, T))
    g, r = grpo_advantages(scores, n, mask, eps=0.0)[:, 0], rloo_advantages(scores, n, mask)[:, 0]
    np.testing.assert_allclose(g.reshape(G, n).sum(1), 0.0, atol=1e-9)
    np.testing.assert_allclose(r.reshape(G, n).sum(1), 0.0, atol=1e-9 * scale)
    np.testing.assert_allclose(grpo_advantages(3.0 * scores + 11.0, n, mask, eps=0.0)[:, 0], g, atol=1e-7)
    np.testing.assert_allclose(rloo_advantages(scores + 11.0, n, mask)[:, 0], r, atol=1e-9 * max(scale, 11))
    # RLOO = n/(n-1) Dr. GRPO everywhere
    np.testing.assert_allclose(r, n / (n - 1) * grpo_advantages(scores, n, mask, scale=False)[:, 0],
                               rtol=1e-9, atol=1e-9 * scale)


@given(padded_batches(n_arrays=1, max_B=8))
def test_properties_padding_gets_zero(data):
    """Any right-padded batch (empty rows included), all rows one group: padding gets exactly 0,
    valid tokens the row's advantage, never NaN."""
    (x,), mask, _ = data
    scores = x[:, 0].copy()
    B = len(scores)
    ones = np.ones((B, 1))
    fns = [lambda m: batch_mean_advantages(scores, m)]
    if B >= 2:
        fns += [lambda m: grpo_advantages(scores, B, m), lambda m: rloo_advantages(scores, B, m)]
    for fn in fns:
        adv, per_row = fn(mask), fn(ones)[:, 0]                 # the mask does not change the values
        assert np.isfinite(adv).all()
        np.testing.assert_array_equal(adv, per_row[:, None] * mask)


# ---- GRPO's KL loss --------------------------------------------------------------------------

def test_kl_loss_value_and_stats():
    rng = np.random.default_rng(0)
    logp, logp_ref = -rng.uniform(0.1, 3, size=(4, 6)), -rng.uniform(0.1, 3, size=(4, 6))
    mask = right_padded_mask([6, 3, 0, 1], 6)
    loss, dlogp, stats = grpo_kl_loss(logp, logp_ref, mask, kl_coef=0.04)
    rho = np.exp(logp_ref - logp)
    k3 = rho - np.log(rho) - 1                                  # pi_ref/pi - log(pi_ref/pi) - 1, eq. (4)
    assert stats["n_tokens"] == 10
    assert stats["kl"] == pytest.approx(k3[mask == 1].mean(), rel=1e-12)
    assert stats["kl_max"] == pytest.approx(k3[mask == 1].max(), rel=1e-12)
    assert loss == pytest.approx(0.04 * k3[mask == 1].mean(), rel=1e-12)
    assert np.all(dlogp[mask == 0] == 0.0) and (k3 >= 0).all()
    # equal policies: zero loss, zero gradient; no valid token: zeros
    loss0, d0, s0 = grpo_kl_loss(logp, logp, mask, 0.1)
    assert loss0 == 0.0 and np.all(d0 == 0.0) and s0["kl_max"] == 0.0
    loss_e, d_e, s_e = grpo_kl_loss(logp, logp_ref, np.zeros_like(mask), 0.1)
    assert loss_e == 0.0 and np.all(d_e == 0.0) and s_e["n_tokens"] == 0 and s_e["kl_max"] == 0.0


def test_kl_loss_gradient_by_finite_differences():
    rng = np.random.default_rng(1)
    params = {"logp": -rng.uniform(0.1, 3, size=(3, 5))}
    logp_ref = params["logp"] + rng.normal(scale=0.7, size=(3, 5))
    mask = right_padded_mask([5, 2, 4], 5)
    _, dlogp, _ = grpo_kl_loss(params["logp"], logp_ref, mask, kl_coef=0.3)
    assert_gradients(lambda: grpo_kl_loss(params["logp"], logp_ref, mask, 0.3)[0], params, {"logp": dlogp},
                     tol=1e-7)
    # 1-D flat tokens, no mask
    flat = {"logp": params["logp"].reshape(-1).copy()}
    _, d1, _ = grpo_kl_loss(flat["logp"], logp_ref.reshape(-1), None, kl_coef=2.0)
    assert_gradients(lambda: grpo_kl_loss(flat["logp"], logp_ref.reshape(-1), None, 2.0)[0], flat, {"logp": d1},
                     tol=1e-7)


def test_kl_loss_validation_and_dtype():
    logp = np.full((2, 3), -1.0, dtype=np.float32)
    _, d, _ = grpo_kl_loss(logp, logp - 0.5, None, 0.1)
    assert d.dtype == np.float32
    with pytest.raises(ValueError, match="`kl_coef`"):
        grpo_kl_loss(logp, logp, None, -0.1)
    with pytest.raises(ValueError, match="`logp_ref` has shape"):
        grpo_kl_loss(logp, logp[:, :2], None, 0.1)
    with pytest.raises(ValueError, match="`logp` must be finite"):
        grpo_kl_loss(np.full((2, 3), np.nan), logp, None, 0.1)
    with pytest.raises(ValueError, match="`mask` row 0 has a hole"):
        grpo_kl_loss(logp, logp, np.array([[1, 0, 1], [1, 1, 1]]), 0.1)
