"""Smoke test of lesson 12: one real trainer step per critic arrangement makes exactly the passes the
formula predicts, only the actor and critic move, the formulas equal real TinyGPT arrays, and the 7B
extrapolation shows the critic's cost and what the (B, T, V) arrays cost (Q33)."""
from lessons import l12_four_models as lesson
from minippo.studies.memory import GB, param_count, static_bytes


def test_l12_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "== formula" in out and "FROZEN" in out and "LLaMA-7B" in out
    assert (tmp_path / "l12_four_models.png").stat().st_size > 20_000
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
