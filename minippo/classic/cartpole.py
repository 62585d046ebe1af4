"""CartPole-v1 in plain NumPy/Python with the Gymnasium API.

A pole is hinged on a cart that moves on a frictionless track; each step the agent pushes the cart
left (action 0) or right (action 1) with a force of 10 N. The reward is +1 for every step, the
terminating one included. The dynamics are those of Barto, Sutton & Anderson (1983) as written in
Gymnasium's ``CartPole-v1`` (Florian 2007 corrected equations, explicit Euler integration, the same
constants), so a policy trained here scores the same there; ``tests/classic`` checks step-by-step
parity when ``gymnasium`` is installed.

Observation (float32, D = 4): ``[x, x_dot, theta, theta_dot]`` (cart position, cart velocity,
pole angle in radians, pole angular velocity). The internal state is float64, exactly like
Gymnasium; only the returned observation is rounded to float32.

Episode end (the distinction PPO's bootstrapping depends on):

- **terminated**: the MDP reached a terminal state: ``|x| > 2.4`` or ``|theta| > 12 deg``.
  The value of what comes after is 0.
- **truncated**: the time limit (500 steps) cut the episode; the state is not terminal and its
  value is *not* 0: an agent bootstraps with ``V(s_T)``. Both flags can be True on the same step,
  and then termination wins (Gymnasium's ``TimeLimit`` sets both).

Legend: D observation features.
"""
from __future__ import annotations

import math

import numpy as np

from minippo.classic.spaces import Box, Discrete


class CartPoleEnv:
    """CartPole-v1 (Gymnasium API): ``reset(seed=, options=) -> (obs, info)``,
    ``step(action) -> (obs, reward, terminated, truncated, info)``.

    Parameters
    ----------
    max_episode_steps : the time limit that truncates an episode (500 for v1, 200 for v0).
    """

    # physical constants of CartPole-v1 (SI units)
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5                          # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02                            # seconds between state updates (Euler step)
    # termination limits
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, max_episode_steps: int = 500):
        if isinstance(max_episode_steps, bool) \
                or not isinstance(max_episode_steps, (int, np.integer)) \
                or max_episode_steps < 1:
            raise ValueError(f"`max_episode_steps` must be an integer >= 1, "
                             f"got {max_episode_steps!r}")
        self.max_episode_steps = int(max_episode_steps)
        # observation bounds as in Gymnasium: twice the termination limits, velocities unbounded
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf],
                        dtype=np.float32)
        self.observation_space = Box(-high, high, dtype=np.float32)
        self.action_space = Discrete(2)
        self.np_random: np.random.Generator | None = None
        self.state: tuple[float, float, float, float] | None = None
        self.elapsed_steps = 0
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode: each state variable uniform in ``[low, high)`` (default +/-0.05).

        ``seed`` re-seeds the env's own Generator (``np.random.default_rng(seed)``, which is what
        Gymnasium does); ``seed=None`` continues the current stream (or draws OS entropy the first
        time). ``options={"low": .., "high": ..}`` changes the bounds, as in Gymnasium.
        """
        if seed is not None or self.np_random is None:
            self.np_random = np.random.default_rng(seed)
        options = options or {}
        low, high = float(options.get("low", -0.05)), float(options.get("high", 0.05))
        if not low <= high:
            raise ValueError(f"`options['low']` ({low}) must be <= `options['high']` ({high})")
        self.state = tuple(float(v) for v in self.np_random.uniform(low, high, size=4))
        self.elapsed_steps = 0
        self._done = False
        return np.array(self.state, dtype=np.float32), {}

    def step(self, action):
        """Advance one Euler step of ``tau`` seconds under the force chosen by ``action``."""
        if not self.action_space.contains(action):
            raise ValueError(f"`action` must be 0 or 1, got {action!r}")
        if self.state is None or self._done:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        costheta, sintheta = math.cos(theta), math.sin(theta)
        # the next three lines are the cart-pole equations of motion (Florian 2007, eqs. 23-24
        # with zero friction): angular acceleration of the pole, then linear acceleration of
        # the cart
        temp = (force + self.polemass_length * (theta_dot * theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * (costheta * costheta) / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        # explicit Euler: positions move with the *old* velocities
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.state = (x, x_dot, theta, theta_dot)
        self.elapsed_steps += 1

        terminated = bool(x < -self.x_threshold or x > self.x_threshold
                          or theta < -self.theta_threshold_radians
                          or theta > self.theta_threshold_radians)
        truncated = self.elapsed_steps >= self.max_episode_steps
        self._done = terminated or truncated
        return np.array(self.state, dtype=np.float32), 1.0, terminated, truncated, {}

    def close(self) -> None:
        """Nothing to release (kept for the Gymnasium API)."""

    def __repr__(self) -> str:
        return f"CartPoleEnv(max_episode_steps={self.max_episode_steps})"
