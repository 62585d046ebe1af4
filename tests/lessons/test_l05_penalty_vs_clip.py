"""Smoke test of lesson 05: the paper's adaptive rule changes beta; a fixed beta does not; clip needs none."""
import numpy as np
import pytest

from lessons import l05_penalty_vs_clip as lesson
from minippo.studies.sweep_stats import compare_paired
from minippo.studies.verdicts import by_key
from tests.helpers import assert_comparison, assert_printed, quick_runs

pytestmark = pytest.mark.slow      # lesson runs (pytest -m slow); lesson 04, the clip cases, runs by default


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l05_quick(runs):
    r = runs[0]
    assert runs["printed"].startswith(lesson.narrative(r))
    assert (runs["out"] / "l05_penalty_vs_clip.png").stat().st_size > 10_000
    runs, summ = r["runs"], r["summary"]                 # from here on: the lesson's runs
    lo, hi = r["band"]
    for b in lesson.INIT_BETAS:
        beta, kl = runs[f"adaptive beta0={b:g}"]["kl_coef"], runs[f"adaptive beta0={b:g}"]["kl"]
        assert np.all(beta[:, 0] == b) and summ[f"adaptive beta0={b:g}"]["beta_changes"] > 0
        # every transition follows sec. 4: d < d_targ/1.5 -> /2, d > 1.5 d_targ -> x2, else kept
        want = np.where(kl[:, :-1] < lo, beta[:, :-1] / 2, np.where(kl[:, :-1] > hi, beta[:, :-1] * 2, beta[:, :-1]))
        np.testing.assert_allclose(beta[:, 1:], want)
    for b in lesson.FIXED_BETAS:
        assert np.all(runs[f"fixed beta={b:g}"]["kl_coef"] == b)
    # a large initial beta is halved towards useful values; the large fixed one stays (and learns slowly)
    assert runs["adaptive beta0=100"]["kl_coef"][:, -1].max() < 100
    assert summ["clip"]["final"] > summ["fixed beta=10"]["final"]
    assert summ["clip"]["final"] > 0.3 and np.all(runs["clip"]["clipfrac"] >= 0)



@pytest.mark.parametrize("seed", [0, 1])
def test_l05_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    a1 = r["summary"]["adaptive beta0=1"]
    beta = r["runs"]["adaptive beta0=1"]["kl_coef"]                     # reversals recounted from the betas
    moves = [np.sign(np.diff(np.log(b)))[np.diff(np.log(b)) != 0] for b in beta]
    assert np.isclose(np.mean([np.sum(m[1:] != m[:-1]) for m in moves]), a1["beta_reversals"])
    assert V["beta_oscillates"].holds == (a1["beta_reversals"] > 0)
    assert V["kl_in_band"].holds == (a1["in_band"] > 0.5)
    assert_comparison(V["clip_beats_penalty"], compare_paired(r["runs"]["adaptive beta0=1"]["progress"][:, -1],
                                                              r["runs"]["clip"]["progress"][:, -1]), +1)
    ends = [r["summary"][f"adaptive beta0={b:g}"]["beta_final"] for b in lesson.INIT_BETAS]
    assert V["forgets_beta0"].holds == (max(ends) / min(ends) < lesson.FORGOTTEN)
    early = {b: r["runs"][f"adaptive beta0={b:g}"]["progress"][:, lesson.EARLY - 1] for b in lesson.INIT_BETAS}
    lo, hi = lesson.INIT_BETAS[0], lesson.INIT_BETAS[-1]
    assert_comparison(V["beta0_matters_early"], compare_paired(early[lo], early[hi]), -1)
