"""minippo.rl: the PPO algorithm as arrays in, arrays out; no model, no autograd.

Every formula has a readable NumPy reference; GAE and the clipped surrogate also have a fused
``@njit(cache=True)`` kernel beside it (parity-tested; ``NUMBA_DISABLE_JIT=1`` runs the kernel
as Python for pdb). Conventions (DESIGN.md): ``mask`` is 1 on valid tokens, rows right-padded,
``mask=None`` means all valid; losses are token-level masked means over the batch; every loss
returns ``(loss, d<input>, stats)`` with an analytic gradient.

Where each concept of the seeds (``shared/seeds``) lives:

=========================================================  ==========================================
seed concept                                               function
=========================================================  ==========================================
ratio r_t = exp(logp_new - logp_old) (003 sec. 3)          computed inside the losses below
log-probs of the taken tokens from the LM's logits         distributions.logprobs_from_logits / _backward
PPO-Clip L^CLIP, eq. (7); the six cases (003 sec. 4-5)     policy_loss.clipped_policy_loss (kernel),
                                                           clipped_policy_loss_reference, CLIP_CASES
clip fraction (003 sec. 13)                                stats["clipfrac"] of clipped_policy_loss
PPO-Penalty r A - beta KL, eq. (8) (003 sec. 6)            policy_loss.ppo_penalty_loss
adaptive beta (003 sec. 6; PPO paper sec. 4)               kl.PPOPaperKLController, kl.AdaptiveKLController
                                                           (Ziegler et al. 2019), kl.FixedKLController
critic loss (V - R)^2 (003 sec. 7), value clipping (000)   value_loss.value_loss, value_loss.clipped_value_loss
entropy bonus H(pi) (003 sec. 7), eq. (9)                  distributions.entropy_from_logits / _backward
one temperature for every distribution                     the ``temperature`` argument of distributions
GAE delta_t, A_t, returns = A + V (003 sec. 9; 000)        gae.gae (tokens)
GAE with (s, a, r, s', done) for classic control           gae.gae_classic (terminated vs truncated)
advantage normalisation (003 sec. 12)                      masked.masked_whiten
approx KL, KL monitoring, early stop (003 sec. 12-13)      stats["approx_kl"]; kl.kl_estimate (k1, k2, k3)
KL penalty reward -beta * kl_t (000 follow-up 3)           kl.kl_estimate(logp, logp_ref, kind)
exact KL between two distributions                         kl.kl_exact_from_logits
explained variance (003 sec. 13)                           masked.explained_variance
padding / response mask (003 sec. 17; 000)                 masked.masked_sum / masked_mean / masked_var
critic-free advantages: GRPO, RLOO, batch-mean baseline    group_advantages.grpo_advantages, rloo_advantages,
(beyond the seeds: Shao et al. 2024; Ahmadian et al. 2024) batch_mean_advantages; GRPO's KL loss grpo_kl_loss
which baseline removes most variance (lesson 20)           baselines.compare_baselines, between_prompt_fraction
k1/k2/k3 bias and variance, negative KL under top-k        kl_moments.kl_estimator_moments, topk_mass_decomposition,
(lesson 15)                                                compare_kl_estimators
sequence ratio prod r_t vs token clipping; 1.2^50 (001)    sequence_ratio.sequence_log_ratio, ratio_band_stats
=========================================================  ==========================================

Importing this package compiles nothing: the functions above are re-exported lazily (except
``gae``, whose name is the submodule: use ``minippo.gae`` or ``minippo.rl.gae.gae``), and each
kernel is compiled (or loaded from numba's on-disk cache) on its first call.
"""
from __future__ import annotations

from minippo._lazy import lazy_exports

# public name -> submodule that defines it
_LAZY = {
    **{n: "minippo.rl.masked" for n in ("masked_sum", "masked_mean", "masked_var", "masked_whiten",
                                        "explained_variance")},
    # not "gae" itself: that name is the submodule minippo.rl.gae (use minippo.gae)
    **{n: "minippo.rl.gae" for n in ("gae_classic",)},
    **{n: "minippo.rl.losses" for n in ("log_softmax", "logprobs_from_logits", "logprobs_backward",
                                        "entropy_from_logits", "entropy_backward", "kl_estimate",
                                        "kl_exact_from_logits", "clipped_policy_loss", "clipped_policy_loss_reference",
                                        "ppo_penalty_loss", "CLIP_CASES", "CLIPPED_CASES", "clipped_value_loss",
                                        "value_loss")},
    **{n: "minippo.rl.kl_control" for n in ("FixedKLController", "AdaptiveKLController", "PPOPaperKLController")},
    **{n: "minippo.rl.group_advantages" for n in ("grpo_advantages", "rloo_advantages",
                                                  "batch_mean_advantages", "grpo_kl_loss")},
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, globals())
