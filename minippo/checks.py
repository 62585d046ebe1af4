"""Input validation shared by every part of minippo.

Bad input must fail loudly and early, with a message that names the argument and says what was
expected ("`mask` must contain only 0 and 1, found 2.0 at (0, 3)"). Nothing is silently clamped.
Every public function validates with these helpers, so the messages read the same everywhere.

All helpers raise ``ValueError`` (also for a wrong dtype: the caller passed a bad *value* for the
argument); ``TypeError`` only when the argument is not array-like at all.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

FLOAT_DTYPES = (np.float32, np.float64)


def _where(x: np.ndarray, bad: np.ndarray) -> str:
    """Index of the first True entry of ``bad`` and the value there, for error messages."""
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    value = x[idx].item() if isinstance(x[idx], np.generic) else x[idx]   # 2, not np.int64(2)
    return f"{value!r} at {idx if len(idx) != 1 else idx[0]}"


def as_array(name: str, x, ndim: int | None = None,
             shape: Sequence[int] | None = None) -> np.ndarray:
    """``x`` as an ndarray (else a ``TypeError`` naming ``name``) of rank ``ndim`` and shape
    ``shape`` when given (``None`` entries in ``shape`` match anything; else a ``ValueError``)."""
    if not isinstance(x, np.ndarray):
        if isinstance(x, (str, bytes, dict, set)) or x is None:
            raise TypeError(f"`{name}` must be an array, got {type(x).__name__}")
        try:
            x = np.asarray(x)
        except Exception as exc:  # pragma: no cover - numpy's own message is kept
            raise TypeError(f"`{name}` must be array-like: {exc}") from exc
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"`{name}` must be {ndim}-D, got shape {x.shape}")
    if shape is not None:
        ok = len(shape) == x.ndim and all(s is None or s == d for s, d in zip(shape, x.shape))
        if not ok:
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"`{name}` must have shape {want}, got {x.shape}")
    return x


def check_float_array(name: str, x, *, ndim: int | None = None, shape: Sequence[int] | None = None,
                      finite: bool = True, dtype=None) -> np.ndarray:
    """Validate a floating-point array.

    Parameters
    ----------
    name : the argument's name, used in the message.
    ndim, shape : required rank / exact shape (``None`` entries in ``shape`` match anything).
    finite : reject NaN and +/-inf.
    dtype : a required dtype (``np.float32`` or ``np.float64``); by default either is accepted.
    """
    x = as_array(name, x, ndim, shape)
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"`{name}` must be float32 or float64, got dtype {x.dtype}")
    if dtype is not None and x.dtype != np.dtype(dtype):
        raise ValueError(f"`{name}` must have dtype {np.dtype(dtype)}, got {x.dtype}")
    if finite and x.size and not np.isfinite(x).all():
        raise ValueError(f"`{name}` must be finite, found {_where(x, ~np.isfinite(x))}")
    return x


def check_int_array(name: str, x, *, ndim: int | None = None, shape: Sequence[int] | None = None,
                    low: int | None = None, high: int | None = None) -> np.ndarray:
    """Validate an integer array with values in ``[low, high)`` (e.g. token ids in ``[0, V)``)."""
    x = as_array(name, x, ndim, shape)
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"`{name}` must be an integer array, got dtype {x.dtype}")
    if x.size:
        if low is not None and (x < low).any():
            raise ValueError(f"`{name}` must be >= {low}, found {_where(x, x < low)}")
        if high is not None and (x >= high).any():
            raise ValueError(f"`{name}` must be < {high}, found {_where(x, x >= high)}")
    return x


def check_same_shape(**arrays: np.ndarray) -> tuple[int, ...]:
    """All keyword arrays must share one shape; the message names the first that differs."""
    items = list(arrays.items())
    first_name, first = items[0]
    for name, a in items[1:]:
        if np.shape(a) != np.shape(first):
            raise ValueError(f"`{name}` has shape {np.shape(a)} but `{first_name}` has shape "
                             f"{np.shape(first)}; they must match")
    return np.shape(first)


def check_mask(name: str, mask, *, shape: Sequence[int] | None = None,
               layout: str = "right") -> np.ndarray:
    """Validate a 0/1 mask of shape (B, T).

    ``layout="right"``: each row's ones are contiguous from position 0 (right padding: responses).
    ``layout="left"``: each row's ones are contiguous up to the last position (left padding:
    prompts). ``layout="any"``: only the 0/1 check. Rows may be all zero in every layout. Returns
    the mask unchanged (any numeric or bool dtype is accepted).
    """
    mask = as_array(name, mask, 2, shape)
    if mask.dtype != np.bool_ and not np.issubdtype(mask.dtype, np.number):
        raise ValueError(f"`{name}` must be numeric or bool, got dtype {mask.dtype}")
    bad = (mask != 0) & (mask != 1)
    if bad.any():
        raise ValueError(f"`{name}` must contain only 0 and 1, found {_where(mask, bad)}")
    if layout == "any" or mask.size == 0:
        return mask
    m = mask.astype(bool)
    if layout == "right":
        holes = m[:, 1:] & ~m[:, :-1]          # a 1 that follows a 0
    elif layout == "left":
        holes = m[:, :-1] & ~m[:, 1:]          # a 1 that precedes a 0
    else:
        raise ValueError(f"`layout` must be 'right', 'left' or 'any', got {layout!r}")
    if holes.any():
        row = int(np.argwhere(holes)[0][0])
        side = ("start at position 0 (right padding)" if layout == "right"
                else "end at the last position (left padding)")
        raise ValueError(f"`{name}` row {row} has a hole: valid tokens must be contiguous and "
                         f"{side}; "
                         f"row is {m[row].astype(int).tolist()}")
    return mask


def check_range(name: str, value, lo: float | None = None, hi: float | None = None, *,
                lo_open: bool = False, hi_open: bool = False, integer: bool = False) -> None:
    """Check a scalar hyperparameter lies in a range, e.g. ``check_range("clip_eps", 0.2, 0, None,
    lo_open=True)``.

    The value must be a finite number (``lr=inf`` passes no range: "[0, inf)" does not contain inf).
    The message shows the interval in math notation: "`clip_eps` must be in (0, inf), got -0.1".
    """
    if integer:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"`{name}` must be an integer, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"`{name}` must be a number, got {value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"`{name}` must be a number, got nan")
    if math.isinf(v):
        # an interval written (0, inf) does not contain inf: a hyperparameter is a finite number
        raise ValueError(f"`{name}` must be a finite number, got {value!r}")
    too_low = lo is not None and (v <= lo if lo_open else v < lo)
    too_high = hi is not None and (v >= hi if hi_open else v > hi)
    if too_low or too_high:
        left = ("(" if lo_open else "[") + ("-inf" if lo is None else f"{lo:g}")
        right = ("inf" if hi is None else f"{hi:g}") + (")" if hi_open else "]")
        if lo is None:
            left = "(-inf"
        if hi is None:
            right = "inf)"
        raise ValueError(f"`{name}` must be in {left}, {right}, got {value!r}")


def check_choice(name: str, value, choices: Iterable) -> None:
    """Check ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {', '.join(repr(c) for c in choices)}; got "
                         f"{value!r}")


