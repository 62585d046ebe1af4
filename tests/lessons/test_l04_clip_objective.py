"""Smoke test of lesson 04: the six cases, exact zero gradients in cases 3 and 4, the band's edges."""
import numpy as np
import pytest

from lessons import l04_clip_objective as lesson
from minippo.rl.losses import CLIPPED_CASES
from tests.helpers import assert_verdict, quick_runs


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


@pytest.mark.parametrize("seed", [0, 1])
def test_l04_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    for e in r["edges"]:
        ok = e["code"] not in CLIPPED_CASES and np.isclose(e["dlogp"], -e["A"] * e["r"], rtol=1e-12)
        assert_verdict(text, f"edge r = {e['r']:.2f}", ok, "the band is closed", "NOT the unclipped")
    b = r["batch"]
    assert_verdict(text, "clipfrac (cases 3+4)", b["clipfrac"] == b["zero_grad_frac"], "the same.", "DIFFER")
    outside = sum(b["case_counts"][c] for c in (1, 3, 4, 6)) / b["n_tokens"]
    assert_verdict(text, "clipfrac (cases 3+4)", np.isclose(b["cleanrl_clipfrac"], outside),
                   "also counts cases 1 and 6", "not the share of cases")
    frozen = sorted(c["code"] for c in r["cases"] if c["dlogp"] == 0.0)
    assert_verdict(text, "A common claim", frozen == [3, 4], "holds, and only there", "does not hold here")


def test_l04_main_writes_its_figure(tmp_path, capsys):
    lesson.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "l04_clip_objective.png").exists()
    out = capsys.readouterr().out
    assert "YES (exactly 0.0)" in out
    assert "opposite signs" in out and "not one of the paper's six" in out
