"""Progress bars that suit where the output goes: tqdm on a terminal, a plain line every 10 % in a log file.

Every long loop of minippo (SFT, the reward model, PPO, classic PPO) shows its progress through
:func:`progress_bar`. On a terminal it is tqdm's bar, redrawn in place with ``\\r``. When the bar's stream is
not a terminal (``minippo rlhf > run.log 2>&1``, a CI log, a notebook's captured output), ``\\r`` redraws
would pile thousands of updates onto one line; instead one plain line is written each time the loop
crosses a 10 % mark (and at the end)::

    sft: 600/1500 (40%) 12.1 s  loss=1.93 heldout=1.97

``MINIPPO_PROGRESS=log`` (or ``tty``) forces one style whatever the stream is.
"""
from __future__ import annotations

import os
import sys
import time

from tqdm.auto import tqdm


class LogProgress:
    """The log-file twin of a tqdm bar: the same ``update`` / ``set_postfix`` / ``close`` / iteration,
    printing a line at every ``every`` fraction of ``total`` (default 10 %)."""

    def __init__(self, iterable=None, *, total: int | None = None, initial: int = 0, desc: str = "",
                 file=None, every: float = 0.1):
        self.iterable = iterable
        self.total = len(iterable) + initial if total is None and iterable is not None else total
        self.n, self.desc, self.file = initial, desc, file
        self.every = every
        self.postfix = ""
        self.t0 = time.perf_counter()
        self.next_mark = self._mark_after(initial)
        self.closed = False

    def _mark_after(self, n: int) -> int:
        """The first count above ``n`` at a multiple of ``every * total``."""
        if not self.total:
            return 1 << 62
        step = max(1, round(self.every * self.total))
        return (n // step + 1) * step

    def __iter__(self):
        for x in self.iterable:
            yield x
            self.update(1)

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.n >= self.next_mark or (self.total and self.n == self.total):
            self.next_mark = self._mark_after(self.n)
            self._line()

    def set_postfix(self, **kw) -> None:
        self.postfix = "  " + " ".join(f"{k}={v}" for k, v in kw.items())

    def _line(self) -> None:
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        total = f"/{self.total}" if self.total else ""
        print(f"{self.desc}: {self.n}{total}{pct} {time.perf_counter() - self.t0:.1f} s{self.postfix}",
              file=self.file or sys.stderr, flush=True)

    def close(self) -> None:
        self.closed = True


def is_terminal(stream) -> bool:
    """Whether progress on ``stream`` may redraw in place (``MINIPPO_PROGRESS`` overrides: "tty" / "log")."""
    forced = os.environ.get("MINIPPO_PROGRESS", "").lower()
    if forced in ("tty", "log"):
        return forced == "tty"
    try:
        return stream.isatty()
    except (AttributeError, ValueError):           # a closed or fake stream
        return False


class _Off:
    """A bar that shows nothing (``disable=True``) but iterates and accepts the same calls."""

    def __init__(self, iterable=None, **_):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def update(self, k: int = 1) -> None:
        pass

    def set_postfix(self, **kw) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(iterable=None, *, total: int | None = None, initial: int = 0, desc: str = "", disable: bool = False,
                 unit: str = "it", file=None):
    """A tqdm bar on a terminal, a :class:`LogProgress` (a line every 10 %) otherwise, nothing when ``disable``.

    Parameters as tqdm's (``iterable`` or ``total``, ``initial``, ``desc``, ``unit``, ``file`` default stderr);
    the object returned iterates over ``iterable`` and has ``update(k)``, ``set_postfix(**kw)`` and ``close()``.
    """
    if disable:
        return _Off(iterable)
    stream = file or sys.stderr
    if is_terminal(stream):
        return tqdm(iterable, total=total, initial=initial, desc=desc, unit=unit, file=file, dynamic_ncols=True)
    return LogProgress(iterable, total=total, initial=initial, desc=desc, file=file)


def progress_write(text: str, file=None) -> None:
    """Print a line (default stdout) without breaking a bar being drawn on a terminal (``tqdm.write``)."""
    tqdm.write(text, file=file)
