"""Smoke test of lesson 17: every hyperparameter is swept around the shared base run, and the robust
mechanisms show even at quick size (a narrower clip band and more steps per batch clip more)."""
import numpy as np
import pytest

from lessons import l17_hyperparameters as lesson
from minippo.studies.sweep_stats import compare
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from tests.helpers import (assert_comparison, assert_derived, assert_printed, assert_verdict, expected_outcome,
                           quick_runs)

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l17_quick(runs):
    r = runs[0]
    t = r["table"]
    assert list(t) == ["clip_eps", "lam", "beta", "update_epochs", "minibatches"]
    assert all(len(points) == 3 and sum(p["base"] for p in points) == 1 for points in t.values())
    n_seeds = len(r["sizes"]["seeds"])
    assert all(len(p["gold_mean"]) == n_seeds for points in t.values() for p in points)
    row = lambda axis, label: next(p for p in t[axis] if p["label"] == label)   # noqa: E731
    cf = lambda axis, label: row(axis, label)["policy/clipfrac_avg"].mean()     # noqa: E731
    ak = lambda axis, label: row(axis, label)["policy/approxkl_avg"].mean()     # noqa: E731
    assert cf("clip_eps", "0.1") > cf("clip_eps", "0.5")                     # a narrower band clips more
    assert ak("update_epochs", "1") < ak("update_epochs", "8") and cf("update_epochs", "1") < cf("update_epochs", "8")
    assert cf("minibatches", "1") < cf("minibatches", "16")                  # more steps on one batch
    assert row("beta", "fixed 0.01")["kl_coef"].mean() == 0.01
    assert r["noise"]["gold_mean"] > 0
    verdicts = lesson.claims(r)
    assert len(verdicts) == 7 and all(v for claim in verdicts for v in claim)
    out = runs["printed"]
    assert out.startswith(lesson.narrative(r)) and "Common claims at this scale" in out
    assert (runs["out"] / "l17_hyperparameters.png").stat().st_size > 50_000


@pytest.mark.parametrize("seed", [0, 1])
def test_l17_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert r["noise"] is not None                           # two seeds at --quick: every verdict below is made
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    row = lambda axis, label: next(p for p in r["table"][axis] if p["label"] == label)   # noqa: E731

    def c(axis, a, b, key="gold_mean"):                     # b - a with the pooled seed noise
        return compare(row(axis, a)[key], row(axis, b)[key], r["noise"][key])

    def all_parts(*parts):                                  # (c, expect) pairs of an all_of verdict
        outs = [expected_outcome(x["diff"], x["se"], e) for x, e in parts]
        return FAILS if FAILS in outs else HOLDS if set(outs) == {HOLDS} else NOT_SHOWN

    ak, cf = "policy/approxkl_avg", "policy/clipfrac_avg"
    assert_comparison(V["eps05_collapses"], c("clip_eps", "0.2", "0.5"), -1)
    assert_comparison(V["small_eps_slow"], c("clip_eps", "0.2", "0.1"), -1)
    assert_comparison(V["small_eps_clips_more"], c("clip_eps", "0.2", "0.1", cf), +1)
    assert_comparison(V["small_eps_moves_less"], c("clip_eps", "0.2", "0.1", "kl_mean"), -1)
    assert V["lam095_best"].outcome == all_parts((c("lam", "0.95", "0.9"), -1), (c("lam", "0.95", "0.99"), -1))
    text = lesson.narrative(r)
    assert "n = 13" not in text and "~13" not in text
    b01 = row("beta", "fixed 0.01")
    se = r["noise"]["kl_mean"] / np.sqrt(len(b01["kl_mean"]))
    assert_comparison(V["beta001_runaway"], {"diff": b01["kl_mean"].mean() - 1.5 * lesson.KL_TARGET, "se": se}, +1)
    assert_comparison(V["beta001_passes_target"], {"diff": b01["kl_mean"].mean() - lesson.KL_TARGET, "se": se}, +1)
    assert_comparison(V["beta01_stalls"], c("beta", "adaptive", "fixed 0.1"), -1)
    moved = row("beta", "adaptive")["kl_coef"].mean() / r["kl_ref"]["coef"] - 1
    assert_verdict(text, "The adaptive controller moved beta", abs(moved) < 0.1, "almost a fixed beta",
                   "not a fixed beta")
    assert V["epochs_move_further"].outcome == all_parts((c("update_epochs", "1", "4", ak), +1),
                                                         (c("update_epochs", "4", "8", ak), +1))
    assert V["epochs_clip_more"].outcome == all_parts((c("update_epochs", "1", "4", cf), +1),
                                                      (c("update_epochs", "4", "8", cf), +1))
    assert_comparison(V["epochs8_cost_gold"], c("update_epochs", "4", "8"), -1)
    assert_comparison(V["epoch1_learns_less"], c("update_epochs", "4", "1"), -1)
    assert V["minibatches_move_further"].outcome == all_parts((c("minibatches", "1", "4", ak), +1),
                                                              (c("minibatches", "4", "16", ak), +1))
    assert "seed 00" not in text.lower()


