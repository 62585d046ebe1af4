"""Reading a sweep of :meth:`minippo.studies.study.Study.sweep`: per-seed numbers, seed noise, differences.

Legend: S seeds, I iterations.

A sweep gives, for every variant, the per-iteration records and the evaluation of each PPO seed. The
hyperparameter lessons ask one question many times: "is variant b better than variant a, or is the
difference within what another seed would give?" The answer used here:

* :func:`seed_values` - one number per seed: an evaluation summary (``gold_mean``, ``kl_mean``, ...) or
  the mean of a record key over the last iterations (``minippo.studies.study.final``);
* :func:`pooled_seed_std` - the seed-to-seed standard deviation pooled over all variants (every variant
  has the same few seeds, so one pooled estimate, with sum(S_v - 1) degrees of freedom, is far steadier
  than each variant's own two or three seeds)::

      s_pooled^2 = sum_v sum_s (x_vs - mean_v)^2 / sum_v (S_v - 1)

* :func:`compare` - the difference of two variants' means, its standard error
  ``s_pooled * sqrt(1/S_a + 1/S_b)`` and ``z = diff / se``; |z| >= 2 is read as "clearly different"
  (about 95 % for a normal difference; with few degrees of freedom take it as a rule of thumb).
* :func:`compare_interaction` - whether a change helps one condition more than another (a difference of
  differences: does epsilon 0.5's gain over 0.2 differ between two tasks?), with the same pooled noise::

      d = (mean(b1) - mean(b0)) - (mean(a1) - mean(a0)),   se = s_pooled sqrt(1/S_a0 + 1/S_a1 + 1/S_b0 + 1/S_b1)

* :func:`compare_paired` - the same question when the two variants were measured on the same units (the
  same tasks, batches, prompts or seeds, one pair per unit): the mean of the paired differences and its
  standard error ``std(b - a) / sqrt(n)`` (``ddof=1``), which removes what the units share.
* :func:`fisher_z` - a correlation and its standard error on Fisher's scale.
* :func:`curve_slope` - is a curve still rising? The least-squares slope of (S, I) curves per iteration, with
  its standard error over the seeds' slopes (or, with one seed, from the fit's residuals).
"""
from __future__ import annotations

import math

import numpy as np

from minippo.checks import check_range


def seed_values(result: dict, key: str, *, last: int = 5, evals: str = "eval") -> np.ndarray:
    """(S,) one value of ``key`` per seed of one variant of a sweep.

    Parameters
    ----------
    result : one variant of ``Study.sweep``'s output (``{"records": [...], "eval": [...], ...}``)
    key : a key of the evaluations (e.g. ``"gold_mean"``) or of the records (e.g. ``"objective/kl"``,
        averaged over the last ``last`` iterations)
    evals : where the evaluations are: ``"eval"`` or ``"extra"`` (when ``extra`` returned evaluations)
    """
    # lazy: the rest of this module is plain statistics that lessons 01-07 use without the RLHF stack
    from minippo.studies.study import final

    check_range("last", last, 1, None, integer=True)
    ev = result.get(evals) or []
    if ev and isinstance(ev[0], dict) and key in ev[0]:
        return np.array([float(e[key]) for e in ev])
    recs = result.get("records") or []
    if recs and key in recs[0][0]:
        return np.array([final(r, key, last) for r in recs])
    raise ValueError(f"`key` {key!r} is neither an evaluation summary nor a record entry of this variant")


def seed_curves(result: dict, key: str) -> np.ndarray:
    """(S, I) the record entry ``key`` at every iteration of every seed of one variant."""
    recs = result.get("records") or []
    if not recs or key not in recs[0][0]:
        raise ValueError(f"`key` {key!r} is not a record entry of this variant")
    return np.array([[float(rec[key]) for rec in r] for r in recs])


def pooled_seed_std(groups) -> tuple[float, int]:
    """Seed noise pooled over variants: ``(s_pooled, degrees of freedom)`` (module docstring).

    ``groups`` is a list of 1-D arrays, one per variant (its per-seed values); variants with a single
    seed add nothing. ``ValueError`` when no variant has two seeds.
    """
    ss, dof = 0.0, 0
    for g in groups:
        g = np.asarray(g, dtype=np.float64).ravel()
        if g.size >= 2:
            ss += float(((g - g.mean()) ** 2).sum())
            dof += g.size - 1
    if dof == 0:
        raise ValueError("`groups` must contain a variant with at least two seeds to estimate the seed noise")
    return math.sqrt(ss / dof), dof


def compare(a, b, noise: float) -> dict:
    """``mean(b) - mean(a)`` with its standard error from the pooled seed noise, and z = diff / se.

    Returns ``{"diff", "se", "z", "clear"}`` where ``clear`` is |z| >= 2 (``z`` is inf when se = 0 and
    the means differ, 0 when they do not).
    """
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError("`a` and `b` must each hold at least one value")
    check_range("noise", noise, 0, None)
    diff = float(b.mean() - a.mean())
    se = noise * math.sqrt(1.0 / a.size + 1.0 / b.size)
    z = diff / se if se > 0 else (math.copysign(math.inf, diff) if diff else 0.0)
    return {"diff": diff, "se": se, "z": z, "clear": abs(z) >= 2.0}


