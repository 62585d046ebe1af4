"""KL estimators k1/k2/k3 against the exact KL (exact expectations and Monte Carlo), the exact
KL from logits, the three beta controllers' update rules, the KL-adapted learning rate, and the KL as a loss
term (what each estimator's gradient estimates)."""
import math

import numpy as np
import pytest

from minippo.nn.gradcheck import assert_gradients, numerical_gradient
from minippo.rl.kl import kl_estimate, kl_ref_loss
from minippo.rl.kl_control import AdaptiveKLController, FixedKLController, PPOPaperKLController, kl_adaptive_lr
from minippo.rl.losses import kl_exact_from_logits, log_softmax
from tests.rl.helpers import right_padded_mask


def test_estimator_formulas():
    logp = np.array([-1.0, -2.0, -0.5])
    logp_ref = np.array([-1.5, -1.0, -0.5])
    d = logp - logp_ref
    np.testing.assert_allclose(kl_estimate(logp, logp_ref, "k1"), d, atol=1e-15)
    np.testing.assert_allclose(kl_estimate(logp, logp_ref, "k2"), 0.5 * d ** 2, atol=1e-15)
    rho = np.exp(-d)
    np.testing.assert_allclose(kl_estimate(logp, logp_ref, "k3"), (rho - 1) - np.log(rho), atol=1e-15)
    assert kl_estimate(logp, logp_ref).tolist() == kl_estimate(logp, logp_ref, "k3").tolist()  # default
    with pytest.raises(ValueError, match="`kind`"):
        kl_estimate(logp, logp_ref, "k4")
    with pytest.raises(ValueError, match="`logp_ref` has shape"):
        kl_estimate(logp, logp_ref[:2])


def test_k3_keeps_its_precision_for_close_policies():
    """k3 = expm1(y) - y with y = log rho = logp_ref - logp of order 1e-5: the estimate is ~y^2/2 = 5e-11, and its
    series y^2/2 + y^3/6 + y^4/24 (next term y^5/120: 1e-16 of it) is an independent value. expm1 is within an
    ulp of y (2.2e-16 |y|) and the subtraction of y is exact, so the relative error is at most 4.4e-16 / |y| =
    4.4e-11 here; rtol 1e-9 leaves a margin of 20. Catches (exp(y) - 1) - y, whose exp(y) rounds near 1 (an error
    of 1.1e-16, 2.2e-6 of the result)."""
    logp = np.full(4, -1.0)
    logp_ref = logp + np.array([1e-5, -1e-5, 2e-5, -2e-5])
    y = logp_ref - logp                                   # the log-ratio as kl_estimate computes it
    series = y ** 2 / 2 + y ** 3 / 6 + y ** 4 / 24
    np.testing.assert_allclose(kl_estimate(logp, logp_ref, "k3"), series, rtol=1e-9, atol=0)


def two_policies(seed=0, V=6, scale=1.5):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal(V), scale * rng.standard_normal(V)


def test_exact_kl_from_logits():
    logits, logits_ref = two_policies()
    p, q = np.exp(log_softmax(logits)), np.exp(log_softmax(logits_ref))
    assert kl_exact_from_logits(logits, logits_ref) == pytest.approx(np.sum(p * np.log(p / q)), rel=1e-12)
    assert kl_exact_from_logits(logits, logits) == pytest.approx(0.0, abs=1e-15)
    batch = np.stack([logits, logits_ref])
    kl = kl_exact_from_logits(batch, batch[::-1], temperature=2.0)
    assert kl.shape == (2,) and (kl > 0).all()
    p2, q2 = np.exp(log_softmax(logits, 2.0)), np.exp(log_softmax(logits_ref, 2.0))
    assert kl[0] == pytest.approx(np.sum(p2 * np.log(p2 / q2)), rel=1e-12)


def test_k1_and_k3_unbiased_k2_biased_exact_expectation():
    """E_{a~pi}[k] summed over the vocabulary: k1 and k3 give the KL exactly, k2 does not."""
    logits, logits_ref = two_policies()
    logq, logq_ref = log_softmax(logits), log_softmax(logits_ref)
    p = np.exp(logq)
    kl = kl_exact_from_logits(logits, logits_ref)
    expect = {k: float(np.sum(p * kl_estimate(logq, logq_ref, k))) for k in ("k1", "k2", "k3")}
    assert expect["k1"] == pytest.approx(kl, rel=1e-12)
    assert expect["k3"] == pytest.approx(kl, rel=1e-12)
    assert abs(expect["k2"] - kl) > 0.05 * kl


