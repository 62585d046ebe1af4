"""Diagnostics for the classic pitfalls of RLHF-PPO (lesson 16), each a small function on the trainer's data.

Legend: B batch (responses), Tp prompt columns (left-padded), Tn response columns (right-padded), V vocab.

1. **The lr = 0 check** (Q51; the ratio of PPO eq. (6) as exp(logp - logp_old), Q3). With the
   learning rate at 0 the policy never moves, so every minibatch of the update must see
   ``ratio = exp(logp - logp_old) = 1``, ``approx_kl = 0`` and ``clipfrac = 0``. What holds exactly,
   and what only to float32 rounding:

   * **exact, on any machine**: with lr = 0 every parameter is bitwise unchanged; recomputing the
     log-probs of the same batch with the same shapes on the same BLAS thread count is bitwise the
     rollout's (determinism: the same products in the same order). :func:`recompute_logp` does that
     (``mode="same"``), and ``logp_old`` itself is recomputed after sampling with the update's own
     forward function (``forward_response`` of ``minippo/rlhf/ppo.py``), not taken from the KV-cache
     sampler.
   * **to float32 rounding**: the update's minibatches hold b of the rollout's B responses, so its
     matrix products have b*T rows where the rollout's had B*T. Some OpenBLAS kernels (Haswell, Zen)
     sum the products in an order that depends on the row count, so the first minibatch's ratio is
     1 only to within :func:`logp_rounding_tolerance` (bitwise 1 with other kernels, e.g. SkylakeX;
     ``minippo.blas.blas_core_name()`` says which one is active). ``clipfrac`` is still exactly 0:
     that rounding is many orders below ``log(1 + clip_eps)``. :func:`lr_zero_verdict` classifies a
     measurement as ``"bitwise"``, ``"rounding"`` or ``"bug"``.

   Any real difference between how the rollout and the update compute the log-probs shows up as a
   ratio far from 1 *before any learning happened*, and PPO then clips and "corrects" noise.
   :func:`recompute_logp` computes the update's log-probs of a rollout the right way or with one
   deliberate bug::

       mode         what the recompute does                                        ratio at lr = 0
       "same"       forward_response(prompt ++ response, attn_mask), log-softmax     exactly 1 (same
                    at the given temperature (what ppo_update does)                  shapes, bitwise)
       "no_mask"    the same forward with an all-ones attention mask: the left       != 1 on rows that
                    padding of short prompts is attended and shifts the positions     have prompt padding
       "shifted"    off by one: the logits of column Tp + j (they predict token       far from 1
                    j + 1) are used for token j
       "repadded"   ``extra_pad`` more pad columns in front of every prompt, the      1 to float32 rounding
                    mask extended to match (a control)                                 (other shapes): padding
                                                                                   with a mask is harmless

   A temperature mismatch (sampling at T, training at T') is ``mode="same"`` with ``temperature=T'``.
   :func:`ratio_statistics` summarises any recompute against the rollout's ``logp`` with the
   statistics of L^CLIP (PPO paper eq. (7)): ratio mean / min / max, approx KL (k3), clip fraction.

2. **The critic's error in return units** (:func:`value_error`): ``0.5 * mean_t (V(s_t) - R_t)^2`` over
   a rollout's valid tokens. The logged ``loss/value_avg`` is in the head's units, which
   ``value_norm`` rescales; this number compares critics with and without normalisation. Unlike the
   explained variance it sees a constant offset between values and returns.

3. **An offset or scaled reward model** (:func:`offset_reward_model`, :func:`scaled_reward_model`): the
   Bradley-Terry loss only fixes differences of scores, so a raw reward model's mean is arbitrary; adding a
   constant emulates one whose scores sit far from the critic's initial values (Q48); multiplying them, one
   whose scores are large (Q22: what advantage whitening removes).

4. **A clamped critic** (:class:`ClampedCritic`, Q47): the value head's output clamped to a fixed box
   [lo, hi], ``V = min(max(head, lo), hi)``, what some code calls "value clipping". Unlike PPO's value clipping
   (``minippo.rl.losses.clipped_value_loss``: V_old + clip(V - V_old, -eps_v, eps_v), around each state's
   rollout value) it has no V_old in it: where it binds the value has zero gradient, and a return outside the box
   can never be reached.

5. **Length** (Q50): :func:`length_slope` is the least-squares slope of
   a score against response length, i.e. the ``length_penalty`` that makes the score uncorrelated with
   length on the samples it was fitted on; :func:`minippo.rlhf.data.gold.gold_profile` averages the gold
   score's terms over texts, to see which penalty a policy runs into.
"""
from __future__ import annotations

import math

import numpy as np

