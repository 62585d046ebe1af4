"""The categorical policy over the vocabulary: log-softmax, taken-token log-probs, entropy.

Legend: B batch, T tokens, V vocab; "..." is any leading shape (e.g. (B, T)).

The policy at each position is ``pi = softmax(logits / temperature)``. DESIGN: there is ONE
temperature, applied to the logits of the policy, the old policy, the reference and the
entropy alike; a ratio or a KL computed with mismatched temperatures is wrong (the sampled
tokens came from the tempered distribution).

Forward/backward pairs in the layer API of ``minippo.nn``::

    logp, cache = logprobs_from_logits(logits, actions, temperature)   # (..., V) -> (...)
    dlogits = logprobs_backward(dlogp, cache)                           # (...) -> (..., V)
    ent, cache = entropy_from_logits(logits, temperature)               # (..., V) -> (...)
    dlogits = entropy_backward(dent, cache)

With z = logits / temperature and p = softmax(z):

    d log p_a / d z_j = 1[j = a] - p_j
    d H / d z_j       = -p_j (log p_j + H),     H = -sum_j p_j log p_j
    d z_j / d logits_j = 1 / temperature
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_float_array, check_int_array, check_range


def _tempered(logits, temperature) -> np.ndarray:
    logits = check_float_array("logits", logits)
    if logits.ndim < 1 or logits.shape[-1] == 0:
        raise ValueError(f"`logits` must have a non-empty last (vocab) axis, got shape {logits.shape}")
    check_range("temperature", temperature, 0, None, lo_open=True)
    return logits / logits.dtype.type(temperature)                   # z, (..., V)


def log_softmax(logits, temperature=1.0):
    """Stable ``log softmax(logits / temperature)`` over the last axis: ``z - max - log sum exp(z - max)``."""
    z = _tempered(logits, temperature)
    z = z - z.max(axis=-1, keepdims=True)                             # shift: the largest exp is 1
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))          # (..., V)


def logprobs_from_logits(logits, actions, temperature=1.0):
    """Log-probability of the taken tokens: ``logp = log_softmax(logits / T)[..., actions]``.

    Parameters
    ----------
    logits : (..., V) float32/float64.
    actions : (...) integer token ids in [0, V).
    temperature : > 0.

    Returns
    -------
    logp : (...) in the logits' dtype.
    cache : what :func:`logprobs_backward` needs (the probabilities, the actions, T).
    """
    logq = log_softmax(logits, temperature)                           # (..., V)
    V = logq.shape[-1]
    actions = check_int_array("actions", actions, shape=logq.shape[:-1], low=0, high=V)
    logp = np.take_along_axis(logq, actions[..., None], axis=-1)[..., 0]    # (...)
    return logp, (np.exp(logq), actions, float(temperature))


def logprobs_backward(dlogp, cache):
    """dL/dlogits from dL/dlogp: ``dlogits = dlogp[..., None] * (onehot(a) - p) / T``."""
    probs, actions, temperature = cache
    dlogp = check_float_array("dlogp", dlogp, shape=probs.shape[:-1])
    # logp = z[a] - logsumexp(z)  ->  d/dz = onehot(a) - softmax(z)
    onehot = np.zeros_like(probs)                                     # (..., V)
    np.put_along_axis(onehot, actions[..., None], 1.0, axis=-1)
    dz = (onehot - probs) * dlogp[..., None]                          # (..., V)
    return (dz / temperature).astype(probs.dtype)                     # z = logits / T


def entropy_from_logits(logits, temperature=1.0):
    """Entropy of the tempered categorical at each position: ``H = -sum_v p_v log p_v``.

    Returns ``ent`` (...) in the logits' dtype and the cache for :func:`entropy_backward`.
    The entropy bonus of PPO paper eq. (9) is ``c2 * mean(H)``.
    """
    logq = log_softmax(logits, temperature)                           # (..., V)
    probs = np.exp(logq)                                              # (..., V)
    ent = -np.sum(probs * logq, axis=-1)                              # (...)
    return ent, (probs, logq, ent, float(temperature))


def entropy_backward(dent, cache):
    """dL/dlogits from dL/dH: ``dlogits = dent[..., None] * (-p (log p + H)) / T``."""
    probs, logq, ent, temperature = cache
    dent = check_float_array("dent", dent, shape=probs.shape[:-1])
    # H = -sum_j p_j log p_j  ->  dH/dz_j = -p_j (log p_j + H)
    dz = -probs * (logq + ent[..., None]) * dent[..., None]           # (..., V)
    return (dz / temperature).astype(probs.dtype)                     # z = logits / T
