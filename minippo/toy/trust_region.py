"""The KL-constrained policy step of TRPO (Schulman et al. 2015, arXiv:1502.05477), for lesson 03.

Legend: S contexts, V vocab, D features, N samples; P = D * V parameters of a bandit policy W (D, V).

TRPO maximises the surrogate L^CPI under a trust region (PPO paper eqs. (3)-(4), (6)):

    maximise_theta  E_t[ r_t(theta) A_t ]        r_t = pi_theta(a_t|s_t) / pi_old(a_t|s_t)
    subject to      E_t[ KL[pi_old(.|s_t), pi_theta(.|s_t)] ] <= delta

Linearising the objective (gradient g) and taking the KL to second order (its Hessian at
theta_old is the Fisher matrix F) gives the natural-gradient step (TRPO sec. 6, Appendix C):

    x       = F^{-1} g                       solved by conjugate gradient with F v products
    step    = sqrt(2 delta / (x^T F x)) x    the step whose quadratic KL is exactly delta
    theta'  = theta_old + 0.5^k step          backtracking: the smallest k with the EXACT KL
                                             <= delta and a positive surrogate improvement

For a softmax policy with logits z = x_s @ W the Fisher matrix has a closed form: the Hessian
of KL(pi_old || pi) in z is ``diag(p) - p p^T`` (per context), so
``F v = mean_i x_{s_i} (p (u - p.u))`` with ``u = x_{s_i} @ v`` and p = pi_old(.|s_i); no matrix
of size P x P is ever formed (:func:`fisher_matrix` builds it only for checks and display).
``F`` is singular (adding a constant to a context's logits changes nothing), which conjugate
gradient tolerates when g lies in F's range (it does: each row of a softmax score sums to 0);
a small ``damping`` (F + damping I, as TRPO's code) keeps it well conditioned.

PPO replaces all of this by first-order steps on a clipped objective (PPO paper sec. 3,
eq. (7); Q7): no Fisher products, no line search, an ordinary first-order optimizer.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from minippo.checks import check_float_array, check_range
from minippo.toy.bandit import TokenBandit
from minippo.rl.losses import log_softmax
from minippo.rl.masked import masked_mean, token_inputs


def cpi_loss(logp, logp_old, adv, mask=None):
    """Unclipped surrogate loss ``L = -E_t[r_t A_t]``, r_t = exp(logp - logp_old) (L^CPI, PPO eq. (6)).

    The "conservative policy iteration" objective of Kakade & Langford 2002 that TRPO
    maximises (eq. (3)). Returns ``(loss, dlogp, stats)`` like
    :func:`minippo.rl.losses.clipped_policy_loss`: ``dlogp = -A r / n`` on every valid
    token (dr/dlogp = r: nothing is ever clipped), stats ``ratio_mean``, ``ratio_max``,
    ``ratio_min``, ``n_tokens``.
    """
    (logp, logp_old, adv), mask = token_inputs(mask, logp=logp, logp_old=logp_old, adv=adv)
    valid = mask == 1
    n = int(valid.sum())
    ratio = np.exp(logp - logp_old)                                   # r_t, never p / p_old
    loss = -masked_mean(ratio * adv, mask)
    dlogp = (-adv * ratio * mask / max(n, 1)).astype(logp.dtype)
    stats = {"ratio_mean": masked_mean(ratio, mask),
             "ratio_max": float(ratio[valid].max()) if n else 1.0,
             "ratio_min": float(ratio[valid].min()) if n else 1.0, "n_tokens": n}
    return loss, dlogp, stats


def fisher_vector_product(bandit: TokenBandit, W, states, v, damping: float = 0.0) -> np.ndarray:
    """``(F + damping I) v`` for the policy ``softmax(x_s @ W)``, F the Fisher matrix over the batch.

    F is the Hessian at W' = W of ``bandit.kl(W, W', states)`` (the mean KL of TRPO's
    constraint) and equals ``E_i E_{a ~ pi}[grad log pi(a|s_i) grad log pi(a|s_i)^T]``.
    ``v`` and the result have W's shape (D, V).
    """
    check_range("damping", damping, 0, None)
    v = check_float_array("v", v, shape=(bandit.n_features, bandit.vocab))
    x = bandit.features[bandit._check_states(states)]                    # (N, D)
    p = np.exp(log_softmax(x @ bandit._check_W(W)))                       # (N, V) pi_old(.|s_i)
    u = x @ v                                                             # (N, V) logit change
    # the Hessian of KL in the logits is diag(p) - p p^T: (diag(p) - p p^T) u = p (u - p.u)
    hu = p * (u - np.sum(p * u, axis=1, keepdims=True))                   # (N, V)
    return x.T @ hu / len(x) + damping * v                                 # (D, V)


def fisher_matrix(bandit: TokenBandit, W, states) -> np.ndarray:
    """The dense Fisher matrix (P, P), P = D * V, in the row-major order of ``W.ravel()``.

    Built one column at a time from :func:`fisher_vector_product`; for tests and for
    printing a small example, never for training.
    """
    P = bandit.n_features * bandit.vocab
    F = np.empty((P, P))
    for j in range(P):
        e = np.zeros(P)
        e[j] = 1.0
        F[:, j] = fisher_vector_product(bandit, W, states, e.reshape(bandit.n_features, bandit.vocab)).ravel()
    return F


def conjugate_gradient(avp: Callable[[np.ndarray], np.ndarray], b, iters: int = 10,
                       residual_tol: float = 1e-10) -> np.ndarray:
    """Solve ``A x = b`` for a symmetric positive (semi-)definite A given only ``avp(v) = A v``.

    The textbook iteration (Shewchuk 1994; TRPO Appendix C uses 10 iterations): x starts at
    0, each step minimises the quadratic along a direction A-conjugate to the previous ones.
    Stops after ``iters`` steps or when ``r.r < residual_tol``. ``b`` may have any shape.
    """
    check_range("iters", iters, 1, None, integer=True)
    b = check_float_array("b", b)
    x = np.zeros_like(b)
    r = b.copy()                        # residual b - A x
    d = b.copy()                        # search direction
    rr = float(np.vdot(r, r))
    for _ in range(iters):
        if rr < residual_tol:
            break
        Ad = avp(d)
        dAd = float(np.vdot(d, Ad))
        if dAd <= 0:                    # d in A's null space: nothing left to solve along it
            break
        alpha = rr / dAd
        x += alpha * d
        r -= alpha * Ad
        rr_new = float(np.vdot(r, r))
        d = r + (rr_new / rr) * d
        rr = rr_new
    return x


def backtracking_line_search(objective: Callable[[np.ndarray], float], kl: Callable[[np.ndarray], float],
                             theta, full_step, max_kl: float, *, backtrack_coef: float = 0.5,
                             max_backtracks: int = 10):
    """TRPO's line search: try ``theta + backtrack_coef^k full_step`` for k = 0, 1, ...

    Accepts the first candidate with ``kl(candidate) <= max_kl`` (the exact constraint, not
    its quadratic model) and ``objective(candidate) > objective(theta)``. If none qualifies
    the step is rejected and ``theta`` is returned unchanged (TRPO's behaviour).

    Returns ``(theta_new, info)``; info: ``accepted``, ``step_frac``, ``n_backtracks``,
    ``kl``, ``improvement`` (objective gain of the returned point).
    """
    check_range("max_kl", max_kl, 0, None, lo_open=True)
    check_range("backtrack_coef", backtrack_coef, 0, 1, lo_open=True, hi_open=True)
    check_range("max_backtracks", max_backtracks, 0, None, integer=True)
    f0 = objective(theta)
    frac = 1.0
    for k in range(max_backtracks + 1):
        candidate = theta + frac * full_step
        kl_c = kl(candidate)
        gain = objective(candidate) - f0
        if kl_c <= max_kl and gain > 0:
            return candidate, {"accepted": True, "step_frac": frac, "n_backtracks": k, "kl": kl_c,
                               "improvement": gain}
        frac *= backtrack_coef
    return theta.copy(), {"accepted": False, "step_frac": 0.0, "n_backtracks": max_backtracks,
                          "kl": 0.0, "improvement": 0.0}


def trpo_step(bandit: TokenBandit, W, states, actions, adv, max_kl: float = 0.01, *,
              damping: float = 1e-3, cg_iters: int = 10, backtrack_coef: float = 0.5,
              max_backtracks: int = 10):
    """One TRPO update of a bandit policy from a batch sampled by ``W`` (= theta_old).

    Maximises L^CPI = mean(r A) over the batch subject to the exact mean KL over the batch's
    contexts ``bandit.kl(W, W_new, states) <= max_kl`` (PPO eqs. (3)-(4)).

    Returns ``(W_new, info)``; info has the line search's fields plus ``expected_improvement``
    (g . step, the linear model's promise for the full step), ``quadratic_kl`` (0.5 step^T F
    step = max_kl up to damping), ``surrogate`` (L^CPI gain at W_new) and ``grad_norm``.
    """
    check_range("max_kl", max_kl, 0, None, lo_open=True)
    W = np.array(bandit._check_W(W), dtype=np.float64)
    adv = check_float_array("adv", adv, ndim=1)
    logp_old, cache = bandit.logp(W, states, actions)

    def surrogate(W_new):                   # L^CPI of the batch at W_new (to maximise)
        logp, _ = bandit.logp(W_new, states, actions)
        return -cpi_loss(logp, logp_old, adv)[0]

    # g = dL^CPI/dW at W_old (r = 1 there): the policy gradient of eq. (1)
    _, dlogp, _ = cpi_loss(logp_old, logp_old, adv)
    g = -bandit.logp_backward(dlogp, cache)                                # (D, V)
    # natural gradient direction x = F^{-1} g by conjugate gradient, then scale to the KL bound
    fvp = lambda v: fisher_vector_product(bandit, W, states, v, damping)   # noqa: E731
    x = conjugate_gradient(fvp, g, iters=cg_iters)
    xFx = float(np.vdot(x, fvp(x)))
    if not xFx > 0:                        # zero gradient (e.g. all advantages 0): no step
        return W.copy(), {"accepted": False, "step_frac": 0.0, "n_backtracks": 0, "kl": 0.0,
                          "improvement": 0.0, "expected_improvement": 0.0, "quadratic_kl": 0.0,
                          "surrogate": 0.0, "grad_norm": float(np.linalg.norm(g))}
    full_step = np.sqrt(2.0 * max_kl / xFx) * x                             # (D, V)
    W_new, info = backtracking_line_search(
        surrogate, lambda Wc: bandit.kl(W, Wc, states), W, full_step, max_kl,
        backtrack_coef=backtrack_coef, max_backtracks=max_backtracks)
    info.update(expected_improvement=float(np.vdot(g, full_step)),
                quadratic_kl=0.5 * float(np.vdot(full_step, fvp(full_step))),
                surrogate=info["improvement"], grad_norm=float(np.linalg.norm(g)))
    return W_new, info
