"""PPOConfig: CleanRL's defaults, and a ValueError naming the field for every bad value."""
import pytest

from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.config import CLEANRL_DEFAULTS, PPOConfig
from minippo.classic.ppo import train_ppo


def test_defaults():
    c = PPOConfig()
    assert (c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs) == (4, 128, 4, 4)
    assert (c.gamma, c.lam, c.clip_eps, c.ent_coef, c.vf_coef, c.max_grad_norm) == (0.99, 0.95, 0.2, 0.01, 0.5, 0.5)
    assert c.anneal_lr and c.norm_adv and c.clip_vloss and c.target_kl is None
    assert (c.batch_size, c.minibatch_size) == (512, 128)
    assert c.lr == 1e-3 and CLEANRL_DEFAULTS.lr == 2.5e-4


@pytest.mark.parametrize("field, value", [
    ("lr", -1e-3), ("clip_eps", 0.0), ("clip_eps", -0.2), ("clip_eps_value", 0.0), ("gamma", 1.5),
    ("lam", -0.1), ("num_envs", 0), ("num_steps", 2.5), ("update_epochs", 0), ("ent_coef", -0.01),
    ("vf_coef", -1.0), ("max_grad_norm", 0.0), ("target_kl", 0.0), ("adam_eps", 0.0), ("hidden_size", 0),
    ("num_minibatches", 0), ("norm_adv", 1), ("lr", float("nan")),
])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        PPOConfig(**{field: value})


def test_minibatch_larger_than_the_batch_or_uneven():
    with pytest.raises(ValueError, match="`num_minibatches`.*batch size num_envs \\* num_steps = 8"):
        PPOConfig(num_envs=2, num_steps=4, num_minibatches=16)      # minibatches of half a transition
    with pytest.raises(ValueError, match="`num_minibatches`.*evenly"):
        PPOConfig(num_envs=3, num_steps=5, num_minibatches=2)
    assert PPOConfig(num_envs=2, num_steps=4, num_minibatches=8).minibatch_size == 1


def test_train_ppo_validates():
    with pytest.raises(ValueError, match="`lr`"):
        train_ppo(CartPoleEnv, 1024, 0, lr=-1.0)
    with pytest.raises(ValueError, match="unknown hyperparameter.*learning_rate"):
        train_ppo(CartPoleEnv, 1024, 0, learning_rate=1e-3)
    with pytest.raises(ValueError, match="`total_timesteps`"):
        train_ppo(CartPoleEnv, 100, 0)                              # less than one batch of 512
    with pytest.raises(ValueError, match="`seed`"):
        train_ppo(CartPoleEnv, 1024, -1)
