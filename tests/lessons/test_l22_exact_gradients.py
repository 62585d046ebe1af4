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


def expected_claims(r) -> dict:
    """Each claim's truth from the raw numbers of run(), written out independently of lesson.claims()."""
    on, off = r["a"]["on-policy"]["rows"], r["a"]["off-policy"]["rows"]
    dirs, dr = r["b"]["directions"], r["b"]["drift"]
    one, const = dirs[("seq-mean-token-mean", False)]["exact"], dirs[("seq-mean-token-sum-norm", False)]["exact"]
    diff = dr["seq-mean-token-mean"]["mean"][0] - dr["seq-mean-token-sum-norm"]["mean"][0]
    diff_se = np.hypot(dr["seq-mean-token-mean"]["se"][0], dr["seq-mean-token-sum-norm"]["se"][0])
    c, d = r["c"], r["d"]["rows"]
    rare = [c["population"][h][-1]["p_first"][1] for h in (None, 0.28)]       # answer 1: the rare right one
    gspo, ppo = d["sequence ratio, band 3e-4/4e-4 (GSPO)"]["clipfrac"], d["token ratio, band 0.2 (PPO)"]["clipfrac"]
    tok, seq = d["token ratio, no clip"], d["sequence ratio, no clip"]
    return {
        "k1 in the reward: expected gradient = grad KL": on["reward k1"]["exact_rel_bias"] < 1e-9,
        "k1 in the loss: zero expected gradient": on["loss k1"]["exact_norm"] < 1e-9,
        "k3 in the loss (GRPO): expected gradient = grad KL": on["loss k3"]["exact_rel_bias"] < 1e-9,
        "k3 in the loss: = per-state grad KL(pi_ref || pi)": on["loss k3"]["exact_vs_reverse"] < 1e-9,
        "k2 in the loss: = per-state grad KL(pi || pi_ref)": on["loss k2"]["exact_vs_forward"] < 1e-9,
        "k1 in the reward stays unbiased off-policy": off["reward k1"]["z"] <= 5.0,
        "1/|o| pushes wrong answers longer": one["wrong"] > 1e-9 * abs(one["J"]),
        "the constant normaliser does not": abs(const["wrong"]) < 1e-9 * abs(const["J"]),
        "wrong answers grow longer in training": diff > 2 * diff_se,
        "clip-higher keeps entropy higher, exact updates": c["population_diff"] > 0.01,
        "clip-higher keeps entropy higher, sampled updates": c["sampled_diff"] > 2 * c["sampled_se"],
        "clip-higher lets the rare right answer grow more": rare[1] > rare[0],
        "GSPO's band 3e-4/4e-4 clips more tokens": gspo > ppo,
        "... two orders of magnitude more": gspo >= 100 * ppo,
        "the sequence ratio is closer to grad J": seq["rel_err"] < 0.95 * tok["rel_err"],
        "the sequence ratio has less variance": seq["spread"] < 0.95 * tok["spread"],
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_l22_quick_verdicts_follow_the_numbers(tmp_path, capsys, seed):
    r = lesson.main(["--quick", "--out", str(tmp_path), "--seed", str(seed)])
    out = capsys.readouterr().out
    assert (tmp_path / "l22_exact_gradients.png").stat().st_size > 50_000
    # (a) each estimator's row prints bias +- se with N, and says "estimates grad KL" exactly when its exact
    # expectation is grad KL (or, without a finite-sum expectation, when bias_z <= 5)
    n = r["sizes"]["batches"] * lesson.N_BATCH
    assert f"(N = {n} sampled responses)" in out
    blocks = out.split("off-policy: KL")
    for regime, text in (("on-policy", blocks[0]), ("off-policy", blocks[1].split("(b)")[0])):
        scale = r["a"][regime]["grad_norm"]
        for est, row in r["a"][regime]["rows"].items():
            ok = row["exact_rel_bias"] < 1e-9 if row["exact_rel_bias"] is not None else row["z"] <= 5.0
            line = line_with(text, f"    {est} ")
            assert line.endswith("estimates grad KL" if ok else "biased"), (regime, est, line)
            assert f"{row['rel_bias']:6.3f} +- {row['se'] / scale:5.3f}" in line
            # bias_z from its definition: (||mean - target||^2 - sum se^2) / sqrt(2 tr C^2) > 0 iff bias > se
            assert (row["z"] > 0) == (row["mc_bias"] > row["se"])
    on = r["a"]["on-policy"]["rows"]
    assert on["reward k1"]["exact_rel_bias"] < 1e-9                     # the policy gradient of the k1 reward: exact
    assert on["loss k1"]["exact_norm"] < 1e-9                            # k1 in the loss: zero expected gradient
    assert on["loss k3"]["exact_rel_bias"] > 0.05                        # a partial gradient of the other KL
    # (b) the push of each aggregation: the word follows mean vs 3 se
    for (agg, scale), d in r["b"]["directions"].items():
        mu, se = d["mean"]["wrong"], d["se"]["wrong"]
        word = "lengthens" if mu > 3 * se else ("shortens" if mu < -3 * se else "no push beyond noise")
        line = line_with(out, lesson.AGG_NAMES[agg] + " ", "R - mean" if not scale else "/ std", "wrong answers")
        assert f"{word} wrong answers" in line and f"{mu:+.4f} +- {se:.4f}" in line, line
    const = r["b"]["directions"][("seq-mean-token-sum-norm", False)]["exact"]
    assert abs(const["wrong"]) < 1e-12 and abs(const["right"]) < 1e-12   # Dr. GRPO's constant: no length push at all
    # (c) the sampled verdict words
    c = r["c"]
    word = ("clip-higher keeps more entropy" if c["sampled_diff"] > 2 * c["sampled_se"] else
            "clip-higher keeps less" if c["sampled_diff"] < -2 * c["sampled_se"] else "within the seed noise")
    assert line_with(out, "paired seeds").endswith(word + ".")
    # the claims: "holds" iff the condition recomputed from the raw numbers is true
    expect = expected_claims(r)
    assert len(expect) == len(r["claims"])
    for start, flag in expect.items():
        line = line_with(out, f"  - {start}")
        assert (": holds (" in line) == flag and (": does not hold here (" in line) == (not flag), line
    d = r["d"]["rows"]
    assert d["whole-response ratio, no clip"]["rel_err"] < 1e-9          # importance sampling: unbiased
    assert d["token ratio, no clip"]["clipfrac"] == 0.0
    assert f"{r['time']['wall']:.1f} s wall" in out
