"""The vector wrapper: auto-reset, the true final observation, episode statistics, seeding."""
import numpy as np
import pytest

from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.vec_env import SyncVectorEnv


def test_auto_reset_returns_the_true_final_obs():
    # copy i is CartPole truncated after 3 steps; twins stepped by hand give the expected values
    envs = SyncVectorEnv(lambda: CartPoleEnv(max_episode_steps=3), num_envs=2)
    twins = [CartPoleEnv(max_episode_steps=3) for _ in range(2)]
    obs, _ = envs.reset(seed=10)
    np.testing.assert_array_equal(obs, np.stack([twins[i].reset(seed=10 + i)[0] for i in range(2)]))
    actions = np.array([[1, 0], [0, 1], [1, 1]])
    for t in range(3):
        obs, rewards, term, trunc, info = envs.step(actions[t])
        expected = [twins[i].step(int(actions[t, i])) for i in range(2)]
        true_next = np.stack([e[0] for e in expected])
        np.testing.assert_array_equal(info["final_obs"], true_next)
        np.testing.assert_array_equal(rewards, [1.0, 1.0])
        last = t == 2
        assert trunc.tolist() == [last, last] and term.tolist() == [False, False]
        assert info["final_mask"].tolist() == [last, last]
        if not last:
            np.testing.assert_array_equal(obs, true_next)           # running copies: obs is s_{t+1}
            np.testing.assert_array_equal(info["episode_return"], [0.0, 0.0])
    # after the time limit: obs is the new episode's first observation (the twins' next reset draw)
    np.testing.assert_array_equal(obs, np.stack([tw.reset()[0] for tw in twins]))
    assert not np.array_equal(obs, info["final_obs"])
    np.testing.assert_array_equal(info["episode_return"], [3.0, 3.0])
    np.testing.assert_array_equal(info["episode_length"], [3, 3])
    # the statistics restart with the new episode
    _, _, _, _, info = envs.step(np.array([0, 0]))
    assert not info["final_mask"].any()


def test_termination_auto_reset_and_statistics():
    envs = SyncVectorEnv(CartPoleEnv, num_envs=3)
    envs.reset(seed=0)
    finished, lengths = [], []
    for _ in range(200):
        # always push right: every episode terminates (the pole falls) within ~10-60 steps
        obs, _, term, trunc, info = envs.step(np.ones(3, dtype=np.int64))
        assert not trunc.any()
        np.testing.assert_array_equal(info["final_mask"], term)
        finished += info["episode_return"][term].tolist()
        lengths += info["episode_length"][term].tolist()
        fo = info["final_obs"][term]
        # a terminated final observation is outside the limits; the reset observation is not
        assert np.all((np.abs(fo[:, 0]) > 2.4) | (np.abs(fo[:, 2]) > 12 * 2 * np.pi / 360))
        assert np.all(np.abs(obs[term]) <= 0.05)
    assert len(finished) > 10 and finished == [float(n) for n in lengths]


def test_seeding_is_deterministic_and_per_copy():
    a, b = SyncVectorEnv(CartPoleEnv, 4), SyncVectorEnv(CartPoleEnv, 4)
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)
    np.testing.assert_array_equal(oa, ob)
    assert len({tuple(r) for r in oa.tolist()}) == 4               # seed + i: different copies
    rng = np.random.default_rng(0)
    for _ in range(100):
        act = rng.integers(0, 2, size=4)
        ra, rb = a.step(act), b.step(act)
        for x, y in zip(ra[:4], rb[:4]):
            np.testing.assert_array_equal(x, y)


def test_bad_input():
    with pytest.raises(ValueError, match="num_envs"):
        SyncVectorEnv(CartPoleEnv, 0)
    with pytest.raises(TypeError, match="make_env"):
        SyncVectorEnv(None, 2)
    envs = SyncVectorEnv(CartPoleEnv, 2)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="actions"):
        envs.step(np.array([0, 2]))
    with pytest.raises(ValueError, match="actions"):
        envs.step(np.array([0, 1, 1]))


def test_wraps_gymnasium_envs():
    import gymnasium as gym   # the test extra installs it: a parity test must run, not skip
    ours = SyncVectorEnv(CartPoleEnv, 2)
    theirs = SyncVectorEnv(lambda: gym.make("CartPole-v1"), 2)
    np.testing.assert_array_equal(ours.reset(seed=3)[0], theirs.reset(seed=3)[0])
    for _ in range(300):
        act = np.array([1, 0])                                      # both copies fall and auto-reset
        r1, r2 = ours.step(act), theirs.step(act)
        for x, y in zip(r1[:4], r2[:4]):
            np.testing.assert_allclose(x, y, atol=1e-6)
        np.testing.assert_allclose(r1[4]["final_obs"], r2[4]["final_obs"], atol=1e-6)
