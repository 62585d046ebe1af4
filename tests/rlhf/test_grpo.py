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


def test_group_advantages_compare_the_whole_returns_kl_penalty_included():
    """Step 4 of grpo_iteration reads each response's whole return, its score PLUS its summed KL penalty
    (the penalty is in the reward with kl_ref_coef 0.2): on the second iteration the actor has moved
    away from the reference, the penalties are not 0 and the advantages are those of score + sum_t(-beta
    kl_t), that sum written here from the rollout's float32 logp and logp_ref (their difference taken in
    float64, as the reward step takes it; rtol 1e-9 covers the summation order through the group
    statistics). Catches the advantages of the scores alone."""
    sft, rm, tok = world()
    cfg = GRPOConfig(iterations=2, batch_size=8, samples_per_prompt=4, minibatch_size=4, max_new_tokens=8,
                     update_epochs=2, checkpoint_every=1, lr=3e-2, kl_ref_controller="fixed", kl_ref_coef=0.2)
    tr = PPOTrainer(cfg, sft, rm, tok)
    seen = {}
    for _ in range(2):
        tr.step(callback=lambda t, ro, rec: seen.update(ro=ro))
    ro = seen["ro"]
    m = ro.response_mask
    kl = ro.logp.astype(np.float64) - ro.logp_ref.astype(np.float64)      # float32 log-probs: exact in float64
    penalty = (-0.2 * kl * m).sum(axis=1)                                               # (B,)
    assert np.abs(penalty).max() > 1e-3
    expect = group_advantages(ro.scores + penalty, m, cfg)
    np.testing.assert_allclose(ro.adv, expect, rtol=1e-9, atol=1e-12)


def test_a_minibatch_above_kl_old_target_stops_the_group_update_one_at_it_does_not():
    """grpo_update's early stop: a minibatch whose approx KL is ABOVE kl_old_target is not applied (no
    parameter moves, one history row without a grad norm, early_stop_epoch 0); a target equal to it does not
    stop it (strict >). The approx KL of the first minibatch is computed here and inside grpo_update by the
    same call on the same arrays: equal bit for bit. Catches >= for >."""
    import copy
    from minippo.rlhf import grpo, ppo
    sft, rm, tok = world()
    cfg = GRPOConfig(iterations=2, batch_size=8, samples_per_prompt=4, minibatch_size=4, max_new_tokens=8,
                     update_epochs=2, checkpoint_every=1, lr=3e-2)
    tr = PPOTrainer(cfg, sft, rm, tok)
    tr.step()                                          # the actor moves away from the rollout's pi_old
    state, ro = tr.state, tr.last_rollout
    rng0 = np.random.default_rng(5)
    first = next(ppo.epoch_minibatches(ro.batch_size, cfg.minibatch_size, 2, copy.deepcopy(rng0)))[1]
    kl0 = grpo.actor_loss(state, ro.take(first), cfg)[1]["approx_kl"]
    assert kl0 > 0
    before = {k: v.copy() for k, v in state.actor.params.items()}
    state.rng = copy.deepcopy(rng0)
    upd = grpo.grpo_update(state, ro, cfg.replace(kl_old_target=kl0 / 2))
    assert upd["early_stop_epoch"] == 0 and len(upd["history"]) == 1 and upd["history"][0]["grad_norm"] is None
    assert all(np.array_equal(before[k], v) for k, v in state.actor.params.items())
    state.rng = copy.deepcopy(rng0)
    upd = grpo.grpo_update(state, ro, cfg.replace(kl_old_target=kl0))
    assert upd["history"][0]["approx_kl"] == kl0 and upd["history"][0]["grad_norm"] is not None


def test_the_logged_total_loss_is_policy_minus_the_entropy_bonus_plus_the_kl_term():
    """grpo_update's loss/total, per minibatch: L_pi - c2 S + beta_KL L_KL, with loss/entropy = -S logged, so
    total = policy + c2 * loss/entropy + beta_KL * loss/kl (c2 0.05, beta_KL 0.1; three float64 terms: rel
    1e-12). Catches + c2 S (the entropy bonus with the wrong sign in the logged total) and the KL term
    added without its coefficient."""
    from minippo.rlhf import grpo
    sft, rm, tok = world()
    cfg = GRPOConfig(iterations=1, batch_size=8, samples_per_prompt=4, minibatch_size=4, max_new_tokens=8,
                     update_epochs=1, checkpoint_every=1, ent_coef=0.05, kl_ref_loss_coef=0.1)
    tr = PPOTrainer(cfg, sft, rm, tok)
    tr.step()
    upd = grpo.grpo_update(tr.state, tr.last_rollout, cfg)
    for h in upd["history"]:
        assert h["loss/entropy"] < 0
        assert h["loss/total"] == pytest.approx(h["loss/policy"] + 0.05 * h["loss/entropy"] + 0.1 * h["loss/kl"],
                                                rel=1e-12)
