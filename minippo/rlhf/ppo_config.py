"""Hyperparameters of canonical RLHF-PPO (:mod:`minippo.rlhf.ppo`): one validated dataclass of 25
fields.

Names follow the PPO paper (Schulman et al. 2017, arXiv:1707.06347): ``clip_eps`` is epsilon of
L^CLIP (eq. (7)), ``vf_coef`` c1 and ``ent_coef`` c2 of eq. (9), ``update_epochs`` the K epochs of
Algorithm 1, ``gamma`` and ``lam`` the GAE coefficients (eqs. (11)-(12)). Two KLs appear in RLHF-PPO
and every KL knob says which:

* ``kl_ref_*``: KL(pi || pi_ref) to the frozen reference, the penalty in the reward
  (``r_t = -kl_ref_coef * kl_t``, Ziegler et al. 2019, arXiv:1909.08593; InstructGPT eq. (2)), its
  controller, target and horizon;
* ``kl_old_target``: KL(pi_old || pi) of one update (approx KL, k3): the update stops when a
  minibatch's approx KL passes it.

Sizes: one iteration samples ``batch_size`` responses (one per prompt), then runs ``update_epochs``
passes over them in minibatches of ``minibatch_size`` responses: ``update_epochs * batch_size //
minibatch_size`` Adam steps.

What is not a field here is fixed by the algorithm (AdamW with betas (0.9, 0.95), a separate
critic (its initialisation is ``critic_init``), value clipping, its bias set to the mean score at
the first rollout, k1 in the reward, the score on the last token, sampling from the full softmax).
The knobs the lessons and ``minippo ppo`` turn besides these are
:class:`minippo.rlhf.ppo_knobs.KnobsConfig`, a subclass; the critic-free family has its own
:class:`minippo.rlhf.grpo.GRPOConfig`. Renamed fields (the old names are accepted for one release,
with a deprecation message): :data:`RENAMED`.
"""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, fields

from minippo.checks import check_choice, check_range

KL_CONTROLLERS = ("fixed", "adaptive", "ppo_paper")
CRITIC_INITS = ("reward_model", "sft", "random")
LR_SCHEDULES = ("constant", "linear")
#: the AdamW of canonical PPO, actor and critic alike (not fields: ppo_knobs.KnobsConfig's knobs)
ADAM = {"betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.0}

#: old field name -> new name (issue 14's one vocabulary); accepted for one release, with a
#: deprecation message
RENAMED = {"ppo_epochs": "update_epochs", "kl_coef": "kl_ref_coef",
           "kl_controller": "kl_ref_controller", "kl_target": "kl_ref_target",
           "kl_horizon": "kl_ref_horizon", "kl_estimator": "kl_ref_estimator",
           "kl_loss_coef": "kl_ref_loss_coef", "target_kl": "kl_old_target"}


class ConfigMethods:
    """What every RLHF config of this package shares: sizes, the quick CI config, JSON round
    trips."""

    @property
    def num_prompts(self) -> int:
        """Distinct prompts per iteration: ``batch_size // samples_per_prompt`` (a config without
        that field samples one response per prompt)."""
        return self.batch_size // getattr(self, "samples_per_prompt", 1)

    @property
    def num_minibatches(self) -> int:
        """Adam steps per epoch: ``batch_size // minibatch_size``."""
        return self.batch_size // self.minibatch_size

    @classmethod
    def quick(cls, **overrides):
        """A seconds-long run for CI and smoke tests: 30 iterations of 32 responses (minibatches of
        8)."""
        base = dict(iterations=30, batch_size=32, minibatch_size=8, checkpoint_every=10)
        return cls.from_dict({**base, **overrides})

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict):
        """Build from a dict (e.g. a checkpoint's JSON); an unknown key is a ``ValueError``; an old
        name of :data:`RENAMED` is translated with a ``DeprecationWarning``."""
        d = renamed_fields(d, cls.__name__)
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; valid names: "
                             f"{sorted(names)}")
        return cls(**d)

    def replace(self, **changes):
        """A copy with some fields changed (validated again)."""
        return type(self).from_dict({**self.to_dict(), **changes})


