"""Smoke test of lesson 09: one rollout as the per-token 7-tuple; the score on the EOS; padding zero."""
import numpy as np
import pytest

from lessons import l09_text_as_mdp as lesson
from tests.helpers import assert_one_of, assert_verdict, quick_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l09_quick(runs):
    r = runs[0]
    c = r["checks"]
    assert c["score_on_eos"] and c["padding_zero"]
    assert abs(c["rewards_sum"] - c["score_minus_kl"]) < 1e-9           # rewards sum to score - beta * sum(kl)
    assert abs(c["return_at_eos"] - c["reward_at_eos"]) < 1e-6          # V after the last token is 0
    rows = r["table"].splitlines()[4:]
    assert len(rows) == r["Tn"] and sum("(padding)" in line for line in rows) == r["Tn"] - r["n_tokens"]
    assert (r["mask"][:r["n_tokens"]] == 1).all() and (r["mask"][r["n_tokens"]:] == 0).all()
    assert np.abs(r["arrays"]["logp"][:r["n_tokens"]]).sum() > 0          # not an empty table
    o = r["old_vs_ref"]                                                 # pi_old has left pi_ref
    assert o["frac_differ"] > 0.5 and o["mean_abs_diff"] > 0 and o["kl_is_logp_minus_ref"] is True
    assert len(r["transitions"]) == 3 and r["transitions"][0][2].startswith(r["transitions"][0][0])
    out = runs["printed"].split("; reused from now on.\n")[-1]       # after a cold cache's build announcement
    assert out.startswith(lesson.narrative(r)) and "(padding)" in out and "sits on the last token" in out
    assert (runs["out"] / "l09_text_as_mdp.png").stat().st_size > 20_000


@pytest.mark.parametrize("seed", [0, 1])
def test_l09_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    c, o = r["checks"], r["old_vs_ref"]
    line = "Rewards of the row sum"
    assert_verdict(text, line, c["score_on_eos"], "sits on the last token", "does NOT sit")
    assert_verdict(text, line, np.isclose(c["rewards_sum"], c["score_minus_kl"]), ": equal.", "they DIFFER")
    assert_verdict(text, line, c["padding_zero"], "Padding holds zeros", "NOT zero everywhere")
    no_eos = {None: "responses have an EOS", True: "minus the missing-EOS penalty", False: "does NOT carry"}
    assert_one_of(text, " responses ", no_eos, c["no_eos_penalised"])
    assert (c["no_eos_penalised"] is None) == (r["n_no_eos"] == 0)
    line = "log_prob is pi_old"
    assert_verdict(text, line, o["frac_differ"] > 0, "differ on", "still identical")
    assert_verdict(text, line, o["kl_is_logp_minus_ref"] is True, "checked on every valid token", "NOT what")
