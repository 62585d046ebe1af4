"""Probes for the study lessons: per-token quantities measured on a policy or on a trainer's rollout.

Legend: B batch (responses), Tp prompt columns, Tn response columns, V vocab.

The trainer logs averages; the lessons about credit assignment and KL (13, 15) need the per-token
arrays behind them. Each probe reuses the trainer's own functions (the same forward pass, rewards,
GAE, estimators), so what a lesson shows is what PPO computes:

* :func:`rollout_logprobs` - log pi(a_t|s_t) of a rollout's tokens under any policy, e.g. the actor
  AFTER the update (``trainer.step``'s callback runs then): with the rollout's ``logp`` (pi_old) this
  gives the ratios r_t the update ended with, and the update's KL(pi_old || pi).
* :func:`token_credit` - a rollout's per-token rewards and GAE advantages under a chosen reward
  shaping (``"kl_final"`` or ``"uniform"``, :func:`minippo.rlhf.ppo_knobs.shaped_rewards`) and values.
* :func:`kl_probe` - fresh samples of a policy (optionally top-k / top-p) with, at every sampled
  state, the exact KL to the reference and the exact moments of the k1 / k2 / k3 estimators under
  the distribution the token was really drawn from (:mod:`minippo.studies.kl_moments`).
* :func:`tempered_policy` - a copy of a TinyGPT whose logits are divided by tau: a policy that moves
  probability mass from its top tokens into the tail (tau > 1), the move top-k sampling cannot see.
* :func:`advantage_profile` - where the credit of the score lands: per position (from the start and
  from the end of each response) the correlation of the advantage with the response's score.
"""
from __future__ import annotations

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import check_choice, check_float_array, check_range
from minippo.rl.gae import gae
from minippo.rl.kl import kl_estimate
from minippo.rl.losses import logprobs_from_logits
from minippo.rl.masked import masked_mean
from minippo.rlhf.generate import encode_prompts, generate, sampling_distribution
from minippo.rlhf.ppo import forward_response
from minippo.rlhf.ppo_knobs import SHAPINGS, shaped_rewards
from minippo.studies.kl_moments import kl_estimator_moments


def rollout_logprobs(policy, rollout, temperature: float = 1.0) -> np.ndarray:
    """(B, Tn) float64 log-probs of ``rollout.response`` under ``policy`` at ``temperature``, 0 on padding.

    The same forward pass as the rollout (:func:`minippo.rlhf.ppo.forward_response` over the whole
    batch) on one BLAS thread, as the trainer's rollout runs: for the policy that produced the rollout this
    is the same computation with the same shapes, so it equals ``rollout.logp`` bitwise on any machine. (On
    another thread count or batch shape a BLAS kernel may sum the products in another order: equal only to
    float32 rounding, ``minippo.studies.pitfalls.logp_rounding_tolerance``.)
    """
    with single_blas_thread():
        logits, _, _ = forward_response(policy, rollout.sequences, rollout.attn_mask, rollout.prompt_len)  # (B, Tn, V)
        logp, _ = logprobs_from_logits(logits, rollout.response, temperature)                              # (B, Tn)
    return np.where(rollout.response_mask != 0, logp.astype(np.float64), 0.0)


def update_kl(policy, rollout, temperature: float = 1.0) -> dict:
    """How far ``policy`` moved from the rollout's pi_old, on the rollout's own tokens (samples of pi_old).

    Returns ``approx_kl`` (k3 mean over valid tokens: an unbiased estimate of KL(pi_old || pi), the
    quantity ``kl_old_target`` watches), ``logp`` (B, Tn) of ``policy`` and ``log_ratio`` (B, Tn) =
    logp - logp_old (0 on padding).
    """
    logp = rollout_logprobs(policy, rollout, temperature)
    logp_old = rollout.logp.astype(np.float64)
    m = rollout.response_mask
    return {"approx_kl": masked_mean(kl_estimate(logp_old, logp, "k3"), m), "logp": logp,
            "log_ratio": np.where(m != 0, logp - logp_old, 0.0)}


def token_credit(rollout, kl_coef: float, *, shaping: str, values=None, gamma: float = 1.0, lam: float = 0.95,
                 kl_kind: str = "k1") -> dict:
    """Per-token rewards and GAE advantages of ``rollout`` under the reward shaping ``shaping``.

    Parameters
    ----------
    rollout : Rollout with ``scores``, ``logp``, ``logp_ref``, ``response_mask``
    kl_coef : beta >= 0 of the KL penalty ``-beta * kl_t``
    shaping : ``"kl_final"`` (score on the last valid token) or ``"uniform"`` (score / n on every token)
    values : (B, Tn) V(s_t) for GAE, or None for ``rollout.values``; pass zeros (with ``lam=1``) to
        see the raw return-to-go each token is credited with
    gamma, lam : GAE coefficients (PPO paper eqs. (11)-(12))
    kl_kind : the per-token KL estimator of the penalty

    Returns
    -------
    dict of (B, Tn) float64 arrays ``rewards``, ``kl``, ``adv`` (GAE, not whitened), ``returns``
    (adv + values), all 0 on padding.
    """
    check_choice("shaping", shaping, SHAPINGS)
    check_range("kl_coef", kl_coef, 0, None)
    mask = rollout.response_mask
    values = rollout.values if values is None else check_float_array("values", values, shape=mask.shape)
    rewards, kl, _ = shaped_rewards(rollout.scores, rollout.logp, rollout.logp_ref, mask, kl_coef,
                                    kl_kind=kl_kind, shaping=shaping)
    adv, returns = gae(rewards, values.astype(np.float64) * (mask != 0), mask, gamma=gamma, lam=lam)
    return {"rewards": rewards, "kl": kl, "adv": adv, "returns": returns}