def test_monte_carlo_unbiasedness():
    """Sample tokens from pi (fixed seed) and average: k1 and k3 land within 4 standard errors
    of the exact KL; k3 has the smaller spread and is never negative, k1 sometimes is."""
    logits, logits_ref = two_policies(seed=1)
    logq, logq_ref = log_softmax(logits), log_softmax(logits_ref)
    rng = np.random.default_rng(123)
    n = 200_000
    tokens = rng.choice(len(logits), size=n, p=np.exp(logq))
    kl = kl_exact_from_logits(logits, logits_ref)
    samples = {k: kl_estimate(logq[tokens], logq_ref[tokens], k) for k in ("k1", "k3")}
    for k, s in samples.items():
        se = s.std() / math.sqrt(n)
        assert abs(s.mean() - kl) < 4 * se, (k, s.mean(), kl, se)
    assert (samples["k3"] >= 0).all() and (samples["k1"] < 0).any()


def test_k3_has_lower_variance_for_close_policies():
    """The regime of PPO and RLHF (pi close to pi_ref): k3's spread is far below k1's."""
    logits, noise = two_policies(seed=2)
    logits_ref = logits + 0.1 * noise
    logq, logq_ref = log_softmax(logits), log_softmax(logits_ref)
    tokens = np.random.default_rng(7).choice(len(logits), size=20_000, p=np.exp(logq))
    k1 = kl_estimate(logq[tokens], logq_ref[tokens], "k1")
    k3 = kl_estimate(logq[tokens], logq_ref[tokens], "k3")
    assert k3.std() < 0.2 * k1.std()


def test_fixed_controller():
    c = FixedKLController(0.05)
    assert c.update(10.0, n_steps=64) == 0.05 and c.value == 0.05
    with pytest.raises(ValueError, match="`kl_coef`"):
        FixedKLController(-0.1)


