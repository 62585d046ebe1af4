"""The numba kernel of minippo.rlhf: the sampler's inverse-CDF scan of ``generate.sample_from``, compiled.

``minippo.rlhf.generate.sample_from`` has the NumPy formula as its body and calls :func:`sample_from` here
when the switch of :mod:`minippo.kernels` is on (the default); the same float64 left-to-right sums give
the same tokens (``tests/rlhf/test_generate.py``, ``pytest -m kernels``). ``@njit(cache=True)``, no
fastmath; ``NUMBA_DISABLE_JIT=1`` runs it as Python.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _sample_from_kernel(probs, u, out):
    """One pass for each row's total, then a scan that stops at the sampled token (the first whose
    running sum reaches ``u * total``)."""
    B, V = probs.shape
    for b in range(B):
        total = 0.0
        for j in range(V):
            total += probs[b, j]
        threshold = u[b] * total
        acc = 0.0
        token = V - 1
        for j in range(V):
            acc += probs[b, j]
            if acc >= threshold:
                token = j
                break
        out[b] = token


def sample_from(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """:func:`minippo.rlhf.generate.sample_from`, compiled: (B,) int64 tokens."""
    out = np.empty(probs.shape[0], dtype=np.int64)
    _sample_from_kernel(np.ascontiguousarray(probs), np.ascontiguousarray(u, dtype=np.float64), out)
    return out
