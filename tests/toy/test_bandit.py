"""Token bandit: exact quantities against loops, gradients against finite differences, the PPO loop."""
import numpy as np
import pytest

from minippo.nn.gradcheck import assert_gradients
from minippo.toy.bandit import (BanditPPOConfig, TokenBandit, actor_critic_loss, pg_loss, ppo_train,
                               reinforce_gradient)


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


@pytest.fixture(params=["tabular", "linear"])
def bandit(request):
    rng = np.random.default_rng(1)
    n_features = None if request.param == "tabular" else 3
    return TokenBandit.random(5, 4, rng, n_features=n_features, noise_std=0.5)


def _batch(bandit, seed=2, n=40):
    rng = np.random.default_rng(seed)
    W = bandit.init_params(rng, 0.7)
    states, actions, rewards = bandit.sample(W, n, rng)
    return rng, W, states, actions, rewards


# ---- exact quantities -------------------------------------------------------------------------

def test_exact_quantities_match_loops(bandit):
    _, W, states, _, _ = _batch(bandit)
    S, V = bandit.rewards.shape
    p = np.array([_softmax(bandit.features[s] @ W) for s in range(S)])
    np.testing.assert_allclose(bandit.probs(W), p, rtol=1e-12)
    J = sum(bandit.state_probs[s] * sum(p[s, a] * bandit.rewards[s, a] for a in range(V)) for s in range(S))
    assert bandit.expected_reward(W) == pytest.approx(J, rel=1e-12)
    H = sum(bandit.state_probs[s] * -np.sum(p[s] * np.log(p[s])) for s in range(S))
    assert bandit.mean_entropy(W) == pytest.approx(H, rel=1e-12)
    assert bandit.optimal_reward() == pytest.approx(np.mean(bandit.rewards.max(axis=1)))
    # KL over the batch's contexts: the mean over samples of the per-context KL
    W2 = W + 0.3
    W2[0, 0] -= 1.0
    q = np.array([_softmax(bandit.features[s] @ W2) for s in range(S)])
    kl_loop = np.mean([np.sum(p[s] * np.log(p[s] / q[s])) for s in states])
    assert bandit.kl(W, W2, states) == pytest.approx(kl_loop, rel=1e-12)
    assert bandit.kl(W, W, states) == 0.0
    assert bandit.kl(W, W2) > 0
    # the fitted start: scale * the least-squares fit of R (R itself when tabular)
    Wfit = bandit.fitted_params(2.0)
    resid = bandit.features @ (Wfit / 2.0) - bandit.rewards
    np.testing.assert_allclose(bandit.features.T @ resid, 0.0, atol=1e-10)      # normal equations
    assert bandit.expected_reward(Wfit) > bandit.expected_reward(bandit.init_params())


def test_logp_and_entropy_match_loops(bandit):
    _, W, states, actions, _ = _batch(bandit)
    logp, _ = bandit.logp(W, states, actions)
    ent, _ = bandit.entropy(W, states)
    for i, (s, a) in enumerate(zip(states, actions)):
        p = _softmax(bandit.features[s] @ W)
        assert logp[i] == pytest.approx(np.log(p[a]), rel=1e-12)
        assert ent[i] == pytest.approx(-np.sum(p * np.log(p)), rel=1e-12)


def test_sampling_follows_the_policy_and_is_reproducible():
    rng = np.random.default_rng(0)
    bandit = TokenBandit.random(3, 5, rng, noise_std=0.0)
    W = bandit.init_params(rng, 1.0)
    states, actions, rewards = bandit.sample(W, 60000, np.random.default_rng(5))
    p = bandit.probs(W)
    for s in range(3):
        freq = np.bincount(actions[states == s], minlength=5) / np.sum(states == s)
        np.testing.assert_allclose(freq, p[s], atol=0.015)
    np.testing.assert_allclose(np.bincount(states) / len(states), bandit.state_probs, atol=0.01)
    np.testing.assert_array_equal(rewards, bandit.rewards[states, actions])     # noise_std = 0
    again = bandit.sample(W, 60000, np.random.default_rng(5))
    np.testing.assert_array_equal(again[1], actions)


