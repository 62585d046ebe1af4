"""How an exercise is graded: load the student's file by path, run the checks, print one table.

Every exercise module (``minippo/exercises/<name>.py``) builds a list of :class:`Case` objects:
a name ("case 4: A<0, r<1-eps: gradient"), the expected answer as a short string (computed from
the library's own function or an independent oracle) and a ``run(fn)`` that calls the student's
function and returns ``(got, passed, hint)``. :func:`grade` runs them one by one; a student function
that raises, or returns the wrong kind of thing, fails that case only (its exception is the
"got"), so one table always shows everything.

The comparisons. The student computes the same formula as the reference, in float64, but with
other operations in another order; such results agree to a few ulps per operation. The formulas
here take O(10) operations per token and means over at most a few hundred tokens, so two correct
implementations differ by less than ~300 x 1.1e-16 ~ 3e-14 relative: :data:`RTOL` = 1e-10 leaves
three orders of margin, while any slip in a formula (a missing factor, a wrong branch on one token
of 200) moves the result by more than 1e-3. Where the contract says a gradient or a value is EXACTLY
zero (a clipped token, padding) it is compared with ``== 0``.
"""
from __future__ import annotations

import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

#: relative tolerance between two correct float64 implementations (derivation in the module docstring)
RTOL = 1e-10
#: absolute floor of the comparisons, for entries whose true value is ~0 (values here are O(1))
ATOL = 1e-12


# ----------------------------------------------------------------------------------------------
# what a check is, and what a student function can do wrong
# ----------------------------------------------------------------------------------------------

@dataclass
class Case:
    """One check: ``run(fn) -> (got, passed, hint)``; ``expected`` is shown as it is."""

    name: str
    expected: str
    run: Callable[[Callable], tuple[str, bool, str]]


@dataclass
class Result:
    name: str
    expected: str
    got: str
    passed: bool
    hint: str = ""
    traceback: str = ""             # the student's traceback when their function raised (shown with --debug)


class StudentError(Exception):
    """The student's function raised or returned something of the wrong form: ``got`` and ``hint`` say what."""

    def __init__(self, got: str, hint: str, tb: str = ""):
        super().__init__(got)
        self.got, self.hint, self.traceback = got, hint, tb


def call(fn, *args, **kwargs):
    """``fn(*args)`` on COPIES of the array arguments (a student's in-place edit cannot spoil the
    reference); an exception becomes a :class:`StudentError` naming it."""
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        raise StudentError("raised NotImplementedError",
                           f"write the body of {fn.__name__} (it still raises NotImplementedError)",
                           traceback.format_exc()) from exc
    except Exception as exc:  # noqa: BLE001 - any error of the student's code is reported, not raised
        raise StudentError(f"raised {type(exc).__name__}: {_short(str(exc), 60)}",
                           f"{fn.__name__} raised {type(exc).__name__} on this input; run with --debug "
                           "for the traceback", traceback.format_exc()) from exc


def as_arrays(result, names: tuple[str, ...], shapes: tuple) -> list:
    """Unpack ``result`` into ``len(names)`` outputs; each shape in ``shapes`` is a tuple (an array of
    that shape, converted to float64) or None (a number, returned as a float)."""
    form = "(" + ", ".join(names) + ")"
    if len(names) == 1:
        result = (result,)
    if not isinstance(result, (tuple, list)) or len(result) != len(names):
        raise StudentError(f"returned {type(result).__name__}", f"return the tuple {form}")
    out = []
    for name, shape, value in zip(names, shapes, result):
        if shape is None:
            try:
                out.append(float(value))
            except (TypeError, ValueError):
                raise StudentError(f"{name} is {type(value).__name__}", f"`{name}` must be a number "
                                   f"(a Python float or a 0-d array)") from None
            continue
        arr = np.asarray(value)
        if arr.shape != tuple(shape):
            raise StudentError(f"{name} has shape {arr.shape}", f"`{name}` must have shape {tuple(shape)}, "
                               "the shape of the input")
        if not np.issubdtype(arr.dtype, np.number):
            raise StudentError(f"{name} has dtype {arr.dtype}", f"`{name}` must be a float array")
        out.append(arr.astype(np.float64))
    return out


