"""The training loop: it learns, it is deterministic, target-KL stops early, lr = 0 keeps the ratio at 1,
and a non-finite loss stops the run with the metric named."""
import math

import numpy as np
import pytest

from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.ppo import METRICS, last_mean, steps_to_reach, train_ppo
from minippo.classic.spaces import Box, Discrete

SMALL = dict(num_envs=2, num_steps=64, num_minibatches=2, update_epochs=2)


@pytest.mark.slow      # a training run
def test_short_training_learns():
    # 60 updates of CleanRL's loop (30k env steps, a few seconds): a random policy scores ~22
    result = train_ppo(CartPoleEnv, 30_720, seed=0)
    returns = result["episode_returns"]
    assert returns[:20].mean() < 40
    assert last_mean(result) > 150, f"mean of the last 20 returns {last_mean(result):.1f}"
    assert len(result["history"]) == 60
    # CleanRL's metrics: every update has them, finite (the episodic return may be None when no episode ended)
    last = result["history"][-1]
    for name in METRICS:
        assert name in last
        assert last[name] is None or math.isfinite(last[name])
    assert last["global_step"] == 30_720 and last["early_stop_epoch"] is None and last["epochs"] == 4
    # learning rate annealed linearly from 1e-3: update u uses 1e-3 * (1 - u / 60)
    lrs = [h["charts/learning_rate"] for h in result["history"]]
    np.testing.assert_allclose(lrs, 1e-3 * (1 - np.arange(60) / 60), rtol=1e-12)
    assert result["history"][-1]["losses/explained_variance"] > 0.2


def test_episode_bookkeeping():
    result = train_ppo(CartPoleEnv, 1024, seed=3, **SMALL)
    steps, lengths, returns = result["episode_steps"], result["episode_lengths"], result["episode_returns"]
    assert len(steps) == len(lengths) == len(returns) > 10
    np.testing.assert_array_equal(returns, lengths)                 # CartPole: reward 1 per step
    assert np.all(np.diff(steps) >= 0) and steps.max() <= 1024 and np.all(steps % 2 == 0)
    # every env step belongs to an episode that finished or is still running
    assert lengths.sum() <= 1024


def test_deterministic_for_a_seed():
    a = train_ppo(CartPoleEnv, 2048, seed=5, **SMALL)
    b = train_ppo(CartPoleEnv, 2048, seed=5, **SMALL)
    c = train_ppo(CartPoleEnv, 2048, seed=6, **SMALL)
    np.testing.assert_array_equal(a["episode_returns"], b["episode_returns"])
    for k in a["params"]:
        np.testing.assert_array_equal(a["params"][k], b["params"][k])
    assert [h["losses/approx_kl"] for h in a["history"]] == [h["losses/approx_kl"] for h in b["history"]]
    assert not np.array_equal(a["params"]["actor.0.w"], c["params"]["actor.0.w"])


def test_zero_learning_rate_keeps_the_ratio_at_one():
    result = train_ppo(CartPoleEnv, 1024, seed=0, lr=0.0, **SMALL)
    # logp_old comes from one pass over all T*N rows, the minibatches from shuffled subsets: other matrix shapes, so
    # equal only to float64 rounding (a BLAS kernel may reorder the sums). Tolerance: |delta logp| <= eps64 * (3 layers
    # + the log-softmax) * sqrt(64 hidden) * max|logp| ~ 2.2e-16 * 4 * 8 * 1 ~ 1e-14, and k1 = -log r, k3 = (r - 1) -
    # log r are then <= 1e-14 + eps64; 1e-12 leaves a 100x margin, and a real bug gives > 1e-4 (target_kl test below)
    for h in result["history"]:
        assert abs(h["losses/approx_kl"]) < 1e-12 and abs(h["losses/old_approx_kl"]) < 1e-12
        assert h["losses/clipfrac"] == 0.0             # exact: rounding-sized ratios are deep inside the band


