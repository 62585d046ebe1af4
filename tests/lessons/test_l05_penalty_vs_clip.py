"""Smoke test of lesson 05: the paper's adaptive rule changes beta; a fixed beta does not; clip needs none."""
import numpy as np

from lessons import l05_penalty_vs_clip as lesson


def test_l05_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--seed", "0", "--out", str(tmp_path)])      # run + narrative + plot
    assert "reverses" in capsys.readouterr().out
    assert (tmp_path / "l05_penalty_vs_clip.png").stat().st_size > 10_000
    runs, summ = r["runs"], r["summary"]
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

