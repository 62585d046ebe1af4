"""Exercise ``pass_at_k``: the unbiased pass@k estimator of Chen et al. 2021 (eq. (1)), per problem.

Legend: P problems.

The student writes ``pass_at_k(n, c, k) -> (P,)``: for each problem, the probability that k of its n samples,
drawn without replacement, hold at least one of its c right ones, ``1 - C(n - c, k) / C(n, k)``, as
:func:`minippo.rl.pass_k.pass_at_k` computes it. Checked: the limits (no right sample, fewer than k wrong
ones), k = 1 against c / n, every k-subset enumerated for n <= 8, the library on random problems, no overflow
where the binomials exceed a float, and one number per problem.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from minippo.exercises.grading import Case, as_arrays, call, close, fmt, max_err
from minippo.rl.pass_k import pass_at_k as library_pass_at_k

NAME = "pass_at_k"
FUNCTION = "pass_at_k"
SUMMARY = "the unbiased pass@k from n samples per problem, c of them right (Chen et al. 2021 eq. (1))"
LESSON = "minippo/rlvr/evaluate.py"          # lesson 23 (verifiable rewards) will take it over
REFERENCE = "minippo.rl.pass_k.pass_at_k"

_HEADER = '''"""minippo exercise `pass_at_k`: how often would k attempts solve a problem?

A verifier says right or wrong. pass@k asks: if the model may try k times, is one attempt right? Drawing
exactly k answers per problem gives a noisy estimate; Chen et al. 2021 (arXiv:2107.03374, eq. (1)) draw
n >= k answers, count the c right ones, and average over ALL the k-subsets of the n: a k-subset misses
every right answer when all its k answers come from the n - c wrong ones, so

    pass@k = 1 - C(n - c, k) / C(n, k)          C(a, b) = a! / (b! (a - b)!), which is 0 when b > a

(then the mean over the problems). This is unbiased for every k <= n.

Write the body of `pass_at_k` below, then run the project's checks on it:

    minippo exercise check pass_at_k          (add --dir D when this file is not in ./exercises)
"""
import numpy as np


'''

_SIGNATURE = '''def pass_at_k(n, c, k):
    """Unbiased pass@k of each problem: 1 - C(n - c, k) / C(n, k).

    Parameters
    ----------
    n : (P,) int64 array, answers sampled per problem, each >= k.
    c : (P,) int64 array, right answers per problem, 0 <= c <= n.
    k : int >= 1.

    Returns
    -------
    (P,) float64 array, one estimate per problem (do not average them: the caller does).

    C(n, k) overflows a float64 already for n ~ 1000 (C(2000, 1000) ~ 1e600). Divide first: the ratio is a
    product of c factors, each in [0, 1),

        C(n - c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i)

    and when n - c < k every k-subset holds a right answer: pass@k = 1 exactly.
    """
'''

_TODO = '''    raise NotImplementedError("pass_at_k: write the body (the docstring has the formula)")
'''

_SOLUTION_BODY = '''    out = np.empty(len(n))
    for p in range(len(n)):
        if n[p] - c[p] < k:                                   # fewer than k wrong answers: always solved
            out[p] = 1.0
        else:                                                 # 1 - prod_{i = n-c+1}^{n} (1 - k / i)
            out[p] = 1.0 - np.prod(1.0 - k / np.arange(n[p] - c[p] + 1, n[p] + 1))
    return out
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY


def _student(fn, n, c, k):
    (out,) = as_arrays(call(fn, n, c, k), ("pass_at_k",), (n.shape,))
    return out


def _hint(got, n, c, k) -> str:
    """What the student's values look like, when they are wrong (judged where n - c >= k: elsewhere pass@k is 1)."""
    some = n - c >= k
    got, n, c = got[some], n[some], c[some]
    n64, c64 = n.astype(np.float64), c.astype(np.float64)
    if close(got, 1.0 - library_pass_at_k(n, c, k)):
        return ("that is C(n - c, k) / C(n, k), the chance that all k answers are WRONG: pass@k is 1 minus it")
    if close(got, 1.0 - (1.0 - c64 / n64) ** k):
        return ("that is 1 - (1 - c/n)^k, drawing the k answers WITH replacement (biased when k is not << n): "
                "the k-subsets are drawn from the n answers without replacement, 1 - C(n - c, k) / C(n, k)")
    return "pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i), and 1 when n - c < k"


