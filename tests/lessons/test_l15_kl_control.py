"""Smoke test of lesson 15: the five KL controls run; k2 and k3 never go negative while k1 does; top-k
sampling makes the k1 estimate of a flattened policy negative; early stopping fires and shrinks the updates; the
KL-adapted lr keeps every step; the verdicts of parts A-E follow the numbers on two seeds."""
import numpy as np
import pytest

from lessons import l15_kl_control as lesson
from minippo.studies.study import final
from minippo.studies.sweep_stats import compare, pooled_seed_std
from tests.helpers import assert_one_of, assert_verdict, line_with, quick_runs


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


@pytest.mark.parametrize("seed", [0, 1])
def test_l15_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    s, runs_ = lesson.summary(r), r["runs"]
    gold = {k: [e["gold_mean"] for e in v["eval"]] for k, v in runs_.items()}
    kl = {k: [final(recs, "objective/kl_exact") for recs in v["records"]] for k, v in runs_.items()}
    multi = len(r["sizes"]["seeds"]) > 1
    assert multi                                       # the quick run has two PPO seeds: the noise branches run
    noise = {"gold": pooled_seed_std(list(gold.values()))[0], "kl": pooled_seed_std(list(kl.values()))[0]}
    rival = max((k for k in s if k != "no penalty"), key=lambda k: s[k]["kl"])
    c = compare(kl[rival], kl["no penalty"], noise["kl"])
    key = "largest" if c["clear"] and c["diff"] > 0 else "not" if c["diff"] < 0 else "mean"
    assert_one_of(text, "No penalty: KL", {"largest": ": the largest beyond", "not": "not the largest.",
                                           "mean": "by its mean only"}, key)
    ranked = sorted(s, key=lambda k: s[k]["eval_gold"], reverse=True)
    c = compare(gold[ranked[1]], gold[ranked[0]], noise["gold"])
    assert_verdict(text, "Best evaluation gold", c["clear"], ": the best beyond 2 s.e.", "not the best beyond")
    half = r["sizes"]["iterations"] // 2
    d, se = _slope(lesson._curve(runs_["fixed beta 0.02"], "objective/kl_exact")[:, half:])
    assert_verdict(text, "runaway:", d > 0 and abs(d) >= 2 * se, "still climbing", "not climbing")
    g = compare([r["reference"]["gold_mean"]], gold["fixed beta 1"], noise["gold"])
    low = compare(gold["fixed beta 0.02"], gold["fixed beta 1"], noise["gold"])
    key = ("stalled" if not (g["clear"] and g["diff"] > 0) else
           "slower" if low["clear"] and low["diff"] < 0 else "not")
    assert_one_of(text, "stall:", {"stalled": "stalled: no gain", "slower": "but slower than beta 0.02",
                                   "not": "no less gain than beta 0.02"}, key)
    assert "the same rule on another KL" in line_with(text, "Ziegler's controller")
    # B: the estimators on the far policy, biases in s.e. over the responses
    fa, cl = r["estimators"]["no penalty"], r["estimators"]["fixed beta 1"]
    n = fa["n_responses"]
    clear = {k: abs(fa["compare"][k]["response_bias"]) >= 2 * fa["compare"][k]["response_err_std"] / np.sqrt(n)
             for k in ("k1", "k2", "k3")}
    neg = {k: max(e["compare"][k]["token_neg_frac"] for e in (fa, cl)) for k in ("k1", "k2", "k3")}
    assert_verdict(text, "'k1 can be negative'", neg["k1"] > 0, "negative' holds", "does not hold here")
    assert_verdict(text, "'k2 is biased'", clear["k2"], "biased' holds", "does not hold here")
    assert_verdict(text, "'k3 is unbiased", neg["k3"] == 0 and not clear["k3"], "negative' holds", "does not hold")
    var = {k: (e["exact_var"]["k1"], e["exact_var"]["k3"]) for k, e in (("close", cl), ("far", fa))}
    line = line_with(text, "'k3 has low variance'")
    assert line.count("does not hold here") == sum(v[1] >= v[0] for v in var.values())
    # C: the top-k exploit
    tp = r["topk_policy"]
    assert_verdict(text, "Did PPO with top-k", tp["log_mass_ratio"] < 0, "yes: its top-k mass fell", "no: it SHARP")
    # D: the early stop
    early, none = r["early_runs"], runs_["no penalty"]
    upd_none = lesson._curve(none, "probe/update_kl", len(early["records"])).mean(0)
    upd_early = lesson._curve(early, "probe/update_kl").mean(0)
    assert_verdict(text, "Without it, iteration 0", upd_none[0] > upd_none[1:].max(), "is the largest", "not the largest")
    dd = upd_early - upd_none
    smaller = dd.mean() < 0 and abs(dd.mean()) >= 2 * dd.std(ddof=1) / np.sqrt(len(dd))
    assert_verdict(text, "With minus without the stop", smaller, "makes each update smaller", "no smaller updates")
    d, se = _slope(lesson._curve(early, "objective/kl_exact"))
    grows = se is not None and d > 0 and d >= 2 * se
    line = "With the stop the KL to the reference grows"
    assert_verdict(text, line, grows, "does not bound the distance", "no growth beyond" if se is not None else "too few")
    if grows:
        assert_verdict(text, line, smaller, "it bounds each step", "nor (beyond 2 s.e. here) each step")
    # E: what bounds one update (Q44), and the KL-adapted lr (Q45)
    assert "{" not in text                                        # every placeholder was formatted
    arms = {"no penalty": runs_["no penalty"], "fixed beta 1": runs_["fixed beta 1"], "early stop": early,
            "adapt lr": r["adapt_runs"]}
    upd = {k: lesson._curve(v, "probe/update_kl") for k, v in arms.items()}
    cap = lesson.CAP * lesson.TARGET_KL
    bounded = {k: u.max() <= cap for k, u in upd.items()}
    assert_verdict(text, "Q44. The KL penalty", not bounded["fixed beta 1"] and bounded["early stop"],
                   "the early stop does' holds", "the early stop does' does not hold here")
    assert line_with(text, "Q44. The KL penalty").count(": not bounded") == (not bounded["fixed beta 1"]) + (
        not bounded["early stop"])
    logkl = {k: np.log10(np.maximum(u, 1e-12)).mean(axis=1) for k, u in upd.items()}
    noise = pooled_seed_std(list(logkl.values()))[0]
    c = compare(logkl["no penalty"], logkl["fixed beta 1"], noise)
    key = "smaller" if c["clear"] and c["diff"] < 0 else "larger" if c["clear"] else "same"
    assert_one_of(text, "Q44. The KL penalty", {"smaller": "it makes each update smaller too",
                                                "larger": "each update is larger", "same": "no smaller updates"}, key)
    assert_verdict(text, "Q45. The KL-adapted lr", bounded["adapt lr"], "alternative to the early stop' holds",
                   "alternative to the early stop' does not hold here")
    lr_max = lesson._curve(r["adapt_runs"], "lr_max").max()
    assert_verdict(text, "Q45. The KL-adapted lr", lr_max > r["base"]["lr"], "x the configured rate",
                   "never above the configured rate")

