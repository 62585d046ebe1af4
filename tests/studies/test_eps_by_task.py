"""minippo.studies.eps_by_task: the eps x task table and its verdict, against numbers set by hand."""
import numpy as np
import pytest

from minippo.studies.eps_by_task import eps_table, eps_verdict

EPS, TASKS = (0.1, 0.2, 0.5), ("short", "long")


def fake_runs(gold, n_seeds=2):
    """gold[task][eps] -> per-seed golds; every run has 3 iterations of records."""
    runs = {}
    for task in TASKS:
        for e in EPS:
            g = gold[task][e][:n_seeds]
            recs = [[{"policy/clipfrac_avg": e * (i + 1), "policy/approxkl_avg": 0.01} for i in range(3)] for _ in g]
            runs[f"{task} {e}"] = {"records": recs, "eval": [{"gold_mean": x, "length_mean": 5.0, "kl_exact_mean": 1.0,
                                                              "ended_frac": 1.0} for x in g]}
    return runs


GOLD = {"short": {0.1: [0.0, 0.2], 0.2: [0.5, 0.7], 0.5: [0.1, 0.3]},
        "long": {0.1: [0.0, 0.2], 0.2: [0.1, 0.3], 0.5: [1.0, 1.2]}}


def test_table_and_verdict_by_hand():
    q = eps_table(fake_runs(GOLD), TASKS, EPS, lambda t, e: f"{t} {e}")
    np.testing.assert_allclose(q["table"]["long"][0.5]["gold_mean"], [1.0, 1.2])
    np.testing.assert_allclose(q["table"]["short"][0.5]["policy/clipfrac_avg"], [1.0, 1.0])   # mean of 0.5 * (1, 2, 3)
    assert q["noise"] == pytest.approx(np.sqrt(6 * 0.02 / 6))                # each run: +-0.1 around its mean
    v = eps_verdict(q, TASKS, EPS)
    assert v["best"] == {"short": 0.2, "long": 0.5}
    assert v["lead"]["short"]["diff"] == pytest.approx(0.4) and v["lead"]["long"]["diff"] == pytest.approx(0.9)
    # eps 0.5 vs 0.2: +0.9 on long, -0.4 on short -> interaction +1.3, se = noise * sqrt(4 / 2) = sqrt(0.02 * 2)
    assert v["interaction"][0.5]["diff"] == pytest.approx(1.3)
    assert v["interaction"][0.5]["se"] == pytest.approx(0.2)
    assert set(v["interaction"]) == {0.1, 0.5}


def test_one_seed_gives_no_noise_and_no_verdict():
    q = eps_table(fake_runs(GOLD, n_seeds=1), TASKS, EPS, lambda t, e: f"{t} {e}")
    v = eps_verdict(q, TASKS, EPS)
    assert q["noise"] is None and v["interaction"] == {}
    assert v["lead"]["long"]["se"] is None and v["lead"]["long"]["diff"] == pytest.approx(0.9)
