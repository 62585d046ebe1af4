"""Smoke test of lesson 02: products of probabilities underflow, the log-ratio does not; IS variance grows with KL."""
import numpy as np

from lessons import l02_importance_ratio as lesson


def test_l02_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--seed", "0", "--out", str(tmp_path)])      # run + narrative + plot
    assert "nan" in capsys.readouterr().out
    assert (tmp_path / "l02_importance_ratio.png").stat().st_size > 10_000
    seq = r["sequence"]
    # float32 products die first, float64 later, the log form never
    u32, u64 = seq["underflow_T_float32"], seq["underflow_T_float64"]
    assert u32 is not None and u64 is not None and u32 < u64 < len(seq["T"])
    assert np.isnan(seq["ratio_prod_float64"][-1]) and np.isnan(seq["ratio_prod_float32"][u32 - 1])
    assert np.all(np.isfinite(seq["ratio_log"])) and np.all(seq["ratio_log"] > 0)
    # before the underflow the two forms agree
    np.testing.assert_allclose(seq["ratio_prod_float64"][: u64 // 2], seq["ratio_log"][: u64 // 2], rtol=1e-9)
    tiny = r["tokens"][-1]                                 # logit gap 120 in float32
    assert tiny["p_old"] == 0.0 and np.isnan(tiny["ratio_prob"]) and abs(tiny["ratio_log"] - np.exp(0.5)) < 1e-4
    # quadrants: d(rA)/dlogp = r A
    q = r["quadrants"]
    np.testing.assert_allclose(q[1.0], q["ratio"], rtol=1e-12)
    np.testing.assert_allclose(q[-1.0], -q["ratio"], rtol=1e-12)
    # unclipped optimisation of one batch: the ratio runs past 5, the clipped one stays far lower
    rep = r["repeated"]
    assert rep["L^CPI"]["ratio_max"][-1] > 5 > rep["L^CLIP"]["ratio_max"][-1]
    assert rep["L^CPI"]["kl"][-1] > 5 * rep["L^CLIP"]["kl"][-1]
    # the importance-sampling estimate's std grows with the KL, and the exact formula matches
    is_ = r["is"]
    assert np.all(np.diff(is_["kl"]) > 0) and is_["std_exact"][-1] > 4 * is_["std_exact"][0]
    np.testing.assert_allclose(is_["std_measured"], is_["std_exact"], rtol=0.3)