def limit_checks() -> list[Case]:
    def run_none(fn):
        n, c = np.array([5, 10, 64]), np.array([0, 0, 0])
        got = _student(fn, n, c, 3)
        # 0 up to rounding: the product gives exactly 0, log-gamma sums leave ~1e-14 (ln Gamma(65) ~ 200, ulp 3e-14)
        return (f"{fmt(got)}", close(got, np.zeros(3), rtol=0, atol=1e-12),
                "no right answer among the n: no k-subset holds one, pass@k = 0")

    def run_few_wrong(fn):
        n, c = np.array([10, 10, 8]), np.array([7, 10, 6])           # n - c = 3, 0, 2 < k = 4
        got = _student(fn, n, c, 4)
        return f"{fmt(got)}", bool(np.all(got == 1)), ("fewer than k wrong answers: every k-subset holds a right one, "
                                                       "pass@k = 1 exactly (a factor 1 - k/i would be <= 0 there)")

    def run_k1(fn):
        n, c = np.array([10, 7, 64, 3]), np.array([3, 0, 17, 3])
        got = _student(fn, n, c, 1)
        return f"{fmt(got)}", close(got, c / n), "with k = 1, pass@1 = c / n: the share of right answers"

    return [Case("no right answer: 0", "[0, 0, 0] (+- 1e-12)", run_none),
            Case("n - c < k: exactly 1", "[1, 1, 1]", run_few_wrong),
            Case("k = 1 is c / n", "c / n", run_k1)]


def value_checks() -> list[Case]:
    cases = [(n, c, k) for n in range(1, 9) for c in range(n + 1) for k in range(1, n + 1)]
    brute = {}
    for n, c, k in cases:                       # the share of the k-subsets of n answers (c right) holding one
        subsets = list(itertools.combinations(range(n), k))
        brute[n, c, k] = sum(any(i < c for i in s) for s in subsets) / len(subsets)
    rng = np.random.default_rng(0)
    rn = rng.integers(16, 200, size=40)
    rc = np.array([rng.integers(0, m + 1) for m in rn])

    def run_brute(fn):
        worst, hint = 0.0, ""
        for k in range(1, 9):
            sel = [(n, c) for n, c, kk in cases if kk == k]
            n, c = np.array([s[0] for s in sel]), np.array([s[1] for s in sel])
            got = _student(fn, n, c, k)
            want = np.array([brute[a, b, k] for a, b in sel])
            err = float(np.max(np.abs(got - want)))
            if err > worst:
                worst, hint = err, _hint(got, n, c, k)
        # two correct float64 implementations of these <= 8-factor products agree to ~1e-15
        return f"max|err| {worst:.1e}", worst <= 1e-12, hint

    def run_library(fn):
        got = _student(fn, rn, rc, 16)
        want = library_pass_at_k(rn, rc, 16)
        return max_err(got, want), close(got, want), _hint(got, rn, rc, 16)

    return [Case("every k-subset enumerated, n <= 8 (all c, k)", "max|err| <= 1e-12", run_brute),
            Case("40 random problems, k = 16 vs the library", "as the library", run_library)]


def robustness_checks() -> list[Case]:
    n, c = np.array([2000, 1500, 64]), np.array([3, 700, 1])

    def run_big(fn):
        got = _student(fn, n, c, 64)
        want = np.array([1 - math.comb(int(a) - int(b), 64) / math.comb(int(a), 64) for a, b in zip(n, c)])
        # the product: c factors of relative rounding 1.1e-16 each, at most 700 x 2.2e-16 ~ 2e-13 of it; log-gamma
        # sums: four ln Gamma ~ 1.3e4 (n = 2000) of 1 ulp (1.8e-12) each, ~7e-12 of the log, so of the ratio (<= 1)
        ok = bool(np.all(np.isfinite(got))) and close(got, want, rtol=0, atol=1e-11)
        return f"{fmt(got)}", ok, ("compare with 1 - C(n - c, 64) / C(n, 64) from exact integers (math.comb); "
                                   "the product prod (1 - k / i) over i = n - c + 1 .. n gives it without any "
                                   "large number")

    def run_huge(fn):
        got = _student(fn, np.array([2000]), np.array([2]), 1000)
        want = 1 - math.comb(1998, 1000) / math.comb(2000, 1000)
        ok = bool(np.all(np.isfinite(got))) and close(got, [want], rtol=1e-12, atol=1e-13)
        finite = bool(np.all(np.isfinite(got)))
        return f"{fmt(got)}", ok, _hint(got, np.array([2000]), np.array([2]), 1000) if finite else (
            "C(2000, 1000) ~ 2e600 overflows float64 (inf / inf = nan): never form the binomials, multiply the "
            "c factors (1 - k / i) instead")

    return [Case("n up to 2000, k = 64 vs exact integers", "as math.comb, finite", run_big),
            Case("n = 2000, k = 1000: no overflow", f"[{1 - math.comb(1998, 1000) / math.comb(2000, 1000):.6g}]",
                 run_huge)]


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    return limit_checks() + value_checks() + robustness_checks()
