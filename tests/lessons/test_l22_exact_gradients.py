"""Smoke test of lesson 22 on two seeds: every printed verdict follows the numbers run() returned
(recomputed here from the raw numbers, not by the lesson's helpers), and what holds exactly holds."""
import numpy as np
import pytest

from lessons import l22_exact_gradients as lesson
from minippo import kernels
from minippo.studies.verdicts import FAILS, HOLDS, IDENTITY, NOT_SHOWN, by_key
from tests.helpers import expected_outcome

pytestmark = pytest.mark.slow      # lesson runs (pytest -m slow); lesson 04, the clip cases, runs by default


def line_with(out: str, *parts) -> str:
    """The one printed line that contains every string of ``parts``."""
    lines = [ln for ln in out.splitlines() if all(p in ln for p in parts)]
    assert len(lines) == 1, (parts, lines)
    return lines[0]


def expected_outcomes(r) -> dict:
    """Each claim's outcome from the raw numbers of run(), written out independently of lesson.verdicts()."""
    on, off = r["a"]["on-policy"]["rows"], r["a"]["off-policy"]["rows"]
    dirs, dr = r["b"]["directions"], r["b"]["drift"]
    one, const = dirs[("seq-mean-token-mean", False)]["exact"], dirs[("seq-mean-token-sum-norm", False)]["exact"]
    diff = dr["seq-mean-token-mean"]["mean"][0] - dr["seq-mean-token-sum-norm"]["mean"][0]
    diff_se = np.hypot(dr["seq-mean-token-mean"]["se"][0], dr["seq-mean-token-sum-norm"]["se"][0])
    c, d = r["c"], r["d"]["rows"]
    rare = [c["population"][h][-1]["p_first"][1] for h in (None, 0.28)]       # answer 1: the rare right one
    gspo, ppo = d["sequence ratio, band 3e-4/4e-4 (GSPO)"]["clipfrac"], d["token ratio, band 0.2 (PPO)"]["clipfrac"]
    tok, seq = d["token ratio, no clip"], d["sequence ratio, no clip"]
    two = {True: HOLDS, False: FAILS}
    return {
        "k1_reward_is_grad_kl": two[on["reward k1"]["exact_rel_bias"] < 1e-9],
        "k1_loss_zero": two[on["loss k1"]["exact_norm"] < 1e-9],
        "k3_loss_is_grad_kl": two[on["loss k3"]["exact_rel_bias"] < 1e-9],
        "k3_loss_is_reverse_kl": two[on["loss k3"]["exact_vs_reverse"] < 1e-9],
        "k2_loss_is_forward_kl": two[on["loss k2"]["exact_vs_forward"] < 1e-9],
        "k1_reward_unbiased_off_policy": two[off["reward k1"]["z"] <= 5.0],
        "one_over_len_lengthens": two[one["wrong"] > 1e-9 * abs(one["J"])],
        "constant_norm_no_push": two[abs(const["wrong"]) < 1e-9 * abs(const["J"])],
        "wrong_longer_in_training": expected_outcome(diff, diff_se, +1),
        "clip_higher_entropy_exact": two[c["population_diff"] > 0.01],
        "clip_higher_entropy_sampled": expected_outcome(c["sampled_diff"], c["sampled_se"], +1),
        "clip_higher_rare_grows": two[rare[1] > rare[0]],
        "gspo_clips_more": two[gspo > ppo],
        "gspo_100x": two[gspo >= 100 * ppo],
        "sequence_ratio_closer": two[seq["rel_err"] < 0.95 * tok["rel_err"]],
        "sequence_ratio_less_variance": two[seq["spread"] < 0.95 * tok["spread"]],
        "whole_ratio_unbiased": two[d["whole-response ratio, no clip"]["rel_err"] < 1e-9],
    }


IDENTITIES = ("k1_reward_is_grad_kl", "k1_loss_zero", "k3_loss_is_reverse_kl", "k2_loss_is_forward_kl",
              "constant_norm_no_push", "whole_ratio_unbiased")


@pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "numpy"])
def test_l22_identities_on_both_paths(use_kernels):
    """The exact identities hold on another seed, with the kernels and with the NumPy formulas."""
    with kernels.use_kernels(use_kernels):
        r = lesson.run(quick=True, seed=2)
    want = expected_outcomes(r)
    V = by_key(lesson.verdicts(r))
    for k in IDENTITIES:
        assert V[k].kind == IDENTITY and want[k] == V[k].outcome == HOLDS, V[k].render()


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
    # (b) the push of each aggregation: the word follows mean vs 2 se (the course's rule)
    for (agg, scale), d in r["b"]["directions"].items():
        mu, se = d["mean"]["wrong"], d["se"]["wrong"]
        word = {HOLDS: "lengthens", FAILS: "shortens", NOT_SHOWN: "no push beyond noise"}[expected_outcome(mu, se, +1)]
        line = line_with(out, lesson.AGG_NAMES[agg] + " ", "R - mean" if not scale else "/ std", "wrong answers")
        assert f"{word} wrong answers" in line and f"{mu:+.4f} +- {se:.4f}" in line, line
    const = r["b"]["directions"][("seq-mean-token-sum-norm", False)]["exact"]
    assert abs(const["wrong"]) < 1e-12 and abs(const["right"]) < 1e-12   # Dr. GRPO's constant: no length push at all
    # the claims: every outcome recomputed from the raw numbers, every verdict printed with its rule
    want = expected_outcomes(r)
    V = by_key(lesson.verdicts(r))
    assert set(want) == set(V)
    for k, outcome in want.items():
        assert V[k].outcome == outcome, V[k].render()
        assert all(line.strip() in out for line in V[k].render().splitlines())
    assert all(V[k].outcome == HOLDS for k in IDENTITIES)
    d = r["d"]["rows"]
    assert d["whole-response ratio, no clip"]["rel_err"] < 1e-9          # importance sampling: unbiased
    assert d["token ratio, no clip"]["clipfrac"] == 0.0
    assert f"{r['time']['wall']:.1f} s wall" in out
