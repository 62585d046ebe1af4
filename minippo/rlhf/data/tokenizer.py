"""A byte-pair-encoding tokenizer trained on the synthetic corpus, and the padding helpers.

Built on HuggingFace ``tokenizers`` (a BPE model, Sennrich et al. 2016), trained locally from the
corpus iterator: nothing is downloaded. Design choices, each tested:

* **Special tokens** ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, registered when training starts, so
  they have these ids in every tokenizer we train.
* **Alphabet**: the 95 printable ASCII characters (space to ``~``) are in the vocabulary from the start,
  whether or not the corpus uses them. ``encode`` raises ``ValueError`` naming ``text`` for any other
  character (tab, newline, "é", ...) instead of silently dropping it.
* **Words carry their leading space** (the ``Metaspace`` pre-tokenizer: "the film" -> "▁the", "▁film",
  and the first word also gets one). BPE never merges across a space, so
  ``encode(a) + encode(b) == encode(a + " " + b)``: a prompt's ids followed by a response's ids are the
  ids of the whole sentence, and ``decode`` of the concatenation is the sentence.
* **Round trip**: ``decode(encode(s)) == s`` for every string of printable ASCII that does not start
  with a space (the decoder removes the one space it added at the start; one leading space is lost).
* **The literal text "<eos>"** is *not* a special token: special tokens are never parsed from user
  text (``encode_special_tokens = True``), so "<eos>" encodes to ordinary pieces ("▁<", "eos", ">",
  ...) and decodes back to the literal string. Only ``add_bos`` / ``add_eos`` produce the special ids.
* **Decoding** with ``skip_special=True`` (the default) stops at the first ``<eos>`` (it and everything
  after it are dropped) and removes every ``<pad>`` and ``<bos>``; with ``skip_special=False`` every id
  is shown, specials as their names.

Padding: prompts are left-padded (the last prompt token of every row sits at the same position, where
generation continues), responses right-padded; ``mask`` is 1 on real tokens (CONTRIBUTING.md).

Shapes: B batch (number of sequences), T tokens (the longest sequence or ``length``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers

from minippo.checks import check_int_array, check_range
from minippo.io import CorruptFileError, atomic_write_text, in_file

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, BOS, EOS)                       # ids 0, 1, 2
ALPHABET = tuple(chr(c) for c in range(0x21, 0x7F))    # printable ASCII except space (space becomes "▁")
METASPACE = "\u2581"                                   # "▁", the visible space of SentencePiece
FILE_NAME = "tokenizer.json"
_BAD_CHAR = re.compile(r"[^\x20-\x7e]")
MIN_VOCAB = len(SPECIAL_TOKENS) + len(ALPHABET) + 1    # specials, alphabet, "▁"


def _check_text(text, name: str = "text") -> str:
    """``text`` must be a str of printable ASCII characters."""
    if not isinstance(text, str):
        raise TypeError(f"`{name}` must be a str, got {type(text).__name__}")
    bad = _BAD_CHAR.search(text)
    if bad:
        raise ValueError(f"`{name}` contains the character {bad.group()!r} at position {bad.start()}; "
                         f"the tokenizer only knows printable ASCII (space to '~')")
    return text


def _build(hf_tokenizer):
    """Attach our pre-tokenizer/decoder settings and never parse special tokens from text."""
    hf_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always")
    hf_tokenizer.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    hf_tokenizer.encode_special_tokens = True    # "<eos>" typed in text is text (not saved in the json)
    return hf_tokenizer


class Tokenizer:
    """BPE tokenizer with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2 (see the module docstring).

    Build one with :meth:`train` (or :func:`train_tokenizer`) or :meth:`load`.
    """

    def __init__(self, hf_tokenizer):
        self._tok = _build(hf_tokenizer)
        for i, name in enumerate(SPECIAL_TOKENS):
            if self._tok.token_to_id(name) != i:
                raise ValueError(f"`hf_tokenizer` must have {name} at id {i}, "
                                 f"found {self._tok.token_to_id(name)}")
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        self.vocab_size = self._tok.get_vocab_size()

    # -- training, saving, loading ------------------------------------------------------------
    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 512) -> "Tokenizer":
        """Train BPE on ``texts`` (any iterable of str, e.g. ``corpus.iter_corpus(20000, seed)``).

        ``vocab_size`` counts the specials and the 95-character alphabet, so it must be at least
        ``MIN_VOCAB`` (98); a small corpus may stop with fewer merges (``.vocab_size`` is the real size).
        The same texts give the same vocabulary and merges.
        """

        check_range("vocab_size", vocab_size, MIN_VOCAB, None, integer=True)
        n_seen = 0

        def checked():                     # validate every training text as it streams past
            nonlocal n_seen
            for text in texts:
                n_seen += 1
                yield _check_text(text, f"texts[{n_seen - 1}]")

        hf = _build(HFTokenizer(models.BPE()))
        trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), special_tokens=list(SPECIAL_TOKENS),
                                      initial_alphabet=list(ALPHABET), show_progress=False)
        hf.train_from_iterator(checked(), trainer)
        if n_seen == 0:
            raise ValueError("`texts` is empty: the tokenizer needs at least one training text")
        return cls(hf)

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``tokenizer.json`` (atomically); ``path`` is the file or an existing folder."""
        path = Path(path)
        if path.is_dir():
            path = path / FILE_NAME
        atomic_write_text(path, self._tok.to_str(pretty=True))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokenizer":
        """Read a ``tokenizer.json`` written by :meth:`save` (``path`` is the file or its folder)."""
        path = Path(path)
        if path.is_dir():
            path = path / FILE_NAME
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer at {path}")
        try:
            hf = HFTokenizer.from_file(str(path))
        except Exception as exc:           # the tokenizers library raises its own Exception type
            raise CorruptFileError(path, f"not a readable tokenizer ({str(exc).splitlines()[0]})") from exc
        with in_file(path):
            return cls(hf)

    def to_str(self) -> str:
        """The tokenizer as its JSON text (vocabulary, merges, pre-tokenizer, decoder)."""
        return self._tok.to_str()

    # -- text <-> ids -------------------------------------------------------------------------
    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text``, optionally with ``<bos>`` in front and ``<eos>`` at the end."""
        ids = self._tok.encode(_check_text(text), add_special_tokens=False).ids
        return [self.bos_id] * add_bos + ids + [self.eos_id] * add_eos

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool = False,
                     add_eos: bool = False) -> list[list[int]]:
        """``encode`` of each text (the Rust side runs them in parallel)."""
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
            raise TypeError(f"`texts` must be a list of str, got {type(texts).__name__}")
        for i, t in enumerate(texts):
            _check_text(t, f"texts[{i}]")
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [[self.bos_id] * add_bos + e.ids + [self.eos_id] * add_eos for e in encs]

    def _check_ids(self, ids, name: str = "ids") -> list[int]:
        arr = check_int_array(name, np.asarray(ids, dtype=np.int64) if len(ids) == 0 else ids,
                              ndim=1, low=0, high=self.vocab_size)
        return [int(i) for i in arr]

    def decode(self, ids, *, skip_special: bool = True) -> str:
        """Text of the ids ``(T,)``. ``skip_special=True``: stop at the first ``<eos>``, drop
        ``<pad>``/``<bos>``; ``skip_special=False``: show everything, specials by name."""
        ids = self._check_ids(ids)
        if skip_special:
            if self.eos_id in ids:
                ids = ids[:ids.index(self.eos_id)]
            ids = [i for i in ids if i not in (self.pad_id, self.bos_id)]
        return self._tok.decode(ids, skip_special_tokens=False)

    def decode_batch(self, rows, *, skip_special: bool = True) -> list[str]:
        """``decode`` of each row of a (B, T) array or of a list of id lists."""
        return [self.decode(row, skip_special=skip_special) for row in rows]

    def pieces(self, ids) -> list[str]:
        """The vocabulary string of each id (e.g. ``['▁the', '▁fil', 'm']``), for printing rollouts."""
        return [self._tok.id_to_token(i) for i in self._check_ids(ids)]

    # -- padding ------------------------------------------------------------------------------
    def pad_left(self, seqs: Sequence[Sequence[int]], length: int | None = None):
        """Left-pad with ``<pad>``: see :func:`pad_left`."""
        return pad_left(seqs, self.pad_id, length)

    def pad_right(self, seqs: Sequence[Sequence[int]], length: int | None = None):
        """Right-pad with ``<pad>``: see :func:`pad_right`."""
        return pad_right(seqs, self.pad_id, length)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, pad_id=0, bos_id=1, eos_id=2)"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> Tokenizer:
    """Same as ``Tokenizer.train(texts, vocab_size)``."""
    return Tokenizer.train(texts, vocab_size)


def _pad(seqs, pad_id: int, length: int | None, left: bool):
    if isinstance(seqs, (str, bytes)) or not hasattr(seqs, "__len__"):
        raise TypeError(f"`seqs` must be a list of id sequences, got {type(seqs).__name__}")
    if len(seqs) == 0:
        raise ValueError("`seqs` must contain at least one sequence, got an empty list")
    check_range("pad_id", pad_id, 0, None, integer=True)
    rows = [check_int_array(f"seqs[{b}]", np.asarray(s, dtype=np.int64) if len(s) == 0 else s,
                            ndim=1, low=0) for b, s in enumerate(seqs)]
    longest = max(len(r) for r in rows)
    if length is None:
        length = longest
    check_range("length", length, longest, None, integer=True)
    ids = np.full((len(rows), length), pad_id, dtype=np.int64)      # (B, T)
    mask = np.zeros((len(rows), length), dtype=np.int64)            # (B, T), 1 on real tokens
    for b, r in enumerate(rows):
        n = len(r)
        if n == 0:
            continue
        sl = slice(length - n, length) if left else slice(0, n)
        ids[b, sl] = r
        mask[b, sl] = 1
    return ids, mask


def pad_left(seqs: Sequence[Sequence[int]], pad_id: int = 0, length: int | None = None):
    """Stack id sequences into ``(ids, mask)``, both (B, T) int64, padding on the left.

    Used for prompts: every row's last real token is at position T - 1. ``length`` (default: the
    longest sequence) must be at least the longest sequence. Empty sequences give all-zero mask rows;
    an empty list of sequences is a ``ValueError``.
    """
    return _pad(seqs, pad_id, length, left=True)


def pad_right(seqs: Sequence[Sequence[int]], pad_id: int = 0, length: int | None = None):
    """Stack id sequences into ``(ids, mask)``, both (B, T) int64, padding on the right (responses)."""
    return _pad(seqs, pad_id, length, left=False)
