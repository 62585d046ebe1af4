"""pass@k (Chen et al. 2021 eq. (1)) against brute force: every k-subset of n labelled samples, for every
n <= 12, every c and every k; the exact binomial ratio with Python's integers; validation."""
import itertools
import math

import numpy as np
import pytest

import minippo.rl
from minippo.rl.pass_k import pass_at_k


def brute_force(n: int, c: int, k: int) -> float:
    """The share of the k-subsets of n samples (the first c right) that hold a right one: enumerated."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_matches_enumeration_of_every_k_subset_for_every_n_up_to_12():
    # all (n, c, k) with 1 <= k <= n <= 12, 0 <= c <= n: 728 cases, 1.1e5 subsets in all
    cases = [(n, c, k) for n in range(1, 13) for c in range(n + 1) for k in range(1, n + 1)]
    n, c, k = (np.array(x) for x in zip(*cases))
    for kk in range(1, 13):                                   # vectorised over every problem with this k
        pick = k == kk
        got = pass_at_k(n[pick], c[pick], kk)
        want = np.array([brute_force(int(a), int(b), kk) for a, b in zip(n[pick], c[pick])])
        # the product has <= 12 factors in [0, 1): ~12 roundings of 1.1e-16 each, so 1e-14 absolute is ample
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)


def test_matches_the_exact_binomial_ratio_where_the_binomials_overflow_float64():
    # C(2000, 1000) ~ 2e600 overflows a float; Python's integers hold it exactly, and the ratio of two such
    # integers rounds once (Fraction-free: int / int is correctly rounded)
    for n, c, k in ((2000, 3, 1000), (2000, 1, 1999), (1500, 700, 64), (64, 1, 64), (64, 63, 1)):
        want = 1 - math.comb(n - c, k) / math.comb(n, k)
        # c factors of relative rounding 1.1e-16 each: at most 700 * 2.2e-16 ~ 2e-13 of the product
        assert abs(pass_at_k(n, c, k) - want) <= 1e-12


def test_known_values_and_the_limits():
    assert pass_at_k(10, 0, 5) == 0.0                          # no right sample: never solved
    assert pass_at_k(10, 10, 5) == 1.0                         # all right
    assert pass_at_k(10, 6, 5) == 1.0                          # n - c = 4 < k: every 5-subset holds a right one
    assert abs(pass_at_k(10, 3, 1) - 0.3) <= 1e-15             # k = 1 is the pass rate c / n
    # 1 - C(8, 2) / C(10, 2) = 1 - 28 / 45 = 17 / 45
    assert abs(pass_at_k(10, 2, 2) - 17 / 45) <= 1e-15


def test_vectorised_shapes_and_scalar():
    n = np.full((2, 3), 20)
    c = np.array([[0, 5, 20], [1, 2, 3]])
    got = pass_at_k(n, c, 4)
    assert got.shape == (2, 3) and got.dtype == np.float64
    for i in range(2):
        for j in range(3):
            assert got[i, j] == pass_at_k(20, int(c[i, j]), 4)
    assert isinstance(pass_at_k(20, 5, 4), float)
    assert pass_at_k(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 3).shape == (0,)


def test_exported_from_minippo_rl():
    assert minippo.rl.pass_at_k is pass_at_k


@pytest.mark.parametrize("args, needle", [
    ((5, 2, 6), "`n` must be >= k = 6"),
    ((5, 6, 2), "`c` must be in [0, n]"),
    ((5, -1, 2), "`c` must be in [0, n]"),
    ((5, 2, 0), "`k` must be in [1, inf)"),
    ((5, 2, 2.0), "`k` must be an integer"),
    ((5.0, 2, 2), "`n` must be an integer array"),
    ((np.array([5, 6]), np.array([1, 2, 3]), 2), "`c` has shape (3,)"),
    ((np.array([True]), np.array([1]), 1), "`n` must be an integer array"),
])
def test_bad_input_is_a_value_error_naming_the_argument(args, needle):
    with pytest.raises(ValueError) as err:
        pass_at_k(*args)
    assert needle in str(err.value)


def test_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="`n` must be an array"):
        pass_at_k("5", 2, 2)
