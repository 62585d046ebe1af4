"""Smoke test of lesson 14: a short RLHF run moves the policy towards the reward model, within the KL budget; part 3
turns advantage whitening and gradient clipping off (Q22, Q23), its verdicts judged against the seed noise."""
import numpy as np
import pytest

from lessons import l14_rlhf_ppo as lesson
from minippo.studies.sweep_stats import compare, compare_interaction, pooled_seed_std
from tests.helpers import assert_one_of, assert_verdict, quick_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l14_quick(runs):
    r = runs[0]
    s = r["summary"]
    assert len(r["records"]) == r["config"].iterations
    assert s["PPO"]["rm_mean"] > s["SFT"]["rm_mean"]                     # PPO raised the proxy ...
    assert 0 < s["PPO"]["kl_exact_mean"] < r["config"].kl_ref_target         # ... at a KL cost below the target
    assert s["SFT"]["kl_mean"] == 0.0                                   # the reference is the SFT model
    # part 1: the walk is iteration 0 of the run, and the four models ran where ppo.py says
    w = r["walk"]
    assert r["walk_equals_trainer"] is True
    rc, uc = w["rollout_calls"], w["update_calls"]
    assert rc["actor"]["prefill"] == 1 and rc["actor"]["forward"] == 1 and rc["reference"]["forward"] == 1
    assert rc["reward model"]["forward"] >= 1 and rc["critic"]["forward"] == 1
    assert uc["actor"]["backward"] == w["steps"] == uc["critic"]["backward"]
    assert uc["reference"] == {k: 0 for k in uc["reference"]} and uc["reward model"]["backward"] == 0
    assert set(w["shapes"]) == {"observation", "action", "log_prob", "value", "reward", "advantage", "return"}
    assert (w["rows"]["reward"][w["n"]:] == 0).all() and (w["rows"]["advantage"][w["n"]:] == 0).all()
    out = runs["printed"]
    assert "Fresh samples" in out and "PPO" in out and "The walk's record equals" in out
    assert (runs["out"] / "l14_rlhf_ppo.png").stat().st_size > 50_000
    # part 3: the switches did what they say
    ab = r["ablations"]
    assert set(ab) == set(lesson.ABLATIONS) | set(lesson.SCALED)
    assert all(rec["policy/grad_clip_frac"] == 0.0 for recs in ab["no grad clip"]["records"] for rec in recs)
    big = ab[f"RM x {lesson.RM_SCALE:g}"]["records"][0][0]["probe/adv_raw_std"]
    assert big > 5 * ab["defaults"]["records"][0][0]["probe/adv_raw_std"]        # the scores x 10 reach the advantages


@pytest.mark.parametrize("seed", [0, 1])
def test_l14_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    rc, uc = r["walk"]["rollout_calls"], r["walk"]["update_calls"]
    once = all(rc[n]["forward"] == 1 and rc[n]["backward"] == 0 and rc[n]["prefill"] == rc[n]["decode"] == 0
               and sum(uc[n].get(k, 0) for k in ("prefill", "decode", "forward", "backward")) == 0
               for n in ("reference", "reward model"))
    assert_verdict(text, "-> the actor samples", once, "run forward once each", "do NOT run forward")
    assert f"runs forward {rc['critic']['forward']}x in the rollout" in text
    assert_verdict(text, "The walk's record", r["walk_equals_trainer"], "equals", "DIFFERS FROM")
    b, a = r["before"], r["after"]
    d = (a["rm"] - b["rm"]) / np.std(b["rm"]) - (a["gold"] - b["gold"]) / np.std(b["gold"])
    se = d.std(ddof=1) / np.sqrt(d.size)
    key = int(np.sign(d.mean())) if abs(d.mean()) >= 2 * se else 0
    assert_one_of(text, "The gold score moved by", {1: "the proxy moves further", -1: "the gold moved further",
                                                    0: "the gold moved as far as the proxy"}, key)
    # part 3 (Q22, Q23), recomputed from the runs with the seed noise pooled over the five variants
    ab = r["ablations"]
    per_seed = lambda v, k: np.array([np.mean([rec[k] for rec in recs]) for recs in ab[v]["records"]])   # noqa: E731
    gold = {v: np.array([e["gold_mean"] for e in ab[v]["eval"]]) for v in ab}
    akl = {v: per_seed(v, "policy/approxkl_avg") for v in ab}
    assert all(len(g) == 2 for g in gold.values())
    ng, nk = pooled_seed_std(list(gold.values()))[0], pooled_seed_std(list(akl.values()))[0]
    w = compare(gold["defaults"], gold["no whitening"], ng)
    assert_verdict(text, "Q22. Whitening off", w["clear"], "this scale' holds", "this scale' does not hold here")
    big, big_raw = lesson.SCALED
    ia = compare_interaction(akl["defaults"], akl["no whitening"], akl[big], akl[big_raw], nk)
    assert_verdict(text, "With the scores x", ia["clear"] and ia["diff"] > 0, "step size' holds",
                   "step size' does not hold here")
    c, k = compare(gold["defaults"], gold["no grad clip"], ng), compare(akl["defaults"], akl["no grad clip"], nk)
    assert_verdict(text, "Q23. Gradient clipping off", c["clear"] or k["clear"], "this scale' holds",
                   "this scale' does not hold here")

