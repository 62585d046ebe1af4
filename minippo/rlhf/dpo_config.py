"""Hyperparameters of DPO (``minippo dpo``): one validated dataclass, every field documented.

Names follow the DPO paper (Rafailov et al. 2023, arXiv:2305.18290): ``beta`` is the beta of eq. (3) (the
KL coefficient whose RL problem DPO solves in closed form) and of eq. (7) (the scale of the implicit
reward); ``loss_type`` and ``label_smoothing`` choose IPO and conservative DPO
(:func:`minippo.rl.dpo.dpo_loss`). The optimiser knobs mean what they mean in
:class:`minippo.rlhf.ppo_config.PPOConfig`. Data: the reward-model stage's preference pairs and its
train / held-out split (``minippo dpo --pairs DIR``); one step takes ``batch_prompts`` training prompts
and ALL their labelled pairs (the reward model's batching, InstructGPT sec. 3.5: a prompt's K (K - 1) / 2
comparisons in one batch element), so ``steps`` steps pass ``steps * batch_prompts / n_train_prompts``
times over the data.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from minippo.checks import check_choice, check_fields, check_range
from minippo.rl.dpo import LOSS_TYPES

LR_SCHEDULES = ("constant", "linear", "cosine")


@dataclass
class DPOConfig:
    """DPO / IPO hyperparameters; see the module docstring. Defaults: ``minippo rlhf --method dpo``."""

    # ---- length of the run ------------------------------------------------------------------
    steps: int = 300
    """Optimizer steps; >= 1. The pairs are cycled (a new seeded order every epoch)."""
    seed: int = 0
    """Seed of the batch order and of the evaluation samples; >= 0."""

    # ---- the loss ---------------------------------------------------------------------------
    beta: float = 0.1
    """beta of DPO eq. (7) (the KL coefficient of eq. (3) whose optimum DPO fits); > 0, 0.01 .. 1 typical
    (0.1 in the paper and in TRL). Smaller beta: the policy may move further from pi_ref."""
    loss_type: str = "sigmoid"
    """``"sigmoid"``: DPO (Rafailov et al. eq. (7)); ``"ipo"``: IPO's squared loss (h - 1 / (2 beta))^2
    (Azar et al. 2023, arXiv:2310.12036v2 eq. (17), tau = beta)."""
    label_smoothing: float = 0.0
    """Conservative DPO: the probability that a label is wrong, in [0, 0.5); 0 = plain DPO (sigmoid only)."""
    logp_average: bool = False
    """Use each response's MEAN token log-prob instead of the sum (TRL does this for IPO); the loss and the
    implicit rewards then read per-token units."""
    temperature: float = 1.0
    """Temperature of every log-prob (policy and reference) and of the evaluation samples, > 0 (one
    temperature everywhere, CONTRIBUTING.md; the pairs were sampled at 1)."""

    # ---- optimisation -----------------------------------------------------------------------
    batch_prompts: int = 8
    """Training prompts per step, with all their pairs (8 prompts x 28 pairs at K = 8); >= 1."""
    lr: float = 2e-4
    """Peak AdamW learning rate; >= 0 (0 keeps the policy fixed: the implicit rewards stay 0). Measured on the main
    job's stages (lesson 21): 1e-4 barely moves in 300 steps, 5e-4 drifts past KL 9 nats within 100."""
    lr_schedule: str = "linear"
    """``"constant"``, ``"linear"`` (towards 0: lr / steps at the last step) or ``"cosine"``, after the warm-up."""
    warmup_steps: int = 10
    """Steps of linear lr warm-up; in [0, steps)."""
    adam_betas: tuple = (0.9, 0.95)
    """Adam's (beta1, beta2), each in [0, 1)."""
    adam_eps: float = 1e-8
    """Adam's epsilon in the update's denominator, > 0 (1e-8 as in PyTorch)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay, >= 0."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip applied before every AdamW step, > 0."""

    # ---- evaluation, checkpoints ------------------------------------------------------------
    eval_every: int = 50
    """Evaluate every this many steps (and after the last): the held-out pairs (``eval_*`` metrics) and fresh
    samples for ``n_eval`` prompts (``gold/score``, the exact KL to pi_ref); >= 0, 0 = never (a study that
    judges the policy itself)."""
    n_eval: int = 64
    """Prompts sampled (one response each) at every evaluation; >= 1."""
    max_new_tokens: int = 24
    """Longest evaluation sample in tokens (PPO's default, so both are judged alike); >= 1."""
    checkpoint_every: int = 100
    """Save a checkpoint every this many steps (and at the end); >= 1."""

    def __post_init__(self):
        for name, lo in {"steps": 1, "seed": 0, "batch_prompts": 1, "eval_every": 0, "n_eval": 1,
                         "max_new_tokens": 1, "checkpoint_every": 1}.items():
            check_range(name, getattr(self, name), lo, None, integer=True)
        for name in ("beta", "temperature", "adam_eps", "max_grad_norm"):
            check_range(name, getattr(self, name), 0, None, lo_open=True)      # finite numbers, > 0
        for name in ("lr", "weight_decay"):
            check_range(name, getattr(self, name), 0, None)
        check_choice("loss_type", self.loss_type, LOSS_TYPES)
        check_range("label_smoothing", self.label_smoothing, 0, 0.5, hi_open=True)
        if self.loss_type == "ipo" and self.label_smoothing != 0:
            raise ValueError("`label_smoothing` applies to loss_type='sigmoid' only")
        check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_range("warmup_steps", self.warmup_steps, 0, self.steps, integer=True, hi_open=True)
        if not isinstance(self.logp_average, bool):
            raise ValueError(f"`logp_average` must be True or False, got {self.logp_average!r}")
        if not (isinstance(self.adam_betas, (tuple, list)) and len(self.adam_betas) == 2):
            raise ValueError(f"`adam_betas` must be a pair (beta1, beta2), got {self.adam_betas!r}")
        self.adam_betas = tuple(self.adam_betas)
        for i, b in enumerate(self.adam_betas):
            check_range(f"adam_betas[{i}]", b, 0, 1, hi_open=True)

    @classmethod
    def quick(cls, **overrides) -> "DPOConfig":
        """A seconds-long run for CI and smoke tests: 60 steps of 4 prompts at lr 5e-4, evaluated every 20 on 32
        prompts."""
        base = dict(steps=60, batch_prompts=4, lr=5e-4, warmup_steps=5, eval_every=20, n_eval=32, checkpoint_every=20)
        return cls(**{**base, **overrides})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["adam_betas"] = list(self.adam_betas)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DPOConfig":
        """Build from a dict (e.g. a checkpoint's JSON); an unknown key is a ``ValueError`` naming it."""
        return cls(**check_fields(cls, d, "dpo_config"))

    def replace(self, **changes) -> "DPOConfig":
        """A copy with some fields changed (validated again)."""
        return type(self).from_dict({**self.to_dict(), **changes})
