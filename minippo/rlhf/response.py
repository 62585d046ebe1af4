"""Logits, log-probs and values at the response positions: the off-by-one of language-model RL.

Legend: B batch, Tp prompt columns (left-padded), Tn response columns (right-padded), T = Tp + Tn,
V vocab.

A sequence is ``prompt ++ response``; the logits at column p predict the token at column p + 1, so
response token j (column Tp + j) is scored by the logits at column Tp + j - 1, and its value
V(s_j) is read at the same column: s_j = prompt + r_0 .. r_{j-1} is the state in which the action
a_j = r_j was chosen. With Tp = 3, Tn = 4::

    column       0    1    2  |  3    4    5    6
    sequence     p0   p1   p2 |  r0   r1   r2   r3          (r3 may be EOS or padding)
    model input  p0   p1   p2    r0   r1   r2                (the last token is never an input)
    read at                p2    r0   r1   r2                columns Tp-1 .. T-2
    predicts               r0    r1   r2   r3                response tokens 0 .. Tn-1

:func:`forward_response` runs the model on ``sequences[:, :-1]`` and returns the logits (B, Tn, V)
and the scalar head (B, Tn) at columns ``Tp - 1 .. T - 2``; :func:`backward_response` puts gradients
given at those columns back into full-length arrays (zeros at the prompt columns) for
``TinyGPT.backward``. Everything that scores a response token (rollout, reference, critic, update)
goes through these two functions, so the alignment is written once.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_range
from minippo.rl.losses import logprobs_from_logits


def forward_response(model, sequences, attn_mask, prompt_len: int, *, scalar: bool = False):
    """Logits (and the scalar head) of ``model`` at the columns that predict the response tokens.

    Parameters
    ----------
    model : TinyGPT
    sequences : (B, T) int64 ``prompt ++ response``
    attn_mask : (B, T) 0/1, 1 on real tokens (left-padded prompt, right-padded response)
    prompt_len : Tp >= 1, the column of the first response token
    scalar : also return the scalar head (values of a critic)

    Returns
    -------
    logits : (B, Tn, V) where ``logits[:, j]`` predicts response token j
    values : (B, Tn) the scalar head at the same columns, or None
    cache : for :func:`backward_response`
    """
    T = np.shape(sequences)[1]
    check_range("prompt_len", prompt_len, 1, T - 1, integer=True)
    logits, values, cache = model.forward(sequences[:, :-1], attn_mask[:, :-1], scalar=scalar)  # (B, T-1, V)
    cols = slice(prompt_len - 1, None)                                 # columns Tp-1 .. T-2
    return logits[:, cols], (values[:, cols] if scalar else None), (cache, prompt_len, logits.shape)


def backward_response(model, cache, dlogits=None, dvalues=None, *, scalar_into_trunk: bool = True) -> dict:
    """Parameter gradients from d loss / d logits (B, Tn, V) and/or d loss / d values (B, Tn) given at
    the response columns (see the module docstring); ``scalar_into_trunk=False`` is the stop-gradient
    of a value head sharing the actor's trunk."""
    model_cache, prompt_len, (B, Tm1, V) = cache
    cols = slice(prompt_len - 1, None)
    full_dlogits = full_dvalues = None
    if dlogits is not None:
        full_dlogits = np.zeros((B, Tm1, V), dtype=dlogits.dtype)     # (B, T-1, V) 0 at prompt columns
        full_dlogits[:, cols] = dlogits
    if dvalues is not None:
        full_dvalues = np.zeros((B, Tm1), dtype=dvalues.dtype)        # (B, T-1)
        full_dvalues[:, cols] = dvalues
    return model.backward(model_cache, dlogits=full_dlogits, dscalar=full_dvalues,
                          scalar_into_trunk=scalar_into_trunk)


def response_logprobs(model, sequences, attn_mask, response, prompt_len: int, temperature: float = 1.0,
                      *, return_logits: bool = False):
    """``log_softmax(logits / temperature)`` of ``model`` at the response tokens: (B, Tn).

    Padding columns hold meaningless finite numbers: multiply by the response mask. With
    ``return_logits=True`` returns ``(logp, logits)`` (logits (B, Tn, V), e.g. for the exact KL).
    """
    logits, _, _ = forward_response(model, sequences, attn_mask, prompt_len)
    logp, _ = logprobs_from_logits(logits, response, temperature)
    return (logp, logits) if return_logits else logp
