"""Helpers shared by the test packages: a public function, or every function of a module, run on
its numba kernel or on its NumPy formula (the switch of minippo.kernels)."""
from __future__ import annotations

import functools

from minippo import kernels


def with_kernels(fn, flag: bool):
    """``fn`` called inside ``kernels.use_kernels(flag)``: its numba kernel (True) or its NumPy body (False)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with kernels.use_kernels(flag):
            return fn(*args, **kwargs)
    run.__name__ = f"{fn.__name__}[{'kernel' if flag else 'numpy'}]"
    return run


class KernelPath:
    """The functions of ``module``, each called through :func:`with_kernels` with ``flag``:
    ``KernelPath(layers, False).gelu_forward(x)`` is the NumPy GELU whatever the switch says."""

    def __init__(self, module, flag: bool):
        self.module, self.flag = module, flag

    def __getattr__(self, name):
        return with_kernels(getattr(self.module, name), self.flag)

    def __repr__(self):
        return f"<{self.module.__name__}, {'kernel' if self.flag else 'numpy'} path>"


def line_with(text: str, anchor: str) -> str:
    """The one line of ``text`` that contains ``anchor`` (a lesson's narrative puts each verdict on a line with a
    fixed phrase); fails when no line or several lines contain it."""
    lines = [line for line in text.splitlines() if anchor in line]
    assert len(lines) == 1, f"{len(lines)} lines contain {anchor!r}"
    return lines[0]


def assert_verdict(text: str, anchor: str, ok: bool, yes: str, no: str) -> None:
    """The line of ``text`` with ``anchor`` says ``yes`` and not ``no`` when ``ok`` (recomputed by the test from
    the lesson's returned numbers), else ``no`` and not ``yes``."""
    line = line_with(text, anchor)
    want, other = (yes, no) if ok else (no, yes)
    assert want in line and other not in line, f"expected {want!r} (not {other!r}) in: {line}"


def quick_runs(lesson, tmp_path_factory) -> dict:
    """The two quick runs a lesson's tests share (module-scoped fixtures): seed 0 through ``main()`` (run, the
    narrative printed, the figure saved in a temporary folder) and seed 1 through ``run()``. Returns
    ``{0: results, 1: results, "printed": what main printed, "out": the figure folder}``."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp(lesson.__name__.rsplit(".", 1)[-1])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        r0 = lesson.main(["--quick", "--seed", "0", "--out", str(out)])
    return {0: r0, 1: lesson.run(quick=True, seed=1), "printed": buf.getvalue(), "out": out}


def assert_one_of(text: str, anchor: str, phrases: dict, key) -> None:
    """The line of ``text`` with ``anchor`` says ``phrases[key]`` and none of the other phrases (a verdict with
    more than two outcomes, e.g. higher / lower / no different)."""
    line = line_with(text, anchor)
    assert phrases[key] in line, f"expected {phrases[key]!r} in: {line}"
    for k, p in phrases.items():
        assert k == key or p not in line, f"unexpected {p!r} in: {line}"


def expected_outcome(diff: float, se, expect: int) -> str:
    """The course's verdict rule restated independently of ``minippo.studies.verdicts`` (whose tests prove it can
    give each outcome): the difference in the claimed direction, in standard errors, against 2."""
    import math

    from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN
    if se is None:
        return NOT_SHOWN
    z = expect * diff / se if se > 0 else math.copysign(math.inf, expect * diff) if diff else 0.0
    return HOLDS if z >= 2 else FAILS if z <= -2 else NOT_SHOWN


def assert_comparison(v, c: dict, expect: int) -> None:
    """Verdict ``v`` used the difference and standard error of ``c`` (recomputed by the test from the lesson's
    returned numbers) and decided by the rule."""
    import numpy as np
    if "diff" in v.numbers:
        diff = v.numbers["diff"]
    else:                                               # a measurement: its value against its threshold
        diff = next(iter(v.numbers.values())) - v.numbers["threshold"]
    assert np.isclose(diff, c["diff"], rtol=1e-12, atol=1e-15), (v.key, v.numbers, c)
    assert (v.numbers["se"] is None) == (c["se"] is None), (v.key, v.numbers, c)
    if c["se"] is not None:
        assert np.isclose(v.numbers["se"], c["se"], rtol=1e-12, atol=1e-15), (v.key, v.numbers, c)
    assert v.outcome == expected_outcome(c["diff"], c["se"], expect), (v.key, v.outcome, c)


def assert_printed(lesson, runs) -> None:
    """Every verdict of seed 0's run is printed by main() with its rule and numbers."""
    for v in lesson.verdicts(runs[0]):
        for line in v.render().splitlines():                  # a lesson may indent the block
            assert line.strip() in runs["printed"], v.key


def assert_derived(lesson, r: dict, printed: str, shown: dict) -> None:
    """``lesson.derived(r)``, the numbers a results file keeps besides run()'s scalars (``lessons/results.py``):
    every key flattens without clashing with run()'s, and each ``shown`` key (dotted) formatted with its format
    is a number the narrative printed."""
    from lessons import results as res

    values, _ = res.flatten(r)
    extra, _ = res.flatten(lesson.derived(r))
    assert extra and not set(extra) & set(values), sorted(set(extra) & set(values))
    for key, spec in shown.items():
        text = format(extra[key], spec)
        assert text in printed, f"derived {key} = {text} is not in the narrative"