# ---- the --full claims (lr and c1, gamma, prompts x responses, the critic's start, whitened rewards, the score
# alone, lambda's dynamics), run at the quick size: lesson.run(quick=True, full=True)

@pytest.fixture(scope="module")
def full_runs():
    return {s: lesson.run(quick=True, seed=s, full=True) for s in (0, 1)}


@pytest.mark.parametrize("seed", [0, 1])
def test_l17_full_verdicts_follow_the_numbers(full_runs, seed):
    import math

    from minippo.studies.knob_sweeps import GAMMA, GROUP, LR_FACTOR
    r = full_runs[seed]
    ex, f = r["extras"], LR_FACTOR
    t, noise = ex["table"], ex["noise"]
    assert ex["sizes"]["seeds"] == (0, 1) and all(len(row["gold_mean"]) == 2 for row in t.values())
    V = by_key(lesson.verdicts(r))
    n_grid = len(lesson.claims({k: v for k, v in r.items() if k != "extras"}))
    assert n_grid == 7 and len(lesson.claims(r)) == 14

    def c(a, b, key="gold_mean"):
        return compare(t[a][key], t[b][key], noise[key])

    m = lambda name, key="gold_mean": t[name][key].mean()                     # noqa: E731
    S = len(t["base"]["gold_mean"])
    # the lr's contrast against c1's, each |mean(x f) - mean(/ f)|, se of the difference of two contrasts
    spread = abs(m(f"lr x {f:g}") - m(f"lr / {f:g}")) - abs(m(f"c1 x {f:g}") - m(f"c1 / {f:g}"))
    assert_comparison(V["lr_more_sensitive_than_c1"], {"diff": spread, "se": noise["gold_mean"] * math.sqrt(4 / S)},
                      +1)
    assert_comparison(V["small_lr_learns_less"], c("base", f"lr / {f:g}"), -1)
    assert_comparison(V["gamma_costs_gold"], c("base", f"gamma {GAMMA:g}"), -1)
    assert_comparison(V["gamma_shortens"], c("base", f"gamma {GAMMA:g}", "length_mean"), -1)
    b = r["extras"]["sizes"]["batch_size"]
    assert_comparison(V["group_beats_spread"], c("base", f"{b // GROUP} x {GROUP}"), +1)
    assert_comparison(V["more_prompts_help"], c(f"{b // GROUP} x {GROUP}", f"{2 * b // GROUP} x {GROUP}"), +1)
    assert_comparison(V["bad_critic_noisier"], c("base", "critic from SFT", "adv_var_first"), +1)
    w = c("base", "whitened rewards", "adv_var")
    assert_comparison(V["whitening_cuts_30pct"], {"diff": w["diff"] - math.log(0.7), "se": w["se"]}, -1)
    assert_comparison(V["whitening_shortens"], c("base", "whitened rewards", "length_mean"), -1)
    ref = r["reference"]["gold_mean"]
    assert_comparison(V["score_only_learns"], {"diff": m("score only") - ref,
                                               "se": noise["gold_mean"] / math.sqrt(S)}, +1)
    assert_comparison(V["credit_reaches_token1"], {"diff": m("score only", "first_corr"),
                                                   "se": noise["first_corr"] / math.sqrt(S)}, +1)
    # an identity: holds on every seed (nothing differentiates the reward model)
    assert V["rm_gets_no_gradient"].kind == "identity" and V["rm_gets_no_gradient"].outcome == HOLDS
    # lambda's dynamics recomputed from the raw reward curves of the grid's runs
    lam = ex["lam"]
    curves = lam["curves"]
    assert curves["0.95"].shape == (len(r["sizes"]["seeds"]), r["sizes"]["iterations"])
    osc = {k: np.array([np.std(np.diff(row), ddof=1) for row in cv]) for k, cv in curves.items()}
    for k in curves:
        assert np.allclose(osc[k], lam["osc"][k], rtol=1e-12)
    start = np.mean([cv[:, 0].mean() for cv in curves.values()])
    last = max(1, curves["0.95"].shape[1] // 4)
    level = start + 0.5 * (curves["0.95"][:, -last:].mean() - start)
    assert np.isclose(level, lam["level"], rtol=1e-12)

    def first_hit(row):                                     # 1-based iteration at the end of the 3-iteration window
        for i in range(2, len(row)):
            if row[i - 2:i + 1].mean() >= level:
                return i + 1
        return len(row) + 1
    for k, cv in curves.items():
        assert np.array_equal([first_hit(row) for row in cv], lam["speed"][k])
    from minippo.studies.sweep_stats import pooled_seed_std
    assert_comparison(V["lam09_oscillates_less"], compare(osc["0.95"], osc["0.9"],
                                                          pooled_seed_std(list(osc.values()))[0]), -1)
    sp = lam["speed"]
    assert_comparison(V["lam099_faster"], compare(sp["0.95"], sp["0.99"], pooled_seed_std(list(sp.values()))[0]), -1)
    text = lesson.narrative(r)
    for v in lesson.verdicts(r):
        assert v.render("    ") in text, v.key
    assert "bitwise unchanged" in text


def test_l17_default_output_has_no_full_claims(runs):
    assert "extras" not in runs[0] and len(lesson.claims(runs[0])) == 7
    assert "lr / 4" not in runs["printed"] and "score only" not in runs["printed"]


def test_l17_full_figure_has_the_extras_row(full_runs, tmp_path):
    path = tmp_path / "l17_full.png"
    lesson.plot(full_runs[0], path)
    assert path.stat().st_size > 50_000


def test_l17_derived_is_what_the_narrative_prints(runs, full_runs):
    """derived(): the numbers the results files keep besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {"mean.clip_eps.0.1.gold": "+.3f", "mean.lam.0.99.kl": ".2f",
                                                      "mean.update_epochs.8.approx_kl": ".4f",
                                                      "mean.minibatches.16.clipfrac": ".3f", "n_tokens": ".0f",
                                                      "first_weight.0.9": ".2f"})
    assert "extras_mean" not in lesson.derived(runs[0])
    r = full_runs[0]
    assert_derived(lesson, r, lesson.narrative(r), {"extras_mean.base.adv_var_first": ".3f",
                                                    "extras_mean.critic from SFT.adv_var": ".3f",
                                                    "extras_derived.whitened_var_ratio": ".2f",
                                                    "extras_derived.gamma_first_weight": ".2f",
                                                    "extras_derived.lam_osc.0.9": ".3f",
                                                    "extras_derived.lam_speed.0.99": ".1f",
                                                    "extras_mean.score only.first_corr": "+.2f"})
