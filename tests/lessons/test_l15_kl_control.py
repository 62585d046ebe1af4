"""Smoke test of lesson 15: the five KL controls run; k2 and k3 never go negative while k1 does; top-k
sampling makes the k1 estimate of a flattened policy negative; early stopping fires and shrinks the updates."""
from lessons import l15_kl_control as lesson


def test_l15_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    s = lesson.summary(r)
    assert set(s) == set(lesson.CONTROLS)
    assert s["fixed beta 1"]["beta"] == 1.0 and s["no penalty"]["beta"] == 0.0
    assert s["no penalty"]["eval_kl"] > s["fixed beta 1"]["eval_kl"]
    for name in ("fixed beta 1", "no penalty"):
        cmp_ = r["estimators"][name]["compare"]
        assert cmp_["k1"]["token_neg_frac"] > 0.2                  # one k1 sample is often negative
        assert cmp_["k2"]["token_neg_frac"] == 0 and cmp_["k3"]["token_neg_frac"] == 0
    assert r["estimators"]["no penalty"]["compare"]["k2"]["response_bias"] > 0
    flat = r["tempered"][-1]
    assert flat["tau"] > 1 and flat["kl_exact"] > 0 > flat["k1_expected"]     # moved, yet "negative KL" under top-k
    assert r["tempered"][0]["kl_exact"] == 0 and r["tempered"][0]["k1_expected"] == 0
    stops = [rec["early_stop_epoch"] for recs in r["early_runs"]["records"] for rec in recs]
    assert any(e is not None for e in stops)
    early = lesson._curve(r["early_runs"], "probe/update_kl")
    none = lesson._curve(r["runs"]["no penalty"], "probe/update_kl", len(early))
    assert early.mean() < none.mean()
    out = capsys.readouterr().out
    assert "KL control" in out and "Top-k" in out and "kl_old_target" in out
    assert (tmp_path / "l15_kl_control.png").stat().st_size > 50_000
