"""Diagnostics for the classic pitfalls of RLHF-PPO (lesson 16), each a small function on the trainer's data.

Legend: B batch (responses), Tp prompt columns (left-padded), Tn response columns (right-padded), V vocab.

1. **The lr = 0 check** (seed 003 sec. 18, "ratio 可以直接用概率相除" and the on-policy ratio). With the
   learning rate at 0 the policy never moves, so every minibatch of the update must see
   ``ratio = exp(logp - logp_old) = 1`` exactly, ``approx_kl = 0`` and ``clipfrac = 0``. The trainer
   passes it bitwise (``logp_old`` is recomputed with the update's own forward pass, ppo_step.py). Any
   difference between how the rollout and the update compute the log-probs shows up as a ratio != 1
   *before any learning happened*, and PPO then clips and "corrects" noise. :func:`recompute_logp`
   computes the update's log-probs of a rollout the right way or with one deliberate bug::

       mode         what the recompute does                                        ratio at lr = 0
       "same"       forward_response(prompt ++ response, attn_mask), log-softmax     exactly 1
                    at the given temperature (what ppo_update does)
       "no_mask"    the same forward with an all-ones attention mask: the left       != 1 on rows that
                    padding of short prompts is attended and shifts the positions     have prompt padding
       "shifted"    off by one: the logits of column Tp + j (they predict token       far from 1
                    j + 1) are used for token j
       "repadded"   ``extra_pad`` more pad columns in front of every prompt, the      1 (to rounding): padding
                    mask extended to match (a control)                                 with a mask is harmless

   A temperature mismatch (sampling at T, training at T') is ``mode="same"`` with ``temperature=T'``.
   :func:`ratio_statistics` summarises any recompute against the rollout's ``logp`` with the
   statistics of L^CLIP (PPO paper eq. (7)): ratio mean / min / max, approx KL (k3), clip fraction.

2. **The critic's error in return units** (:func:`value_error`): ``0.5 * mean_t (V(s_t) - R_t)^2`` over
   a rollout's valid tokens. The logged ``loss/value_avg`` is in the head's units, which
   ``value_norm`` rescales; this number compares critics with and without normalisation. Unlike the
   explained variance it sees a constant offset between values and returns.

3. **An offset reward model** (:func:`offset_reward_model`): the Bradley-Terry loss only fixes
   differences of scores, so a raw reward model's mean is arbitrary; adding a constant emulates one
   whose scores sit far from the critic's initial values (seed 001: "Critic的V值初始化很重要").

4. **Length** (seed 001: "偏好长度作弊 ... 长度惩罚"): :func:`length_slope` is the least-squares slope of
   a score against response length, i.e. the ``length_penalty`` that makes the score uncorrelated with
   length on the samples it was fitted on; :func:`minippo.rlhf.data.gold.gold_profile` averages the gold
   score's terms over texts, to see which penalty a policy runs into.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_choice, check_float_array, check_range
from minippo.rl.losses import clipped_policy_loss, logprobs_from_logits
from minippo.rl.masked import masked_mean
from minippo.rlhf.ppo import response_logprobs
from minippo.rlhf.reward_model import RewardModel

RECOMPUTE_MODES = ("same", "no_mask", "shifted", "repadded")


def recompute_logp(model, rollout, *, temperature: float, mode: str = "same", extra_pad: int = 3,
                   pad_id: int = 0) -> np.ndarray:
    """log pi(a_t|s_t) of ``rollout``'s response tokens under ``model``, right or deliberately wrong.

    Parameters
    ----------
    model : TinyGPT (the actor)
    rollout : :class:`minippo.rlhf.rollout.Rollout`
    temperature : > 0, the temperature of the log-softmax (the rollout's own for a correct recompute)
    mode : one of :data:`RECOMPUTE_MODES` (see the module docstring)
    extra_pad : pad columns added in front of the prompts for ``"repadded"``; >= 1
    pad_id : the id written in those columns (masked out, so any id gives the same numbers)

    Returns
    -------
    logp : (B, Tn) in the model's dtype, 0 on the response padding
    """
    check_choice("mode", mode, RECOMPUTE_MODES)
    check_range("temperature", temperature, 0, None, lo_open=True)
    seqs, attn, Tp, response = rollout.sequences, rollout.attn_mask, rollout.prompt_len, rollout.response
    if mode == "same":
        logp = response_logprobs(model, seqs, attn, response, Tp, temperature)
    elif mode == "no_mask":
        # every column counts as a real token: pads are attended and position ids are column indices
        logp = response_logprobs(model, seqs, np.ones_like(attn), response, Tp, temperature)
    elif mode == "shifted":
        # the off-by-one: the full sequence goes in and column Tp + j (which predicts token j + 1) scores token j
        logits, _, _ = model.forward(seqs, attn)                                 # (B, Tp + Tn, V)
        logp, _ = logprobs_from_logits(logits[:, Tp:], response, temperature)     # (B, Tn)
    else:
        # more left padding, mask extended: positions count real tokens, pads are never attended
        check_range("extra_pad", extra_pad, 1, None, integer=True)
        B = seqs.shape[0]
        pad = np.full((B, extra_pad), pad_id, dtype=seqs.dtype)                   # (B, extra_pad)
        seqs2 = np.concatenate([pad, seqs], axis=1)                               # (B, extra_pad + Tp + Tn)
        attn2 = np.concatenate([np.zeros_like(pad, dtype=attn.dtype), attn], axis=1)
        logp = response_logprobs(model, seqs2, attn2, response, Tp + extra_pad, temperature)
    return logp * (rollout.response_mask != 0)


def ratio_statistics(logp, rollout, clip_eps: float = 0.2, *, row_tol: float = 1e-4) -> dict:
    """How far ``logp`` (a recompute) is from the rollout's ``logp``: what the first minibatch would see.

    ratio = exp(logp - logp_old) on the valid tokens; the clip statistics use the rollout's advantages
    (a token counts in ``clipfrac`` when L^CLIP's clipped branch is active for its sign of A_t).

    Parameters
    ----------
    logp : (B, Tn) log-probs of ``rollout.response`` (e.g. from :func:`recompute_logp`)
    rollout : Rollout with ``logp`` and ``adv`` (after the advantage step)
    clip_eps : epsilon of L^CLIP, > 0
    row_tol : a response counts in ``rows_changed`` when one of its tokens has |log r| > row_tol (>= 0;
        float32 rounding alone gives |log r| ~ 1e-7)

    Returns
    -------
    dict with ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``approx_kl`` (k3, mean((r - 1) - log r)),
    ``clipfrac``, ``outside_band`` (fraction of valid tokens with r outside [1 - eps, 1 + eps], either
    sign of A), ``max_abs_log_ratio`` and ``rows_changed`` (fraction of responses with a token whose
    |log r| exceeds ``row_tol``).
    """
    if rollout.adv is None:
        raise ValueError("`rollout` must have advantages (`rollout.adv`): run the advantage step first")
    logp = check_float_array("logp", logp, shape=rollout.logp.shape)
    check_range("row_tol", row_tol, 0, None)
    mask = rollout.response_mask
    logp_old = rollout.logp.astype(logp.dtype)
    _, _, stats = clipped_policy_loss(logp, logp_old, rollout.adv.astype(logp.dtype), mask, clip_eps)
    valid = mask != 0
    log_ratio = np.where(valid, logp.astype(np.float64) - logp_old, 0.0)          # (B, Tn)
    ratio = np.exp(log_ratio[valid])                                              # (n,)
    return {"ratio_mean": stats["ratio_mean"], "ratio_min": stats["ratio_min"], "ratio_max": stats["ratio_max"],
            "approx_kl": stats["approx_kl"], "clipfrac": stats["clipfrac"],
            "outside_band": float(np.mean(np.abs(ratio - 1.0) > clip_eps)),
            "max_abs_log_ratio": float(np.abs(log_ratio).max()),
            "rows_changed": float(np.mean((np.abs(log_ratio) > row_tol).any(axis=1)))}


def value_error(rollout) -> float:
    """``0.5 * masked_mean((values - returns)^2)`` of a rollout, in return units (before its update)."""
    if rollout.returns is None:
        raise ValueError("`rollout` must have returns (`rollout.returns`): run the advantage step first")
    err = rollout.values.astype(np.float64) - rollout.returns                    # (B, Tn) V(s_t) - R_t
    return 0.5 * masked_mean(err * err, rollout.response_mask)


def offset_reward_model(reward_model, offset: float):
    """The same reward model (shared, frozen weights) with ``offset`` added to every score."""
    check_range("offset", offset)
    if not isinstance(reward_model, RewardModel):
        raise ValueError(f"`reward_model` must be a RewardModel, got {type(reward_model).__name__}")
    return RewardModel(reward_model.model, gain=reward_model.gain, bias=reward_model.bias + float(offset))


def length_slope(scores, lengths) -> float:
    """Least-squares slope of ``scores`` on ``lengths``: cov(length, score) / var(length).

    Used as ``length_penalty`` it removes the linear length term of the score on these samples (the
    residual score is uncorrelated with length).

    Parameters
    ----------
    scores : (N,) floats; lengths : (N,) response lengths (at least two different values)
    """
    scores = check_float_array("scores", scores, ndim=1)
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.shape != scores.shape:
        raise ValueError(f"`lengths` must have shape {scores.shape}, got {lengths.shape}")
    var = float(np.var(lengths))
    if not var > 0:
        raise ValueError("`lengths` must hold at least two different values to fit a slope")
    return float(np.mean((lengths - lengths.mean()) * (scores - scores.mean())) / var)
