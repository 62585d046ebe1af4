"""GAE: the formula == its kernel == a naive double loop == the explicit sum; the lambda = 0 / 1
limits; padding; classic-control GAE against hand-computed trajectories with termination and
truncation. (The kernel-vs-formula parity tests at 1e-12 are in test_kernels.py.)"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minippo.rl.gae import gae, gae_classic
from tests.helpers import with_kernels
from tests.rl.helpers import gae_loop, padded_batches, right_padded_mask

coef = st.floats(0.0, 1.0)
# the public functions on each path: the numba kernel, the NumPy formula
gae_kernel, gae_numpy = with_kernels(gae, True), with_kernels(gae, False)
gae_classic_kernel, gae_classic_numpy = with_kernels(gae_classic, True), with_kernels(gae_classic, False)


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
    for fn in (gae_kernel, gae_numpy):
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
    for fn in (gae_kernel, gae_numpy, gae_loop):
        adv, ret = fn(rewards, values, mask, gamma=0.9, lam=0.5)
        np.testing.assert_allclose(adv, [[a0, a1, a2, 0.0]], atol=1e-12)
        np.testing.assert_allclose(ret, [[a0 + 0.5, a1 + 0.6, a2 + 0.7, 0.0]], atol=1e-12)


def test_empty_batch_and_rows():
    for fn in (gae_kernel, gae_numpy, gae_loop):
        adv, ret = fn(np.zeros((0, 5)), np.zeros((0, 5)), np.zeros((0, 5)))
        assert adv.shape == ret.shape == (0, 5)
        adv, ret = fn(np.ones((2, 3)), np.ones((2, 3)), np.zeros((2, 3)))
        assert (adv == 0).all() and (ret == 0).all()


# ------------------------------------------------------------------ classic control

HAND = dict(rewards=[[1.0], [1.0], [1.0], [1.0]], values=[[0.5]] * 4,
            next_values=[[0.5], [9.0], [0.8], [0.5]],
            terminated=[[0], [1], [0], [0]], truncated=[[0], [0], [1], [0]])


@pytest.mark.parametrize("fn", [gae_classic_kernel, gae_classic_numpy])
def test_gae_classic_docstring_example(fn):
    """The worked example in gae_classic's docstring (gamma = lam = 1)."""
    arrays = {k: np.array(v, dtype=float) for k, v in HAND.items()}
    adv, ret = fn(**arrays, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv[:, 0], [1.5, 0.5, 1.3, 1.0], atol=1e-12)
    np.testing.assert_allclose(ret[:, 0], [2.0, 1.0, 1.8, 1.5], atol=1e-12)


@pytest.mark.parametrize("fn", [gae_classic_kernel, gae_classic_numpy])
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
@pytest.mark.parametrize("fn", [gae_kernel, gae_numpy, gae_loop])
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
@pytest.mark.parametrize("fn", [gae_classic_kernel, gae_classic_numpy])
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


# ------------------------------------------------------------------ overflow: the right finite answer, or a ValueError

GAE_BOTH = [pytest.param(gae_kernel, id="kernel", marks=pytest.mark.kernels), pytest.param(gae_numpy, id="numpy")]


@pytest.mark.parametrize("fn", GAE_BOTH)
def test_float32_gae_is_exact_where_only_an_intermediate_overflows(fn):
    """delta_0 = r_0 + V_1 - V_0 = 3e38 + 3e38 - 3e38 passes 6e38 (beyond float32) on the way; the
    recursion runs in float64, so A_0 = 3e38 - 3e38 = 0 and R_0 = 3e38 come out finite and exact."""
    rewards = np.array([[3e38, 0.0]], dtype=np.float32)
    values = np.array([[3e38, 3e38]], dtype=np.float32)
    adv, returns = fn(rewards, values, None, gamma=1.0, lam=1.0)
    assert adv.dtype == np.float32 and np.isfinite(adv).all() and np.isfinite(returns).all()
    v = np.float64(np.float32(3e38))
    np.testing.assert_array_equal(adv, np.array([[0.0, -v]], dtype=np.float32))
    np.testing.assert_array_equal(returns, np.array([[v, 0.0]], dtype=np.float32))


@pytest.mark.parametrize("fn", GAE_BOTH)
@pytest.mark.filterwarnings("ignore:overflow encountered")   # NUMBA_DISABLE_JIT: numpy scalars warn
def test_gae_beyond_the_dtype_names_the_inputs(fn):
    rewards = np.array([[3e38, 3e38]], dtype=np.float32)               # A_0 = 6e38: no float32 value
    with pytest.raises(ValueError, match=r"the adv at \(0, 0\) is 6.*beyond the range of float32.*pass float64"):
        fn(rewards, np.zeros_like(rewards), None, gamma=1.0, lam=1.0)
    assert np.isfinite(fn(rewards.astype(np.float64), np.zeros((1, 2)), None, 1.0, 1.0)[0]).all()
    with pytest.raises(ValueError, match=r"beyond the range of float64.*too large"):
        fn(np.array([[1e308, 1e308]]), np.zeros((1, 2)), None, gamma=1.0, lam=1.0)
