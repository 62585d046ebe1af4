"""minippo: PPO for language-model RLHF in NumPy, from scratch, to be read beside the paper.

The names most used are importable from the top level (imported lazily, so ``import minippo``
stays fast and does not compile any numba kernel)::

    from minippo import GPTConfig, TinyGPT
    adv, ret = minippo.gae(rewards, values, mask, gamma=1.0, lam=0.95)
    loss, dlogp, stats = minippo.clipped_policy_loss(logp, logp_old, adv, mask, clip_eps=0.2)
    loss, dvalues, stats = minippo.clipped_value_loss(values, values_old, returns, mask, clip_eps=0.2)
    kl = minippo.kl_estimate(logp, logp_ref, kind="k3")
    model, state = minippo.load_model("runs/R/ppo")      # a model folder, or a run folder's model/ / policy/

Packages: ``minippo.nn`` (layers with hand-written backward, TinyGPT, MLP, AdamW, gradient check),
``minippo.rl`` (GAE, losses, KL, masked statistics: NumPy formulas, numba kernels apart behind
``minippo.kernels``),
``minippo.classic`` (CartPole PPO), ``minippo.rlhf`` (corpus, tokenizer, SFT, reward model, PPO trainer).
"""
from __future__ import annotations

from minippo._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "GPTConfig": "minippo.nn.gpt",
    "TinyGPT": "minippo.nn.gpt",
    "gae": "minippo.rl.gae",
    "gae_classic": "minippo.rl.gae",
    "clipped_policy_loss": "minippo.rl.losses",
    "clipped_value_loss": "minippo.rl.losses",
    "kl_estimate": "minippo.rl.kl",
    "load_model": "minippo.rlhf.checkpoint",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, globals())
__all__ = __all__ + ["__version__"]