def test_adaptive_controller_follows_ziegler_rule():
    c = AdaptiveKLController(0.1, target=6.0, horizon=10_000)
    # KL = 6.6: error 0.1 (inside the clip); 256 samples
    assert c.update(6.6, n_steps=256) == pytest.approx(0.1 * (1 + 0.1 * 256 / 10_000), rel=1e-12)
    v = c.value
    # KL = 60: error 9 clipped to +0.2
    assert c.update(60.0, n_steps=100) == pytest.approx(v * (1 + 0.2 * 100 / 10_000), rel=1e-12)
    v = c.value
    # KL = 0: error -1 clipped to -0.2
    assert c.update(0.0, n_steps=100) == pytest.approx(v * (1 - 0.2 * 100 / 10_000), rel=1e-12)
    # on target: unchanged
    v = c.value
    assert c.update(6.0, n_steps=100) == v
    for kwargs, name in ((dict(target=0.0, horizon=1.0), "target"), (dict(target=1.0, horizon=-1.0), "horizon")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            AdaptiveKLController(0.1, **kwargs)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`current_kl`"):
            c.update(bad)
    with pytest.raises(ValueError, match="`n_steps`"):
        c.update(1.0, n_steps=1.5)


def test_ppo_paper_controller_follows_section_4():
    c = PPOPaperKLController(1.0, d_targ=0.01)
    assert c.update(0.005) == 0.5                   # d < d_targ / 1.5 -> beta / 2
    assert c.update(0.02) == 1.0                    # d > 1.5 d_targ  -> beta * 2
    assert c.update(0.01) == 1.0                    # in between: unchanged
    assert c.update(0.01 / 1.5) == 1.0              # the thresholds themselves: unchanged
    assert c.update(0.015) == 1.0
    assert c.update(0.1, n_steps=7) == 2.0          # n_steps does not matter
    with pytest.raises(ValueError, match="`d_targ`"):
        PPOPaperKLController(1.0, d_targ=0.0)


def test_kl_adaptive_lr_follows_rsl_rl_by_hand():
    """rsl_rl's adaptive schedule with desired KL 0.01: / 1.5 above 0.02, x 1.5 below 0.005 (and above 0),
    unchanged in between and at the thresholds, clamped to [1e-5, 1e-2]."""
    assert kl_adaptive_lr(1e-3, 0.05, 0.01) == pytest.approx(1e-3 / 1.5, rel=1e-15)     # KL 5x the target
    assert kl_adaptive_lr(1e-3, 0.001, 0.01) == pytest.approx(1.5e-3, rel=1e-15)       # KL a tenth of it
    for kl in (0.01, 0.02, 0.005, 0.0, -1e-9):     # in the band, on its edges, no move (or rounding below 0)
        assert kl_adaptive_lr(1e-3, kl, 0.01) == 1e-3
    assert kl_adaptive_lr(1.2e-5, 0.05, 0.01) == 1e-5          # 8e-6 would be below the floor
    assert kl_adaptive_lr(8e-3, 0.001, 0.01) == 1e-2           # 1.2e-2 would be above the ceiling
    assert kl_adaptive_lr(1e-2, 0.001, 0.01) == 1e-2 and kl_adaptive_lr(1e-5, 1.0, 0.01) == 1e-5
    # three minibatches in a row, by hand: 1e-3 -> 6.667e-4 -> 4.444e-4 -> 6.667e-4
    lr = 1e-3
    for kl in (0.03, 0.021, 0.004):
        lr = kl_adaptive_lr(lr, kl, 0.01)
    assert lr == pytest.approx(1e-3 / 1.5 / 1.5 * 1.5, rel=1e-15)
    for kwargs, name in ((dict(lr=0.1), "lr"), (dict(lr=1e-6), "lr"), (dict(kl=float("nan")), "kl"),
                         (dict(target=0.0), "target"), (dict(lr_min=0.0), "lr_min")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            kl_adaptive_lr(**{**dict(lr=1e-3, kl=0.01, target=0.01), **kwargs})


# ------------------------------------------------------------------ the KL as a loss term

@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_kl_loss_gradient_finite_differences(kind, loss_agg):
    rng = np.random.default_rng(9)
    logp, logp_ref = rng.uniform(-3, -0.2, (2, 3, 5))
    mask = right_padded_mask([5, 2, 4], 5)
    kw = dict(kind=kind, loss_agg=loss_agg, norm_len=1)
    loss, dlogp, stats = kl_ref_loss(logp, logp_ref, mask, 0.3, **kw)
    k = kl_estimate(logp, logp_ref, kind) * mask
    per_row = {"token-mean": k.sum() / mask.sum(), "seq-mean-token-mean": np.mean(k.sum(1) / mask.sum(1)),
               "seq-mean-token-sum-norm": np.mean(k.sum(1))}[loss_agg]
    assert loss == pytest.approx(0.3 * per_row, rel=1e-12) and stats["kl"] == pytest.approx(per_row, rel=1e-12)
    assert_gradients(lambda: kl_ref_loss(logp, logp_ref, mask, 0.3, **kw)[0], {"logp": logp}, {"logp": dlogp},
                     tol=1e-7)
    assert (dlogp[mask == 0] == 0).all()


def test_kl_max_is_the_largest_valid_estimate():
    """k1 can be negative: with every valid k1 below 0 (-1, -2, -0.5), kl_max is the largest of them, -0.5, not
    the 0 a padded entry holds (nor the positive k1 its log-probs would give). Catches a maximum over the whole
    array."""
    logp = np.array([[-2.0, -3.0, 4.0], [-1.5, 7.0, 7.0]])
    logp_ref = np.array([[-1.0, -1.0, 0.0], [-1.0, 0.0, 0.0]])
    loss, _, stats = kl_ref_loss(logp, logp_ref, right_padded_mask([2, 1], 3), kl_coef=1.0, kind="k1")
    assert stats["kl_max"] == -0.5                          # differences of dyadic numbers: exact in float64
    assert loss == pytest.approx(-3.5 / 3, rel=1e-15)       # the mean of three exact numbers: one rounding


def test_what_each_kl_loss_gradient_estimates_on_policy():
    """One state, the exact expectation over a ~ pi of dk/dlogp(a) * d log pi(a)/d logits:
    k1 -> 0, k2 -> grad KL(pi || pi_ref), k3 -> grad KL(pi_ref || pi) (minippo.rl.kl's table)."""
    z, z_ref = two_policies(seed=3, V=5, scale=1.0)
    V = z.size

    def pi(logits):
        return np.exp(log_softmax(logits))

    def kl(p, q):
        return float(np.sum(p * (np.log(p) - np.log(q))))

    logp_all, logp_ref_all = log_softmax(z), log_softmax(z_ref)
    p = pi(z)
    want = {"k1": np.zeros(V),
            "k2": numerical_gradient(lambda: kl(pi(z), pi(z_ref)), z, h=1e-6),
            "k3": numerical_gradient(lambda: kl(pi(z_ref), pi(z)), z, h=1e-6)}
    for kind in ("k1", "k2", "k3"):
        dk = kl_ref_loss(logp_all, logp_ref_all, None, 1.0, kind)[1] * V       # dk/dlogp of every token a
        expected = sum(p[a] * dk[a] * (np.eye(V)[a] - p) for a in range(V))    # E_a~pi[dk(a) grad_z log pi(a)]
        np.testing.assert_allclose(expected, want[kind], atol=1e-9)
    # k2 and k3 point differently here: the two KL directions are different functions
    assert np.linalg.norm(want["k2"] - want["k3"]) > 0.1 * np.linalg.norm(want["k2"])


def test_kl_estimate_overflow_names_the_inputs_and_padding_is_ignored():
    logp, logp_ref = np.array([-800.0, -1.0]), np.array([-1.0, -1.0])          # logp_ref - logp = 799
    with pytest.raises(ValueError, match=r"`logp` = -800.0 and `logp_ref` = -1.0 at 0 give k3 = inf"):
        kl_estimate(logp, logp_ref, "k3")
    assert np.isfinite(kl_estimate(logp, logp_ref, "k1")).all()
    np.testing.assert_array_equal(kl_estimate(logp, logp_ref, "k3", mask=np.array([0, 1])), [0.0, 0.0])
    with pytest.raises(ValueError, match="give k3"):
        kl_estimate(np.array([-100.0], np.float32), np.array([-1.0], np.float32), "k3")  # float32 at ~88.7
    with pytest.raises(ValueError, match="give k2"):
        kl_estimate(np.array([-1e200]), np.array([1e200]), "k2")
