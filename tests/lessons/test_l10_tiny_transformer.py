"""Smoke test of lesson 10: every tensor passes the gradient check; SFT starts at ln V and ends below unigram."""
import numpy as np
import pytest

from lessons import l10_tiny_transformer as lesson
from tests.helpers import assert_one_of, assert_verdict, quick_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l10_quick(runs):
    r = runs[0]
    # (a) the whole model, both heads, every tensor
    assert len(r["gradcheck"]) == 30 and r["gradcheck_ok"] and r["gradcheck_max_rel_err"] < 1e-5
    # (b) the loss curve: ln V at the start, below the unigram baseline at the end, held-out falling
    assert abs(r["initial_loss"] - r["ln_V"]) < 0.05
    assert r["final_loss"] < r["unigram_loss"] < r["initial_loss"]
    assert r["heldout_loss"][-1] < r["heldout_loss"][0] and len(r["steps"]) == r["config"].steps
    assert np.all(np.isfinite(r["train_loss"]))
    # (c, d) samples before and after, with gold scores
    assert len(r["before"]) == len(r["after"]) == r["config"].n_samples
    assert r["before_stats"]["sample_gold_mean"] <= r["after_stats"]["sample_gold_mean"]
    assert all(t.startswith(p) for t, p in zip(r["prompted"], lesson.PROMPTS))
    out = runs["printed"]
    assert "scalar_head.w" in out and "ln V" in out and "unigram baseline" in out
    path = runs["out"] / "l10_tiny_transformer.png"
    assert path.exists() and path.stat().st_size > 20_000


@pytest.mark.parametrize("seed", [0, 1])
def test_l10_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    assert_verdict(text, "tensors", r["gradcheck_ok"], "tensors pass", "DO NOT pass")
    assert_verdict(text, "initial held-out loss", abs(r["initial_loss"] - r["ln_V"]) < 0.01 * r["ln_V"],
                   "guesses uniformly", "does NOT start uniform")
    assert_verdict(text, "final held-out loss", r["final_loss"] < r["unigram_loss"], "the context is worth",
                   "has not beaten")
    before, after = (np.array([g for _, g in r[k]]) for k in ("before", "after"))
    se = np.sqrt(before.var(ddof=1) / before.size + after.var(ddof=1) / after.size)
    assert_verdict(text, "SFT's effect on the gold", after.mean() - before.mean() >= 2 * se,
                   "writes better sentences", "no gain beyond 2 s.e.")
    sa, sc = r["after_sentiment"], r["corpus_sentiment"]
    se = np.sqrt(sa.var(ddof=1) / sa.size + sc.var(ddof=1) / sc.size)
    key = ("no words" if np.mean(sa != 0) < 0.5 * np.mean(sc != 0) else
           "imitates" if abs(sa.mean() - sc.mean()) < 2 * se else "differs")
    assert_one_of(text, "Sentiment of the SFT samples", {"no words": "has not learned the corpus's sentiment",
                                                         "imitates": "SFT imitates the corpus's mix",
                                                         "differs": "differs from the corpus's"}, key)
