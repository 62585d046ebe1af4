"""Sequence ratio = product of token ratios; band fractions and clip fractions against hand counts."""
import numpy as np
import pytest

from minippo.studies.sequence_ratio import iid_sequence_ratios, ratio_band_stats, sequence_log_ratio, update_ratio_summary


def test_sequence_ratio_is_the_product_of_token_ratios():
    rng = np.random.default_rng(0)
    logp_old = -rng.uniform(0.1, 3.0, size=(4, 6))
    logp = logp_old + rng.normal(0, 0.2, size=(4, 6))
    mask = np.array([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1] * 5 + [0]])
    R = np.exp(sequence_log_ratio(logp, logp_old, mask))
    for b in range(4):
        n = mask[b].sum()
        want = np.prod(np.exp(logp[b, :n]) / np.exp(logp_old[b, :n]))          # probabilities, divided
        assert R[b] == pytest.approx(want, rel=1e-12)
    # the worst case of Q37: fifty tokens at ratio 1.2 each
    fifty = np.full((1, 50), np.log(1.2))
    assert np.exp(sequence_log_ratio(fifty, np.zeros((1, 50)), np.ones((1, 50)))[0]) == pytest.approx(1.2 ** 50)
    assert 1.2 ** 50 == pytest.approx(9100.4, abs=0.1)


def test_band_stats_count_tokens_and_sequences():
    # row 0: every token at r = 1.1 (inside), four tokens -> R = 1.4641 (outside)
    # row 1: one token at r = 1.5 (outside) then 1 / 1.5 -> R = 1 (inside)
    logp_old = np.zeros((2, 4))
    logp = np.log(np.array([[1.1, 1.1, 1.1, 1.1], [1.5, 1 / 1.5, 1.0, 1.0]]))
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]])
    adv = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 0.0, 0.0]])
    s = ratio_band_stats(logp, logp_old, mask, 0.2, adv=adv, seq_adv=np.array([1.0, -1.0]))
    assert s["token_outside"] == pytest.approx(2 / 6)            # 1.5 and 1/1.5 are outside [0.8, 1.2]
    assert s["sequence_outside"] == pytest.approx(1 / 2)
    assert s["token_clipfrac"] == pytest.approx(2 / 6)           # A > 0 at r = 1.5, A < 0 at r = 0.667: both clipped
    assert s["sequence_clipfrac"] == pytest.approx(1 / 2)        # row 0: A > 0 and R > 1.2
    assert s["sequence_ratio_max"] == pytest.approx(1.1 ** 4)
    assert s["token_ratio_max"] == pytest.approx(1.5)
    assert s["mean_length"] == 3.0
    # a negative sequence advantage at R > 1 + eps is NOT clipped (case 6: the gradient still pulls R down)
    s2 = ratio_band_stats(logp, logp_old, mask, 0.2, seq_adv=np.array([-1.0, -1.0]))
    assert s2["sequence_clipfrac"] == 0.0


def test_iid_ratios_random_walk_vs_worst_case():
    R = iid_sequence_ratios(np.random.default_rng(0), 50, 20_000)
    assert R.max() < 1.2 ** 50 / 100                             # the worst case never comes close
    log_r = np.log(np.random.default_rng(1).uniform(0.8, 1.2, 200_000))
    # log R is a random walk: mean 50 mu, std sqrt(50) s
    assert np.log(R).mean() == pytest.approx(50 * log_r.mean(), abs=0.02)
    assert np.log(R).std() == pytest.approx(np.sqrt(50) * log_r.std(), rel=0.03)
    assert np.mean(np.abs(R - 1) > 0.2) > 0.7                    # yet most whole responses leave the band


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="`logp_old`"):
        sequence_log_ratio(np.zeros((2, 3)), np.zeros((2, 2)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="`mask`"):
        sequence_log_ratio(np.zeros((1, 3)), np.zeros((1, 3)), np.array([[0, 1, 1]]))
    with pytest.raises(ValueError, match="`clip_eps`"):
        ratio_band_stats(np.zeros((1, 3)), np.zeros((1, 3)), np.ones((1, 3)), 0.0)
    with pytest.raises(ValueError, match="`seq_adv`"):
        ratio_band_stats(np.zeros((1, 3)), np.zeros((1, 3)), np.ones((1, 3)), seq_adv=np.zeros(2))
    with pytest.raises(ValueError, match="`rng`"):
        iid_sequence_ratios(0, 5, 5)
    with pytest.raises(ValueError, match="`high`"):
        iid_sequence_ratios(np.random.default_rng(0), 5, 5, low=1.2, high=0.8)


def test_update_ratio_summary_by_hand():
    keys = ("token_outside", "sequence_outside", "token_clipfrac", "sequence_clipfrac")
    recs = [{**{f"probe/{k}": 0.1 * (i + 1) for k in keys}, "probe/token_log_ratio_std": 0.1,
             "probe/sequence_log_ratio_std": 0.2 * (i + 1), "policy/clipfrac_avg": 0.05} for i in range(2)]
    log_R, log_r = np.log(np.array([0.5, 1.0, 3.0])), np.zeros(7)
    out = update_ratio_summary(recs, log_R, log_r, n_mean=4.0)
    assert out["token_outside"] == pytest.approx(0.15) and out["train_clipfrac"] == pytest.approx(0.05)
    assert out["R_max"] == pytest.approx(3.0) and out["R_min"] == pytest.approx(0.5)
    np.testing.assert_allclose(out["width"], [0.2 / (2 * 0.1), 0.4 / (2 * 0.1)])     # std(log R) / (sqrt(n) std(log r))
    assert (out["n_tokens"], out["n_responses"]) == (7, 3)
