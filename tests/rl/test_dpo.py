"""DPO, conservative DPO and IPO: formulas by a loop, gradients by central differences, stationary points,
extreme margins, the sequence log-prob reduction (padding gets no gradient) and bad input."""
import math

import numpy as np
import pytest

from minippo.nn.gradcheck import assert_gradients
from minippo.rl.dpo import dpo_loss, log_sigmoid, sequence_logprobs, sequence_logprobs_backward
from minippo.rl.losses import logprobs_backward, logprobs_from_logits
from tests.rl.helpers import right_padded_mask

VARIANTS = [dict(loss_type="sigmoid"), dict(loss_type="sigmoid", label_smoothing=0.1), dict(loss_type="ipo")]


def pairs(rng, N=7, scale=3.0):
    """Four (N,) float64 sequence log-probs around -20 with policy-reference differences of O(scale)."""
    rc, rr = rng.normal(-20, 4, N), rng.normal(-20, 4, N)
    return rc + scale * rng.standard_normal(N), rr + scale * rng.standard_normal(N), rc, rr


def loss_by_loop(lc, lr, rc, rr, beta, loss_type="sigmoid", label_smoothing=0.0):
    """The loss and dL/dlc one pair at a time with math (an independent computation)."""
    total, grads = 0.0, []
    for a, b, c, d in zip(lc, lr, rc, rr):
        h = (a - c) - (b - d)
        if loss_type == "ipo":
            total += (h - 1 / (2 * beta)) ** 2
            grads.append(2 * (h - 1 / (2 * beta)))
        else:
            e = label_smoothing
            sig = 1 / (1 + math.exp(-beta * h))                # |beta h| is O(10) here: no overflow
            total += -(1 - e) * math.log(sig) - e * math.log(1 - sig)
            grads.append(beta * (-(1 - e) * (1 - sig) + e * sig))
    N = len(lc)
    return total / N, np.array(grads) / N


