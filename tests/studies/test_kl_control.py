"""minippo.studies.kl_control: the per-control summary, the pooled seed noise and the per-arm update KL, against
numbers computed by hand on a fake sweep."""
import numpy as np
import pytest

from minippo.studies.kl_control import arms_noise, control_noise, control_seeds, control_summary, update_kl_arms


def fake_variant(kls, golds, update_kl, n_it=6):
    """A variant as Study.sweep returns it: per seed, n_it records and one evaluation."""
    recs = []
    for s, (k, u) in enumerate(zip(kls, update_kl)):
        recs.append([{"objective/kl_exact": k * i, "gold/score": 0.1 * i + s, "kl_coef": 0.5 + s,
                      "probe/update_kl": u[i], "policy/approxkl_max": 0.2, "policy/approxkl_avg": 0.1,
                      "policy/steps": 8 - s, "lr": 1e-3, "lr_max": 2e-3, "policy/skipped_minibatches": 1}
                     for i in range(n_it)])
    return {"records": recs, "eval": [{"gold_mean": g, "kl_exact_mean": 2 * g} for g in golds]}


U = [[0.01, 0.1, 0.01, 0.01, 0.01, 0.01], [0.001, 0.01, 0.2, 0.01, 0.01, 0.01]]


def test_control_summary_by_hand():
    v = fake_variant([1.0, 3.0], [0.2, 0.4], U)
    s = control_summary({"a": v})["a"]
    assert s["kl"] == pytest.approx(2.0 * np.mean([1, 2, 3, 4, 5]))        # last 5 of k * i, mean of k = 1, 3
    assert s["gold"] == pytest.approx(0.3 + 0.5)                             # 0.1 * mean(1..5) + mean seed 0, 1
    assert s["eval_gold"] == pytest.approx(0.3) and s["eval_kl"] == pytest.approx(0.6)
    assert s["beta"] == pytest.approx(1.0) and s["peak_gold"] == pytest.approx(0.5 + 0.5)
    assert control_seeds(v, "gold") == [0.2, 0.4] and control_seeds(v, "kl") == pytest.approx([3.0, 9.0])
    with pytest.raises(ValueError, match="`key`"):
        control_seeds(v, "beta")


def test_control_noise_pools_the_seeds():
    runs = {"a": fake_variant([1.0, 3.0], [0.2, 0.4], U), "b": fake_variant([2.0, 2.0], [0.0, 0.6], U)}
    n = control_noise(runs)
    # gold: squares (0.01 + 0.01) + (0.09 + 0.09) over 2 degrees of freedom; kl: (9 + 9) + 0 over 2
    assert n["gold"] == pytest.approx(np.sqrt(0.2 / 2)) and n["kl"] == pytest.approx(3.0)
    assert control_noise({"a": fake_variant([1.0], [0.2], U[:1])}) is None


def test_update_kl_arms_by_hand():
    a = update_kl_arms({"x": fake_variant([1.0, 3.0], [0.2, 0.4], U)}, target=0.05)["x"]
    np.testing.assert_allclose(a["after"], [np.mean(np.log10(u)) for u in U], rtol=1e-12)
    assert a["largest"] == 0.2 and a["above"] == 2 and a["n_updates"] == 12
    assert a["steps"] == pytest.approx(7.5) and a["skipped"] == 12 and a["lr"].shape == (2, 6)
    np.testing.assert_allclose(a["kl_ref"], [3.0, 9.0])
    n = arms_noise({"x": a, "y": {**a, "gold": a["gold"] + np.array([0.1, -0.1])}})
    assert n["gold"] == pytest.approx(np.sqrt((0.01 + 0.01 + 0.0) / 2))       # y = [0.3, 0.3]: no spread
    assert arms_noise({"x": {**a, "gold": a["gold"][:1]}}) is None
