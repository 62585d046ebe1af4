"""Run tiny matrix products on one BLAS thread (classic-control MLPs, KV-cache decoding, small
GPTs).

Small products are common here: the CartPole networks multiply (128, 64) by (64, 64) matrices (half
a million multiply-adds, a few microseconds of work), and KV-cache decoding one row per sequence.
OpenBLAS (NumPy's BLAS on Linux wheels) still splits such a product over every core, and on a busy
2-core machine the threads wait for each other: we measured a 200k-step CartPole run at 54 s with
the default threading and 14.5 s with one thread (a 64x64 backward pass: 2.7 ms vs 0.05 ms). One
thread also makes the float results independent of the number of cores, so a seed gives the same run
on every machine with the same BLAS.

``single_blas_thread()`` sets OpenBLAS to one thread for the duration of a ``with`` block and
restores the previous count after. It finds OpenBLAS among the libraries already loaded by
NumPy (Linux: ``/proc/self/maps``); with another BLAS (MKL, Accelerate) or none found it does
nothing, and ``OPENBLAS_NUM_THREADS=1`` in the environment has the same effect.

**Which kernel.** NumPy's OpenBLAS is built for many CPUs (``DYNAMIC_ARCH``) and picks its matrix
kernels at start-up from the CPU it finds (``OPENBLAS_CORETYPE=Haswell`` etc. overrides the choice).
Kernels sum the products of a matrix multiply in different orders, and some (Haswell, Zen) also
change the order with the number of rows M or the thread count, so float32 results differ in the
last bits between kernels, and on those kernels between a product over B rows and one over b < B
rows. :func:`blas_core_name` says which kernel is active (``"SkylakeX"``, ``"Haswell"``, ...; None
when OpenBLAS was not found). A seed gives bitwise the same run only with the same kernel.
"""
from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path

import numpy  # noqa: F401  (NumPy's BLAS must be loaded before /proc/self/maps is read)

# (setter, getter) symbol names of the OpenBLAS builds NumPy ships or links
_SYMBOLS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)
# the core-name getter of the same builds: returns the active kernel's name as a C string
_CORENAME_SYMBOLS = ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename64_", "openblas_get_corename")
_cached: list = []
_cached_libs: list = []


def _openblas_libraries() -> list:
    """The OpenBLAS libraries loaded in this process (``ctypes.CDLL``), possibly none."""
    if _cached_libs:
        return _cached_libs[0]
    libs = []
    try:
        maps = Path("/proc/self/maps").read_text()
        paths = sorted({line.split()[-1] for line in maps.splitlines()
                        if "openblas" in line.lower() and line.split()[-1].startswith("/")})
        for path in paths:
            try:
                libs.append(ctypes.CDLL(path))
            except OSError:   # a library that cannot be opened
                continue
    except OSError:           # no /proc (macOS, Windows)
        libs = []
    _cached_libs.append(libs)
    return libs


def _openblas_functions():
    """``(set_num_threads, get_num_threads)`` of the loaded OpenBLAS, or None."""
    if _cached:
        return _cached[0]
    found = None
    for lib in _openblas_libraries():
        for setter, getter in _SYMBOLS:
            if hasattr(lib, setter) and hasattr(lib, getter):
                set_fn, get_fn = getattr(lib, setter), getattr(lib, getter)
                set_fn.restype, get_fn.restype = None, ctypes.c_int
                set_fn.argtypes = [ctypes.c_int]
                found = (set_fn, get_fn)
                break
        if found:
            break
    _cached.append(found)
    return found


@contextlib.contextmanager
def single_blas_thread():
    """Context manager: OpenBLAS on one thread inside the block (a no-op without OpenBLAS)."""
    fns = _openblas_functions()
    if fns is None:
        yield
        return
    set_fn, get_fn = fns
    before = get_fn()
    set_fn(1)
    try:
        yield
    finally:
        set_fn(before)


def blas_threads() -> int | None:
    """The current OpenBLAS thread count (None when OpenBLAS was not found)."""
    fns = _openblas_functions()
    return None if fns is None else int(fns[1]())


def blas_core_name() -> str | None:
    """The name of the kernel the loaded OpenBLAS selected for this CPU, e.g. ``"SkylakeX"`` or
    ``"Haswell"`` (``OPENBLAS_CORETYPE`` in the environment overrides the choice); None when
    OpenBLAS or its ``*_get_corename*`` symbol was not found (another BLAS, no ``/proc``).

    ``python -c "from minippo.blas import blas_core_name; print(blas_core_name())"`` prints it.
    """
    for lib in _openblas_libraries():
        for name in _CORENAME_SYMBOLS:
            if hasattr(lib, name):
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = ctypes.c_char_p, []
                raw = fn()
                if raw:
                    return raw.decode("ascii", "replace").strip() or None
    return None
