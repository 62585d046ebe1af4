"""Classic PPO (CleanRL's ``ppo.py``, discrete actions) as one loop: read :func:`train_ppo`
top to bottom.

It makes the envs, the agent and the optimizer, then runs Algorithm 1 of the PPO paper (Schulman et
al. 2017, arXiv:1707.06347), one update per iteration:

1. the learning rate of this update (``lr_schedule``: CleanRL's linear annealing to 0, or constant);
2. rollout: the frozen policy acts in N envs for T steps; store (s, a, r, s', terminated, truncated)
   (:func:`collect_rollout`) and book the episodes that ended;
3. bootstrap + GAE: V(s_t), V(s_{t+1}) of the true next state, advantages and returns
   (:func:`rollout_advantages`, with :func:`minippo.rl.gae.gae_classic`);
4. flatten the (T, N) batch to T*N transitions; log pi_old(a_t|s_t) in one call;
5. ``update_epochs`` epochs, each a shuffle into ``num_minibatches`` minibatches: the loss of
   eq. (9) with its gradient by hand (:func:`ppo_loss_and_grads`), the global grad norm clipped,
   one AdamW step; after an epoch, stop early when the approx KL exceeds ``kl_old_target``;
6. CleanRL's metrics (:data:`METRICS`), handed to ``callback``.

The pieces the loop calls follow it in this file, in the order it calls them. The formulas are in
:mod:`minippo.rl.gae` and :mod:`minippo.rl.losses`, the two networks are :mod:`minippo.nn.mlp`.
Nothing here parses flags or writes files: the ``minippo classic`` command is
:mod:`minippo.classic.run`.

One deliberate difference from CleanRL: its ``ppo.py`` sets ``next_done = terminated | truncated``
and so treats the 500-step time limit as a terminal state; here truncated episodes bootstrap with
V(s_T) (see :func:`collect_rollout`). The learning-rate default also differs (see
:class:`~minippo.classic.config.PPOConfig`).

Legend: T steps per env, N envs, D observation features, A actions, B minibatch rows.
"""
from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import check_finite_values, check_range
from minippo.classic.config import PPOConfig
from minippo.classic.vec_env import SyncVectorEnv
from minippo.nn.mlp import mlp_backward, mlp_forward, mlp_init
from minippo.nn.optim import AdamW, clip_grad_norm, global_norm, lr_at
from minippo.rl.gae import gae_classic
from minippo.rl.losses import (clipped_policy_loss, clipped_value_loss, entropy_backward,
                               entropy_from_logits, logprobs_backward, logprobs_from_logits,
                               value_loss)
from minippo.rl.masked import explained_variance, masked_whiten

#: the per-update metrics, in the order the dashboard shows them
METRICS = ("charts/episodic_return", "charts/mean_return_last20", "losses/policy_loss",
           "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/old_approx_kl",
           "losses/clipfrac", "losses/explained_variance", "losses/grad_norm",
           "losses/grad_norm_actor", "losses/grad_norm_critic", "charts/learning_rate")

ACTOR, CRITIC = "actor.", "critic."    # the two networks' key prefixes in the one parameter dict


