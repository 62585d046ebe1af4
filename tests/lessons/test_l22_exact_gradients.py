"""Smoke test of lesson 22 on two seeds: every printed verdict follows the numbers run() returned
(recomputed here from the raw numbers, not by the lesson's helpers), and what holds exactly holds."""
import numpy as np
import pytest

from lessons import l22_exact_gradients as lesson


def line_with(out: str, *parts) -> str:
    """The one printed line that contains every string of ``parts``."""
    lines = [ln for ln in out.splitlines() if all(p in ln for p in parts)]
    assert len(lines) == 1, (parts, lines)
    return lines[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_l22_quick_verdicts_follow_the_numbers(tmp_path, capsys, seed):
    r = lesson.main(["--quick", "--out", str(tmp_path), "--seed", str(seed)])
    out = capsys.readouterr().out
    assert (tmp_path / "l22_exact_gradients.png").stat().st_size > 50_000
    # (a) each estimator's row: "estimates grad KL" exactly when its exact expectation is grad KL (or, off-policy
    # reward estimators without a finite-sum expectation, when the Monte Carlo bias is within 3 standard errors)
    blocks = out.split("off-policy: KL")
    for regime, text in (("on-policy", blocks[0]), ("off-policy", blocks[1].split("(b)")[0])):
        for est, row in r["a"][regime]["rows"].items():
            ok = (row["exact_rel_bias"] < 1e-6) if row["exact_rel_bias"] is not None else row["mc_bias"] <= 3 * row["se"]
            line = line_with(text, f"    {est} ")
            assert line.endswith("estimates grad KL" if ok else "biased"), (regime, est, line)
            assert f"{row['rel_bias']:6.3f}" in line
    on = r["a"]["on-policy"]["rows"]
    assert on["reward k1"]["exact_rel_bias"] < 1e-9                     # the policy gradient of the k1 reward: exact
    assert on["loss k1"]["exact_rel_bias"] == pytest.approx(1.0, abs=1e-9)   # k1 in the loss: zero expected gradient
    assert on["loss k3"]["exact_rel_bias"] > 0.05                        # a partial gradient of the other KL
    # (b) the push of each aggregation: the word follows mean vs 3 se
    for (agg, scale), d in r["b"]["directions"].items():
        mu, se = d["mean"]["wrong"], d["se"]["wrong"]
        word = "lengthens" if mu > 3 * se else ("shortens" if mu < -3 * se else "no push beyond noise")
        line = line_with(out, lesson.AGG_NAMES[agg] + " ", "R - mean" if not scale else "/ std", "wrong answers")
        assert f"{word} wrong answers" in line, line
    const = r["b"]["directions"][("seq-mean-token-sum-norm", False)]["exact"]
    assert abs(const["wrong"]) < 1e-12 and abs(const["right"]) < 1e-12   # Dr. GRPO's constant: no length push at all
    # (c), (d) and the claims: recomputed from the raw numbers
    c, d = r["c"], r["d"]["rows"]
    dr = r["b"]["drift"]
    diff = dr["seq-mean-token-mean"]["mean"][0] - dr["seq-mean-token-sum-norm"]["mean"][0]
    diff_se = np.hypot(dr["seq-mean-token-mean"]["se"][0], dr["seq-mean-token-sum-norm"]["se"][0])
    tok, seq = d["token ratio, no clip"], d["sequence ratio, no clip"]
    dirs = r["b"]["directions"]
    expect = {
        "k1 in the reward gives grad KL on-policy": on["reward k1"]["exact_rel_bias"] < 1e-6,
        "k3 in the loss gives grad KL on-policy": on["loss k3"]["exact_rel_bias"] < 1e-6,
        "k1 in the loss gives no KL gradient on-policy": on["loss k1"]["exact_rel_bias"] > 1 - 1e-6,
        "k1 in the reward stays unbiased off-policy": (r["a"]["off-policy"]["rows"]["reward k1"]["mc_bias"]
                                                       <= 3 * r["a"]["off-policy"]["rows"]["reward k1"]["se"]),
        "1/|o| lengthens wrong answers": (dirs[("seq-mean-token-mean", False)]["mean"]["wrong"]
                                          > 3 * dirs[("seq-mean-token-mean", False)]["se"]["wrong"]),
        "the constant normaliser does not": (abs(dirs[("seq-mean-token-sum-norm", False)]["mean"]["wrong"])
                                             <= 3 * dirs[("seq-mean-token-sum-norm", False)]["se"]["wrong"]),
        "wrong answers grow longer in training": diff > 2 * diff_se,
        "clip-higher keeps entropy higher, exact updates": c["population_diff"] > 0.01,
        "clip-higher keeps entropy higher, sampled updates": c["sampled_diff"] > 2 * c["sampled_se"],
        "GSPO's band clips more tokens": (d["sequence ratio, band 3e-4/4e-4 (GSPO)"]["clipfrac"]
                                          > d["token ratio, band 0.2 (PPO)"]["clipfrac"]),
        "the sequence ratio is closer to grad J": seq["rel_err"] < 0.95 * tok["rel_err"],
        "the sequence ratio has less variance": seq["spread"] < 0.95 * tok["spread"],
    }
    assert len(expect) == len(r["claims"])
    for start, flag in expect.items():
        line = line_with(out, f"  - {start}")
        assert (": holds (" in line) == flag and (": does not hold here (" in line) == (not flag), line
    assert d["whole-response ratio, no clip"]["rel_err"] < 1e-9          # importance sampling: unbiased
    assert d["token ratio, no clip"]["clipfrac"] == 0.0
    assert f"{r['time']['wall']:.1f} s wall" in out
