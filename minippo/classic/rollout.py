"""Collect (s, a, r, s', terminated, truncated) from N envs for T steps, then GAE with bootstrapping.

This is the data half of CleanRL's ``ppo.py``. The buffer is time-major, ``(T, N, ...)``, and
every array is indexed by the *transition*: row ``t`` holds ``s_t``, the action ``a_t`` taken in
it, the reward ``r_t`` and the flags the environment returned for that action, and the TRUE next
state ``s_{t+1}`` (``final_obs``: before any auto-reset). Hence the done-index convention:

    terminated[t] (step t's own flag) masks next_values[t] = V(final_obs[t]),
    terminated[t] or truncated[t] stops the GAE recursion between rows t and t+1.

(CleanRL stores ``dones[t+1]`` next to the *next* observation and writes ``1 - dones[t+1]``;
the information is the same, shifted by one row.)

Termination vs truncation, in the TD residual delta_t = r_t + gamma V(s_{t+1}) - V(s_t) (GAE paper,
Schulman et al. 2016, arXiv:1506.02438, sec. 3; GAE truncated at the rollout's end is eqs. (11)-(12)
of the PPO paper):

- terminated: s_{t+1} is terminal, its value is 0, so delta_t = r_t - V(s_t);
- truncated: only the clock ran out; s_{t+1} is an ordinary state, delta_t = r_t + gamma V(s_{t+1})
  - V(s_t) with V evaluated on the final observation. Treating truncation as termination (a common
  bug; CleanRL's ``ppo.py`` does it) teaches the critic that a pole still balanced at step 500 is
  worth nothing, although it would have kept earning reward.

Legend: T steps per env, N envs, D observation features, A actions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from minippo.rl.gae import gae_classic


@dataclass
class Rollout:
    """One rollout of N envs for T steps (time-major), as collected by :func:`collect_rollout`."""

    obs: np.ndarray          # (T, N, D) s_t, the observation the action was chosen in
    actions: np.ndarray      # (T, N)    a_t, int64
    rewards: np.ndarray      # (T, N)    r_t
    terminated: np.ndarray   # (T, N)    bool, step t ended the episode in a terminal state
    truncated: np.ndarray    # (T, N)    bool, step t hit the time limit
    final_obs: np.ndarray    # (T, N, D) the true s_{t+1} (before auto-reset)
    next_obs: np.ndarray     # (N, D)    where the next rollout starts (= obs of row T)
    episodes: list = field(default_factory=list)  # (step index t, env n, return, length) per finished episode


def collect_rollout(envs, policy: Callable[[np.ndarray], np.ndarray], next_obs: np.ndarray,
                    num_steps: int) -> Rollout:
    """Run ``policy`` in ``envs`` for ``num_steps`` steps starting from ``next_obs`` (N, D).

    ``policy(obs (N, D) float64) -> actions (N,) int``. ``envs`` is a
    :class:`~minippo.classic.vec_env.SyncVectorEnv` (it auto-resets and reports ``final_obs``).
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
            episodes.append((t, int(i), float(info["episode_return"][i]), int(info["episode_length"][i])))
        current = nxt.astype(np.float64)
    return Rollout(obs, actions, rewards, terminated, truncated, final_obs, current, episodes)


def rollout_advantages(rollout: Rollout, value_fn: Callable[[np.ndarray], np.ndarray],
                       gamma: float, lam: float):
    """Values, bootstrapped next values, GAE advantages and returns of a rollout.

    ``value_fn(obs (M, D)) -> (M,)`` is the critic. It is called once on all T*N observations
    and once on all T*N true next observations: the policy and critic are frozen during the
    rollout, so these batched calls give the numbers a step-by-step evaluation would.

    Returns
    -------
    values : (T, N) V(s_t)
    next_values : (T, N) V(s_{t+1}) of the TRUE next state (``final_obs``); where not terminated
        and not truncated this equals ``values[t + 1]``.
    adv, returns : (T, N) from :func:`minippo.rl.gae.gae_classic`.
    """
    T, N, D = rollout.obs.shape
    values = value_fn(rollout.obs.reshape(T * N, D)).reshape(T, N)                # (T, N)
    next_values = value_fn(rollout.final_obs.reshape(T * N, D)).reshape(T, N)     # (T, N)
    adv, returns = gae_classic(rollout.rewards, values, next_values, rollout.terminated,
                               rollout.truncated, gamma=gamma, lam=lam)
    return values, next_values, adv, returns
