"""Smoke test of lesson 21 on two seeds: the frontiers, their comparison at matched KL and every printed
verdict are recomputed here from the raw checkpoints run() returned (not with the lesson's helpers)."""
import numpy as np
import pytest

from lessons import l21_dpo_vs_ppo as lesson


def line_with(out: str, *parts) -> str:
    """The one printed line that contains every string of ``parts``."""
    lines = [ln for ln in out.splitlines() if all(p in ln for p in parts)]
    assert len(lines) == 1, (parts, lines)
    return lines[0]


def front_by_loop(points):
    """The checkpoints with a higher gold than every checkpoint of smaller or equal KL, by KL."""
    pts = sorted(points, key=lambda p: (p["kl"], -p["gold"]))
    out, best = [], -np.inf
    for p in pts:
        if p["gold"] > best:
            out.append((p["kl"], p["gold"]))
            best = p["gold"]
    return np.array(out)


@pytest.mark.parametrize("seed", [0, 1])
def test_l21_quick_verdicts_follow_the_numbers(tmp_path, capsys, seed):
    r = lesson.main(["--quick", "--out", str(tmp_path), "--seed", str(seed)])
    out = capsys.readouterr().out
    assert (tmp_path / "l21_dpo_vs_ppo.png").stat().st_size > 50_000
    S = lesson.SIZES["quick"]["seeds"]
    assert r["seeds"] == [seed + k for k in range(S)]
    # every run starts at the SFT policy (KL 0) and every checkpoint was judged
    values = {}
    for m in lesson.METHODS:
        per_seed = []
        for k in range(S):
            pts = [p for runs in r["runs"][m].values() for p in runs[k]["points"]]
            assert all(runs[k]["points"][0]["kl"] == 0.0 for runs in r["runs"][m].values())
            f = front_by_loop(pts)
            np.testing.assert_array_equal(f[:, 0], r["fronts"][m][k][0])
            np.testing.assert_array_equal(f[:, 1], r["fronts"][m][k][1])
            per_seed.append(f)
        values[m] = per_seed
    kl_common = min(f[-1, 0] for fs in values.values() for f in fs)
    assert r["kl_common"] == kl_common and r["grid"][-1] == pytest.approx(kl_common)
    at = {m: np.array([np.interp(r["grid"], f[:, 0], f[:, 1]) for f in fs]) for m, fs in values.items()}
    for m in lesson.METHODS:
        np.testing.assert_allclose(r["at"][m], at[m], rtol=1e-12)
    # the words at matched KL: "above" only when every seed of one is above every seed of the other
    short = lesson.SHORT
    verdicts = {}
    for a, b in r["compare"]:
        v = ["above" if at[a][:, g].min() > at[b][:, g].max() else
             "below" if at[a][:, g].max() < at[b][:, g].min() else "overlap" for g in range(len(r["grid"]))]
        verdicts[(a, b)] = v
        line = line_with(out, f"  - {short[a]} vs {short[b]}: ")
        G = len(v)
        if v.count("above") == G:
            assert f"{short[a]}'s frontier dominates {short[b]}'s: above at all {G}" in line, line
        elif v.count("below") == G:
            assert f"{short[b]}'s frontier dominates {short[a]}'s: above at all {G}" in line, line
        else:
            assert (f"no domination: {short[a]} above {short[b]} at {v.count('above')}, below at {v.count('below')}, "
                    f"within the seed range at {v.count('overlap')} of {G}") in line, line
    dpo_ppo, dpo_gt = verdicts[lesson.METHODS[:2]], verdicts[(lesson.METHODS[0], lesson.METHODS[2])]
    finding = line_with(out, "The DPO paper's finding")
    if all(v == "above" for v in dpo_ppo + dpo_gt):
        assert finding.endswith("holds here: DPO's frontier is above both PPO frontiers at every matched KL.")
    elif all(v == "above" for v in dpo_ppo):
        assert "holds only in part here" in finding
    else:
        assert "does NOT hold here" in finding
    # the implicit reward against the reward model: the word follows the accuracies
    imp = r["implicit"]
    rm_acc = next(iter(imp.values()))["rm"]["accuracy"]
    best = max(imp, key=lambda n: imp[n]["dpo"]["accuracy"])
    diff = imp[best]["dpo"]["accuracy"] - rm_acc
    word = "better than" if diff > 0.01 else "worse than" if diff < -0.01 else "as well as (within 0.01)"
    assert f"the best DPO ({best}) orders the held-out pairs {word} the reward model" in out
    assert all(0 <= x["dpo"]["accuracy"] <= 1 and 0 <= x["rm"]["accuracy"] <= 1 for x in imp.values())
    # DPO's failure: the word follows the signs of the measured shifts
    for name, runs in r["runs"]["DPO"].items():
        sh = runs[0]["shifts"]
        assert sh[0]["chosen"] == 0.0 and [s["step"] for s in sh] == [p["iteration"] for p in runs[0]["points"]]
        s = sh[-1]
        word = ("both fell" if s["chosen"] < 0 and s["rejected"] < 0 else
                "the chosen rose" if s["chosen"] > 0 else "only the chosen fell")
        assert f"({word};" in line_with(out, f"  {name:<10s}", "trained-on pairs")
        assert s["margin"] > 0                     # what DPO pushes: the chosen-minus-rejected log-ratio rose
    assert f"{r['time']['wall']:.1f} s wall" in out
