"""Smoke test of lesson 03: TRPO respects its KL bound, PG's KL is unbounded, Figure 2's shape."""
import numpy as np
import pytest

from lessons import l03_trust_region as lesson
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from tests.helpers import assert_comparison, assert_printed, expected_outcome, quick_runs

pytestmark = pytest.mark.slow      # lesson runs (pytest -m slow); lesson 04, the clip cases, runs by default


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l03_quick(runs):
    r = runs[0]
    assert runs["printed"].startswith(lesson.narrative(r))
    assert (runs["out"] / "l03_trust_region.png").stat().st_size > 10_000
    m, kl = r["mults"], r["kl"]
    pg, trpo, ppo = (lesson.METHODS.index(x) for x in ("vanilla PG", "TRPO", "PPO-clip"))
    # the constrained step satisfies its bound on every batch and step size
    assert np.all(kl[trpo] <= m[:, None] * lesson.BASE["TRPO"] + 1e-12)
    assert np.all(kl[trpo] > 0)
    # the vanilla step's KL grows like m^2: unbounded
    assert kl[pg, -1].mean() / kl[pg, 0].mean() > 0.1 * (m[-1] / m[0]) ** 2
    # the clip bounds no KL either: a large enough lr moves far beyond the band's KL
    assert kl[ppo, -1].mean() > 10 * lesson.PAPER_KL
    # the batch's surrogate over-promises for large steps
    assert np.all(r["promise"][:, -1].mean(axis=1) > r["gain"][:, -1].mean(axis=1))
    # Figure 2: L^CLIP is a lower bound of L^CPI with an interior peak near the PPO update (a = 1),
    # while L^CPI keeps rising along the line
    f2 = r["fig2"]
    assert np.all(f2["L^CLIP"] <= f2["L^CPI"] + 1e-12)
    assert 0.7 <= r["fig2_peak_alpha"] < 1.8 and f2["L^CLIP"][-1] < f2["L^CLIP"].max()
    assert f2["L^CPI"][-1] == f2["L^CPI"].max()
    assert 0.005 < r["fig2_kl_at_1"] < 0.08
    assert np.all(np.diff(f2["KL"]) > 0) and f2["KL"][0] == 0



@pytest.mark.parametrize("seed", [0, 1])
def test_l03_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    m, kl = r["mults"], r["kl"]
    bound = np.max(kl[1] / (m[:, None] * lesson.BASE["TRPO"]))
    assert V["trpo_in_bound"].holds == (bound <= 1.0)
    f2 = r["fig2"]
    rising = f2["L^CPI"][-1] > f2["L^CPI"][np.argmax(f2["L^CLIP"])]
    assert V["fig2_cpi_rises_past_peak"].holds == rising
    below = []
    for i, method in enumerate(lesson.METHODS):
        frac = r["gain"][i] / r["promise"][i]
        small, large = frac[0], frac[-1]
        d = large - small
        assert_comparison(V[f"overpromise_grows[{method}]"], {"diff": d.mean(), "se": d.std(ddof=1) / np.sqrt(len(d))}, -1)
        below.append(expected_outcome(small.mean() - 1, small.std(ddof=1) / np.sqrt(len(small)), -1))
    want = FAILS if FAILS in below else HOLDS if set(below) == {HOLDS} else NOT_SHOWN
    assert V["promise_partly_noise"].outcome == want
    j = int(np.argmin(np.abs(m - 1.0)))
    d = kl[2, -1] - kl[2, j]
    assert_comparison(V["ppo_kl_grows"], {"diff": d.mean(), "se": d.std(ddof=1) / np.sqrt(len(d))}, +1)
