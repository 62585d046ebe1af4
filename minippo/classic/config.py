"""Hyperparameters of classic PPO (CleanRL's ``ppo.py``), one validated dataclass.

Names follow the PPO paper (``clip_eps`` is epsilon, ``lam`` is GAE's lambda, ``vf_coef`` c1,
``ent_coef`` c2); CleanRL's flag name is given in each field's docstring where it differs.
"""
from __future__ import annotations

import ast
import inspect
from dataclasses import asdict, dataclass, fields

from minippo.checks import check_range


@dataclass
class PPOConfig:
    """Classic PPO hyperparameters. Defaults: CleanRL's ``ppo.py`` for CartPole-v1, except ``lr``
    (1e-3 instead of 2.5e-4, so that 200k steps reach a mean return of 475: see its docstring).

    Sizes: one update consumes a batch of ``num_envs * num_steps`` transitions, split into
    ``num_minibatches`` minibatches and passed over ``update_epochs`` times.
    """

    num_envs: int = 4
    """N, parallel environment copies (CleanRL ``num_envs``); 1 .. 64 typical."""
    num_steps: int = 128
    """T, steps per copy per rollout (CleanRL ``num_steps``); 64 .. 2048."""
    lr: float = 1e-3
    """Adam learning rate (CleanRL ``learning_rate``), >= 0; 1e-4 .. 3e-3 typical; 0 keeps the policy
    fixed (the "ratio stays 1" check). CartPole default 1e-3, measured on seeds 0-2 annealed over
    200k steps: the mean of the last 20 returns reaches 475 after 90-98k steps and is 500 at 200k.
    CleanRL's 2.5e-4 (the PPO paper's Atari value, Table 5) ends at 281-403 after 200k steps and
    needs 162-214k steps when annealed over 500k (``CLEANRL_DEFAULTS``)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly from ``lr`` to 0 over the run (CleanRL ``anneal_lr``)."""
    gamma: float = 0.99
    """Discount factor gamma in [0, 1]; 0.99 typical."""
    lam: float = 0.95
    """GAE lambda in [0, 1] (CleanRL ``gae_lambda``): 0 is TD(0), 1 Monte Carlo."""
    num_minibatches: int = 4
    """Minibatches per epoch (CleanRL ``num_minibatches``); must divide the batch evenly."""
    update_epochs: int = 4
    """K, passes over the batch per update (CleanRL ``update_epochs``); 1 .. 10."""
    norm_adv: bool = True
    """Whiten advantages per minibatch (zero mean, unit std) before the loss (CleanRL ``norm_adv``)."""
    clip_eps: float = 0.2
    """Policy clip range epsilon of L^CLIP, eq. (7) of Schulman et al. 2017 (CleanRL ``clip_coef``); > 0."""
    clip_vloss: bool = True
    """Clip the value update around the rollout's values (CleanRL ``clip_vloss``)."""
    clip_eps_value: float = 0.2
    """Value clip range (CleanRL reuses ``clip_coef``); > 0."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient c2 of eq. (9); >= 0, 0 .. 0.05 typical."""
    vf_coef: float = 0.5
    """Value-loss coefficient c1 of eq. (9); >= 0."""
    max_grad_norm: float = 0.5
    """Clip the global gradient norm of actor + critic to this before each Adam step; > 0."""
    target_kl: float | None = None
    """Stop an update's epochs early when the last minibatch's approx KL (k3) exceeds this
    (CleanRL ``target_kl``); None disables; 0.01 .. 0.05 typical."""
    adam_eps: float = 1e-5
    """Adam's epsilon (CleanRL passes 1e-5 instead of PyTorch's 1e-8); > 0."""
    hidden_size: int = 64
    """Width of the two hidden tanh layers of actor and critic; >= 1."""

    def __post_init__(self):
        check_range("num_envs", self.num_envs, 1, None, integer=True)
        check_range("num_steps", self.num_steps, 1, None, integer=True)
        check_range("lr", self.lr, 0, None)
        check_range("gamma", self.gamma, 0, 1)
        check_range("lam", self.lam, 0, 1)
        check_range("num_minibatches", self.num_minibatches, 1, None, integer=True)
        check_range("update_epochs", self.update_epochs, 1, None, integer=True)
        check_range("clip_eps", self.clip_eps, 0, None, lo_open=True)
        check_range("clip_eps_value", self.clip_eps_value, 0, None, lo_open=True)
        check_range("ent_coef", self.ent_coef, 0, None)
        check_range("vf_coef", self.vf_coef, 0, None)
        check_range("max_grad_norm", self.max_grad_norm, 0, None, lo_open=True)
        if self.target_kl is not None:
            check_range("target_kl", self.target_kl, 0, None, lo_open=True)
        check_range("adam_eps", self.adam_eps, 0, None, lo_open=True)
        check_range("hidden_size", self.hidden_size, 1, None, integer=True)
        for name in ("anneal_lr", "norm_adv", "clip_vloss"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False, got {getattr(self, name)!r}")
        # a minibatch must hold at least one transition and the batch must split evenly
        if self.num_minibatches > self.batch_size:
            raise ValueError(f"`num_minibatches` ({self.num_minibatches}) must be <= the batch size "
                             f"num_envs * num_steps = {self.batch_size}: a minibatch cannot be larger "
                             f"than the batch nor smaller than one transition")
        if self.batch_size % self.num_minibatches:
            raise ValueError(f"`num_minibatches` ({self.num_minibatches}) must divide the batch size "
                             f"num_envs * num_steps = {self.batch_size} evenly")

    @property
    def batch_size(self) -> int:
        """Transitions per update: ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """Transitions per gradient step: ``batch_size // num_minibatches``."""
        return self.batch_size // self.num_minibatches

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_kwargs(cls, **hyperparameters) -> "PPOConfig":
        """Build from keyword arguments; an unknown name is a ``ValueError`` listing the valid ones."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(hyperparameters) - names)
        if unknown:
            raise ValueError(f"unknown hyperparameter(s) {unknown}; valid names: {sorted(names)}")
        return cls(**hyperparameters)


CLEANRL_DEFAULTS = PPOConfig(lr=2.5e-4)
"""CleanRL ``ppo.py`` exactly (learning rate 2.5e-4), for comparison runs."""


def field_docs(cls=PPOConfig) -> dict[str, str]:
    """The docstring under each field of a dataclass (read from its source), e.g. for ``--help``."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) \
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
