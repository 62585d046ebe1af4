"""Smoke test of lesson 10: every tensor passes the gradient check; SFT starts at ln V and ends below unigram."""
import numpy as np

from lessons import l10_tiny_transformer as lesson


def test_l10_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    # (a) the whole model, both heads, every tensor
    assert len(r["gradcheck"]) == 30 and r["gradcheck_ok"] and r["gradcheck_max_rel_err"] < 1e-5
    # (b) the loss curve: ln V at the start, below the unigram baseline at the end, held-out falling
    assert abs(r["initial_loss"] - r["ln_V"]) < 0.05
    assert r["final_loss"] < r["unigram_loss"] < r["initial_loss"]
    assert r["heldout_loss"][-1] < r["heldout_loss"][0] and len(r["steps"]) == r["config"].steps
    assert np.all(np.isfinite(r["train_loss"]))
    # (c, d) samples before and after, with gold scores
    assert len(r["before"]) == len(r["after"]) == r["config"].n_samples
    assert r["before_stats"]["sample_gold_mean"] <= r["after_stats"]["sample_gold_mean"]
    assert all(t.startswith(p) for t, p in zip(r["prompted"], lesson.PROMPTS))
    out = capsys.readouterr().out
    assert "scalar_head.w" in out and "ln V" in out and "unigram baseline" in out
    path = tmp_path / "l10_tiny_transformer.png"
    assert path.exists() and path.stat().st_size > 20_000