# ---- gradients (float64 central differences) -------------------------------------------------

def test_logp_backward_gradcheck(bandit):
    rng, W, states, actions, _ = _batch(bandit)
    c = rng.standard_normal(len(states))                      # L = sum_i c_i logp_i
    params = {"W": W}
    _, cache = bandit.logp(W, states, actions)
    grads = {"W": bandit.logp_backward(c, cache)}
    assert_gradients(lambda: float(c @ bandit.logp(params["W"], states, actions)[0]), params, grads, tol=1e-7)


def test_entropy_backward_gradcheck(bandit):
    rng, W, states, _, _ = _batch(bandit)
    c = rng.standard_normal(len(states))
    params = {"W": W}
    _, cache = bandit.entropy(W, states)
    grads = {"W": bandit.entropy_backward(c, cache)}
    assert_gradients(lambda: float(c @ bandit.entropy(params["W"], states)[0]), params, grads, tol=1e-7)


def test_expected_reward_and_kl_gradcheck(bandit):
    _, W, states, _, _ = _batch(bandit)
    params = {"W": W}
    assert_gradients(lambda: bandit.expected_reward(params["W"]), params,
                     {"W": bandit.expected_reward_grad(W)}, tol=1e-7)
    W_old = W - 0.4 * np.random.default_rng(7).standard_normal(W.shape)   # a different policy
    for st in (None, states):
        assert_gradients(lambda: bandit.kl(W_old, params["W"], st), params,
                         {"W": bandit.kl_grad(W_old, W, st)}, tol=1e-7)


def test_reinforce_gradient_is_the_per_sample_sum_and_unbiased():
    rng = np.random.default_rng(3)
    bandit = TokenBandit.random(2, 4, rng, noise_std=1.0)
    W = bandit.init_params(rng, 0.5)
    states, actions, rewards = bandit.sample(W, 16, rng)
    b = 0.3
    g = reinforce_gradient(bandit, W, states, actions, rewards, baseline=b)
    loop = np.zeros_like(W)
    for s, a, r in zip(states, actions, rewards):
        score = -_softmax(W[s])
        score[a] += 1.0                                       # grad of log pi(a|s) wrt logits(s)
        loop[s] += (r - b) * score / len(states)
    np.testing.assert_allclose(g, loop, rtol=1e-12, atol=1e-15)
    # unbiased: the mean over many batches approaches the exact gradient (5 standard errors)
    G = np.array([reinforce_gradient(bandit, W, *bandit.sample(W, 16, np.random.default_rng(100 + i)))
                  for i in range(3000)])
    se = G.std(axis=0) / np.sqrt(len(G))
    assert np.all(np.abs(G.mean(axis=0) - bandit.expected_reward_grad(W)) <= 5 * se + 1e-12)


