"""Corpus text -> token batches for language modelling (SFT), and the unigram baseline.

Legend: B batch (sentences), T tokens (the longest sequence of the batch, minus one), V vocab.

Each sentence becomes one sequence ``<bos> ids <eos>``. A batch is right-padded and shifted by one
position, the usual next-token setup::

    seq        <bos>  the   film  was   good  .     <eos> <pad>
    idx        <bos>  the   film  was   good  .     <eos>            = seq[:, :-1]
    targets    the    film  was   good  .     <eos> <pad>            = seq[:, 1:]
    attn_mask  1      1     1     1     1     1     1                = real(seq)[:, :-1]
    mask       1      1     1     1     1     1     0                = real(seq)[:, 1:]

so the model learns to predict every word, the final period and the EOS (that is what makes
generation stop), and never a pad. Generation later starts from a prompt ``<bos> the film`` and
continues it, exactly the distribution trained here.

Minibatches are a pure function of ``(seed, step)``: epoch ``e = step // steps_per_epoch`` uses the
permutation ``default_rng([*seed, e]).permutation(n)`` and step ``s`` takes its ``s % steps_per_epoch``-th
slice (the last incomplete slice of an epoch is skipped). A resumed run therefore sees exactly the
batches of an uninterrupted one without saving any iterator state.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_int_array, check_range
from minippo.rlhf.data.tokenizer import pad_right


def split_corpus(texts: list[str], heldout_frac: float) -> tuple[list[str], list[str]]:
    """``(train, heldout)``: the last ``round(heldout_frac * n)`` sentences (at least 1) are held out.

    The corpus is i.i.d. by construction (every sentence is drawn afresh from the grammar), so the
    tail is as good a held-out sample as a random subset; short sentences can occur in both halves.
    """
    check_range("heldout_frac", heldout_frac, 0, 1, lo_open=True, hi_open=True)
    n = len(texts)
    n_heldout = max(1, int(round(heldout_frac * n)))
    if n - n_heldout < 1:
        raise ValueError(f"`texts` has {n} sentences: too few to hold out {heldout_frac:g} and keep one to train on")
    return list(texts[:n - n_heldout]), list(texts[n - n_heldout:])


def encode_sequences(tokenizer, texts: list[str], block_size: int) -> tuple[list[np.ndarray], int]:
    """Each text as an int64 array ``<bos> ids <eos>``; returns ``(sequences, n_dropped)``.

    Sequences longer than ``block_size`` tokens are dropped (and counted): the model could not
    generate them within its block, so it should not learn them truncated (without their EOS).
    """
    check_range("block_size", block_size, 2, None, integer=True)
    rows = tokenizer.encode_batch(list(texts), add_bos=True, add_eos=True)
    seqs = [np.asarray(r, dtype=np.int64) for r in rows if len(r) <= block_size]
    return seqs, len(rows) - len(seqs)


def lm_batch(seqs: list[np.ndarray], pad_id: int = 0):
    """Right-pad ``seqs`` and shift: ``(idx, targets, mask, attn_mask)``, each (B, T) int64.

    ``T`` is the longest sequence of the batch minus one (see the module docstring's picture).
    """
    if len(seqs) == 0:
        raise ValueError("`seqs` must contain at least one sequence")
    for b, s in enumerate(seqs):
        if len(s) < 2:
            raise ValueError(f"`seqs[{b}]` has {len(s)} token(s); a training sequence needs at least 2 (<bos> ... <eos>)")
    ids, real = pad_right(seqs, pad_id)                    # (B, T + 1)
    return ids[:, :-1], ids[:, 1:], real[:, 1:], real[:, :-1]


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Full batches per pass over ``n`` sequences (at least 1: a batch larger than ``n`` uses all of them)."""
    return max(1, n // batch_size)


def batch_indices(n: int, batch_size: int, step: int, seed: int | tuple[int, ...]) -> np.ndarray:
    """Indices of the sequences in minibatch ``step`` (0-based): a pure function of its arguments.

    ``seed`` is an int or a tuple of ints (e.g. ``(run_seed, purpose)``), extended by the epoch number.
    """
    check_range("n", n, 1, None, integer=True)
    check_range("batch_size", batch_size, 1, None, integer=True)
    check_range("step", step, 0, None, integer=True)
    per_epoch = steps_per_epoch(n, batch_size)
    epoch, s = divmod(step, per_epoch)
    perm = np.random.default_rng([*np.atleast_1d(seed).tolist(), epoch]).permutation(n)   # this epoch's order
    return perm[s * batch_size:(s + 1) * batch_size]


def unigram_loss(train: list[np.ndarray], heldout: list[np.ndarray], vocab_size: int) -> float:
    """Held-out cross-entropy (nats per predicted token) of a unigram model fitted on the training targets.

    The unigram model ignores the context: ``p(w) = (count(w) + 1) / (N + V)`` (add-one smoothing, so
    an unseen token costs ``log(N + V)`` rather than infinity), counted over the tokens that are
    predicted in training (everything after ``<bos>``, the EOS included). A language model that
    uses the context must beat it; the gap is what the transformer learned beyond word frequencies.
    """
    def targets(seqs):
        return np.concatenate([s[1:] for s in seqs]) if seqs else np.zeros(0, dtype=np.int64)

    y_train = check_int_array("train", targets(train), low=0, high=vocab_size)
    y_held = check_int_array("heldout", targets(heldout), low=0, high=vocab_size)
    if y_held.size == 0:
        raise ValueError("`heldout` must contain at least one predicted token")
    counts = np.bincount(y_train, minlength=vocab_size).astype(np.float64)      # (V,)
    logp = np.log(counts + 1.0) - np.log(counts.sum() + vocab_size)            # (V,) log p(w)
    return float(-logp[y_held].mean())
