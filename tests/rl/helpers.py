"""Shared generators for the minippo.rl tests: right-padded batches, plain and with hypothesis."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


def right_padded_mask(lengths, T, dtype=np.float64) -> np.ndarray:
    """(B, T) mask with row b valid on positions [0, lengths[b])."""
    return (np.arange(T)[None, :] < np.asarray(lengths)[:, None]).astype(dtype)


def random_batch(rng: np.random.Generator, B: int, T: int, n_arrays: int, *, scale=1.0,
                 dtype=np.float64, min_len=0):
    """``n_arrays`` standard-normal (B, T) arrays times ``scale`` and a random right-padded mask."""
    arrays = [(scale * rng.standard_normal((B, T))).astype(dtype) for _ in range(n_arrays)]
    lengths = rng.integers(min_len, T + 1, size=B)
    return arrays, right_padded_mask(lengths, T, dtype)


@st.composite
def padded_batches(draw, n_arrays: int, max_B: int = 5, max_T: int = 9, scale: float = 1.0):
    """Hypothesis strategy: (arrays, mask, seed) for a small right-padded float64 batch."""
    B = draw(st.integers(1, max_B))
    T = draw(st.integers(1, max_T))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    arrays = [scale * rng.standard_normal((B, T)) for _ in range(n_arrays)]
    return arrays, right_padded_mask(lengths, T), seed


def gae_loop(rewards, values, mask, gamma=1.0, lam=0.95):
    """GAE as a pure-Python double loop (rows, then time backwards) on Python floats: an oracle of the tests
    that shares no array code with :func:`minippo.rl.gae.gae` (the inputs checked as it checks them)."""
    from minippo.rl.gae import _gae_inputs
    rewards, values, mask = _gae_inputs(rewards, values, mask, gamma, lam)    # the checks of gae
    B, T = rewards.shape
    adv = np.zeros_like(rewards)
    returns = np.zeros_like(rewards)
    for b in range(B):
        n = int(mask[b].sum())                            # valid tokens of row b
        r = rewards[b, :n].tolist()
        v = values[b, :n].tolist() + [0.0]                # V after the last valid token is 0
        last_adv = 0.0
        for t in range(n - 1, -1, -1):
            delta = r[t] + gamma * v[t + 1] - v[t]        # delta_t
            last_adv = delta + gamma * lam * last_adv     # A_t = delta_t + gamma lam A_{t+1}
            adv[b, t] = last_adv
            returns[b, t] = last_adv + v[t]
    return adv, returns
