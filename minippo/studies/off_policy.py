"""The off-policy lab (lesson 24): when the sampler is not the trainer, measured against the exact
gradient.

Legend: N responses in the space, n responses in a batch, L positions, S states, V vocab, P = S * V
parameters.

**(a) Exact.** On the enumerable space of :mod:`minippo.studies.exact` the trainer's policy pi (a
table of logits) and a mismatched sampler mu (a table of per-state log-probs, -inf where mu never
samples) define, for a batch of n responses y_i ~ mu with rewards R_i, the estimator the libraries
compute at the first minibatch of an update (ratio 1, nothing clipped):

    g = (1/n) sum_i A_i sum_t w_{i,t} grad log pi(y_{i,t} | s_{i,t}),
    A_i = R_i - mean_{j != i} R_j                                              (RLOO)

with the weights w of :func:`minippo.rl.off_policy.off_policy_weights` (:data:`ESTIMATORS`). Each
response's h(y) = sum_t w_t(y) grad log pi_t(y) is a fixed vector, so with b = E_mu[R]

    E[g] = E_mu[(R - b) h]                                 (the RLOO baseline's mean)
    g = 1 / C(n, 2) sum_{i < j} phi(y_i, y_j),
    phi(a, b) = (R_a - R_b)(h_a - h_b) / 2                 (a U-statistic)
    tr Cov[g] = (2 (n - 2) zeta_1 + zeta_2) / C(n, 2)      (Hoeffding 1948)

with zeta_1 = tr Cov[E_b phi(a, b)] and zeta_2 = tr Cov[phi(a, b)]: finite sums over the N responses
and the N^2 pairs, computed by :func:`exact_moments` in float64. The bias is ||E[g] - grad J||
against the exact gradient of the on-policy objective J = E_pi[R]; the spread sqrt(tr Cov[g]) is one
batch's noise. Sequence-level IS (w = pi(y)/mu(y)) is unbiased wherever mu covers pi's support:
E_mu[(pi/mu)(R - b) grad log pi] = grad J since E_pi[grad log pi] = 0. :func:`batch_gradient`
computes the same g from a sampled batch with the library's code (``rloo_advantages``,
``off_policy_weights``, ``corrected_policy_loss``, the table's backprop), and
:func:`monte_carlo_check` compares its mean with E[g] (``exact.bias_z``) and its spread with the
exact one.

**(c) The clip band at lr = 0** (:func:`band_use`): responses of the RLHF SFT policy sampled by each
mismatched sampler of ``minippo.rlhf.generate`` (its ``logits_precision``, ``top_p``, ``top_k``) or
by a copy of the policy k PPO iterations old, and the share of their tokens whose ratio r = pi_train
/ mu lies outside [1 - eps, 1 + eps]: what the mismatch alone uses of PPO's band before any learning
happened.
"""
from __future__ import annotations

import numpy as np

from minippo.blas import single_blas_thread
from minippo.rl.group_advantages import rloo_advantages
from minippo.rl.losses import log_softmax
from minippo.rl.off_policy import corrected_policy_loss, off_policy_weights
from minippo.rlhf.generate import encode_prompts, generate, round_logits, sampling_distribution
from minippo.rlhf.ppo import response_logprobs
from minippo.rlhf.stale import StalePolicy
from minippo.studies import exact as ex

#: estimator name -> (mode, level, cap, cap_low) of off_policy_weights
ESTIMATORS = {
    "uncorrected": ("none", "token", None, None),
    "IS, token": ("is", "token", None, None),
    "IS, sequence": ("is", "sequence", None, None),
    "TIS C=2, token": ("tis", "token", 2.0, None),
    "TIS C=2, sequence": ("tis", "sequence", 2.0, None),
    "TIS C=1.2, token": ("tis", "token", 1.2, None),
    "TIS C=1.2, sequence": ("tis", "sequence", 1.2, None),
    "MIS C=2, token": ("mis", "token", 2.0, None),
    "MIS C=2, sequence": ("mis", "sequence", 2.0, None),
    "IcePop [0.5, 2], token": ("icepop", "token", 2.0, 0.5),
    "IcePop [0.5, 2], sequence": ("icepop", "sequence", 2.0, 0.5),
}


# ----------------------------------------------------------------------------------------------
# (a) the samplers of the tabular policy, and the estimators' exact moments
# ----------------------------------------------------------------------------------------------

