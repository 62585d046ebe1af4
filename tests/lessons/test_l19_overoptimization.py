"""Smoke test of lesson 19: proxy and gold along best-of-n and a PPO run without KL penalty, weak and full-data RMs."""
import numpy as np
import pytest

from lessons import l19_overoptimization as lesson
from tests.helpers import assert_one_of, assert_verdict, line_with, quick_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l19_quick(runs):
    r = runs[0]
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
    out = runs["printed"]
    assert out.startswith(lesson.narrative(r)) and "exploit" in out
    assert (runs["out"] / "l19_overoptimization.png").stat().st_size > 50_000


def _up(a, b):                                       # (value, se) points: b above / below a beyond 2 s.e.
    d, se = b[0] - a[0], np.hypot(a[1], b[1])
    return int(np.sign(d)) if abs(d) >= 2 * se else 0


@pytest.mark.parametrize("seed", [0, 1])
def test_l19_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    s = r["summary"]
    pt = lambda x, k, key="gold": (x[key][k], x[key + "_sem"][k])          # noqa: E731
    curves = [(n, m, s[n][m]) for n in s for m in ("bon", "rl")]
    not_rising = [f"{m} {n}" for n, m, x in curves
                  if _up(pt(x, 0, "rm"), pt(x, -1, "rm")) <= 0 or _up(pt(x, x["peak"], "rm"), pt(x, -1, "rm")) < 0]
    assert_verdict(text, "The proxy keeps rising", not not_rising, "beyond 2 s.e.): holds.", "does not hold here for")
    falls = [1 for n, m, x in curves if _up(pt(x, 0), pt(x, x["peak"])) > 0 and _up(pt(x, x["peak"]), pt(x, -1)) < 0]
    assert f"in {len(falls)} of {len(curves)} curves" in line_with(text, "reward hacking")
    for method, title in (("bon", "- best-of-n, RMs"), ("rl", "- PPO, RMs")):
        for part, k in (("a higher gold peak", "peak"), ("a shallower fall", -1)):
            pts = [pt(s[n][method], s[n][method]["peak"] if k == "peak" else -1) for n in s]
            ups = [_up(a, b) for a, b in zip(pts, pts[1:])]
            want = "holds" if all(u > 0 for u in ups) else "does not hold here" if min(ups) < 0 else "within 2 s.e."
            segment = line_with(text, title).split(part)[1].split(";")[0]
            assert segment.endswith(want), (segment, want)
    b, p = s[r["strong"]]["bon"], s[r["strong"]]["rl"]
    at = (np.interp(b["d"][-1], p["d"], p["gold"]), np.interp(b["d"][-1], p["d"], p["gold_sem"]))
    assert_one_of(text, "At the same KL", {1: "(interpolated): holds.", -1: "PPO is higher beyond",
                                           0: "(within 2 s.e.)"}, _up(at, pt(b, -1)))
    g = r["bon_gold"]["gold"]
    assert_verdict(text, "against the gold itself", bool(np.all(np.diff(g) >= 0)), "never falls", "FALLS")
    acc = list(np.argsort([s[n]["accuracy"] for n in s]))
    bon = list(np.argsort([s[n]["bon"]["gold"][s[n]["bon"]["peak"]] for n in s]))
    assert_verdict(text, "Best-of-n only re-ranks", acc == bon, "follows the RM's", "does not follow")
    prof = r["profiles"]
    drift = prof[f"PPO end ({r['strong']})"]["penalty"] > prof["SFT"]["penalty"]
    assert_verdict(text, "the gold penalty per sample", drift, "it drifts to text", "no drift into")
    peaks = [pt(s[n]["rl"], s[n]["rl"]["peak"]) for n in s]
    resolved = any(_up(a, b) != 0 for a, b in zip(peaks, peaks[1:]))
    assert_verdict(text, "PPO's peak heights", resolved, "beyond 2 s.e. somewhere", "within 2 s.e. at this scale")
    assert "seed 00" not in text.lower() and "固定" not in text
