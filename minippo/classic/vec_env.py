"""N copies of a Gymnasium-API environment stepped in lockstep, with same-step auto-reset.

PPO collects its batch from N environments at once (CleanRL's ``envs``). When one copy's episode
ends, this wrapper resets that copy immediately, so ``step`` always returns an observation the
agent can act on. The price is that the returned observation of a finished copy is the *first*
observation of its next episode, not the last one of the episode that just ended; so the true
next observation is returned separately:

``info["final_obs"]`` (N, D)
    the true next state s_{t+1} of every copy: for a copy whose episode just ended, the final
    observation *before* the reset (needed to bootstrap a truncated episode with V(s_T));
    for every other copy, the same as the returned observation.
``info["final_mask"]`` (N,) bool
    which copies finished an episode on this step (``terminated | truncated``).
``info["episode_return"]``, ``info["episode_length"]`` (N,)
    the undiscounted return and length of the episode that just ended, where ``final_mask``
    (0 elsewhere).

Any zero-argument factory returning an env with ``reset(seed=) -> (obs, info)`` and
``step(a) -> (obs, reward, terminated, truncated, info)`` works: this package's
:class:`~minippo.classic.cartpole.CartPoleEnv` or ``lambda: gymnasium.make("CartPole-v1")``
(Gymnasium's single envs do not reset themselves; this wrapper does it).

Legend: N copies (envs), D observation features.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from minippo.checks import check_int_array, check_range


class SyncVectorEnv:
    """Step ``num_envs`` envs made by ``make_env`` one after the other, auto-resetting
    finished ones.

    Parameters
    ----------
    make_env : zero-argument factory of a Gymnasium-API env (discrete actions).
    num_envs : N, the number of copies (>= 1).
    """

    def __init__(self, make_env: Callable[[], object], num_envs: int):
        check_range("num_envs", num_envs, 1, None, integer=True)
        if not callable(make_env):
            raise TypeError(f"`make_env` must be a zero-argument callable returning an env, "
                            f"got {make_env!r}")
        self.envs = [make_env() for _ in range(num_envs)]
        self.num_envs = int(num_envs)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        if not hasattr(self.single_action_space, "n"):
            raise ValueError("`make_env` must build an env with a discrete action space "
                             "(one with `.n`)")
        self.obs_dtype = np.dtype(getattr(self.single_observation_space, "dtype", np.float32))
        self._returns = np.zeros(self.num_envs)                   # (N,) running episode return
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)   # (N,) running episode length

    def reset(self, seed: int | None = None):
        """Reset every copy; copy i gets ``seed + i`` (as in Gymnasium's vector envs and CleanRL).

        Returns ``(obs (N, D), info)``; ``info["env_infos"]`` is the list of the copies' own info
        dicts.
        """
        infos, obs = [], []
        for i, env in enumerate(self.envs):
            o, info = env.reset(seed=None if seed is None else int(seed) + i)
            obs.append(o)
            infos.append(info)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return np.stack(obs).astype(self.obs_dtype, copy=False), {"env_infos": infos}

    def step(self, actions):
        """Step every copy with its action; reset the copies whose episode ended.

        Returns ``(obs (N, D), rewards (N,), terminated (N,), truncated (N,), info)`` with the
        ``info`` keys listed in the module docstring.
        """
        actions = check_int_array("actions", actions, shape=(self.num_envs,), low=0,
                                  high=self.single_action_space.n)
        n = self.num_envs
        obs = [None] * n
        final_obs = [None] * n
        rewards = np.zeros(n)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        env_infos = [None] * n
        for i, env in enumerate(self.envs):
            o, r, term, trunc, env_infos[i] = env.step(int(actions[i]))
            rewards[i], terminated[i], truncated[i] = r, term, trunc
            final_obs[i] = o
            if term or trunc:
                # auto-reset: the agent's next input is the new episode's first observation
                o, _ = env.reset()
            obs[i] = o
        # episode statistics (what Gymnasium's RecordEpisodeStatistics reports)
        self._returns += rewards
        self._lengths += 1
        done = terminated | truncated                                  # (N,)
        episode_return = np.where(done, self._returns, 0.0)            # (N,)
        episode_length = np.where(done, self._lengths, 0)              # (N,)
        self._returns[done] = 0.0
        self._lengths[done] = 0
        info = {
            "final_obs": np.stack(final_obs).astype(self.obs_dtype, copy=False),   # (N, D)
            "final_mask": done,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "env_infos": env_infos,
        }
        return (np.stack(obs).astype(self.obs_dtype, copy=False), rewards, terminated, truncated,
                info)

    def close(self) -> None:
        for env in self.envs:
            if hasattr(env, "close"):
                env.close()