def trained_world(space, theta0, reward, *, steps: int, lr: float, stale: tuple = (1, 2)):
    """``(theta, stale_tables)``: ``steps`` exact ascent steps theta += lr grad J from theta0; the
    tables of the policy ``k`` updates before the last, for each k in ``stale`` (kept by
    :class:`StalePolicy`)."""
    keep = {k: StalePolicy(k) for k in stale}
    theta = theta0.copy()
    for _ in range(steps):
        for s in keep.values():
            s.push(theta)
        theta = theta + lr * ex.objective_gradient(space, theta, reward)
    for s in keep.values():
        s.push(theta)
    if any(s.lag < k for k, s in keep.items()):
        raise ValueError(f"`steps` = {steps} must be >= the largest staleness {max(stale)}")
    return theta, {k: s.sampler for k, s in keep.items()}


def sampler_tables(theta, stale_tables: dict, offset: float) -> dict:
    """name -> (S, V) log mu per state: the tabular policy's logits (shifted by ``offset``, which
    the softmax ignores and the rounding does not) rounded as a half-precision engine would, top-p /
    top-k truncation (``sampling_distribution``), and the stale copies."""
    out = {}
    for name, precision in (("fp16 logits", "float16"), ("bf16 logits", "bfloat16"),
                            ("bf16 logits, truncated", "bfloat16-truncate")):
        rounded = round_logits((theta + offset).astype(np.float32), precision)
        out[name] = log_softmax(rounded.astype(np.float64))
    with np.errstate(divide="ignore"):                           # a truncated token: log 0 = -inf
        out["top-p 0.9"] = np.log(sampling_distribution(theta, 1.0, 0, 0.9))
        out["top-k 3"] = np.log(sampling_distribution(theta, 1.0, 3, 1.0))
    for k, table in stale_tables.items():
        out[f"stale by {k}"] = log_softmax(table)
    return out


def sampler_logprobs(space, logq, rows=None) -> np.ndarray:
    """(n, L) log mu(y_t | y_<t) of the responses ``rows`` under the per-state table ``logq``, 0 on
    padding."""
    rows = np.arange(space.N) if rows is None else rows
    with np.errstate(invalid="ignore"):
        return np.where(space.mask[rows] == 1, logq[space.states[rows], space.tokens[rows]], 0.0)


def sampler_probabilities(space, logq) -> np.ndarray:
    """(N,) mu(y), 0 for a response the sampler never draws."""
    return np.exp(sampler_logprobs(space, logq).sum(axis=1))


def weights_of(space, theta, logq, estimator, rows) -> np.ndarray:
    """(n, L) the estimator's weights on the responses ``rows`` (every row in mu's support)."""
    mode, level, cap, cap_low = ESTIMATORS[estimator]
    logp = ex.token_logprobs(space, theta, rows)[0] * space.mask[rows]
    w, _ = off_policy_weights(logp, sampler_logprobs(space, logq, rows), space.mask[rows],
                              mode=mode, level=level, cap=cap, cap_low=cap_low)
    return w


def batch_gradient(space, rows, theta, logq, reward, estimator,
                   clip_eps: float = 0.2) -> np.ndarray:
    """One batch's estimate g (S, V) by the library's code: RLOO advantages, the weights, the
    corrected L^CLIP (logp_old = logp: ratio 1) with each token's term scaled by n_tokens / n (a sum
    over a response's tokens, a mean over responses), backpropagated into the table; the ascent
    direction."""
    mask = space.mask[rows]
    logp = ex.token_logprobs(space, theta, rows)[0] * mask
    adv = rloo_advantages(reward[rows], len(rows), mask)
    w = weights_of(space, theta, logq, estimator, rows) * (mask.sum() / len(rows))
    _, dlogp, _ = corrected_policy_loss(logp, logp, adv, w, mask, clip_eps)
    return -ex.backprop(space, theta, dlogp, rows)