def test_kl_old_target_stops_the_epochs_early():
    # a tiny target with a large learning rate: the KL after the first epoch already exceeds it
    result = train_ppo(CartPoleEnv, 2048, seed=0, kl_old_target=1e-4, lr=3e-3, update_epochs=8, **{
        k: v for k, v in SMALL.items() if k != "update_epochs"})
    stops = [h["early_stop_epoch"] for h in result["history"]]
    assert stops[0] == 0 and sum(s is not None for s in stops) >= len(stops) // 2
    for h in result["history"]:
        if h["early_stop_epoch"] is not None:
            # stopped after the epoch whose last minibatch crossed the target
            assert h["epochs"] == h["early_stop_epoch"] + 1 < 8 and h["losses/approx_kl"] > 1e-4
        else:
            assert h["epochs"] == 8
    free = train_ppo(CartPoleEnv, 2048, seed=0, lr=3e-3, update_epochs=8, num_envs=2, num_steps=64,
                     num_minibatches=2)
    assert all(h["early_stop_epoch"] is None and h["epochs"] == 8 for h in free["history"])


class HugeRewardCartPole(CartPoleEnv):
    """Rewards of 1e200: the squared value error overflows to inf."""

    def step(self, action):
        obs, _, term, trunc, info = super().step(action)
        return obs, 1e200, term, trunc, info


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_overflow_stops_the_run_naming_the_update():
    # the value loss names its inputs (it used to say "`x` must be finite", an internal name)
    with pytest.raises(ValueError, match=r"training stopped at update 0 .*`returns`.*no finite value loss"):
        train_ppo(HugeRewardCartPole, 1024, seed=0, **SMALL)


def test_nan_loss_stops_the_run_naming_metric_and_update(monkeypatch):
    import minippo.classic.ppo as ppo
    real = ppo.ppo_loss_and_grads
    calls = []

    def nan_on_second_update(*args):
        loss, grads, stats = real(*args)
        calls.append(1)
        if len(calls) > 4:                        # SMALL: 2 epochs x 2 minibatches per update
            stats = dict(stats, **{"losses/entropy": float("nan")})
        return loss, grads, stats

    monkeypatch.setattr(ppo, "ppo_loss_and_grads", nan_on_second_update)
    with pytest.raises(ValueError, match=r"update 1 .*`losses/entropy` is nan in epoch 0"):
        train_ppo(CartPoleEnv, 1024, seed=0, **SMALL)


def test_steps_to_reach():
    result = {"episode_returns": np.array([10.0] * 5 + [500.0] * 25), "episode_steps": np.arange(30) * 100}
    # a window of 20 may hold one return of 10 (mean 475.5) but not two: it first ends at episode 23
    assert steps_to_reach(result, 475, window=20) == 2300
    assert steps_to_reach(result, 501) is None
    assert last_mean(result) == 500.0


def test_gymnasium_env_plugs_in_unchanged():
    import gymnasium as gym   # the test extra installs it: a parity test must run, not skip
    ours = train_ppo(CartPoleEnv, 2048, seed=1, **SMALL)
    theirs = train_ppo(lambda: gym.make("CartPole-v1"), 2048, seed=1, **SMALL)
    # same dynamics, same seeding: the same episodes
    np.testing.assert_array_equal(ours["episode_returns"], theirs["episode_returns"])


def test_other_discrete_envs_work():
    class Bandit:
        """One-step episodes: action 1 pays 1, action 0 pays 0. PPO must learn to pick 1."""
        observation_space = Box(np.zeros(1), np.ones(1))
        action_space = Discrete(2)

        def reset(self, seed=None, options=None):
            return np.ones(1, dtype=np.float32), {}

        def step(self, action):
            return np.ones(1, dtype=np.float32), float(action), True, False, {}

    result = train_ppo(Bandit, 4096, seed=0, lr=3e-3, **SMALL)
    assert result["episode_returns"][-100:].mean() > 0.9


