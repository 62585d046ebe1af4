"""minippo.studies.sweep_stats: per-seed values of a sweep, pooled seed noise, differences in standard errors."""
import math

import numpy as np
import pytest

from minippo.studies.sweep_stats import (compare, compare_interaction, compare_paired, curve_slope, fisher_z,
                                         pooled_seed_std,
                                         seed_compare, seed_curves, seed_values)


def fake_variant(golds, kls):
    """A variant as Study.sweep returns it: per seed, records of 6 iterations and an evaluation."""
    records = [[{"objective/kl": k * (i + 1) / 6, "iteration": i} for i in range(6)] for k in kls]
    return {"records": records, "eval": [{"gold_mean": g} for g in golds], "time": []}


def test_seed_values_reads_evaluations_then_records():
    v = fake_variant([0.1, 0.3], [6.0, 12.0])
    np.testing.assert_array_equal(seed_values(v, "gold_mean"), [0.1, 0.3])
    # mean over the last 2 iterations: k * (5 + 6) / 12
    np.testing.assert_allclose(seed_values(v, "objective/kl", last=2), [5.5, 11.0])
    extra = {"records": v["records"], "eval": [], "extra": v["eval"]}
    np.testing.assert_array_equal(seed_values(extra, "gold_mean", evals="extra"), [0.1, 0.3])
    assert seed_curves(v, "objective/kl").shape == (2, 6)
    with pytest.raises(ValueError, match="`key`"):
        seed_values(v, "gold/nothing")
    with pytest.raises(ValueError, match="`key`"):
        seed_curves(v, "gold_mean")


def test_pooled_seed_std_by_hand():
    groups = [np.array([1.0, 3.0]), np.array([0.0, 1.0, 2.0]), np.array([5.0])]
    s, dof = pooled_seed_std(groups)
    # sums of squares 2 and 2 over (1 + 2) degrees of freedom; the single seed adds nothing
    assert dof == 3 and s == pytest.approx(math.sqrt(4.0 / 3.0))
    with pytest.raises(ValueError, match="`groups`"):
        pooled_seed_std([np.array([1.0]), np.array([2.0])])


def test_compare_in_standard_errors():
    c = compare([0.0, 0.2], [0.5, 0.7, 0.6], noise=0.1)
    assert c["diff"] == pytest.approx(0.5) and c["se"] == pytest.approx(0.1 * math.sqrt(1 / 2 + 1 / 3))
    assert c["z"] == pytest.approx(0.5 / c["se"]) and c["clear"]
    assert not compare([0.0, 0.2], [0.15, 0.1], noise=0.1)["clear"]
    assert compare([1.0], [1.0], noise=0.0)["z"] == 0.0 and compare([1.0], [2.0], noise=0.0)["z"] == math.inf
    with pytest.raises(ValueError, match="`noise`"):
        compare([1.0], [2.0], noise=-1.0)


def test_compare_interaction_by_hand():
    # condition a: 1.0 -> 1.5 (+0.5); condition b: 2.0 -> 1.0 (-1.0); two seeds each, noise 0.2
    c = compare_interaction([0.9, 1.1], [1.4, 1.6], [2.0, 2.0], [0.8, 1.2], 0.2)
    assert c["diff"] == pytest.approx(-1.5) and c["se"] == pytest.approx(0.2 * math.sqrt(4 * 0.5))
    assert c["z"] == pytest.approx(-1.5 / (0.2 * math.sqrt(2))) and c["clear"]
    same = compare_interaction([0.0], [1.0], [5.0], [6.0], 0.1)                   # the same gain in both conditions
    assert same["diff"] == 0.0 and same["z"] == 0.0 and not same["clear"]
    assert compare_interaction([0.0], [1.0], [0.0], [0.0], 0.0)["z"] == -math.inf
    with pytest.raises(ValueError, match="`noise`"):
        compare_interaction([0.0], [1.0], [0.0], [0.0], -1.0)
    with pytest.raises(ValueError, match="at least one value"):
        compare_interaction([], [1.0], [0.0], [0.0], 1.0)


