"""Timing and printing helpers shared by the ``minippo bench`` sections."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Callable

import numpy as np

from minippo.blas import blas_core_name


def best_time(fn: Callable[[], object], *, repeat: int = 5, number: int = 1, warmup: int = 1) -> float:
    """Best-of-``repeat`` wall time of ``number`` calls of ``fn``, in seconds per call.

    The minimum is the least noisy estimate on a shared machine (noise only ever adds time).
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return float(np.min(times))


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:8.2f} s "
    if seconds >= 1e-3:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds * 1e6:8.1f} us"


def cpu_model() -> str:
    """The CPU's model name (Linux: ``/proc/cpuinfo``; elsewhere what :mod:`platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


class Report:
    """Collects and prints the bench lines; ``targets`` records every pass/miss for the summary,
    ``lines`` every line printed (what ``minippo bench --save`` writes)."""

    def __init__(self):
        self.targets: list[tuple[str, float, float, bool]] = []
        self.shared: dict[str, float] = {}   # values one section hands to another (e.g. matmul peak)
        self.lines: list[str] = []

    def print(self, text: str) -> None:
        """Print one line (or several) and keep it."""
        print(text, flush=True)
        self.lines += text.split("\n")

    def section_start(self, name: str, detail: str = "") -> None:
        self.print(f"\n== {name}{' ' + detail if detail else ''} ==")

    def note(self, text: str) -> None:
        self.print(f"   {text}")

    def value(self, label: str, value: float, unit: str = "") -> None:
        self.print(f"   {label:<34s} {value:12.4g} {unit}")

    def time(self, label: str, seconds: float) -> None:
        self.print(f"   {label:<34s} {fmt_time(seconds)}")

    def ratio(self, label: str, ratio: float, target: float | None = None, unit: str = "x") -> None:
        """Print a measured ratio (bigger is better) and whether it meets ``target``."""
        line = f"   {label:<34s} {ratio:10.2f}{unit}"
        if target is not None:
            ok = ratio >= target
            self.targets.append((label, ratio, target, ok))
            line += f"   (target >= {target:g}{unit}: {'met' if ok else 'MISSED'})"
        self.print(line)

    def summary(self, elapsed: float) -> None:
        self.print(f"\n== summary ({elapsed:.1f} s) ==")
        for label, ratio, target, ok in self.targets:
            self.print(f"   {'met   ' if ok else 'MISSED'} {label:<34s} {ratio:10.2f} (target {target:g})")

    def record(self, command: str, date: str) -> dict:
        """What ``--save`` writes: the command, the date, the machine, every printed line and target."""
        return {"command": command, "date": date,
                "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "blas_kernel": blas_core_name(),
                            "python": platform.python_version(), "numpy": np.__version__},
                "lines": list(self.lines),
                "targets": [{"label": label, "measured": ratio, "target": target, "met": ok}
                            for label, ratio, target, ok in self.targets]}
