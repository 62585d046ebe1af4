"""Verdicts: how every lesson says whether a claim is true, with the rule and the numbers beside it.

A verdict has one of three outcomes:

* ``holds``;
* ``does not hold``;
* ``not shown at this size``: the difference lies within the noise the lesson measured (or there is
  no noise estimate: one seed), so this run can neither confirm nor refute the claim.

and one of three classes, which decide which outcomes it can have:

* **identity** - a mathematical fact (the clipped branch is constant in theta, so its gradient is exactly
  0.0; a baseline does not change the expected gradient). It holds or, if the code is wrong, does not:
  never "not shown". The tests check the identity itself on several seeds, on the NumPy and the kernel path.
* **measurement** - a number against a threshold the lesson states (``max KL / delta <= 1``). With a
  standard error (``se``) the number must clear the threshold by 2 s.e. to hold, and fall short of it by
  2 s.e. to fail; in between it is not shown.
* **comparison** - two runs (variants, seeds, batches) compared within their noise: with ``d`` the
  difference in the direction the claim predicts and ``se`` its standard error (seed noise, from
  :mod:`minippo.studies.sweep_stats`), holds when ``d >= 2 se``, does not hold when ``d <= -2 se``, not shown
  otherwise; one seed (``se`` None) is not shown. A comparison says its direction in words ("whitening OFF
  scored higher: +0.60 vs +0.40").

2 standard errors is about 95 % for a normal difference; with the 2-3 seeds of a lesson it is a rule of
thumb, and a lesson that wants more certainty runs more seeds (``--full``).

Each lesson has ``verdicts(results) -> list[Verdict]``; its narrative prints ``v.render()``, and
``python -m lessons verdicts`` prints the table of all of them. This module is plain Python (no NumPy
arrays kept): lessons 01-07 use it without the RLHF stack.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

HOLDS = "holds"
FAILS = "does not hold"
NOT_SHOWN = "not shown at this size"
OUTCOMES = (HOLDS, FAILS, NOT_SHOWN)

IDENTITY, MEASUREMENT, COMPARISON = "identity", "measurement", "comparison"
KINDS = (IDENTITY, MEASUREMENT, COMPARISON)

Z = 2.0          # a difference counts when it is at least Z standard errors from 0


@dataclass(frozen=True)
class Verdict:
    """One claim judged from one run's numbers.

    key : a short name, unique within the lesson (tests and the results file find the verdict by it)
    claim : the claim, one sentence
    kind : ``identity``, ``measurement`` or ``comparison`` (module docstring)
    rule : when it holds, fails, and is not shown, in words with the threshold
    numbers : the numbers the rule used, name -> value
    outcome : ``holds``, ``does not hold`` or ``not shown at this size``
    because : what the numbers say in words: the direction of a comparison, the cases an identity names,
        why a comparison is not shown
    """
    key: str
    claim: str
    kind: str
    rule: str
    numbers: dict = field(default_factory=dict)
    outcome: str = NOT_SHOWN
    because: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"`kind` must be one of {KINDS}, got {self.kind!r}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"`outcome` must be one of {OUTCOMES}, got {self.outcome!r}")
        if self.kind == IDENTITY and self.outcome == NOT_SHOWN:
            raise ValueError(f"an identity holds or does not; it cannot be {NOT_SHOWN!r} ({self.key})")

    @property
    def holds(self) -> bool:
        return self.outcome == HOLDS

    def render(self, indent: str = "") -> str:
        """Two lines: the claim, its class and outcome, what the numbers say; then the rule and its numbers."""
        head = f"{indent}{self.claim} [{self.kind}] -> {self.outcome.upper()}"
        if self.because:
            head += f": {self.because}"
        nums = ", ".join(f"{k} = {_num(v)}" for k, v in self.numbers.items())
        return f"{head}\n{indent}    rule: {self.rule}" + (f" | numbers: {nums}" if nums else "")

    def as_dict(self) -> dict:
        """Plain data for a results file or a table (numbers as Python floats / ints / None)."""
        return {"key": self.key, "claim": self.claim, "kind": self.kind, "rule": self.rule,
                "numbers": {k: _plain(v) for k, v in self.numbers.items()}, "outcome": self.outcome,
                "because": self.because}


def _plain(v):
    """A number as a Python ``bool`` / ``int`` / ``float`` (NumPy scalars unwrapped), or ``None`` / ``str``."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"a verdict's numbers must be scalars, got {type(v).__name__}")


def _num(v) -> str:
    if v is None:
        return "none"
    v = _plain(v)
    return str(v) if isinstance(v, (bool, int, str)) else f"{v:.4g}"


def by_key(verdicts) -> dict:
    """``{v.key: v}``; ``ValueError`` on a repeated key."""
    out = {}
    for v in verdicts:
        if v.key in out:
            raise ValueError(f"two verdicts share the key {v.key!r}")
        out[v.key] = v
    return out


