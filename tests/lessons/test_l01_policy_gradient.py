"""Lesson 01: the baseline lowers the variance; one large step collapses the policy; every verdict of the
narrative follows from the returned numbers (two seeds)."""
import numpy as np
import pytest

from lessons import l01_policy_gradient as lesson
from minippo.studies.sweep_stats import compare_paired
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from minippo.toy.bandit import reinforce_gradient
from tests.helpers import assert_comparison, assert_printed, expected_outcome, quick_runs

pytestmark = pytest.mark.slow      # lesson runs (pytest -m slow); lesson 04, the clip cases, runs by default


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l01_quick(runs):
    r = runs[0]
    assert runs["printed"].startswith(lesson.narrative(r))           # main printed the narrative of its results
    assert (runs["out"] / "l01_policy_gradient.png").stat().st_size > 10_000
    var = r["variance"]
    none, loo, exact = (var[k] for k in lesson.BASELINES)
    assert none > 3 * loo and loo > exact                # a baseline lowers the variance
    assert max(r["bias"].values()) < 4                   # ... without a bias (in standard errors)
    assert r["final_reward"][lesson.BASELINES[1]] > r["final_reward"][lesson.BASELINES[0]]
    # one huge step: entropy collapses from ln 10 to ~0, mostly onto a token that is not the best
    ent = np.median(r["entropy_after"], axis=1)
    assert ent[0] > 0.95 * r["max_entropy"] and ent[-1] < 0.1
    assert r["p_best_after"][-1].mean() < 0.5
    # ... and plain REINFORCE does not recover from it
    assert r["stuck_fraction"][-1] >= 0.5 > r["stuck_fraction"][0]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_l01_score_identity(seed):
    """sum_a pi(a) grad log pi(a) = 0, with grad log pi(a) = e_a - pi for a softmax over one context."""
    rng = np.random.default_rng(seed)
    bandit = lesson.make_bandit(rng)
    W = rng.standard_normal((1, bandit.vocab))
    p = bandit.probs(W)[0]
    for a in range(bandit.vocab):
        g = reinforce_gradient(bandit, W, np.array([0]), np.array([a]), np.array([1.0])).ravel()
        np.testing.assert_allclose(g, np.eye(bandit.vocab)[a] - p, rtol=0, atol=1e-15)
    assert np.abs(p @ (np.eye(bandit.vocab) - p)).max() <= lesson.SCORE_TOL


@pytest.mark.parametrize("seed", [0, 1])
def test_l01_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    assert V["baseline_unbiased"].outcome == HOLDS and r["score_mean"] <= lesson.SCORE_TOL
    assert V["bias_measured"].holds == (max(r["bias"].values()) <= lesson.BIAS_SE)
    none, loo = lesson.BASELINES[:2]
    assert_comparison(V["variance_cut"], compare_paired(r["sq_err"][none], r["sq_err"][loo]), -1)
    assert np.isclose(r["sq_err"][none].mean(), r["variance"][none])
    assert_comparison(V["baseline_learns_faster"], compare_paired(r["curves"][none][:, -1], r["curves"][loo][:, -1]), +1)
    assert_comparison(V["big_step_jump"], compare_paired(np.full(r["n_seeds"], r["initial_reward"]),
                                                         r["reward_after"][-1]), +1)
    assert V["big_step_collapses"].holds == (np.median(r["entropy_after"][-1]) < 0.1)
    big, small = (r["recovery"][float(x)][:, -1] < r["optimal_reward"] - 0.1 for x in (r["big_lrs"][-1], r["big_lrs"][0]))
    assert np.isclose(big.mean(), r["stuck_fraction"][-1]) and np.isclose(small.mean(), r["stuck_fraction"][0])
    more = expected_outcome(*(lambda c: (c["diff"], c["se"]))(compare_paired(small * 1.0, big * 1.0)), +1)
    want = FAILS if (big.mean() < 0.5 or more == FAILS) else HOLDS if more == HOLDS else NOT_SHOWN
    assert V["no_recovery"].outcome == want
