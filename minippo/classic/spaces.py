"""The two Gymnasium-style spaces CartPole needs: ``Box`` (observations) and ``Discrete`` (actions).

They carry what a training loop reads (``shape``, ``n``, ``low``, ``high``, ``dtype``) and a
seeded ``sample()``, the same attribute names as ``gymnasium.spaces``, so code written against
either works with both. Each space owns its ``np.random.Generator``; ``seed(s)`` recreates it.

Legend: D observation features.
"""
from __future__ import annotations

import numpy as np


class Discrete:
    """The actions ``{0, 1, ..., n - 1}``.

    Parameters
    ----------
    n : number of actions (>= 1).
    seed : seed of the space's own Generator used by :meth:`sample`.
    """

    def __init__(self, n: int, seed: int | None = None):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"`n` must be an integer >= 1, got {n!r}")
        self.n = int(n)
        self.shape: tuple[int, ...] = ()
        self.dtype = np.dtype(np.int64)
        self.seed(seed)

    def seed(self, seed: int | None = None) -> None:
        """Recreate the sampling Generator (``seed=None``: fresh OS entropy, like Gymnasium)."""
        self.np_random = np.random.default_rng(seed)

    def sample(self) -> int:
        """A uniformly random action."""
        return int(self.np_random.integers(self.n))

    def contains(self, x) -> bool:
        """True for an integer (Python or NumPy, 0-d array included) in ``[0, n)``."""
        if isinstance(x, np.ndarray):
            if x.shape != () or not np.issubdtype(x.dtype, np.integer):
                return False
            x = x.item()
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            return False
        return 0 <= int(x) < self.n

    def __repr__(self) -> str:
        return f"Discrete({self.n})"


class Box:
    """A box ``low <= x <= high`` of shape ``shape`` (bounds may be +/-inf).

    ``sample()`` follows Gymnasium: uniform on bounded coordinates, standard normal on coordinates
    unbounded on both sides, a shifted exponential on half-bounded ones.
    """

    def __init__(self, low: np.ndarray, high: np.ndarray, dtype=np.float32,
                 seed: int | None = None):
        self.dtype = np.dtype(dtype)
        self.low = np.asarray(low, dtype=self.dtype)      # (D,)
        self.high = np.asarray(high, dtype=self.dtype)    # (D,)
        if self.low.shape != self.high.shape:
            raise ValueError(f"`low` has shape {self.low.shape} but `high` has shape "
                             f"{self.high.shape}")
        if (self.low > self.high).any():
            raise ValueError("`low` must be <= `high` everywhere")
        self.shape = self.low.shape
        self.seed(seed)

    def seed(self, seed: int | None = None) -> None:
        self.np_random = np.random.default_rng(seed)

    def sample(self) -> np.ndarray:
        lo_inf, hi_inf = np.isinf(self.low), np.isinf(self.high)
        out = np.empty(self.shape, dtype=np.float64)
        both = lo_inf & hi_inf
        out[both] = self.np_random.standard_normal(both.sum())
        lower_only = ~lo_inf & hi_inf                      # [low, inf)
        out[lower_only] = self.low[lower_only] + self.np_random.exponential(size=lower_only.sum())
        upper_only = lo_inf & ~hi_inf                      # (-inf, high]
        out[upper_only] = self.high[upper_only] - self.np_random.exponential(size=upper_only.sum())
        bounded = ~lo_inf & ~hi_inf
        out[bounded] = self.np_random.uniform(self.low[bounded], self.high[bounded])
        return out.astype(self.dtype)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        return x.shape == self.shape and bool(np.all((x >= self.low) & (x <= self.high)))

    def __repr__(self) -> str:
        return f"Box({self.low.tolist()}, {self.high.tolist()}, {self.shape}, {self.dtype})"
