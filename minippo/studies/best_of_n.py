"""Best-of-n sampling against a reward model: the second way to optimise a proxy (Gao et al. 2022).

Legend: P prompts, N candidates per prompt (``n_max``), K values of n, B = P * N sampled rows, T tokens.

**Best-of-n** (BoN, also "rejection sampling": Nakano et al. 2021, arXiv:2112.09332; Stiennon et al.
2020, arXiv:2009.01325): for a prompt x, draw n responses y_1 .. y_n from the policy pi, score them with
the reward model r (the proxy) and answer with the best one. No weight changes; n is the only knob, and
it buys the proxy score with a distance from pi that is known in closed form::

    KL(pi_bon_n || pi) = log n - (n - 1) / n          nats per response (KL_bon, :func:`bon_kl`)

Derivation: if the proxy scores of pi's responses are all distinct, the quantile u = F(r(y)) of the
selected response is the largest of n uniforms, density n u^(n-1); so pi_bon(y) = pi(y) n F(r(y))^(n-1)
and KL = E[log(n u^(n-1))] = log n + (n - 1) E[log u] = log n - (n - 1) / n. Gao, Schulman and Hilton
2022 (arXiv:2210.10760) plot their BoN curves against sqrt of this number, the same axis as their RL
runs' sqrt(KL(pi_RL || pi_init)). When pi repeats responses (ties in the score; a tiny LM writing short
sentences does) the formula is an UPPER bound on the true KL (Beirami et al. 2024, arXiv:2401.01879).
n = 1: 0; n = 2: 0.19; n = 16: 1.83; n = 256: 4.55 nats.

**The estimator** (the numbers this module returns): for each prompt, N = ``n_max`` candidates are
sampled ONCE and every n <= N is judged on them. Two ways, both unbiased for the expected score of the
best-of-n response E[s(argmax_{i <= n} r(y_i))] (s = the proxy r itself, or the gold score):

- ``"subsets"`` (default): the average over ALL C(N, n) subsets of n candidates of the score of the
  subset's best. Sorting the N candidates by proxy score, ascending (rank j = 1 .. N), candidate j is the
  best of exactly C(j - 1, n - 1) subsets, so the average is a weighted sum with weights
  w_j = C(j - 1, n - 1) / C(N, n) (:func:`bon_weights`; they sum to 1 by the hockey-stick identity).
  Each subset is a genuine best-of-n draw; averaging all of them (a U-statistic) keeps the mean and
  lowers the variance. n = 1 gives the mean of the candidates, n = N their proxy-best.
- ``"first"``: the best of the first n candidates: one genuine best-of-n draw per prompt, nested in n
  (what a student would do by hand; noisier).

Ties in the proxy score are broken towards the earlier candidate in both (identical texts also have the
same gold score, so this only matters for bookkeeping). The selected texts shown are always the best of
the first n (a real sample). The proxy is the reward model's normalised ``score`` (RM units: std 1 on
SFT samples), or ``reward_model="gold"``: best-of-n against the simulated human itself, the ceiling
that no proxy can beat (a "perfect reward model").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import check_choice, check_float_array, check_range
from minippo.rlhf.data.gold import gold_scores
from minippo.rlhf.generate import encode_prompts, generate

ESTIMATORS = ("subsets", "first")


def bon_kl(n) -> np.ndarray:
    """KL(pi_bon_n || pi) = log n - (n - 1) / n in nats, for n >= 1 (scalar or array; float64).

    The analytic best-of-n KL of Stiennon et al. 2020 / Gao et al. 2022; exact when the proxy scores
    are distinct, an upper bound otherwise (Beirami et al. 2024). Increasing, 0 at n = 1.
    """
    n = np.asarray(n, dtype=np.float64)
    if not np.all(np.isfinite(n)) or np.any(n < 1):
        raise ValueError(f"`n` must be >= 1 (number of samples), got {n.tolist()!r}")
    return np.log(n) - (n - 1.0) / n


def default_ns(n_max: int) -> np.ndarray:
    """(K,) int64: 1, 2, 4, ... up to ``n_max`` (``n_max`` itself appended if not a power of 2)."""
    check_range("n_max", n_max, 1, None, integer=True)
    ns = [2 ** k for k in range(int(math.log2(n_max)) + 1)]
    return np.array(ns + ([int(n_max)] if ns[-1] != n_max else []), dtype=np.int64)


def bon_weights(N: int, n: int) -> np.ndarray:
    """(N,) float64 weights w_j = C(j - 1, n - 1) / C(N, n), j = 1 .. N: the probability that the
    candidate of ascending rank j is the best of a random n-subset of the N (0 for j < n; sum 1).

    Computed in log space (``math.lgamma``) so that N in the thousands does not overflow.
    """
    check_range("N", N, 1, None, integer=True)
    check_range("n", n, 1, N, integer=True)
    log_c_total = math.lgamma(N + 1) - math.lgamma(n + 1) - math.lgamma(N - n + 1)      # log C(N, n)
    w = np.zeros(N, dtype=np.float64)
    for j in range(n, N + 1):                       # C(j - 1, n - 1) = (j - 1)! / ((n - 1)! (j - n)!)
        w[j - 1] = math.exp(math.lgamma(j) - math.lgamma(n) - math.lgamma(j - n + 1) - log_c_total)
    return w


def bon_curves(proxy, values, ns, estimator: str = "subsets") -> np.ndarray:
    """(P, K) estimates of E[values of the best-of-n by ``proxy``] for each prompt and each n in ``ns``.

    Parameters
    ----------
    proxy : (P, N) scores that choose (the reward model's)
    values : (P, N) scores that judge the chosen (gold, or the proxy itself)
    ns : (K,) ints in [1, N]
    estimator : ``"subsets"`` (every n-subset, weights :func:`bon_weights`) or ``"first"`` (the first n)
    """
    proxy = check_float_array("proxy", proxy, ndim=2)
    values = check_float_array("values", values, shape=proxy.shape)
    check_choice("estimator", estimator, ESTIMATORS)
    P, N = proxy.shape
    ns = np.asarray(ns)
    if ns.ndim != 1 or ns.size == 0 or not np.issubdtype(ns.dtype, np.integer) or ns.min() < 1 or ns.max() > N:
        raise ValueError(f"`ns` must be a non-empty 1-D list of ints in [1, {N}] (N candidates), got {ns.tolist()!r}")
    out = np.empty((P, ns.size), dtype=np.float64)
    if estimator == "first":
        for k, n in enumerate(ns):
            best = np.argmax(proxy[:, :n], axis=1)                       # (P,) first maximum wins ties
            out[:, k] = values[np.arange(P), best]
        return out
    # ascending by proxy; among equal scores the EARLIER candidate ranks higher (as argmax breaks ties)
    order = np.lexsort((-np.arange(N)[None, :].repeat(P, 0), proxy), axis=1)    # (P, N)
    ranked = np.take_along_axis(values.astype(np.float64), order, axis=1)       # (P, N) values by rank
    for k, n in enumerate(ns):
        out[:, k] = ranked @ bon_weights(N, int(n))                               # (P,)
    return out


@dataclass
class Candidates:
    """N sampled responses for each of P prompts (rows ``p * N .. p * N + N - 1`` belong to prompt p).

    sequences : (B, T) int64 ``prompt ++ response`` as ``generate`` returns them (left-padded prompt);
    attn_mask : (B, T) 1 on real tokens; texts : B decoded full texts; gold : (P, N) gold scores;
    lengths : (P, N) response tokens (EOS included); ended : (P, N) bool, produced an EOS.
    """

    prompts: list
    sequences: np.ndarray
    attn_mask: np.ndarray
    texts: list
    gold: np.ndarray
    lengths: np.ndarray
    ended: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        """(P, N)."""
        return self.gold.shape

    def text(self, p: int, i: int) -> str:
        """The full text of candidate ``i`` of prompt ``p``."""
        return self.texts[p * self.shape[1] + i]


def _check_prompts(prompts) -> list:
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("`prompts` must be a non-empty list of str")
    if not all(isinstance(p, str) for p in prompts):
        raise ValueError("`prompts` must hold str only")
    return list(prompts)


def sample_candidates(policy, tokenizer, prompts, n: int, rng: np.random.Generator, *, max_new_tokens: int = 24,
                      temperature: float = 1.0, batch_size: int = 1024) -> Candidates:
    """Sample ``n`` responses per prompt from ``policy`` (KV cache, ``batch_size`` rows per call) and
    score their full texts with the gold function. Deterministic given ``rng``'s state."""
    prompts = _check_prompts(prompts)
    check_range("n", n, 1, None, integer=True)
    check_range("batch_size", batch_size, 1, None, integer=True)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"`rng` must be a np.random.Generator, got {type(rng).__name__}")
    rows = [p for p in prompts for _ in range(n)]                               # B = P * N prompts
    parts = []
    for i in range(0, len(rows), batch_size):
        ids, mask = encode_prompts(tokenizer, rows[i:i + batch_size])          # (b, Tp)
        with single_blas_thread():      # decoding's small products (minippo.rlhf.generate)
            gen = generate(policy, ids, mask, max_new_tokens=max_new_tokens, rng=rng, temperature=temperature,
                           eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
        parts.append(gen)
    # batches differ in prompt and response width: left-pad the prompts, right-pad the responses
    Tp = max(g.prompt_len for g in parts)
    Tn = max(g.response.shape[1] for g in parts)

    def widen(a, g):                                                            # (b, Tp_g + Tn_g) -> (b, Tp + Tn)
        return np.pad(a, ((0, 0), (Tp - g.prompt_len, Tn - g.response.shape[1])))

    sequences = np.concatenate([widen(g.sequences, g) for g in parts])         # (B, T)
    attn_mask = np.concatenate([widen(g.attn_mask, g) for g in parts])         # (B, T)
    texts = [t for g in parts for t in tokenizer.decode_batch(g.sequences)]
    shape = (len(prompts), int(n))
    return Candidates(prompts=prompts, sequences=sequences, attn_mask=attn_mask, texts=texts,
                      gold=gold_scores(texts).reshape(shape),
                      lengths=np.concatenate([g.lengths for g in parts]).reshape(shape),
                      ended=np.concatenate([g.ended for g in parts]).reshape(shape))


def proxy_scores(candidates: Candidates, reward_model) -> np.ndarray:
    """(P, N) float64: the reward model's normalised score of every candidate (``"gold"``: the gold score)."""
    if isinstance(reward_model, str):
        check_choice("reward_model", reward_model, ("gold",))
        return candidates.gold.astype(np.float64)
    if not hasattr(reward_model, "score"):
        raise ValueError(f"`reward_model` must be a RewardModel (with .score) or 'gold', got "
                         f"{type(reward_model).__name__}")
    with single_blas_thread():
        scores = reward_model.score(candidates.sequences, candidates.attn_mask)
    return np.asarray(scores, dtype=np.float64).reshape(candidates.shape)


def _sem(x: np.ndarray) -> np.ndarray:
    """(K,) standard error over the P prompts of a (P, K) array (0 for a single prompt)."""
    P = x.shape[0]
    return x.std(axis=0, ddof=1) / np.sqrt(P) if P > 1 else np.zeros(x.shape[1])


def select_best(candidates: Candidates, reward_model, ns=None, estimator: str = "subsets") -> dict:
    """Best-of-n by ``reward_model`` for every n in ``ns`` (default :func:`default_ns` of N), from the
    candidates sampled once. See the module docstring for the estimator.

    Returns
    -------
    dict: ``ns`` (K,), ``kl`` (K,) = :func:`bon_kl`, ``sqrt_kl`` (K,); ``rm`` and ``gold`` (K,) the means over
    prompts of the selected response's proxy and gold score, ``rm_sem`` / ``gold_sem`` (K,) their standard
    errors over prompts, ``rm_per_prompt`` / ``gold_per_prompt`` (P, K); ``proxy`` (P, N) every
    candidate's score; ``selected`` (P, K) index of the best of the first n; ``selected_texts`` {n: P texts};
    ``estimator``; ``n_max`` N.
    """
    P, N = candidates.shape
    ns = default_ns(N) if ns is None else np.asarray(ns)
    proxy = proxy_scores(candidates, reward_model)
    rm = bon_curves(proxy, proxy, ns, estimator)                                 # (P, K)
    gold = bon_curves(proxy, candidates.gold, ns, estimator)                      # (P, K)
    selected = np.stack([np.argmax(proxy[:, :n], axis=1) for n in ns], axis=1)   # (P, K) best of the first n
    kl = bon_kl(ns)
    return {"ns": ns.astype(np.int64), "kl": kl, "sqrt_kl": np.sqrt(kl), "estimator": estimator, "n_max": N,
            "rm": rm.mean(axis=0), "gold": gold.mean(axis=0), "rm_sem": _sem(rm), "gold_sem": _sem(gold),
            "rm_per_prompt": rm, "gold_per_prompt": gold, "proxy": proxy, "selected": selected,
            "selected_texts": {int(n): [candidates.text(p, int(selected[p, k])) for p in range(P)]
                               for k, n in enumerate(ns)}}


def best_of_n(policy, reward_model, tokenizer, prompts, n: int, rng: np.random.Generator, *, ns=None,
              estimator: str = "subsets", max_new_tokens: int = 24, temperature: float = 1.0,
              batch_size: int = 1024) -> dict:
    """Best-of-n sampling from ``policy`` against ``reward_model`` for every n in ``ns`` up to ``n``.

    Samples ``n`` = N_max candidates per prompt once (:func:`sample_candidates`) and returns
    :func:`select_best`'s dict plus ``candidates``. ``reward_model``: a RewardModel, or ``"gold"``.
    """
    check_choice("estimator", estimator, ESTIMATORS)
    if not isinstance(reward_model, str) and not hasattr(reward_model, "score"):
        raise ValueError(f"`reward_model` must be a RewardModel (with .score) or 'gold', got "
                         f"{type(reward_model).__name__}")
    cands = sample_candidates(policy, tokenizer, prompts, n, rng, max_new_tokens=max_new_tokens,
                              temperature=temperature, batch_size=batch_size)
    return {**select_best(cands, reward_model, ns, estimator), "candidates": cands}
