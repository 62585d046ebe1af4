"""GAE: kernel == NumPy reference == naive double loop; the lambda = 0 / 1 limits; padding;
classic-control GAE against hand-computed trajectories with termination and truncation."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minippo.rl.gae import gae, gae_classic, gae_classic_reference, gae_loop, gae_reference
from tests.rl.helpers import padded_batches, random_batch, right_padded_mask

coef = st.floats(0.0, 1.0)


# ------------------------------------------------------------------ kernel parity

@pytest.mark.kernels
@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.99, 0.95), (0.9, 0.0), (1.0, 1.0), (0.5, 0.3)])
def test_gae_kernel_matches_reference_float64(gamma, lam):
    rng = np.random.default_rng(0)
    (rewards, values), mask = random_batch(rng, 7, 13, 2)
    mask[0] = 0                                   # an empty row
    mask[1] = 1                                   # a full row
    adv_k, ret_k = gae(rewards, values, mask, gamma, lam)
    adv_r, ret_r = gae_reference(rewards, values, mask, gamma, lam)
    np.testing.assert_allclose(adv_k, adv_r, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ret_k, ret_r, rtol=0, atol=1e-12)
    assert adv_k.dtype == np.float64


@pytest.mark.kernels
def test_gae_kernel_matches_reference_float32():
    rng = np.random.default_rng(1)
    (rewards, values), mask = random_batch(rng, 6, 40, 2, dtype=np.float32)
    adv_k, ret_k = gae(rewards, values, mask, 1.0, 0.95)
    adv_r, ret_r = gae_reference(rewards, values, mask, 1.0, 0.95)
    assert adv_k.dtype == ret_k.dtype == np.float32
    for got, want in zip(gae(rewards, values, mask.astype(np.float64), 1.0, 0.95), (adv_k, ret_k)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)   # a float64 mask works alike
    np.testing.assert_allclose(adv_k, adv_r, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret_k, ret_r, rtol=1e-5, atol=1e-5)
    # the kernel recurses in float64: it is at least as close to the float64 result
    adv_64, _ = gae_reference(rewards.astype(np.float64), values.astype(np.float64), mask, 1.0, 0.95)
    assert np.abs(adv_k - adv_64).max() <= np.abs(adv_r - adv_64).max() + 1e-6


@pytest.mark.kernels
def test_gae_kernel_bool_and_int_masks():
    rng = np.random.default_rng(2)
    (rewards, values), mask = random_batch(rng, 4, 6, 2)
    expected = gae_reference(rewards, values, mask)
    for m in (mask.astype(bool), mask.astype(np.int64), mask.astype(np.float32), mask.astype(np.uint8)):
        for got, want in zip(gae(rewards, values, m), expected):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.kernels
def test_gae_classic_kernel_matches_reference():
    rng = np.random.default_rng(3)
    T, N = 17, 5
    rewards, values, next_values = (rng.standard_normal((T, N)) for _ in range(3))
    terminated = rng.random((T, N)) < 0.15
    truncated = rng.random((T, N)) < 0.15
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        args = [a.astype(dtype) for a in (rewards, values, next_values)]
        got = gae_classic(*args, terminated, truncated, gamma=0.99, lam=0.95)
        want = gae_classic_reference(*args, terminated.astype(int), truncated.astype(int), gamma=0.99, lam=0.95)
        for g, w in zip(got, want):
            assert g.dtype == dtype
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# ------------------------------------------------------------------ against independent computations

def gae_explicit_sum(rewards, values, mask, gamma, lam):
    """GAE paper eq. (16) summed term by term: A_t = sum_l (gamma lam)^l delta_{t+l} (O(T^2))."""
    adv = np.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        n = int(mask[b].sum())
        v = list(values[b, :n]) + [0.0]
        deltas = [rewards[b, t] + gamma * v[t + 1] - v[t] for t in range(n)]
        for t in range(n):
            adv[b, t] = sum((gamma * lam) ** (k - t) * deltas[k] for k in range(t, n))
    return adv


@given(padded_batches(2), coef, coef)
def test_gae_equals_double_loop_and_explicit_sum(batch, gamma, lam):
    (rewards, values), mask, _ = batch
    adv_sum = gae_explicit_sum(rewards, values, mask, gamma, lam)
    adv_loop, ret_loop = gae_loop(rewards, values, mask, gamma, lam)
    np.testing.assert_allclose(adv_loop, adv_sum, rtol=1e-10, atol=1e-10)
    for fn in (gae, gae_reference):
        adv, ret = fn(rewards, values, mask, gamma, lam)
        np.testing.assert_allclose(adv, adv_loop, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ret, ret_loop, rtol=1e-12, atol=1e-12)


def discounted_reward_to_go(rewards, mask, gamma):
    """sum_{k >= t} gamma^(k - t) r_k over each row's valid tokens, by an explicit loop."""
    out = np.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        n = int(mask[b].sum())
        for t in range(n):
            out[b, t] = sum(gamma ** (k - t) * rewards[b, k] for k in range(t, n))
    return out