from minippo.blas import single_blas_thread
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
    rollout : :class:`minippo.rlhf.ppo.Rollout`
    temperature : > 0, the temperature of the log-softmax (the rollout's own for a correct recompute)
    mode : one of :data:`RECOMPUTE_MODES` (see the module docstring)
    extra_pad : pad columns added in front of the prompts for ``"repadded"``; >= 1
    pad_id : the id written in those columns (masked out, so any id gives the same numbers)

    Returns
    -------
    logp : (B, Tn) in the model's dtype, 0 on the response padding

    The forward pass runs on one BLAS thread, as the trainer's rollout does, so ``mode="same"`` with the
    rollout's temperature repeats the rollout's computation exactly (same shapes, same thread count):
    bitwise the rollout's ``logp`` when the model has not moved.
    """
    check_choice("mode", mode, RECOMPUTE_MODES)
    check_range("temperature", temperature, 0, None, lo_open=True)
    with single_blas_thread():      # the trainer's rollout ran on one BLAS thread: the same products, same order
        return _recompute_logp(model, rollout, temperature, mode, extra_pad, pad_id)


def _recompute_logp(model, rollout, temperature, mode, extra_pad, pad_id):
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


def logp_rounding_tolerance(cfg, logp_scale: float = 1.0) -> float:
    """How far two correct computations of the same log-probs may differ by floating-point rounding alone.

    ``eps(dtype) * (4 L + 2) * sqrt(4 C) * max(1, logp_scale)`` for a TinyGPT config ``cfg`` (L = n_layer,
    C = n_embd, dtype float32 or float64) and ``logp_scale`` = the largest |log-prob| compared.

    Why: two correct computations may differ in the shapes of their matrix products (a minibatch of b
    rows vs the rollout's B rows, padding), in the BLAS thread count or in the BLAS kernel, and each
    may then sum the products of a dot product in another order. On the path to a log-prob there are
    about 4 L + 2 such sums whose order can change: four linear layers per block (attention in/out
    projections, the MLP's two layers), the LM head and the log-softmax's normaliser. Each linear
    layer's sum has at most K = 4C terms (the MLP's output layer; the normaliser's V terms are all
    positive, so its rounding stays relative, without cancellation); rounding errors of a reordered
    K-term sum are of order sqrt(K) ulps of its magnitude (a random walk of K roundings of relative
    size eps; the worst case K ulps is not reached in practice), LayerNorm keeps every layer's
    activations at scale O(1), and the relative errors of the ~4L + 2 sums add up. A log-prob is a
    difference of logits of order max(1, |logp|), hence the last factor.

    Measured (OpenBLAS Haswell / Zen kernels, float32, the lr = 0 first minibatch vs the rollout):
    max |log r| 1.7e-6 for lesson 16's default run (L 2, C 64, max |logp| 10: tolerance 1.9e-4, 110x
    above), 1.4e-6 for its --full and --quick runs (2.0e-4 and 9.2e-5: 140x, 65x), 4.8e-7 for the
    tests' tiny world (L 1, C 16: 2.9e-5, 61x); even at scale 1 the tolerance is 20x above 9.5e-7
    (L 2, C 64) and 100x above 4.8e-7 (L 4, C 128). Bitwise 0 with the SkylakeX and Sandybridge
    kernels. A real bug is orders above it: the lesson's bugs move log-probs by 0.05-5 nats (approx
    KL > 1e-3).

    Parameters
    ----------
    cfg : GPTConfig (``n_layer``, ``n_embd``, ``dtype``)
    logp_scale : >= 0, the largest |log pi| among the compared log-probs
    """
    check_range("logp_scale", logp_scale, 0, None)
    eps = float(np.finfo(np.dtype(cfg.dtype)).eps)
    return eps * (4 * cfg.n_layer + 2) * math.sqrt(4 * cfg.n_embd) * max(1.0, float(logp_scale))


def lr_zero_verdict(stats: dict, tolerance: float, dtype="float32") -> dict:
    """What an lr = 0 measurement shows: ``"bitwise"``, ``"rounding"`` or ``"bug"``.

    Parameters
    ----------
    stats : dict with ``ratio_min``, ``ratio_max``, ``approx_kl``, ``clipfrac`` (the trainer's
        ``first_minibatch`` or :func:`ratio_statistics` of a recompute)
    tolerance : the largest |delta logp| rounding may explain (:func:`logp_rounding_tolerance`)
    dtype : the dtype the ratios were computed in (the model's)

    Returns
    -------
    dict with ``verdict``, ``max_abs_log_ratio`` (max |log r| = max(log ratio_max, -log ratio_min)),
    ``log_ratio_tol``, ``approx_kl_tol`` and ``tolerance``:

    * ``"bitwise"``: every ratio is exactly 1.0 (ratio_min == ratio_max == 1), approx KL and clipfrac 0.0;
    * ``"rounding"``: not bitwise, but max |log r| <= t = tolerance + eps (the ratio itself is
      exp(delta logp) rounded to ``dtype``: one more ulp), |approx KL| <= (eps + t^2 / 2) e^t (k3 =
      (r - 1) - log r per token with r rounded to one ulp: |k3| <= |fl(e^d) - e^d| + |e^d - 1 - d|
      <= eps e^|d| + d^2 / 2 e^|d|, and a mean is bounded like its terms) and clipfrac exactly 0 (such
      ratios are inside any clip band wider than the tolerance);
    * ``"bug"``: anything else, more than rounding can explain.
    """
    for k in ("ratio_min", "ratio_max", "approx_kl", "clipfrac"):
        if k not in stats:
            raise ValueError(f"`stats` must hold {k!r} (e.g. the trainer's first_minibatch), got {sorted(stats)}")
    check_range("tolerance", tolerance, 0, None)
    eps = float(np.finfo(np.dtype(dtype)).eps)
    r_min, r_max = float(stats["ratio_min"]), float(stats["ratio_max"])
    max_abs = max(abs(math.log(r_max)) if r_max > 0 else math.inf, abs(math.log(r_min)) if r_min > 0 else math.inf)
    log_ratio_tol = tolerance + eps
    kl_tol = (eps + log_ratio_tol ** 2 / 2) * math.exp(log_ratio_tol)
    if r_min == r_max == 1.0 and stats["approx_kl"] == 0.0 and stats["clipfrac"] == 0.0:
        verdict = "bitwise"
    elif max_abs <= log_ratio_tol and abs(stats["approx_kl"]) <= kl_tol and stats["clipfrac"] == 0.0:
        verdict = "rounding"
    else:
        verdict = "bug"
    return {"verdict": verdict, "max_abs_log_ratio": max_abs, "log_ratio_tol": log_ratio_tol,
            "approx_kl_tol": kl_tol, "tolerance": float(tolerance)}


def value_error(rollout) -> float:
    """``0.5 * masked_mean((values - returns)^2)`` of a rollout, in return units (before its update)."""
    if rollout.returns is None:
        raise ValueError("`rollout` must have returns (`rollout.returns`): run the advantage step first")
    err = rollout.values.astype(np.float64) - rollout.returns                    # (B, Tn) V(s_t) - R_t
    return 0.5 * masked_mean(err * err, rollout.response_mask)


class ClampedCritic:
    """A critic whose values are clamped to ``[lo, hi]``: ``V = min(max(head, lo), hi)`` (module docstring, item 4).

    Wraps a TinyGPT critic for :class:`minippo.rlhf.ppo.PPOState` (``state.critic``): the same parameters (the
    critic's AdamW keeps updating them), :meth:`forward` returns the clamped scalar head, and :meth:`backward`
    passes d loss / d V only where the clamp does not bind (the derivative of the clamp is 1 inside, 0 outside).
    """

    def __init__(self, model, lo: float, hi: float):
        check_range("lo", lo)
        check_range("hi", hi, lo, None, lo_open=True)
        self.model, self.lo, self.hi = model, float(lo), float(hi)

    @property
    def params(self) -> dict:
        return self.model.params

    @property
    def cfg(self):
        return self.model.cfg

    def forward(self, idx, attn_mask=None, scalar: bool = False, logits: bool = True):
        """``model.forward`` with the scalar head clamped: ``(logits, V (B, T) or None, cache)``."""
        out, head, cache = self.model.forward(idx, attn_mask, scalar=scalar, logits=logits)
        if head is None:
            return out, None, (cache, None)
        inside = (head >= self.lo) & (head <= self.hi)                             # (B, T) where dV/dhead = 1
        return out, np.clip(head, self.lo, self.hi), (cache, inside)

    def backward(self, cache, dlogits=None, dscalar=None, scalar_into_trunk: bool = True) -> dict:
        """``model.backward`` with d loss / d V zeroed where the clamp bound."""
        inner, inside = cache
        if dscalar is not None:
            dscalar = dscalar * inside                                             # (B, T) the clamp's derivative
        return self.model.backward(inner, dlogits=dlogits, dscalar=dscalar, scalar_into_trunk=scalar_into_trunk)


def clamp_critic(trainer, lo: float = -10.0, hi: float = 10.0):
    """Replace ``trainer``'s separate critic by a :class:`ClampedCritic` of itself (before training); returns it."""
    if trainer.state.critic is None:
        raise ValueError(f"`trainer` must have a separate critic to clamp; its {type(trainer.cfg).__name__} has none")
    trainer.state.critic = ClampedCritic(trainer.state.critic, lo, hi)
    return trainer.state.critic


def offset_reward_model(reward_model, offset: float):
    """The same reward model (shared, frozen weights) with ``offset`` added to every score."""
    check_range("offset", offset)
    if not isinstance(reward_model, RewardModel):
        raise ValueError(f"`reward_model` must be a RewardModel, got {type(reward_model).__name__}")
    return RewardModel(reward_model.model, gain=reward_model.gain, bias=reward_model.bias + float(offset))


def scaled_reward_model(reward_model, scale: float):
    """The same reward model (shared, frozen weights) with every score multiplied by ``scale`` > 0: a reward model
    whose scores are large (Q22)."""
    check_range("scale", scale, 0, None, lo_open=True)
    if not isinstance(reward_model, RewardModel):
        raise ValueError(f"`reward_model` must be a RewardModel, got {type(reward_model).__name__}")
    return RewardModel(reward_model.model, gain=reward_model.gain * float(scale), bias=reward_model.bias * float(scale))


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
