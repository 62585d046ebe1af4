"""Smoke test of lesson 03: TRPO respects its KL bound, PG's KL is unbounded, Figure 2's shape."""
import numpy as np

from lessons import l03_trust_region as lesson


def test_l03_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--seed", "0", "--out", str(tmp_path)])      # run + narrative + plot
    assert "TRPO never exceeds its bound" in capsys.readouterr().out
    assert (tmp_path / "l03_trust_region.png").stat().st_size > 10_000
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

