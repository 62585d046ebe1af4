"""Smoke test of lesson 18: PPO-ptx lowers the alignment tax; the critic arrangements run and cost what they should."""
import numpy as np
import pytest

from lessons import l18_ptx_and_critic as lesson
from minippo.studies.sweep_stats import compare, pooled_seed_std
from tests.helpers import assert_verdict, quick_runs


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
    text = lesson.narrative(r)
    assert len(r["sizes"]["seeds"]) == 2                     # the seed-noise branches run at --quick
    noise = {k: pooled_seed_std([v[k] for v in r["runs"].values()])[0] for k in ("tax", "gold", "kl")}
    ptx, critics = r["ptx"], r["critics"]
    lo, hi = min(ptx), max(ptx)

    def sign(a, b, key):                                     # b - a beyond 2 s.e. of the pooled seed noise
        c = compare(a[key], b[key], noise[key])
        return int(np.sign(c["diff"])) if c["clear"] else 0

    lower_tax = any(sign(ptx[lo], ptx[k], "tax") < 0 for k in ptx if k > 0)
    line = "counters the alignment tax"
    assert_verdict(text, line, lower_tax, "tax: holds:", "tax: does not hold here")
    assert_verdict(text, line, sign(ptx[lo], ptx[hi], "kl") < 0, "PPO-ptx pulls the policy", "no pull towards")
    mem = r["memory"]
    assert_verdict(text, "sharing the actor's trunk with the critic saves memory",
                   mem["shared"]["7b_total"] < mem["separate"]["7b_total"], "memory: holds", "does not hold here")
    sg, nosg = critics["shared + stop-gradient"], critics["shared, no stop-gradient"]
    disturbed = sign(sg, nosg, "gold") < 0 or sign(sg, nosg, "tax") > 0
    assert_verdict(text, "a stop-gradient keeps a shared critic", disturbed, "actor: holds", "does not hold here")
    assert "seed 00" not in text.lower() and "追问" not in text
