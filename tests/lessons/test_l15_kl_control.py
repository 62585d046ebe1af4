"""Smoke test of lesson 15: the five KL controls run; k2 and k3 never go negative while k1 does; top-k
sampling makes the k1 estimate of a flattened policy negative; early stopping fires and shrinks the updates; the
KL-adapted lr keeps every step; the verdicts of parts A-E follow the numbers on two seeds."""
import numpy as np
import pytest

from lessons import l15_kl_control as lesson
from minippo.studies.study import final
from minippo.studies.sweep_stats import compare, pooled_seed_std
from minippo import kernels
from minippo.rl.kl import kl_estimate
from minippo.rl.losses import log_softmax
from minippo.studies.kl_moments import kl_estimator_moments
from minippo.studies.verdicts import HOLDS, by_key
from tests.helpers import assert_comparison, assert_derived, assert_printed, assert_verdict, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l15_quick(runs):
    r = runs[0]
    s = lesson.summary(r)
    assert set(s) == set(lesson.CONTROLS)
    assert s["fixed beta 1"]["beta"] == 1.0 and s["no penalty"]["beta"] == 0.0
    assert s["no penalty"]["eval_kl"] > s["fixed beta 1"]["eval_kl"]
    for name in ("fixed beta 1", "no penalty"):
        cmp_ = r["estimators"][name]["compare"]
        assert cmp_["k1"]["token_neg_frac"] > 0.2                  # one k1 sample is often negative
        assert cmp_["k2"]["token_neg_frac"] == 0 and cmp_["k3"]["token_neg_frac"] == 0
    assert r["estimators"]["no penalty"]["compare"]["k2"]["response_bias"] > 0
    flat = r["tempered"][-1]
    assert flat["tau"] > 1 and flat["kl_exact"] > 0 > flat["k1_expected"]     # moved, yet "negative KL" under top-k
    assert r["tempered"][0]["kl_exact"] == 0 and r["tempered"][0]["k1_expected"] == 0
    stops = [rec["early_stop_epoch"] for recs in r["early_runs"]["records"] for rec in recs]
    assert any(e is not None for e in stops)
    early = lesson._curve(r["early_runs"], "probe/update_kl")
    none = lesson._curve(r["runs"]["no penalty"], "probe/update_kl", len(early))
    assert early.mean() < none.mean()
    adapt = r["adapt_runs"]["records"]
    steps = r["steps_per_update"]
    assert all(rec["policy/steps"] + rec["policy/skipped_minibatches"] == steps and rec["early_stop_epoch"] is None
               for recs in adapt for rec in recs)                            # no early stop: every minibatch computed
    assert len({rec["lr"] for recs in adapt for rec in recs}) > 1                     # the KL moved the rate
    assert len(r["early_runs"]["records"]) == len(r["adapt_runs"]["records"]) == len(r["sizes"]["seeds"]) == 2
    out = runs["printed"]
    assert out.startswith(lesson.narrative(r)) and "Top-k" in out and "kl_old_target" in out
    assert (runs["out"] / "l15_kl_control.png").stat().st_size > 50_000


def _slope(Y):
    """(slope, se) of (seeds, iterations) curves: se over the seeds' slopes, or from one curve's residuals."""
    x = np.arange(Y.shape[1], dtype=float)
    slopes = np.array([np.polyfit(x, y, 1)[0] for y in Y])
    if len(Y) >= 2:
        return slopes.mean(), slopes.std(ddof=1) / np.sqrt(len(Y))
    if len(x) < 3:
        return slopes.mean(), None
    res = Y[0] - np.polyval(np.polyfit(x, Y[0], 1), x)
    return slopes.mean(), np.sqrt((res ** 2).sum() / (len(x) - 2) / ((x - x.mean()) ** 2).sum())


@pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "numpy"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_l15_estimator_identities(seed, use_kernels):
    """E[k1] = E[k3] = KL exactly and k3 >= 0 on every token, from the full distributions (the lesson's identities)."""
    rng = np.random.default_rng(seed)
    logits, logits_ref = rng.normal(0, 2, (4, 6, 50)), rng.normal(0, 2, (4, 6, 50))
    with kernels.use_kernels(use_kernels):
        m = kl_estimator_moments(logits, logits_ref)
        logq, logq_ref = log_softmax(logits), log_softmax(logits_ref)
        k3 = kl_estimate(logq, logq_ref, "k3")
    kl = (np.exp(logq) * (logq - logq_ref)).sum(-1)
    np.testing.assert_allclose(m["kl"], kl, rtol=1e-12)
    assert np.abs(m["k1_mean"] - kl).max() <= lesson.EXACT_TOL and np.abs(m["k3_mean"] - kl).max() <= lesson.EXACT_TOL
    assert (k3 >= 0).all() and np.abs(m["k2_mean"] - kl).max() > 1e-3              # k2 is biased


