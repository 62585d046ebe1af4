"""Sequence score (reward_model.sequence_scores) -> per-token rewards (ppo.per_token_rewards; the knobs'
ppo_knobs.shaped_rewards): placement on the last valid token, masks, penalties, shaping."""
import numpy as np
import pytest

from minippo.rl.masked import masked_whiten
from minippo.rlhf.ppo import per_token_rewards
from minippo.rlhf.ppo_knobs import shaped_rewards
from minippo.rlhf.reward_model import has_eos, sequence_scores

EOS, PAD = 2, 0


def reference_rewards(scores, logp, logp_ref, mask, kl_coef, shaping="kl_final"):
    """A plain double loop over rows and tokens (k1 KL), the oracle of per_token_rewards."""
    B, T = logp.shape
    out = np.zeros((B, T))
    for b in range(B):
        n = int(mask[b].sum())
        for t in range(n):
            out[b, t] = -kl_coef * (logp[b, t] - logp_ref[b, t])
            if shaping == "uniform":
                out[b, t] += scores[b] / n
        if shaping == "kl_final":
            out[b, n - 1] += scores[b]
    return out


def test_score_lands_on_eos_of_t0_t1_eos_pad_pad():
    response = np.array([[11, 12, EOS, PAD, PAD]])
    mask = np.array([[1, 1, 1, 0, 0]])
    logp = np.array([[-1.0, -2.0, -0.5, -7.0, -9.0]])            # garbage on padding must not matter
    logp_ref = np.array([[-1.5, -1.0, -0.5, -3.0, -1.0]])
    rewards, kl, non_score = per_token_rewards(np.array([0.8]), logp, logp_ref, mask, kl_coef=0.1)
    np.testing.assert_allclose(kl[0], [0.5, -1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(non_score[0], [-0.05, 0.1, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(rewards[0], [-0.05, 0.1, 0.8, 0.0, 0.0])     # the score sits on the EOS (index 2)
    assert has_eos(response, mask, EOS).tolist() == [True]
    # padding holds exactly zero everywhere, whatever logp said there
    assert (rewards[0, 3:] == 0).all() and (kl[0, 3:] == 0).all() and (non_score[0, 3:] == 0).all()


def test_rewards_match_a_loop_on_random_ragged_batches():
    rng = np.random.default_rng(0)
    for shaping in ("kl_final", "uniform"):
        lengths = rng.integers(1, 9, size=6)
        mask = (np.arange(8)[None, :] < lengths[:, None]).astype(np.int64)
        logp, logp_ref = rng.normal(-2, 1, (6, 8)), rng.normal(-2, 1, (6, 8))
        scores = rng.normal(0, 1, 6)
        got, _, _ = shaped_rewards(scores, logp, logp_ref, mask, kl_coef=0.07, shaping=shaping)
        np.testing.assert_allclose(got, reference_rewards(scores, logp, logp_ref, mask, 0.07, shaping), atol=1e-12)
        # both shapings hand out the same total per response: score - beta * sum(kl)
        np.testing.assert_allclose(got.sum(axis=1), scores - 0.07 * ((logp - logp_ref) * mask).sum(axis=1))
        if shaping == "kl_final":                    # the knobs' k1 / kl_final is canonical PPO's, bitwise
            np.testing.assert_array_equal(got, per_token_rewards(scores, logp, logp_ref, mask, 0.07)[0])


def test_uniform_spreads_the_score_evenly():
    mask = np.array([[1, 1, 1, 1, 0]])
    zeros = np.zeros((1, 5))
    rewards, _, _ = shaped_rewards(np.array([2.0]), zeros, zeros, mask, kl_coef=0.1, shaping="uniform")
    np.testing.assert_allclose(rewards[0], [0.5, 0.5, 0.5, 0.5, 0.0])


def test_k3_kl_in_the_reward_is_never_negative():
    rng = np.random.default_rng(1)
    logp, logp_ref = rng.normal(-2, 1, (4, 6)), rng.normal(-2, 1, (4, 6))
    _, kl, _ = shaped_rewards(np.zeros(4), logp, logp_ref, np.ones((4, 6)), 0.1, kl_kind="k3")
    assert (kl >= 0).all()


def test_eos_is_looked_for_in_the_response_only():
    response = np.array([[5, 6, 7, PAD], [5, EOS, PAD, PAD], [5, 6, PAD, EOS]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0]])     # row 2: an EOS id under padding
    assert has_eos(response, mask, EOS).tolist() == [False, True, False]


def test_missing_eos_penalty_and_length_terms():
    rm = np.array([1.0, 1.0, -0.5])
    ended = np.array([True, False, False])
    lengths = np.array([4, 8, 8])
    np.testing.assert_allclose(sequence_scores(rm, ended, lengths, missing_eos_penalty=1.5), [1.0, -0.5, -2.0])
    np.testing.assert_allclose(sequence_scores(rm, ended, lengths, length_penalty=0.1), [0.6, 0.2, -1.3])
    np.testing.assert_allclose(sequence_scores(rm, ended, lengths, length_bonus=0.1), [1.4, 1.8, 0.3])
    np.testing.assert_allclose(sequence_scores(rm, ended, lengths, missing_eos_penalty=1.5, score_clip=1.0),
                               [1.0, -0.5, -1.0])


def test_length_normalisation_divides_the_shaped_score_by_n_to_the_alpha():
    rm = np.array([1.0, 1.0, -0.5])
    ended = np.array([True, False, False])
    lengths = np.array([4, 16, 16])
    # alpha = 0.5: 1 / sqrt(4), 1 / sqrt(16), -0.5 / sqrt(16); then the missing-EOS penalty, not divided
    np.testing.assert_allclose(sequence_scores(rm, ended, lengths, length_norm_alpha=0.5, missing_eos_penalty=1.0),
                               [0.5, 0.25 - 1.0, -0.125 - 1.0])
    # with a linear bonus b n the normalised score still grows like b sqrt(n): (1 + 0.1 * 4) / 2, (1 + 1.6) / 4
    np.testing.assert_allclose(sequence_scores(rm, ended, lengths, length_bonus=0.1, length_norm_alpha=0.5),
                               [0.7, 0.65, 1.1 / 4])
    np.testing.assert_array_equal(sequence_scores(rm, ended, lengths, length_norm_alpha=0.0), rm)
    assert sequence_scores(np.array([2.0]), np.array([False]), np.array([0]), length_norm_alpha=1.0)[0] == 2.0
    with pytest.raises(ValueError, match="`length_norm_alpha`"):
        sequence_scores(rm, ended, lengths, length_norm_alpha=-0.5)


def test_reward_whitening_keeps_the_mean_and_ignores_padding():
    rng = np.random.default_rng(2)
    mask = (np.arange(6)[None, :] < np.array([[6], [3], [1]])).astype(np.int64)
    r = rng.normal(0.3, 2.0, (3, 6)) * mask
    w = masked_whiten(r, mask, shift_mean=False)             # the knobs' whiten_rewards
    valid = mask == 1
    assert abs(w[valid].std() - 1) < 1e-6
    np.testing.assert_allclose(w[valid].mean(), r[valid].mean(), rtol=1e-10)
    assert (w[~valid] == 0).all()


@pytest.mark.parametrize("kw, name", [
    (dict(mask=np.array([[1, 0, 1]])), "mask"),                       # a hole: not right-padded
    (dict(kl_coef=-0.1), "kl_coef"),
    (dict(shaping="spread"), "shaping"),
    (dict(scores=np.zeros(3)), "scores"),
    (dict(logp_ref=np.zeros((1, 4))), "logp_ref"),
])
def test_bad_inputs_name_the_argument(kw, name):
    args = dict(scores=np.zeros(1), logp=np.zeros((1, 3)), logp_ref=np.zeros((1, 3)), mask=np.ones((1, 3)),
                kl_coef=0.1)
    args.update(kw)
    shaping = args.pop("shaping", "kl_final")
    with pytest.raises(ValueError, match=f"`{name}`"):
        shaped_rewards(args["scores"], args["logp"], args["logp_ref"], args["mask"], args["kl_coef"],
                       shaping=shaping)
    if shaping == "kl_final":                                         # canonical PPO's own checks, the same
        with pytest.raises(ValueError, match=f"`{name}`"):
            per_token_rewards(args["scores"], args["logp"], args["logp_ref"], args["mask"], args["kl_coef"])


def test_empty_response_row_cannot_be_rewarded():
    with pytest.raises(ValueError, match="no real token|no valid token"):
        per_token_rewards(np.zeros(2), np.zeros((2, 3)), np.zeros((2, 3)), np.array([[1, 1, 0], [0, 0, 0]]), 0.1)
    with pytest.raises(ValueError, match="no real token|no valid token"):
        shaped_rewards(np.zeros(2), np.zeros((2, 3)), np.zeros((2, 3)), np.array([[1, 1, 0], [0, 0, 0]]), 0.1,
                       shaping="uniform")
