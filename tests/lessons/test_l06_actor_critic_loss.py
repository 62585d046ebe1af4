"""Smoke test of lesson 06: the entropy bonus keeps entropy up and finds the rare best token; the critic learns."""
import numpy as np
import pytest

from lessons import l06_actor_critic_loss as lesson
from minippo.studies.sweep_stats import compare_paired
from minippo import kernels
from minippo.studies.verdicts import HOLDS, by_key
from tests.helpers import assert_comparison, assert_printed, quick_runs

pytestmark = pytest.mark.slow      # lesson runs (pytest -m slow); lesson 04, the clip cases, runs by default


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l06_quick(runs):
    r = runs[0]
    assert "explained variance" in runs["printed"]
    assert (runs["out"] / "l06_actor_critic_loss.png").stat().st_size > 10_000
    h0, h1 = r["hist"][0.0], r["hist"][0.1]
    # entropy is higher with the bonus, and without it the policy collapses onto the decoy
    assert r["entropy_at_10"][0.1] > r["entropy_at_10"][0.0]
    assert h1["entropy"][:, -1].mean() > h0["entropy"][:, -1].mean()
    assert h0["p_best"][:, -1].mean() < 0.05 < h1["p_best"][:, -1].mean()
    # the critic learns: explained variance goes from 0 (V = 0) towards its ceiling
    assert h1["explained_variance"][:, 0].mean() == 0.0
    assert h1["explained_variance"][:, -5:].mean() > 0.5 * h1["explained_variance_exact"][:, -5:].mean() > 0
    # the gradients on one context's logits: each sums to 0 (softmax shift), entropy holds the decoy back
    g = r["grads"]
    assert abs(g["policy"].sum()) < 1e-12 and abs(g["entropy"].sum()) < 1e-12
    assert g["entropy"][g["decoy"]] < 0 < g["entropy"][g["best"]] and g["policy"][g["decoy"]] > 0
    # closed form of the entropy descent direction: -c2 p (log p + H) * (samples of the context) / N
    p = g["probs"]
    H = -np.sum(p * np.log(p))
    want = -lesson.SHOW_ENT_COEF * p * (np.log(p) + H) * g["n_context"] / lesson.config(0).batch_size
    np.testing.assert_allclose(g["entropy"], want, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "numpy"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_l06_entropy_gradient_identity(seed, use_kernels):
    """dH/dz = -p (log p + H): the library's entropy_backward against central differences, on both paths."""
    with kernels.use_kernels(use_kernels):
        bandit, W0, decoy, best = lesson.make_task(np.random.default_rng([seed, 0]))
        g = lesson.gradient_terms(bandit, W0, np.random.default_rng([seed, 2]))
    assert g["entropy_fd_rel_err"] <= lesson.FD_RTOL
    p = bandit.probs(W0)[0]
    H = -(p * np.log(p)).sum()
    c = lesson.SHOW_ENT_COEF * g["n_context"] / lesson.config(0).batch_size     # -c2 mean H, summed over the rows
    np.testing.assert_allclose(g["entropy"], c * -p * (np.log(p) + H), rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("seed", [0, 1])
def test_l06_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    g = r["grads"]
    d, best = g["decoy"], g["best"]
    assert V["entropy_gradient"].outcome == HOLDS
    assert V["bonus_holds_back_decoy"].holds == (g["entropy"][d] < 0 and abs(g["entropy"][best]) < abs(g["entropy"][d]))
    c0, c1 = r["ent_coefs"][0], r["ent_coefs"][-1]
    e, p = (compare_paired(r["hist"][c0][k][:, -5:].mean(axis=1), r["hist"][c1][k][:, -5:].mean(axis=1))
            for k in ("entropy", "p_best"))
    assert_comparison(V["bonus_keeps_entropy"], e, +1)
    assert_comparison(V["bonus_finds_best"], p, +1)
    assert V["collapse_without_bonus"].holds == (r["hist"][c0]["entropy"][:, -5:].mean() < 0.1 * np.log(8))
