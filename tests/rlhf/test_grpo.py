"""The advantages of the critic-free family (minippo.rlhf.grpo.group_advantages) are not whitened again, and why;
canonical PPO's GAE advantages are (ppo_iteration's step 4)."""
from types import SimpleNamespace

import numpy as np
import pytest

from minippo.rl.group_advantages import batch_mean_advantages, grpo_advantages, rloo_advantages
from minippo.rl.masked import masked_mean, masked_whiten
from minippo.rl.gae import gae
from minippo.rlhf.grpo import GRPOConfig, group_advantages
from minippo.rlhf.run.trainer import PPOTrainer
from tests.rlhf.ppo_helpers import tiny_config, world


def fake_rollout(scores, lengths, Tn=6, seed=0):
    """A rollout with what the estimators read: scores, a KL part of the reward, values, rewards, mask."""
    rng = np.random.default_rng(seed)
    mask = (np.arange(Tn)[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)       # (B, Tn) right-padded
    non_score = -0.05 * rng.random(mask.shape) * mask
    rewards = non_score.copy()
    rewards[np.arange(len(scores)), np.asarray(lengths) - 1] += scores
    scores = np.asarray(scores, dtype=np.float64)
    return SimpleNamespace(scores=scores, non_score_reward=non_score, rewards=rewards,
                           values=rng.normal(size=mask.shape) * mask, response_mask=mask,
                           sequence_returns=scores + non_score.sum(axis=1))


# two prompts x 3 responses; the second group scored all the same and has responses of different lengths
SCORES = [0.3, -1.2, 2.0, 0.5, 0.5, 0.5]
LENGTHS = [2, 6, 3, 1, 6, 4]


@pytest.mark.parametrize("name, fn", [
    ("grpo", lambda s, m: grpo_advantages(s, 3, m)),
    ("dr_grpo", lambda s, m: grpo_advantages(s, 3, m, scale=False)),
    ("rloo", lambda s, m: rloo_advantages(s, 3, m)),
    ("reinforce", lambda s, m: batch_mean_advantages(s, m)),
])
def test_critic_free_advantages_are_not_whitened_again(name, fn):
    ro = fake_rollout(SCORES, LENGTHS)
    ro.non_score_reward[...] = 0.0                                 # GRPO-style: no KL in the reward
    ro.sequence_returns = ro.scores.copy()
    cfg = GRPOConfig.quick(advantage_estimator=name, samples_per_prompt=3, batch_size=6, minibatch_size=3)
    adv = group_advantages(ro.sequence_returns, ro.response_mask, cfg)
    np.testing.assert_array_equal(adv, fn(ro.scores, ro.response_mask))     # as defined: not whitened again
    if name != "reinforce":                                        # the constant group keeps advantage exactly 0
        assert np.all(adv[3:] == 0.0)


def test_whitening_the_group_advantages_would_shift_them_by_a_length_weighted_mean():
    """Why: token-level whitening subtracts the TOKEN-weighted mean, which is not 0 for GRPO (long responses
    count more), so the no-signal group would get a non-zero advantage."""
    ro = fake_rollout(SCORES, LENGTHS)
    adv = grpo_advantages(ro.scores, 3, ro.response_mask)
    assert abs(masked_mean(adv, ro.response_mask)) > 0.1          # per response mean 0, per token not
    rewhitened = masked_whiten(adv, ro.response_mask)
    assert np.all(np.abs(rewhitened[3:][ro.response_mask[3:] == 1]) > 0.1)


@pytest.mark.parametrize("whiten", [True, False])
def test_canonical_gae_is_whitened_and_the_switch_still_works(whiten):
    """ppo_iteration's step 4: GAE on the rollout's rewards and values, whitened over its valid tokens (or not)."""
    sft, rm, tok = world()
    seen = {}
    PPOTrainer(tiny_config(iterations=1, whiten_advantages=whiten), sft, rm, tok).step(
        callback=lambda t, ro, rec: seen.update(ro=ro))
    ro = seen["ro"]
    m = ro.response_mask
    raw, returns = gae(ro.rewards, ro.values, m, gamma=1.0, lam=0.95)
    np.testing.assert_array_equal(ro.returns, returns)
    np.testing.assert_array_equal(ro.adv, masked_whiten(raw, m) if whiten else raw)
    if whiten:
        assert abs(masked_mean(ro.adv, m)) < 1e-12 and np.std(ro.adv[m == 1]) == pytest.approx(1.0, abs=1e-6)


def test_a_group_iteration_gives_returns_equal_to_its_advantages():
    """No critic: V = 0, so the returns (what a critic would regress on) are the advantages themselves."""
    sft, rm, tok = world()
    seen = {}
    cfg = GRPOConfig(iterations=1, batch_size=8, samples_per_prompt=4, minibatch_size=4, max_new_tokens=8,
                     update_epochs=2, checkpoint_every=1)
    tr = PPOTrainer(cfg, sft, rm, tok)
    tr.step(callback=lambda t, ro, rec: seen.update(ro=ro))
    ro = seen["ro"]
    assert tr.state.critic is None and tr.state.opt_critic is None and not ro.values.any()
    np.testing.assert_array_equal(ro.returns, ro.adv * ro.response_mask)
    np.testing.assert_array_equal(ro.adv, group_advantages(ro.sequence_returns, ro.response_mask, cfg))
