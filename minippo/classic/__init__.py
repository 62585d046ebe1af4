"""minippo.classic: traditional PPO with (s, a, r, s', done) transitions, CleanRL's ``ppo.py`` in NumPy.

    from minippo.classic import CartPoleEnv, train_ppo
    result = train_ppo(CartPoleEnv, total_timesteps=200_000, seed=0)        # ~10 s on 2 cores
    result = train_ppo(lambda: gymnasium.make("CartPole-v1"), 200_000, 0)   # any Gymnasium-API env

Modules, in the order of the loop:

==============  ===============================================================================
cartpole        ``CartPoleEnv``: CartPole-v1's dynamics with the Gymnasium API (spaces: ``spaces``)
vec_env         ``SyncVectorEnv``: N copies, auto-reset, the true final observation in ``info``
agent           actor and critic MLPs (``minippo.nn.mlp``), action sampling, the eq. (9) loss + gradient
rollout         collect (s, a, r, s', terminated, truncated); GAE with truncation bootstrapping
config          ``PPOConfig``: the hyperparameters, validated
ppo             ``train_ppo``, ``ppo_update``, the ``minippo classic`` command
dashboard       ``plot_dashboard``: the nine monitoring panels (lesson 08, ``minippo classic --out``)
blas            one BLAS thread for the tiny matrices (4x faster on a busy 2-core machine)
==============  ===============================================================================

Names are imported lazily: ``import minippo.classic`` loads nothing else.
"""
from __future__ import annotations

from minippo._lazy import lazy_exports

_LAZY = {
    "CartPoleEnv": "minippo.classic.cartpole",
    "SyncVectorEnv": "minippo.classic.vec_env",
    "PPOConfig": "minippo.classic.config",
    "train_ppo": "minippo.classic.ppo",
    "steps_to_reach": "minippo.classic.ppo",
    "last_mean": "minippo.classic.ppo",
    "plot_dashboard": "minippo.classic.dashboard",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, globals())
