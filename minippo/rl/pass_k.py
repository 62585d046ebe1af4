"""pass@k: the chance that one of k attempts at a problem is right, estimated from n >= k samples.

Legend: P problems. For problem p, ``n[p]`` answers were sampled and ``c[p]`` of them were right.

Drawing exactly k samples per problem and asking "is one of them right?" is a noisy estimate.
Chen et al. 2021 (Codex, arXiv:2107.03374) eq. (1) draws n >= k samples and averages over ALL
the k-subsets of them: a k-subset misses every right answer when it comes from the n - c wrong
ones, so::

    pass@k = E_problems [ 1 - C(n - c, k) / C(n, k) ]     C(a, b) = a! / (b! (a - b)!), 0 if b > a

which is unbiased for every k <= n. The binomials overflow float64 already at n = 1030
(C(1030, 515)), so the ratio is a product of c factors, the form of the paper's own numerically
stable code::

    C(n - c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i)        (1 when c = 0)

(the factorial ratios (n-k)! / (n-c-k)! and n! / (n-c)! are products over the same c values of
i). When n - c >= k every factor lies in (0, 1): the product cannot overflow and loses at most c
roundings. When n - c < k the factor i = k is exactly 0: the ratio is 0 and pass@k exactly 1, as
it must be (every k-subset holds a right answer).

The estimate per problem is returned; pass@k of a set of problems is its mean. With k = 1 it is
c / n, the share of right samples.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_int_array, check_range, check_same_shape


def pass_at_k(n, c, k: int):
    """Unbiased pass@k of each problem: ``1 - C(n - c, k) / C(n, k)``, Chen et al. 2021 eq. (1).

    Parameters
    ----------
    n : int or (P,) int array, samples drawn per problem, each >= k
    c : int or int array shaped like ``n``, right samples per problem, 0 <= c <= n
    k : int >= 1, the number of attempts pass@k allows

    Returns
    -------
    float64 array shaped like ``n`` (a float for scalar input): the probability that a k-subset
    of the n samples, drawn uniformly without replacement, holds at least one right answer.
    Average it over the problems for the pass@k of a set.
    """
    n = check_int_array("n", n)
    c = check_int_array("c", c)
    check_same_shape(n=n, c=c)
    check_range("k", k, 1, None, integer=True)
    if n.size and (n < k).any():
        raise ValueError(f"`n` must be >= k = {k} for every problem (n samples, k of them drawn), "
                         f"got n = {int(n[n < k].flat[0])}")
    bad = (c < 0) | (c > n)
    if bad.any():
        raise ValueError(f"`c` must be in [0, n] for every problem (right samples among n), got "
                         f"c = {int(c[bad].flat[0])} with n = {int(n[bad].flat[0])}")
    n_flat, c_flat = n.reshape(-1).astype(np.int64), c.reshape(-1).astype(np.int64)     # (P,)
    # the next four lines are prod_{i = n-c+1}^{n} (1 - k / i): column j holds i = n - c + 1 + j
    j = np.arange(int(c_flat.max()) if c_flat.size else 0)                             # (c_max,)
    i = (n_flat - c_flat + 1)[:, None] + j[None, :]                                    # (P, c_max)
    factor = np.where(j[None, :] < c_flat[:, None], 1.0 - k / i, 1.0)                  # (P, c_max)
    all_wrong = np.prod(factor, axis=1)                                # (P,) C(n-c, k) / C(n, k)
    out = (1.0 - all_wrong).reshape(n.shape)
    return float(out) if out.ndim == 0 else out
