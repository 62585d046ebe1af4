"""The update variants of the exact-gradient lab: the loss aggregation, the clip band and the ratio, run on
the enumerable sequence space of :mod:`minippo.studies.exact`.

Legend: N responses in the space, n sampled responses, G group size, L positions, S states, V vocab.

Each update is the library's clipped surrogate (``clipped_policy_loss`` and its variants of
:mod:`minippo.rl.loss_variants`) on a batch of the space's responses, backpropagated into
the table by :func:`minippo.studies.exact.backprop`: GRPO / Dr. GRPO advantages (``grpo_advantages``) under
each ``loss_agg`` (:func:`group_update`, its exact on-policy expectation :func:`expected_group_update`, and
the sampled training loop :func:`train`); PPO's token ratio, GSPO's sequence ratio and the whole-response
ratio off-policy (:func:`ratio_gradient`, exact moments :func:`exact_ratio_moments`); and PPO without
sampling noise, every step the exact expectation of the clipped surrogate's gradient (:func:`population_ppo`).
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_choice
from minippo.rl.group_advantages import grpo_advantages
from minippo.rl.loss_variants import aggregated_policy_loss, sequence_policy_loss
from minippo.rl.losses import CLIPPED_CASES, clip_cases, clipped_policy_loss
from minippo.studies.exact import (RIGHT, answer_length, backprop, batch_logprobs, entropy, objective,
                                   per_response_gradients, probabilities, sample)

# ----------------------------------------------------------------------------------------------
# group updates: GRPO / Dr. GRPO advantages, the three aggregations, the band, the ratio
# ----------------------------------------------------------------------------------------------

def group_update(space, rows, theta, theta_old, reward, group_size, *, loss_agg="token-mean", scale=False,
                 clip_eps=0.2, clip_eps_high=None, ratio_level="token"):
    """``(u, stats)``: the ascent direction -d loss / d theta of one minibatch of ``clipped_policy_loss``
    with GRPO advantages (``scale=True``: divided by the group's std; False: Dr. GRPO's R - mean) of the
    responses ``rows`` (contiguous groups of ``group_size``), sampled by theta_old; ``norm_len`` = L."""
    logp, logp_old, _, mask = batch_logprobs(space, rows, theta, theta_old, theta)
    adv = grpo_advantages(reward[rows], group_size, mask, scale=scale)
    check_choice("ratio_level", ratio_level, ("token", "sequence"))
    loss = aggregated_policy_loss if ratio_level == "token" else sequence_policy_loss
    _, dlogp, stats = loss(logp, logp_old, adv, mask, clip_eps, clip_eps_high, loss_agg=loss_agg, norm_len=space.L)
    return -backprop(space, theta, dlogp, rows), stats


def expected_group_update(space, theta, reward, group_size, loss_agg):
    """The exact on-policy expectation of :func:`group_update` with Dr. GRPO advantages (A = R - mean_g)
    for the per-response aggregations, or None for token-mean (its 1/n couples the whole batch).

    With h(y) = sum_t grad log pi_t / d(y) (d = |y| or L): A_i = (G-1)/G (R_i - mean of the others), so
    E[A_i h(y_i)] = (G-1)/G (E[R h] - J E[h]). For d = L, E[h] = 0 and this is (G-1)/(G L) grad J; for
    d = |y|, E[h] = sum_y pi(y) grad log pi(y) / |y| is not 0: GRPO's 1/|o| adds a push of its own."""
    if loss_agg == "token-mean":
        return None
    p = probabilities(space, theta)
    J = float(p @ reward)
    d = space.lengths if loss_agg == "seq-mean-token-mean" else np.full(space.N, float(space.L))
    w = (group_size - 1) / group_size * p * (reward - J) / d                    # (N,)
    return backprop(space, theta, np.broadcast_to(w[:, None], space.mask.shape))


