"""Exact moments of the KL estimators: a brute-force loop, Monte Carlo, Schulman's identities, the top-k
decomposition, and the sample-based comparison against hand-computed numbers."""
import numpy as np
import pytest

from minippo.rl.losses import kl_exact_from_logits, log_softmax
from minippo.studies.kl_moments import (compare_kl_estimators, kl_estimator_moments, probe_estimators, response_mean,
                                        topk_mass_decomposition, topk_probe)


def _pair(seed=0, shape=(3, 7), scale=1.5):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal(shape), scale * rng.standard_normal(shape)


def _loop_moments(logits, logits_ref, q):
    """One position, by a plain loop over the vocabulary (the oracle)."""
    p = np.exp(log_softmax(logits))
    p_ref = np.exp(log_softmax(logits_ref))
    est = {"k1": lambda v: np.log(p[v] / p_ref[v]),
           "k2": lambda v: 0.5 * np.log(p[v] / p_ref[v]) ** 2,
           "k3": lambda v: p_ref[v] / p[v] - 1 - np.log(p_ref[v] / p[v])}
    out = {"kl": sum(p[v] * np.log(p[v] / p_ref[v]) for v in range(len(p)))}
    for kind, k in est.items():
        mean = sum(q[v] * k(v) for v in range(len(p)))
        out[kind + "_mean"] = mean
        out[kind + "_var"] = sum(q[v] * (k(v) - mean) ** 2 for v in range(len(p)))
    out["k1_neg_prob"] = sum(q[v] for v in range(len(p)) if p[v] < p_ref[v])
    return out


def test_moments_equal_a_loop_over_the_vocabulary():
    logits, logits_ref = _pair()
    got = kl_estimator_moments(logits, logits_ref)
    for i in range(logits.shape[0]):
        want = _loop_moments(logits[i], logits_ref[i], np.exp(log_softmax(logits[i])))
        for key, value in want.items():
            assert got[key][i] == pytest.approx(value, rel=1e-10, abs=1e-13), key
    np.testing.assert_allclose(got["kl"], kl_exact_from_logits(logits, logits_ref), rtol=1e-12)


def test_schulman_identities_k1_k3_unbiased_k2_biased():
    logits, logits_ref = _pair(1, shape=(50, 9), scale=2.0)
    m = kl_estimator_moments(logits, logits_ref)
    np.testing.assert_allclose(m["k1_mean"], m["kl"], rtol=1e-10, atol=1e-13)     # unbiased
    np.testing.assert_allclose(m["k3_mean"], m["kl"], rtol=1e-10, atol=1e-13)     # unbiased
    assert np.abs(m["k2_mean"] - m["kl"]).max() > 1e-2                            # biased for far policies
    assert (m["k1_neg_prob"] > 0).all() and (m["k1_neg_prob"] < 1).all()
    # close policies: k2's bias is third order, k3's variance is much smaller than k1's
    close = kl_estimator_moments(logits_ref + 0.05 * logits, logits_ref)
    np.testing.assert_allclose(close["k2_mean"], close["kl"], rtol=0.2)
    assert (close["k3_var"] < 0.1 * close["k1_var"]).all()


def test_moments_match_monte_carlo_under_a_sampling_distribution():
    logits, logits_ref = _pair(2, shape=(1, 6))
    rng = np.random.default_rng(3)
    q = rng.dirichlet(np.ones(6), size=1)                                         # any sampling distribution
    m = kl_estimator_moments(logits, logits_ref, probs=q)
    tokens = rng.choice(6, size=400_000, p=q[0])
    x = (log_softmax(logits) - log_softmax(logits_ref))[0, tokens]                # k1 of each sample
    samples = {"k1": x, "k2": 0.5 * x ** 2, "k3": np.expm1(-x) + x}
    for kind, s in samples.items():
        se = s.std() / np.sqrt(s.size)
        assert abs(s.mean() - m[kind + "_mean"][0]) < 5 * se, kind
        assert s.var() == pytest.approx(m[kind + "_var"][0], rel=0.02), kind
    assert np.mean(x < 0) == pytest.approx(m["k1_neg_prob"][0], abs=0.005)


def test_temperature_is_applied_to_both():
    logits, logits_ref = _pair(4)
    a = kl_estimator_moments(logits, logits_ref, temperature=2.0)
    b = kl_estimator_moments(logits / 2.0, logits_ref / 2.0)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=1e-15)


def _topk_probs(logits, k):
    p = np.exp(log_softmax(logits))
    keep = np.zeros_like(p, dtype=bool)
    np.put_along_axis(keep, np.argsort(-p, axis=-1)[..., :k], True, axis=-1)
    q = p * keep
    return q / q.sum(axis=-1, keepdims=True)


def test_topk_decomposition_and_negative_k1_when_mass_moves_to_the_tail():
    logits_ref, _ = _pair(5, shape=(4, 12), scale=2.0)
    flat = logits_ref / 1.6                         # same order, flatter: mass moved from the top into the tail
    k = 3
    m = kl_estimator_moments(flat, logits_ref, probs=_topk_probs(flat, k))
    d = topk_mass_decomposition(flat, logits_ref, k)
    np.testing.assert_allclose(d["kl_within"] + d["log_mass_ratio"], m["k1_mean"], rtol=1e-10, atol=1e-13)
    assert (d["mass"] < d["mass_ref"]).all() and (d["kl_within"] >= 0).all()
    assert (m["kl"] > 0).all() and (m["k1_mean"] < 0).all()        # the policy moved, the estimate is negative
    assert (m["k3_mean"] >= 0).all()                                # k3 is never negative, even under top-k
    # top_k = V keeps everything: the plain moments, and log(M / M_ref) = 0
    full = topk_mass_decomposition(flat, logits_ref, 12)
    np.testing.assert_allclose(full["log_mass_ratio"], 0.0, atol=1e-12)
    np.testing.assert_allclose(full["kl_within"], kl_estimator_moments(flat, logits_ref)["kl"], rtol=1e-10)


