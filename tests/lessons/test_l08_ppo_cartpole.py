"""Smoke test of lesson 08: both runs learn, target-KL early stopping fires, the dashboard is written."""
import numpy as np
import pytest

from lessons import l08_ppo_cartpole as lesson
from minippo.classic.ppo import actor_logits, init_agent
from minippo.rl.losses import log_softmax
from minippo.studies.verdicts import by_key
from tests.helpers import assert_printed, assert_verdict, quick_runs

pytestmark = pytest.mark.slow      # lesson runs (pytest -m slow); lesson 04, the clip cases, runs by default


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l08_quick(runs):
    r = runs[0]
    d = r["summary"]["defaults"]
    k = r["summary"][f"kl_old_target = {lesson.KL_OLD_TARGET:g}"]
    for res in r["runs"].values():
        ret = res["episode_returns"]
        assert ret[-20:].mean() > 2 * ret[:20].mean()         # 16 updates already double the return
    # the tiny target fires, the default run never stops early
    assert k["early_stops"] > 0 and k["epochs_skipped"] >= k["early_stops"]
    assert d["early_stops"] == 0
    stopped = [h for h in r["runs"][f"kl_old_target = {lesson.KL_OLD_TARGET:g}"]["history"]
               if h["early_stop_epoch"] is not None]
    assert all(h["losses/approx_kl"] > lesson.KL_OLD_TARGET for h in stopped)
    # the first policy is uniform (0.01-gain output layer) and the entropy falls from there
    assert abs(d["entropy_start"] - np.log(2)) < 0.01 and d["entropy_end"] < d["entropy_start"]
    path = runs["out"] / "l08_ppo_cartpole.png"
    assert path.stat().st_size > 50_000
    out = runs["printed"]
    assert "clip fraction" in out and "explained variance" in out and "stopped early" in out


@pytest.mark.parametrize("seed", [0, 1])
def test_l08_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    d = r["summary"]["defaults"]
    assert_verdict(text, "- value loss:", d["value_loss_last"] < d["value_loss_first"], "it fell", "it rose")
    reached = r["runs"]["defaults"]["episode_returns"].max() >= 500
    assert_verdict(text, "- value loss:", reached, "episodes reached the 500-step limit", "no episode reached")
    assert_verdict(text, "- entropy:", d["entropy_end"] < d["entropy_start"], "it declined", "did not decline")
    assert_verdict(text, "- approx KL", d["kl_median_last"] < d["kl_median_first"], "(lower, as", "not lower")
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    # the first policy: the run's initial weights (the generator's first draws) on CartPole-like reset states
    params = init_agent(4, 2, np.random.default_rng(seed), 64)
    obs = np.random.default_rng([seed, 8]).uniform(-0.05, 0.05, size=(1024, 4))
    p = np.exp(log_softmax(actor_logits(params, obs)[0]))
    gap = np.abs(-(p * np.log(p)).sum(-1) - np.log(2)).max()
    assert np.isclose(gap, r["initial_entropy_gap"], rtol=1e-6, atol=1e-12)
    assert V["uniform_start"].holds == (gap < lesson.UNIFORM_TOL)
    assert V["critic_dominates"].holds == (d["grad_norm_critic_first"] > 3 * d["grad_norm_actor_first"])
    ret = r["runs"]["defaults"]["episode_returns"]
    reached = any(ret[max(0, i - 19):i + 1].mean() >= 475 for i in range(19, len(ret)))
    assert V["solves"].holds == reached