def train(space, theta0, reward, *, iterations, groups, group_size, lr, epochs=1, rng, **update_options):
    """GRPO-style training of the table by SGD: each iteration samples ``groups`` groups from the current
    policy, then ``epochs`` steps ``theta += lr * u`` of :func:`group_update` on that batch (ratios move
    off 1 after the first). Returns the final theta and a history of exact metrics per iteration
    (``J``, ``entropy``, ``length_right``, ``length_wrong``) and the mean ``clipfrac`` of the epochs."""
    theta = theta0.copy()
    history = []
    for _ in range(iterations):
        history.append(exact_metrics(space, theta, reward))
        theta_old = theta.copy()
        rows = sample(space, theta_old, groups * group_size, rng)
        clip = []
        for _ in range(epochs):
            u, stats = group_update(space, rows, theta, theta_old, reward, group_size, **update_options)
            theta = theta + lr * u
            clip.append(stats["clipfrac"])
        history[-1]["clipfrac"] = float(np.mean(clip))
    history.append({**exact_metrics(space, theta, reward), "clipfrac": float("nan")})
    return theta, history


def exact_metrics(space, theta, reward) -> dict:
    """J, the entropy of whole responses and of the first token, the first token's law ``p_first`` (V,), and the
    lengths of the answers that start with token 0 (right) and token V - 2 (wrong), exactly."""
    p0 = np.exp(theta[0] - theta[0].max())
    p0 /= p0.sum()                                                                # pi(y_0), the root state
    return {"J": objective(space, theta, reward), "entropy": entropy(space, theta),
            "entropy_first": float(-p0 @ np.log(p0)), "p_first": p0.tolist(),
            "length_right": answer_length(space, theta, RIGHT), "length_wrong": answer_length(space, theta, space.V - 2)}


# ----------------------------------------------------------------------------------------------
# off-policy: the token ratio, GSPO's sequence ratio, the whole-response ratio
# ----------------------------------------------------------------------------------------------

RATIO_ESTIMATORS = ("token ratio", "sequence ratio (GSPO)", "whole-response ratio")


def _ratio_dlogp(space, rows, theta, theta_old, reward, estimator, baseline, clip_eps, clip_eps_high, weights):
    """dlogp (n, L) and the stats of :func:`ratio_gradient`'s loss."""
    check_choice("estimator", estimator, RATIO_ESTIMATORS)
    logp, logp_old, _, mask = batch_logprobs(space, rows, theta, theta_old, theta)
    a = reward[rows] - baseline if weights is None else (reward[rows] - baseline) * weights
    band = dict(clip_eps=clip_eps, clip_eps_high=clip_eps_high)
    if estimator == "whole-response ratio":
        seq, seq_old = (logp * mask).sum(axis=1), (logp_old * mask).sum(axis=1)  # (n,) log pi(y)
        _, dseq, stats = clipped_policy_loss(seq, seq_old, a, None, **band)
        cases = clip_cases(np.exp(seq - seq_old), a, None, **band)
        clipped = np.isin(cases, CLIPPED_CASES)[:, None] * mask                # every token of a clipped response
        return np.broadcast_to(dseq[:, None], mask.shape), clipped            # d log pi(y) / d logp_t = 1
    loss = aggregated_policy_loss if estimator == "token ratio" else sequence_policy_loss
    adv = a[:, None] * mask
    _, dlogp, stats = loss(logp, logp_old, adv, mask, **band, loss_agg="seq-mean-token-sum-norm", norm_len=1)
    if estimator == "token ratio":
        ratio = np.exp(logp - logp_old)                                          # r_t
    else:                                                                        # GSPO's s_b on each token
        ratio = np.exp((np.where(mask != 0, logp - logp_old, 0).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)))
        ratio = np.broadcast_to(ratio[:, None], logp.shape)
    return dlogp, np.isin(clip_cases(ratio, adv, mask, **band), CLIPPED_CASES) * mask


