"""Smoke test of lesson 06: the entropy bonus keeps entropy up and finds the rare best token; the critic learns."""
import numpy as np

from lessons import l06_actor_critic_loss as lesson


def test_l06_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--seed", "0", "--out", str(tmp_path)])      # run + narrative + plot
    assert "explained variance" in capsys.readouterr().out
    assert (tmp_path / "l06_actor_critic_loss.png").stat().st_size > 10_000
    h0, h1 = r["hist"][0.0], r["hist"][0.1]
    # entropy is higher with the bonus, and without it the policy collapses onto the decoy
    assert r["entropy_at_10"][0.1] > r["entropy_at_10"][0.0]
    assert h1["entropy"][:, -1].mean() > h0["entropy"][:, -1].mean()
    assert h0["p_best"][:, -1].mean() < 0.05 < h1["p_best"][:, -1].mean()
    # the critic learns: explained variance goes from 0 (V = 0) towards its ceiling
    assert h1["explained_variance"][:, 0].mean() == 0.0
    assert h1["explained_variance"][:, -5:].mean() > 0.5 * h1["explained_variance_exact"][:, -5:].mean() > 0
    # the gradients on one context's logits: each sums to 0 (softmax shift), entropy holds the decoy back
    g = r["grads"]
    assert abs(g["policy"].sum()) < 1e-12 and abs(g["entropy"].sum()) < 1e-12
    assert g["entropy"][g["decoy"]] < 0 < g["entropy"][g["best"]] and g["policy"][g["decoy"]] > 0
    # closed form of the entropy descent direction: -c2 p (log p + H) * (samples of the context) / N
    p = g["probs"]
    H = -np.sum(p * np.log(p))
    want = -lesson.SHOW_ENT_COEF * p * (np.log(p) + H) * g["n_context"] / lesson.config(0).batch_size
    np.testing.assert_allclose(g["entropy"], want, rtol=1e-10, atol=1e-15)