# ------------------------------------------------------------------------------------------------ the rule

def decide(diff: float, se: float | None, expect: int = +1) -> str:
    """The course's one rule: ``holds`` when ``expect * diff >= Z se``, ``does not hold`` when
    ``expect * diff <= -Z se``, else (and with ``se`` None, no noise estimate) ``not shown at this size``.

    ``expect`` is +1 when the claim predicts ``diff > 0``, -1 when it predicts ``diff < 0``. With ``se`` = 0
    any nonzero difference counts, and a zero difference is not shown.
    """
    if expect not in (1, -1):
        raise ValueError(f"`expect` must be +1 or -1 (the direction the claim predicts), got {expect!r}")
    if not math.isfinite(diff):
        raise ValueError(f"`diff` must be finite, got {diff!r}")
    if se is None:
        return NOT_SHOWN
    if not (math.isfinite(se) and se >= 0):
        raise ValueError(f"`se` must be a finite standard error >= 0 or None, got {se!r}")
    d = expect * diff
    if d != 0 and d >= Z * se:
        return HOLDS
    if d != 0 and d <= -Z * se:
        return FAILS
    return NOT_SHOWN


def identity(key: str, claim: str, ok: bool, rule: str, numbers: dict | None = None,
             because: str = "") -> Verdict:
    """A mathematical fact checked on this run's numbers: ``holds`` when ``ok``, else ``does not hold`` (a bug)."""
    return Verdict(key, claim, IDENTITY, rule, dict(numbers or {}), HOLDS if ok else FAILS, because)


def measured(key: str, claim: str, ok: bool, rule: str, numbers: dict | None = None, because: str = "") -> Verdict:
    """A measurement with several thresholds, decided by the caller from the numbers it names (``rule`` says
    how): ``holds`` when ``ok``, else ``does not hold``. Prefer :func:`measurement` for one number."""
    return Verdict(key, claim, MEASUREMENT, rule, dict(numbers or {}), HOLDS if ok else FAILS, because)


_SENSES = {">": 1, ">=": 1, "<": -1, "<=": -1}


def measurement(key: str, claim: str, value: float, threshold: float, sense: str, name: str, *,
                se: float | None = None, noise: str = "seed", because: str = "", numbers: dict | None = None,
                fmt: str = ".4g") -> Verdict:
    """``value`` (called ``name``) against ``threshold`` in the direction ``sense`` (``>``, ``>=``, ``<``, ``<=``).

    Without ``se``: holds when ``value sense threshold``, else does not hold. With ``se`` (the standard
    error of ``value``, from the ``noise`` it names): :func:`decide` on ``value - threshold``.
    """
    if sense not in _SENSES:
        raise ValueError(f"`sense` must be one of {tuple(_SENSES)}, got {sense!r}")
    expect = _SENSES[sense]
    nums = {name: value, "threshold": threshold, **(numbers or {})}
    t = f"{threshold:g}"
    if se is None:
        ok = {">": value > threshold, ">=": value >= threshold, "<": value < threshold,
              "<=": value <= threshold}[sense]
        rule = f"holds when {name} {sense} {t}"
        outcome = HOLDS if ok else FAILS
    else:
        nums["se"] = se
        rule = (f"holds when {name} is {'above' if expect > 0 else 'below'} {t} by {Z:g} s.e. of the {noise} noise "
                f"or more; does not hold when {Z:g} s.e. on the other side; else not shown")
        outcome = decide(value - threshold, se, expect)
    if not because:
        because = f"{name} = {value:{fmt}}" + (f" +- {se:{fmt.lstrip('+')}}" if se is not None else "")
    return Verdict(key, claim, MEASUREMENT, rule, nums, outcome, because)


def comparison(key: str, claim: str, c: dict, *, expect: int, labels: tuple[str, str], quantity: str,
               values: tuple[float, float] | None = None, fmt: str = "+.3f", noise: str = "seed",
               words: tuple[str, str] = ("higher", "lower"), numbers: dict | None = None) -> Verdict:
    """Two runs compared within their noise: ``c`` from :mod:`minippo.studies.sweep_stats` (``compare``,
    ``seed_compare``, ``compare_paired``, ``compare_interaction``, ``curve_slope``: ``diff`` = b - a, ``se``
    None with one seed) with ``labels = (a, b)``; the claim predicts ``diff > 0`` (``expect`` +1: b above a) or
    ``diff < 0`` (-1). ``values`` = (a's mean, b's mean) to print beside the direction; ``words`` name the
    directions of ``quantity`` (``("longer", "shorter")``)."""
    diff, se = float(c["diff"]), c.get("se")
    se = None if se is None else float(se)
    outcome = decide(diff, se, expect)
    a, b = labels
    up, down = words
    sign = ">" if expect > 0 else "<"
    rule = (f"holds when {quantity}[{b}] - {quantity}[{a}] {sign} 0 by {Z:g} s.e. of the {noise} noise or more; "
            f"does not hold when {Z:g} s.e. the other way; else (or with one seed) not shown")
    nums = {"diff": diff, "se": se, **(numbers or {})}
    if values is not None:
        nums = {a: values[0], b: values[1], **nums}
    vs = f"{values[1]:{fmt}} vs {values[0]:{fmt}}, " if values is not None else ""
    moved = f"{b} {up if diff > 0 else down if diff < 0 else 'equal'} than {a}" if diff else f"{b} equal to {a}"
    because = f"{moved} in {quantity}: {vs}difference {diff:{fmt}}"
    if se is None:
        because += " (one seed: no noise estimate)"
    else:
        because += f" +- {se:{fmt.lstrip('+')}}" + (f" (within {Z:g} s.e. of the {noise} noise)"
                                                    if outcome == NOT_SHOWN else "")
    return Verdict(key, claim, COMPARISON, rule, nums, outcome, because)


