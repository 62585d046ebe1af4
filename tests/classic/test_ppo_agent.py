"""The agent of minippo.classic.ppo: CleanRL's init, action sampling, and the gradient of the whole PPO loss
(eq. (9)) of one minibatch."""
import numpy as np
import pytest

from minippo.classic.config import PPOConfig
from minippo.classic.ppo import actor_logits, critic_values, init_agent, ppo_loss_and_grads, sample_actions
from minippo.nn.gradcheck import assert_gradients
from minippo.rl.losses import logprobs_from_logits


def test_init_matches_cleanrl_layout():
    p = init_agent(4, 2, np.random.default_rng(0))
    shapes = {k: v.shape for k, v in p.items()}
    assert shapes == {"actor.0.w": (4, 64), "actor.0.b": (64,), "actor.1.w": (64, 64), "actor.1.b": (64,),
                      "actor.2.w": (64, 2), "actor.2.b": (2,), "critic.0.w": (4, 64), "critic.0.b": (64,),
                      "critic.1.w": (64, 64), "critic.1.b": (64,), "critic.2.w": (64, 1), "critic.2.b": (1,)}
    np.testing.assert_allclose(np.linalg.svd(p["actor.2.w"], compute_uv=False), 0.01, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(p["critic.2.w"]), 1.0, rtol=1e-12)
    values, _ = critic_values(p, np.zeros((3, 4)))
    assert values.shape == (3,)


def test_sampling_follows_the_softmax():
    logits = np.array([[0.0, 0.0], [2.0, -1.0], [-30.0, 30.0], [0.5, 0.1]])
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    rng = np.random.default_rng(0)
    draws = np.stack([sample_actions(logits, rng) for _ in range(20000)])       # (S, 4)
    freq1 = draws.mean(axis=0)                                                  # P(action 1)
    np.testing.assert_allclose(freq1, probs[:, 1], atol=4 * np.sqrt(0.25 / 20000))
    assert draws[:, 2].min() == 1                                               # p = 1 - 1e-26
    a1 = sample_actions(logits, np.random.default_rng(5))
    np.testing.assert_array_equal(a1, sample_actions(logits, np.random.default_rng(5)))
    three = np.log(np.array([[0.2, 0.3, 0.5]]))
    f = np.bincount(np.concatenate([sample_actions(three, rng) for _ in range(20000)]), minlength=3) / 20000
    np.testing.assert_allclose(f, [0.2, 0.3, 0.5], atol=0.015)


def make_batch(rng, params, b=12, logp_noise=0.05, value_noise=0.05):
    obs = rng.standard_normal((b, 4))
    actions = rng.integers(0, 2, b)
    logits, _ = actor_logits(params, obs)
    logp, _ = logprobs_from_logits(logits, actions)
    values, _ = critic_values(params, obs)
    logp_old = logp + logp_noise * rng.standard_normal(b)
    values_old = values + value_noise * rng.standard_normal(b)
    adv = rng.standard_normal(b)
    returns = values_old + adv
    return obs, actions, logp_old, adv, returns, values_old


@pytest.mark.parametrize("cfg", [
    PPOConfig(),                                                           # every ratio inside the band
    PPOConfig(clip_eps=0.03, clip_eps_value=0.03, ent_coef=0.05),          # some clipped, policy and value
    PPOConfig(whiten_advantages=False, value_clip=False, vf_coef=1.0),
])
def test_whole_loss_gradient(cfg):
    rng = np.random.default_rng(1)
    params = init_agent(4, 2, rng, hidden_size=8)
    for k in params:                                       # move off the init (bigger logits, nonzero biases)
        params[k] += 0.3 * rng.standard_normal(params[k].shape)
    batch = make_batch(rng, params)
    obs = batch[0]
    # keep every ratio / value difference away from the clip kinks (finite differences cross them otherwise)
    logits, _ = actor_logits(params, obs)
    ratio = np.exp(logprobs_from_logits(logits, batch[1])[0] - batch[2])
    assert np.abs(np.abs(ratio - 1) - cfg.clip_eps).min() > 1e-4
    values, _ = critic_values(params, obs)
    assert np.abs(np.abs(values - batch[5]) - cfg.clip_eps_value).min() > 1e-4
    loss, grads, stats = ppo_loss_and_grads(params, *batch, cfg)
    if cfg.clip_eps == 0.03:
        assert 0 < stats["losses/clipfrac"] < 1
        assert (np.abs(values - batch[5]) > cfg.clip_eps_value).any()

    def f():
        return ppo_loss_and_grads(params, *batch, cfg)[0]

    assert_gradients(f, params, grads, tol=1e-5)
    assert np.isclose(loss, stats["losses/policy_loss"] + cfg.vf_coef * stats["losses/value_loss"]
                      - cfg.ent_coef * stats["losses/entropy"])


