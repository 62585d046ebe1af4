"""minippo.rl: the PPO algorithm as arrays in, arrays out; no model, no autograd.

Every public function's body is the readable NumPy formula, the one its docstring explains. GAE
(tokens and classic control) and the clipped surrogate also have a compiled twin in ``_kernels.py``
(``@njit(cache=True)``, parity-tested), which the function's first line calls while the switch of
:mod:`minippo.kernels` is on (the default; ``MINIPPO_KERNELS=0`` runs the formulas everywhere).
Conventions (CONTRIBUTING.md): ``mask`` is 1 on valid tokens, rows right-padded, ``mask=None`` means all
valid; losses are token-level masked means over the batch; every loss returns
``(loss, d<input>, stats)`` with an analytic gradient.

Where each concept lives (the questions students ask about them are answered in docs/questions.md):

=========================================================  ==========================================
concept                                                    function
=========================================================  ==========================================
ratio r_t = exp(logp_new - logp_old), PPO eq. (6) (Q3)     computed inside the losses below
log-probs of the taken tokens from the LM's logits         losses.logprobs_from_logits / _backward
PPO-Clip L^CLIP, eq. (7); the six cases (Q9)               losses.clipped_policy_loss, losses.clip_cases
(beyond PPO: DAPO's clip-higher; GRPO / Dr. GRPO loss      clipped_policy_loss(clip_eps_high=);
aggregation; GSPO's sequence ratio)                        loss_variants.aggregated_policy_loss,
                                                           loss_variants.sequence_policy_loss
clip fraction (Q10)                                        stats["clipfrac"] of clipped_policy_loss
PPO-Penalty r A - beta KL, eq. (8) (Q11)                   penalty.ppo_penalty_loss
adaptive beta (PPO paper sec. 4; Ziegler et al. 2019       kl_control.PPOPaperKLController,
sec. 2.2) (Q40)                                            kl_control.AdaptiveKLController,
                                                           kl_control.FixedKLController
critic loss (V - R)^2, eq. (9) (Q12); value clip (Q46)     losses.value_loss, losses.clipped_value_loss
entropy bonus S[pi](s_t), eq. (9) (Q13)                    losses.entropy_from_logits / _backward
one temperature for every distribution                     the ``temperature`` argument in losses
GAE delta_t, A_t, returns = A + V, eq. (16) (Q16, Q17)     gae.gae (tokens)
GAE with (s, a, r, s', done) for classic control           gae.gae_classic (terminated vs truncated)
advantage normalisation (Q22)                              masked.masked_whiten
approx KL, KL monitoring, early stop (Q43)                 stats["approx_kl"]; kl.kl_estimate (k1, k2, k3)
KL penalty -beta kl_t in the reward, k1/k2/k3 (Q35, Q41)   kl.kl_estimate(logp, logp_ref, kind)
KL as a loss term (GRPO) and its gradient (Q38)            kl.kl_ref_loss (k1, k2, k3)
exact KL between two distributions                         losses.kl_exact_from_logits
explained variance (Q21)                                   masked.explained_variance
padding / response mask (Q27)                              masked.masked_sum / masked_mean / masked_var
critic-free advantages: GRPO, RLOO, batch-mean baseline    group_advantages.grpo_advantages, rloo_advantages,
(Shao et al. 2024; Ahmadian et al. 2024) (Q61)             batch_mean_advantages; GRPO's KL loss grpo_kl_loss
DPO, conservative DPO, IPO on preference pairs             dpo.dpo_loss (loss_type=, label_smoothing=)
(beyond PPO: Rafailov et al. 2023; Azar et al. 2023)       dpo.sequence_logprobs / _backward
pass@k from n samples per problem (Chen et al. 2021        pass_k.pass_at_k
eq. (1)), the metric of verifiable-reward tasks
groups whose rewards are all equal (no signal; DAPO's      dapo.zero_variance_groups, zero_variance_share
dynamic sampling); DAPO's soft overlong punishment         dapo.overlong_penalty
sampler != trainer: importance weights none / IS / TIS /   off_policy.off_policy_weights (mode=, level=)
MIS / IcePop, token or sequence; the weighted L^CLIP;      off_policy.corrected_policy_loss,
AReaL's decoupled PPO (arXiv:2505.24298)                   off_policy.decoupled_policy_loss
=========================================================  ==========================================

(What only lessons measure, e.g. the k1/k2/k3 moments or the sequence ratio, is in ``minippo.studies``.)

Importing this package compiles nothing and does not import numba: the functions above are
re-exported lazily (except ``gae``, whose name is the submodule: use ``minippo.gae`` or
``minippo.rl.gae.gae``), and ``_kernels.py`` is imported, and each kernel compiled (or loaded from
numba's on-disk cache), at the first kernel call.
"""
from __future__ import annotations

from minippo._lazy import lazy_exports

# public name -> submodule that defines it
_LAZY = {
    **{n: "minippo.rl.masked" for n in ("masked_sum", "masked_mean", "masked_var", "masked_whiten",
                                        "explained_variance", "aggregation_denominator", "masked_aggregate",
                                        "LOSS_AGGS")},
    **{n: "minippo.rl.kl" for n in ("kl_estimate", "KL_KINDS", "kl_ref_loss")},
    # not "gae" itself: that name is the submodule minippo.rl.gae (use minippo.gae)
    **{n: "minippo.rl.gae" for n in ("gae_classic",)},
    **{n: "minippo.rl.losses" for n in ("log_softmax", "logprobs_from_logits", "logprobs_backward",
                                        "entropy_from_logits", "entropy_backward",
                                        "kl_exact_from_logits", "clipped_policy_loss", "clip_cases",
                                        "CLIP_CASES", "CLIPPED_CASES", "clipped_value_loss", "value_loss")},
    **{n: "minippo.rl.loss_variants" for n in ("aggregated_policy_loss", "sequence_policy_loss",
                                               "aggregated_value_loss", "aggregated_clipped_value_loss")},
    "ppo_penalty_loss": "minippo.rl.penalty",
    **{n: "minippo.rl.kl_control" for n in ("FixedKLController", "AdaptiveKLController", "PPOPaperKLController")},
    **{n: "minippo.rl.dpo" for n in ("dpo_loss", "sequence_logprobs", "sequence_logprobs_backward", "LOSS_TYPES")},
    **{n: "minippo.rl.off_policy" for n in ("off_policy_weights", "corrected_policy_loss", "decoupled_policy_loss")},
    **{n: "minippo.rl.group_advantages" for n in ("grpo_advantages", "rloo_advantages",
                                                  "batch_mean_advantages", "grpo_kl_loss")},
    "pass_at_k": "minippo.rl.pass_k",
    **{n: "minippo.rl.dapo" for n in ("zero_variance_groups", "zero_variance_share", "overlong_penalty")},
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, globals())
