"""Preference data for the reward model: policy samples for the same prompt, compared by the simulated human.

Legend: M responses, N pairs, K responses per prompt, B batch (sequences), T tokens.

RLHF stage 2 (the reward model, Q29) needs comparisons
"which of these two responses to the same prompt is better?". Here the human is simulated by
:func:`minippo.rlhf.data.gold.gold_score`, and the comparisons are collected the way InstructGPT collected
its labels (Ouyang et al. 2022, arXiv:2203.02155, section 3.5: K = 4..9 responses per prompt, every
pair of them compared):

1. draw a prompt (``corpus.sample_prompts``) and sample K responses from the SFT policy for it
   (``generate``, KV cache, one sampling temperature);
2. score each full text (prompt + response, decoded) with the gold function: g_1 .. g_K;
3. for every pair (a, b) of them, sample the label from a Bradley-Terry human (Bradley & Terry 1952)
   with label temperature tau::

       P(a preferred over b) = sigmoid((g_a - g_b) / tau)               (the "label probability")

   drawn with a seeded ``np.random.Generator``, each pair independently. tau = 0 is a noiseless human
   (always the higher gold; a tie is a coin flip). The noise is deliberate: with tau = 0.1 some SFT
   pairs get the label against gold, so even the best possible reward model disagrees with some held-out
   labels (lesson 11 measures how many, and that best possible accuracy: the Bayes-optimal one);
4. the winner is ``chosen`` (y_w in InstructGPT eq. (1)), the loser ``rejected`` (y_l).

A pair whose two full texts are identical carries no information (a gold tie, so the label is a coin
flip, about the same tokens, which every reward model scores equally) and is dropped. SFT samples at
temperature 1 are diverse (both sentiments, many templates; duplicates are rare), so no corpus
sentences are mixed in.

Layout (:class:`PreferencePairs`): the M = n_prompts * K responses are stored once, as
``prompt ++ response`` RIGHT-padded rows with ``mask`` 1 on every real token (prompt, response, EOS)
and 0 on the padding after it; a pair is two row indices (``chosen_idx``, ``rejected_idx``) into them,
and ``chosen`` / ``rejected`` give the pairs as (N, T) arrays. The train / held-out split is by prompt.
The reward model reads its score on the last real token of each row
(``reward_model.last_token_index``), so it scores the left-padded-prompt layout that ``generate``
returns identically: TinyGPT's positions count real tokens only.

This module also holds the numbers used to judge a reward model against the gold function: pairwise
accuracy against the labels and against the gold order, and Pearson / Spearman correlation.
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass, fields

import numpy as np

from minippo.checks import check_float_array, check_int_array, check_mask, check_range, check_same_shape
from minippo.io import save_npz
from minippo.rl.dpo import log_sigmoid      # one stable log sigmoid for the labels, Bradley-Terry and DPO
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.data.gold import gold_scores
from minippo.rlhf.generate import generate_text

# ----------------------------------------------------------------------------------------------
# labels from the simulated human
# ----------------------------------------------------------------------------------------------

def sigmoid(x) -> np.ndarray:
    """1 / (1 + exp(-x)) = exp(log_sigmoid(x)), without overflow for large |x| (float64)."""
    return np.exp(log_sigmoid(np.asarray(x, dtype=np.float64)))


def preference_probability(gold_a, gold_b, label_temperature: float) -> np.ndarray:
    """P(a preferred over b) = sigmoid((gold_a - gold_b) / tau); tau = 0: 1, 0.5 or 0 (noiseless).

    Parameters
    ----------
    gold_a, gold_b : (N,) gold scores of the two responses
    label_temperature : tau >= 0

    Returns
    -------
    prob_a : (N,) float64
    """
    gold_a = check_float_array("gold_a", gold_a, ndim=1)
    gold_b = check_float_array("gold_b", gold_b, ndim=1)
    check_same_shape(gold_a=gold_a, gold_b=gold_b)
    check_range("label_temperature", label_temperature, 0, None)
    delta = gold_a.astype(np.float64) - gold_b                  # (N,)
    if label_temperature == 0:
        return 0.5 * (1.0 + np.sign(delta))
    return sigmoid(delta / label_temperature)


def sample_labels(gold_a, gold_b, label_temperature: float, rng: np.random.Generator):
    """Draw the simulated human's choices: ``a_preferred[i] ~ Bernoulli(P(a_i preferred over b_i))``.

    Returns
    -------
    a_preferred : (N,) bool
    prob_a : (N,) float64, the label probabilities of :func:`preference_probability`
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"`rng` must be a np.random.Generator, got {type(rng).__name__}")
    prob_a = preference_probability(gold_a, gold_b, label_temperature)
    return rng.random(prob_a.shape) < prob_a, prob_a


