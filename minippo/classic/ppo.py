"""Classic PPO (CleanRL's ``ppo.py``, discrete actions); the ``minippo classic`` command is :mod:`minippo.classic.run`.

One iteration of the loop (Algorithm 1 of Schulman et al. 2017, arXiv:1707.06347):

1. anneal the learning rate linearly towards 0 (``lr_schedule``);
2. run the policy in N envs for T steps (:func:`~minippo.classic.rollout.collect_rollout`);
3. compute V(s_t), V(s_{t+1}) and GAE advantages, bootstrapping truncated episodes with V(s_T)
   (:func:`~minippo.classic.rollout.rollout_advantages`);
4. for K epochs, shuffle the N*T transitions into minibatches and take one Adam step per
   minibatch on the loss of eq. (9), with the global grad norm clipped; optionally stop the
   epochs early when the approximate KL to the rollout policy exceeds ``kl_old_target``;
5. log CleanRL's metrics.

One deliberate difference from CleanRL: its ``ppo.py`` sets ``next_done = terminated | truncated``
and so treats the 500-step time limit as a terminal state; here truncated episodes bootstrap with
V(s_T) (see :mod:`minippo.classic.rollout`). The learning rate default also differs (see
:class:`~minippo.classic.config.PPOConfig`).

Legend: T steps per env, N envs, D observation features, A actions, B minibatch rows.
"""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from minippo.classic.agent import ACTOR, CRITIC, actor_logits, critic_values, init_agent, \
    ppo_loss_and_grads, sample_actions
from minippo.blas import single_blas_thread
from minippo.classic.config import PPOConfig
from minippo.classic.rollout import collect_rollout, rollout_advantages
from minippo.classic.vec_env import SyncVectorEnv
from minippo.checks import check_range
from minippo.nn.optim import AdamW, clip_grad_norm, global_norm, lr_at
from minippo.rl.losses import logprobs_from_logits
from minippo.rl.masked import explained_variance

#: the per-update metrics, in the order the dashboard shows them
METRICS = ("charts/episodic_return", "charts/mean_return_last20", "losses/policy_loss", "losses/value_loss",
           "losses/entropy", "losses/approx_kl", "losses/old_approx_kl", "losses/clipfrac",
           "losses/explained_variance", "losses/grad_norm", "losses/grad_norm_actor", "losses/grad_norm_critic",
           "charts/learning_rate")


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
    callback : ``callback(record, params)``, called after every completed update with that update's
        metrics dict and the current weights (finite: a bad number stops the run before the step that
        would apply it), e.g. to save a checkpoint.
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
    with single_blas_thread():              # tiny matrices: one BLAS thread is 4x faster (blas.py)
        return _train(make_env, total_timesteps, seed, cfg, callback)


