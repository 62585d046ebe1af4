"""Hyperparameters of classic PPO (CleanRL's ``ppo.py``), one validated dataclass.

Names follow the PPO paper (``clip_eps`` is epsilon, ``lam`` is GAE's lambda, ``vf_coef`` c1,
``ent_coef`` c2) and the project's one vocabulary (the same knob has the same name in the toy
bandit, here and in RLHF); CleanRL's flag name is given in each field's docstring where it differs.
The names before that vocabulary (:data:`DEPRECATED_NAMES`) are accepted by
:meth:`PPOConfig.from_kwargs` and the ``minippo classic`` command for one release, with a warning.
"""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, fields

from minippo.checks import check_choice, check_range
from minippo.flags import field_docs  # noqa: F401  (the docstring under each field, e.g. for --help)

LR_SCHEDULES = ("linear", "constant")

#: old name -> new name (accepted for one release, with a DeprecationWarning)
DEPRECATED_NAMES = {
    "norm_adv": "whiten_advantages",
    "clip_vloss": "value_clip",
    "anneal_lr": "lr_schedule",           # True -> "linear", False -> "constant"
    "target_kl": "kl_old_target",
}


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
    lr_schedule: str = "linear"
    """Learning-rate schedule over the run: "linear" decays it from ``lr`` to 0, update u of U using
    ``lr * (1 - u / U)`` (CleanRL ``anneal_lr=True``, the old field); "constant" keeps ``lr`` (``anneal_lr=False``)."""
    gamma: float = 0.99
    """Discount factor gamma in [0, 1]; 0.99 typical."""
    lam: float = 0.95
    """GAE lambda in [0, 1] (CleanRL ``gae_lambda``): 0 is TD(0), 1 Monte Carlo; 0.9 .. 0.99 typical."""
    num_minibatches: int = 4
    """Minibatches per epoch (CleanRL ``num_minibatches``), 1 .. batch size, 4 .. 32 typical; must divide
    the batch evenly. The property ``minibatch_size`` is the transitions per gradient step."""
    update_epochs: int = 4
    """K, passes over the batch per update (Algorithm 1 of the PPO paper; CleanRL ``update_epochs``); 1 .. 10."""
    whiten_advantages: bool = True
    """Whiten the advantages A_t per minibatch (zero mean, unit std) before the loss (CleanRL
    ``norm_adv``, also this field's old name). True or False."""
    clip_eps: float = 0.2
    """Policy clip range epsilon of L^CLIP, eq. (7) of Schulman et al. 2017 (CleanRL ``clip_coef``); > 0,
    0.1 .. 0.3 typical."""
    value_clip: bool = True
    """Clip the value update around the rollout's values, V_old +- ``clip_eps_value``, and take the
    larger of the two squared errors (CleanRL ``clip_vloss``, also this field's old name). True or False."""
    clip_eps_value: float = 0.2
    """Value clip range around V_old, in units of the returns (CleanRL reuses ``clip_coef``); > 0, 0.2 typical."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient c2 of eq. (9); >= 0, 0 .. 0.05 typical."""
    vf_coef: float = 0.5
    """Value-loss coefficient c1 of eq. (9); >= 0, 0.5 .. 1 typical."""
    max_grad_norm: float = 0.5
    """Clip the global gradient norm of actor + critic to this before each Adam step; > 0, 0.5 .. 1 typical."""
    kl_old_target: float | None = None
    """Target of the per-update KL(pi_old || pi): stop an update's epochs early when the last
    minibatch's approx KL (k3) exceeds it (CleanRL ``target_kl``, also this field's old name); None disables;
    > 0, 0.01 .. 0.05 typical."""
    adam_eps: float = 1e-5
    """Adam's epsilon (CleanRL passes 1e-5 instead of PyTorch's 1e-8); > 0."""
    hidden_size: int = 64
    """Width of the two hidden tanh layers of actor and critic; >= 1, 64 typical."""

    def __post_init__(self):
        check_range("num_envs", self.num_envs, 1, None, integer=True)
        check_range("num_steps", self.num_steps, 1, None, integer=True)
        check_range("lr", self.lr, 0, None)
        check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_range("gamma", self.gamma, 0, 1)
        check_range("lam", self.lam, 0, 1)
        check_range("num_minibatches", self.num_minibatches, 1, None, integer=True)
        check_range("update_epochs", self.update_epochs, 1, None, integer=True)
        check_range("clip_eps", self.clip_eps, 0, None, lo_open=True)
        check_range("clip_eps_value", self.clip_eps_value, 0, None, lo_open=True)
        check_range("ent_coef", self.ent_coef, 0, None)
        check_range("vf_coef", self.vf_coef, 0, None)
        check_range("max_grad_norm", self.max_grad_norm, 0, None, lo_open=True)
        if self.kl_old_target is not None:
            check_range("kl_old_target", self.kl_old_target, 0, None, lo_open=True)
        check_range("adam_eps", self.adam_eps, 0, None, lo_open=True)
        check_range("hidden_size", self.hidden_size, 1, None, integer=True)
        for name in ("whiten_advantages", "value_clip"):
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
    def from_kwargs(cls, *, stacklevel: int = 2, **hyperparameters) -> "PPOConfig":
        """Build from keyword arguments; an unknown name is a ``ValueError`` listing the valid ones.

        A name of :data:`DEPRECATED_NAMES` is renamed (``anneal_lr=False`` becomes
        ``lr_schedule="constant"``) with a ``DeprecationWarning`` naming the new name, pointing
        ``stacklevel`` frames up (2: the caller of ``from_kwargs``); giving both spellings is an error.
        """
        hyper = dict(hyperparameters)
        for old, new in DEPRECATED_NAMES.items():
            if old not in hyper:
                continue
            if new in hyper:
                raise ValueError(f"`{old}` is the deprecated name of `{new}`: pass only `{new}`")
            value = hyper.pop(old)
            hyper[new] = deprecated_value(old, value)
            warnings.warn(f"PPOConfig: `{old}` is deprecated, use `{new}` "
                          f"({new}={hyper[new]!r}); the old name goes in the next release",
                          DeprecationWarning, stacklevel=stacklevel)
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(hyper) - names)
        if unknown:
            raise ValueError(f"unknown hyperparameter(s) {unknown}; valid names: {sorted(names)}")
        return cls(**hyper)


def deprecated_value(old: str, value):
    """The value of the new field for ``old=value`` (only ``anneal_lr`` changes type: bool -> schedule)."""
    if old != "anneal_lr":
        return value
    if not isinstance(value, bool):
        raise ValueError(f"`anneal_lr` must be True or False, got {value!r} (use `lr_schedule`)")
    return "linear" if value else "constant"


CLEANRL_DEFAULTS = PPOConfig(lr=2.5e-4)
"""CleanRL ``ppo.py`` exactly (learning rate 2.5e-4), for comparison runs."""
