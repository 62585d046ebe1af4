"""Timing and printing helpers shared by the ``minippo bench`` sections."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np


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


class Report:
    """Collects and prints the bench lines; ``targets`` records every pass/miss for the summary."""

    def __init__(self):
        self.targets: list[tuple[str, float, float, bool]] = []
        self.shared: dict[str, float] = {}   # values one section hands to another (e.g. matmul peak)

    def section_start(self, name: str, detail: str = "") -> None:
        print(f"\n== {name}{' ' + detail if detail else ''} ==", flush=True)

    def note(self, text: str) -> None:
        print(f"   {text}", flush=True)

    def value(self, label: str, value: float, unit: str = "") -> None:
        print(f"   {label:<34s} {value:12.4g} {unit}", flush=True)

    def time(self, label: str, seconds: float) -> None:
        print(f"   {label:<34s} {fmt_time(seconds)}", flush=True)

    def ratio(self, label: str, ratio: float, target: float | None = None, unit: str = "x") -> None:
        """Print a measured ratio (bigger is better) and whether it meets ``target``."""
        line = f"   {label:<34s} {ratio:10.2f}{unit}"
        if target is not None:
            ok = ratio >= target
            self.targets.append((label, ratio, target, ok))
            line += f"   (target >= {target:g}{unit}: {'met' if ok else 'MISSED'})"
        print(line, flush=True)

    def summary(self, elapsed: float) -> None:
        print(f"\n== summary ({elapsed:.1f} s) ==")
        for label, ratio, target, ok in self.targets:
            print(f"   {'met   ' if ok else 'MISSED'} {label:<34s} {ratio:10.2f} (target {target:g})")