def test_compare_estimators_by_hand():
    logp = np.array([[-1.0, -2.0, -0.5], [-0.2, -3.0, 0.0]])
    logp_ref = np.array([[-1.5, -1.0, -0.7], [-0.4, -1.0, -5.0]])
    kl_exact = np.array([[0.3, 0.1, 0.2], [0.4, 0.0, 0.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    out = compare_kl_estimators(logp, logp_ref, kl_exact, mask)
    x = np.array([0.5, -1.0, 0.2, 0.2])                               # k1 of the four valid tokens
    assert out["k1"]["token_mean"] == pytest.approx(x.mean())
    assert out["k1"]["token_bias"] == pytest.approx(x.mean() - 0.25)
    assert out["k1"]["token_neg_frac"] == 0.25
    assert out["k2"]["token_mean"] == pytest.approx(np.mean(0.5 * x ** 2))
    sums, exact = np.array([-0.3, 0.2]), np.array([0.6, 0.4])
    assert out["k1"]["response_mean"] == pytest.approx(sums.mean())
    assert out["k1"]["response_bias"] == pytest.approx(sums.mean() - exact.mean())
    assert out["k1"]["response_err_std"] == pytest.approx((sums - exact).std())
    assert out["k1"]["response_neg_frac"] == 0.5
    assert out["exact"]["response_mean"] == pytest.approx(0.5)
    assert out["k3"]["token_neg_frac"] == 0.0


def test_bad_inputs_name_the_argument():
    logits, logits_ref = _pair()
    with pytest.raises(ValueError, match="`logits_ref`"):
        kl_estimator_moments(logits, logits_ref[:2])
    with pytest.raises(ValueError, match="`probs`"):
        kl_estimator_moments(logits, logits_ref, probs=np.ones_like(logits))
    with pytest.raises(ValueError, match="`top_k`"):
        topk_mass_decomposition(logits, logits_ref, 0)
    with pytest.raises(ValueError, match="`mask`"):
        compare_kl_estimators(logits, logits_ref, logits, np.zeros(logits.shape, dtype=int))


def _fake_probe(seed=3, B=3, Tn=4, V=9, top_k=0):
    """A kl_probe-shaped dict built from random logits (right-padded rows of 4, 2 and 3 tokens)."""
    rng = np.random.default_rng(seed)
    logits, logits_ref = 1.5 * rng.standard_normal((2, B, Tn, V))
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    probs = None
    if top_k:
        keep = np.argsort(-logits, axis=-1)[..., :top_k]
        probs = np.zeros_like(logits)
        np.put_along_axis(probs, keep, np.take_along_axis(np.exp(log_softmax(logits)), keep, -1), -1)
        probs /= probs.sum(-1, keepdims=True)
    mom = kl_estimator_moments(logits, logits_ref, probs=probs)
    tok = rng.integers(0, V, (B, Tn))
    pick = lambda lg: np.take_along_axis(log_softmax(lg), tok[..., None], -1)[..., 0]   # noqa: E731
    m = mask != 0
    p = {k: np.where(m, v, 0.0) for k, v in mom.items() if k != "kl"}
    p.update(mask=mask, logp=np.where(m, pick(logits), 0.0), logp_ref=np.where(m, pick(logits_ref), 0.0),
             kl_exact=np.where(m, mom["kl"], 0.0), logits=logits, logits_ref=logits_ref)
    return p


def test_response_mean_and_probe_estimators_by_a_loop():
    p = _fake_probe()
    sums = [sum(p["kl_exact"][b, t] for t in range(4) if p["mask"][b, t]) for b in range(3)]
    assert response_mean(p["kl_exact"], p["mask"]) == pytest.approx(np.mean(sums), rel=1e-12)
    out = probe_estimators(p)
    valid = [(b, t) for b in range(3) for t in range(4) if p["mask"][b, t]]
    assert out["n_responses"] == 3 and len(out["tokens"]["logp"]) == len(valid) == 9
    for k in ("k1", "k2", "k3"):
        assert out["exact_var"][k] == pytest.approx(np.mean([p[f"{k}_var"][i] for i in valid]), rel=1e-12)
    assert out["k1_neg_prob"] == pytest.approx(np.mean([p["k1_neg_prob"][i] for i in valid]), rel=1e-12)
    assert out["compare"] == compare_kl_estimators(p["logp"], p["logp_ref"], p["kl_exact"], p["mask"])


def test_topk_probe_terms_add_up_to_the_expected_k1():
    p = _fake_probe(top_k=3)
    out = topk_probe(p, 3)
    # E_q[k1] = KL(q || q_ref) + log(M / M_ref), per token, so per response too (float64 sums: 1e-10)
    assert out["kl_within"] + out["log_mass_ratio"] == pytest.approx(out["k1_expected"], abs=1e-10)
    assert out["kl_exact"] == pytest.approx(response_mean(p["kl_exact"], p["mask"]), rel=1e-12)
    assert 0 < out["mass"] < 1 and 0 < out["mass_ref"] < 1
    assert topk_probe(p, 9)["log_mass_ratio"] == pytest.approx(0.0, abs=1e-12)      # k = V: nothing hidden
