"""PPOConfig: CleanRL's defaults, a ValueError naming the field for every bad value, the old names
still accepted with a DeprecationWarning naming the new one."""
import numpy as np
import pytest

from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.config import CLEANRL_DEFAULTS, PPOConfig, field_docs
from minippo.classic.ppo import train_ppo


def test_defaults():
    c = PPOConfig()
    assert (c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs) == (4, 128, 4, 4)
    assert (c.gamma, c.lam, c.clip_eps, c.ent_coef, c.vf_coef, c.max_grad_norm) == (0.99, 0.95, 0.2, 0.01, 0.5, 0.5)
    assert c.lr_schedule == "linear" and c.whiten_advantages and c.value_clip and c.kl_old_target is None
    assert (c.batch_size, c.minibatch_size) == (512, 128)
    assert c.lr == 1e-3 and CLEANRL_DEFAULTS.lr == 2.5e-4


@pytest.mark.parametrize("field, value", [
    ("lr", -1e-3), ("clip_eps", 0.0), ("clip_eps", -0.2), ("clip_eps_value", 0.0), ("gamma", 1.5),
    ("lam", -0.1), ("num_envs", 0), ("num_steps", 2.5), ("update_epochs", 0), ("ent_coef", -0.01),
    ("vf_coef", -1.0), ("max_grad_norm", 0.0), ("kl_old_target", 0.0), ("adam_eps", 0.0), ("hidden_size", 0),
    ("num_minibatches", 0), ("whiten_advantages", 1), ("value_clip", None), ("lr_schedule", "cosine"),
    ("lr_schedule", True), ("lr", float("nan")),
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


@pytest.mark.parametrize("old, value, new, expected", [
    ("norm_adv", False, "whiten_advantages", False),
    ("clip_vloss", False, "value_clip", False),
    ("anneal_lr", True, "lr_schedule", "linear"),
    ("anneal_lr", False, "lr_schedule", "constant"),
    ("target_kl", 0.02, "kl_old_target", 0.02),
])
def test_old_names_warn_and_set_the_new_field(old, value, new, expected):
    with pytest.warns(DeprecationWarning, match=f"`{old}` is deprecated, use `{new}`") as record:
        cfg = PPOConfig.from_kwargs(**{old: value})
    assert record[0].filename == __file__                           # the warning points at the caller
    assert getattr(cfg, new) == expected and old not in cfg.to_dict()


def test_old_and_new_spelling_together_or_a_bad_old_value_are_errors():
    with pytest.raises(ValueError, match="`target_kl` is the deprecated name of `kl_old_target`"):
        PPOConfig.from_kwargs(target_kl=0.01, kl_old_target=0.02)
    with pytest.raises(ValueError, match="`anneal_lr` must be True or False"):
        PPOConfig.from_kwargs(anneal_lr="linear")


def test_train_ppo_accepts_the_old_names():
    small = dict(num_envs=2, num_steps=64, num_minibatches=2, update_epochs=2)
    with pytest.warns(DeprecationWarning) as record:
        old = train_ppo(CartPoleEnv, 1024, 0, anneal_lr=False, target_kl=1e-3, **small)
    assert {str(w.message).split("`")[1] for w in record} == {"anneal_lr", "target_kl"}
    assert all(w.filename == __file__ for w in record)              # train_ppo's caller, not the library
    new = train_ppo(CartPoleEnv, 1024, 0, lr_schedule="constant", kl_old_target=1e-3, **small)
    np.testing.assert_array_equal(old["episode_returns"], new["episode_returns"])
    assert old["config"] == new["config"] and new["config"]["lr_schedule"] == "constant"
    assert [h["charts/learning_rate"] for h in new["history"]] == [1e-3] * 8     # "constant" keeps lr


def test_every_config_field_has_a_docstring_and_a_flag():
    from dataclasses import fields
    docs = field_docs(PPOConfig)                                   # also the --help text of each flag
    assert set(docs) == {f.name for f in fields(PPOConfig)}
    assert all(len(d) > 20 for d in docs.values())
