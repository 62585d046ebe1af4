"""Smoke test of lesson 01: the baseline lowers the variance; one large step collapses the policy."""
import numpy as np

from lessons import l01_policy_gradient as lesson


def test_l01_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--seed", "0", "--out", str(tmp_path)])      # run + narrative + plot
    assert "one step with lr" in capsys.readouterr().out
    assert (tmp_path / "l01_policy_gradient.png").stat().st_size > 10_000
    var = r["variance"]
    none, loo, exact = (var[k] for k in lesson.BASELINES)
    assert none > 3 * loo and loo > exact                # a baseline lowers the variance
    assert max(r["bias"].values()) < 4                   # ... without a bias (in standard errors)
    assert r["final_reward"][lesson.BASELINES[1]] > r["final_reward"][lesson.BASELINES[0]]
    # one huge step: entropy collapses from ln 10 to ~0, mostly onto a token that is not the best
    ent = np.median(r["entropy_after"], axis=1)
    assert ent[0] > 0.95 * r["max_entropy"] and ent[-1] < 0.1
    assert r["p_best_after"][-1].mean() < 0.5
    # ... and plain REINFORCE does not recover from it
    assert r["stuck_fraction"][-1] >= 0.5 > r["stuck_fraction"][0]

