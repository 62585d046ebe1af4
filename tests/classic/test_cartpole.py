"""CartPole dynamics against hand-computed steps, termination/truncation, seeding, and Gymnasium parity."""
import math

import numpy as np
import pytest

from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.spaces import Box, Discrete


def independent_step(state, action):
    """One Euler step, with the accelerations from the coupled equations of motion solved as a
    2x2 linear system (an independent form of the closed-form expressions in cartpole.py):

        (M + m) xacc + m l cos(th) thacc = F + m l thdot^2 sin(th)
        cos(th) xacc + (4/3) l thacc     = g sin(th)
    """
    M, m, l, g, tau = 1.0, 0.1, 0.5, 9.8, 0.02
    x, xd, th, thd = state
    F = 10.0 if action == 1 else -10.0
    A = np.array([[M + m, m * l * math.cos(th)], [math.cos(th), 4.0 / 3.0 * l]])
    rhs = np.array([F + m * l * thd ** 2 * math.sin(th), g * math.sin(th)])
    xacc, thacc = np.linalg.solve(A, rhs)
    return (x + tau * xd, xd + tau * xacc, th + tau * thd, thd + tau * thacc)


def test_first_step_from_rest_matches_closed_form():
    # from the upright rest state pushing right: xacc = 400/41, thacc = -600/41 exactly
    env = CartPoleEnv()
    env.reset(seed=0)
    env.state = (0.0, 0.0, 0.0, 0.0)
    obs, reward, terminated, truncated, info = env.step(1)
    np.testing.assert_allclose(env.state, (0.0, 0.02 * 400 / 41, 0.0, -0.02 * 600 / 41), rtol=1e-14, atol=1e-15)
    assert obs.dtype == np.float32 and obs.shape == (4,)
    assert (reward, terminated, truncated, info) == (1.0, False, False, {})


def test_steps_match_the_linear_system_form():
    env = CartPoleEnv()
    env.reset(seed=3)
    state = env.state
    for action in [0, 1, 1, 0, 1, 0, 0, 1, 1, 1]:
        state = independent_step(state, action)
        obs, *_ = env.step(action)
        np.testing.assert_allclose(env.state, state, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(obs, np.array(state, dtype=np.float32))


@pytest.mark.parametrize("state, action", [
    ((2.39, 1.0, 0.0, 0.0), 1),                  # x: 2.39 + 0.02 * 1.0 = 2.41 > 2.4
    ((-2.39, -1.0, 0.0, 0.0), 0),                # x < -2.4
    ((0.0, 0.0, 0.205, 0.5), 1),                 # theta: 0.205 + 0.01 > 12 deg = 0.2094
    ((0.0, 0.0, -0.205, -0.5), 0),
])
def test_termination_limits(state, action):
    env = CartPoleEnv()
    env.reset(seed=0)
    env.state = state
    _, reward, terminated, truncated, _ = env.step(action)
    assert terminated and not truncated and reward == 1.0     # the terminating step is rewarded too
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_just_inside_the_limits_does_not_terminate():
    env = CartPoleEnv()
    env.reset(seed=0)
    env.state = (2.38, 0.5, 0.0, 0.0)            # x -> 2.39
    assert env.step(1)[2] is False
    assert math.isclose(env.theta_threshold_radians, 12 * 2 * math.pi / 360)


def test_truncation_at_the_time_limit():
    env = CartPoleEnv(max_episode_steps=5)
    obs, _ = env.reset(seed=1)
    flags = []
    for _ in range(5):
        # a balancing controller keeps the pole up for 5 steps
        obs, _, term, trunc, _ = env.step(int(obs[2] + 0.5 * obs[3] > 0))
        flags.append((term, trunc))
    assert flags == [(False, False)] * 4 + [(False, True)]
    assert CartPoleEnv().max_episode_steps == 500


def test_reset_seeding_and_bounds():
    env = CartPoleEnv()
    a, info = env.reset(seed=42)
    b, _ = env.reset(seed=42)
    c, _ = env.reset()                                          # continues the stream
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and info == {}
    # the same draw Gymnasium makes: np.random.default_rng(seed).uniform(-0.05, 0.05, 4)
    np.testing.assert_array_equal(a, np.random.default_rng(42).uniform(-0.05, 0.05, 4).astype(np.float32))
    assert np.all(np.abs(a) <= 0.05) and a.dtype == np.float32
    d, _ = env.reset(seed=0, options={"low": -0.2, "high": 0.2})
    assert np.abs(d).max() > 0.05


def test_bad_input():
    env = CartPoleEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    for bad in (2, -1, 0.5, "1", True):
        with pytest.raises(ValueError, match="`action`"):
            env.step(bad)
    with pytest.raises(ValueError, match="max_episode_steps"):
        CartPoleEnv(max_episode_steps=0)


def test_spaces():
    env = CartPoleEnv()
    assert env.action_space.n == 2 and env.observation_space.shape == (4,)
    np.testing.assert_allclose(env.observation_space.high[[0, 2]], [4.8, 2 * env.theta_threshold_radians], rtol=1e-6)
    assert np.isinf(env.observation_space.high[[1, 3]]).all()
    d1, d2 = Discrete(3, seed=5), Discrete(3, seed=5)
    s1 = [d1.sample() for _ in range(20)]
    assert s1 == [d2.sample() for _ in range(20)] and set(s1) == {0, 1, 2}
    assert d1.contains(np.int64(2)) and not d1.contains(3) and not d1.contains(1.0)
    box = Box(np.array([-1.0, -np.inf]), np.array([1.0, np.inf]), seed=0)
    x = box.sample()
    assert box.contains(x) and x.dtype == np.float32
    np.testing.assert_array_equal(x, Box(box.low, box.high, seed=0).sample())


def test_parity_with_gymnasium():
    import gymnasium as gym   # the test extra installs it: a parity test must run, not skip
    ours, theirs = CartPoleEnv(), gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    flags_seen = set()
    for episode in range(12):
        o1, _ = ours.reset(seed=episode)
        o2, _ = theirs.reset(seed=episode)
        np.testing.assert_array_equal(o1, o2)
        noise = 0.02 if episode % 2 else 0.3       # odd episodes balance long enough to truncate
        while True:
            a = int(rng.integers(2)) if rng.random() < noise else int(o1[2] + 0.5 * o1[3] > 0)
            o1, r1, te1, tr1, _ = ours.step(a)
            o2, r2, te2, tr2, _ = theirs.step(a)
            np.testing.assert_allclose(o1, o2, rtol=0, atol=1e-6)
            assert (r1, te1, tr1) == (r2, te2, tr2)
            if te1 or tr1:
                flags_seen.add((te1, tr1))
                break
    assert (True, False) in flags_seen and (False, True) in flags_seen
