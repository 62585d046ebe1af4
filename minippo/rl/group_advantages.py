"""Critic-free advantages: GRPO, RLOO and REINFORCE with a batch-mean baseline; GRPO's KL loss.

Legend: B batch (responses), T tokens (right-padded), G prompts (groups), n group size
(responses per prompt), B = G * n.

PPO needs a critic V(s_t) to turn one sequence score into per-token advantages (GAE). The
methods here drop the critic (the fourth of RLHF-PPO's four models, Q31) and use the OTHER
responses to the same prompt as the baseline instead. Each response i gets one sequence-level advantage A_i from
the scores s (the reward model's scores, one per response), and every valid token of the
response gets that same number (outcome supervision: no per-token credit assignment):

    GRPO       A_i = (s_i - mean_g(s)) / (std_g(s) + eps)       Shao et al. 2024 (DeepSeekMath,
                                                                 arXiv:2402.03300) sec. 4.1.2
    Dr. GRPO   A_i =  s_i - mean_g(s)                           (``scale=False``; Liu et al. 2025,
                                                                 arXiv:2503.20783: the std divide
                                                                 up-weights too easy / too hard prompts)
    RLOO       A_i =  s_i - (sum_g(s) - s_i) / (n - 1)          Ahmadian et al. 2024 ("Back to Basics",
                  =  n / (n - 1) * (s_i - mean_g(s))            arXiv:2402.14740); Kool et al. 2019
    REINFORCE  A_i =  s_i - mean_batch(s)                       Williams 1992 with a constant baseline

mean_g, std_g and sum_g run over the n responses of response i's group. The leave-one-out
baseline of RLOO does not contain s_i, so it is independent of response i's action and the
gradient estimate stays unbiased; the group mean contains s_i, and s_i - mean_g(s) =
(n - 1)/n (s_i - b_i) shrinks the expected gradient by (n - 1)/n (the identity above undoes it).

**Group layout (our choice, validated).** Rows are grouped by prompt CONTIGUOUSLY: group g is rows
``g*n .. g*n + n - 1`` (the order :mod:`minippo.rlhf.grpo` samples them in, each prompt repeated n times), so
``B`` must be a multiple of ``group_size`` and ``scores.reshape(G, n)`` has one group per row.

**Which std.** The paper writes std(r) without saying which; we use the SAMPLE std of the group
(divide by n - 1), as TRL's GRPOTrainer does (``torch.std``). So each non-constant group's advantages
have mean 0 and sample std 1 (up to eps). A group whose n scores are all equal carries no signal:
its advantages are exactly 0 (no 0/0, no rounding noise divided by eps).

**KL as a loss.** GRPO does not put -beta kl_t into the reward; it adds beta * D_KL[pi || pi_ref]
to the loss with the per-token estimator of DeepSeekMath eq. (4),
``pi_ref/pi - log(pi_ref/pi) - 1`` (the k3 of :func:`minippo.rl.kl.kl_estimate`: unbiased and never negative),
see :func:`grpo_kl_loss`. As every loss of ``minippo.rl`` it is a token-level masked mean over the
batch (CONTRIBUTING.md); GRPO's eq. (3) instead averages each response's tokens first (1/|o_i|), which
Dr. GRPO shows biases the response length.

These functions know no model: arrays in, arrays out; :mod:`minippo.rlhf.grpo` calls them.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_float_array, check_mask, check_range
from minippo.rl.kl import kl_ref_loss


# ----------------------------------------------------------------------------------------------
# inputs: sequence scores (B,), a right-padded response mask (B, T), contiguous groups
# ----------------------------------------------------------------------------------------------

def _scores_and_mask(scores, mask):
    """Validate ``scores`` (B,) finite floats and ``mask`` (B, T) right-padded 0/1; return both."""
    scores = check_float_array("scores", scores, ndim=1)
    if scores.size == 0:
        raise ValueError("`scores` must hold at least one response, got shape (0,)")
    mask = check_mask("mask", mask, shape=(scores.shape[0], None), layout="right")
    return scores, mask


def _groups(scores, group_size) -> np.ndarray:
    """``scores`` as a (G, n) float64 array, one prompt group per row (contiguous layout)."""
    check_range("group_size", group_size, 2, None, integer=True)
    B = scores.shape[0]
    if B % group_size:
        raise ValueError(f"`group_size` ({group_size}) must divide the batch size B = {B} (rows are grouped "
                         f"by prompt: group g is rows g*n .. g*n+n-1)")
    return scores.astype(np.float64).reshape(B // group_size, group_size)      # (G, n)


def _to_tokens(adv_seq, mask, dtype) -> np.ndarray:
    """Broadcast one advantage per response (B,) to its valid tokens: (B, T), 0 on padding."""
    return (adv_seq[:, None] * (np.asarray(mask) != 0)).astype(dtype)           # (B, T)


# ----------------------------------------------------------------------------------------------
# the three estimators
# ----------------------------------------------------------------------------------------------

def grpo_advantages(scores, group_size, mask, *, eps=1e-6, scale=True):
    """GRPO's group-normalised advantages, broadcast to every valid token.

    ``A_i = (s_i - mean_g(s)) / (std_g(s) + eps)`` with the sample std (ddof = 1) of the group
    (outcome supervision, DeepSeekMath sec. 4.1.2); ``scale=False`` keeps only ``s_i - mean_g(s)``
    (Dr. GRPO).

    Parameters
    ----------
    scores : (B,) float32/float64 sequence scores, B = G * group_size, rows grouped by prompt
        contiguously (group g = rows g*n .. g*n+n-1).
    group_size : n >= 2, responses per prompt.
    mask : (B, T) 0/1 response mask, right-padded.
    eps : >= 0, added to the std (TRL's GRPOTrainer adds 1e-4).
    scale : divide by the group std (GRPO) or not (Dr. GRPO).

    Returns
    -------
    adv : (B, T) in the scores' dtype: the response's advantage on each valid token, 0 on padding.
        A group with all scores equal gets exactly 0.
    """
    scores, mask = _scores_and_mask(scores, mask)
    check_range("eps", eps, 0, None)
    s = _groups(scores, group_size)                                  # (G, n)
    # the next three lines are (s_i - mean_g(s)) / (std_g(s) + eps), sample std; Dr. GRPO divides by 1
    centered = s - s.mean(axis=1, keepdims=True)                     # (G, n)
    denom = s.std(axis=1, ddof=1, keepdims=True) + eps if scale else 1.0
    signal = np.broadcast_to(s.max(axis=1, keepdims=True) > s.min(axis=1, keepdims=True), s.shape)
    # a constant group (signal False) gets exactly 0: no rounding residue of the mean, no 0 / 0
    adv = np.divide(centered, denom, out=np.zeros_like(centered), where=signal).reshape(-1)   # (B,)
    return _to_tokens(adv, mask, scores.dtype)


def rloo_advantages(scores, group_size, mask):
    """REINFORCE Leave-One-Out: the baseline of response i is the mean score of the OTHER n - 1
    responses to its prompt, ``b_i = (sum_g(s) - s_i) / (n - 1)``; ``A_i = s_i - b_i``
    (Ahmadian et al. 2024; Kool et al. 2019), broadcast to every valid token.

    Identity (tested): ``A_i = n / (n - 1) * (s_i - mean_g(s))``: RLOO is Dr. GRPO times n/(n-1).

    Parameters and returns as :func:`grpo_advantages` (no ``eps``, ``scale``), except that a group with
    all scores equal gets 0 only up to rounding (exactly 0 for 0/1 scores: three scores of 0.1 give
    -1.4e-17).
    """
    scores, mask = _scores_and_mask(scores, mask)
    s = _groups(scores, group_size)                                  # (G, n)
    n = s.shape[1]
    # b_i = (sum_j s_j - s_i) / (n - 1): the leave-one-out mean
    baseline = (s.sum(axis=1, keepdims=True) - s) / (n - 1)          # (G, n)
    adv = (s - baseline).reshape(-1)                                 # (B,)
    return _to_tokens(adv, mask, scores.dtype)


def batch_mean_advantages(scores, mask):
    """REINFORCE with a batch-mean baseline: ``A_i = s_i - mean(s)`` over all B responses (no
    groups needed), broadcast to every valid token. A response with no valid token still counts in
    the mean (it was sampled) but gets no advantage. Returns (B, T) in the scores' dtype."""
    scores, mask = _scores_and_mask(scores, mask)
    s = scores.astype(np.float64)
    return _to_tokens(s - s.mean(), mask, scores.dtype)


# ----------------------------------------------------------------------------------------------
# GRPO's KL(pi || pi_ref) as a loss term
# ----------------------------------------------------------------------------------------------

def grpo_kl_loss(logp, logp_ref, mask, kl_coef):
    """``kl_coef * masked_mean(k3)``, GRPO's KL penalty as a loss, and its gradient d/dlogp: GRPO's
    choice of :func:`minippo.rl.kl.kl_ref_loss` (which also has k1, k2 and the other aggregations).

    Per token (DeepSeekMath eq. (4)), with log rho = logp_ref - logp::

        k3    = pi_ref / pi - log(pi_ref / pi) - 1 = (rho - 1) - log rho   >= 0, = 0 iff logp = logp_ref
        dk3/dlogp = -rho + 1 = 1 - exp(logp_ref - logp)

    The tokens were sampled from pi_old, not pi, so k3 is an estimate of KL(pi || pi_ref) only at
    the first minibatch (pi = pi_old); GRPO uses it as a penalty all the same. And its GRADIENT,
    even on-policy, estimates that of KL(pi_ref || pi) per state, not of KL(pi || pi_ref)
    (:mod:`minippo.rl.kl`; measured in lesson 22).

    Parameters
    ----------
    logp : (B, T) or (N,) log pi(a_t|s_t) under the policy being trained.
    logp_ref : same shape, log pi_ref(a_t|s_t) under the frozen reference.
    mask : 0/1 like ``logp`` (2-D right-padded) or None (all valid).
    kl_coef : beta >= 0.

    Returns
    -------
    loss : float, ``kl_coef * mean_t(k3)`` over the valid tokens (0 with none).
    dlogp : like ``logp``, ``kl_coef * (1 - rho) / n`` on valid tokens, 0 on padding.
    stats : ``kl`` (mean k3, without kl_coef), ``kl_max`` (largest per-token k3; 0 with no valid
        token), ``n_tokens``.
    """
    return kl_ref_loss(logp, logp_ref, mask, kl_coef, kind="k3")
