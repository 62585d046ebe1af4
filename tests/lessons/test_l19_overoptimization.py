"""Smoke test of lesson 19: proxy and gold along best-of-n and a PPO run without KL penalty, weak and full-data RMs."""
import numpy as np

from lessons import l19_overoptimization as lesson


def test_l19_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    s = r["summary"]
    assert list(s) == list(lesson.QUICK_VARIANTS)
    weak, strong = s[r["weak"]], s[r["strong"]]
    assert weak["pairs"] < strong["pairs"] and weak["accuracy"] < strong["accuracy"]
    for x in s.values():
        # best-of-n: the proxy of the chosen sample never falls with n (the all-subsets estimator), KL = log n - (n-1)/n
        assert np.all(np.diff(x["bon"]["rm"]) >= -1e-12)
        assert x["bon"]["d"][0] == 0.0 and np.all(np.diff(x["bon"]["d"]) > 0)
        # PPO without KL penalty moves away from the reference and raises its proxy
        assert x["rl"]["d"][0] < 1e-4 and x["rl"]["d"][-1] > 0.5
        assert x["rl"]["rm"][-1] > x["rl"]["rm"][0]
    # the gold used as its own proxy is the ceiling of best-of-n: no reward model selects better on average
    g = r["bon_gold"]["gold"]
    assert np.all(np.diff(g) >= -1e-12) and all(np.all(x["bon"]["gold"] <= g + 1e-12) for x in s.values())
    out = capsys.readouterr().out
    assert "Which claims hold here" in out and "exploit" in out
    assert (tmp_path / "l19_overoptimization.png").stat().st_size > 50_000
