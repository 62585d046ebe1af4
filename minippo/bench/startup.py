"""Bench section "import": ``import minippo`` + the first call of gae and clipped_policy_loss in a
fresh process, with numba's on-disk cache cold (compile time) and warm (what a user waits for).

The cold numbers come from a subprocess whose ``NUMBA_CACHE_DIR`` points at an empty temporary
folder, so every kernel compiles; the warm ones from a subprocess using the normal cache (warmed
first). Target: warm import + first calls < 1 s.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from minippo.bench.report import Report

# Runs in the child: timings of each step from the top of the script, printed as JSON.
_CHILD = r"""
import json, time
t0 = time.perf_counter()
import numpy as np
import minippo
t_import = time.perf_counter()
rng = np.random.default_rng(0)
B, T = 4, 8
r, v, lp, lpo, adv = (rng.standard_normal((B, T)).astype(np.float32) for _ in range(5))
mask = np.ones((B, T), dtype=np.float32)
t_data = time.perf_counter()
gae = minippo.gae                         # imports minippo.rl.gae (NumPy only)
import minippo.rl._kernels                # numba and the kernels' module (else loaded by the first gae call)
t_gae_import = time.perf_counter()
# numba's first dispatch probes for BLAS by importing scipy.linalg when SciPy is installed
# (minippo does not need SciPy); done here explicitly so that its cost is reported apart
import importlib.util
if importlib.util.find_spec("scipy") is not None:
    import scipy.linalg.cython_blas
t_blas = time.perf_counter()
gae(r, v, mask)
t_gae = time.perf_counter()
loss = minippo.clipped_policy_loss
t_clip_import = time.perf_counter()
loss(lp, lpo, adv, mask)
t_clip = time.perf_counter()
gae(r, v, mask); loss(lp, lpo, adv, mask)
t_again = time.perf_counter()
print(json.dumps({
    "import numpy + minippo": t_import - t0,
    "import kernels' modules": (t_gae_import - t_data) + (t_clip_import - t_gae),
    "numba BLAS probe (scipy.linalg)": t_blas - t_gae_import,
    "first gae call": t_gae - t_blas,
    "first clipped_policy_loss call": t_clip - t_clip_import,
    "second calls (gae + clip)": t_again - t_clip,
    "total (import + first calls)": (t_import - t0) + (t_clip - t_data),
}))
"""


def child_timings(cache_dir: str | None = None) -> dict:
    """Run the child script in a fresh interpreter; ``cache_dir`` sets NUMBA_CACHE_DIR."""
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    timings = json.loads(out.stdout.strip().splitlines()[-1])
    timings["process wall (with interpreter)"] = time.perf_counter() - t
    return timings


def cold_compile_timings() -> dict:
    """Timings with an empty numba cache: the first calls include compiling each kernel."""
    with tempfile.TemporaryDirectory(prefix="minippo_numba_cold_") as d:
        return child_timings(cache_dir=d)


def bench(report: Report, quick: bool = False) -> None:
    report.note("fresh subprocess per measurement; float32 (B=4, T=8) inputs")
    cold = cold_compile_timings()
    report.note("-- cold numba cache (NUMBA_CACHE_DIR = empty temp dir): compile time --")
    for key in ("first gae call", "first clipped_policy_loss call"):
        report.time(key.replace(" call", "") + " (compile)", cold[key])
    child_timings()                                   # warm the normal cache if it is not yet
    runs = [child_timings() for _ in range(2 if quick else 4)]
    warm = min(runs, key=lambda d: d["total (import + first calls)"])
    report.note(f"-- warm cache (best of {len(runs)} fresh processes) --")
    for key, seconds in warm.items():
        report.time(key, seconds)
    report.ratio("1 s / (import + first calls)", 1.0 / warm["total (import + first calls)"], target=1.0)
