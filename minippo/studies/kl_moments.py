"""How good are the per-token KL estimators? Their exact mean and variance, from the full distributions.

Legend: B batch, T tokens, V vocab; "..." is any leading shape (e.g. (B, T)).

The reward of RLHF charges ``beta * k(a_t)`` for every sampled token, with k one of the estimators of
:func:`minippo.rl.kl.kl_estimate` (Schulman 2020, "Approximating KL divergence",
http://joschu.net/blog/kl-approx.html). At a state s both distributions are known over the whole
vocabulary, so how each estimator behaves needs no sampling. With

    x(v) = log pi(v|s) - log pi_ref(v|s)                        (the log-ratio of token v)
    k1(v) = x(v)     k2(v) = x(v)^2 / 2     k3(v) = (exp(-x(v)) - 1) + x(v)

and the token drawn from a sampling distribution q (q = pi when sampling is plain; the top-k / top-p
distribution of :func:`minippo.rlhf.generate.sampling_distribution` otherwise)::

    KL(pi || pi_ref) = sum_v pi(v) x(v)                         what the estimators are for
    E_q[k]           = sum_v q(v) k(v)                          the estimator's mean: bias = E_q[k] - KL
    Var_q[k]         = sum_v q(v) (k(v) - E_q[k])^2             its variance for ONE sampled token
    P_q(k1 < 0)      = sum_v q(v) [x(v) < 0]                    how often one k1 sample is negative

With q = pi: E[k1] = E[k3] = KL exactly (k3's extra term sum_v pi_ref(v) - 1 is 0), while
E[k2] = E[x^2] / 2 is only close to KL when pi is close to pi_ref (biased). k2 and k3 are never
negative per sample; k1 is negative on every token that the policy likes less than the reference.

With top-k sampling (q = pi restricted to the k most probable tokens, renormalised; top-k set
``S``, ``M = pi(S)``, ``M_ref = pi_ref(S)``) the mean of k1 is no longer the KL::

    E_q[k1] = KL(q || q_ref) + log(M / M_ref)                   q_ref = pi_ref restricted to S

so a policy that moves probability mass OUT of its top-k (into tokens that are never sampled) has
``M < M_ref`` and can show a NEGATIVE estimated KL while its true KL is positive: the KL penalty
``-beta * k1`` becomes a bonus for moving (lesson 15).

:func:`compare_kl_estimators` measures the same things from samples: per-token and per-response
(sums over each response's valid tokens) bias and spread of k1, k2, k3 against the exact KL at the
sampled states; :func:`probe_estimators` and :func:`topk_probe` read the samples of
:func:`minippo.studies.probes.kl_probe` (lesson 15, parts B and C).
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_float_array, check_mask, check_range, check_same_shape
from minippo.rl.kl import KL_KINDS, kl_estimate
from minippo.rl.losses import log_softmax


def kl_estimator_moments(logits, logits_ref, temperature: float = 1.0, *, probs=None) -> dict[str, np.ndarray]:
    """Exact KL(pi || pi_ref) and the exact mean / variance of k1, k2, k3 at every position.

    Parameters
    ----------
    logits, logits_ref : (..., V) the policy's and the reference's logits (pi = softmax(logits / T)).
    temperature : T > 0, applied to both (one temperature, CONTRIBUTING.md).
    probs : (..., V) the distribution the tokens are sampled from (rows sum to 1), or None for pi
        itself. Tokens with ``probs`` 0 are never sampled.

    Returns
    -------
    dict of (...) float64 arrays: ``kl`` (exact), ``k1_mean``, ``k1_var``, ``k2_mean``, ``k2_var``,
    ``k3_mean``, ``k3_var`` (moments of ONE sampled token's estimate), ``k1_neg_prob`` (probability
    that the sampled token's k1 is negative).
    """
    logits = check_float_array("logits", logits)
    logits_ref = check_float_array("logits_ref", logits_ref)
    check_same_shape(logits=logits, logits_ref=logits_ref)
    logq = log_softmax(logits.astype(np.float64), temperature)               # (..., V) log pi
    logq_ref = log_softmax(logits_ref.astype(np.float64), temperature)       # (..., V) log pi_ref
    pi = np.exp(logq)
    if probs is None:
        q = pi
    else:
        q = check_float_array("probs", probs, shape=logits.shape).astype(np.float64)
        if (q < 0).any() or not np.allclose(q.sum(axis=-1), 1.0, atol=1e-6):
            raise ValueError("`probs` must be a distribution over the last axis: entries >= 0, rows summing to 1")
    x = logq - logq_ref                                                      # (..., V) log pi / pi_ref
    out = {"kl": np.sum(pi * x, axis=-1)}                                    # (...) exact KL
    for kind in KL_KINDS:
        k = kl_estimate(logq, logq_ref, kind)                                # (..., V) the estimate per token
        mean = np.sum(q * k, axis=-1)                                        # (...)
        out[f"{kind}_mean"] = mean
        out[f"{kind}_var"] = np.sum(q * (k - mean[..., None]) ** 2, axis=-1)
    out["k1_neg_prob"] = np.sum(q * (x < 0), axis=-1)
    return out


def topk_mass_decomposition(logits, logits_ref, top_k: int, temperature: float = 1.0) -> dict[str, np.ndarray]:
    """The two terms of ``E_q[k1] = KL(q || q_ref) + log(M / M_ref)`` under top-k sampling.

    ``S`` = the ``top_k`` most probable tokens of pi at each position; q and q_ref are pi and pi_ref
    restricted to S and renormalised. Returns (...) float64 arrays ``kl_within`` (KL(q || q_ref)),
    ``log_mass_ratio`` (log M - log M_ref), ``mass`` (M) and ``mass_ref`` (M_ref); their sum
    ``kl_within + log_mass_ratio`` equals ``kl_estimator_moments(..., probs=q)["k1_mean"]``.
    """
    logits = check_float_array("logits", logits)
    logits_ref = check_float_array("logits_ref", logits_ref)
    check_same_shape(logits=logits, logits_ref=logits_ref)
    V = logits.shape[-1]
    check_range("top_k", top_k, 1, V, integer=True)
    logq = log_softmax(logits.astype(np.float64), temperature)               # (..., V)
    logq_ref = log_softmax(logits_ref.astype(np.float64), temperature)
    # S: the top_k largest entries of each row (the same rule as the sampler: argpartition)
    keep = np.zeros(logq.shape, dtype=bool)
    top = np.argpartition(-logq, top_k - 1, axis=-1)[..., :top_k]            # (..., k)
    np.put_along_axis(keep, top, True, axis=-1)
    mass = np.sum(np.exp(logq) * keep, axis=-1)                              # (...) M
    mass_ref = np.sum(np.exp(logq_ref) * keep, axis=-1)                      # (...) M_ref
    q = np.exp(logq) * keep / mass[..., None]                                # (..., V)
    log_q = np.where(keep, logq - np.log(mass)[..., None], 0.0)
    log_q_ref = np.where(keep, logq_ref - np.log(mass_ref)[..., None], 0.0)
    return {"kl_within": np.sum(q * (log_q - log_q_ref), axis=-1), "log_mass_ratio": np.log(mass) - np.log(mass_ref),
            "mass": mass, "mass_ref": mass_ref}


def compare_kl_estimators(logp, logp_ref, kl_exact, mask) -> dict[str, dict[str, float]]:
    """Bias and spread of k1, k2, k3 from sampled tokens, against the exact KL at the same states.

    Parameters
    ----------
    logp, logp_ref : (B, T) log pi and log pi_ref of the sampled tokens.
    kl_exact : (B, T) exact KL(pi || pi_ref) at each sampled state (e.g. ``kl_estimator_moments()["kl"]``).
    mask : (B, T) 0/1, right-padded, 1 on valid tokens.

    Returns
    -------
    kind -> dict with, per token (over every valid token): ``token_mean``, ``token_bias`` (mean minus
    the mean exact KL), ``token_std``, ``token_neg_frac`` (fraction of negative estimates); and per
    response (sums over each row's valid tokens): ``response_mean``, ``response_bias``,
    ``response_err_std`` (std over rows of sum_t k - sum_t KL_exact: the estimator's own noise),
    ``response_std`` (std of sum_t k), ``response_neg_frac``. The key ``"exact"`` holds the exact
    KL's own ``token_mean``, ``token_std``, ``response_mean`` and ``response_std``.
    """
    logp = check_float_array("logp", logp, ndim=2).astype(np.float64)
    logp_ref = check_float_array("logp_ref", logp_ref, shape=logp.shape).astype(np.float64)
    kl_exact = check_float_array("kl_exact", kl_exact, shape=logp.shape).astype(np.float64)
    m = check_mask("mask", mask, shape=logp.shape, layout="right") != 0                       # (B, T) bool
    if not m.any():
        raise ValueError("`mask` has no valid token: nothing to compare")
    exact_sum = np.where(m, kl_exact, 0.0).sum(axis=1)                                         # (B,)
    out = {"exact": {"token_mean": float(kl_exact[m].mean()), "token_std": float(kl_exact[m].std()),
                     "response_mean": float(exact_sum.mean()), "response_std": float(exact_sum.std())}}
    for kind in KL_KINDS:
        k = kl_estimate(logp, logp_ref, kind)                                                  # (B, T)
        k_sum = np.where(m, k, 0.0).sum(axis=1)                                                # (B,)
        out[kind] = {"token_mean": float(k[m].mean()), "token_bias": float(k[m].mean() - kl_exact[m].mean()),
                     "token_std": float(k[m].std()), "token_neg_frac": float((k[m] < 0).mean()),
                     "response_mean": float(k_sum.mean()), "response_bias": float(k_sum.mean() - exact_sum.mean()),
                     "response_err_std": float((k_sum - exact_sum).std()), "response_std": float(k_sum.std()),
                     "response_neg_frac": float((k_sum < 0).mean())}
    return out


def response_mean(x, mask) -> float:
    """Mean over the B responses of ``sum_t x[b, t]`` over each response's valid tokens (``x``, ``mask``: (B, Tn))."""
    m = np.asarray(mask) != 0
    return float(np.where(m, x, 0.0).sum(axis=1).mean())


def probe_estimators(probe: dict) -> dict:
    """k1, k2, k3 on the fresh samples of :func:`minippo.studies.probes.kl_probe` (``probe``: its dict of (B, Tn)
    arrays), against the exact KL at the same states.

    Returns ``compare`` (:func:`compare_kl_estimators`), ``n_responses`` (B), ``exact_var`` (kind -> the exact
    variance of one token's estimate, mean over the valid tokens), ``exact_bias`` (kind -> max over the valid tokens
    of |E[k] - KL|, exact), ``k1_neg_prob`` (the exact probability that one
    token's k1 is negative, mean over the valid tokens) and ``tokens`` (``logp``, ``logp_ref``, ``kl_exact`` of
    the valid tokens, 1-D).
    """
    m = probe["mask"] != 0
    return {"compare": compare_kl_estimators(probe["logp"], probe["logp_ref"], probe["kl_exact"], probe["mask"]),
            "n_responses": int(probe["mask"].shape[0]),
            "exact_var": {k: float(probe[f"{k}_var"][m].mean()) for k in KL_KINDS},
            "k1_neg_prob": float(probe["k1_neg_prob"][m].mean()),
            "exact_bias": {k: float(np.abs(probe[f"{k}_mean"] - probe["kl_exact"])[m].max()) for k in KL_KINDS},
            "tokens": {k: probe[k][m] for k in ("logp", "logp_ref", "kl_exact")}}


def topk_probe(probe: dict, top_k: int, temperature: float = 1.0) -> dict:
    """What top-k sampling does to the k1 estimate of a sampled policy (``probe``: a
    :func:`minippo.studies.probes.kl_probe` result drawn with ``top_k``), per response (sums over the valid tokens,
    mean over the B responses): ``kl_exact``, ``k1_expected`` (E_q[k1]), ``k1_sampled`` (k1 of the drawn tokens),
    and the two terms of E_q[k1] = KL(q || q_ref) + log(M / M_ref) (:func:`topk_mass_decomposition`):
    ``kl_within``, ``log_mass_ratio``; ``mass`` and ``mass_ref``: M and M_ref, mean over the valid tokens."""
    m = probe["mask"] != 0
    dec = topk_mass_decomposition(probe["logits"], probe["logits_ref"], top_k, temperature)
    per_response = lambda x: response_mean(x, m)                              # noqa: E731
    return {"kl_exact": per_response(probe["kl_exact"]), "k1_expected": per_response(probe["k1_mean"]),
            "k1_sampled": per_response(probe["logp"] - probe["logp_ref"]),
            "kl_within": per_response(dec["kl_within"]), "log_mass_ratio": per_response(dec["log_mass_ratio"]),
            "mass": float(dec["mass"][m].mean()), "mass_ref": float(dec["mass_ref"][m].mean())}
