"""A character tokenizer for the arithmetic task: one token per digit or sign, the three specials first.

Legend: B batch (sequences), T tokens.

The review corpus needs BPE (:mod:`minippo.rlhf.data.tokenizer`); ``23+58=81`` does not. Merged pieces
("23", "58=") would hide the digits the model has to add column by column, so every character is its own
token and the vocabulary is tiny::

    id     0      1      2      3  4  ...  12  13  14
    token  <pad>  <bos>  <eos>  0  1  ...  9   +   =

    "23+58=81"  ->  [5, 6, 13, 8, 11, 14, 11, 4]           (<bos> / <eos> only when asked for)

It has the interface of the corpus tokenizer that generation, PPO and the model folders use
(``pad_id`` / ``bos_id`` / ``eos_id``, ``encode``, ``encode_batch``, ``decode``, ``decode_batch``, ``pieces``,
``pad_left``, ``pad_right``, ``to_str``, ``save``, ``load``). ``decode`` stops at the first ``<eos>`` and drops
``<pad>`` / ``<bos>`` (``skip_special=False`` shows them by name). A character outside the alphabet is a
``ValueError`` naming the text and the position; ``decode(encode(s)) == s`` for every string of the
alphabet (tested).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from minippo.checks import check_int_array
from minippo.io import CorruptFileError, atomic_write_text, in_file, read_json
from minippo.rlhf.data.tokenizer import FILE_NAME, SPECIAL_TOKENS, pad_left, pad_right

ALPHABET = "0123456789+="          # the arithmetic task's characters, ids 3 .. 14
FORMAT = "minippo.char_tokenizer/1"


class CharTokenizer:
    """One token per character of ``alphabet``, after ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2."""

    def __init__(self, alphabet: str = ALPHABET):
        if not isinstance(alphabet, str) or not alphabet:
            raise ValueError(f"`alphabet` must be a non-empty str, got {alphabet!r}")
        if len(set(alphabet)) != len(alphabet):
            raise ValueError(f"`alphabet` must not repeat a character, got {alphabet!r}")
        if any(not (ch.isprintable() and not ch.isspace()) for ch in alphabet):
            raise ValueError(f"`alphabet` must hold printable characters other than space, got {alphabet!r}")
        self.alphabet = alphabet
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        self._ids = {ch: i + len(SPECIAL_TOKENS) for i, ch in enumerate(alphabet)}
        self.vocab_size = len(SPECIAL_TOKENS) + len(alphabet)

    def id_of(self, ch: str) -> int:
        """The id of one character of the alphabet."""
        return self._ids[ch]

    # -- text <-> ids -------------------------------------------------------------------------
    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text``, optionally with ``<bos>`` in front and ``<eos>`` at the end."""
        if not isinstance(text, str):
            raise TypeError(f"`text` must be a str, got {type(text).__name__}")
        for pos, ch in enumerate(text):
            if ch not in self._ids:
                raise ValueError(f"`text` {text!r} has the character {ch!r} at position {pos}; the tokenizer "
                                 f"knows only {self.alphabet!r}")
        return [self.bos_id] * add_bos + [self._ids[ch] for ch in text] + [self.eos_id] * add_eos

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool = False,
                     add_eos: bool = False) -> list[list[int]]:
        """``encode`` of each text."""
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
            raise TypeError(f"`texts` must be a list of str, got {type(texts).__name__}")
        return [self.encode(t, add_bos=add_bos, add_eos=add_eos) for t in texts]

    def _check_ids(self, ids, name: str = "ids") -> list[int]:
        arr = check_int_array(name, np.asarray(ids, dtype=np.int64) if len(ids) == 0 else ids,
                              ndim=1, low=0, high=self.vocab_size)
        return [int(i) for i in arr]

    def decode(self, ids, *, skip_special: bool = True) -> str:
        """Text of the ids ``(T,)``. ``skip_special=True``: stop at the first ``<eos>``, drop ``<pad>`` and
        ``<bos>``; ``skip_special=False``: show every id, specials by name."""
        ids = self._check_ids(ids)
        if skip_special and self.eos_id in ids:
            ids = ids[:ids.index(self.eos_id)]
        pieces = self.pieces(ids)
        if skip_special:
            pieces = [p for p, i in zip(pieces, ids) if i >= len(SPECIAL_TOKENS)]
        return "".join(pieces)

    def decode_batch(self, rows, *, skip_special: bool = True) -> list[str]:
        """``decode`` of each row of a (B, T) array or of a list of id lists."""
        return [self.decode(row, skip_special=skip_special) for row in rows]

    def pieces(self, ids) -> list[str]:
        """The string of each id (``<bos>``, ``2``, ``+``, ...), for printing rollouts."""
        names = list(SPECIAL_TOKENS) + list(self.alphabet)
        return [names[i] for i in self._check_ids(ids)]

    # -- padding ------------------------------------------------------------------------------
    def pad_left(self, seqs: Sequence[Sequence[int]], length: int | None = None):
        """Left-pad with ``<pad>``: :func:`minippo.rlhf.data.tokenizer.pad_left` (prompts)."""
        return pad_left(seqs, self.pad_id, length)

    def pad_right(self, seqs: Sequence[Sequence[int]], length: int | None = None):
        """Right-pad with ``<pad>``: :func:`minippo.rlhf.data.tokenizer.pad_right` (responses)."""
        return pad_right(seqs, self.pad_id, length)

    # -- saving and loading (the ``tokenizer.json`` of a model folder) -------------------------
    def to_str(self) -> str:
        """The tokenizer as JSON text: its format and alphabet."""
        return json.dumps({"format": FORMAT, "alphabet": self.alphabet})

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``tokenizer.json`` (atomically); ``path`` is the file or an existing folder."""
        path = Path(path)
        if path.is_dir():
            path = path / FILE_NAME
        atomic_write_text(path, self.to_str())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CharTokenizer":
        """Read a ``tokenizer.json`` written by :meth:`save` (``path`` is the file or its folder); another
        file (a BPE tokenizer of the corpus) is a :class:`minippo.io.CorruptFileError` naming it."""
        path = Path(path)
        if path.is_dir():
            path = path / FILE_NAME
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer at {path}")
        data = read_json(path)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CorruptFileError(path, f"not a character tokenizer of format {FORMAT}")
        with in_file(path):
            return cls(data.get("alphabet"))

    def __repr__(self) -> str:
        return f"CharTokenizer(alphabet={self.alphabet!r}, vocab_size={self.vocab_size})"
