"""Smoke test of lesson 13: both shapings train; the score lands where each shaping puts it; the uniform
shaping's last token gets anti-credit from the reward-model critic; whole responses leave the clip band
far more often than tokens."""
import numpy as np

from lessons import l13_reward_shaping as lesson


def test_l13_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    m = r["rollout"]["mask"] != 0
    last = m.sum(axis=1) - 1
    rows = np.arange(len(last))
    kl_reward = -r["beta"] * r["rollout"]["kl"]
    kf, un = r["credit"]["kl_final"]["rewards"], r["credit"]["uniform"]["rewards"]
    # kl_final: the score sits on the last valid token; uniform: score / n on each token; both sum to the same return
    np.testing.assert_allclose(kf[rows, last] - kl_reward[rows, last], r["rollout"]["scores"], atol=1e-9)
    np.testing.assert_allclose(kf.sum(axis=1), un.sum(axis=1), atol=1e-9)
    assert not kf[~m].any() and not un[~m].any()
    s = lesson.summary(r)
    assert s["uniform"]["corr_end"][0] < 0 < s["kl_final"]["corr_end"][0]      # anti-credit on the uniform EOS
    assert s["uniform"]["ev_first"] < s["kl_final"]["ev_first"]                 # the RM critic fits kl_final's targets
    q = s["ratios"]
    assert q["sequence_outside"] > 3 * q["token_outside"] > 0
    assert 0 < q["token_clipfrac"] <= q["token_outside"]
    assert r["worst"]["1.2^50"] > 9100
    out = capsys.readouterr().out
    assert "Where the credit goes" in out and "1.2^50 = 9100" in out
    assert (tmp_path / "l13_reward_shaping.png").stat().st_size > 50_000
