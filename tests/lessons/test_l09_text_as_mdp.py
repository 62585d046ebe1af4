"""Smoke test of lesson 09: one rollout as the per-token 7-tuple; the score on the EOS; padding zero."""
import numpy as np
import pytest

from lessons import l09_text_as_mdp as lesson
from minippo import kernels
from minippo.studies.verdicts import HOLDS, IDENTITY, by_key
from tests.helpers import assert_derived, assert_printed, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


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
    assert out.startswith(lesson.narrative(r)) and "(padding)" in out and "sits on the last valid token" in out
    assert (runs["out"] / "l09_text_as_mdp.png").stat().st_size > 20_000


def check_identities(r):
    """The 7-tuple's bookkeeping, checked on the row's arrays themselves (float32: rtol 1e-5)."""
    a, n, beta = r["arrays"], r["n_tokens"], r["kl_coef"]
    np.testing.assert_allclose(a["rewards"][:n - 1], -beta * a["kl"][:n - 1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a["rewards"][n - 1], r["score"] - beta * a["kl"][n - 1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a["returns"][n - 1], a["rewards"][n - 1], rtol=1e-5, atol=1e-6)     # V after = 0
    assert all((a[k][n:] == 0).all() for k in ("logp", "values", "rewards", "adv", "returns"))
    V = by_key(lesson.verdicts(r))
    assert all(v.outcome == HOLDS for v in V.values() if v.kind == IDENTITY), [v.render() for v in V.values()]


def test_l09_identities_on_the_numpy_path():
    with kernels.use_kernels(False):
        r = lesson.run(quick=True, seed=0)
    check_identities(r)


@pytest.mark.parametrize("seed", [0, 1])
def test_l09_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    check_identities(r)
    V = by_key(lesson.verdicts(r))
    c, o = r["checks"], r["old_vs_ref"]
    assert ("no_eos_penalised" in V) == (r["n_no_eos"] > 0) and ("kl_is_k1" in V)
    assert V["old_is_not_ref"].holds == (o["frac_differ"] > 0)


def test_l09_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'reward_to_go_at_first': '+.4f'})
