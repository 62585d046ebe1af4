"""Smoke test of lesson 04: the six cases, exact zero gradients in cases 3 and 4, the band's edges."""
import copy

import numpy as np
import pytest

from lessons import l04_clip_objective as lesson
from minippo import kernels
from minippo.rl.losses import CLIPPED_CASES, clipped_policy_loss
from minippo.studies.verdicts import FAILS, HOLDS, IDENTITY, by_key
from tests.helpers import quick_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l04_quick(runs):
    r = runs[0]
    by_code = {c["code"]: c for c in r["cases"]}
    assert sorted(by_code) == [1, 2, 3, 4, 5, 6, 7]
    # case 7 (A = 0): gradient exactly 0 whatever r, and not counted as clipped
    assert by_code[7]["A"] == 0 and by_code[7]["dlogp"] == 0.0 and not by_code[7]["clipped"]
    for code, c in by_code.items():
        assert c["objective"] == c["objective_ref"] and c["dlogp"] == c["dlogp_ref"]
        if code in (3, 4):
            assert c["clipped"] and c["dlogp"] == 0.0                      # exactly zero
            assert c["objective"] == c["A"] * (1.2 if code == 3 else 0.8)
        else:
            assert not c["clipped"] and np.isclose(c["dlogp"], -c["A"] * c["r"], rtol=1e-12)
    # the edges r = 1 +/- eps are inside the closed band: unclipped gradient -A r
    for e in r["edges"]:
        assert e["code"] in (2, 5) and np.isclose(e["dlogp"], -e["A"] * e["r"], rtol=1e-12)
    # Figure 1: flat exactly where clipping binds
    grid, eps = r["r_grid"], r["clip_eps"]
    assert (r["grad_pos"][grid > 1 + eps] == 0).all() and np.allclose(r["grad_pos"][grid <= 1 + eps], 1.0)
    assert (r["grad_neg"][grid < 1 - eps] == 0).all() and np.allclose(r["grad_neg"][grid >= 1 - eps], -1.0)
    b = r["batch"]
    assert b["clipfrac"] == b["zero_grad_frac"] > 0 and b["cleanrl_clipfrac"] > b["clipfrac"]
    assert abs(b["loss"] - b["loss_ref"]) < 1e-12
    assert (runs["out"] / "l04_clip_objective.png").stat().st_size > 10_000
    assert runs["printed"].startswith(lesson.narrative(r)) and "YES (exactly 0.0)" in runs["printed"]
    for v in lesson.verdicts(r):                                   # every verdict printed with its rule
        assert v.render() in runs["printed"]


@pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "numpy"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_l04_identities_hold_on_every_seed_and_path(seed, use_kernels):
    """The identities themselves, recomputed here from a fresh batch, then the verdicts: every one holds."""
    with kernels.use_kernels(use_kernels):
        r = lesson.run(quick=True, seed=seed)
        # the batch of run(), drawn again with the same generator calls
        rng = np.random.default_rng(seed)
        B, T = r["batch"]["B"], r["batch"]["T"]
        logp_old = rng.uniform(-5.0, -0.05, size=(B, T))
        logp = logp_old + 0.25 * rng.standard_normal((B, T))
        adv = rng.standard_normal((B, T))
        mask = (np.arange(T)[None, :] < rng.integers(T // 4, T + 1, size=B)[:, None]).astype(float)
        _, dlogp, stats = clipped_policy_loss(logp, logp_old, adv, mask, clip_eps=r["clip_eps"])
    valid = mask == 1
    ratio = np.exp(logp - logp_old)
    clipped = valid & (((adv > 0) & (ratio > 1 + r["clip_eps"])) | ((adv < 0) & (ratio < 1 - r["clip_eps"])))
    assert clipped.sum() == r["batch"]["n_clipped"] > 0
    assert (dlogp[clipped] == 0.0).all()                                   # exactly zero: the clipped branch
    n = valid.sum()
    np.testing.assert_allclose(dlogp[valid & ~clipped], (-adv * ratio / n)[valid & ~clipped], rtol=1e-12, atol=0)
    assert (dlogp[~valid] == 0.0).all()
    for c in r["cases"]:
        assert c["dlogp"] == (0.0 if c["code"] in CLIPPED_CASES else -c["A"] * c["r"]) or np.isclose(
            c["dlogp"], -c["A"] * c["r"], rtol=1e-12, atol=0)
    V = by_key(lesson.verdicts(r))
    assert all(v.kind == IDENTITY and v.outcome == HOLDS for v in V.values()), [v.render() for v in V.values()]
    assert "cases 3, 4, 7" in V["clip_constant"].because and "for another reason" in V["clip_constant"].because


def test_l04_the_identity_fails_when_a_clipped_token_gets_a_gradient(runs):
    """The verdict is decided by the gradient: a clipped token with a nonzero gradient makes it fail."""
    r = copy.deepcopy(runs[0])
    r["batch"]["clipped_max_abs_grad"] = 1e-30
    assert by_key(lesson.verdicts(r))["clip_constant"].outcome == FAILS
    r = copy.deepcopy(runs[0])
    next(c for c in r["cases"] if c["code"] == 1)["dlogp"] *= 1 + 1e-9
    assert by_key(lesson.verdicts(r))["clip_constant"].outcome == FAILS
    r = copy.deepcopy(runs[0])
    r["edges"][0]["code"] = 3
    assert by_key(lesson.verdicts(r))["band_closed"].outcome == FAILS


def test_l04_main_writes_its_figure(tmp_path, capsys):
    lesson.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "l04_clip_objective.png").exists()
    out = capsys.readouterr().out
    assert "YES (exactly 0.0)" in out
    assert "opposite signs" in out and "not one of the paper's six" in out