def test_pg_loss_value_gradient_and_padding():
    logp = np.log(np.array([[0.5, 0.2, 0.9], [0.3, 0.6, 0.1]]))
    adv = np.array([[1.0, -2.0, 0.5], [2.0, 7.0, -3.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    loss, dlogp, stats = pg_loss(logp, adv, mask)
    assert loss == pytest.approx(-(logp[0] @ adv[0] + logp[1, 0] * adv[1, 0]) / 4)
    np.testing.assert_allclose(dlogp, -adv * mask / 4)
    assert stats["n_tokens"] == 4
    params = {"logp": logp.copy()}
    assert_gradients(lambda: pg_loss(params["logp"], adv, mask)[0], params, {"logp": dlogp}, tol=1e-7)


@pytest.mark.parametrize("objective", ["clip", "penalty", "pg"])
def test_actor_critic_loss_gradcheck(bandit, objective):
    rng, W, states, actions, rewards = _batch(bandit)
    logp_old, _ = bandit.logp(W, states, actions)
    mb = {"states": states, "actions": actions, "logp_old": logp_old,
          "adv": rng.standard_normal(len(states)), "returns": rewards}
    cfg = BanditPPOConfig(objective=objective, ent_coef=0.05, vf_coef=0.7, clip_eps=0.2)
    # move away from W_old by a step whose ratios avoid the clip kinks at 1 +/- eps
    params = {"W": W + 0.15 * rng.standard_normal(W.shape), "values": rng.standard_normal(bandit.n_states)}
    logp, _ = bandit.logp(params["W"], states, actions)
    ratio = np.exp(logp - logp_old)
    assert np.min(np.abs(np.abs(ratio - 1) - 0.2)) > 1e-4
    _, grads, stats = actor_critic_loss(bandit, params, mb, cfg, kl_coef=0.3)
    assert_gradients(lambda: actor_critic_loss(bandit, params, mb, cfg, kl_coef=0.3)[0], params, grads, tol=1e-7)
    assert stats["loss"] == pytest.approx(stats["policy_loss"] + 0.7 * stats["value_loss"] - 0.05 * stats["entropy"])


# ---- the PPO loop ---------------------------------------------------------------------------

def test_ppo_train_learns_and_is_reproducible():
    bandit = TokenBandit.random(4, 6, np.random.default_rng(0), noise_std=0.5)
    cfg = BanditPPOConfig(batch_size=128, minibatch_size=32, update_epochs=4, lr=0.1)
    h = ppo_train(bandit, cfg, 30, np.random.default_rng(1))
    J0 = bandit.expected_reward(bandit.init_params())
    assert h["reward"][-1] > J0 + 0.7 * (bandit.optimal_reward() - J0)
    assert h["explained_variance"][-1] > h["explained_variance"][0]
    assert h["explained_variance_exact"].mean() >= h["explained_variance"].mean()
    assert h["clipfrac"].max() > 0 and np.all(h["kl"] >= 0)
    h2 = ppo_train(bandit, cfg, 30, np.random.default_rng(1))
    np.testing.assert_array_equal(h["reward"], h2["reward"])


def test_ppo_train_penalty_uses_the_paper_rule():
    bandit = TokenBandit.random(4, 6, np.random.default_rng(0), noise_std=0.5)
    cfg = BanditPPOConfig(objective="penalty", kl_old_coef=1.0, kl_old_target=0.01, lr=0.1)
    h = ppo_train(bandit, cfg, 15, np.random.default_rng(1))
    beta, kl = h["kl_coef"], h["kl"]
    for t in range(len(beta) - 1):                            # beta_{t+1} from d_t = kl_t
        want = beta[t] / 2 if kl[t] < 0.01 / 1.5 else beta[t] * 2 if kl[t] > 0.015 else beta[t]
        assert beta[t + 1] == pytest.approx(want)
    assert len(set(beta)) > 1
    fixed = ppo_train(bandit, BanditPPOConfig(objective="penalty", kl_old_target=None), 5, np.random.default_rng(1))
    assert np.all(fixed["kl_coef"] == 1.0)


# ---- validation ---------------------------------------------------------------------------

def test_bad_inputs_name_the_argument():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="`rewards`"):
        TokenBandit(np.zeros(3))
    with pytest.raises(ValueError, match="`state_probs`"):
        TokenBandit(np.zeros((2, 3)), state_probs=np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="`features`"):
        TokenBandit(np.zeros((2, 3)), features=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="`noise_std`"):
        TokenBandit(np.zeros((2, 3)), noise_std=-1.0)
    b = TokenBandit.random(2, 3, rng)
    with pytest.raises(ValueError, match="`W`"):
        b.logits(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="`states`"):
        b.logp(b.init_params(), np.array([0, 2]), np.array([0, 1]))
    with pytest.raises(ValueError, match="`actions`"):
        b.logp(b.init_params(), np.array([0, 1]), np.array([0, 3]))
    with pytest.raises(ValueError, match="`objective`"):
        BanditPPOConfig(objective="trpo")
    with pytest.raises(ValueError, match="`minibatch_size`"):
        BanditPPOConfig(batch_size=8, minibatch_size=16)
    with pytest.raises(ValueError, match="`lr`"):
        BanditPPOConfig(lr=0.0)
