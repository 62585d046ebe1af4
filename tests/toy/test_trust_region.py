"""TRPO pieces: L^CPI, the Fisher matrix of a softmax policy, conjugate gradient, the constrained step."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minippo.nn.gradcheck import assert_gradients, numerical_gradient
from minippo.toy.bandit import TokenBandit
from minippo.toy.trust_region import (backtracking_line_search, conjugate_gradient, cpi_loss,
                                     fisher_matrix, fisher_vector_product, trpo_step)


def _problem(seed, n_features=None, S=5, V=4, n=64):
    rng = np.random.default_rng(seed)
    bandit = TokenBandit.random(S, V, rng, n_features=n_features, noise_std=1.0)
    W = bandit.init_params(rng, 0.5)
    states, actions, rewards = bandit.sample(W, n, rng)
    adv = rewards - bandit.state_values(W)[states]
    return bandit, W, states, actions, adv


def test_cpi_loss_value_and_gradient():
    rng = np.random.default_rng(0)
    logp_old = np.log(rng.uniform(0.05, 0.9, size=(3, 5)))
    logp = logp_old + 0.3 * rng.standard_normal((3, 5))
    adv = rng.standard_normal((3, 5))
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]])
    loss, dlogp, stats = cpi_loss(logp, logp_old, adv, mask)
    ratio = np.exp(logp - logp_old)
    assert loss == pytest.approx(-np.sum(ratio * adv * mask) / 7, rel=1e-12)
    assert np.all(dlogp[mask == 0] == 0)
    assert stats["n_tokens"] == 7 and stats["ratio_max"] == pytest.approx(ratio[mask == 1].max())
    params = {"logp": logp.copy()}
    assert_gradients(lambda: cpi_loss(params["logp"], logp_old, adv, mask)[0], params, {"logp": dlogp}, tol=1e-7)
    with pytest.raises(ValueError, match="`adv`"):
        cpi_loss(logp, logp_old, adv[:, :2])


@pytest.mark.parametrize("n_features", [None, 3])
def test_fisher_is_the_hessian_of_the_kl(n_features):
    bandit, W, states, _, _ = _problem(1, n_features)
    F = fisher_matrix(bandit, W, states)
    # the Hessian of W' -> kl(W, W', states) at W' = W, by central differences of kl_grad
    P = W.size
    H = np.empty((P, P))
    Wp = W.copy()
    for j in range(P):
        def f(j=j):
            return float(bandit.kl_grad(W, Wp, states).ravel()[j])
        H[j] = numerical_gradient(f, Wp, h=1e-5).ravel()
    np.testing.assert_allclose(F, H, atol=1e-9)
    # and the expected outer product of the score, by enumerating every token of every sample
    E = np.zeros((P, P))
    p = bandit.probs(W)
    for s in states:
        for a in range(bandit.vocab):
            score = np.outer(bandit.features[s], np.eye(bandit.vocab)[a] - p[s]).ravel()   # grad log pi(a|s)
            E += p[s, a] * np.outer(score, score) / len(states)
    np.testing.assert_allclose(F, E, atol=1e-12)
    # symmetric, PSD, with the shift directions (W + c 1^T changes no probability) in its null space
    np.testing.assert_allclose(F, F.T, atol=1e-15)
    assert np.linalg.eigvalsh(F).min() > -1e-12
    shift = np.outer(np.ones(bandit.n_features), np.ones(bandit.vocab))
    np.testing.assert_allclose(fisher_vector_product(bandit, W, states, shift), 0.0, atol=1e-14)


def test_fisher_vector_product_damping():
    bandit, W, states, _, _ = _problem(2)
    v = np.random.default_rng(0).standard_normal(W.shape)
    np.testing.assert_allclose(fisher_vector_product(bandit, W, states, v, damping=0.1),
                               fisher_vector_product(bandit, W, states, v) + 0.1 * v, rtol=1e-12)


def test_conjugate_gradient_solves_spd_and_singular_systems():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((6, 6))
    A = M @ M.T + 0.5 * np.eye(6)
    b = rng.standard_normal(6)
    np.testing.assert_allclose(conjugate_gradient(lambda v: A @ v, b, iters=50), np.linalg.solve(A, b), rtol=1e-8)
    # the singular Fisher matrix: b in its range -> the minimum-norm solution (that of pinv)
    bandit, W, states, actions, adv = _problem(3)
    F = fisher_matrix(bandit, W, states)
    logp, cache = bandit.logp(W, states, actions)
    g = bandit.logp_backward(adv / len(adv), cache).ravel()        # a policy gradient: in F's range
    x = conjugate_gradient(lambda v: F @ v, g, iters=100, residual_tol=1e-28)
    np.testing.assert_allclose(x, np.linalg.pinv(F, rcond=1e-10) @ g, rtol=1e-6, atol=1e-9)


@given(seed=st.integers(0, 10_000), max_kl=st.sampled_from([1e-3, 1e-2, 0.05, 0.3, 2.0]),
       linear=st.booleans())
def test_trpo_step_respects_the_kl_bound(seed, max_kl, linear):
    bandit, W, states, actions, adv = _problem(seed, 3 if linear else None)
    W_new, info = trpo_step(bandit, W, states, actions, adv, max_kl)
    kl = bandit.kl(W, W_new, states)
    assert kl <= max_kl
    assert info["kl"] == pytest.approx(kl)
    if info["accepted"]:
        assert info["improvement"] > 0 and kl > 0
        assert info["quadratic_kl"] == pytest.approx(max_kl, rel=1e-9)
    else:
        np.testing.assert_array_equal(W_new, W)


def test_trpo_full_step_is_the_scaled_natural_gradient():
    bandit, W, states, actions, adv = _problem(4)
    max_kl = 1e-4
    W_new, info = trpo_step(bandit, W, states, actions, adv, max_kl, damping=1e-8, cg_iters=100)
    assert info["accepted"]
    F = fisher_matrix(bandit, W, states)
    logp, cache = bandit.logp(W, states, actions)
    g = bandit.logp_backward(adv / len(adv), cache).ravel()
    x = np.linalg.pinv(F, rcond=1e-10) @ g
    want = np.sqrt(2 * max_kl / (x @ F @ x)) * x        # the full step: quadratic KL = max_kl
    step = (W_new - W).ravel() / info["step_frac"]      # CG stops at r.r < 1e-10: agree to ~1e-5
    assert np.linalg.norm(step - want) <= 1e-4 * np.linalg.norm(want)
    # the exact KL of the full step exceeds its quadratic model only at third order
    assert bandit.kl(W, W + want.reshape(W.shape), states) == pytest.approx(max_kl, rel=0.05)


def test_line_search_backtracks_and_rejects():
    theta = np.zeros(2)
    kl = lambda t: float(t @ t)                     # noqa: E731
    up = lambda t: float(t[0])                      # noqa: E731
    new, info = backtracking_line_search(up, kl, theta, np.array([4.0, 0.0]), max_kl=1.0)
    assert info["accepted"] and info["n_backtracks"] == 2 and new[0] == 1.0
    new, info = backtracking_line_search(lambda t: -float(t[0]), kl, theta, np.array([1.0, 0.0]), 1.0)
    assert not info["accepted"] and np.all(new == theta)
    with pytest.raises(ValueError, match="`max_kl`"):
        backtracking_line_search(up, kl, theta, theta, max_kl=0.0)


def test_trpo_step_zero_advantage_is_no_step():
    bandit, W, states, actions, adv = _problem(5)
    W_new, info = trpo_step(bandit, W, states, actions, np.zeros_like(adv), 0.01)
    assert not info["accepted"] and np.all(W_new == W)
    with pytest.raises(ValueError, match="`max_kl`"):
        trpo_step(bandit, W, states, actions, adv, max_kl=-1.0)
