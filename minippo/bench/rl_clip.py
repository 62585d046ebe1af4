"""Bench section "clip": :func:`minippo.rl.losses.clipped_policy_loss` with its fused kernel (loss +
dlogp + stats in one pass) vs the same function's plain NumPy expression (``kernels.use_kernels(False)``),
on a right-padded (B=512, T=256) float32 batch. Compile time from a cold-cache subprocess. Both run with
freed memory kept in the process, as in training (:mod:`minippo.bench.rl`'s docstring says why).
"""
from __future__ import annotations

import time

import numpy as np

from minippo import kernels
from minippo.bench.report import Report, best_time
from minippo.bench.startup import cold_compile_timings
from minippo.malloc import keep_freed_memory
from minippo.rl.losses import clipped_policy_loss


def clip_batch(B: int = 512, T: int = 256, seed: int = 0):
    """logp, logp_old, adv, mask (float32), ratios spread around 1 so every clip case occurs."""
    rng = np.random.default_rng(seed)
    logp_old = rng.uniform(-6, -0.1, size=(B, T)).astype(np.float32)
    logp = (logp_old + 0.3 * rng.standard_normal((B, T))).astype(np.float32)
    adv = rng.standard_normal((B, T)).astype(np.float32)
    lengths = rng.integers(T // 4, T + 1, size=B)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
    return logp, logp_old, adv, mask


def bench(report: Report, quick: bool = False) -> None:

    B, T = 512, 256
    report.note(f"B={B}, T={T}, float32, right-padded; outputs: loss, dlogp, clipfrac, approx_kl, ratio stats, cases; "
                "freed memory kept, as in training (minippo.malloc)")
    keep_freed_memory()
    cold = cold_compile_timings()
    report.time("compile clip kernel (cold cache)", cold["first clipped_policy_loss call"])
    args = clip_batch(B, T)
    repeat = 3 if quick else 7
    with kernels.use_kernels(True):
        t = time.perf_counter()
        loss_k, dlogp_k, stats = clipped_policy_loss(*args)
        report.time("first call in this process", time.perf_counter() - t)
        kernel = best_time(lambda: clipped_policy_loss(*args), repeat=repeat, number=5)
    with kernels.use_kernels(False):                          # the NumPy formula of losses.py
        numpy_ref = best_time(lambda: clipped_policy_loss(*args), repeat=repeat)
        loss_r, dlogp_r, _ = clipped_policy_loss(*args)
    report.time("numba kernel", kernel)
    report.time("NumPy expression (reference)", numpy_ref)
    report.value("clipfrac of this batch", stats["clipfrac"])
    report.value("|loss kernel - NumPy| (float32)", abs(loss_k - loss_r))
    report.value("max |dlogp kernel - NumPy|", float(np.abs(dlogp_k - dlogp_r).max()))
    report.ratio("kernel vs NumPy expression", numpy_ref / kernel, target=3)
