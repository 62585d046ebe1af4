"""Hyperparameters of RLHF-PPO: one validated dataclass, every field documented.

Names follow the PPO paper (Schulman et al. 2017, arXiv:1707.06347): ``clip_eps`` is epsilon of
L^CLIP (eq. (7)), ``vf_coef`` c1 and ``ent_coef`` c2 of eq. (9), ``update_epochs`` the K epochs of
Algorithm 1, ``gamma`` and ``lam`` the GAE coefficients (eqs. (11)-(12)), ``ptx_coef`` the gamma of
InstructGPT's PPO-ptx objective (eq. (2)). Two KLs appear in RLHF-PPO and every KL knob says which:

* ``kl_ref_*``: KL(pi || pi_ref) to the frozen reference, the penalty in the reward
  (``r_t = -kl_ref_coef * kl_t``, Ziegler et al. 2019, arXiv:1909.08593; InstructGPT eq. (2)), its
  controller, target, horizon and estimator; ``kl_ref_loss_coef`` puts it in the loss instead (GRPO).
* ``kl_old_*``: KL(pi_old || pi) of one update (approx KL, k3): ``kl_old_target`` the KL one update may reach,
  ``kl_old_action`` what happens when a minibatch's KL passes it (stop the epochs, or adapt the learning rate).

Sizes: one iteration samples ``batch_size`` responses (``batch_size // samples_per_prompt`` prompts,
each repeated ``samples_per_prompt`` times), then runs ``update_epochs`` passes over them in
minibatches of ``minibatch_size`` responses: ``update_epochs * batch_size // minibatch_size`` Adam steps.

Fields a lesson ablates stay here (each says which lesson), because each is a knob a practitioner meets in
TRL or OpenRLHF too: ``reward_shaping`` (13), ``kl_ref_estimator`` (15), ``critic``, ``critic_init``,
``critic_bias_init``, ``value_norm`` (16, 18), ``shared_stop_gradient`` (18), ``length_norm_alpha`` (16),
``clip_eps_high``, ``loss_agg``, ``ratio_level``, ``kl_ref_loss_estimator`` (22);
``length_bonus`` alone is no practitioner's knob: it simulates a reward model that likes long answers
(lesson 16), and stays a field so that the ablation is one config change like the others.

Renamed fields (the old names are accepted by :meth:`PPOConfig.from_dict` and as command-line flags
for one release, with a deprecation message): :data:`RENAMED`.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import warnings
from dataclasses import asdict, dataclass, fields

from minippo.checks import check_choice, check_range
from minippo.rl.kl_control import KL_LR_MAX, KL_LR_MIN
from minippo.rl.masked import LOSS_AGGS

REWARD_SHAPINGS = ("kl_final", "uniform")
KL_ESTIMATORS = ("k1", "k2", "k3")
KL_CONTROLLERS = ("fixed", "adaptive", "ppo_paper")
CRITICS = ("separate", "shared", "none")
CRITIC_INITS = ("reward_model", "sft", "random")
CRITIC_BIAS_INITS = ("mean_score", "keep")
LR_SCHEDULES = ("constant", "linear")
RATIO_LEVELS = ("token", "sequence")
ADVANTAGE_ESTIMATORS = ("gae", "grpo", "dr_grpo", "rloo", "reinforce")
KL_OLD_ACTIONS = ("early_stop", "adapt_lr")

#: old field name -> new name (issue 14's one vocabulary); accepted for one release with a deprecation message
RENAMED = {"ppo_epochs": "update_epochs", "kl_coef": "kl_ref_coef", "kl_controller": "kl_ref_controller",
           "kl_target": "kl_ref_target", "kl_horizon": "kl_ref_horizon", "kl_estimator": "kl_ref_estimator",
           "kl_loss_coef": "kl_ref_loss_coef", "target_kl": "kl_old_target"}


@dataclass
class PPOConfig:
    """RLHF-PPO hyperparameters; see the module docstring. Defaults: the tuned ``minippo rlhf`` run."""

    # ---- length of the run ------------------------------------------------------------------
    iterations: int = 60
    """Number of PPO iterations (rollout + update); >= 1."""
    seed: int = 0
    """Seed of the one ``np.random.Generator`` used for prompts, sampling, shuffles and PPO-ptx; >= 0."""

    # ---- sampling (rollout) -----------------------------------------------------------------
    batch_size: int = 64
    """Responses sampled per iteration (TRL ``batch_size``); >= 1, 16 .. 512 typical."""
    samples_per_prompt: int = 1
    """Responses per prompt (group size n of GRPO / RLOO); must divide ``batch_size``; 1 for PPO."""
    max_new_tokens: int = 24
    """Longest response in tokens (the EOS included); responses reaching it without EOS are penalised."""
    temperature: float = 1.0
    """Sampling temperature, > 0; also applied to the logits of the old, new and reference policy and
    of the entropy (one temperature everywhere, CONTRIBUTING.md)."""
    top_k: int = 0
    """Sample among the k most probable tokens only (0 = off); >= 0. Not off biases the KL (lesson 15)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1] (1 = off)."""

    # ---- optimisation -----------------------------------------------------------------------
    lr: float = 1e-4
    """Adam learning rate of the actor; >= 0 (0 keeps the policy fixed: the ratio-is-1 check)."""
    critic_lr: float | None = None
    """Adam learning rate of a separate critic; None = ``lr``; >= 0."""
    lr_schedule: str = "linear"
    """``"constant"`` or ``"linear"`` (decay to 0 at the last iteration: the policy settles while the KL
    controller catches up, so the final KL stays below the target)."""
    warmup_iterations: int = 0
    """Iterations of linear lr warm-up (``lr * (it + 1) / warmup_iterations``) before ``lr_schedule``
    takes over, for actor and critic; 0 = none; in [0, iterations)."""
    adam_betas: tuple = (0.9, 0.95)
    """Adam's (beta1, beta2), each in [0, 1)."""
    adam_eps: float = 1e-8
    """Adam's epsilon, > 0 (1e-8 as in PyTorch; 1e-5 in CleanRL)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay, >= 0 (0 in TRL's PPO)."""
    max_grad_norm: float | None = 1.0
    """Global gradient-norm clip over actor and critic together (Q23), > 0; None = no clipping (the norm is still
    logged). Lesson 17 measures on vs off."""
    update_epochs: int = 4
    """K, passes over each rollout batch (TRL ``num_ppo_epochs``); >= 1, 1 .. 8 typical."""
    minibatch_size: int = 16
    """Responses per Adam step; 1 <= minibatch_size <= batch_size, must divide ``batch_size``."""

    # ---- losses (PPO paper eq. (9): L^CLIP - c1 L^VF + c2 S) ---------------------------------
    clip_eps: float = 0.2
    """epsilon of L^CLIP, eq. (7) (the lower edge 1 - eps; also the upper one unless ``clip_eps_high``); > 0,
    0.1 .. 0.3 typical (PPO paper Table 1: 0.2 the best of 0.1, 0.2, 0.3; Q52)."""
    clip_eps_high: float | None = None
    """eps_high of an asymmetric band [1 - clip_eps, 1 + clip_eps_high]: DAPO's "Clip-Higher" (arXiv:2503.14476,
    eps_low 0.2, eps_high 0.28: a low-probability token with A > 0 can grow more, which keeps entropy up);
    None = ``clip_eps`` (PPO's symmetric band); > 0. Lesson 22 measures its effect on entropy."""
    loss_agg: str = "token-mean"
    """How the per-token terms of the policy, value, entropy and KL losses become one number
    (verl ``loss_agg_mode``, TRL ``loss_type``): ``"token-mean"`` (every valid token of the minibatch weighs
    the same: DAPO, TRL "bnpo"), ``"seq-mean-token-mean"`` (GRPO's 1/|o| per response, then the mean over
    responses: DeepSeekMath, TRL "grpo") or ``"seq-mean-token-sum-norm"`` (a constant normaliser, the sum over
    tokens / (responses * ``max_new_tokens``): Dr. GRPO, arXiv:2503.20783, TRL "dr_grpo"; Dr. GRPO finds the
    1/|o| makes wrong answers grow longer). :func:`minippo.rl.masked.aggregation_denominator`; lesson 22."""
    ratio_level: str = "token"
    """``"token"``: PPO's r_t = pi / pi_old per token; ``"sequence"``: GSPO's length-normalised sequence ratio
    (pi(y|x) / pi_old(y|x))^(1/|y|), clipped per response (arXiv:2507.18071, which uses a band of 3e-4 / 4e-4
    and ``loss_agg = "seq-mean-token-mean"``); lesson 22."""
    vf_coef: float = 0.1
    """c1, weight of the value loss in eq. (9); >= 0 (TRL 0.1)."""
    value_clip: bool = True
    """Clip the new values around the rollout's values (0.5 * max(unclipped, clipped) squared error)."""
    clip_eps_value: float = 0.2
    """Value clip range, in the units of the (normalised) values; > 0 (TRL ``cliprange_value`` 0.2)."""
    ent_coef: float = 0.0
    """c2, weight of the entropy bonus in eq. (9); >= 0 (0 in RLHF: the KL penalty keeps entropy)."""
    ptx_coef: float = 0.0
    """PPO-ptx: weight of the language-model loss on corpus text added to every minibatch loss
    (InstructGPT eq. (2)'s gamma); >= 0, 0 disables it."""
    ptx_batch_size: int = 16
    """Corpus sentences per minibatch for PPO-ptx; >= 1."""
    kl_ref_loss_coef: float = 0.0
    """Weight of a KL(pi || pi_ref) LOSS term (GRPO-style, ``kl_ref_loss_estimator`` per token) instead of /
    besides the KL in the reward; >= 0, 0 disables it."""
    kl_ref_loss_estimator: str = "k3"
    """The per-token estimator of the KL loss term, differentiated as it stands (:mod:`minippo.rl.kl`): ``"k3"``
    (GRPO, DeepSeekMath eq. (4); its gradient estimates that of KL(pi_ref || pi) per state), ``"k2"`` (gradient
    of the per-state KL(pi || pi_ref)) or ``"k1"`` (zero gradient on-policy: no KL signal). Lesson 22."""

    # ---- rewards ----------------------------------------------------------------------------
    reward_shaping: str = "kl_final"
    """``"kl_final"``: r_t = -beta kl_t, score added on the last valid token (Ziegler et al. 2019);
    ``"uniform"``: r_t = -beta kl_t + score / n on every valid token (Q35)."""
    kl_ref_estimator: str = "k1"
    """Per-token KL in the reward: ``"k1"`` logp - logp_ref (Ziegler, TRL), ``"k2"``, ``"k3"``. In the reward the estimate
    is a number and the policy gradient of -beta sum_t k_t is what moves the KL: with k1 (on-policy) that is exactly
    -beta grad KL(pi || pi_ref); with k2 or k3 it is not (k3's extra term rho - 1 meets its own token's score and largely
    cancels it: in lesson 22 the expected gradient is under half the size of grad KL and points elsewhere; :mod:`minippo.rl.kl`)."""
    missing_eos_penalty: float = 1.0
    """Subtracted from the score of a response that produced no EOS within ``max_new_tokens``
    (TRL ``missing_eos_penalty``); >= 0, in RM-score units (the RM has std 1 on SFT samples)."""
    length_penalty: float = 0.0
    """Subtracted from the score per response token (EOS included): a fix for length hacking; >= 0."""
    length_bonus: float = 0.0
    """Added to the score per response token: a deliberately length-biased reward, lesson 16's ablation of
    length hacking (a real run leaves it 0); >= 0."""
    length_norm_alpha: float = 0.0
    """Divide the score (after the length terms, before the missing-EOS penalty) by n_tokens ** alpha: seed
    001's length normalisation, alpha = 0.5 there; 0 = off; >= 0."""
    score_clip: float | None = None
    """Clip the final score to [-score_clip, score_clip] (None = off); > 0."""
    whiten_rewards: bool = False
    """Whiten the per-token rewards over the batch's valid tokens, keeping their mean (TRL); off by default."""

    # ---- advantages -------------------------------------------------------------------------
    advantage_estimator: str = "gae"
    """``"gae"`` (with the critic), or the critic-free ``"grpo"``, ``"dr_grpo"``, ``"rloo"`` (need
    ``samples_per_prompt`` >= 2) and ``"reinforce"`` (lesson 20; :func:`minippo.rlhf.ppo.advantages`)."""
    gamma: float = 1.0
    """Discount gamma in [0, 1]; 1 in RLHF: a response is a finished episode, scored at its end (Q18)."""
    lam: float = 0.95
    """GAE lambda in [0, 1]; 0.95 default (Q16, Q54)."""
    whiten_advantages: bool = True
    """Whiten GAE's advantages over the batch's valid tokens before the update (not in the PPO paper; Q22).
    The critic-free estimators (GRPO, RLOO, REINFORCE) are never whitened again: they keep their papers'
    normalisation (:func:`minippo.rlhf.ppo.advantages` says why)."""

    # ---- KL control -------------------------------------------------------------------------
    kl_ref_controller: str = "adaptive"
    """``"fixed"`` (beta = ``kl_ref_coef`` forever; 0 = no KL penalty), ``"adaptive"`` (Ziegler et al. 2019 sec. 2.2,
    proportional) or ``"ppo_paper"`` (the halve / double rule of PPO paper sec. 4: beta / 2 when the KL is below
    target / 1.5, beta x 2 above 1.5 target), each fed the KL to the reference per response and targeting
    ``kl_ref_target``. The paper applies its rule to another KL, the per-update KL(pi_old, pi) of its penalty
    objective (eq. (8)); lesson 05 runs that version (:class:`minippo.rl.kl_control.PPOPaperKLController`)."""
    kl_ref_coef: float = 0.2
    """beta, the initial KL-penalty coefficient; >= 0, 0.01 .. 0.5. The default starts high enough that the
    KL approaches the target from below while the adaptive controller lowers beta (a low start
    overshoots: beta rises too slowly to pull a fast policy back)."""
    kl_ref_target: float = 4.0
    """Target of the adaptive controller: the mean per-response KL (sum over tokens of k1, nats); > 0.
    4 nats for responses of ~13 tokens (~0.3 nats per token)."""
    kl_ref_horizon: float = 1000.0
    """Adaptive controller horizon in responses (beta moves by err * batch_size / horizon); > 0."""
    kl_old_target: float | None = None
    """The KL(pi_old || pi) one update may reach: a minibatch's approx KL (k3 per token, pi_old vs the current pi,
    measured in its forward pass, before its step) is compared with it, and ``kl_old_action`` says what follows;
    None disables; 0.02 .. 0.1 typical."""
    kl_old_action: str = "early_stop"
    """What ``kl_old_target`` does (Q43, Q45). ``"early_stop"``: the update stops when a minibatch's approx KL exceeds
    the target (that minibatch and the rest skipped). ``"adapt_lr"``: every minibatch is kept and the actor's learning
    rate follows the KL instead, rsl_rl's adaptive schedule (``minippo.rl.kl_control.kl_adaptive_lr``): lr / 1.5 when
    the approx KL exceeds 2 x target, lr x 1.5 when it is below target / 2, within [1e-5, 1e-2], set before that
    minibatch's step (from the update's second step on: :func:`minippo.rlhf.ppo.ppo_update` says why) and carried
    to the next iteration. It replaces the schedule: needs ``lr_schedule="constant"``,
    no warm-up and ``lr`` in [1e-5, 1e-2]; the critic keeps its own constant rate (rsl_rl's one Adam adapts both).
    Lesson 15 compares the two."""
    ratio_threshold: float | None = 10.0
    """Skip a minibatch whose mean ratio exceeds this (TRL ``ratio_threshold``); None disables; > 1."""

    # ---- critic -----------------------------------------------------------------------------
    critic: str = "separate"
    """``"separate"`` TinyGPT critic, ``"shared"`` value head on the actor's trunk, ``"none"`` (no
    critic: values are 0, for critic-free estimators)."""
    critic_init: str = "reward_model"
    """Weights of a separate critic: ``"reward_model"`` (trunk and head of the RM, its normalisation
    folded into the head), ``"sft"`` (the SFT trunk, head 0) or ``"random"`` (a fresh TinyGPT)."""
    critic_bias_init: str = "mean_score"
    """``"mean_score"``: at the first rollout shift the value head bias so the mean value over valid
    tokens equals the mean score (Q48); ``"keep"``: leave it."""
    shared_stop_gradient: bool = True
    """Shared critic only: the value loss does not flow into the actor's trunk (Q59)."""
    value_norm: bool = False
    """Normalise the critic's targets with running mean/std of the returns (Q46)."""

    # ---- monitoring and checkpoints ---------------------------------------------------------
    log_exact_kl: bool = False
    """Also log ``objective/kl_exact``: KL(pi || pi_ref) from the full distributions (costs one softmax)."""
    checkpoint_every: int = 10
    """Save a checkpoint every this many iterations (and at the end); >= 1."""
    dump_rollouts: bool = False
    """Write every iteration's rollout buffer (per-token arrays) to ``rollouts/iter_NNNN.npz``."""

    def __post_init__(self):
        ints = {"iterations": 1, "seed": 0, "batch_size": 1, "samples_per_prompt": 1, "max_new_tokens": 1,
                "top_k": 0, "update_epochs": 1, "minibatch_size": 1, "ptx_batch_size": 1, "checkpoint_every": 1}
        for name, lo in ints.items():
            check_range(name, getattr(self, name), lo, None, integer=True)
        for name in ("temperature", "adam_eps", "clip_eps", "clip_eps_value", "kl_ref_target",
                     "kl_ref_horizon"):
            check_range(name, getattr(self, name), 0, None, lo_open=True)
        for name in ("lr", "weight_decay", "vf_coef", "ent_coef", "ptx_coef", "kl_ref_loss_coef", "missing_eos_penalty",
                     "length_penalty", "length_bonus", "length_norm_alpha", "kl_ref_coef"):
            check_range(name, getattr(self, name), 0, None)
        check_range("top_p", self.top_p, 0, 1, lo_open=True)
        check_range("gamma", self.gamma, 0, 1)
        check_range("lam", self.lam, 0, 1)
        check_range("warmup_iterations", self.warmup_iterations, 0, self.iterations, integer=True, hi_open=True)
        if self.critic_lr is not None:
            check_range("critic_lr", self.critic_lr, 0, None)
        for name in ("kl_old_target", "score_clip", "clip_eps_high", "max_grad_norm"):
            if getattr(self, name) is not None:
                check_range(name, getattr(self, name), 0, None, lo_open=True)
        if self.ratio_threshold is not None:
            check_range("ratio_threshold", self.ratio_threshold, 1, None, lo_open=True)
        if not (isinstance(self.adam_betas, (tuple, list)) and len(self.adam_betas) == 2):
            raise ValueError(f"`adam_betas` must be a pair (beta1, beta2), got {self.adam_betas!r}")
        self.adam_betas = tuple(self.adam_betas)
        for i, b in enumerate(self.adam_betas):
            check_range(f"adam_betas[{i}]", b, 0, 1, hi_open=True)
        for name, choices in (("lr_schedule", LR_SCHEDULES), ("reward_shaping", REWARD_SHAPINGS),
                              ("kl_ref_estimator", KL_ESTIMATORS), ("kl_ref_controller", KL_CONTROLLERS),
                              ("kl_ref_loss_estimator", KL_ESTIMATORS), ("loss_agg", LOSS_AGGS),
                              ("ratio_level", RATIO_LEVELS),
                              ("critic", CRITICS), ("critic_init", CRITIC_INITS),
                              ("critic_bias_init", CRITIC_BIAS_INITS)):
            check_choice(name, getattr(self, name), choices)
        check_choice("advantage_estimator", self.advantage_estimator, ADVANTAGE_ESTIMATORS)
        check_choice("kl_old_action", self.kl_old_action, KL_OLD_ACTIONS)
        if self.kl_old_action == "adapt_lr":
            # the KL-adapted rate replaces the schedule: it starts at lr and moves within the rule's bounds
            if self.kl_old_target is None:
                raise ValueError("`kl_old_target` must be set when `kl_old_action` is 'adapt_lr' (the KL the rate "
                                 "aims at)")
            if self.lr_schedule != "constant" or self.warmup_iterations:
                raise ValueError(f"`lr_schedule` must be 'constant' and `warmup_iterations` 0 when `kl_old_action` "
                                 f"is 'adapt_lr' (the KL sets the rate), got {self.lr_schedule!r} and "
                                 f"{self.warmup_iterations}")
            check_range("lr", self.lr, KL_LR_MIN, KL_LR_MAX)
        for name in ("value_clip", "whiten_rewards", "whiten_advantages", "shared_stop_gradient", "value_norm",
                     "log_exact_kl", "dump_rollouts"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False, got {getattr(self, name)!r}")
        # the batch must split into whole minibatches and whole prompt groups
        if self.minibatch_size > self.batch_size:
            raise ValueError(f"`minibatch_size` ({self.minibatch_size}) must be <= `batch_size` "
                             f"({self.batch_size}): a minibatch cannot be larger than the batch")
        if self.batch_size % self.minibatch_size:
            raise ValueError(f"`minibatch_size` ({self.minibatch_size}) must divide `batch_size` "
                             f"({self.batch_size}) evenly")
        if self.advantage_estimator in ("grpo", "dr_grpo", "rloo") and self.samples_per_prompt < 2:
            raise ValueError(f"`samples_per_prompt` must be >= 2 for the group estimator "
                             f"{self.advantage_estimator!r} (it compares responses to the same prompt)")
        if self.batch_size % self.samples_per_prompt:
            raise ValueError(f"`samples_per_prompt` ({self.samples_per_prompt}) must divide `batch_size` "
                             f"({self.batch_size}) evenly")

    @property
    def num_prompts(self) -> int:
        """Distinct prompts per iteration: ``batch_size // samples_per_prompt``."""
        return self.batch_size // self.samples_per_prompt

    @property
    def num_minibatches(self) -> int:
        """Adam steps per epoch: ``batch_size // minibatch_size``."""
        return self.batch_size // self.minibatch_size

    @classmethod
    def quick(cls, **overrides) -> "PPOConfig":
        """A seconds-long run for CI and smoke tests: 30 iterations of 32 responses (minibatches of 8)."""
        base = dict(iterations=30, batch_size=32, minibatch_size=8, checkpoint_every=10)
        return cls(**{**base, **overrides})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["adam_betas"] = list(self.adam_betas)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PPOConfig":
        """Build from a dict (e.g. a checkpoint's JSON); an unknown key is a ``ValueError``; an old name of
        :data:`RENAMED` is translated with a ``DeprecationWarning``."""
        d = dict(d)
        for old in [k for k in d if k in RENAMED]:
            new = RENAMED[old]
            warnings.warn(f"PPOConfig field `{old}` is now `{new}`", DeprecationWarning, stacklevel=2)
            if new in d:
                raise ValueError(f"`{old}` and `{new}` name the same field: give `{new}` only")
            d[new] = d.pop(old)
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown PPOConfig field(s) {unknown}; valid names: {sorted(names)}")
        return cls(**d)

    def replace(self, **changes) -> "PPOConfig":
        """A copy with some fields changed (validated again)."""
        return type(self).from_dict({**self.to_dict(), **changes})


def field_docs(cls=PPOConfig) -> dict[str, str]:
    """Field name -> its docstring (the string literal under the field), read from the source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs
