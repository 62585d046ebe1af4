"""Smoke test of lesson 14: a short RLHF run moves the policy towards the reward model, within the KL budget."""
from lessons import l14_rlhf_ppo as lesson


def test_l14_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    s = r["summary"]
    assert len(r["records"]) == r["config"].iterations
    assert s["PPO"]["rm_mean"] > s["SFT"]["rm_mean"]                     # PPO raised the proxy ...
    assert 0 < s["PPO"]["kl_exact_mean"] < r["config"].kl_ref_target         # ... at a KL cost below the target
    assert s["SFT"]["kl_mean"] == 0.0                                   # the reference is the SFT model
    # part 1: the walk is iteration 0 of the run, and the four models ran where ppo.py says
    w = r["walk"]
    assert r["walk_equals_trainer"] is True
    rc, uc = w["rollout_calls"], w["update_calls"]
    assert rc["actor"]["prefill"] == 1 and rc["actor"]["forward"] == 1 and rc["reference"]["forward"] == 1
    assert rc["reward model"]["forward"] >= 1 and rc["critic"]["forward"] == 1
    assert uc["actor"]["backward"] == w["steps"] == uc["critic"]["backward"]
    assert uc["reference"] == {k: 0 for k in uc["reference"]} and uc["reward model"]["backward"] == 0
    assert set(w["shapes"]) == {"observation", "action", "log_prob", "value", "reward", "advantage", "return"}
    assert (w["rows"]["reward"][w["n"]:] == 0).all() and (w["rows"]["advantage"][w["n"]:] == 0).all()
    out = capsys.readouterr().out
    assert "Fresh samples" in out and "PPO" in out and "The walk's record equals" in out
    assert (tmp_path / "l14_rlhf_ppo.png").stat().st_size > 50_000
