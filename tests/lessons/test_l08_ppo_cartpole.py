"""Smoke test of lesson 08: both runs learn, target-KL early stopping fires, the dashboard is written."""
import numpy as np

from lessons import l08_ppo_cartpole as lesson


def test_l08_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])      # run(quick=True, seed=0), plot, narrative
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
    path = tmp_path / "l08_ppo_cartpole.png"
    assert path.stat().st_size > 50_000
    out = capsys.readouterr().out
    assert "clip fraction" in out and "explained variance" in out and "stopped early" in out
