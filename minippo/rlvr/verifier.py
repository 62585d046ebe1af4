"""The verifier: 1 when a response is the right sum, 0 otherwise; the reward of RL with verifiable rewards.

Legend: B batch (sequences), T tokens (a prompt left-padded, then a response right-padded).

Where RLHF asks a learned reward model for a score (:mod:`minippo.rlhf.reward_model`), here a rule
decides. A response counts as RIGHT when it is **well formed** (its tokens up to the first ``<eos>`` are
digits only: no sign, no special token, no leading zero, at least one digit, and the ``<eos>`` is there:
a response cut at ``max_new_tokens`` is unfinished) **and** its number is ``a + b``::

    prompt    response            verify
    23+58=    8 1 <eos>           1
    23+58=    7 1 <eos>           0      wrong sum (the carry forgotten)
    23+58=    0 8 1 <eos>         0      malformed: a leading zero
    23+58=    8 1 + <eos>         0      malformed: a sign in the answer
    23+58=    8 1 1 1 1 1         0      malformed: no <eos> within max_new_tokens

:func:`well_formed` alone is a format check (the "format reward" of verifiable-reward recipes, which pay for
the shape of an answer); ``minippo rlvr`` logs its rate beside the pass rate and trains on correctness only.

:class:`Verifier` gives the canonical PPO iteration (:mod:`minippo.rlhf.ppo`) what it asks of a reward
model, ``score(sequences, attn_mask) -> (B,)``: it reads each row's real tokens ``<bos> a+b= response``
(the ``=`` ends the prompt) and returns 1.0 or 0.0. Nothing is learned, so nothing can be hacked: the
policy's only way to a higher reward is the right sum.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_int_array, check_mask, check_same_shape

DIGITS = "0123456789"


def well_formed(response: str) -> bool:
    """A finished answer's text is one non-negative integer written plainly: digits only, no leading zero."""
    return bool(response) and all(ch in DIGITS for ch in response) and (response == "0" or response[0] != "0")


def parse_prompt(prompt: str) -> tuple[int, int]:
    """``(a, b)`` of a prompt ``"a+b="``; anything else is a ``ValueError`` naming it."""
    body = prompt[:-1] if prompt.endswith("=") else None
    parts = body.split("+") if body is not None else []
    if len(parts) != 2 or not all(well_formed(p) for p in parts):
        raise ValueError(f"`prompt` must look like 'a+b=' with a and b plain non-negative integers, got {prompt!r}")
    return int(parts[0]), int(parts[1])


def verify(prompt: str, response: str, ended: bool = True) -> int:
    """1 if ``response`` (the text before the EOS) is the right sum for ``prompt`` ("a+b=") and the response
    ``ended`` with its EOS; 0 otherwise (wrong, malformed or unfinished)."""
    a, b = parse_prompt(prompt)
    return int(bool(ended) and well_formed(response) and int(response) == a + b)


class Verifier:
    """The verifier with the reward model's interface, for the PPO iteration: ``score(sequences, attn_mask)``.

    Parameters
    ----------
    tokenizer : :class:`minippo.rlvr.tokenizer.CharTokenizer` (its ``=`` ends the prompt)
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.equals_id = tokenizer.id_of("=")

    def check(self, sequences, attn_mask) -> tuple[np.ndarray, np.ndarray]:
        """``(right, formed)``, (B,) bool each: the response is the right sum; it is well formed and ended.

        sequences : (B, T) int token ids ``<pad>... <bos> a+b= response <eos> <pad>...``
        attn_mask : (B, T) 0/1, 1 on the real tokens (a row's prompt and response)
        """
        tok = self.tokenizer
        sequences = check_int_array("sequences", sequences, ndim=2, low=0, high=tok.vocab_size)
        attn_mask = check_mask("attn_mask", attn_mask, layout="any")
        check_same_shape(sequences=sequences, attn_mask=attn_mask)
        right = np.zeros(len(sequences), dtype=bool)                     # (B,)
        formed = np.zeros(len(sequences), dtype=bool)                    # (B,)
        text_of = dict(enumerate(tok.pieces(list(range(tok.vocab_size)))))   # id -> its character
        for row, (ids, real) in enumerate(zip(sequences.tolist(), (attn_mask != 0).tolist())):
            ids = [i for i, r in zip(ids, real) if r]                    # <bos> prompt response
            if self.equals_id not in ids:
                raise ValueError(f"`sequences` row {row} has no '=' token: not a problem of the arithmetic task")
            split = ids.index(self.equals_id) + 1
            response = ids[split:]
            if tok.eos_id not in response:                               # unfinished: no reward
                continue
            response = response[:response.index(tok.eos_id)]
            if tok.pad_id in response or tok.bos_id in response:         # a sampled special token: malformed
                continue
            text = "".join(text_of[i] for i in response)
            formed[row] = well_formed(text)
            right[row] = bool(verify("".join(text_of[i] for i in ids[1:split]), text, ended=True))
        return right, formed

    def score(self, sequences, attn_mask) -> np.ndarray:
        """(B,) float64: 1.0 for a right answer, 0.0 otherwise (the reward model's ``score`` interface)."""
        return self.check(sequences, attn_mask)[0].astype(np.float64)
