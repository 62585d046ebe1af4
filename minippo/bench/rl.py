"""Bench section "gae": :func:`minippo.rl.gae.gae` with its numba kernel vs the same function's
NumPy body (``kernels.use_kernels(False)``: a loop over T, vectorised over rows) vs a pure-Python
double loop (:func:`gae_loop`), on a right-padded (B=512, T=256) float32 batch (lengths uniform in
[T/4, T]).

Every variant includes its own input validation. The Python loop is timed on a subset of rows
and scaled to B (its cost is linear in the number of valid tokens, and the subset's valid-token
count is used for the scaling). Compile time is measured in a fresh process with an empty numba
cache (see ``minippo.bench.startup``), separately from the steady-state run time.
"""
from __future__ import annotations

import time

import numpy as np

from minippo import kernels
from minippo.bench.report import Report, best_time
from minippo.bench.startup import cold_compile_timings
from minippo.rl.gae import _gae_inputs, gae


def gae_loop(rewards, values, mask, gamma=1.0, lam=0.95):
    """GAE as a pure-Python double loop (rows, then time backwards) on Python floats: what one
    writes without NumPy. The benchmark's "pure Python" baseline, and an oracle of the tests (it
    shares no array code with :func:`minippo.rl.gae.gae`). Same arguments, returns and checks.

    It lives here, not in ``rl/gae.py``: it is the same equation a third time, and a student reading
    ``gae.py`` should meet it once.
    """
    rewards, values, mask = _gae_inputs(rewards, values, mask, gamma, lam)    # the checks of gae
    B, T = rewards.shape
    adv = np.zeros_like(rewards)
    returns = np.zeros_like(rewards)
    for b in range(B):
        n = int(mask[b].sum())                            # valid tokens of row b
        r = rewards[b, :n].tolist()
        v = values[b, :n].tolist() + [0.0]                # V after the last valid token is 0
        last_adv = 0.0
        for t in range(n - 1, -1, -1):
            delta = r[t] + gamma * v[t + 1] - v[t]        # delta_t
            last_adv = delta + gamma * lam * last_adv     # A_t = delta_t + gamma lam A_{t+1}
            adv[b, t] = last_adv
            returns[b, t] = last_adv + v[t]
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
    """Seconds per call of gae with the kernel, gae's NumPy body and gae_loop (Python, scaled to B).

    Also returns ``first_call`` (compile or cache load, this process) and the max |difference|
    between the kernel and the NumPy body. Used by the bench and by lesson 07.
    """
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
    loop_sub = best_time(lambda: gae_loop(rewards[rows], values[rows], mask[rows]), repeat=3, warmup=0)
    scale = mask.sum() / mask[rows].sum()                     # valid tokens overall / in the subset
    return {"kernel": kernel, "numpy": numpy_ref, "python": loop_sub * scale, "first_call": first_call,
            "loop_rows": loop_rows, "shape": (B, T), "max_abs_diff": float(np.abs(adv_k - adv_r).max())}


def bench(report: Report, quick: bool = False) -> None:

    B, T = 512, 256
    report.note(f"B={B}, T={T}, float32, right-padded (lengths uniform in [{T // 4}, {T}])")
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
