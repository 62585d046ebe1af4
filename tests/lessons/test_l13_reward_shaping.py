"""Smoke test of lesson 13: both shapings train; the score lands where each shaping puts it; the uniform
shaping's last token gets anti-credit from the reward-model critic; whole responses leave the clip band
far more often than tokens; the epsilon sweep on two tasks of different length (Q53) judged against the seed
noise."""
import numpy as np
import pytest

from lessons import l13_reward_shaping as lesson
from minippo.studies.sweep_stats import compare, compare_interaction, pooled_seed_std
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from tests.helpers import assert_comparison, assert_derived, assert_one_of, assert_printed, expected_outcome, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l13_quick(runs):
    r = runs[0]
    m = r["rollout"]["mask"] != 0
    last = m.sum(axis=1) - 1
    rows = np.arange(len(last))
    kl_reward = -r["beta"] * r["rollout"]["kl"]
    kf, un = r["credit"]["kl_final"]["rewards"], r["credit"]["uniform"]["rewards"]
    # kl_final: the score sits on the last valid token; uniform: score / n on each token; both sum to the same return
    np.testing.assert_allclose(kf[rows, last] - kl_reward[rows, last], r["rollout"]["scores"], atol=1e-9)
    np.testing.assert_allclose(kf.sum(axis=1), un.sum(axis=1), atol=1e-9)
    assert not kf[~m].any() and not un[~m].any()
    s = lesson.summary(r)
    assert s["uniform"]["corr_end"][0] < 0 < s["kl_final"]["corr_end"][0]      # anti-credit on the uniform EOS
    assert s["uniform"]["ev_first"] < s["kl_final"]["ev_first"]                 # the RM critic fits kl_final's targets
    q = s["ratios"]
    assert q["sequence_outside"] > 3 * q["token_outside"] > 0
    assert 0 < q["token_clipfrac"] <= q["token_outside"]
    assert r["worst"]["1.2^50"] > 9100
    out = runs["printed"]
    assert out.startswith(lesson.narrative(r)) and "1.2^50 = 9100" in out
    assert (runs["out"] / "l13_reward_shaping.png").stat().st_size > 50_000


def _z(rho, n):                                     # Fisher's z and its standard error
    return {"diff": np.arctanh(rho), "se": 1 / np.sqrt(n - 3)}


def _cmp(r, a, b, key):                             # b - a over the seeds, with the pooled seed noise
    if len(r["sizes"]["seeds"]) < 2:
        return {"diff": np.mean(b[key]) - np.mean(a[key]), "se": None}
    return compare(a[key], b[key], pooled_seed_std([a[key], b[key]])[0])


@pytest.mark.parametrize("seed", [0, 1])
def test_l13_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    s = lesson.summary(r)
    k, u = s["kl_final"], s["uniform"]
    n = k["n_responses"]
    assert_comparison(V["uniform_punishes_ending"], _z(u["corr_end"][0], n), -1)
    parts = [expected_outcome(*(lambda c: (c["diff"], c["se"]))(_z(c, n)), +1)
             for c in (*k["corr_end"], *k["corr_start"]) if np.isfinite(c)]
    assert V["kl_final_credit_positive"].outcome == (FAILS if FAILS in parts else HOLDS if set(parts) == {HOLDS}
                                                      else NOT_SHOWN)
    assert_comparison(V["uniform_worse_critic"], _cmp(r, k, u, "ev_seeds"), -1)
    zs, ze = _z(u["corr_start"][0], n), _z(u["corr_end"][0], n)
    assert_comparison(V["uniform_credit_moves_early"], {"diff": zs["diff"] - ze["diff"], "se": np.sqrt(2 / (n - 3))}, +1)
    assert_comparison(V["kl_final_better_gold"], _cmp(r, u, k, "eval_gold_seeds"), +1)
    assert_comparison(V["uniform_longer"], _cmp(r, k, u, "eval_length_seeds"), +1)
    q = s["ratios"]
    pt, ps = q["token_outside"], q["sequence_outside"]
    assert_comparison(V["explodes_in_direction"], {"diff": ps - pt, "se": np.sqrt(pt * (1 - pt) / len(r["log_r"])
                                                                                  + ps * (1 - ps) / len(r["log_R"]))}, +1)
    assert V["explodes_in_size"].holds == (q["R_max"] >= 1.2 ** 50)
    w = np.array([rec["probe/sequence_log_ratio_std"] / (np.sqrt(r["n_mean"]) * rec["probe/token_log_ratio_std"])
                  for v in r["runs"].values() for recs in v["records"] for rec in recs[:r["sizes"]["iterations"] // 2]])
    assert_comparison(V["tokens_move_together"], {"diff": w.mean() - 1, "se": w.std(ddof=1) / np.sqrt(len(w))}, +1)
    # 5 (Q53): the interactions, recomputed from the runs
    gold = {(t, e): np.array([ev["gold_mean"] for ev in r["eps_runs"][lesson.eps_key(t, e)]["eval"]])
            for t in lesson.TASKS for e in lesson.EPS}
    assert all(len(g) == 2 for g in gold.values())                    # two PPO seeds: the noise branch runs
    noise = pooled_seed_std(list(gold.values()))[0]
    short, long_ = lesson.TASKS
    inter = {e: compare_interaction(gold[(short, 0.2)], gold[(short, e)], gold[(long_, 0.2)], gold[(long_, e)], noise)
             for e in lesson.EPS if e != 0.2}
    parts = [expected_outcome(c["diff"], c["se"], 1 if e > 0.2 else -1) for e, c in inter.items()]
    want = FAILS if FAILS in parts else HOLDS if set(parts) == {HOLDS} else NOT_SHOWN
    assert V["eps_wider_for_longer"].outcome == want
    text = lesson.narrative(r)
    clear = {e: c for e, c in inter.items() if c["clear"]}
    assert ("Yet the task changes what epsilon does" in text) == bool(clear)
    if clear:
        agree = [np.sign(c["diff"]) == np.sign(e - 0.2) for e, c in clear.items()]
        key = "with" if all(agree) else "against" if not any(agree) else "mixed"
        assert_one_of(text, "Yet the task changes", {"with": "the direction of 'wider for longer'",
                                                      "against": "the opposite of 'wider for longer'",
                                                      "mixed": "mixed directions"}, key)


def test_l13_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'summary.kl_final.ev': '+.2f'})