def exact_moments(space, theta, logq, reward, estimator, n: int) -> dict:
    """E[g] (S, V) and tr Cov[g] of :func:`batch_gradient` for batches of ``n`` responses of mu,
    exactly (module docstring), and the expected share of tokens whose weight the estimator changed
    (truncated or masked). Responses mu never draws are left out of every sum."""
    mu = sampler_probabilities(space, logq)
    rows = np.flatnonzero(mu > 0)
    m, R = mu[rows] / mu[rows].sum(), reward[rows]          # renormalised against float64 rounding
    W = np.zeros(space.mask.shape)
    W[rows] = weights_of(space, theta, logq, estimator, rows)
    H = ex.per_response_gradients(space, theta, W)[rows].reshape(len(rows), -1)    # (N_mu, P) h(y)
    mR, mh, mRh = m @ R, m @ H, (m * R) @ H
    mean = mRh - mR * mh                                                # E[g] = E[R h] - E[R] E[h]
    phi1 = 0.5 * (R[:, None] * (H - mh) - mR * H + mRh)                 # (N_mu, P) E_b phi(a, b)
    zeta1 = m @ (phi1 ** 2).sum(axis=1) - mean @ mean
    G = H @ H.T                                                         # (N_mu, N_mu) h_a . h_b
    dist = np.diag(G)[:, None] + np.diag(G)[None, :] - 2 * G           # ||h_a - h_b||^2
    zeta2 = 0.25 * m @ (((R[:, None] - R[None, :]) ** 2) * dist) @ m - mean @ mean
    mode, level = ESTIMATORS[estimator][:2]
    valid = space.mask[rows] == 1
    if mode in ("tis", "mis", "icepop"):                    # the weights the bound changed
        logp = ex.token_logprobs(space, theta, rows)[0] * space.mask[rows]
        raw, _ = off_policy_weights(logp, sampler_logprobs(space, logq, rows), space.mask[rows],
                                    mode="is", level=level)
        changed = (W[rows] != raw) & valid
    else:
        changed = np.zeros_like(valid)
    changed_frac = float(m @ changed.sum(axis=1) / (m @ space.lengths[rows]))
    return {"mean": mean.reshape(theta.shape), "var": batch_variance(zeta1, zeta2, n),
            "zeta1": float(zeta1), "zeta2": float(zeta2), "changed_frac": changed_frac, "n": n}


def batch_variance(zeta1: float, zeta2: float, n) -> float | np.ndarray:
    """tr Cov[g] of a batch of ``n`` >= 2 responses from Hoeffding's zeta_1, zeta_2 (module
    docstring)."""
    n = np.asarray(n, dtype=np.float64)
    return np.maximum(2 * (n - 2) * zeta1 + zeta2, 0.0) / (n * (n - 1) / 2)


def sampler_kl(space, theta, logq) -> float:
    """KL(mu || pi) over whole responses, in nats: how far the sampler is from the trainer."""
    mu = sampler_probabilities(space, logq)
    rows = np.flatnonzero(mu > 0)
    log_pi = ex.sequence_logprobs(space, theta)[rows]
    return float(mu[rows] @ (np.log(mu[rows]) - log_pi))


def bias_table(space, theta, tables: dict, reward, n: int) -> dict:
    """``{"samplers": sampler -> {"kl", "rows": estimator -> {"bias", "rel_bias", "spread",
    "rel_spread", "rel_rmse", "changed_frac", "zeta1", "zeta2", "mean"}}, "grad_norm", "n"}``: every
    estimator's exact bias and batch noise against grad J (relative: / ||grad J||)."""
    gJ = ex.objective_gradient(space, theta, reward)
    scale = float(np.linalg.norm(gJ))
    out = {}
    for name, logq in tables.items():
        rows = {}
        for est in ESTIMATORS:
            mo = exact_moments(space, theta, logq, reward, est, n)
            bias = float(np.linalg.norm(mo["mean"] - gJ))
            spread = float(np.sqrt(mo["var"]))
            rows[est] = {"bias": bias, "rel_bias": bias / scale, "spread": spread,
                         "rel_spread": spread / scale,
                         "rel_rmse": float(np.hypot(bias, spread)) / scale,
                         "changed_frac": mo["changed_frac"], "zeta1": mo["zeta1"],
                         "zeta2": mo["zeta2"], "mean": mo["mean"]}
        out[name] = {"kl": sampler_kl(space, theta, logq), "rows": rows}
    return {"samplers": out, "grad_norm": scale, "n": n}


def monte_carlo_check(space, theta, tables: dict, reward, table: dict, n: int, batches: int,
                      rng) -> dict:
    """For every (sampler, estimator): ``batches`` batches of ``n`` responses drawn from mu, the
    library's :func:`batch_gradient` on each; ``z`` = ``exact.bias_z`` of their mean against the
    exact E[g] (within a few units when they agree) and the ratio of the measured spread to the
    exact one."""
    out = {}
    for name, logq in tables.items():
        mu = sampler_probabilities(space, logq)
        draw = lambda q: q.choice(space.N, size=n, p=mu / mu.sum())            # noqa: E731
        for est in ESTIMATORS:
            mc = ex.moments(lambda rows: batch_gradient(space, rows, theta, logq, reward, est),
                            draw, batches, rng)
            exact = table["samplers"][name]["rows"][est]
            out[(name, est)] = {"z": ex.bias_z(mc, exact["mean"]),
                                "spread_ratio": (mc["spread"] / exact["spread"]
                                                 if exact["spread"] > 0 else 1.0)}
    return out


