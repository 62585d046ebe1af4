"""Smoke test of lesson 14: a short RLHF run moves the policy towards the reward model, within the KL budget."""
from lessons import l14_rlhf_ppo as lesson


def test_l14_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    s = r["summary"]
    assert len(r["records"]) == r["config"].iterations
    assert s["PPO"]["rm_mean"] > s["SFT"]["rm_mean"]                     # PPO raised the proxy ...
    assert 0 < s["PPO"]["kl_exact_mean"] < r["config"].kl_ref_target         # ... at a KL cost below the target
    assert s["SFT"]["kl_mean"] == 0.0                                   # the reference is the SFT model
    out = capsys.readouterr().out
    assert "Fresh samples" in out and "PPO" in out
    assert (tmp_path / "l14_rlhf_ppo.png").stat().st_size > 50_000