def train_ppo(make_env: Callable[[], object], total_timesteps: int, seed: int = 0, *,
              callback: Callable[[dict, dict], None] | None = None, **hyperparameters) -> dict:
    """Train a PPO agent on ``make_env()`` copies for ``total_timesteps`` environment steps.

    Parameters
    ----------
    make_env : zero-argument factory of a Gymnasium-API env with discrete actions
        (``CartPoleEnv`` or ``lambda: gymnasium.make("CartPole-v1")``).
    total_timesteps : environment steps over all copies; the run does
        ``total_timesteps // (num_envs * num_steps)`` updates (as CleanRL).
    seed : seeds the envs (copy i gets ``seed + i``), the initial weights, the action sampling
        and the minibatch shuffling (one ``np.random.default_rng(seed)``).
    callback : ``callback(record, params)``, called after every completed update with that
        update's metrics dict and the current weights (finite: a bad number stops the run before
        the step that would apply it), e.g. to save a checkpoint.
    **hyperparameters : fields of :class:`~minippo.classic.config.PPOConfig`.

    Returns
    -------
    dict with
        ``episode_returns`` (E,) every finished episode's return in order of completion,
        ``episode_steps`` (E,) the global step at which each finished, ``episode_lengths`` (E,),
        ``history`` one metrics dict per update (keys :data:`METRICS`, where
        ``charts/episodic_return`` is the mean over the episodes that ended in this update's
        rollout and ``charts/mean_return_last20`` over the last 20 so far, both None before the
        first episode ends; ``charts/episodes`` the count so far; ``early_stop_epoch``:
        None or the 0-based epoch after which ``kl_old_target`` stopped, ``epochs``, ``update``,
        ``global_step``, ``sps``), ``params`` the final weights, ``config`` the hyperparameters,
        ``wall_time`` seconds.

    Raises
    ------
    ValueError naming the metric and the update if a loss becomes NaN or infinite.
    """
    cfg = PPOConfig.from_kwargs(stacklevel=3, **hyperparameters)     # old names warn at our caller
    check_range("total_timesteps", total_timesteps, cfg.batch_size, None, integer=True)
    check_range("seed", seed, 0, None, integer=True)
    if callback is not None and not callable(callback):
        raise TypeError(f"`callback` must be callable, got {callback!r}")
    batch_size, minibatch_size = cfg.batch_size, cfg.minibatch_size      # N envs x T steps, and B
    num_updates = total_timesteps // batch_size
    rng = np.random.default_rng(seed)       # weights, action sampling, minibatch shuffling
    # tiny matrices: one BLAS thread is 4x faster (blas.py); the envs close however the run ends
    with single_blas_thread(), closing(SyncVectorEnv(make_env, cfg.num_envs)) as envs:
        # the agent: actor and critic MLPs with CleanRL's init; one AdamW (CleanRL's eps) over both
        obs_dim = int(np.prod(envs.single_observation_space.shape))                          # D
        params = init_agent(obs_dim, envs.single_action_space.n, rng, cfg.hidden_size)
        optimizer = AdamW(params, lr=cfg.lr, eps=cfg.adam_eps, weight_decay=0.0)

        def policy(obs):                                   # (N, D) -> (N,): sample a_t ~ pi(.|s_t)
            logits, _ = actor_logits(params, obs, check=False)
            return sample_actions(logits, rng)

        next_obs, _ = envs.reset(seed=seed)                                                 # (N, D)
        ep_returns, ep_steps, ep_lengths, history = [], [], [], []
        global_step, t_start = 0, time.perf_counter()
        for update in range(num_updates):
            # 1. the learning rate: CleanRL's lr * (1 - update / num_updates), or constant
            lr_now = lr_at(update, num_updates, cfg.lr, schedule=cfg.lr_schedule)
            # 2. rollout with the current (frozen) policy, then the episodes that ended in it
            ro = collect_rollout(envs, policy, next_obs, cfg.num_steps)
            next_obs = ro.next_obs
            for t, _, ret, length in ro.episodes:
                ep_returns.append(ret)
                ep_steps.append(global_step + (t + 1) * cfg.num_envs)
                ep_lengths.append(length)
            global_step += batch_size
            try:                                           # a bad number below names this update
                # 3. bootstrap + GAE: truncated episodes bootstrap with V(s_T), terminated
                # ones do not
                values, _, adv, returns = rollout_advantages(ro,
                                                             lambda o: critic_values(params, o)[0],
                                                             cfg.gamma, cfg.lam)      # (T, N) each
                # 4. flatten (T, N) -> (T*N,); logp_old of the frozen policy, in one batched call
                b_obs = ro.obs.reshape(-1, obs_dim)                                       # (T*N, D)
                b_actions, b_adv, b_returns, b_values = (a.reshape(-1) for a in (ro.actions, adv,
                                                                                  returns, values))
                b_logp_old, _ = logprobs_from_logits(actor_logits(params, b_obs)[0],
                                                     b_actions)                           # (T*N,)
                # 5. K epochs x minibatches of eq. (9): loss and gradient, clip the global
                # norm, AdamW
                stats, early_stop, clipfracs, grad_norms, part_norms = {}, None, [], [], []
                for epoch in range(cfg.update_epochs):
                    order = rng.permutation(batch_size)                                     # (T*N,)
                    for start in range(0, batch_size, minibatch_size):
                        mb = order[start:start + minibatch_size]                             # (B,)
                        loss, grads, stats = ppo_loss_and_grads(params, b_obs[mb], b_actions[mb],
                                                                b_logp_old[mb], b_adv[mb],
                                                                b_returns[mb], b_values[mb], cfg)
                        # the norms before clipping: actor and critic apart, then the global one
                        # (clipped)
                        part_norms.append([global_norm({k: g for k, g in grads.items()
                                                        if k.startswith(prefix)})
                                           for prefix in (ACTOR, CRITIC)])
                        grad_norm = clip_grad_norm(grads, cfg.max_grad_norm)
                        check_finite_values(dict(stats, **{"loss": loss,
                                                           "losses/grad_norm": grad_norm}),
                                            f"in epoch {epoch} (lower `lr`, or check the "
                                            "environment's rewards and observations)")
                        optimizer.step(grads, lr=lr_now)
                        clipfracs.append(stats["losses/clipfrac"])
                        grad_norms.append(grad_norm)
                    # CleanRL's target-KL check after each epoch (recorded only when epochs are
                    # skipped)
                    if cfg.kl_old_target is not None \
                            and stats["losses/approx_kl"] > cfg.kl_old_target \
                            and epoch < cfg.update_epochs - 1:
                        early_stop = epoch
                        break
            except ValueError as exc:
                raise ValueError(f"training stopped at update {update} "
                                 f"(global step {global_step}): {exc}") from exc
            # 6. CleanRL's logging: losses, entropy and KLs of the LAST minibatch (the KL compared
            # with kl_old_target); clip fraction and grad norms averaged over all minibatches
            finished = [ret for _, _, ret, _ in ro.episodes]
            record = dict(stats)
            record.update({
                "losses/clipfrac": float(np.mean(clipfracs)),
                "losses/grad_norm": float(np.mean(grad_norms)),
                "losses/grad_norm_actor": float(np.mean([a for a, _ in part_norms])),
                "losses/grad_norm_critic": float(np.mean([c for _, c in part_norms])),
                "losses/explained_variance": explained_variance(b_values, b_returns, None),
                "early_stop_epoch": early_stop,
                "epochs": epoch + 1,
                "charts/episodic_return": float(np.mean(finished)) if finished else None,
                "charts/mean_return_last20": (float(np.mean(ep_returns[-20:])) if ep_returns
                                              else None),
                "charts/episodes": len(ep_returns),
                "charts/learning_rate": lr_now,
                "update": update,
                "global_step": global_step,
                "sps": global_step / (time.perf_counter() - t_start),
            })
            history.append(record)
            if callback is not None:
                callback(record, params)
        return {
            "episode_returns": np.array(ep_returns),
            "episode_steps": np.array(ep_steps, dtype=np.int64),
            "episode_lengths": np.array(ep_lengths, dtype=np.int64),
            "history": history,
            "params": params,
            "config": cfg.to_dict(),
            "wall_time": time.perf_counter() - t_start,
        }


