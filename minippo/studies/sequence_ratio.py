"""Why PPO for language models clips the ratio per TOKEN, not per response.

Legend: B batch (responses), T tokens (right-padded); n = a response's number of valid tokens.

A response y = (a_0 .. a_{n-1}) is one action of the bandit "prompt -> response", and its probability
is a product of token probabilities, so its importance ratio is the product of the token ratios::

    r_t = pi(a_t|s_t) / pi_old(a_t|s_t) = exp(logp_t - logp_old_t)       token ratio (PPO paper eq. (6))
    R   = pi(y|x) / pi_old(y|x) = prod_t r_t = exp(sum_t (logp_t - logp_old_t))

A common claim (Q37): even if every token ratio lies in [0.8, 1.2], the product over 50 tokens can
reach 1.2^50 ~ 9100. That is the worst case, every token at the edge in the same direction. When the
token log-ratios are independent with mean mu and standard deviation s, ``log R`` is a random walk:
mean n mu, standard deviation sqrt(n) s, so R spreads like exp(+-sqrt(n) s) -- much less than
1.2^n, yet outside [1 - eps, 1 + eps] for about a third of the responses once sqrt(n) s = eps
(a normal beyond one standard deviation) and for most of them from about 1.5 eps on.

PPO's L^CLIP (eq. (7)) clips each r_t separately; a sequence-level clip would apply
``min(R A, clip(R, 1 - eps, 1 + eps) A)`` to the whole response, which zeroes the gradient of every
response whose R left the band on the side its advantage pushes to. :func:`ratio_band_stats`
measures both on the same numbers; a sequence-level objective is just L^CLIP on 1-D arrays of
summed log-probs, so both clip fractions come from :func:`minippo.rl.losses.clipped_policy_loss`.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_float_array, check_mask, check_range
from minippo.rl.losses import clipped_policy_loss


def sequence_log_ratio(logp, logp_old, mask) -> np.ndarray:
    """(B,) ``log R = sum_t (logp_t - logp_old_t)`` over each row's valid tokens (float64).

    Parameters
    ----------
    logp, logp_old : (B, T) new and old log-probabilities of the sampled tokens.
    mask : (B, T) 0/1, right-padded, 1 on valid tokens.
    """
    logp = check_float_array("logp", logp, ndim=2).astype(np.float64)
    logp_old = check_float_array("logp_old", logp_old, shape=logp.shape).astype(np.float64)
    m = check_mask("mask", mask, shape=logp.shape, layout="right") != 0
    return np.where(m, logp - logp_old, 0.0).sum(axis=1)                    # (B,) padding adds nothing


def ratio_band_stats(logp, logp_old, mask, clip_eps: float = 0.2, *, adv=None, seq_adv=None) -> dict:
    """How many tokens vs how many whole responses leave the band [1 - eps, 1 + eps].

    Parameters
    ----------
    logp, logp_old : (B, T) new and old log-probabilities of the sampled tokens.
    mask : (B, T) 0/1, right-padded.
    clip_eps : epsilon > 0.
    adv : (B, T) token advantages, or None: then ``token_clipfrac`` (PPO's clip fraction: the tokens
        whose gradient the clip zeroes, cases 3-4 of :data:`minippo.rl.losses.CLIP_CASES`) is
        also returned.
    seq_adv : (B,) one advantage per response, or None: then ``sequence_clipfrac``, the fraction of
        responses a sequence-level clip would zero, is also returned.

    Returns
    -------
    dict: ``token_outside`` (fraction of valid tokens with |r_t - 1| > eps), ``sequence_outside``
    (fraction of responses with |R - 1| > eps), ``token_log_ratio_std``, ``sequence_log_ratio_std``,
    ``sequence_ratio_max`` / ``sequence_ratio_min``, ``token_ratio_max`` / ``token_ratio_min``,
    ``mean_length``; plus ``token_clipfrac`` / ``sequence_clipfrac`` when ``adv`` / ``seq_adv`` are given.
    """
    check_range("clip_eps", clip_eps, 0, None, lo_open=True)
    log_R = sequence_log_ratio(logp, logp_old, mask)                         # (B,) validates the inputs
    m = np.asarray(mask) != 0
    if not m.any():
        raise ValueError("`mask` has no valid token: no ratio to measure")
    log_r = (np.asarray(logp, dtype=np.float64) - np.asarray(logp_old, dtype=np.float64))[m]   # (n_valid,)
    r, R = np.exp(log_r), np.exp(log_R)
    out = {"token_outside": float(np.mean(np.abs(r - 1) > clip_eps)),
           "sequence_outside": float(np.mean(np.abs(R - 1) > clip_eps)),
           "token_log_ratio_std": float(log_r.std()), "sequence_log_ratio_std": float(log_R.std()),
           "token_ratio_max": float(r.max()), "token_ratio_min": float(r.min()),
           "sequence_ratio_max": float(R.max()), "sequence_ratio_min": float(R.min()),
           "mean_length": float(m.sum(axis=1).mean())}
    if adv is not None:
        adv = check_float_array("adv", adv, shape=m.shape)
        _, _, stats = clipped_policy_loss(np.asarray(logp, dtype=np.float64), np.asarray(logp_old, dtype=np.float64),
                                          adv.astype(np.float64), m.astype(np.int64), clip_eps)
        out["token_clipfrac"] = float(stats["clipfrac"])
    if seq_adv is not None:
        seq_adv = check_float_array("seq_adv", seq_adv, shape=log_R.shape).astype(np.float64)
        # the sequence-level objective is L^CLIP on the summed log-probs: one "token" per response
        _, _, stats = clipped_policy_loss(log_R, np.zeros_like(log_R), seq_adv, None, clip_eps)
        out["sequence_clipfrac"] = float(stats["clipfrac"])
    return out


def iid_sequence_ratios(rng: np.random.Generator, n_tokens: int, size: int, low: float = 0.8,
                        high: float = 1.2) -> np.ndarray:
    """(size,) products of ``n_tokens`` token ratios drawn independently and uniformly from [low, high].

    Every token stays inside the band [0.8, 1.2] (PPO would clip none of them), yet the product is a
    random walk in log space: compare with the worst case ``high ** n_tokens`` (the 1.2^50 of Q37).
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"`rng` must be a np.random.Generator, got {type(rng).__name__}")
    check_range("n_tokens", n_tokens, 1, None, integer=True)
    check_range("size", size, 1, None, integer=True)
    check_range("low", low, 0, None, lo_open=True)
    check_range("high", high, low, None)
    r = rng.uniform(low, high, size=(size, n_tokens))                          # (size, n) token ratios
    return np.exp(np.log(r).sum(axis=1))                                      # (size,) prod_t r_t


