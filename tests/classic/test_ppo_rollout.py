"""Termination vs truncation bootstrapping and the done-index convention, through the rollout code of
minippo.classic.ppo (collect_rollout, rollout_advantages).

A scripted env plays episodes of known length and ending; its observation names the state
(``[episode id, step in episode]``), so a hand-written value table V(s) gives every advantage by hand.
"""
import numpy as np
import pytest

from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.ppo import collect_rollout, critic_values, init_agent, rollout_advantages
from minippo.classic.spaces import Box, Discrete
from minippo.classic.vec_env import SyncVectorEnv


class ScriptedEnv:
    """Episodes of the given (length, ending) in turn; observation [episode, step]; reward 1 + step."""

    def __init__(self, script):
        self.script = list(script)
        self.observation_space = Box(np.zeros(2), np.full(2, 100.0))
        self.action_space = Discrete(2)
        self.episode = -1

    def reset(self, seed=None, options=None):
        self.episode += 1
        self.k = 0
        return np.array([self.episode, 0], dtype=np.float32), {}

    def step(self, action):
        length, ending = self.script[self.episode % len(self.script)]
        reward = 1.0 + self.k
        self.k += 1
        done = self.k == length
        return (np.array([self.episode, self.k], dtype=np.float32), reward,
                done and ending == "terminated", done and ending == "truncated", {})


def value_of(obs):
    """A made-up critic: V([e, k]) = 10 e + k + 0.5, different for every state."""
    return 10.0 * obs[:, 0] + obs[:, 1] + 0.5


def run_script(script, num_steps, value=value_of, gamma=0.9, lam=0.8):
    envs = SyncVectorEnv(lambda: ScriptedEnv(script), 1)
    obs, _ = envs.reset(seed=0)
    ro = collect_rollout(envs, lambda o: np.zeros(len(o), dtype=np.int64), obs.astype(np.float64), num_steps)
    return ro, rollout_advantages(ro, value, gamma, lam)


def test_termination_and_truncation_by_hand():
    g, lam = 0.9, 0.8
    # episode 0: 2 steps then terminated; episode 1: 2 steps then truncated; episode 2 still running
    ro, (values, next_values, adv, returns) = run_script([(2, "terminated"), (2, "truncated"), (9, "terminated")], 6)
    V = lambda e, k: 10.0 * e + k + 0.5                                       # noqa: E731
    assert ro.terminated[:, 0].tolist() == [False, True, False, False, False, False]
    assert ro.truncated[:, 0].tolist() == [False, False, False, True, False, False]
    np.testing.assert_array_equal(ro.rewards[:, 0], [1, 2, 1, 2, 1, 2])
    # deltas by hand: terminated -> no V(s'); truncated -> V(final obs [1, 2]); last row -> V([2, 2])
    d = [1 + g * V(0, 1) - V(0, 0), 2 - V(0, 1),
         1 + g * V(1, 1) - V(1, 0), 2 + g * V(1, 2) - V(1, 1),
         1 + g * V(2, 1) - V(2, 0), 2 + g * V(2, 2) - V(2, 1)]
    # the recursion restarts at each episode boundary
    expected = [d[0] + g * lam * d[1], d[1], d[2] + g * lam * d[3], d[3], d[4] + g * lam * d[5], d[5]]
    np.testing.assert_allclose(adv[:, 0], expected, rtol=1e-12)
    np.testing.assert_allclose(returns, adv + values, rtol=1e-12)
    np.testing.assert_allclose(next_values[:, 0], [V(0, 1), V(0, 2), V(1, 1), V(1, 2), V(2, 1), V(2, 2)])