@given(padded_batches(2), coef)
def test_lambda_one_is_reward_to_go_minus_values(batch, gamma):
    (rewards, values), mask, _ = batch
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=1.0)
    rtg = discounted_reward_to_go(rewards, mask, gamma)
    np.testing.assert_allclose(adv, (rtg - values) * mask, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ret, rtg, rtol=1e-10, atol=1e-10)     # Monte-Carlo return


@given(padded_batches(2), coef)
def test_lambda_zero_is_td_error(batch, gamma):
    (rewards, values), mask, _ = batch
    adv, _ = gae(rewards, values, mask, gamma=gamma, lam=0.0)
    next_values = np.zeros_like(values)
    next_values[:, :-1] = values[:, 1:] * mask[:, 1:]               # 0 after the last valid token
    delta = (rewards + gamma * next_values - values) * mask
    np.testing.assert_allclose(adv, delta, rtol=1e-12, atol=1e-12)


@given(padded_batches(2), coef, coef)
def test_padding_never_matters(batch, gamma, lam):
    (rewards, values), mask, seed = batch
    adv, ret = gae(rewards, values, mask, gamma, lam)
    rng = np.random.default_rng(seed + 1)
    pad = mask == 0
    rewards2, values2 = rewards.copy(), values.copy()
    rewards2[pad] = 100 * rng.standard_normal(pad.sum())
    values2[pad] = 100 * rng.standard_normal(pad.sum())
    adv2, ret2 = gae(rewards2, values2, mask, gamma, lam)
    np.testing.assert_array_equal(adv, adv2)
    np.testing.assert_array_equal(ret, ret2)
    assert (adv[pad] == 0).all() and (ret[pad] == 0).all()
    np.testing.assert_allclose(ret[~pad], adv[~pad] + values[~pad], rtol=0, atol=1e-12)


def test_gae_small_example_by_hand():
    # one row of 3 valid tokens + 1 pad, gamma = 0.9, lam = 0.5
    rewards = np.array([[0.0, 0.0, 1.0, 7.0]])
    values = np.array([[0.5, 0.6, 0.7, 9.0]])
    mask = np.array([[1, 1, 1, 0]])
    d2 = 1.0 + 0.9 * 0.0 - 0.7               # value after the last token is 0
    d1 = 0.0 + 0.9 * 0.7 - 0.6
    d0 = 0.0 + 0.9 * 0.6 - 0.5
    a2 = d2
    a1 = d1 + 0.45 * a2
    a0 = d0 + 0.45 * a1
    for fn in (gae, gae_reference, gae_loop):
        adv, ret = fn(rewards, values, mask, gamma=0.9, lam=0.5)
        np.testing.assert_allclose(adv, [[a0, a1, a2, 0.0]], atol=1e-12)
        np.testing.assert_allclose(ret, [[a0 + 0.5, a1 + 0.6, a2 + 0.7, 0.0]], atol=1e-12)


def test_empty_batch_and_rows():
    for fn in (gae, gae_reference, gae_loop):
        adv, ret = fn(np.zeros((0, 5)), np.zeros((0, 5)), np.zeros((0, 5)))
        assert adv.shape == ret.shape == (0, 5)
        adv, ret = fn(np.ones((2, 3)), np.ones((2, 3)), np.zeros((2, 3)))
        assert (adv == 0).all() and (ret == 0).all()


# ------------------------------------------------------------------ classic control

HAND = dict(rewards=[[1.0], [1.0], [1.0], [1.0]], values=[[0.5]] * 4,
            next_values=[[0.5], [9.0], [0.8], [0.5]],
            terminated=[[0], [1], [0], [0]], truncated=[[0], [0], [1], [0]])


@pytest.mark.parametrize("fn", [gae_classic, gae_classic_reference])
def test_gae_classic_docstring_example(fn):
    """The worked example in gae_classic's docstring (gamma = lam = 1)."""
    arrays = {k: np.array(v, dtype=float) for k, v in HAND.items()}
    adv, ret = fn(**arrays, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv[:, 0], [1.5, 0.5, 1.3, 1.0], atol=1e-12)
    np.testing.assert_allclose(ret[:, 0], [2.0, 1.0, 1.8, 1.5], atol=1e-12)


