"""Smoke test of lesson 17: every hyperparameter is swept around the shared base run, and the robust
mechanisms show even at quick size (a narrower clip band and more steps per batch clip more)."""
import numpy as np
import pytest

from lessons import l17_hyperparameters as lesson
from minippo.studies.sweep_stats import compare
from tests.helpers import assert_one_of, assert_verdict, quick_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l17_quick(runs):
    r = runs[0]
    t = r["table"]
    assert list(t) == ["clip_eps", "lam", "beta", "update_epochs", "minibatches"]
    assert all(len(points) == 3 and sum(p["base"] for p in points) == 1 for points in t.values())
    n_seeds = len(r["sizes"]["seeds"])
    assert all(len(p["gold_mean"]) == n_seeds for points in t.values() for p in points)
    row = lambda axis, label: next(p for p in t[axis] if p["label"] == label)   # noqa: E731
    cf = lambda axis, label: row(axis, label)["policy/clipfrac_avg"].mean()     # noqa: E731
    ak = lambda axis, label: row(axis, label)["policy/approxkl_avg"].mean()     # noqa: E731
    assert cf("clip_eps", "0.1") > cf("clip_eps", "0.5")                     # a narrower band clips more
    assert ak("update_epochs", "1") < ak("update_epochs", "8") and cf("update_epochs", "1") < cf("update_epochs", "8")
    assert cf("minibatches", "1") < cf("minibatches", "16")                  # more steps on one batch
    assert row("beta", "fixed 0.01")["kl_coef"].mean() == 0.01
    assert r["noise"]["gold_mean"] > 0
    verdicts = lesson.claims(r)
    assert len(verdicts) == 7 and all(v for claim in verdicts for v in claim)
    out = runs["printed"]
    assert out.startswith(lesson.narrative(r)) and "Common claims at this scale" in out
    assert (runs["out"] / "l17_hyperparameters.png").stat().st_size > 50_000


@pytest.mark.parametrize("seed", [0, 1])
def test_l17_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert r["noise"] is not None                           # two seeds at --quick: every verdict below is made
    row = lambda axis, label: next(p for p in r["table"][axis] if p["label"] == label)   # noqa: E731

    def sign(axis, a, b, key="gold_mean"):                 # b - a beyond 2 s.e. of the pooled seed noise
        c = compare(row(axis, a)[key], row(axis, b)[key], r["noise"][key])
        return int(np.sign(c["diff"])) if c["clear"] else 0

    verdicts = {claim: verdict for claim, _, verdict in lesson.claims(r)}
    text = "\n".join(f"{c} || {v}" for c, v in verdicts.items())
    assert_verdict(text, "eps = 0.5 collapses", sign("clip_eps", "0.2", "0.5") < 0, "|| holds", "does not hold here")
    line = "too small an eps converges slowly"
    assert_verdict(text, line, sign("clip_eps", "0.2", "0.1") < 0, "|| holds", "does not hold here")
    assert_verdict(text, line, sign("clip_eps", "0.2", "0.1", "policy/clipfrac_avg") > 0, "clips more tokens beyond",
                   "does not clip more")
    assert_verdict(text, line, sign("clip_eps", "0.2", "0.1", "kl_mean") < 0, "moves less", "does not move less")
    beats = [sign("lam", "0.95", x) for x in ("0.9", "0.99")]
    key = "no" if max(beats) > 0 else "yes" if max(beats) < 0 else "maybe"
    assert_one_of(text, "lambda = 0.95 is the right default", {"no": "does not hold here", "yes": "holds: 0.95",
                                                               "maybe": "consistent, not confirmed"}, key)
    assert "n = 13" not in text and "~13" not in text
    b01 = row("beta", "fixed 0.01")
    over = lambda v: (b01["kl_mean"].mean() - v) >= 2 * r["noise"]["kl_mean"] / np.sqrt(len(b01["kl_mean"]))  # noqa
    line = "a fixed beta lets the KL run away"
    assert_verdict(text, line, over(1.5 * lesson.KL_TARGET), "the runaway half holds", "runaway not seen")
    assert_verdict(text, line, sign("beta", "adaptive", "fixed 0.1") < 0, "the stall half holds", "no stall")
    moved = row("beta", "adaptive")["kl_coef"].mean() / r["kl_ref"]["coef"] - 1
    assert_verdict(text, line, abs(moved) < 0.1, "almost a fixed beta", "not a fixed beta")
    assert_verdict(text, "beta belongs in", over(lesson.KL_TARGET), "lets the KL pass the target", "does not pass")
    line = "reuse old data indefinitely"
    ak, cf = "policy/approxkl_avg", "policy/clipfrac_avg"
    rises = lambda axis, pts, key: all(sign(axis, a, b, key) > 0 for a, b in zip(pts, pts[1:]))   # noqa: E731
    assert_verdict(text, line, rises("update_epochs", ["1", "4", "8"], ak), "the mechanism holds", "mixed")
    assert_verdict(text, line, rises("update_epochs", ["1", "4", "8"], cf), "the clip fraction rises too",
                   "the clip fraction does not rise")
    assert_verdict(text, line, sign("update_epochs", "4", "8") < 0, "8 epochs cost gold", "8 epochs did not cost")
    assert_verdict(text, line, sign("update_epochs", "4", "1") < 0, "1 epoch learns less", "1 epoch was not worse")
    line = "a too-large batch per step"
    assert_verdict(text, line, rises("minibatches", ["1", "4", "16"], ak), "holds in this sense", "mixed")
    least = sign("minibatches", "1", "4", ak) > 0 and sign("minibatches", "1", "16", ak) > 0
    assert_verdict(text, line, least, "moves least", "like more epochs.")
    assert "seed 00" not in lesson.narrative(r).lower()
