"""Smoke test of lesson 17: every hyperparameter is swept around the shared base run, and the robust
mechanisms show even at quick size (a narrower clip band and more steps per batch clip more)."""
from lessons import l17_hyperparameters as lesson


def test_l17_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    t = r["table"]
    assert list(t) == ["clip_eps", "lam", "beta", "update_epochs", "minibatches"]
    assert all(len(points) == 3 and sum(p["base"] for p in points) == 1 for points in t.values())
    n_seeds = len(r["sizes"]["seeds"])
    assert all(len(p["gold_mean"]) == n_seeds for points in t.values() for p in points)
    row = lambda axis, label: next(p for p in t[axis] if p["label"] == label)   # noqa: E731
    cf = lambda axis, label: row(axis, label)["policy/clipfrac_avg"].mean()     # noqa: E731
    ak = lambda axis, label: row(axis, label)["policy/approxkl_avg"].mean()     # noqa: E731
    assert cf("clip_eps", "0.1") > cf("clip_eps", "0.5")                     # a narrower band clips more
    assert ak("update_epochs", "1") < ak("update_epochs", "8") and cf("update_epochs", "1") < cf("update_epochs", "8")
    assert cf("minibatches", "1") < cf("minibatches", "16")                  # more steps on one batch
    assert row("beta", "fixed 0.01")["kl_coef"].mean() == 0.01
    assert r["noise"]["gold_mean"] > 0
    verdicts = lesson.claims(r)
    assert len(verdicts) == 7 and all(v for claim in verdicts for v in claim)
    out = capsys.readouterr().out
    assert "The seeds' claims at this scale" in out and "seed 000: lambda" in out
    assert (tmp_path / "l17_hyperparameters.png").stat().st_size > 50_000