def _train(make_env, total_timesteps: int, seed: int, cfg: PPOConfig, callback) -> dict:
    """The loop of :func:`train_ppo` (arguments already validated)."""
    num_updates = total_timesteps // cfg.batch_size
    rng = np.random.default_rng(seed)
    envs = SyncVectorEnv(make_env, cfg.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    params = init_agent(obs_dim, envs.single_action_space.n, rng, cfg.hidden_size)
    optimizer = AdamW(params, lr=cfg.lr, eps=cfg.adam_eps, weight_decay=0.0)

    def policy(obs):                                   # (N, D) -> (N,): sample a_t ~ pi(.|s_t)
        logits, _ = actor_logits(params, obs, check=False)
        return sample_actions(logits, rng)

    try:
        return _loop(envs, params, optimizer, policy, rng, num_updates, seed, cfg, callback)
    finally:
        envs.close()


def _loop(envs, params, optimizer, policy, rng, num_updates, seed, cfg, callback) -> dict:
    next_obs, _ = envs.reset(seed=seed)
    ep_returns, ep_steps, ep_lengths, history = [], [], [], []
    global_step, t_start = 0, time.perf_counter()
    for update in range(num_updates):
        # 1. CleanRL's annealing: lr * (1 - update / num_updates)
        lr_now = lr_at(update, num_updates, cfg.lr, schedule=cfg.lr_schedule)
        # 2. rollout with the current (frozen) policy
        ro = collect_rollout(envs, policy, next_obs, cfg.num_steps)
        next_obs = ro.next_obs
        for t, _, ret, length in ro.episodes:
            ep_returns.append(ret)
            ep_steps.append(global_step + (t + 1) * cfg.num_envs)
            ep_lengths.append(length)
        global_step += cfg.batch_size
        # 3.-4. advantages and K epochs of minibatch steps; any bad number names the update
        try:
            record = ppo_update(params, optimizer, ro, cfg, lr_now, rng)
        except ValueError as exc:
            raise ValueError(f"training stopped at update {update} (global step {global_step}): {exc}") from exc
        # 5. metrics
        finished = [ret for _, _, ret, _ in ro.episodes]
        record.update({
            "charts/episodic_return": float(np.mean(finished)) if finished else None,
            "charts/mean_return_last20": float(np.mean(ep_returns[-20:])) if ep_returns else None,
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


def ppo_update(params: dict, optimizer: AdamW, ro, cfg: PPOConfig, lr: float,
               rng: np.random.Generator) -> dict:
    """Steps 3-4 of the loop on one rollout: GAE, then ``update_epochs`` passes of minibatch Adam
    steps on eq. (9), with target-KL early stopping. Updates ``params`` in place; returns the metrics.

    CleanRL's logging: the losses, entropy and KLs of the *last* minibatch (the approx KL is the
    one compared with ``kl_old_target``); clip fraction and grad norm (before clipping; also split
    into ``losses/grad_norm_actor`` and ``losses/grad_norm_critic``) averaged over all
    minibatches; explained variance of the rollout's values against the GAE returns.
    """
    obs_dim = ro.obs.shape[-1]
    values, _, adv, returns = rollout_advantages(ro, lambda o: critic_values(params, o)[0], cfg.gamma, cfg.lam)
    # flatten (T, N) -> (T*N,); logp_old of the frozen policy, in one batched call
    b_obs = ro.obs.reshape(-1, obs_dim)                                         # (T*N, D)
    b_actions, b_adv, b_returns, b_values = (a.reshape(-1) for a in (ro.actions, adv, returns, values))
    b_logp_old, _ = logprobs_from_logits(actor_logits(params, b_obs)[0], b_actions)   # (T*N,)
    stats, early_stop, clipfracs, grad_norms, part_norms = {}, None, [], [], []
    for epoch in range(cfg.update_epochs):
        order = rng.permutation(cfg.batch_size)
        for start in range(0, cfg.batch_size, cfg.minibatch_size):
            mb = order[start:start + cfg.minibatch_size]                       # (B,)
            loss, grads, stats = ppo_loss_and_grads(
                params, b_obs[mb], b_actions[mb], b_logp_old[mb], b_adv[mb], b_returns[mb], b_values[mb], cfg)
            # the norms before clipping: actor and critic separately, then the global one (clipped)
            part_norms.append([global_norm({k: g for k, g in grads.items() if k.startswith(prefix)})
                               for prefix in (ACTOR, CRITIC)])
            grad_norm = clip_grad_norm(grads, cfg.max_grad_norm)
            _raise_if_not_finite(dict(stats, **{"loss": loss, "losses/grad_norm": grad_norm}), epoch)
            optimizer.step(grads, lr=lr)
            clipfracs.append(stats["losses/clipfrac"])
            grad_norms.append(grad_norm)
        # CleanRL's target-KL check after each epoch (recorded only when epochs are actually skipped)
        if cfg.kl_old_target is not None and stats["losses/approx_kl"] > cfg.kl_old_target \
                and epoch < cfg.update_epochs - 1:
            early_stop = epoch
            break
    record = dict(stats)
    record.update({
        "losses/clipfrac": float(np.mean(clipfracs)),
        "losses/grad_norm": float(np.mean(grad_norms)),
        "losses/grad_norm_actor": float(np.mean([a for a, _ in part_norms])),
        "losses/grad_norm_critic": float(np.mean([c for _, c in part_norms])),
        "losses/explained_variance": explained_variance(b_values, b_returns, None),
        "early_stop_epoch": early_stop,
        "epochs": epoch + 1,
    })
    return record


def _raise_if_not_finite(values: dict, epoch: int) -> None:
    for name, v in values.items():
        if not math.isfinite(v):
            raise ValueError(f"`{name}` is {v} in epoch {epoch} (lower `lr`, or check the "
                             f"environment's rewards and observations)")


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
