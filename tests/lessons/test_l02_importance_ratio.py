"""Smoke test of lesson 02: products of probabilities underflow, the log-ratio does not; IS variance grows with KL."""
import numpy as np
import pytest

from lessons import l02_importance_ratio as lesson
from minippo.studies.verdicts import HOLDS, by_key
from tests.helpers import assert_comparison, assert_printed, quick_runs

pytestmark = pytest.mark.slow      # lesson runs (pytest -m slow); lesson 04, the clip cases, runs by default


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l02_quick(runs):
    r = runs[0]
    assert "nan" in runs["printed"]
    assert (runs["out"] / "l02_importance_ratio.png").stat().st_size > 10_000
    seq = r["sequence"]
    # float32 products die first, float64 later, the log form never
    u32, u64 = seq["underflow_T_float32"], seq["underflow_T_float64"]
    assert u32 is not None and u64 is not None and u32 < u64 < len(seq["T"])
    assert np.isnan(seq["ratio_prod_float64"][-1]) and np.isnan(seq["ratio_prod_float32"][u32 - 1])
    assert np.all(np.isfinite(seq["ratio_log"])) and np.all(seq["ratio_log"] > 0)
    # before the underflow the two forms agree
    np.testing.assert_allclose(seq["ratio_prod_float64"][: u64 // 2], seq["ratio_log"][: u64 // 2], rtol=1e-9)
    tiny = r["tokens"][-1]                                 # logit gap 120 in float32
    assert tiny["p_old"] == 0.0 and np.isnan(tiny["ratio_prob"]) and abs(tiny["ratio_log"] - np.exp(0.5)) < 1e-4
    # quadrants: d(rA)/dlogp = r A
    q = r["quadrants"]
    np.testing.assert_allclose(q[1.0], q["ratio"], rtol=1e-12)
    np.testing.assert_allclose(q[-1.0], -q["ratio"], rtol=1e-12)
    # unclipped optimisation of one batch: the ratio runs past 5, the clipped one stays far lower
    rep = r["repeated"]
    assert rep["L^CPI"]["ratio_max"][-1] > 5 > rep["L^CLIP"]["ratio_max"][-1]
    assert rep["L^CPI"]["kl"][-1] > 5 * rep["L^CLIP"]["kl"][-1]
    # the importance-sampling estimate's std grows with the KL, and the exact formula matches
    is_ = r["is"]
    assert np.all(np.diff(is_["kl"]) > 0) and is_["std_exact"][-1] > 4 * is_["std_exact"][0]
    np.testing.assert_allclose(is_["std_measured"], is_["std_exact"], rtol=0.3)



@pytest.mark.parametrize("seed", [0, 1])
def test_l02_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    q = r["quadrants"]
    for A, x, label in ((1.0, 2.0, "A>0 & r=2 "), (1.0, 0.5, "A>0 & r=0.5"), (-1.0, 2.0, "A<0 & r=2 "),
                        (-1.0, 0.5, "A<0 & r=0.5")):
        g = np.interp(x, q["ratio"], q[A])
        part = lesson.narrative(r).split(label)[1].split(")")[0]
        assert ("harder" in part) == (abs(g) > 1) and ("weakened" in part) == (abs(g) <= 1)
    # identities: d(rA)/dlogp = r A (by central differences, inside run) and E_old[r R] = J(new)
    assert V["gradient_r_A"].outcome == HOLDS and q["fd_rel_err"] <= lesson.FD_RTOL
    np.testing.assert_allclose(q[1.0], q["ratio"], rtol=1e-12)
    assert V["is_unbiased"].outcome == HOLDS
    np.testing.assert_allclose(r["is"]["exact_mean"], r["is"]["J_new"], rtol=0, atol=lesson.IS_TOL)
    rep = r["repeated"]
    over = rep["L^CPI"]["surrogate"][-1] > rep["L^CPI"]["J"][-1] - rep["J_old"]
    assert V["cpi_overpromises"].holds == over
    is_ = r["is"]
    s0, s1, n = is_["std_measured"][0], is_["std_measured"][-1], is_["n_batches"]
    assert_comparison(V["spread_grows"], {"diff": s1 - s0, "se": np.hypot(s0, s1) / np.sqrt(2 * (n - 1))}, +1)
    seq = r["sequence"]
    assert V["product_underflows"].holds == (seq["underflow_T_float32"] is not None)
