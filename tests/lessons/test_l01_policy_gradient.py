"""Lesson 01: the baseline lowers the variance; one large step collapses the policy; every verdict of the
narrative follows from the returned numbers (two seeds)."""
import numpy as np
import pytest

from lessons import l01_policy_gradient as lesson
from minippo.studies.sweep_stats import compare_paired
from tests.helpers import assert_one_of, assert_verdict, quick_runs


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


@pytest.mark.parametrize("seed", [0, 1])
def test_l01_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    unbiased = max(r["bias"].values()) <= lesson.BIAS_SE
    assert_verdict(text, "(a) variance", unbiased, "consistent with no bias", "BIASED")
    c = compare_paired(r["curves"][lesson.BASELINES[0]][:, -1], r["curves"][lesson.BASELINES[1]][:, -1])
    assert_verdict(text, "(b) after", c["clear"], "beyond 2 s.e.", "within 2 s.e.")
    jump = compare_paired(np.full(r["n_seeds"], r["initial_reward"]), r["reward_after"][-1])
    line = "The largest step"
    sign = int(np.sign(jump["diff"])) if jump["clear"] else 0
    assert_one_of(text, line, {1: "J is higher", -1: "J is lower", 0: "J is no different"}, sign)
    assert_verdict(text, line, np.median(r["entropy_after"][-1]) < 0.1, "almost deterministic", "not deterministic")
    assert_verdict(text, line, r["p_best_after"][-1].mean() < 0.5, "merely looked good", "mostly on the best token")
    stuck = r["stuck_fraction"]
    assert_verdict(text, "After it, plain REINFORCE", stuck[-1] >= 0.5 and stuck[-1] > stuck[0],
                   "does not recover", "recovers:")
