"""Smoke test of lesson 18: PPO-ptx lowers the alignment tax; the critic arrangements run and cost what they should."""
import numpy as np
import pytest

from lessons import l18_ptx_and_critic as lesson
from minippo.studies.sweep_stats import compare, pooled_seed_std
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from tests.helpers import assert_comparison, assert_derived, assert_printed, expected_outcome, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l18_quick(runs):
    r = runs[0]
    sz, ptx, critics = r["sizes"], r["ptx"], r["critics"]
    assert sorted(ptx) == [0.0, 1.0] and list(critics) == list(lesson.CRITICS)
    assert critics["separate, RM init"] is ptx[0.0]                    # the default config is the ptx-0 run
    # the corpus loss is only trained on with PPO-ptx, and it lowers the held-out LM loss (the tax)
    n = len(sz["seeds"])
    assert ptx[0.0]["ptx_loss"] == [0.0] * n and min(ptx[1.0]["ptx_loss"]) > 0
    assert ptx[1.0]["tax"][0] < ptx[0.0]["tax"][0]
    assert r["sft_lm_loss"] > 0 and all(len(v["gold"]) == len(sz["seeds"]) for v in r["runs"].values())
    # every arrangement trained a critic (value loss > 0); the curves have one entry per iteration
    for v in critics.values():
        assert v["value_loss"][0] > 0 and v["curves"]["loss/value_avg"].shape == (n, sz["iterations"])
    # the value loss's part of the shared trunk's gradient is measured for both shared critics (a probe)
    assert all(len(critics[k]["split"]) == n and critics[k]["split"][0]["share"] >= 0
               for k in ("shared + stop-gradient", "shared, no stop-gradient"))
    # memory: the shared value head saves the critic's trunk
    mem = r["memory"]
    assert mem["none"]["7b_total"] <= mem["shared"]["7b_total"] < 0.6 * mem["separate"]["7b_total"]
    assert mem["shared"]["ours_total"] < mem["separate"]["ours_total"]
    out = runs["printed"]
    assert out.startswith(lesson.narrative(r)) and "Critic arrangements" in out
    assert (runs["out"] / "l18_ptx_and_critic.png").stat().st_size > 50_000


@pytest.mark.parametrize("seed", [0, 1])
def test_l18_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    assert len(r["sizes"]["seeds"]) == 2                     # the seed-noise branches run at --quick
    noise = {k: pooled_seed_std([v[k] for v in r["runs"].values()])[0] for k in ("tax", "gold", "kl", "ev")}
    ptx, critics = r["ptx"], r["critics"]
    lo, hi = min(ptx), max(ptx)
    c = lambda a, b, key: compare(a[key], b[key], noise[key])        # noqa: E731  b - a
    assert_comparison(V["ptx_counters_tax"], c(ptx[lo], ptx[hi], "tax"), -1)
    assert_comparison(V["ptx_costs_gold"], c(ptx[lo], ptx[hi], "gold"), -1)
    assert_comparison(V["ptx_pulls_to_sft"], c(ptx[lo], ptx[hi], "kl"), -1)
    mem = r["memory"]
    assert V["shared_saves_memory"].holds == (mem["shared"]["7b_total"] < mem["separate"]["7b_total"])
    sg, nosg = critics["shared + stop-gradient"], critics["shared, no stop-gradient"]
    parts = [expected_outcome(c(sg, nosg, "gold")["diff"], c(sg, nosg, "gold")["se"], -1),
             expected_outcome(c(sg, nosg, "tax")["diff"], c(sg, nosg, "tax")["se"], +1)]
    assert V["stop_gradient_protects"].outcome == (HOLDS if HOLDS in parts else FAILS if set(parts) == {FAILS}
                                                   else NOT_SHOWN)
    sft, sep = critics["separate, SFT init"], critics["separate, RM init"]
    assert_comparison(V["own_trunk_explains_more"], c(sg, sft, "ev"), +1)
    assert_comparison(V["rm_init_explains_more"], c(sft, sep, "ev"), +1)
    text = lesson.narrative(r)
    assert "seed 00" not in text.lower() and "追问" not in text


def test_l18_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'ptx_mean.0.gold': '+.3f'})
