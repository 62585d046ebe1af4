"""Smoke test of lesson 21 on two seeds: the frontiers, their comparison at matched KL and every printed
verdict are recomputed here from the raw checkpoints run() returned (not with the lesson's helpers)."""
import numpy as np
import pytest

from lessons import l21_dpo_vs_ppo as lesson
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from tests.helpers import assert_comparison, assert_derived, expected_outcome

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


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
    # each pair at matched KL: the course's rule on the seed noise pooled over the two methods at each KL
    short = lesson.SHORT
    V = by_key(lesson.verdicts(r))
    for line in (ln for v in V.values() for ln in v.render().splitlines()):
        assert line.strip() in out
    outcome = {}
    for (a, b), c in r["compare"].items():
        reach = min(km for m in (a, b) for _, km in fronts[m])
        np.testing.assert_allclose(c["kl"], np.linspace(reach / len(c["kl"]), reach, len(c["kl"])), rtol=1e-12)
        va = np.array([[at_by_loop(f, km, x) for x in c["kl"]] for f, km in fronts[a]])
        vb = np.array([[at_by_loop(f, km, x) for x in c["kl"]] for f, km in fronts[b]])
        np.testing.assert_allclose(c["a"], va, rtol=1e-12)
        np.testing.assert_allclose(c["b"], vb, rtol=1e-12)
        parts = []
        for g in range(len(c["kl"])):
            x, y = va[:, g], vb[:, g]
            noise = np.sqrt((((x - x.mean()) ** 2).sum() + ((y - y.mean()) ** 2).sum()) / (len(x) + len(y) - 2))
            parts.append(expected_outcome(x.mean() - y.mean(), noise * np.sqrt(1 / len(x) + 1 / len(y)), +1))
            if x.min() <= y.max() and y.min() <= x.max():          # the seed ranges overlap: never a finding
                assert parts[-1] == NOT_SHOWN, (a, b, g)
        outcome[(a, b)] = FAILS if FAILS in parts else HOLDS if set(parts) == {HOLDS} else NOT_SHOWN
        assert V[f"frontier[{short[a]} > {short[b]}]"].outcome == outcome[(a, b)]
    two = [outcome[lesson.PAIRS[0]], outcome[lesson.PAIRS[1]]]
    assert V["paper_finding"].outcome == (FAILS if FAILS in two else HOLDS if set(two) == {HOLDS} else NOT_SHOWN)
    # identical PPO settings are explained, with the controller's clipped error
    for m in lesson.METHODS[1:]:
        names = list(r["runs"][m])
        same = all([p["gold"] for p in r["runs"][m][names[0]][k]["points"]]
                   == [p["gold"] for p in r["runs"][m][names[1]][k]["points"]] for k in range(S))
        assert (f"{short[m]}: '{names[0]}' and '{names[1]}' give identical runs" in out) == same
    # the implicit reward against the reward model: accuracy difference with its binomial s.e.
    imp = r["implicit"]
    rm_acc = next(iter(imp.values()))["rm"]["accuracy"]
    best = max(imp, key=lambda n: imp[n]["dpo"]["accuracy"])
    p_, n_ = imp[best]["dpo"]["accuracy"], r["data"]["heldout_pairs"]
    assert_comparison(V["dpo_orders_better"], {"diff": p_ - rm_acc, "se": np.sqrt(p_ * (1 - p_) / n_
                                                                                 + rm_acc * (1 - rm_acc) / n_)}, +1)
    assert all(0 <= x["dpo"]["accuracy"] <= 1 and 0 <= x["rm"]["accuracy"] <= 1 for x in imp.values())
    fell = all(runs[0]["shifts"][-1]["chosen"] < 0 and runs[0]["shifts"][-1]["rejected"] < 0
               for runs in r["runs"]["DPO"].values())
    assert V["both_fall"].holds == fell
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
    # derived(): the numbers the results file keeps (docs/results, the quoted docs), recomputed from the checkpoints
    first = next(iter(r["runs"]["DPO"]))
    assert_derived(lesson, r, out, {"implicit_best.rm_accuracy": ".3f", "implicit_best.accuracy": ".3f",
                                    f"shift_end.{first}.chosen": "+.2f", f"shift_end.{first}.rejected": "+.2f"})
    d = lesson.derived(r)
    for m in lesson.METHODS:
        last = [runs[k]["points"][-1] for runs in r["runs"][m].values() for k in range(S)]
        np.testing.assert_allclose(d["methods"][short[m]]["end_gold"], np.mean([p["gold"] for p in last]), rtol=1e-12)
        np.testing.assert_allclose(d["methods"][short[m]]["end_kl"], np.mean([p["kl"] for p in last]), rtol=1e-12)
    for a, b in lesson.PAIRS:
        c = d["pairs"][f"{short[a]} vs {short[b]}"]
        assert c["above"] + c["below"] + c["within"] == c["n"] <= len(r["compare"][(a, b)]["kl"])
        want = FAILS if c["below"] else HOLDS if c["above"] == c["n"] else NOT_SHOWN
        assert V[f"frontier[{short[a]} > {short[b]}]"].outcome == want
