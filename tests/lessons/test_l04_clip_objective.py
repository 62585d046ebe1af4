"""Smoke test of lesson 04: the six cases, exact zero gradients in cases 3 and 4, the band's edges."""
import numpy as np

from lessons import l04_clip_objective as lesson


def test_l04_quick(tmp_path):
    r = lesson.run(quick=True, seed=0)
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
    path = tmp_path / "l04.png"
    lesson.plot(r, path)
    assert path.stat().st_size > 10_000


def test_l04_main_writes_its_figure(tmp_path, capsys):
    lesson.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "l04_clip_objective.png").exists()
    out = capsys.readouterr().out
    assert "YES (exactly 0.0)" in out
    assert "opposite signs" in out and "not one of the paper's six" in out