@pytest.mark.parametrize("seed", [0, 1])
def test_l15_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    s, runs_ = lesson.summary(r), r["runs"]
    gold = {k: [e["gold_mean"] for e in v["eval"]] for k, v in runs_.items()}
    kl = {k: [final(recs, "objective/kl_exact") for recs in v["records"]] for k, v in runs_.items()}
    assert len(r["sizes"]["seeds"]) > 1                # the quick run has two PPO seeds: the noise branches run
    noise = {"gold": pooled_seed_std(list(gold.values()))[0], "kl": pooled_seed_std(list(kl.values()))[0]}
    rival = max((k for k in s if k != "no penalty"), key=lambda k: s[k]["kl"])
    assert_comparison(V["no_penalty_largest_kl"], compare(kl[rival], kl["no penalty"], noise["kl"]), +1)
    half = r["sizes"]["iterations"] // 2
    d, se = _slope(lesson._curve(runs_["fixed beta 0.02"], "objective/kl_exact")[:, half:])
    assert_comparison(V["fixed_beta_runaway"], {"diff": d, "se": se}, +1)
    assert_comparison(V["fixed_beta_stalls"], compare(gold["fixed beta 0.02"], gold["fixed beta 1"], noise["gold"]), -1)
    # B: the estimators
    fa, cl = r["estimators"]["no penalty"], r["estimators"]["fixed beta 1"]
    n = fa["n_responses"]
    assert V["k1_unbiased"].outcome == HOLDS == V["k3_unbiased_nonnegative"].outcome      # identities
    neg = {k: max(e["compare"][k]["token_neg_frac"] for e in (fa, cl)) for k in ("k1", "k2", "k3")}
    assert neg["k3"] == 0 and max(e["exact_bias"][k] for e in (fa, cl) for k in ("k1", "k3")) <= lesson.EXACT_TOL
    assert V["k1_negative"].holds == (neg["k1"] > 0)
    c = fa["compare"]["k2"]
    assert_comparison(V["k2_biased"], {"diff": c["response_bias"], "se": c["response_err_std"] / np.sqrt(n)}, +1)
    for label, e in (("close", cl), ("far", fa)):
        assert V[f"k3_lower_variance_{label}"].holds == (e["exact_var"]["k3"] < e["exact_var"]["k1"])
    # C: the top-k exploit
    tp, flat = r["topk_policy"], r["tempered"][-1]
    assert V["topk_exploit_found"].holds == (tp["log_mass_ratio"] < 0)
    assert V["topk_k1_negative"].holds == (flat["k1_expected"] < 0)
    # D: the early stop
    early, none = r["early_runs"], runs_["no penalty"]
    upd_none = lesson._curve(none, "probe/update_kl", len(early["records"])).mean(0)
    upd_early = lesson._curve(early, "probe/update_kl").mean(0)
    assert V["iteration0_largest"].holds == (upd_none[0] > upd_none[1:].max())
    dd = upd_early - upd_none
    assert_comparison(V["stop_smaller_updates"], {"diff": dd.mean(), "se": dd.std(ddof=1) / np.sqrt(len(dd))}, -1)
    d, se = _slope(lesson._curve(early, "objective/kl_exact"))
    assert_comparison(V["stop_does_not_bound_ref"], {"diff": d, "se": se}, +1)
    # E: what bounds one update (Q44), and the KL-adapted lr (Q45)
    text = lesson.narrative(r)
    assert "{" not in text                                        # every placeholder was formatted
    arms = {"no penalty": runs_["no penalty"], "fixed beta 1": runs_["fixed beta 1"], "early stop": early,
            "adapt lr": r["adapt_runs"]}
    upd = {k: lesson._curve(v, "probe/update_kl") for k, v in arms.items()}
    cap = lesson.CAP * lesson.TARGET_KL
    bounded = {k: u.max() <= cap for k, u in upd.items()}
    assert V["q44_stop_bounds_update"].holds == (not bounded["fixed beta 1"] and bounded["early stop"])
    logkl = {k: np.log10(np.maximum(u, 1e-12)).mean(axis=1) for k, u in upd.items()}
    noise = pooled_seed_std(list(logkl.values()))[0]
    assert_comparison(V["penalty_smaller_updates"], compare(logkl["no penalty"], logkl["fixed beta 1"], noise), -1)
    assert V["q45_adapt_lr_bounds_update"].holds == bounded["adapt lr"]
    lr_max = lesson._curve(r["adapt_runs"], "lr_max").max()
    assert_verdict(text, "Q45. The KL-adapted lr", lr_max > r["base"]["lr"], "x the configured rate",
                   "never above the configured rate")


def test_l15_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'summary.no penalty.kl': '.2f', 'arm_table.no penalty.update_kl_geomean': '.3f'})
