"""Smoke test of lesson 05: the paper's adaptive rule changes beta; a fixed beta does not; clip needs none."""
import numpy as np
import pytest

from lessons import l05_penalty_vs_clip as lesson
from minippo.studies.sweep_stats import compare_paired
from tests.helpers import assert_verdict, quick_runs


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
    text = lesson.narrative(r)
    a1 = r["summary"]["adaptive beta0=1"]
    line = "The adaptive rule (beta0 = 1)"
    assert_verdict(text, line, a1["beta_reversals"] > 0, "(it oscillates)", "never reverses direction")
    assert_verdict(text, line, a1["in_band"] < 0.5, "most updates miss the band", "of the updates.")
    clip = compare_paired(r["runs"]["adaptive beta0=1"]["progress"][:, -1], r["runs"]["clip"]["progress"][:, -1])
    assert_verdict(text, "PPO-Clip has no beta", clip["clear"], "beyond 2 s.e.", "within 2 s.e.")
    ends = [r["summary"][f"adaptive beta0={b:g}"]["beta_final"] for b in lesson.INIT_BETAS]
    assert_verdict(text, "ends at beta", max(ends) / min(ends) < lesson.FORGOTTEN, "the rule forgets the initial value",
                   "has not forgotten")
    early = {b: r["runs"][f"adaptive beta0={b:g}"]["progress"][:, lesson.EARLY - 1] for b in lesson.INIT_BETAS}
    best, worst = max(early, key=lambda b: early[b].mean()), min(early, key=lambda b: early[b].mean())
    c = compare_paired(early[worst], early[best])
    assert_verdict(text, f"Progress after {lesson.EARLY} iterations", c["clear"], "still depends on the initial beta",
                   "no dependence on the initial beta")
