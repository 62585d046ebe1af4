"""Smoke test of lesson 11: the Bradley-Terry reward model beats chance on held-out prompts, tracks the
gold score on fresh samples, and its normalised scores have mean 0 and std 1 on the reference samples."""

from lessons import l11_reward_model as lesson


def test_l11_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    assert r["heldout_accuracy"] > 0.6 and r["heldout_gold_accuracy"] > 0.6
    assert r["heldout_loss"] < r["history"][0]["rm/heldout_loss"]
    assert r["heldout_accuracy"] < r["bayes_accuracy"] + 0.05           # the label noise caps the accuracy
    assert r["pearson"] > 0.3
    assert abs(r["fresh_score"].mean()) < 1e-9 and abs(r["fresh_score"].std() - 1) < 1e-9
    assert sum(r["by_gap"]["n"]) <= r["n_heldout"] and r["calibration"]["count"].sum() == r["n_heldout"]
    assert len(r["examples"]) == 3
    out = capsys.readouterr().out
    assert "held-out accuracy vs the sampled labels" in out and "Normalisation" in out
    assert (tmp_path / "l11_reward_model.png").stat().st_size > 50_000
