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
    """(the checkpoints with a higher gold than every checkpoint of smaller or equal KL, by KL; the largest KL)."""
    pts = sorted(points, key=lambda p: (p["kl"], -p["gold"]))
    out, best = [], -np.inf
    for p in pts:
        if p["gold"] > best:
            out.append((p["kl"], p["gold"]))
            best = p["gold"]
    return np.array(out), max(p["kl"] for p in points)


def at_by_loop(front, kl_max, x):
    """The best gold at KL <= x, linear between the front's points, NaN beyond kl_max."""
    if x > kl_max:
        return np.nan
    k = np.searchsorted(front[:, 0], x, side="right") - 1
    if k == len(front) - 1:
        return front[k, 1]
    (x0, y0), (x1, y1) = front[k], front[k + 1]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def ranges_text(kl, idx):
    if not idx:
        return "no matched KL"
    groups = [[idx[0]]]
    for i in idx[1:]:
        (groups[-1].append(i) if i == groups[-1][-1] + 1 else groups.append([i]))
    return "KL " + ", ".join(f"{kl[g[0]]:.2f}" + (f"-{kl[g[-1]]:.2f}" if len(g) > 1 else "") for g in groups) + " nats"


@pytest.mark.parametrize("seed", [0, 1])
def test_l21_quick_verdicts_follow_the_numbers(tmp_path, capsys, seed):
    r = lesson.main(["--quick", "--out", str(tmp_path), "--seed", str(seed)])
    out = capsys.readouterr().out
    assert (tmp_path / "l21_dpo_vs_ppo.png").stat().st_size > 50_000
    S = lesson.SIZES["quick"]["seeds"]
    assert r["seeds"] == [seed + k for k in range(S)]
    # every run starts at the SFT policy (KL 0); the frontiers from the raw checkpoints
    fronts = {}
    for m in lesson.METHODS:
        fronts[m] = []
        for k in range(S):
            pts = [p for runs in r["runs"][m].values() for p in runs[k]["points"]]
            assert all(runs[k]["points"][0]["kl"] == 0.0 for runs in r["runs"][m].values())
            f, kl_max = front_by_loop(pts)
            np.testing.assert_array_equal(f[:, 0], r["fronts"][m][k][0])
            np.testing.assert_array_equal(f[:, 1], r["fronts"][m][k][1])
            assert r["fronts"][m][k][2] == kl_max
            fronts[m].append((f, kl_max))
    # each pair at matched KL, and the words: "above" only when every seed of one is above every seed of the other
    short = lesson.SHORT
    verdicts = {}
    arrows = [ln for ln in out.splitlines() if ln.startswith("    -> ")]
    assert len(arrows) == len(r["compare"]) == 3
    for (a, b), c in r["compare"].items():
        reach = min(km for m in (a, b) for _, km in fronts[m])
        np.testing.assert_allclose(c["kl"], np.linspace(reach / len(c["kl"]), reach, len(c["kl"])), rtol=1e-12)
        va = np.array([[at_by_loop(f, km, x) for x in c["kl"]] for f, km in fronts[a]])
        vb = np.array([[at_by_loop(f, km, x) for x in c["kl"]] for f, km in fronts[b]])
        np.testing.assert_allclose(c["a"], va, rtol=1e-12)
        np.testing.assert_allclose(c["b"], vb, rtol=1e-12)
        v = ["above" if va[:, g].min() > vb[:, g].max() else "below" if va[:, g].max() < vb[:, g].min() else "overlap"
             for g in range(len(c["kl"]))]
        verdicts[(a, b)] = v
        line = arrows[list(r["compare"]).index((a, b))]            # the "->" lines come in the order of the pairs
        G = len(v)
        if v.count("above") == G:
            assert f"{short[a]}'s frontier dominates {short[b]}'s: above at all {G}" in line, line
        elif v.count("below") == G:
            assert f"{short[b]}'s frontier dominates {short[a]}'s: above at all {G}" in line, line
        else:
            idx = {w: [i for i, x in enumerate(v) if x == w] for w in ("above", "below", "overlap")}
            assert (f"no domination: {short[a]} above {short[b]} at {ranges_text(c['kl'], idx['above'])}, below at "
                    f"{ranges_text(c['kl'], idx['below'])}, within the seed range at "
                    f"{ranges_text(c['kl'], idx['overlap'])}") in line, line
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
