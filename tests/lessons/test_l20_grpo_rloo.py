"""Smoke test of lesson 20: PPO and the critic-free estimators on one budget, three models instead of four."""
import numpy as np
import pytest

from lessons import l20_grpo_rloo as lesson
from minippo.studies.sweep_stats import compare, pooled_seed_std
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from tests.helpers import assert_comparison, assert_derived, assert_one_of, assert_printed, expected_outcome, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)

PPO = "PPO (GAE + critic)"
CRITIC_FREE = ("GRPO", "RLOO", "REINFORCE (batch mean)")


def test_l20_quick(runs):
    r = runs[0]
    sz, S = r["sizes"], r["summary"]
    assert list(S) == list(lesson.METHODS)
    # the same number of responses per iteration for every method: PPO 1 per prompt, the others GROUP per prompt
    assert S[PPO]["samples_per_prompt"] == 1 and S[PPO]["prompts"] == sz["batch_size"]
    for name in CRITIC_FREE:
        assert S[name]["samples_per_prompt"] == lesson.GROUP and S[name]["prompts"] == sz["batch_size"] // lesson.GROUP
    for name, per_seed in r["records"].items():
        for recs in per_seed:
            assert [rec["episode"] for rec in recs] == [(i + 1) * sz["batch_size"] for i in range(sz["iterations"])]
        assert 0 < np.mean(S[name]["tokens"]) <= sz["iterations"] * sz["batch_size"] * 24
    # no critic: no value loss; GRPO: the KL is a loss term, not in the reward; RLOO keeps it in the reward
    for name in CRITIC_FREE:
        assert all(rec["loss/value_avg"] == 0.0 for recs in r["records"][name] for rec in recs)
    grpo = [rec for recs in r["records"]["GRPO"] for rec in recs]
    assert all(rec["kl_coef"] == 0.0 and rec["objective/non_score_reward"] == 0.0 for rec in grpo)
    assert all(rec["loss/kl_avg"] > 0 for rec in grpo[1:])            # the policy has moved after one update
    assert all(rec["kl_coef"] > 0 for recs in r["records"]["RLOO"] for rec in recs)
    assert all(rec["loss/value_avg"] > 0 for recs in r["records"][PPO] for rec in recs)
    # the baselines' identities on the group rollouts
    bl = r["baselines"]
    assert bl["batch mean"] == pytest.approx(1.0)
    assert bl["group mean"] == pytest.approx(1.0 - bl["between_prompts"])
    assert bl["leave-one-out"] == pytest.approx((lesson.GROUP / (lesson.GROUP - 1)) ** 2 * bl["group mean"])
    # three models instead of four, and less memory at both sizes
    mem = r["memory"]
    assert (mem["separate"]["models"], mem["none"]["models"]) == (4, 3)
    assert mem["none"]["ours_total"] < mem["separate"]["ours_total"]
    assert mem["none"]["7b_total"] < 0.6 * mem["separate"]["7b_total"]
    out = runs["printed"]
    assert out.startswith(lesson.narrative(r)) and "Memory: PPO keeps 4 models" in out
    assert (runs["out"] / "l20_grpo_rloo.png").stat().st_size > 50_000


@pytest.mark.parametrize("seed", [0, 1])
def test_l20_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    text = lesson.narrative(r)
    S, bl, ref = r["summary"], r["baselines"], r["reference"]
    assert len(r["sizes"]["seeds"]) == 2                      # the seed-noise branches run at --quick
    factor = (lesson.GROUP / (lesson.GROUP - 1)) ** 2          # identities: they hold on every seed
    assert np.isclose(bl["batch mean"] - bl["group mean"], bl["between_prompts"], atol=0.005)
    assert np.isclose(bl["leave-one-out"], factor * bl["group mean"], rtol=0.01)
    assert V["group_mean_removes_prompt_share"].outcome == V["loo_residual_factor"].outcome == HOLDS
    free = [n for n in CRITIC_FREE if n in S]
    noise = pooled_seed_std([S[m]["cpu_per_it"] for m in r["methods"]])[0]
    cpu = compare(S[PPO]["cpu_per_it"], [np.mean([S[n]["cpu_per_it"][i] for n in free]) for i in range(2)], noise)
    assert_comparison(V["critic_free_saves_cpu"], cpu, -1)
    assert V["loo_worse_than_batch_mean"].holds == (bl["leave-one-out"] > bl["batch mean"])
    noise = pooled_seed_std([S[m]["gold"] for m in r["methods"]])[0]
    lifts = [expected_outcome(c["diff"], c["se"], +1) for c in
             (compare([ref["gold_mean"]], S[n]["gold"], noise) for n in r["methods"])]
    assert V["every_optimiser_lifts_gold"].outcome == (FAILS if FAILS in lifts else HOLDS if set(lifts) == {HOLDS}
                                                       else NOT_SHOWN)
    for n in r["methods"]:
        if n != PPO:
            c = compare(S[PPO]["gold"], S[n]["gold"], noise)
            key = int(np.sign(c["diff"])) if c["clear"] else 0
            assert_one_of(text, f"  {n}: gold vs PPO", {1: "above PPO beyond", -1: "below PPO beyond",
                                                        0: "within the seed noise"}, key)
    assert "seed 00" not in text.lower() and "误区" not in text


def test_l20_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'method_mean.PPO (GAE + critic).kl': '.2f'})
