"""Smoke test of lesson 07: exact GAE bias (0 at lambda = 1 for the gradient), variance rising with
lambda, noisier rewards preferring a lower lambda, Monte Carlo agreeing with the exact expectation."""
import numpy as np

from lessons import l07_gae as lesson


def test_l07_quick(tmp_path):
    r = lesson.run(quick=True, seed=0)
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
    path = tmp_path / "l07.png"
    lesson.plot(r, path)
    assert path.stat().st_size > 10_000


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


def test_l07_main_writes_its_figure(tmp_path, capsys):
    lesson.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "l07_gae.png").exists()
    assert "Lowest gradient MSE" in capsys.readouterr().out