# ----------------------------------------------------------------------------------------------
# comparing and printing numbers
# ----------------------------------------------------------------------------------------------

def close(got, expected, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """Same shape and every entry within ``atol + rtol |expected|`` (NaN never passes)."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    return got.shape == expected.shape and bool(np.all(np.abs(got - expected) <= atol + rtol * np.abs(expected)))


def fmt(x) -> str:
    """A number or a short array as a compact string: ``-0.5``, ``[0, -0.25, 1.5]``, ``[...] (12 values)``."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        return _num(float(a))
    flat = a.reshape(-1)
    body = ", ".join(_num(float(v)) for v in flat[:4])
    return f"[{body}]" if flat.size <= 4 else f"[{body}, ...] ({flat.size} values)"


def _num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-3:
        return f"{v:.3g}"
    return f"{v:.4g}"


def max_err(got, expected) -> str:
    """``max|err| 3.2e-01`` between two arrays of one shape."""
    err = float(np.max(np.abs(np.asarray(got, dtype=np.float64) - np.asarray(expected, dtype=np.float64))))
    return "max|err| 0" if err == 0 else f"max|err| {err:.1e}"


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


# ----------------------------------------------------------------------------------------------
# loading the student's file, grading, the table
# ----------------------------------------------------------------------------------------------

class LoadError(Exception):
    """The student's file cannot be used: the one-line message says why; ``detail`` is the traceback."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


def load_function(path: Path, function: str) -> Callable:
    """Import ``path`` as a fresh module (importlib, by path) and return its ``function``."""
    path = Path(path)
    if not path.is_file():
        raise LoadError(f"{path} not found")
    spec = importlib.util.spec_from_file_location(f"minippo_exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise LoadError(f"{path}, line {exc.lineno}: SyntaxError: {exc.msg}", traceback.format_exc()) from None
    except Exception as exc:  # noqa: BLE001 - the student's module may fail in any way
        line = traceback.extract_tb(exc.__traceback__)[-1].lineno
        raise LoadError(f"{path}, line {line}: importing it raised {type(exc).__name__}: {_short(str(exc), 80)}",
                        traceback.format_exc()) from None
    fn = getattr(module, function, None)
    if not callable(fn):
        raise LoadError(f"{path} defines no function `{function}` (the file must keep its name and signature)")
    return fn


def grade(cases: list[Case], fn: Callable) -> list[Result]:
    """Run every case on ``fn``; the student's failures are results, the checker's own bugs propagate."""
    results = []
    for case in cases:
        try:
            got, passed, hint = case.run(fn)
            results.append(Result(case.name, case.expected, got, bool(passed), "" if passed else hint))
        except StudentError as exc:
            results.append(Result(case.name, case.expected, exc.got, False, exc.hint, exc.traceback))
    return results


def table(results: list[Result], debug: bool = False) -> str:
    """The results as a text table (check, expected, got, pass), each hint under the first failing row that has it."""
    w_name = max(len(r.name) for r in results)
    w_exp = min(max(len(r.expected) for r in results), 40)
    w_got = min(max(len(r.got) for r in results), 40)
    lines = [f"{'check':<{w_name}}  {'expected':<{w_exp}}  {'got':<{w_got}}  pass",
             "-" * (w_name + w_exp + w_got + 10)]
    shown = set()                                   # a hint is printed once, under its first failing row
    for r in results:
        lines.append(f"{r.name:<{w_name}}  {_short(r.expected, w_exp):<{w_exp}}  {_short(r.got, w_got):<{w_got}}  "
                     f"{'ok' if r.passed else 'FAIL'}")
        if not r.passed and r.hint and r.hint not in shown:
            shown.add(r.hint)
            lines.append(f"    hint: {r.hint}")
        if debug and r.traceback:
            lines.extend("    | " + t for t in r.traceback.rstrip().splitlines())
    n_fail = sum(not r.passed for r in results)
    lines.append("")
    lines.append(f"all {len(results)} checks pass" if n_fail == 0 else
                 f"{n_fail} of {len(results)} checks fail")
    return "\n".join(lines)


def eprint(message: str) -> None:
    print(message, file=sys.stderr)