# ----------------------------------------------------------------------------------------------
# the dataset
# ----------------------------------------------------------------------------------------------

@dataclass
class PreferencePairs:
    """Labelled comparisons between responses to the same prompt (M responses, N pairs).

    The responses are stored once, in groups of K per prompt (rows ``g*K .. g*K + K - 1`` of a full
    dataset share prompt ``g``); a pair points at two responses of one group:

    sequences : (M, T) int64, ``prompt ++ response`` right-padded with ``<pad>`` (0)
    mask : (M, T) int64, 1 on real tokens (prompt, response, EOS), 0 on padding
    prompt_len : (M,) int64, real prompt tokens at the start of each row
    gold : (M,) float64, the gold score of each full text
    group : (M,) int64, the prompt (group) id of each response, non-decreasing
    chosen_idx, rejected_idx : (N,) int64 rows of the preferred (y_w) and the other (y_l) response
    prob_chosen : (N,) float64, the probability with which the human picked the chosen one,
        sigmoid((gold_chosen - gold_rejected) / tau) (< 0.5 when the label went against gold)

    ``chosen``, ``chosen_mask``, ``rejected``, ``rejected_mask``, ``gold_chosen``, ``gold_rejected``
    are the (N, T) / (N,) views of the pairs themselves.
    """

    sequences: np.ndarray
    mask: np.ndarray
    prompt_len: np.ndarray
    gold: np.ndarray
    group: np.ndarray
    chosen_idx: np.ndarray
    rejected_idx: np.ndarray
    prob_chosen: np.ndarray

    def __post_init__(self):
        seqs = check_int_array("sequences", self.sequences, ndim=2, low=0)
        mask = check_mask("mask", self.mask, shape=seqs.shape, layout="right")
        M = seqs.shape[0]
        check_int_array("prompt_len", self.prompt_len, shape=(M,), low=0)
        check_float_array("gold", self.gold, shape=(M,))
        check_int_array("group", self.group, shape=(M,), low=0)
        if (np.diff(self.group) < 0).any():
            raise ValueError("`group` must be non-decreasing: the responses of one prompt are contiguous")
        if (mask.sum(axis=1) <= self.prompt_len).any():
            raise ValueError("`mask` must cover the prompt and at least one response token per row")
        ci = check_int_array("chosen_idx", self.chosen_idx, ndim=1, low=0, high=max(M, 1))
        check_int_array("rejected_idx", self.rejected_idx, shape=ci.shape, low=0, high=max(M, 1))
        check_float_array("prob_chosen", self.prob_chosen, shape=ci.shape)
        if (self.group[ci] != self.group[self.rejected_idx]).any() or (ci == self.rejected_idx).any():
            raise ValueError("every pair must compare two different responses of the same group (prompt)")

    def __len__(self) -> int:
        """N, the number of pairs."""
        return int(self.chosen_idx.shape[0])

    @property
    def n_groups(self) -> int:
        return int(np.unique(self.group).size)

    def n_pairs_per_group(self) -> np.ndarray:
        """(max group id + 1,) int64: how many pairs each group has."""
        return np.bincount(self.group[self.chosen_idx], minlength=int(self.group.max(initial=-1)) + 1)

    # the pairs as arrays of their own: (N, T) and (N,)
    chosen = property(lambda self: self.sequences[self.chosen_idx])
    chosen_mask = property(lambda self: self.mask[self.chosen_idx])
    rejected = property(lambda self: self.sequences[self.rejected_idx])
    rejected_mask = property(lambda self: self.mask[self.rejected_idx])
    gold_chosen = property(lambda self: self.gold[self.chosen_idx])
    gold_rejected = property(lambda self: self.gold[self.rejected_idx])

    def select_groups(self, groups) -> "PreferencePairs":
        """The responses and pairs of the given group ids, renumbered 0, 1, ... in the order given."""
        groups = check_int_array("groups", np.asarray(groups, dtype=np.int64), ndim=1, low=0)
        if np.unique(groups).size != groups.size:
            raise ValueError("`groups` must not repeat a group id")
        new_id = np.full(max(int(self.group.max(initial=0)), int(groups.max(initial=0))) + 1, -1, dtype=np.int64)
        new_id[groups] = np.arange(groups.size)
        rows = np.flatnonzero(new_id[self.group] >= 0)                      # kept responses ...
        rows = rows[np.argsort(new_id[self.group[rows]], kind="stable")]     # ... in the new group order
        new_row = np.full(len(self.group), -1, dtype=np.int64)
        new_row[rows] = np.arange(rows.size)
        pairs = np.flatnonzero(new_id[self.group[self.chosen_idx]] >= 0)
        pairs = pairs[np.argsort(new_id[self.group[self.chosen_idx[pairs]]], kind="stable")]
        return PreferencePairs(
            sequences=self.sequences[rows], mask=self.mask[rows], prompt_len=self.prompt_len[rows],
            gold=self.gold[rows], group=new_id[self.group[rows]], chosen_idx=new_row[self.chosen_idx[pairs]],
            rejected_idx=new_row[self.rejected_idx[pairs]], prob_chosen=self.prob_chosen[pairs])

    def split(self, heldout_frac: float, rng: np.random.Generator) -> tuple["PreferencePairs", "PreferencePairs"]:
        """``(train, heldout)`` by PROMPT: ``round(heldout_frac * n_groups)`` random groups are held out,
        so no held-out response (or prompt) is ever trained on. Both come back in a random group order,
        so ``train.select_groups(range(n))`` is a random subset, nested in any larger one."""
        check_range("heldout_frac", heldout_frac, 0, 1, lo_open=True, hi_open=True)
        ids = np.unique(self.group)
        perm = ids[rng.permutation(ids.size)]
        n_held = int(round(heldout_frac * ids.size))
        if not 0 < n_held < ids.size:
            raise ValueError(f"`heldout_frac`={heldout_frac} leaves an empty split of {ids.size} prompts")
        return self.select_groups(perm[n_held:]), self.select_groups(perm[:n_held])

    def label_agrees_with_gold(self) -> np.ndarray:
        """(N,) bool: the label picked the response with the higher gold score (ties count False)."""
        return self.gold_chosen > self.gold_rejected

    def save(self, path) -> None:
        """Write every array to one ``.npz`` file (atomically; the same pairs give the same bytes)."""
        save_npz(path, {f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def load(cls, path) -> "PreferencePairs":
        """The pairs written by :meth:`save` (validated again). A file that is no .npz archive (random bytes, a
        truncated write) is a ``ValueError`` saying so; a missing array a ``KeyError`` naming it."""
        try:
            data = np.load(path)                          # allow_pickle=False: object arrays are refused
        except (ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError("not a .npz archive of preference pairs") from exc
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("not a .npz archive of preference pairs (a single .npy array)")
        with data:
            return cls(**{f.name: data[f.name] for f in fields(cls)})


# ----------------------------------------------------------------------------------------------
# sampling the policy
# ----------------------------------------------------------------------------------------------

@dataclass
class PolicySamples:
    """B responses of a policy with their full texts and gold scores.

    sequences : (B, T) int64 ``prompt ++ response`` right-padded; mask : (B, T) 1 on real tokens
    prompt_len : (B,) real prompt tokens; ended : (B,) bool, the response produced EOS
    texts : the decoded full texts (prompt + response, EOS and padding dropped); gold : (B,) float64
    """

    sequences: np.ndarray
    mask: np.ndarray
    prompt_len: np.ndarray
    ended: np.ndarray
    texts: list
    gold: np.ndarray


def right_align(sequences, attn_mask, pad_id: int = 0):
    """Move each row's real tokens to the start: ``[p p a b c d p] -> [a b c d p p p]``.

    ``generate`` returns left-padded prompts followed by right-padded responses, i.e. each row's
    real tokens form ONE contiguous run somewhere in the row; this rolls every run to position 0.

    Returns ``(sequences, mask)``, both (B, T) int64.
    """
    mask = check_mask("attn_mask", attn_mask, layout="any").astype(bool)
    sequences = check_int_array("sequences", sequences, shape=mask.shape, low=0)
    runs = mask[:, 0].astype(int) + (mask[:, 1:] & ~mask[:, :-1]).sum(axis=1)   # (B,) 0 -> 1 steps
    if (runs > 1).any():
        row = int(np.argmax(runs > 1))
        raise ValueError(f"`attn_mask` row {row} must hold one contiguous run of real tokens, "
                         f"got {mask[row].astype(int).tolist()}")
    n_real = mask.sum(axis=1)                                   # (B,)
    lead = mask.argmax(axis=1)                                  # (B,) index of the first real token
    T = mask.shape[1]
    cols = (np.arange(T)[None, :] + lead[:, None]) % T           # (B, T) source column of each slot
    out_mask = (np.arange(T)[None, :] < n_real[:, None]).astype(np.int64)   # (B, T)
    out = np.where(out_mask == 1, np.take_along_axis(np.asarray(sequences), cols, axis=1), pad_id)
    return out.astype(np.int64), out_mask


def _pad_columns(a: np.ndarray, T: int) -> np.ndarray:
    """Right-pad a (B, t) int array with zeros to (B, T)."""
    return np.pad(a, ((0, 0), (0, T - a.shape[1])))


def sample_policy(model, tokenizer, prompts: list[str], *, rng: np.random.Generator, max_new_tokens: int,
                  temperature: float = 1.0, batch_size: int = 256) -> PolicySamples:
    """Sample one response per prompt (``generate`` with the KV cache), ``batch_size`` prompts at a
    time, and score each full text with the gold function. Rows come back right-aligned
    (``prompt ++ response`` from column 0, see :func:`right_align`)."""

    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
        raise ValueError("`prompts` must be a non-empty list of str")
    check_range("batch_size", batch_size, 1, None, integer=True)
    parts = []
    for i in range(0, len(prompts), batch_size):
        texts, gen = generate_text(model, tokenizer, list(prompts[i:i + batch_size]), rng=rng,
                                   max_new_tokens=max_new_tokens, temperature=temperature)
        seqs, mask = right_align(gen.sequences, gen.attn_mask, tokenizer.pad_id)
        parts.append((seqs, mask, gen.attn_mask[:, :gen.prompt_len].sum(axis=1), gen.ended, texts))
    T = max(p[0].shape[1] for p in parts)
    return PolicySamples(
        sequences=np.concatenate([_pad_columns(p[0], T) for p in parts]),       # (B, T)
        mask=np.concatenate([_pad_columns(p[1], T) for p in parts]),            # (B, T)
        prompt_len=np.concatenate([p[2] for p in parts]).astype(np.int64),
        ended=np.concatenate([p[3] for p in parts]),
        texts=[t for p in parts for t in p[4]],
        gold=gold_scores([t for p in parts for t in p[4]]))


def make_preference_pairs(model, tokenizer, n_prompts: int, *, responses_per_prompt: int, rng: np.random.Generator,
                          label_temperature: float, max_new_tokens: int, temperature: float = 1.0,
                          batch_size: int = 256) -> PreferencePairs:
    """Sample K = ``responses_per_prompt`` responses of ``model`` for each of ``n_prompts`` prompts and
    label every pair of them: up to ``n_prompts * K (K - 1) / 2`` comparisons.

    Prompts come from ``corpus.sample_prompts`` (seeded from ``rng``); a pair whose two texts are
    identical is dropped (a gold tie: its label would be a coin flip about the same tokens); the
    others are labelled by :func:`sample_labels` (the first response of the pair is "a"). A prompt
    left without any pair (all K texts equal) is dropped with its responses, so every group has pairs.
    """
    check_range("n_prompts", n_prompts, 1, None, integer=True)
    check_range("responses_per_prompt", responses_per_prompt, 2, None, integer=True)
    K = int(responses_per_prompt)
    prompts = sample_prompts(n_prompts, seed=rng)
    s = sample_policy(model, tokenizer, [p for p in prompts for _ in range(K)], rng=rng,
                      max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size)
    # every pair (i, j), i < j, inside each group of K rows
    i, j = np.triu_indices(K, k=1)                                         # (K (K - 1) / 2,) each
    base = (np.arange(n_prompts) * K)[:, None]                              # (n_prompts, 1)
    a, b = (base + i).ravel(), (base + j).ravel()                           # (n_prompts * K (K - 1) / 2,)
    differ = np.array([s.texts[x] != s.texts[y] for x, y in zip(a, b)], dtype=bool)
    a, b = a[differ], b[differ]
    a_wins, prob_a = sample_labels(s.gold[a], s.gold[b], label_temperature, rng)
    data = PreferencePairs(
        sequences=s.sequences, mask=s.mask, prompt_len=s.prompt_len, gold=s.gold,
        group=np.repeat(np.arange(n_prompts, dtype=np.int64), K),
        chosen_idx=np.where(a_wins, a, b), rejected_idx=np.where(a_wins, b, a),
        prob_chosen=np.where(a_wins, prob_a, 1.0 - prob_a))
    if data.n_pairs_per_group().min() > 0:
        return data
    return data.select_groups(np.flatnonzero(data.n_pairs_per_group()))   # drop prompts whose K texts are equal


# ----------------------------------------------------------------------------------------------
# how good is a reward model? (pairwise accuracy, correlation with gold)
# ----------------------------------------------------------------------------------------------

def pairwise_accuracy(r_chosen, r_rejected) -> float:
    """Fraction of pairs with r_chosen > r_rejected (strictly; chosen = the sampled label)."""
    r_chosen = check_float_array("r_chosen", r_chosen, ndim=1)
    r_rejected = check_float_array("r_rejected", r_rejected, shape=r_chosen.shape)
    return float(np.mean(r_chosen > r_rejected)) if r_chosen.size else float("nan")


def gold_order_accuracy(r_chosen, r_rejected, gold_chosen, gold_rejected) -> float:
    """Among the pairs whose gold scores differ, the fraction that the scores r order like gold does
    (the accuracy against a noiseless human); NaN if every pair is a gold tie."""
    r_chosen = check_float_array("r_chosen", r_chosen, ndim=1)
    for name, x in (("r_rejected", r_rejected), ("gold_chosen", gold_chosen), ("gold_rejected", gold_rejected)):
        check_float_array(name, x, shape=r_chosen.shape)
    dg = np.asarray(gold_chosen, dtype=np.float64) - gold_rejected            # (N,)
    dr = np.asarray(r_chosen, dtype=np.float64) - r_rejected                  # (N,)
    keep = dg != 0
    return float(np.mean(np.sign(dr[keep]) == np.sign(dg[keep]))) if keep.any() else float("nan")


def pearson(x, y) -> float:
    """Pearson correlation of two (B,) arrays: cov(x, y) / (std x std y); NaN if one is constant."""
    x = check_float_array("x", np.asarray(x, dtype=np.float64), ndim=1)
    y = check_float_array("y", np.asarray(y, dtype=np.float64), shape=x.shape)
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt((xc * xc).sum() * (yc * yc).sum())
    return float((xc * yc).sum() / denom) if denom > 0 else float("nan")


def rankdata(x) -> np.ndarray:
    """(B,) float64 ranks 1..B of ``x``, ties sharing the mean of their ranks (as scipy's "average")."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])                  # first index of each tie group
    ends = np.r_[starts[1:], x.size]                                          # one past the last
    ranks = np.empty(x.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)        # mean of ranks start+1 .. end
    return ranks


def spearman(x, y) -> float:
    """Spearman rank correlation: the Pearson correlation of the (tie-averaged) ranks."""
    x = check_float_array("x", np.asarray(x, dtype=np.float64), ndim=1)
    y = check_float_array("y", np.asarray(y, dtype=np.float64), shape=x.shape)
    return pearson(rankdata(x), rankdata(y))
