"""Smoke test of lesson 24 on two seeds: its identities hold on both seeds and on the NumPy path
(sequence IS unbiased wherever the sampler covers pi, the control sampler bitwise, top-p inside the
band), every verdict follows from the numbers run() returned (recomputed here from the raw numbers,
not by the lesson's helpers), every verdict is printed with its rule, and the share-of-band
measurement can say "not shown"."""
import numpy as np
import pytest

from lessons import l24_off_policy as lesson
from minippo import kernels
from minippo.studies.verdicts import FAILS, HOLDS, IDENTITY, NOT_SHOWN, by_key
from tests.helpers import assert_derived, line_with, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)

IDENTITIES = ("seq_is_unbiased", "control_is_bitwise", "topp_in_band")
COVER = ("fp16 logits", "bf16 logits", "bf16 logits, truncated", "stale by 1", "stale by 2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def rule(diff, se):
    """The course's rule, written out: holds beyond +2 se, fails beyond -2 se, else not shown."""
    if diff != 0 and diff >= 2 * se:
        return HOLDS
    return FAILS if diff != 0 and diff <= -2 * se else NOT_SHOWN


def expected(r) -> dict:
    """Each verdict's outcome from the raw numbers, written out apart from lesson.verdicts()."""
    s, c = r["a"]["samplers"], r["c"]["rows"]
    rel = lambda n, e, k="rel_bias": s[n]["rows"][e][k]                     # noqa: E731
    two = {True: HOLDS, False: FAILS}
    tok, unc = rel("stale by 2", "IS, token"), rel("stale by 2", "uncorrected")
    mc_tol = 4 / np.sqrt(2 * (r["sizes"]["batches"] - 1))
    bf = s["bf16 logits"]["rows"]["uncorrected"]
    stale = c["stale by 2 PPO iterations"]
    half = np.log(1.2)
    m = lambda row: row["mean_abs_log_ratio"]                                # noqa: E731
    mse = lambda row: row["mean_abs_log_ratio_se"]                           # noqa: E731
    return {
        "seq_is_unbiased": two[max(rel(n, "IS, sequence") for n in COVER) < 1e-9],
        "truncating_biased": two[min(row["rel_bias"] for n in ("top-p 0.9", "top-k 3")
                                     for row in s[n]["rows"].values()) > 0.05],
        "token_is_partial": two[1e-9 < tok < 0.95 * unc],
        "tis_less_noise": two[rel("stale by 2", "TIS C=1.2, sequence", "spread")
                              < 0.95 * rel("stale by 2", "IS, sequence", "spread")],
        "tis_biased": two[rel("stale by 2", "TIS C=1.2, sequence") > 0.05],
        "bf16_bias_below_noise": two[bf["bias"] < 0.1 * bf["spread"]],
        "noise_beats_bias_stale": two[rel("stale by 2", "uncorrected", "rel_rmse")
                                      < 0.95 * rel("stale by 2", "IS, sequence", "rel_rmse")],
        "mc_agrees": two[all(v["z"] <= 5 and abs(v["spread_ratio"] - 1) <= mc_tol
                             for v in r["mc"].values())],
        "control_is_bitwise": two[c["same sampler (control)"]["max_abs_log_ratio"] == 0.0],
        "topp_in_band": two[c["top-p 0.9"]["count"] == 0
                            and c["top-p 0.9"]["max_abs_log_ratio"] <= -np.log(0.9) + 1e-5],
        "bf16_moves_tokens": rule(c["bf16 logits"]["outside"], c["bf16 logits"]["se"]),
        "stale_moves_tokens": rule(stale["outside"], stale["se"]),
        "bf16_more_than_fp16": rule(m(c["bf16 logits"]) - m(c["fp16 logits"]),
                                    np.hypot(mse(c["bf16 logits"]), mse(c["fp16 logits"]))),
        "bf16_small_share_of_band": rule(0.1 - m(c["bf16 logits"]) / half, mse(c["bf16 logits"]) / half),
        "stale_more_than_bf16": rule(stale["outside"] - c["bf16 logits"]["outside"],
                                     np.hypot(stale["se"], c["bf16 logits"]["se"])),
    }


def check_identities(r):
    V = by_key(lesson.verdicts(r))
    for k in IDENTITIES:
        assert V[k].kind == IDENTITY and V[k].outcome == HOLDS, V[k].render()
    s = r["a"]["samplers"]
    for name in COVER:                                                    # importance sampling: unbiased
        assert s[name]["rows"]["IS, sequence"]["rel_bias"] < 1e-9, name
    rows = r["c"]["rows"]
    assert rows["same sampler (control)"]["max_abs_log_ratio"] == 0.0      # the option off: q = pi, bitwise
    assert rows["top-p 0.9"]["max_abs_log_ratio"] <= -np.log(0.9) + 1e-5   # pi / q = kept mass (float32)


@pytest.mark.parametrize("seed", [0, 1])
def test_l24_identities_hold_on_every_seed(runs, seed):
    check_identities(runs[seed])


def test_l24_identities_on_the_numpy_path():
    with kernels.use_kernels(False):
        r = lesson.run(quick=True, seed=1)
    check_identities(r)


@pytest.mark.parametrize("seed", [0, 1])
def test_l24_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    want = expected(r)
    V = by_key(lesson.verdicts(r))
    assert set(V) == set(want)
    for k, outcome in want.items():
        assert V[k].outcome == outcome, V[k].render()
    if seed == 0:
        out = runs["printed"]
        assert (runs["out"] / "l24_off_policy.png").stat().st_size > 50_000
        for v in V.values():                                               # every verdict, with its rule
            assert all(line.strip() in out for line in v.render().splitlines()), v.key
        for name, row in r["c"]["rows"].items():
            assert f"{row['outside']:8.4f} +- {row['se']:6.4f} {row['count']:6d}" in line_with(out, f"    {name} ")
        bias = out.split("bias ||E[g] - grad J||")[1].split("noise of one batch")[0]
        for est in lesson.op.ESTIMATORS:                                   # the exact bias table, every cell
            cells = [f"{lesson._cell(r['a']['samplers'][n]['rows'][est]['rel_bias']):>11}"
                     for n in r["a"]["samplers"]]
            assert "".join(cells) in line_with(bias, f"    {est} "), est
        assert f"{r['time']['wall']:.1f} s wall" in out


def test_band_measurement_says_every_outcome():
    """The share-of-band measurement: many tokens out holds; none out is not shown (never fails: a share
    cannot be below 0)."""
    row = lambda k, n: {"n_tokens": n, "count": k, "outside": k / n,              # noqa: E731
                        "se": float(np.sqrt(k / n * (1 - k / n) / n))}
    assert lesson.band_measurement("x", "claim", row(50, 500)).outcome == HOLDS
    assert lesson.band_measurement("x", "claim", row(0, 500)).outcome == NOT_SHOWN
    assert lesson.band_measurement("x", "claim", row(1, 500)).outcome == NOT_SHOWN   # 1 token: within 2 se


def fake_b(values: dict, n_eval=100_000, n_samples=100) -> dict:
    """A (b) result with the given pass@1 per run and seed (the rest as training_comparison fills it);
    the default evaluation is so large that its sampling noise is negligible."""
    runs = {name: [{"pass@1": x, "train_pass_rate": x, "cpu": 0.0} for x in xs]
            for name, xs in values.items()}
    return {"runs": runs, "sft_pass@1": [0.3, 0.3], "seeds": [0, 1], "n_eval": n_eval,
            "n_samples": n_samples, "iterations": 2, "batch_size": 8}


def test_training_verdicts_follow_the_paired_seed_rule():
    """(b)'s comparisons: the paired difference over seeds against 2 se of it, each outcome reachable."""
    b = fake_b({"on-policy": [0.60, 0.62], "bf16 logits, uncorrected": [0.61, 0.60],
                "bf16 logits, TIS C=2": [0.50, 0.52], "stale by 2, uncorrected": [0.50, 0.51],
                "stale by 2, TIS C=2": [0.55, 0.57]})
    V = by_key(lesson.training_verdicts(b))
    assert V["stale_hurts"].outcome == HOLDS                  # -0.105 +- 0.005
    assert V["stale_tis_helps"].outcome == HOLDS              # +0.055 +- 0.005
    assert V["bf16_hurts"].outcome == NOT_SHOWN               # -0.005 +- 0.015
    assert V["bf16_tis_helps"].outcome == FAILS               # -0.095 +- 0.015
    for v in V.values():                                      # the direction in words
        assert any(w in v.because.split(" in pass@1")[0] for w in ("higher", "lower", "equal"))
    # a small evaluation: its sampling noise (p (1 - p) / (P n) per run) is larger than the seeds'
    small = by_key(lesson.training_verdicts(fake_b({k: [x["pass@1"] for x in r] for k, r in
                                                    b["runs"].items()}, n_eval=16, n_samples=4)))
    p = np.array([0.60, 0.62, 0.50, 0.51])                    # on-policy and stale, both seeds
    se = np.sqrt(np.sum(p * (1 - p) / 64)) / 2
    assert small["stale_hurts"].numbers["se"] == pytest.approx(se, rel=1e-12)
    assert small["stale_hurts"].outcome == NOT_SHOWN and small["stale_tis_helps"].outcome == NOT_SHOWN
    out = lesson.training_table(b)
    assert any("stale by 2, TIS C=2" in line and "0.550 (0.550)" in line for line in out)


def test_l24_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'mc_z_max': '+.1f'})
