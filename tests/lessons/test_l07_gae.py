"""Smoke test of lesson 07: exact GAE bias (0 at lambda = 1 for the gradient), variance rising with
lambda, noisier rewards preferring a lower lambda, Monte Carlo agreeing with the exact expectation."""
import numpy as np
import pytest

from lessons import l07_gae as lesson
from minippo.studies.sweep_stats import compare_paired
from minippo import kernels
from minippo.rl.gae import gae
from minippo.studies.verdicts import FAILS, HOLDS, by_key
from tests.helpers import assert_comparison, assert_printed, expected_outcome, quick_runs

pytestmark = pytest.mark.slow      # lesson runs (pytest -m slow); lesson 04, the clip cases, runs by default


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l07_quick(runs):
    r = runs[0]
    lams, b, v = r["lams"], r["bias"], r["var"]
    pg_bias = [b[lam]["pg"] for lam in lams]
    assert all(x > y for x, y in zip(pg_bias, pg_bias[1:]))          # bias falls with lambda
    assert b[1.0]["gap"] < 1e-12 and b[1.0]["pg"] < 1e-12             # Monte Carlo: gamma-just
    assert b[1.0]["adv"] > 0.05                                       # ... though A_hat is offset by e(s)
    assert r["bias_exact_critic"] < 1e-12                             # exact critic: no bias at any lambda
    for sigma in r["sigmas"]:
        std = [v[sigma][lam]["adv_std"] for lam in lams]
        assert std[-1] > 2 * std[0]                                   # variance grows toward Monte Carlo
        assert max(r["mc_check"][sigma].values()) < 5                 # sampled mean == exact expectation
    clean, noisy = r["sigmas"]
    assert v[noisy][1.0]["pg_std"] > 3 * v[clean][1.0]["pg_std"]
    assert r["best_lam"][noisy] <= r["best_lam"][clean]
    t = r["timing"]
    assert t["kernel"] > 0 and t["numpy"] > 0 and t["python"] > 0 and t["max_abs_diff"] < 1e-4
    assert (runs["out"] / "l07_gae.png").stat().st_size > 10_000
    assert runs["printed"].startswith(lesson.narrative(r)) and "Lowest gradient MSE" in runs["printed"]


def test_exact_values_match_the_chain():
    """V solves the Bellman equation; E[A_hat] for lambda = 0 is the expected TD error."""
    m = lesson.make_chain(0)
    N, pi, R = m["N"], m["pi"], m["R"]
    V_ext = np.concatenate([[0.0], m["V"], [0.0]])                    # terminal value 0 at both ends
    backup = (pi[:, 0] * (R[:, 0] + V_ext[0:N]) + pi[:, 1] * (R[:, 1] + V_ext[2:N + 2]))
    np.testing.assert_allclose(backup, m["V"], atol=1e-12)
    Vh = np.concatenate([[0.0], m["V_hat"], [0.0]])
    td = np.stack([R[:, 0] + Vh[0:N], R[:, 1] + Vh[2:N + 2]], axis=1) - m["V_hat"][:, None]
    np.testing.assert_allclose(lesson.expected_gae(m, 0.0), td, atol=1e-12)


@pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "numpy"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_l07_identities(seed, use_kernels):
    """Prop. 1 of the GAE paper on the chain, exactly: the lambda = 1 gap bias and the exact critic's bias are 0;
    and the sampled GAE at lambda = 1 is the reward-to-go minus V_hat (the critic's error enters as -e(s_t))."""
    m = lesson.make_chain(seed)
    e1 = lesson.expected_gae(m, 1.0)
    np.testing.assert_allclose(e1[:, 1] - e1[:, 0], m["A"][:, 1] - m["A"][:, 0], rtol=0, atol=lesson.EXACT)
    exact = dict(m, V_hat=m["V"])
    for lam in lesson.LAMS:
        np.testing.assert_allclose(lesson.expected_gae(exact, lam), m["A"], rtol=0, atol=lesson.EXACT)
    states, actions, rewards, mask = lesson.rollout(m, 16, np.random.default_rng(seed), 1.0)
    with kernels.use_kernels(use_kernels):
        adv, _ = gae(rewards, m["V_hat"][states] * mask, mask, gamma=1.0, lam=1.0)
    togo = np.cumsum(rewards[:, ::-1], axis=1)[:, ::-1] * mask
    np.testing.assert_allclose(adv, (togo - m["V_hat"][states]) * mask, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_l07_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    b = r["bias"]
    assert V["mc_gap_unbiased"].outcome == HOLDS == V["exact_critic_unbiased"].outcome
    clean, noisy = r["sigmas"]

    def sq(lam, ref):                       # per batch |g_hat - ref|^2, in units of |g|^2
        G = r["pg_samples"][noisy][lam]
        return ((G - (G.mean(axis=0) if ref is None else ref)) ** 2).sum(axis=1)

    d = compare_paired(sq(0.99, None), sq(0.95, None))
    var = expected_outcome(d["diff"], d["se"], -1)
    want = FAILS if var == FAILS or b[0.95]["pg"] <= b[0.99]["pg"] else var
    assert V["lam095_vs_099"].outcome == want
    best = r["best_lam"]
    lower = [lam for lam in r["lams"] if lam < best[clean]]
    low = min(lower, key=lambda lam: r["var"][noisy][lam]["pg_mse"])
    assert_comparison(V["noisier_lower_lambda"], compare_paired(sq(low, r["pg_true"]), sq(best[clean], r["pg_true"])), +1)
    worst = max(max(r["mc_check"][s].values()) for s in r["sigmas"])
    assert V["mc_agrees"].holds == (worst < lesson.MC_SE)