@pytest.mark.parametrize("fn", [gae_classic, gae_classic_reference])
def test_gae_classic_termination_vs_truncation_by_hand(fn):
    """Same transitions, the middle episode ends at t=1 by termination or by truncation."""
    g, lam = 0.9, 0.8
    rewards = np.array([[1.0], [2.0], [0.5]])
    values = np.array([[0.3], [0.4], [0.2]])
    v_final, v_boot = 5.0, 0.7                     # V(final obs of episode 1), V(s_3)
    next_values = np.array([[0.4], [v_final], [v_boot]])
    d2 = 0.5 + g * v_boot - 0.2                    # the last row bootstraps
    a2 = d2
    # termination at t=1: no bootstrap, the chain is cut
    d1_term = 2.0 - 0.4
    # truncation at t=1: bootstrap from the final observation, the chain is still cut
    d1_trunc = 2.0 + g * v_final - 0.4
    d0 = 1.0 + g * 0.4 - 0.3
    zero, one = np.array([[0], [0], [0]]), np.array([[0], [1], [0]])
    for term, trunc, d1 in ((one, zero, d1_term), (zero, one, d1_trunc)):
        adv, ret = fn(rewards, values, next_values, term, trunc, gamma=g, lam=lam)
        a1 = d1
        a0 = d0 + g * lam * a1
        np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], atol=1e-12)
        np.testing.assert_allclose(ret, adv + values, atol=1e-12)
    # both flags set: counts as terminated
    adv, _ = fn(rewards, values, next_values, one, one, gamma=g, lam=lam)
    np.testing.assert_allclose(adv[1, 0], d1_term, atol=1e-12)


def test_gae_classic_without_dones_equals_token_gae():
    """No flags and a zero bootstrap value: gae_classic is gae on the transposed batch."""
    rng = np.random.default_rng(4)
    T, N = 9, 3
    rewards, values = rng.standard_normal((T, N)), rng.standard_normal((T, N))
    next_values = np.vstack([values[1:], np.zeros((1, N))])
    none = np.zeros((T, N), dtype=bool)
    adv, _ = gae_classic(rewards, values, next_values, none, none, gamma=0.97, lam=0.9)
    adv_tok, _ = gae(rewards.T, values.T, None, gamma=0.97, lam=0.9)
    np.testing.assert_allclose(adv, adv_tok.T, atol=1e-12)


# ------------------------------------------------------------------ bad input

@pytest.mark.kernels
@pytest.mark.parametrize("fn", [gae, gae_reference, gae_loop])
def test_bad_input_names_the_argument(fn):
    r, v, m = np.zeros((2, 4)), np.zeros((2, 4)), right_padded_mask([2, 4], 4)
    bad_r = r.copy(); bad_r[1, 2] = np.nan
    bad_v = v.copy(); bad_v[0, 3] = np.inf
    half = m.copy(); half[1, 1] = 0.5
    hole = m.copy(); hole[1, 1] = 0
    cases = [((bad_r, v, m), {}, "`rewards` must be finite"), ((r, bad_v, m), {}, "`values` must be finite"),
             ((r, v, half), {}, "`mask` must contain only 0 and 1"), ((r, v, hole), {}, "`mask` row 1 has a hole"),
             ((r, np.zeros((2, 5)), m), {}, "`values`"), ((r, v, m[:, :3]), {}, "`mask`"),
             ((r, v, m), {"gamma": 1.5}, "`gamma`"), ((r, v, m), {"lam": -0.1}, "`lam`"),
             ((r[0], v[0], None), {}, "`rewards` must be 2-D"),
             ((r.astype(int), v, m), {}, "`rewards` must be float32 or float64")]
    for args, kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            fn(*args, **kwargs)


@pytest.mark.kernels
@pytest.mark.parametrize("fn", [gae_classic, gae_classic_reference])
def test_gae_classic_bad_input(fn):
    a = {k: np.array(v, dtype=float) for k, v in HAND.items()}
    bad = dict(a, next_values=a["next_values"].copy()); bad["next_values"][1, 0] = np.nan
    with pytest.raises(ValueError, match="`next_values` must be finite"):
        fn(**bad)
    with pytest.raises(ValueError, match="`terminated` must contain only 0 and 1"):
        fn(**dict(a, terminated=a["terminated"] * 2))
    with pytest.raises(ValueError, match="`truncated`"):
        fn(**dict(a, truncated=np.zeros((3, 1))))
    with pytest.raises(ValueError, match="`lam`"):
        fn(**a, lam=2.0)