# ----------------------------------------------------------------------------------------------
# the agent: actor D -> 64 -> tanh -> 64 -> tanh -> A (logits of pi(a|s)),
#            critic D -> ... -> 1 (V(s))
# ----------------------------------------------------------------------------------------------

def init_agent(obs_dim: int, n_actions: int, rng: np.random.Generator, hidden_size: int = 64,
               dtype=np.float64) -> dict[str, np.ndarray]:
    """Actor and critic in one dict (``actor.{i}.w|b``, ``critic.{i}.w|b``: AdamW and the global
    grad norm see both, as CleanRL's single optimizer does), with CleanRL's orthogonal init: gain
    sqrt(2) on hidden layers, 0.01 on the actor's output (a near-uniform first policy), 1.0 on the
    critic's output; zero biases."""
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
    """Draw one action per row from ``softmax(logits)`` by inverting the CDF with one uniform
    each."""
    z = logits - logits.max(axis=1, keepdims=True)                    # (B, A) stable softmax
    probs = np.exp(z)
    probs /= probs.sum(axis=1, keepdims=True)
    cdf = np.cumsum(probs[:, :-1], axis=1)                            # (B, A-1); the last bin is 1
    u = rng.random((logits.shape[0], 1))                              # (B, 1)
    return (u >= cdf).sum(axis=1)                                     # (B,) first bin with cdf > u


# ----------------------------------------------------------------------------------------------
# 2. rollout and 3. bootstrap + GAE
# ----------------------------------------------------------------------------------------------

@dataclass
class Rollout:
    """One rollout of N envs for T steps, time-major: row t is the transition of step t."""

    obs: np.ndarray          # (T, N, D) s_t, the observation the action was chosen in
    actions: np.ndarray      # (T, N)    a_t, int64
    rewards: np.ndarray      # (T, N)    r_t
    terminated: np.ndarray   # (T, N)    bool, step t ended the episode in a terminal state
    truncated: np.ndarray    # (T, N)    bool, step t hit the time limit
    final_obs: np.ndarray    # (T, N, D) the true s_{t+1} (before auto-reset)
    next_obs: np.ndarray     # (N, D)    where the next rollout starts (= obs of row T)
    episodes: list = field(default_factory=list)  # (step index t, env n, return, length) per
                                                  # finished episode