# ----------------------------------------------------------------------------------------------
# (c) the clip band at lr = 0, on the RLHF SFT policy
# ----------------------------------------------------------------------------------------------

#: sampler name -> the options of generate() that make it (lesson 24 (c))
RLHF_SAMPLERS = {
    "same sampler (control)": {},
    "fp16 logits": {"logits_precision": "float16"},
    "bf16 logits": {"logits_precision": "bfloat16"},
    "bf16 logits, truncated": {"logits_precision": "bfloat16-truncate"},
    "top-p 0.9": {"top_p": 0.9},
    "top-k 20": {"top_k": 20},
}


def band_stats(logp_train, logp_sampler, mask, clip_eps: float) -> dict:
    """The share of valid tokens whose ratio r = exp(logp_train - logp_sampler) is outside
    [1 - eps, 1 + eps] (``outside``, with its binomial standard error ``se`` and the count), the
    mean |log r| (with its standard error over tokens) and the max, and the sequence-level TIS C=2
    weights' statistics (``off_policy_weights``)."""
    valid = mask == 1
    log_r = (logp_train.astype(np.float64) - logp_sampler)[valid]
    out = np.abs(np.exp(log_r) - 1) > clip_eps
    n = int(valid.sum())
    p = float(out.mean())
    _, w = off_policy_weights(logp_train, logp_sampler, mask, mode="tis", level="sequence", cap=2.0)
    a = np.abs(log_r)
    return {"outside": p, "se": float(np.sqrt(p * (1 - p) / n)), "count": int(out.sum()),
            "n_tokens": n, "mean_abs_log_ratio": float(a.mean()),
            "max_abs_log_ratio": float(a.max()),
            "mean_abs_log_ratio_se": float(a.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0,
            "mismatch_kl": w["mismatch_kl"], "seq_truncated_frac": w["truncated_frac"],
            "seq_ess_frac": w["ess_frac"]}


def band_use(study, *, clip_eps: float, max_new_tokens: int, stale_iterations: int,
             seed: int = 0) -> dict:
    """(c): every sampler of :data:`RLHF_SAMPLERS` draws one response per evaluation prompt from the
    SFT policy; the trainer's log-probs are the same forward pass's unrounded log pi
    (``Generation.logp``), the sampler's ``logp_sampler``. Then PPO runs ``stale_iterations``
    iterations from the SFT policy (the study's config):
    the SFT policy's samples scored by the policy after k iterations are the k-stale sampler's.
    Also the SFT policy's logit scale (the mean largest logit), which decides the rounding error."""
    ids, mask = encode_prompts(study.tokenizer, study.prompts)
    tok = dict(max_new_tokens=max_new_tokens, eos_id=study.tokenizer.eos_id,
               pad_id=study.tokenizer.pad_id)
    rows = {}
    with single_blas_thread():      # decoding's small products (minippo.rlhf.generate)
        for name, options in RLHF_SAMPLERS.items():
            gen = generate(study.sft, ids, mask, rng=np.random.default_rng([seed, 7]), **tok, **options)
            rows[name] = band_stats(gen.logp, gen.logp_sampler, gen.response_mask, clip_eps)
        gen = generate(study.sft, ids, mask, rng=np.random.default_rng([seed, 7]), **tok)
    snapshots = []
    study.run(study.config(iterations=stale_iterations, max_new_tokens=max_new_tokens),
              callback=lambda trainer, rollout, record: snapshots.append(trainer.actor.copy()))
    for k, policy in enumerate(snapshots, start=1):
        with single_blas_thread():
            logp = response_logprobs(policy, gen.sequences, gen.attn_mask, gen.response,
                                     gen.prompt_len, 1.0)
        rows[f"stale by {k} PPO iteration{'s' if k > 1 else ''}"] = band_stats(logp, gen.logp,
                                                                                gen.response_mask,
                                                                                clip_eps)
    logits, _ = study.sft.prefill(ids, mask)
    return {"rows": rows, "clip_eps": clip_eps, "n_prompts": len(study.prompts),
            "top_logit": float(logits.max(axis=1).mean())}