def seed_compare(a, b, noise: float | None) -> dict:
    """:func:`compare` with the pooled seed noise ``noise``, or, when ``noise`` is None (a single seed: no noise
    estimate), ``mean(b) - mean(a)`` alone with ``se``, ``z`` and ``clear`` None."""
    if noise is None:
        return {"diff": float(np.mean(b) - np.mean(a)), "se": None, "z": None, "clear": None}
    return compare(a, b, noise)


def compare_interaction(a0, a1, b0, b1, noise: float) -> dict:
    """The difference of differences ``(mean(b1) - mean(b0)) - (mean(a1) - mean(a0))`` (module docstring): how much
    more the change 0 -> 1 moves condition b than condition a, with its standard error from the pooled seed noise.

    Returns ``{"diff", "se", "z", "clear"}`` like :func:`compare` (``clear``: |z| >= 2).
    """
    groups = [np.asarray(x, dtype=np.float64).ravel() for x in (a0, a1, b0, b1)]
    if any(g.size == 0 for g in groups):
        raise ValueError("`a0`, `a1`, `b0` and `b1` must each hold at least one value")
    check_range("noise", noise, 0, None)
    m_a0, m_a1, m_b0, m_b1 = (float(g.mean()) for g in groups)
    diff = (m_b1 - m_b0) - (m_a1 - m_a0)
    se = noise * math.sqrt(sum(1.0 / g.size for g in groups))
    z = diff / se if se > 0 else (math.copysign(math.inf, diff) if diff else 0.0)
    return {"diff": diff, "se": se, "z": z, "clear": abs(z) >= 2.0}


def compare_paired(a, b) -> dict:
    """``mean(b - a)`` over paired values (``a[i]`` and ``b[i]`` measured on the same unit), its standard
    error ``std(b - a, ddof=1) / sqrt(n)`` and ``z = diff / se``.

    Returns ``{"diff", "se", "z", "clear", "n"}`` with ``clear`` = |z| >= 2 (``z`` is inf when se = 0 and
    the mean difference is not 0, 0 when it is). ``ValueError`` unless ``a`` and ``b`` are 1-D, of the
    same length n >= 2, and finite.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size < 2:
        raise ValueError(f"`a` and `b` must be 1-D of the same length >= 2 (paired values), got shapes {a.shape} "
                         f"and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("`a` and `b` must be finite")
    d = b - a
    diff = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(d.size))
    z = diff / se if se > 0 else (math.copysign(math.inf, diff) if diff else 0.0)
    return {"diff": diff, "se": se, "z": z, "clear": abs(z) >= 2.0, "n": int(d.size)}


def curve_slope(Y) -> dict:
    """Least-squares slope per iteration of (S, I) curves, with its standard error: is a curve still rising?

    With two seeds or more the standard error is over the seeds' own slopes, ``std(slopes, ddof=1) / sqrt(S)``;
    with one seed it comes from that curve's residuals (three points or more), ``sqrt(SSR / (I - 2) / Sxx)``
    with ``Sxx = sum_i (i - mean(i))^2``; else it is None. Returns ``{"diff"`` (the mean slope), ``"se"``,
    ``"clear"`` (|diff| >= 2 se, None without se), ``"noise"`` (``"seed"`` or ``"fit residual"``)``}``.
    """
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[0] == 0:
        raise ValueError(f"`Y` must be a (seeds, iterations) array with at least one seed, got shape {Y.shape}")
    S, n = Y.shape
    x = np.arange(n, dtype=float)
    slopes = np.array([np.polyfit(x, y, 1)[0] for y in Y]) if n > 1 else np.zeros(S)
    if S >= 2:
        se = float(slopes.std(ddof=1) / np.sqrt(S))
    elif n >= 3:
        resid = Y[0] - np.polyval(np.polyfit(x, Y[0], 1), x)
        se = float(np.sqrt((resid ** 2).sum() / (n - 2) / ((x - x.mean()) ** 2).sum()))
    else:
        se = None
    d = float(slopes.mean())
    return {"diff": d, "se": se, "clear": None if se is None else abs(d) >= 2 * se,
            "noise": "seed" if S >= 2 else "fit residual"}


def fisher_z(rho: float, n: int) -> dict:
    """A correlation ``rho`` over ``n`` pairs on Fisher's scale: ``{"diff": atanh(rho), "se": 1 / sqrt(n - 3)}``
    (rho clipped to +-0.999999 so that atanh stays finite; ``ValueError`` for n < 4), for a verdict against 0."""
    if n < 4:
        raise ValueError(f"`n` must be >= 4 pairs for Fisher's z, got {n}")
    return {"diff": float(np.arctanh(np.clip(rho, -0.999999, 0.999999))), "se": 1.0 / math.sqrt(n - 3)}