def test_only_truncation_bootstraps_from_the_final_observation():
    script = [(2, "terminated"), (2, "truncated"), (9, "terminated")]
    _, (_, _, adv, _) = run_script(script, 6)
    # raise the value of the two final observations (the terminal [0, 2], the truncated [1, 2])
    bump = lambda o: value_of(o) + 100.0 * ((o[:, 1] == 2) & (o[:, 0] < 2))    # noqa: E731
    _, (_, _, adv2, _) = run_script(script, 6, value=bump)
    change = adv2[:, 0] - adv[:, 0]
    # the terminal state's value is never used; the truncated one enters row 3 with gamma and row 2 with gamma*lam*gamma
    np.testing.assert_allclose(change, [0, 0, 0.9 * 0.8 * 0.9 * 100, 0.9 * 100, 0, 0], atol=1e-9)


def test_done_index_convention_row_t_flags_mask_row_t_next_value():
    ro, (values, next_values, _, _) = run_script([(3, "terminated"), (2, "truncated")], 9)
    done = ro.terminated | ro.truncated
    for t in range(8):
        if done[t, 0]:
            # obs[t + 1] is the first observation of the next episode; final_obs[t] is the true s_{t+1}
            assert ro.obs[t + 1, 0, 1] == 0 and ro.final_obs[t, 0, 1] > 0
            assert next_values[t, 0] != values[t + 1, 0]
        else:
            np.testing.assert_array_equal(ro.final_obs[t], ro.obs[t + 1])
            assert next_values[t, 0] == values[t + 1, 0]
    np.testing.assert_array_equal(ro.next_obs, ro.final_obs[-1])              # no episode ended at the last row
    assert ro.episodes == [(2, 0, 6.0, 3), (4, 0, 3.0, 2), (7, 0, 6.0, 3)]     # (t, env, return, length)


def cleanrl_gae(rewards, values, dones_next, next_value, next_done, gamma, lam):
    """CleanRL ppo.py's loop verbatim: dones[t] is the flag stored WITH obs[t] (the previous step's done)."""
    T = rewards.shape[0]
    dones = np.concatenate([np.zeros((1,) + rewards.shape[1:]), dones_next[:-1]])   # shift by one row
    adv = np.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(T)):
        if t == T - 1:
            nextnonterminal, nextvalues = 1.0 - next_done, next_value
        else:
            nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        adv[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return adv


@pytest.mark.parametrize("max_steps", [500, 15])
def test_agrees_with_cleanrl_except_where_cleanrl_ignores_truncation(max_steps):
    params = init_agent(4, 2, np.random.default_rng(0), hidden_size=16)
    value_fn = lambda o: critic_values(params, o)[0]                         # noqa: E731
    envs = SyncVectorEnv(lambda: CartPoleEnv(max_episode_steps=max_steps), 3)
    obs, _ = envs.reset(seed=1)
    rng = np.random.default_rng(2)
    ro = collect_rollout(envs, lambda o: rng.integers(0, 2, len(o)), obs.astype(np.float64), 64)
    values, next_values, adv, _ = rollout_advantages(ro, value_fn, 0.99, 0.95)
    done = ro.terminated | ro.truncated
    assert ro.terminated.any() and ro.truncated.any() == (max_steps == 15)
    ref = cleanrl_gae(ro.rewards, values, done.astype(float), value_fn(ro.next_obs), done[-1].astype(float),
                      0.99, 0.95)
    if not ro.truncated.any():
        np.testing.assert_allclose(adv, ref, rtol=1e-12, atol=1e-12)
    else:
        # CleanRL treats truncation as termination: the steps of truncated episodes differ, the rest agree
        cols = ro.truncated.any(axis=0)
        assert not np.allclose(adv[:, cols], ref[:, cols])
        np.testing.assert_allclose(adv[:, ~cols], ref[:, ~cols], rtol=1e-12, atol=1e-12)
        # and with the truncated flags handed to it as terminations, our GAE reproduces CleanRL everywhere
        from minippo.rl.gae import gae_classic
        as_cleanrl, _ = gae_classic(ro.rewards, values, next_values, done, np.zeros_like(done), 0.99, 0.95)
        np.testing.assert_allclose(as_cleanrl, ref, rtol=1e-12, atol=1e-12)