@dataclass
class PPOConfig(ConfigMethods):
    """Canonical RLHF-PPO hyperparameters; see the module docstring. Defaults: the ``minippo rlhf``
    run."""

    # ---- length of the run ------------------------------------------------------------------
    iterations: int = 60
    """Number of PPO iterations (rollout + update); >= 1."""
    seed: int = 0
    """Seed of the one ``np.random.Generator`` used for prompts, sampling and shuffles; >= 0."""
    checkpoint_every: int = 10
    """Save a checkpoint every this many iterations (and at the end); >= 1."""

    # ---- sampling (rollout) -----------------------------------------------------------------
    batch_size: int = 64
    """Responses sampled per iteration, one per prompt (TRL ``batch_size``); >= 1, 16 .. 512
    typical."""
    max_new_tokens: int = 24
    """Longest response in tokens (the EOS included); responses reaching it without EOS are
    penalised."""
    temperature: float = 1.0
    """Sampling temperature, > 0; also applied to the logits of the old, new and reference policy
    and of the entropy (one temperature everywhere, CONTRIBUTING.md)."""

    # ---- optimisation -----------------------------------------------------------------------
    lr: float = 1e-4
    """Adam learning rate of actor and critic; >= 0 (0 keeps the policy fixed: the ratio-is-1
    check)."""
    lr_schedule: str = "linear"
    """``"constant"`` or ``"linear"`` (decay towards 0: lr / iterations at the last iteration; the
    policy settles while the KL controller catches up, so the final KL stays below the target)."""
    max_grad_norm: float | None = 1.0
    """Global gradient-norm clip over actor and critic together (Q23), > 0; None = no clipping (the
    norm is still logged). Lesson 14 measures on vs off."""
    update_epochs: int = 4
    """K, passes over each rollout batch (TRL ``num_ppo_epochs``); >= 1, 1 .. 8 typical."""
    minibatch_size: int = 16
    """Responses per Adam step; 1 <= minibatch_size <= batch_size, must divide ``batch_size``."""

    # ---- losses (PPO paper eq. (9): L^CLIP - c1 L^VF + c2 S) ---------------------------------
    clip_eps: float = 0.2
    """epsilon of L^CLIP, eq. (7): the band [1 - eps, 1 + eps]; > 0, 0.1 .. 0.3 typical (PPO paper
    Table 1: 0.2 the best of 0.1, 0.2, 0.3; Q52)."""
    ent_coef: float = 0.0
    """c2, weight of the entropy bonus in eq. (9); >= 0 (0 in RLHF: the KL penalty keeps entropy).
    """
    vf_coef: float = 0.1
    """c1, weight of the value loss in eq. (9); >= 0 (TRL 0.1)."""
    clip_eps_value: float = 0.2
    """Value clip range: the new values are clipped to the rollout's +- this (0.5 * max(unclipped,
    clipped) squared error), in return units; > 0 (TRL ``cliprange_value`` 0.2)."""
    critic_init: str = "reward_model"
    """Weights of the critic: ``"reward_model"`` (trunk and head of the RM, its normalisation folded
    into the head; Ziegler et al. 2019), ``"sft"`` (the SFT trunk, head 0) or ``"random"`` (a fresh
    TinyGPT)."""

    # ---- advantages -------------------------------------------------------------------------
    gamma: float = 1.0
    """Discount gamma in [0, 1]; 1 in RLHF: a response is a finished episode, scored at its end
    (Q18)."""
    lam: float = 0.95
    """GAE lambda in [0, 1]; 0.95 default (Q16, Q54)."""
    whiten_advantages: bool = True
    """Whiten the advantages over the batch's valid tokens before the update (not in the PPO paper;
    Q22)."""

    # ---- rewards and their KL penalty -------------------------------------------------------
    missing_eos_penalty: float = 1.0
    """Subtracted from the score of a response that produced no EOS within ``max_new_tokens``
    (TRL ``missing_eos_penalty``); >= 0, in RM-score units (the RM has std 1 on SFT samples)."""
    kl_ref_controller: str = "adaptive"
    """``"fixed"`` (beta = ``kl_ref_coef`` forever; 0 = no KL penalty), ``"adaptive"`` (Ziegler
    et al. 2019 sec. 2.2, proportional) or ``"ppo_paper"`` (the halve / double rule of PPO paper
    sec. 4), each fed the KL to the reference per response and targeting ``kl_ref_target``
    (:mod:`minippo.rl.kl_control`; lesson 05 runs the paper's own version, on KL(pi_old, pi))."""
    kl_ref_coef: float = 0.2
    """beta, the initial KL-penalty coefficient; >= 0, 0.01 .. 0.5. The default starts high enough
    that the KL approaches the target from below while the adaptive controller lowers beta."""
    kl_ref_target: float = 4.0
    """Target of the adaptive controller: the mean per-response KL (sum over tokens of k1, nats); >
    0. 4 nats for responses of ~13 tokens (~0.3 nats per token)."""
    kl_ref_horizon: float = 1000.0
    """Adaptive controller horizon in responses (beta moves by err * batch_size / horizon); > 0."""
    kl_old_target: float | None = None
    """The KL(pi_old || pi) one update may reach: a minibatch's approx KL (k3 per token, measured in
    its forward pass, before its step) above it stops the update, that minibatch included (Q43);
    None disables; 0.02 .. 0.1 typical."""

    def __post_init__(self):
        check_config(self, ints={"iterations": 1, "seed": 0, "checkpoint_every": 1, "batch_size": 1,
                                 "max_new_tokens": 1, "update_epochs": 1, "minibatch_size": 1},
                     positive=("temperature", "clip_eps", "clip_eps_value", "kl_ref_target",
                               "kl_ref_horizon"),
                     nonneg=("lr", "ent_coef", "vf_coef", "missing_eos_penalty", "kl_ref_coef"),
                     optional_positive=("max_grad_norm", "kl_old_target"),
                     bools=("whiten_advantages",),
                     choices={"lr_schedule": LR_SCHEDULES, "critic_init": CRITIC_INITS,
                              "kl_ref_controller": KL_CONTROLLERS})
        check_range("gamma", self.gamma, 0, 1)
        check_range("lam", self.lam, 0, 1)


