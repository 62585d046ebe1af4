"""Smoke test of lesson 14: a short RLHF run moves the policy towards the reward model, within the KL budget; part 3
turns advantage whitening and gradient clipping off (Q22, Q23), its verdicts judged against the seed noise."""
import numpy as np
import pytest

from lessons import l14_rlhf_ppo as lesson
from minippo.studies.sweep_stats import compare, compare_interaction, pooled_seed_std
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from tests.helpers import assert_comparison, assert_derived, assert_printed, expected_outcome, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


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
    assert "Fresh samples" in out and "PPO" in out and "its record equals the first record" in out
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
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    rc, uc = r["walk"]["rollout_calls"], r["walk"]["update_calls"]
    once = all(rc[n]["forward"] == 1 and rc[n]["backward"] == 0 and rc[n]["prefill"] == rc[n]["decode"] == 0
               and sum(uc[n].get(k, 0) for k in ("prefill", "decode", "forward", "backward")) == 0
               for n in ("reference", "reward model"))
    assert once and V["frozen_once"].outcome == HOLDS                  # identities: hold on every seed
    assert r["walk_equals_trainer"] is True and V["walk_equals_trainer"].outcome == HOLDS
    text = lesson.narrative(r)
    assert f"runs forward {rc['critic']['forward']}x in the rollout" in text
    b, a = r["before"], r["after"]
    d = (a["rm"] - b["rm"]) / np.std(b["rm"]) - (a["gold"] - b["gold"]) / np.std(b["gold"])
    assert_comparison(V["proxy_moves_further"], {"diff": d.mean(), "se": d.std(ddof=1) / np.sqrt(d.size)}, +1)
    # part 3 (Q22, Q23), recomputed from the runs with the seed noise pooled over the five variants
    ab = r["ablations"]
    per_seed = lambda v, k: np.array([np.mean([rec[k] for rec in recs]) for recs in ab[v]["records"]])   # noqa: E731
    gold = {v: np.array([e["gold_mean"] for e in ab[v]["eval"]]) for v in ab}
    akl = {v: per_seed(v, "policy/approxkl_avg") for v in ab}
    assert all(len(g) == 2 for g in gold.values())
    ng, nk = pooled_seed_std(list(gold.values()))[0], pooled_seed_std(list(akl.values()))[0]
    assert_comparison(V["whitening_raises_gold"], compare(gold["defaults"], gold["no whitening"], ng), -1)
    w = V["whitening_raises_gold"]                                     # the direction, in words
    higher = "OFF" if gold["no whitening"].mean() > gold["defaults"].mean() else "ON"
    assert w.because.startswith(f"whitening OFF {'higher' if higher == 'OFF' else 'lower'} than whitening ON in gold")
    big, big_raw = lesson.SCALED
    ia = compare_interaction(akl["defaults"], akl["no whitening"], akl[big], akl[big_raw], nk)
    assert_comparison(V["scale_sets_step"], ia, +1)
    c, k = compare(gold["defaults"], gold["no grad clip"], ng), compare(akl["defaults"], akl["no grad clip"], nk)
    parts = [expected_outcome(k["diff"], k["se"], +1), expected_outcome(c["diff"], c["se"], -1)]
    want = HOLDS if HOLDS in parts else FAILS if set(parts) == {FAILS} else NOT_SHOWN
    assert V["grad_clip_matters"].outcome == want


def test_l14_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'ablation.defaults.gold_mean': '+.3f'})
