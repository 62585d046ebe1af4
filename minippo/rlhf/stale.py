"""A sampler k updates behind the trainer: the staleness of asynchronous RL (lesson 24).

An asynchronous system keeps sampling with the weights it last received while the trainer moves on, so the
responses of one update come from the policy of k updates earlier (the behaviour policy mu = pi_{theta_{n-k}}).
:class:`StalePolicy` keeps the last k + 1 versions of a policy; a trainer pushes a copy after every update and
samples with :attr:`StalePolicy.sampler`::

    stale = StalePolicy(k=2)
    stale.push(actor)                         # the starting weights: version 0
    for n in range(iterations):
        gen = generate(stale.sampler, ...)    # version max(0, n - k): stale by stale.lag updates
        ...update the actor...
        stale.push(actor)

Until k updates have happened the oldest version kept is the starting one (``lag`` < k). What is pushed is
copied (``.copy()``: a TinyGPT, or a NumPy table of logits), so later updates of the actor never reach it.
"""
from __future__ import annotations

from collections import deque

from minippo.checks import check_range


class StalePolicy:
    """The last ``k + 1`` versions of a policy; :attr:`sampler` is the oldest, ``k`` pushes behind the newest.

    Parameters
    ----------
    k : >= 0, the staleness in updates (0: the sampler is the newest version, on-policy).
    """

    def __init__(self, k: int):
        check_range("k", k, 0, None, integer=True)
        self.k = int(k)
        self._versions: deque = deque(maxlen=self.k + 1)

    def push(self, policy) -> None:
        """Keep a copy of ``policy`` (anything with ``.copy()``: a TinyGPT, an array) as the newest version."""
        if not callable(getattr(policy, "copy", None)):
            raise ValueError("`policy` must have a .copy() method (a TinyGPT or an array), got "
                             f"{type(policy).__name__}")
        self._versions.append(policy.copy())

    @property
    def sampler(self):
        """The version ``lag`` updates behind the newest: the one to sample with."""
        if not self._versions:
            raise ValueError("StalePolicy holds no version yet: push the starting policy first")
        return self._versions[0]

    @property
    def lag(self) -> int:
        """How many updates the sampler is behind the newest version (k once k updates have been pushed)."""
        return max(len(self._versions) - 1, 0)
