"""The yardstick: this machine's float32 matrix-multiply peak, measured with NumPy's BLAS."""
from __future__ import annotations

import numpy as np

from minippo.bench.report import Report, best_time


def matmul_peak_gflops(n: int = 1024, repeat: int = 5) -> float:
    """Best float32 GFLOP/s of an (n, n) @ (n, n) product (2 n^3 flops)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    return 2 * n ** 3 / best_time(lambda: a @ b, repeat=repeat, number=3) / 1e9


def peak_gflops(quick: bool = False) -> float:
    """The float32 matmul peak this section reports: the best GFLOP/s of (512, 512) and (1024, 1024)
    products. ``python -m lessons results`` records it beside every CPU time it writes."""
    return max(matmul_peak_gflops(n, repeat=3 if quick else 7) for n in (512, 1024))


def bench(report: Report, quick: bool = False) -> None:
    peak = peak_gflops(quick)
    report.shared["matmul_peak_gflops"] = peak
    report.value("float32 matmul peak", peak, "GFLOP/s")