def collect_rollout(envs, policy: Callable[[np.ndarray], np.ndarray], next_obs: np.ndarray,
                    num_steps: int) -> Rollout:
    """Run ``policy(obs (N, D) float64) -> actions (N,)`` in ``envs`` (a
    :class:`~minippo.classic.vec_env.SyncVectorEnv`: it auto-resets and reports ``final_obs``) for
    ``num_steps`` steps from ``next_obs`` (N, D).

    Every row holds one transition: s_t, a_t, r_t, the flags the env returned for a_t and the TRUE
    next state s_{t+1} (``final_obs``, before any auto-reset). Hence the done-index convention:
    ``terminated[t]`` masks V(final_obs[t]); ``terminated[t] or truncated[t]`` stops GAE between
    rows t and t+1. (CleanRL stores ``dones[t+1]`` next to the *next* observation: the same
    information, shifted by one row.) In the TD residual delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
    (GAE paper, Schulman et al. 2016, arXiv:1506.02438, sec. 3): terminated means s_{t+1} is
    terminal, V = 0; truncated means only the clock ran out, s_{t+1} is an ordinary state,
    V(final_obs) is used. Treating truncation as termination (CleanRL's ``ppo.py`` does) teaches the
    critic that a pole still balanced at step 500 is worth nothing.
    """
    n = envs.num_envs
    obs_dim = next_obs.shape[-1]
    obs = np.empty((num_steps, n, obs_dim))                    # (T, N, D)
    final_obs = np.empty((num_steps, n, obs_dim))              # (T, N, D)
    actions = np.empty((num_steps, n), dtype=np.int64)         # (T, N)
    rewards = np.empty((num_steps, n))                         # (T, N)
    terminated = np.empty((num_steps, n), dtype=bool)          # (T, N)
    truncated = np.empty((num_steps, n), dtype=bool)           # (T, N)
    episodes = []
    current = np.asarray(next_obs, dtype=np.float64)           # (N, D)
    for t in range(num_steps):
        obs[t] = current
        actions[t] = policy(current)
        nxt, rewards[t], terminated[t], truncated[t], info = envs.step(actions[t])
        final_obs[t] = info["final_obs"]
        for i in np.flatnonzero(info["final_mask"]):
            episodes.append((t, int(i), float(info["episode_return"][i]),
                             int(info["episode_length"][i])))
        current = nxt.astype(np.float64)
    return Rollout(obs, actions, rewards, terminated, truncated, final_obs, current, episodes)


def rollout_advantages(rollout: Rollout, value_fn: Callable[[np.ndarray], np.ndarray],
                       gamma: float, lam: float):
    """``(values, next_values, adv, returns)``, each (T, N): V(s_t), V(s_{t+1}) of the TRUE next
    state (``final_obs``; equal to ``values[t + 1]`` where step t neither terminated nor truncated),
    and GAE from :func:`minippo.rl.gae.gae_classic`.

    ``value_fn(obs (M, D)) -> (M,)`` is the critic, called once on all T*N observations and once on
    all T*N true next observations: the critic is frozen during the rollout, so these batched calls
    give the numbers a step-by-step evaluation would (up to the rounding of a product over more
    rows: ``minippo.blas``).
    """
    T, N, D = rollout.obs.shape
    values = value_fn(rollout.obs.reshape(T * N, D)).reshape(T, N)                # (T, N)
    next_values = value_fn(rollout.final_obs.reshape(T * N, D)).reshape(T, N)     # (T, N)
    adv, returns = gae_classic(rollout.rewards, values, next_values, rollout.terminated,
                               rollout.truncated, gamma=gamma, lam=lam)
    return values, next_values, adv, returns


# ----------------------------------------------------------------------------------------------
# 5. the loss of one minibatch, eq. (9), and its gradient
# ----------------------------------------------------------------------------------------------

def ppo_loss_and_grads(params, obs, actions, logp_old, adv, returns, values_old, config):
    """Eq. (9) of the PPO paper as a loss to minimise,
    ``L^CLIP_loss + c1 L^VF - c2 mean(H[pi(.|s_t)])``, on one minibatch, its gradient with respect
    to every parameter (the chain rule written out: d loss / d logits of policy and entropy into
    the actor, c1 d L^VF / d values into the critic), and stats.

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
        v_loss, dvalues, _ = clipped_value_loss(values, values_old, returns,
                                                clip_eps=config.clip_eps_value)
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
        # k1 = mean(-log r), CleanRL's old_approx_kl
        "losses/old_approx_kl": float(np.mean(logp_old - logp)),
        "losses/clipfrac": float(pg_stats["clipfrac"]),
    }
    return float(loss), grads, stats


# ----------------------------------------------------------------------------------------------
# reading a result
# ----------------------------------------------------------------------------------------------

def steps_to_reach(result: dict, threshold: float = 475.0, window: int = 20) -> int | None:
    """First global step at which the mean return of the last ``window`` finished episodes is
    >= ``threshold`` (None if it never is)."""
    returns, steps = result["episode_returns"], result["episode_steps"]
    if len(returns) < window:
        return None
    rolling = np.convolve(returns, np.ones(window) / window, mode="valid")     # (E - window + 1,)
    hit = np.flatnonzero(rolling >= threshold)
    return int(steps[hit[0] + window - 1]) if hit.size else None


def last_mean(result: dict, window: int = 20) -> float:
    """Mean return of the last ``window`` finished episodes (nan if none finished)."""
    r = result["episode_returns"][-window:]
    return float(np.mean(r)) if len(r) else float("nan")
