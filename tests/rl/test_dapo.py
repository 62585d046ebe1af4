"""DAPO's zero-variance group filter and soft overlong punishment (eq. (13)) against plain loops; the filter
picks exactly the groups whose GRPO / RLOO advantages are all 0; validation."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minippo.rl
from minippo.rl.dapo import overlong_penalty, zero_variance_groups, zero_variance_share
from minippo.rl.group_advantages import grpo_advantages, rloo_advantages


def zero_variance_loop(rewards, n):
    out = []
    for g in range(len(rewards) // n):
        group = [float(r) for r in rewards[g * n:(g + 1) * n]]
        out.append(all(r == group[0] for r in group))
    return out


def overlong_loop(lengths, max_len, cache_len):
    """DAPO eq. (13), branch by branch, written as the paper does."""
    out = []
    for y in lengths:
        if y <= max_len - cache_len:
            out.append(0.0)
        elif y <= max_len:
            out.append(((max_len - cache_len) - y) / cache_len)
        else:
            out.append(-1.0)
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(1, 6), st.integers(0, 2**31 - 1), st.booleans())
def test_zero_variance_groups_match_a_loop(n, G, seed, binary):
    rng = np.random.default_rng(seed)
    rewards = (rng.integers(0, 2, G * n) if binary else rng.integers(0, 3, G * n) * 0.5).astype(np.float64)
    got = zero_variance_groups(rewards, n)
    assert got.dtype == bool and got.tolist() == zero_variance_loop(rewards, n)
    assert zero_variance_share(rewards, n) == pytest.approx(np.mean(zero_variance_loop(rewards, n)), abs=0)


def test_zero_variance_groups_are_those_with_no_advantage():
    # 0/1 rewards of 4 groups of 4: all right, all wrong, mixed, mixed
    rewards = np.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 1], dtype=np.float64)
    mask = np.ones((16, 3))
    zero = zero_variance_groups(rewards, 4)
    assert zero.tolist() == [True, True, False, False] and zero_variance_share(rewards, 4) == 0.5
    for adv in (grpo_advantages(rewards, 4, mask), rloo_advantages(rewards, 4, mask)):
        per_group = np.abs(adv).reshape(4, -1).max(axis=1)
        assert ((per_group == 0) == zero).all()


def test_an_equal_but_not_zero_reward_group_is_zero_variance_and_one_ulp_apart_is_not():
    r = np.array([0.3, 0.3, 0.3, np.nextafter(0.3, 1.0)])
    assert zero_variance_groups(r, 2).tolist() == [True, False]


@pytest.mark.parametrize("max_len, cache_len", [(8, 4), (8, 0), (8, 8), (20, 5), (1, 1)])
def test_overlong_penalty_matches_the_three_branches(max_len, cache_len):
    lengths = np.arange(0, max_len + 4)
    got = overlong_penalty(lengths, max_len, cache_len)
    np.testing.assert_allclose(got, overlong_loop(lengths, max_len, cache_len), rtol=0, atol=1e-15)
    assert got.dtype == np.float64 and (got <= 0).all() and (got >= -1).all()


def test_overlong_penalty_values_and_continuity():
    # L_max 16, L_cache 4: free up to 12 tokens, then -1/4 per token, -1 at 16 and beyond
    got = overlong_penalty(np.array([12, 13, 14, 16, 17]), 16, 4)
    assert got.tolist() == [0.0, -0.25, -0.5, -1.0, -1.0]


def test_exported_from_minippo_rl():
    assert minippo.rl.overlong_penalty is overlong_penalty
    assert minippo.rl.zero_variance_groups is zero_variance_groups


@pytest.mark.parametrize("call, needle", [
    (lambda: zero_variance_groups(np.zeros(6), 4), "`group_size` (4) must divide"),
    (lambda: zero_variance_groups(np.zeros(6), 1), "`group_size` must be in [2, inf)"),
    (lambda: zero_variance_groups(np.zeros(0), 2), "must divide"),
    (lambda: zero_variance_groups(np.array([0.0, np.nan]), 2), "`rewards` must be finite"),
    (lambda: zero_variance_groups(np.array([0, 1]), 2), "`rewards` must be float32 or float64"),
    (lambda: zero_variance_groups(np.zeros((2, 2)), 2), "`rewards` must be 1-D"),
    (lambda: overlong_penalty(np.array([1, -1]), 8, 2), "`lengths` must be >= 0"),
    (lambda: overlong_penalty(np.array([1.0]), 8, 2), "`lengths` must be an integer array"),
    (lambda: overlong_penalty(np.array([1]), 8, 9), "`cache_len` must be in [0, 8]"),
    (lambda: overlong_penalty(np.array([1]), 0, 0), "`max_len` must be in [1, inf)"),
])
def test_bad_input_is_a_value_error_naming_the_argument(call, needle):
    with pytest.raises(ValueError) as err:
        call()
    assert needle in str(err.value)
