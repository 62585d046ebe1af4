"""Smoke test of lesson 13: both shapings train; the score lands where each shaping puts it; the uniform
shaping's last token gets anti-credit from the reward-model critic; whole responses leave the clip band
far more often than tokens; the epsilon sweep on two tasks of different length (Q53) judged against the seed
noise."""
import numpy as np
import pytest

from lessons import l13_reward_shaping as lesson
from minippo.studies.sweep_stats import compare, compare_interaction, pooled_seed_std
from tests.helpers import assert_one_of, assert_verdict, quick_runs


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


def _sign(rho, n):                                  # Fisher z beyond 2 standard errors
    z = np.arctanh(rho) * np.sqrt(n - 3)
    return int(np.sign(z)) if abs(z) >= 2 else 0


def _cmp(r, a, b, key):                             # b - a over the seeds, with the pooled seed noise (None: one seed)
    if len(r["sizes"]["seeds"]) < 2:
        return None
    return compare(a[key], b[key], pooled_seed_std([a[key], b[key]])[0])


@pytest.mark.parametrize("seed", [0, 1])
def test_l13_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    s = lesson.summary(r)
    k, u = s["kl_final"], s["uniform"]
    line = "  kl_final: every token"
    assert_verdict(text, line, np.mean(k["ev_first_seeds"]) > 0, "positive, its targets make sense", "not positive")
    positive = all(_sign(c, k["n_responses"]) > 0 for c in (*k["corr_end"], *k["corr_start"]) if np.isfinite(c))
    assert_verdict(text, line, positive, "positively correlated with the score at every position", "V(s_t).")
    anti = _sign(u["corr_end"][0], u["n_responses"])
    assert_one_of(text, "  uniform: the return-to-go", {-1: "ANTI-correlated", 1: "positively correlated",
                                                        0: "not different from 0"}, anti)
    ev = _cmp(r, k, u, "ev_seeds")
    key = "none" if ev is None else "worse" if ev["clear"] and ev["diff"] < 0 else "no evidence"
    assert_one_of(text, "A common claim: spreading", {"none": "no verdict on the critics",
                                                      "worse": "uniform's critic explains less",
                                                      "no evidence": "no evidence that"}, key)
    shift = _sign(u["corr_start"][0], u["n_responses"]) - anti > 0
    assert_verdict(text, "A common claim: spreading", shift, "credit moves to the early tokens", "tokens).")
    gold = _cmp(r, u, k, "eval_gold_seeds")
    if gold is None:
        assert_verdict(text, "kl_final - uniform gold", True, "one seed: no noise estimate", "is better")
    else:
        key = int(np.sign(gold["diff"])) if gold["clear"] else 0
        assert_one_of(text, "kl_final - uniform gold", {1: "kl_final is better", -1: "uniform is better",
                                                        0: "within 2 s.e."}, key)
    longer = _cmp(r, k, u, "eval_length_seeds")
    ok = longer is not None and longer["clear"] and longer["diff"] > 0 and anti < 0
    assert_verdict(text, "uniform - kl_final length", ok, "uniform's responses are longer", "noise")
    q = s["ratios"]
    pt, ps = q["token_outside"], q["sequence_outside"]
    direction = ps - pt >= 2 * np.sqrt(pt * (1 - pt) / len(r["log_r"]) + ps * (1 - ps) / len(r["log_R"]))
    line = "The explosion claim"
    assert_verdict(text, line, direction, "holds in direction", "does not hold here in direction")
    assert_verdict(text, line, q["R_max"] < 1.2 ** 50, ", not in size", ", and in size")
    w = np.array([rec["probe/sequence_log_ratio_std"] / (np.sqrt(r["n_mean"]) * rec["probe/token_log_ratio_std"])
                  for v in r["runs"].values() for recs in v["records"] for rec in recs[:r["sizes"]["iterations"] // 2]])
    se = w.std(ddof=1) / np.sqrt(len(w))
    key = 1 if w.mean() - 1 >= 2 * se else -1 if 1 - w.mean() >= 2 * se else 0
    assert_one_of(text, line, {1: "wider than independent", -1: "narrower than independent",
                               0: "as wide as independent"}, key)
    assert "leaves the drift of the whole response" not in text and "seed 0" not in text.lower()
    # 5 (Q53): the best epsilon per task and the interactions, recomputed from the runs
    gold = {(t, e): np.array([ev["gold_mean"] for ev in r["eps_runs"][lesson.eps_key(t, e)]["eval"]])
            for t in lesson.TASKS for e in lesson.EPS}
    assert all(len(g) == 2 for g in gold.values())                    # two PPO seeds: the noise branch runs
    noise = pooled_seed_std(list(gold.values()))[0]
    short, long_ = lesson.TASKS
    best = {t: max(lesson.EPS, key=lambda e: gold[(t, e)].mean()) for t in lesson.TASKS}
    inter = {e: compare_interaction(gold[(short, 0.2)], gold[(short, e)], gold[(long_, 0.2)], gold[(long_, e)], noise)
             for e in lesson.EPS if e != 0.2}
    depends = best[short] != best[long_] and any(c["clear"] for c in inter.values())
    assert_verdict(text, "'The best epsilon differs", depends, "tasks' holds", "tasks' does not hold here")
    clear = {e: c for e, c in inter.items() if c["clear"]}
    assert ("Yet the task changes what epsilon does" in text) == bool(clear)
    if clear:
        agree = [np.sign(c["diff"]) == np.sign(e - 0.2) for e, c in clear.items()]
        key = "with" if all(agree) else "against" if not any(agree) else "mixed"
        assert_one_of(text, "Yet the task changes", {"with": "the direction of 'wider for longer'",
                                                      "against": "the opposite of 'wider for longer'",
                                                      "mixed": "mixed directions"}, key)