RATIO_KEYS = ("token_outside", "sequence_outside", "token_clipfrac", "sequence_clipfrac", "token_log_ratio_std",
              "sequence_log_ratio_std")


def update_ratio_summary(records: list[dict], log_R, log_r, n_mean: float) -> dict:
    """The ratios after each update, read from the training records that carry :func:`ratio_band_stats` as
    ``probe/<key>`` and from the pooled ratios themselves.

    Parameters
    ----------
    records : the records of the updates to average over (each with ``probe/<key>`` for the keys of
        :data:`RATIO_KEYS` and ``policy/clipfrac_avg``).
    log_R : (N,) log R of every response measured; log_r : (M,) log r_t of every valid token measured.
    n_mean : the mean response length n.

    Returns the mean over the records of each key, ``train_clipfrac`` (the trainer's clip fraction during the
    update), ``R_max`` / ``R_min``, ``width`` (one per record: std(log R) / (sqrt(n) std(log r_t)), 1 for
    independent tokens), ``n_tokens`` (M) and ``n_responses`` (N).
    """
    out = {k: float(np.mean([rec[f"probe/{k}"] for rec in records])) for k in RATIO_KEYS}
    out["train_clipfrac"] = float(np.mean([rec["policy/clipfrac_avg"] for rec in records]))
    out["R_max"] = float(np.exp(log_R.max()))
    out["R_min"] = float(np.exp(log_R.min()))
    out["width"] = np.array([rec["probe/sequence_log_ratio_std"]
                             / (np.sqrt(n_mean) * rec["probe/token_log_ratio_std"]) for rec in records])
    out["n_tokens"], out["n_responses"] = len(log_r), len(log_R)
    return out
