"""Smoke test of lesson 12: one real trainer step per critic arrangement makes exactly the passes the
formula predicts, only the actor and critic move, the formulas equal real TinyGPT arrays, and the 7B
extrapolation shows the critic's cost and what the (B, T, V) arrays cost (Q33)."""
import numpy as np
import pytest

from lessons import l12_four_models as lesson
from minippo import kernels
from minippo.studies.verdicts import HOLDS, by_key
from tests.helpers import assert_derived, assert_printed, assert_verdict, quick_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)
from minippo.studies.memory import GB, param_count, static_bytes

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


def test_l12_quick(runs):
    r = runs[0]
    out = runs["printed"]
    assert "== formula" in out and "FROZEN" in out and "LLaMA-7B" in out
    assert (runs["out"] / "l12_four_models.png").stat().st_size > 20_000
    for critic in lesson.CRITICS:
        p = r["passes"][critic]
        assert p["counted"] == p["formula"]
        assert p["moved"]["actor"] > 0
        assert p["moved"]["reference"] == 0.0 and p["moved"]["reward"] == 0.0
        assert ("critic" in p["moved"]) == (critic != "none")
        assert ("critic" in p["counted"]) == (critic == "separate")      # a shared critic rides the actor's passes
    sep = r["passes"]["separate"]
    assert sep["moved"]["critic"] > 0 and sep["optimizers"] == {"actor": True, "critic": True}
    assert 0.5 < sep["update_estimate"] / sep["update_peak"] <= 1.05         # the estimate omits transients
    m, actor = r["measured"], r["tiny"]["separate"][0]
    assert (actor.params, actor.weights, actor.grads, actor.optimizer, actor.activations) == \
        (m["params"], m["weights"], m["grads"], m["adam"], m["activations"])
    seven = {c: static_bytes(r["seven"][(c, False)]) for c in lesson.CRITICS}
    assert seven["separate"] > 1.7 * seven["none"] and 239 * GB < seven["separate"] < 241 * GB
    assert r["scaling"]["LLaMA-7B"]["params"] == param_count(lesson.SIZES["LLaMA-7B"], ("lm",)) == 6_738_415_616
    pf = r["pitfall"]
    assert pf["buffer, full distributions"] > 5000 * pf["buffer, log_prob scalars"]


def check_identities(r):
    """The identities checked on the counts and bytes themselves, then the verdicts say holds."""
    for c, p in r["passes"].items():
        assert p["counted"] == p["formula"], c
        assert p["moved"]["reference"] == p["moved"]["reward"] == 0.0 and p["moved"]["actor"] > 0
    m, actor = r["measured"], {x.name: x for x in r["tiny"]["separate"]}["actor"]
    assert (actor.params, actor.weights, actor.grads, actor.optimizer, actor.activations) == (
        m["params"], m["weights"], m["grads"], m["adam"], m["activations"])
    ctl = r["controllers"]
    assert all(c["counted"] == ctl["fixed"]["counted"] for c in ctl.values())
    V = by_key(lesson.verdicts(r))
    assert all(V[k].outcome == HOLDS for k in ("passes_formula", "frozen", "memory_formula"))


def test_l12_identities_on_the_numpy_path():
    with kernels.use_kernels(False):
        r = lesson.run(quick=True, seed=0)
    check_identities(r)


@pytest.mark.parametrize("seed", [0, 1])
def test_l12_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    assert_printed(lesson, runs)
    check_identities(r)
    V = by_key(lesson.verdicts(r))
    for c, p in r["passes"].items():
        line, = [x for x in text.splitlines() if lesson.SETUP_NAMES[c] in x and "decode steps" in x]
        assert ("[== formula]" in line) == (p["counted"] == p["formula"]) != ("!= formula" in line)
    sep, shared, none = (lesson.static_bytes(r["seven"][(c, False)]) for c in ("separate", "shared", "none"))
    assert_verdict(text, "Dropping the critic", np.isclose(shared, none, rtol=1e-3), "or sharing the actor's trunk saves",
                   "), sharing the actor's trunk")
    # Q34: the same step with each KL controller
    ctl = r["controllers"]
    assert set(ctl) == set(lesson.KL_CONTROLLERS) and all(c["controller"]["calls"] == 1 for c in ctl.values())
    same = all(c["counted"] == ctl["fixed"]["counted"] for c in ctl.values())
    step = min(c["step_time"]["wall"] for c in ctl.values())
    cheap = max(c["controller"]["median_s"] for c in ctl.values()) < 1e-3 * step
    assert V["adaptive_beta_free"].holds == (same and cheap)


def test_l12_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'seven_static_gb': '.1f', 'timing.reference_forward_ms': '.1f'})
