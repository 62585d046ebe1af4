"""Smoke test of lesson 10: every tensor passes the gradient check; SFT starts at ln V and ends below unigram."""
import numpy as np
import pytest

from lessons import l10_tiny_transformer as lesson
from minippo import kernels
from minippo.studies.verdicts import HOLDS, by_key
from tests.helpers import assert_comparison, assert_printed, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


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


@pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "numpy"])
@pytest.mark.parametrize("seed", [2, 3])
def test_l10_gradcheck_identity(seed, use_kernels):
    """The lesson's gradient check (every tensor against central differences) on more seeds and both paths."""
    with kernels.use_kernels(use_kernels):
        check = lesson.gradient_check(seed, quick=True)
    assert check.ok and max(x.rel_err for x in check) <= lesson.GRAD_TOL


@pytest.mark.parametrize("seed", [0, 1])
def test_l10_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    assert V["gradcheck"].outcome == HOLDS and all(x.rel_err <= lesson.GRAD_TOL for x in r["gradcheck"])
    assert V["uniform_start"].holds == (abs(r["initial_loss"] - r["ln_V"]) < 0.01 * r["ln_V"])
    assert V["context_helps"].holds == (r["final_loss"] < r["unigram_loss"])
    before, after = (np.array([g for _, g in r[k]]) for k in ("before", "after"))
    se = np.sqrt(before.var(ddof=1) / before.size + after.var(ddof=1) / after.size)
    assert_comparison(V["sft_gold_gain"], {"diff": after.mean() - before.mean(), "se": se}, +1)
    sa, sc = r["after_sentiment"], r["corpus_sentiment"]
    assert V["uses_sentiment_words"].holds == (np.mean(sa != 0) >= 0.5 * np.mean(sc != 0))