def kl_probe(policy, ref, tokenizer, prompts: list[str], *, rng: np.random.Generator, max_new_tokens: int,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> dict:
    """One fresh response per prompt from ``policy`` and everything about its KL to ``ref``, per token.

    The tokens are sampled from q = ``sampling_distribution(logits, temperature, top_k, top_p)``;
    ``logp`` is log pi under the full softmax (what the trainer uses, :mod:`minippo.rlhf.generate`).

    Returns
    -------
    dict with (B, Tn) arrays ``mask``, ``logp``, ``logp_ref``, ``kl_exact`` (KL(pi || pi_ref) at each
    sampled state), and the exact per-state moments of the estimators under q: ``k1_mean``, ``k1_var``,
    ``k2_mean``, ``k2_var``, ``k3_mean``, ``k3_var``, ``k1_neg_prob`` (0 on padding); ``logits`` and
    ``logits_ref`` (B, Tn, V); ``lengths`` (B,); ``sequences`` and ``attn_mask`` (B, Tp + Tn).
    """
    ids, pmask = encode_prompts(tokenizer, list(prompts))                                  # (B, Tp)
    with single_blas_thread():
        gen = generate(policy, ids, pmask, max_new_tokens=max_new_tokens, rng=rng, temperature=temperature,
                       top_k=top_k, top_p=top_p, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
        logits, _, _ = forward_response(policy, gen.sequences, gen.attn_mask, gen.prompt_len)   # (B, Tn, V)
        logits_ref, _, _ = forward_response(ref, gen.sequences, gen.attn_mask, gen.prompt_len)
    logp, _ = logprobs_from_logits(logits, gen.response, temperature)                      # (B, Tn)
    logp_ref, _ = logprobs_from_logits(logits_ref, gen.response, temperature)
    B, Tn, V = logits.shape
    probs = None
    if top_k or top_p < 1.0:
        probs = sampling_distribution(logits.reshape(B * Tn, V), temperature, top_k, top_p).reshape(B, Tn, V)
    moments = kl_estimator_moments(logits, logits_ref, temperature, probs=probs)
    m = gen.response_mask != 0
    out = {k: np.where(m, v, 0.0) for k, v in moments.items() if k != "kl"}
    out.update(mask=gen.response_mask, logp=np.where(m, logp.astype(np.float64), 0.0),
               logp_ref=np.where(m, logp_ref.astype(np.float64), 0.0), kl_exact=np.where(m, moments["kl"], 0.0),
               logits=logits, logits_ref=logits_ref, lengths=gen.lengths, sequences=gen.sequences,
               attn_mask=gen.attn_mask)
    return out


def tempered_policy(model, tau: float):
    """A copy of the TinyGPT ``model`` whose logits are ``model``'s divided by ``tau`` (> 0).

    The LM head reads ``ln_f(x) @ wte.T`` and ``ln_f(x) = norm(x) * w + b``, so scaling ``ln_f.w`` and
    ``ln_f.b`` by 1 / tau scales every logit by 1 / tau. The order of the tokens is kept (the same
    top-k set); tau > 1 flattens the distribution, moving mass from the top tokens into the tail.
    """
    check_range("tau", tau, 0, None, lo_open=True)
    out = model.copy()
    for name in ("ln_f.w", "ln_f.b"):
        out.params[name] *= out.params[name].dtype.type(1.0 / tau)
    return out


def advantage_profile(batches, n_positions: int = 6) -> dict:
    """Where the credit of the sequence score lands: per-position statistics of the advantages, pooled.

    Parameters
    ----------
    batches : iterable of ``(adv (B, Tn), mask (B, Tn), scores (B,))`` (e.g. one per iteration; Tn may
        differ between batches)
    n_positions : how many positions to report from each end of a response

    Returns
    -------
    dict of (n_positions,) float arrays, position k counted from the START (token k) and from the END
    (k = 0 is the last valid token, the EOS): ``corr_start`` / ``corr_end`` (correlation over responses
    between A at that position and the response's score: how much of the outcome the token is
    credited with), ``abs_start`` / ``abs_end`` (mean |A|); and ``n_responses``. A position a response
    does not have (shorter than k + 1 tokens) is left out for that response.
    """
    check_range("n_positions", n_positions, 1, None, integer=True)
    start = [[] for _ in range(n_positions)]
    end = [[] for _ in range(n_positions)]
    n = 0
    for adv, mask, scores in batches:
        adv = check_float_array("adv", adv, ndim=2)
        lengths = (np.asarray(mask) != 0).sum(axis=1)                          # (B,)
        scores = check_float_array("scores", scores, shape=lengths.shape)
        for b, length in enumerate(lengths):
            n += 1
            for k in range(min(n_positions, int(length))):
                start[k].append((adv[b, k], scores[b]))
                end[k].append((adv[b, length - 1 - k], scores[b]))

    def corr(pairs):
        a = np.asarray(pairs, dtype=np.float64).reshape(-1, 2)
        return float(np.corrcoef(a[:, 0], a[:, 1])[0, 1]) if len(a) > 2 and a.std(axis=0).min() > 0 else np.nan

    def mean_abs(pairs):
        return float(np.mean(np.abs([p[0] for p in pairs]))) if pairs else np.nan

    return {"corr_start": np.array([corr(p) for p in start]), "corr_end": np.array([corr(p) for p in end]),
            "abs_start": np.array([mean_abs(p) for p in start]), "abs_end": np.array([mean_abs(p) for p in end]),
            "n_responses": n}
