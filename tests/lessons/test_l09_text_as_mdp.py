"""Smoke test of lesson 09: one rollout as the per-token 7-tuple; the score on the EOS; padding zero."""
import numpy as np

from lessons import l09_text_as_mdp as lesson


def test_l09_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
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
    out = capsys.readouterr().out
    assert "log_prob" in out and "(padding)" in out and "sits on the EOS: True" in out
    assert (tmp_path / "l09_text_as_mdp.png").stat().st_size > 20_000