@pytest.mark.parametrize("kw", VARIANTS)
def test_loss_and_gradient_equal_a_loop(kw):
    lc, lr, rc, rr = pairs(np.random.default_rng(0))
    loss, dlc, dlr, stats = dpo_loss(lc, lr, rc, rr, 0.3, **kw)
    ref_loss, ref_d = loss_by_loop(lc, lr, rc, rr, 0.3, **kw)
    assert loss == pytest.approx(ref_loss, rel=1e-13)      # float64 throughout: rounding only
    np.testing.assert_allclose(dlc, ref_d, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(dlr, -dlc)                # h = (lc - rc) - (lr - rr)
    np.testing.assert_allclose(stats["rewards_chosen"], 0.3 * (lc - rc), rtol=1e-15)
    np.testing.assert_allclose(stats["rewards_rejected"], 0.3 * (lr - rr), rtol=1e-15)
    np.testing.assert_allclose(stats["margins"], 0.3 * stats["h"], rtol=1e-12, atol=1e-13)
    assert stats["accuracy"] == np.mean(0.3 * (lc - rc) > 0.3 * (lr - rr))


@pytest.mark.parametrize("kw", VARIANTS)
def test_gradients_central_differences(kw):
    lc, lr, rc, rr = pairs(np.random.default_rng(1), N=9)
    _, dlc, dlr, _ = dpo_loss(lc, lr, rc, rr, 0.5, **kw)
    assert_gradients(lambda: dpo_loss(lc, lr, rc, rr, 0.5, **kw)[0], {"logp_chosen": lc, "logp_rejected": lr},
                     {"logp_chosen": dlc, "logp_rejected": dlr}, tol=1e-7)


def test_dpo_with_no_smoothing_is_conservative_dpo_at_zero_and_smoothing_mixes_both_labels():
    lc, lr, rc, rr = pairs(np.random.default_rng(2))
    plain = dpo_loss(lc, lr, rc, rr, 0.2)
    zero = dpo_loss(lc, lr, rc, rr, 0.2, label_smoothing=0.0)
    assert plain[0] == zero[0]
    # L_eps(y_w, y_l) = (1 - eps) L_0(y_w, y_l) + eps L_0(y_l, y_w): the label flipped with probability eps
    eps = 0.25
    flipped = dpo_loss(lr, lc, rr, rc, 0.2)
    mixed = dpo_loss(lc, lr, rc, rr, 0.2, label_smoothing=eps)
    assert mixed[0] == pytest.approx((1 - eps) * plain[0] + eps * flipped[0], rel=1e-13)
    np.testing.assert_allclose(mixed[1], (1 - eps) * plain[1] + eps * flipped[2], rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("beta", [0.05, 0.1, 1.0])
def test_stationary_points(beta):
    """IPO stops at h = 1/(2 beta) (loss 0, gradient 0); conservative DPO at h = log((1-eps)/eps)/beta;
    plain DPO has none: its gradient at h = 40/beta is still -beta sigma(-40) / N < 0."""
    rc, rr = np.array([-10.0, -30.0]), np.array([-12.0, -25.0])
    h = 1 / (2 * beta)
    loss, dlc, _, _ = dpo_loss(rc + h, rr, rc, rr, beta, loss_type="ipo")
    assert loss == pytest.approx(0.0, abs=1e-20) and np.abs(dlc).max() < 1e-13
    eps = 0.1
    h = math.log((1 - eps) / eps) / beta
    _, dlc, _, _ = dpo_loss(rc + h, rr, rc, rr, beta, label_smoothing=eps)
    assert np.abs(dlc).max() < 1e-15      # two terms of ~0.05 beta cancelling: float64 rounding only
    _, dlc, _, _ = dpo_loss(rc + 40 / beta, rr, rc, rr, beta)
    assert (dlc < 0).all()
    np.testing.assert_allclose(dlc, -beta * math.exp(-40) / 2, rtol=1e-9)


def test_extreme_margins_stay_finite():
    """log sigmoid(z) for |z| = 1e5: -logaddexp(0, -z) neither overflows nor takes log(0)."""
    lc = np.array([1e5, -1e5]); z = np.zeros(2)
    loss, dlc, dlr, stats = dpo_loss(lc, z, z, z, 1.0)
    assert np.isfinite(loss) and loss == pytest.approx(1e5 / 2, rel=1e-12)    # pair 0: 0, pair 1: 1e5
    np.testing.assert_allclose(dlc, [0.0, -0.5], atol=1e-300)
    assert stats["accuracy"] == 0.5
    np.testing.assert_allclose(log_sigmoid(np.array([-800.0, 0.0, 800.0])), [-800.0, -math.log(2), 0.0], rtol=1e-15)


def test_accuracy_counts_strict_wins_only():
    """accuracy is the share of pairs with rewards_chosen > rewards_rejected STRICTLY (TRL's). At the start of
    training the policy is the reference: every implicit reward is 0, every pair a tie, and accuracy is 0, not 1.
    Then one pair won, one tied, one lost: 1/3. Catches `>=` for `>`."""
    rc, rr = np.array([-10.0, -12.0, -9.0]), np.array([-11.0, -8.0, -9.5])
    assert dpo_loss(rc, rr, rc, rr, 0.1)[3]["accuracy"] == 0.0
    lc = rc + np.array([0.5, 0.0, -0.5])                    # margins 0.05, 0, -0.05 (the 0 exact: lc = rc)
    assert dpo_loss(lc, rr, rc, rr, 0.1)[3]["accuracy"] == 1 / 3     # the mean of three booleans: 1.0 / 3 exactly


def test_float32_inputs_give_float32_gradients():
    lc, lr, rc, rr = (a.astype(np.float32) for a in pairs(np.random.default_rng(3)))
    loss, dlc, dlr, _ = dpo_loss(lc, lr, rc, rr, 0.1)
    assert dlc.dtype == dlr.dtype == np.float32 and isinstance(loss, float)
    ref = dpo_loss(*(a.astype(np.float64) for a in (lc, lr, rc, rr)), 0.1)
    np.testing.assert_allclose(dlc, ref[1], rtol=2 * np.finfo(np.float32).eps)   # one rounding to float32


# ---- sequence log-probs: the masked sum and its backward -------------------------------------

def test_sequence_logprobs_sum_mean_and_backward():
    rng = np.random.default_rng(4)
    logp = rng.normal(-2, 1, (3, 5))
    mask = np.array([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 1, 0, 0]])      # responses after prompts
    seq, cache = sequence_logprobs(logp, mask)
    np.testing.assert_allclose(seq, [logp[0, 1:4].sum(), logp[1].sum(), logp[2, 2]], rtol=1e-15)
    d = sequence_logprobs_backward(np.array([1.0, -2.0, 3.0]), cache)
    np.testing.assert_array_equal(d, mask * np.array([[1.0], [-2.0], [3.0]]))
    mean, cache = sequence_logprobs(logp, mask, average=True)
    np.testing.assert_allclose(mean, seq / mask.sum(axis=1), rtol=1e-15)
    d = sequence_logprobs_backward(np.ones(3), cache)
    np.testing.assert_allclose(d, mask / mask.sum(axis=1, keepdims=True), rtol=1e-15)


@pytest.mark.parametrize("kw", VARIANTS + [dict(loss_type="ipo", average=True)])
def test_whole_chain_from_logits_and_padding_gets_no_gradient(kw):
    """logits -> token log-probs -> masked sums -> dpo_loss, backward by hand to the logits, checked by
    central differences; every padded or prompt position gets exactly zero gradient."""
    kw = dict(kw)
    average = kw.pop("average", False)
    rng = np.random.default_rng(5)
    N, T, V = 3, 6, 5
    logits = rng.normal(0, 1.5, (2 * N, T, V))              # rows 0..N-1 chosen, N..2N-1 rejected
    tokens = rng.integers(0, V, (2 * N, T))
    mask = right_padded_mask(rng.integers(1, T + 1, 2 * N), T)
    mask[0, 0] = 0                                          # a "prompt" token at the start of row 0
    ref = rng.normal(-8, 2, 2 * N)

    def forward():
        logp, c1 = logprobs_from_logits(logits, tokens, 0.7)
        seq, c2 = sequence_logprobs(logp, mask, average=average)
        out = dpo_loss(seq[:N], seq[N:], ref[:N], ref[N:], 0.4, **kw)
        return out, c1, c2

    (loss, dlc, dlr, _), c1, c2 = forward()
    dlogits = logprobs_backward(sequence_logprobs_backward(np.concatenate([dlc, dlr]), c2), c1)
    assert (dlogits[mask == 0] == 0).all() and (np.abs(dlogits[mask == 1]).sum(axis=-1) > 0).all()
    assert_gradients(lambda: forward()[0][0], {"logits": logits}, {"logits": dlogits}, tol=1e-7)


# ---- bad input -------------------------------------------------------------------------------

GOOD = [np.zeros(3)] * 4


@pytest.mark.parametrize("args, kw, name", [
    ([np.zeros(3), np.zeros(2), np.zeros(3), np.zeros(3)], {}, "logp_rejected"),
    ([np.zeros((3, 1))] + GOOD[1:], {}, "logp_chosen"),
    ([np.array([0.0, np.nan, 0.0])] + GOOD[1:], {}, "logp_chosen"),
    (GOOD[:3] + [np.array([0.0, np.inf, 0.0])], {}, "ref_logp_rejected"),
    ([np.zeros(3, dtype=np.int64)] + GOOD[1:], {}, "logp_chosen"),
    ([np.zeros(0)] * 4, {}, "logp_chosen"),
    (GOOD, dict(beta=0.0), "beta"),
    (GOOD, dict(beta=-1.0), "beta"),
    (GOOD, dict(beta=float("inf")), "beta"),
    (GOOD, dict(beta=float("nan")), "beta"),
    (GOOD, dict(loss_type="hinge"), "loss_type"),
    (GOOD, dict(label_smoothing=0.5), "label_smoothing"),
    (GOOD, dict(label_smoothing=-0.1), "label_smoothing"),
    (GOOD, dict(loss_type="ipo", label_smoothing=0.1), "label_smoothing"),
])
def test_bad_input_names_the_argument(args, kw, name):
    kw = {"beta": 0.1, **kw}
    with pytest.raises(ValueError, match=f"`{name}`"):
        dpo_loss(*args, **kw)


def test_bad_sequence_input_names_the_argument():
    with pytest.raises(ValueError, match="`mask`"):
        sequence_logprobs(np.zeros((2, 3)), np.array([[1, 2, 0], [1, 1, 1]]))
    with pytest.raises(ValueError, match="`mask`"):
        sequence_logprobs(np.zeros((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="`mask` row 1 has no valid token"):
        sequence_logprobs(np.zeros((2, 3)), np.array([[1, 1, 0], [0, 0, 0]]), average=True)
    with pytest.raises(ValueError, match="`logp`"):
        sequence_logprobs(np.zeros(3), np.ones(3))
    _, cache = sequence_logprobs(np.zeros((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="`dseq`"):
        sequence_logprobs_backward(np.zeros(3), cache)