def test_compare_paired_by_hand():
    # differences 1, 2, 3: mean 2, std (ddof 1) 1, se 1 / sqrt(3)
    c = compare_paired([0.0, 10.0, 20.0], [1.0, 12.0, 23.0])
    assert c["diff"] == 2.0 and c["n"] == 3
    assert math.isclose(c["se"], 1 / math.sqrt(3), rel_tol=1e-12)
    assert math.isclose(c["z"], 2 * math.sqrt(3), rel_tol=1e-12) and c["clear"]
    # the same shift on units that differ a lot: the pairing removes the units' spread
    assert compare_paired([0.0, 100.0, -50.0], [0.5, 100.6, -49.4])["clear"]
    assert not compare_paired([0.0, 1.0], [1.0, 0.0])["clear"]             # +1 and -1: mean 0
    assert compare_paired([1.0, 2.0], [2.0, 3.0])["z"] == math.inf
    assert compare_paired([1.0, 2.0], [1.0, 2.0])["z"] == 0.0


@pytest.mark.parametrize("a, b", [([1.0], [2.0]), ([1.0, 2.0], [1.0]), ([[1.0, 2.0]], [[1.0, 2.0]]),
                                  ([1.0, np.nan], [1.0, 2.0])])
def test_compare_paired_rejects_unpaired_input(a, b):
    with pytest.raises(ValueError, match="`a` and `b`"):
        compare_paired(a, b)


def _ls_slope(y):
    """Least-squares slope by the closed form cov(x, y) / var(x) (an oracle independent of np.polyfit)."""
    x = np.arange(len(y), dtype=float)
    return ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()


def test_curve_slope_over_seeds_and_from_one_curve():
    Y = np.array([[0.0, 1.0, 2.5, 3.0], [1.0, 1.5, 3.0, 4.5]])
    slopes = [_ls_slope(y) for y in Y]
    c = curve_slope(Y)
    assert c["noise"] == "seed"
    assert c["diff"] == pytest.approx(np.mean(slopes), abs=1e-12)          # float64 fits of 4 points: ~1e-15
    assert c["se"] == pytest.approx(np.std(slopes, ddof=1) / math.sqrt(2), abs=1e-12)
    assert c["clear"] == (abs(c["diff"]) >= 2 * c["se"])
    one = curve_slope(Y[:1])                                                # one seed: the fit's residual error
    x = np.arange(4.0)
    b = _ls_slope(Y[0])
    resid = Y[0] - (Y[0].mean() + b * (x - x.mean()))
    se = math.sqrt((resid ** 2).sum() / 2 / ((x - x.mean()) ** 2).sum())
    assert one["noise"] == "fit residual" and one["diff"] == pytest.approx(b, abs=1e-12)
    assert one["se"] == pytest.approx(se, abs=1e-12)
    assert curve_slope(Y[:1, :2])["se"] is None and curve_slope(Y[:1, :2])["clear"] is None   # two points: no se
    with pytest.raises(ValueError, match="`Y`"):
        curve_slope(np.arange(4.0))


def test_seed_compare_with_and_without_noise():
    assert seed_compare([1.0, 2.0], [4.0], 1.0) == compare([1.0, 2.0], [4.0], 1.0)
    c = seed_compare([1.0, 2.0], [4.0], None)
    assert c == {"diff": 2.5, "se": None, "z": None, "clear": None}


def test_fisher_z():
    # |atanh(0.39)| * sqrt(25) = 2.06 >= 2; atanh(0.37) * 5 = 1.94 < 2
    for rho, n, clear in ((0.39, 28, True), (-0.39, 28, True), (0.37, 28, False), (0.0, 28, False)):
        c = fisher_z(rho, n)
        assert c["se"] == pytest.approx(0.2) and (abs(c["diff"]) >= 2 * c["se"]) == clear
    assert np.isfinite(fisher_z(1.0, 4)["diff"])                            # clipped away from atanh(1) = inf
    with pytest.raises(ValueError, match="`n`"):
        fisher_z(0.5, 3)

