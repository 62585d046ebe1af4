"""Bench section "gae": :func:`minippo.rl.gae.gae` with its numba kernel vs the same function's
NumPy body (``kernels.use_kernels(False)``: a loop over T, vectorised over rows) vs the kernel's own
source run by CPython (``py_func``: a double loop over rows and tokens, what one writes without NumPy),
on a right-padded (B=512, T=256) float32 batch (lengths uniform in [T/4, T]).

The kernel and the NumPy body include their input validation; the Python loop is timed on a subset of
rows and scaled to B (its cost is linear in the number of tokens of the subset's rows). Compile time is measured in a fresh process with an empty numba
cache (see ``minippo.bench.startup``), separately from the steady-state run time.

All three run with freed memory kept in the process (:func:`minippo.malloc.keep_freed_memory`), the state of
every RLHF run once a TinyGPT exists. Under glibc's defaults each call of the NumPy body would fault its fresh
(B, T) temporaries in page by page, a cost training never pays: at (512, 256) that made the NumPy body 1.6x
slower (the kernel allocates only its outputs), and the ratio then depended on whether a section that builds a
TinyGPT had run before in the same ``minippo bench``.
"""
from __future__ import annotations

import time

import numpy as np

from minippo import kernels
from minippo.bench.report import Report, best_time
from minippo.bench.startup import cold_compile_timings
from minippo.malloc import keep_freed_memory
from minippo.rl import _kernels
from minippo.rl.gae import _gae_inputs, gae


def python_gae(rewards, values, mask, gamma=1.0, lam=0.95):
    """GAE by the GAE kernel's source run as plain Python (numba's ``py_func``), the inputs checked as
    :func:`minippo.rl.gae.gae` checks them: the pure-Python baseline of the benchmark."""
    rewards, values, mask = _gae_inputs(rewards, values, mask, gamma, lam)
    kernel = getattr(_kernels._gae_kernel, "py_func", _kernels._gae_kernel)      # NUMBA_DISABLE_JIT: already Python
    work, adv, returns = (np.empty(rewards.shape, dtype=d) for d in (np.float64, rewards.dtype, rewards.dtype))
    kernel(rewards, values, mask, float(gamma), float(lam), work, adv, returns)
    return adv, returns


def gae_batch(B: int = 512, T: int = 256, seed: int = 0):
    """rewards, values, mask of a right-padded float32 batch (lengths uniform in [T/4, T])."""
    rng = np.random.default_rng(seed)
    rewards = rng.standard_normal((B, T)).astype(np.float32)
    values = rng.standard_normal((B, T)).astype(np.float32)
    lengths = rng.integers(T // 4, T + 1, size=B)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
    return rewards, values, mask


def time_gae(B: int = 512, T: int = 256, loop_rows: int = 16, repeat: int = 7) -> dict:
    """Seconds per call of gae with the kernel, gae's NumPy body and :func:`python_gae` (scaled to B).

    Also returns ``first_call`` (compile or cache load, this process) and the max |difference|
    between the kernel and the NumPy body. Used by the bench and by lesson 07.
    """
    keep_freed_memory()          # as in training (module docstring)
    rewards, values, mask = gae_batch(B, T)
    with kernels.use_kernels(True):
        t = time.perf_counter()
        adv_k, _ = gae(rewards, values, mask)
        first_call = time.perf_counter() - t
        kernel = best_time(lambda: gae(rewards, values, mask), repeat=repeat, number=5)
    with kernels.use_kernels(False):                          # the NumPy formula of gae.py
        numpy_ref = best_time(lambda: gae(rewards, values, mask), repeat=repeat)
        adv_r, _ = gae(rewards, values, mask)
    rows = slice(0, loop_rows)
    loop_sub = best_time(lambda: python_gae(rewards[rows], values[rows], mask[rows]), repeat=3, warmup=0)
    scale = B / loop_rows                                     # the Python loop visits every token of its rows
    return {"kernel": kernel, "numpy": numpy_ref, "python": loop_sub * scale, "first_call": first_call,
            "loop_rows": loop_rows, "shape": (B, T), "max_abs_diff": float(np.abs(adv_k - adv_r).max())}


def bench(report: Report, quick: bool = False) -> None:

    B, T = 512, 256
    report.note(f"B={B}, T={T}, float32, right-padded (lengths uniform in [{T // 4}, {T}]); freed memory kept, "
                "as in training (minippo.malloc)")
    cold = cold_compile_timings()
    report.time("compile gae kernel (cold cache)", cold["first gae call"])
    res = time_gae(B, T, loop_rows=8 if quick else 16, repeat=3 if quick else 7)
    report.time("first call in this process", res["first_call"])
    report.time("numba kernel", res["kernel"])
    report.time("vectorized NumPy reference", res["numpy"])
    report.time(f"pure Python loop ({res['loop_rows']} rows, x{B // res['loop_rows']})", res["python"])
    report.value("max |kernel - NumPy| (float32)", res["max_abs_diff"])
    report.ratio("kernel vs NumPy reference", res["numpy"] / res["kernel"], target=8)
    report.ratio("kernel vs pure Python", res["python"] / res["kernel"], target=100)
