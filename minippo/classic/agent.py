"""CleanRL's CartPole agent: separate actor and critic MLPs, and the PPO loss with its gradient.

    actor:  D -> 64 -> tanh -> 64 -> tanh -> A   logits of the categorical policy pi(a|s)
    critic: D -> 64 -> tanh -> 64 -> tanh -> 1   the state value V(s)

Parameters live in one dict (``actor.{i}.w|b``, ``critic.{i}.w|b``) so that AdamW and the global
grad-norm clipping see actor and critic together, as CleanRL's single optimizer does.

The loss of one minibatch is eq. (9) of the PPO paper (Schulman et al. 2017, arXiv:1707.06347),
written as a loss to minimise:

    loss = L^CLIP_loss + c1 * L^VF - c2 * mean(H[pi(.|s_t)])

with L^CLIP (eq. (7)) from :func:`minippo.rl.clipped_policy_loss`, L^VF (clipped or not) from
:mod:`minippo.rl.losses` and the entropy H from :mod:`minippo.rl.losses`. The
backward pass is the chain rule written out: dloss/dlogits (policy + entropy) into the actor,
c1 * dloss/dvalues into the critic.

Legend: B rows (transitions in a minibatch), D observation features, A actions.
"""
from __future__ import annotations

import numpy as np

from minippo.nn.mlp import mlp_backward, mlp_forward, mlp_init
from minippo.rl.losses import (clipped_policy_loss, clipped_value_loss, entropy_backward, entropy_from_logits,
                               kl_estimate, logprobs_backward, logprobs_from_logits, value_loss)
from minippo.rl.masked import masked_whiten

ACTOR, CRITIC = "actor.", "critic."


def init_agent(obs_dim: int, n_actions: int, rng: np.random.Generator, hidden_size: int = 64,
               dtype=np.float64) -> dict[str, np.ndarray]:
    """Actor and critic with CleanRL's orthogonal init: gain sqrt(2) on hidden layers, 0.01 on the
    actor's output (a near-uniform first policy), 1.0 on the critic's output; zero biases."""
    params = mlp_init([obs_dim, hidden_size, hidden_size, n_actions], rng, out_gain=0.01,
                      prefix=ACTOR, dtype=dtype)
    params.update(mlp_init([obs_dim, hidden_size, hidden_size, 1], rng, out_gain=1.0,
                           prefix=CRITIC, dtype=dtype))
    return params


def actor_logits(params, obs, *, check: bool = True):
    """Policy logits ``(B, A)`` for observations ``obs (B, D)``, and the backward cache."""
    return mlp_forward(params, obs, ACTOR, check=check)


def critic_values(params, obs, *, check: bool = True):
    """State values ``V(s) (B,)`` for ``obs (B, D)``, and the backward cache."""
    values, cache = mlp_forward(params, obs, CRITIC, check=check)     # (B, 1)
    return values[:, 0], cache


def sample_actions(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw one action per row from ``softmax(logits)`` by inverting the CDF with one uniform each."""
    z = logits - logits.max(axis=1, keepdims=True)                    # (B, A) stable softmax
    probs = np.exp(z)
    probs /= probs.sum(axis=1, keepdims=True)
    cdf = np.cumsum(probs[:, :-1], axis=1)                            # (B, A-1); the last bin is 1
    u = rng.random((logits.shape[0], 1))                              # (B, 1)
    return (u >= cdf).sum(axis=1)                                     # (B,) first bin with cdf > u


def ppo_loss_and_grads(params, obs, actions, logp_old, adv, returns, values_old, config):
    """Loss of eq. (9) on one minibatch, its gradient with respect to every parameter, and stats.

    Parameters
    ----------
    obs : (B, D) float64. actions : (B,) int. logp_old, values_old : (B,) stored at rollout time.
    adv, returns : (B,) from GAE (``adv`` is whitened here when ``config.whiten_advantages``).
    config : a :class:`~minippo.classic.config.PPOConfig` (clip_eps, clip_eps_value,
        value_clip, whiten_advantages, ent_coef, vf_coef).

    Returns
    -------
    loss : float. grads : dict like ``params``.
    stats : CleanRL's metric names: ``losses/policy_loss``, ``losses/value_loss``,
        ``losses/entropy``, ``losses/approx_kl`` (k3), ``losses/old_approx_kl`` (k1),
        ``losses/clipfrac`` (fraction whose clipped branch is active: CleanRL counts
        ``|r - 1| > eps`` instead, which also includes ratios outside the band on the
        unclipped side).
    """
    n = obs.shape[0]
    # actor: logits -> log pi(a_t|s_t) and the entropy of pi(.|s_t)
    logits, actor_cache = actor_logits(params, obs)                   # (B, A)
    logp, logp_cache = logprobs_from_logits(logits, actions)          # (B,)
    ent, ent_cache = entropy_from_logits(logits)                      # (B,)
    # advantage normalisation over the minibatch (CleanRL's norm_adv)
    if config.whiten_advantages:
        adv = masked_whiten(adv, None)
    # L^CLIP, eq. (7): loss and dloss/dlogp
    pg_loss, dlogp, pg_stats = clipped_policy_loss(logp, logp_old, adv, clip_eps=config.clip_eps)
    # critic: L^VF, clipped around the rollout's values or plain
    values, critic_cache = critic_values(params, obs)                 # (B,)
    if config.value_clip:
        v_loss, dvalues, _ = clipped_value_loss(values, values_old, returns, clip_eps=config.clip_eps_value)
    else:
        v_loss, dvalues, _ = value_loss(values, returns)
    entropy = float(ent.mean())
    # eq. (9) as a loss: policy + c1 * value - c2 * entropy
    loss = pg_loss + config.vf_coef * v_loss - config.ent_coef * entropy

    # backward: d loss / d logits = policy part + entropy part (d(-c2 mean H)/dH_i = -c2 / B)
    dlogits = logprobs_backward(dlogp, logp_cache)                    # (B, A)
    dlogits += entropy_backward(np.full(n, -config.ent_coef / n), ent_cache)
    _, grads = mlp_backward(dlogits, actor_cache)
    # d loss / d values = c1 * dL^VF/dvalues, into the critic's (B, 1) output
    _, critic_grads = mlp_backward((config.vf_coef * dvalues)[:, None], critic_cache)
    grads.update(critic_grads)

    stats = {
        "losses/policy_loss": float(pg_loss),
        "losses/value_loss": float(v_loss),
        "losses/entropy": entropy,
        "losses/approx_kl": float(pg_stats["approx_kl"]),
        "losses/old_approx_kl": float(kl_estimate(logp_old, logp, kind="k1").mean()),
        "losses/clipfrac": float(pg_stats["clipfrac"]),
    }
    return float(loss), grads, stats
