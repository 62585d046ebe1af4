"""minippo.classic: traditional PPO with (s, a, r, s', done) transitions, CleanRL's ``ppo.py`` in NumPy.

    from minippo.classic import CartPoleEnv, train_ppo
    result = train_ppo(CartPoleEnv, total_timesteps=200_000, seed=0)        # ~10 s on 2 cores
    result = train_ppo(lambda: gymnasium.make("CartPole-v1"), 200_000, 0)   # any Gymnasium-API env

To follow one iteration, read ``ppo.py``: ``train_ppo`` is the loop top to bottom (rollout,
bootstrap + GAE, K epochs x minibatches of eq. (9), target-KL stop, metrics), with the agent, the
rollout buffer and the minibatch loss + gradient below it; the formulas it calls are in
``minippo/rl/gae.py`` and ``minippo/rl/losses.py``, the networks in ``minippo/nn/mlp.py``.

Modules:

==============  ===============================================================================
ppo             ``train_ppo``: the loop; the agent (two MLPs, CleanRL's init), ``collect_rollout``,
                ``rollout_advantages`` (truncation bootstraps), ``ppo_loss_and_grads`` (eq. (9));
                ``steps_to_reach``, ``last_mean``
config          ``PPOConfig``: the hyperparameters, validated; the deprecated old names
cartpole        ``CartPoleEnv``: CartPole-v1's dynamics with the Gymnasium API (spaces: ``spaces``)
vec_env         ``SyncVectorEnv``: N copies, auto-reset, the true final observation in ``info``
run             the ``minippo classic`` command: flags, progress bar, metrics file, checkpoints
dashboard       ``plot_dashboard``: the nine monitoring panels (lesson 08, ``minippo classic --out``)
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