def all_of(key: str, claim: str, parts, because: str = "") -> Verdict:
    """A claim made of several parts that must all be true: does not hold when one part does not, holds
    when all do, else not shown. Its class is the weakest of the parts' (comparison > measurement > identity)."""
    parts = list(parts)
    if not parts:
        raise ValueError("`parts` must hold at least one verdict")
    outs = [p.outcome for p in parts]
    outcome = FAILS if FAILS in outs else HOLDS if all(o == HOLDS for o in outs) else NOT_SHOWN
    return _combined(key, claim, parts, outcome, "every part holds", "one part does not", because)


def any_of(key: str, claim: str, parts, because: str = "") -> Verdict:
    """A claim that is true when one of several parts is: holds when one part holds, does not hold when
    all do not, else not shown."""
    parts = list(parts)
    if not parts:
        raise ValueError("`parts` must hold at least one verdict")
    outs = [p.outcome for p in parts]
    outcome = HOLDS if HOLDS in outs else FAILS if all(o == FAILS for o in outs) else NOT_SHOWN
    return _combined(key, claim, parts, outcome, "one part holds", "no part does", because)


def _combined(key, claim, parts, outcome, when_holds, when_fails, because) -> Verdict:
    kind = max((p.kind for p in parts), key=KINDS.index)
    if kind == IDENTITY and outcome == NOT_SHOWN:          # cannot happen: identities have two outcomes
        raise AssertionError("an identity cannot be not shown")
    rule = (f"holds when {when_holds}, does not hold when {when_fails}, else not shown. "
            + " ".join(f"[{p.key}] {p.rule}." for p in parts))
    nums = {f"{p.key}.{k}": v for p in parts for k, v in p.numbers.items()}
    because = because or "; ".join(f"{p.key} {p.outcome} ({p.because})" if p.because else f"{p.key} {p.outcome}"
                                   for p in parts)
    return Verdict(key, claim, kind, rule, nums, outcome, because)


def diff_text(c: dict, fmt: str = "+.3f", noise: str = "seed") -> str:
    """A difference and where it lies against its noise, for a line that states no claim:
    ``+0.120 +- 0.040 (beyond 2 s.e. of the seed noise)``, ``... (within 2 s.e. ...)``, or
    ``+0.120 (one seed: no noise estimate)``."""
    if c.get("se") is None:
        return f"{c['diff']:{fmt}} (one seed: no noise estimate)"
    where = "within" if decide(float(c["diff"]), float(c["se"]), 1) == NOT_SHOWN else "beyond"
    return f"{c['diff']:{fmt}} +- {c['se']:{fmt.lstrip('+')}} ({where} {Z:g} s.e. of the {noise} noise)"


def table(rows) -> str:
    """A Markdown table of verdicts: ``rows`` of ``(lesson, {seed: [Verdict, ...]})``, one line per claim with
    its class, rule and the outcome on each seed."""
    rows = list(rows)
    seeds = sorted({s for _, per_seed in rows for s in per_seed})
    out = ["| lesson | claim | class | rule | " + " | ".join(f"seed {s}" for s in seeds) + " |",
           "|---|---|---|---|" + "---|" * len(seeds)]
    for lesson, per_seed in rows:
        keys = list(dict.fromkeys(v.key for s in seeds for v in per_seed.get(s, [])))
        for k in keys:
            vs = {s: by_key(per_seed.get(s, [])).get(k) for s in seeds}
            first = next(v for v in vs.values() if v is not None)
            cells = [vs[s].outcome if vs[s] is not None else "-" for s in seeds]
            cell = lambda text: text.replace("|", "\\|")          # noqa: E731  a '|' inside a cell ends it
            out.append(f"| {lesson} | {cell(first.claim)} | {first.kind} | {cell(first.rule)} | " + " | ".join(cells)
                       + " |")
    return "\n".join(out)