def ratio_gradient(space, rows, theta, theta_old, reward, estimator, *, baseline, clip_eps, clip_eps_high=None):
    """``(g, clipfrac)``: the estimate of grad J(theta) from responses ``rows`` of theta_old with the
    advantage A = R - ``baseline`` (a fixed number), by ``estimator``, each response's token sum
    averaged over responses (the same aggregation for the three, so only the ratio differs):

    * "token ratio": r_t = pi(y_t|.) / pi_old(y_t|.) on each token (PPO);
    * "sequence ratio (GSPO)": s(y) = (pi(y)/pi_old(y))^(1/|y|) on every token of y, clipped per response
      (``ratio_level="sequence"``; GSPO's own objective also averages each response's tokens);
    * "whole-response ratio": pi(y)/pi_old(y) = prod_t r_t on the response (the 1-D form of
      ``clipped_policy_loss`` on summed log-probs): E_old[(pi/pi_old) A grad log pi] = grad J(theta)
      exactly when nothing clips (importance sampling)."""
    dlogp, clipped = _ratio_dlogp(space, rows, theta, theta_old, reward, estimator, baseline, clip_eps,
                                  clip_eps_high, None)
    return -backprop(space, theta, dlogp, rows), float(clipped.sum() / space.mask[rows].sum())


def exact_ratio_moments(space, theta, theta_old, reward, estimator, *, baseline, clip_eps, clip_eps_high=None,
                        n=32) -> dict:
    """The exact mean of :func:`ratio_gradient` under sampling from theta_old, the ``spread``
    sqrt(E ||g - E g||^2) of a batch of ``n`` responses (a mean of n independent per-response terms:
    (E_y ||g_y||^2 - ||E g||^2) / n), and ``clipfrac`` = E[clipped tokens] / E[tokens] of a response: the
    fraction of clipped tokens a large batch pools (a ratio of expectations, not the expected fraction of
    a batch of ``n``), all by enumeration."""
    rows = np.arange(space.N)
    p = probabilities(space, theta_old)
    # with weights N pi_old(y), row y's dlogp is pi_old(y) times its one-response dlogp
    dlogp, clipped = _ratio_dlogp(space, rows, theta, theta_old, reward, estimator, baseline, clip_eps,
                                  clip_eps_high, space.N * p)
    mean = -backprop(space, theta, dlogp, rows)
    per = -per_response_gradients(space, theta, dlogp / np.maximum(p, 1e-300)[:, None])    # (N, S, V) g_y
    second = float(p @ (per ** 2).sum(axis=(1, 2)))
    return {"mean": mean, "spread": float(np.sqrt(max(second - (mean ** 2).sum(), 0.0) / n)),
            "clipfrac": float(p @ clipped.sum(axis=1) / (p @ space.lengths)), "n": n}


def population_ppo(space, theta0, reward, *, iterations, epochs, lr, clip_eps=0.2, clip_eps_high=None):
    """PPO without sampling noise: every iteration takes ``epochs`` steps ``theta += lr * E[g]`` with the
    EXACT expectation under pi_old of the clipped token-ratio surrogate's gradient (advantage R - J(pi_old));
    the clip still binds once the ratios leave the band. Returns the history of :func:`exact_metrics`."""
    theta, history = theta0.copy(), []
    for _ in range(iterations):
        history.append(exact_metrics(space, theta, reward))
        theta_old, J_old = theta.copy(), objective(space, theta, reward)
        w = space.N * probabilities(space, theta_old)                             # N pi_old(y): the expectation
        for _ in range(epochs):
            dlogp, clipped = _ratio_dlogp(space, np.arange(space.N), theta, theta_old, reward, "token ratio", J_old,
                                          clip_eps, clip_eps_high, w)
            theta = theta - lr * backprop(space, theta, dlogp)
        history[-1]["clipfrac"] = float(w @ clipped.sum(axis=1) / (w @ space.lengths))   # at the last epoch
    history.append({**exact_metrics(space, theta, reward), "clipfrac": float("nan")})
    return theta, history