def test_metrics_at_the_rollout_policy():
    # at the policy that collected the data, the ratio is 1: no KL, nothing clipped
    rng = np.random.default_rng(2)
    params = init_agent(4, 2, rng, hidden_size=8)
    obs, actions, _, adv, returns, _ = make_batch(rng, params)
    logp, _ = logprobs_from_logits(actor_logits(params, obs)[0], actions)
    values, _ = critic_values(params, obs)
    _, _, stats = ppo_loss_and_grads(params, obs, actions, logp, adv, returns, values, PPOConfig())
    assert stats["losses/approx_kl"] == 0 and stats["losses/old_approx_kl"] == 0
    assert stats["losses/clipfrac"] == 0
    # policy loss = -mean(whitened adv) = 0 at ratio 1; entropy near log 2 for the 0.01-gain output layer
    assert abs(stats["losses/policy_loss"]) < 1e-12
    assert np.log(2) - 1e-3 < stats["losses/entropy"] <= np.log(2)
    np.testing.assert_allclose(stats["losses/value_loss"], 0.5 * np.mean((values - returns) ** 2))


def test_the_value_loss_is_clipped_around_the_rollout_values():
    """value_clip (the default): L^VF = 0.5 mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)),
    written here from the critic's values, with eps = 0.03 so that the clip binds on some rows and the
    clipped loss differs from the plain 0.5 mean((V - R)^2). float64, 12 rows: rel 1e-12. Catches the value
    loss without its clip."""
    rng = np.random.default_rng(3)
    params = init_agent(4, 2, rng, hidden_size=8)
    obs, actions, logp_old, adv, returns, values_old = make_batch(rng, params, value_noise=0.1)
    values, _ = critic_values(params, obs)
    v_clip = values_old + np.clip(values - values_old, -0.03, 0.03)
    clipped = 0.5 * np.mean(np.maximum((values - returns) ** 2, (v_clip - returns) ** 2))
    assert clipped > 0.5 * np.mean((values - returns) ** 2) * (1 + 1e-6)
    _, _, stats = ppo_loss_and_grads(params, obs, actions, logp_old, adv, returns, values_old,
                                     PPOConfig(clip_eps_value=0.03))
    assert stats["losses/value_loss"] == pytest.approx(clipped, rel=1e-12)


def test_old_approx_kl_is_the_mean_of_log_pi_old_minus_log_pi():
    """CleanRL's old_approx_kl, k1 = mean(log pi_old - log pi) over the minibatch, written from the actor's
    log-probs (float64, 12 rows: rel 1e-12); with pi_old noisy around pi it is not 0. Catches the sign
    flipped (log pi - log pi_old)."""
    rng = np.random.default_rng(4)
    params = init_agent(4, 2, rng, hidden_size=8)
    obs, actions, logp_old, adv, returns, values_old = make_batch(rng, params, logp_noise=0.3)
    logp, _ = logprobs_from_logits(actor_logits(params, obs)[0], actions)
    expect = np.mean(logp_old - logp)
    assert abs(expect) > 1e-3
    _, _, stats = ppo_loss_and_grads(params, obs, actions, logp_old, adv, returns, values_old, PPOConfig())
    assert stats["losses/old_approx_kl"] == pytest.approx(expect, rel=1e-12)