def check_finite_values(values: dict, where: str = "") -> None:
    """``ValueError`` naming the first entry of ``values`` (name -> number) that is NaN or infinite,
    and ``where`` it happened (e.g. "at iteration 3, epoch 1"): the test of a training run's NaN
    guard."""
    for name, v in values.items():
        if not math.isfinite(v):
            raise ValueError(f"`{name}` is {v}" + (f" {where}" if where else ""))


def check_fields(cls, d, name: str) -> dict:
    """``d`` must be a dict whose keys are fields of the dataclass ``cls`` (a config read back from
    JSON): a ``ValueError`` naming ``name`` and the unknown keys otherwise. Returns ``d``."""
    if not isinstance(d, dict):
        raise ValueError(f"`{name}` must be a dict of {cls.__name__} fields, got "
                         f"{type(d).__name__}")
    unknown = sorted(set(d) - set(cls.__dataclass_fields__))
    if unknown:
        raise ValueError(f"`{name}` has the unknown field(s) {unknown}; {cls.__name__}'s fields "
                         "are "
                         f"{list(cls.__dataclass_fields__)}")
    return d


def first_nonfinite(arrays: dict) -> str | None:
    """The name of the first array of ``arrays`` (name -> array) holding a NaN or inf, or None: what
    a NaN stop names ("the gradient of `h.0.attn.c_attn.w` is the first non-finite one")."""
    for name, a in arrays.items():
        if not np.isfinite(a).all():
            return name
    return None


def parameter_note(params: dict) -> str:
    """What a NaN stop adds about the parameters (name -> array): " (the parameter `actor.wte` is
    not finite)" for the first non-finite one, else the largest in magnitude (" (every parameter is
    finite; the largest is `actor.wte`, |x| = 1e+30)"): huge finite weights are how a too-large
    learning rate makes the next forward pass overflow."""
    bad = first_nonfinite(params)
    if bad is not None:
        return f" (the parameter `{bad}` is not finite)"
    if not params:
        return ""
    name, a = max(params.items(), key=lambda kv: float(np.abs(kv[1]).max()) if kv[1].size else 0.0)
    largest = float(np.abs(a).max())
    return f" (every parameter is finite; the largest is `{name}`, |x| = {largest:.3g})"


class UsageError(ValueError):
    """A command line that cannot work as given: the ``minippo`` dispatcher prints its message
    (which names the flag) in one line and exits with status 2."""