def renamed_fields(d: dict, owner: str = "PPOConfig") -> dict:
    """``d`` with the old names of :data:`RENAMED` translated (a ``DeprecationWarning`` each); both
    names of one field is a ``ValueError``."""
    d = dict(d)
    for old in [k for k in d if k in RENAMED]:
        new = RENAMED[old]
        warnings.warn(f"{owner} field `{old}` is now `{new}`", DeprecationWarning, stacklevel=3)
        if new in d:
            raise ValueError(f"`{old}` and `{new}` name the same field: give `{new}` only")
        d[new] = d.pop(old)
    return d


def check_config(cfg, *, ints=None, positive=(), nonneg=(), optional_positive=(), bools=(),
                 choices=None) -> None:
    """The range checks every RLHF config runs in ``__post_init__`` (a ``ValueError`` naming the
    field): ``ints`` name -> lowest value, ``positive`` > 0, ``nonneg`` >= 0, ``optional_positive``
    None or > 0, ``bools`` True or False, ``choices`` name -> allowed values; then the batch must
    split into whole minibatches."""
    for name, lo in (ints or {}).items():
        check_range(name, getattr(cfg, name), lo, None, integer=True)
    for name in positive:
        check_range(name, getattr(cfg, name), 0, None, lo_open=True)
    for name in nonneg:
        check_range(name, getattr(cfg, name), 0, None)
    for name in optional_positive:
        if getattr(cfg, name) is not None:
            check_range(name, getattr(cfg, name), 0, None, lo_open=True)
    for name in bools:
        if not isinstance(getattr(cfg, name), bool):
            raise ValueError(f"`{name}` must be True or False, got {getattr(cfg, name)!r}")
    for name, allowed in (choices or {}).items():
        check_choice(name, getattr(cfg, name), allowed)
    if cfg.minibatch_size > cfg.batch_size:
        raise ValueError(f"`minibatch_size` ({cfg.minibatch_size}) must be <= `batch_size` "
                         f"({cfg.batch_size}): a minibatch cannot be larger than the batch")
    if cfg.batch_size % cfg.minibatch_size:
        raise ValueError(f"`minibatch_size` ({cfg.minibatch_size}) must divide `batch_size` "
                         f"({cfg.batch_size}) evenly")
    n = getattr(cfg, "samples_per_prompt", 1)          # configs that sample groups of responses
    if isinstance(n, int) and n >= 1 and cfg.batch_size % n:
        raise ValueError(f"`samples_per_prompt` ({n}) must divide `batch_size` ({cfg.batch_size}) "
                         "evenly")
