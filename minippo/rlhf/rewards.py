"""From one reward-model score per response to one reward per token.

Legend: B batch (responses), Tn response tokens (right-padded).

The reward model reads the whole ``prompt ++ response`` and returns ONE number; PPO needs a reward
``r_t`` for every token ``t`` it sampled (seed 000, "坑1：reward稀疏性"). The conventions (DESIGN.md):

1. **Sequence score** (:func:`sequence_scores`)::

       score = rm_score - length_penalty * n_tokens + length_bonus * n_tokens
       score = score / n_tokens ** length_norm_alpha                    (optional; 0 = off)
       score = score - missing_eos_penalty * [no EOS among the response's valid tokens]
       score = clip(score, -score_clip, score_clip)                     (optional)

   The EOS is looked for in the response only (an EOS id inside the prompt does not count). A
   response that hit ``max_new_tokens`` without EOS is not a finished sentence; without the penalty
   the policy could learn to ramble into the length limit (TRL ``missing_eos_penalty``).
   ``length_bonus`` simulates a reward model that likes long answers (length hacking, lesson 16),
   ``length_penalty`` is the usual counter-measure. ``length_norm_alpha`` is seed 001's other one,
   "奖励除以序列长度的α次方，α=0.5" (divide the reward by the length to the power alpha). It cancels a
   length bias that grows like n^alpha and no other: a linear bonus b n becomes b n^(1 - alpha), which still
   grows. And it makes a negative score *less* negative as the response gets longer (lesson 16 measures both).

2. **Per-token rewards** (:func:`per_token_rewards`), "kl_final" shaping (Ziegler et al. 2019,
   arXiv:1909.08593; InstructGPT eq. (2))::

       kl_t = logp_t - logp_ref_t                                  (k1; k2 or k3 optional)
       r_t  = -kl_coef * kl_t                        on every valid token
       r_T += score                                  on the LAST valid token T (the EOS if there is one)

   For the response ``[t0, t1, EOS, PAD, PAD]`` (mask ``[1, 1, 1, 0, 0]``)::

       position   0           1           2                 3    4
       token      t0          t1          EOS               PAD  PAD
       reward     -b kl_0     -b kl_1     -b kl_2 + score   0    0

   "uniform" shaping spreads the score evenly instead: ``r_t = -kl_coef * kl_t + score / n`` on each of
   the ``n`` valid tokens (seed 000's first option; lesson 13 compares the two).

3. **Reward whitening** (optional, off by default): :func:`whiten_rewards` divides the rewards by their
   standard deviation over the batch's valid tokens, keeping their mean (TRL's ``whiten_rewards``).

Padding never receives a reward: every array returned here is 0 where ``mask`` is 0.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_choice, check_float_array, check_int_array, check_mask, check_range
from minippo.rl.losses import kl_estimate
from minippo.rl.masked import masked_whiten
from minippo.rlhf.reward_model import last_token_index

SHAPINGS = ("kl_final", "uniform")


def has_eos(response, response_mask, eos_id: int) -> np.ndarray:
    """(B,) bool: the response contains ``eos_id`` among its valid tokens (the response only).

    Parameters
    ----------
    response : (B, Tn) int token ids, right-padded
    response_mask : (B, Tn) 0/1, 1 on response tokens (EOS included)
    eos_id : the end-of-sequence id
    """
    response = check_int_array("response", response, ndim=2)
    response_mask = check_mask("response_mask", response_mask, shape=response.shape, layout="right")
    check_range("eos_id", eos_id, 0, None, integer=True)
    return ((response == eos_id) & (response_mask != 0)).any(axis=1)


def sequence_scores(rm_scores, ended, lengths, *, missing_eos_penalty: float = 0.0, length_penalty: float = 0.0,
                    length_bonus: float = 0.0, length_norm_alpha: float = 0.0,
                    score_clip: float | None = None) -> np.ndarray:
    """The score each response is rewarded with (step 1 of the module docstring).

    Parameters
    ----------
    rm_scores : (B,) the reward model's (normalised) scores
    ended : (B,) bool, the response produced an EOS (see :func:`has_eos`)
    lengths : (B,) int, response tokens (EOS included)
    missing_eos_penalty, length_penalty, length_bonus : >= 0
    length_norm_alpha : >= 0, divide the (length-shaped) RM score by ``max(n_tokens, 1) ** alpha``
    score_clip : > 0 or None

    Returns
    -------
    scores : (B,) float64
    """
    rm_scores = check_float_array("rm_scores", rm_scores, ndim=1)
    ended = np.asarray(ended)
    if ended.dtype != np.bool_ or ended.shape != rm_scores.shape:
        raise ValueError(f"`ended` must be a bool array of shape {rm_scores.shape}, got {ended.dtype} {ended.shape}")
    lengths = check_int_array("lengths", lengths, shape=rm_scores.shape, low=0)
    for name, v in (("missing_eos_penalty", missing_eos_penalty), ("length_penalty", length_penalty),
                    ("length_bonus", length_bonus), ("length_norm_alpha", length_norm_alpha)):
        check_range(name, v, 0, None)
    scores = rm_scores.astype(np.float64)
    # the next three lines are the linear length terms, the division by n^alpha and the missing-EOS penalty
    scores = scores + (length_bonus - length_penalty) * lengths
    if length_norm_alpha:
        scores = scores / np.maximum(lengths, 1) ** length_norm_alpha
    scores = scores - missing_eos_penalty * (~ended)
    if score_clip is not None:
        check_range("score_clip", score_clip, 0, None, lo_open=True)
        scores = np.clip(scores, -score_clip, score_clip)
    return scores


def per_token_rewards(scores, logp, logp_ref, mask, kl_coef: float, *, kl_kind: str = "k1",
                      shaping: str = "kl_final"):
    """Per-token rewards: the KL penalty on every valid token plus the score (step 2 of the docstring).

    Ziegler et al. 2019 eq. (2) and InstructGPT eq. (2), R = score - beta log(pi / pi_ref), written token
    by token: the log-ratio of a response is the sum of the per-token kl_t.

    Parameters
    ----------
    scores : (B,) sequence scores (:func:`sequence_scores`)
    logp : (B, Tn) log pi_old(a_t|s_t) of the sampled tokens (at the sampling temperature)
    logp_ref : (B, Tn) log pi_ref(a_t|s_t) of the same tokens (same temperature)
    mask : (B, Tn) 0/1 response mask, right-padded, at least one valid token per row
    kl_coef : beta >= 0
    kl_kind : "k1" (default), "k2" or "k3" (:func:`minippo.rl.losses.kl_estimate`)
    shaping : "kl_final" (score on the last valid token) or "uniform" (score / n on every valid token)

    Returns
    -------
    rewards : (B, Tn) float64, 0 on padding
    kl : (B, Tn) float64 per-token KL estimate, 0 on padding
    non_score_reward : (B, Tn) float64, ``-kl_coef * kl``, 0 on padding
    """
    logp = check_float_array("logp", logp, ndim=2)
    logp_ref = check_float_array("logp_ref", logp_ref, shape=logp.shape)
    mask = check_mask("mask", mask, shape=logp.shape, layout="right")
    B = logp.shape[0]
    scores = check_float_array("scores", scores, shape=(B,))
    check_range("kl_coef", kl_coef, 0, None)
    check_choice("shaping", shaping, SHAPINGS)
    m = (mask != 0).astype(np.float64)                                   # (B, Tn)
    kl = kl_estimate(logp.astype(np.float64), logp_ref.astype(np.float64), kl_kind) * m
    non_score_reward = -kl_coef * kl                                     # (B, Tn), 0 on padding
    rewards = non_score_reward.copy()
    if shaping == "kl_final":
        # the score lands on the last valid token: the EOS when there is one, never the padding after it
        last = last_token_index(mask)                                    # (B,)
        rewards[np.arange(B), last] += scores
    else:
        # uniform: score / n on each of the n valid tokens of the row
        n = m.sum(axis=1)                                                # (B,)
        if (n == 0).any():
            raise ValueError(f"`mask` row {int(np.argmax(n == 0))} has no valid token: nothing to reward")
        rewards += (scores / n)[:, None] * m
    return rewards, kl, non_score_reward


def whiten_rewards(rewards, mask) -> np.ndarray:
    """Rewards divided by their std over the valid tokens, mean kept (TRL ``whiten_rewards``); 0 on padding."""
    return masked_whiten(rewards, mask, shift_mean=False)