def test_every_epoch_visits_every_transition_once(monkeypatch):
    """Each epoch of an update is a permutation of the whole batch cut into minibatches: the observations of
    an epoch's minibatches, stacked, are the batch's 128 transitions, each once (no row twice), and the two
    epochs hold the same rows in another order (compared after sorting, exactly: the same arrays).
    Catches minibatch indices drawn with replacement."""
    import minippo.classic.ppo as ppo
    real, seen = ppo.ppo_loss_and_grads, []

    def record(params, obs, *args):
        seen.append(obs.copy())
        return real(params, obs, *args)

    monkeypatch.setattr(ppo, "ppo_loss_and_grads", record)
    train_ppo(CartPoleEnv, 128, seed=0, **SMALL)                  # one update: 2 epochs x 2 minibatches of 64
    assert len(seen) == 4
    epochs = [np.concatenate(seen[:2]), np.concatenate(seen[2:])]
    for rows in epochs:
        assert len(np.unique(rows, axis=0)) == 128
    np.testing.assert_array_equal(*(np.unique(rows, axis=0) for rows in epochs))
    assert not np.array_equal(*epochs)


def test_the_epoch_loop_stops_only_above_kl_old_target(monkeypatch):
    """CleanRL's target-KL check after each epoch stops when the last minibatch's approx KL is ABOVE
    kl_old_target: a first run records that number after epoch 0; the same seeded run with the target set
    exactly to it (the same computation repeated: equal bit for bit) runs every epoch, and one with half
    of it stops after epoch 0. Catches >= for >."""
    import minippo.classic.ppo as ppo
    real, kls = ppo.ppo_loss_and_grads, []

    def record(*args):
        out = real(*args)
        kls.append(out[2]["losses/approx_kl"])
        return out

    monkeypatch.setattr(ppo, "ppo_loss_and_grads", record)
    kw = dict(SMALL, num_steps=16, update_epochs=3)                # one update of 32 transitions
    train_ppo(CartPoleEnv, 32, seed=0, **kw)
    kl0 = kls[1]                                       # epoch 0's last minibatch (2 per epoch)
    assert kl0 > 0
    at = train_ppo(CartPoleEnv, 32, seed=0, kl_old_target=kl0, **kw)["history"][0]
    above = train_ppo(CartPoleEnv, 32, seed=0, kl_old_target=kl0 / 2, **kw)["history"][0]
    assert above["early_stop_epoch"] == 0 and above["epochs"] == 1
    assert at["early_stop_epoch"] != 0 and at["epochs"] > 1


def test_the_global_norm_clip_scales_the_steps():
    """max_grad_norm clips the one global norm before AdamW: with a clip of 1e-9 every gradient entry is
    <= 1e-9, so each Adam step moves an entry by at most lr * 1e-9 / adam_eps (|m_hat| / (sqrt(v_hat) + eps)
    <= max|g| / eps), 4 steps here: the weights end within 4 lr 1e-9 / eps of their init (rebuilt from the
    seed, as train_ppo draws it first). Unclipped, the same steps move them by O(lr). Catches the clip left
    out (the norm only measured)."""
    from minippo.classic.ppo import init_agent
    from minippo.classic.config import PPOConfig
    cfg = PPOConfig(**SMALL, max_grad_norm=1e-9, lr=1e-2, lr_schedule="constant")
    res = train_ppo(CartPoleEnv, 128, seed=0, **SMALL, max_grad_norm=1e-9, lr=1e-2, lr_schedule="constant")
    init = init_agent(4, 2, np.random.default_rng(0), cfg.hidden_size)
    bound = 4 * 1e-2 * 1e-9 / cfg.adam_eps
    assert max(np.abs(res["params"][k] - init[k]).max() for k in init) <= bound * (1 + 1e-6)


def test_an_episode_ends_at_the_global_step_that_counts_its_last_transition():
    """With one environment the k-th episode ends at global step len_1 + ... + len_k (its last transition
    counted; each episode starts right after the previous one): episode_steps is the running sum of
    episode_lengths, integers compared exactly. Catches the step recorded one transition early."""
    res = train_ppo(CartPoleEnv, 256, seed=0, num_envs=1, num_steps=64, num_minibatches=2, update_epochs=1)
    assert len(res["episode_lengths"]) > 3
    np.testing.assert_array_equal(res["episode_steps"], np.cumsum(res["episode_lengths"]))
