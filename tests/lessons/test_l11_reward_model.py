"""Smoke test of lesson 11: the Bradley-Terry reward model beats chance on held-out prompts, tracks the
gold score on fresh samples, and its normalised scores have mean 0 and std 1 on the reference samples."""
import numpy as np
import pytest

from lessons import l11_reward_model as lesson
from minippo.studies.verdicts import HOLDS, by_key
from tests.helpers import assert_comparison, assert_derived, assert_printed, assert_verdict, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l11_quick(runs):
    r = runs[0]
    assert r["heldout_accuracy"] > 0.6 and r["heldout_gold_accuracy"] > 0.6
    assert r["heldout_loss"] < r["history"][0]["rm/heldout_loss"]
    assert r["heldout_accuracy"] < r["bayes_accuracy"] + 0.05           # the label noise caps the accuracy
    assert r["pearson"] > 0.3
    assert abs(r["fresh_score"].mean()) < 1e-9 and abs(r["fresh_score"].std() - 1) < 1e-9
    assert sum(r["by_gap"]["n"]) <= r["n_heldout"] and r["calibration"]["count"].sum() == r["n_heldout"]
    assert len(r["examples"]) == 3
    out = runs["printed"]
    assert "held-out accuracy vs the sampled labels" in out and "Normalisation" in out
    assert (runs["out"] / "l11_reward_model.png").stat().st_size > 50_000


@pytest.mark.parametrize("seed", [0, 1])
def test_l11_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    ex = {e["kind"]: e for e in r["examples"]}
    e = ex["the label went against gold"]
    assert_verdict(text, "probability near 0.2" if "probability near 0.2" in text else "the label went against gold",
                   e["gold_chosen"] < e["gold_rejected"], "the label went against gold", "label agrees with gold")
    e = ex["the RM's worst ordering"]
    wrong = (e["rm_chosen"] - e["rm_rejected"]) * (e["gold_chosen"] - e["gold_rejected"]) < 0
    assert_verdict(text, "the RM's worst ordering", wrong, "ordering: the human", "none, the RM orders")


@pytest.mark.parametrize("seed", [0, 1])
def test_l11_verdicts(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    fs = r["fresh_score"]
    assert V["normalised"].outcome == HOLDS and abs(fs.mean()) < 1e-9 and abs(fs.std() - 1) < 1e-9
    g = r["by_gap"]
    acc, n = np.array(g["rm_vs_gold"]), np.array(g["n"])
    lo, hi = np.flatnonzero(n > 0)[[0, -1]]
    se = np.hypot(np.sqrt(acc[lo] * (1 - acc[lo]) / n[lo]), np.sqrt(acc[hi] * (1 - acc[hi]) / n[hi]))
    assert_comparison(V["small_gaps_hardest"], {"diff": acc[hi] - acc[lo], "se": se}, +1)


def test_l11_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'fresh_raw_mean': '+.3f', 'fresh_score_std': '.3f'})
