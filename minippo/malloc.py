"""Keep freed memory in the process: glibc malloc tuning for TinyGPT's training steps.

Not a kernel and not math: like ``minippo.blas`` it tunes how this process uses the machine, once,
process-wide. ``TinyGPT`` calls :func:`keep_freed_memory` when a model is built.
"""
from __future__ import annotations

import ctypes
import os
import sys

_MALLOC_TUNED: bool | None = None


def keep_freed_memory(trim_threshold: int = 512 << 20) -> bool:
    """Ask glibc's malloc to keep freed memory for reuse instead of returning it to the OS at once.

    A TinyGPT step allocates ~100 MB of activations (fresh arrays, cs231n style) and frees them at
    the end of backward. With glibc's defaults most of that is handed back to the kernel and faulted
    in again, page by page, at the next step: we measured ~26,000 page faults per bench step and a
    third of the step's CPU time spent in them. Raising ``M_MMAP_THRESHOLD`` (to glibc's maximum,
    32 MB) and ``M_TRIM_THRESHOLD`` keeps those pages in the process for the next step (0 faults).

    Process-wide and idempotent; called when a TinyGPT is built. Does nothing (returns False) on
    non-glibc systems or when the user set ``MALLOC_TRIM_THRESHOLD_`` / ``MALLOC_MMAP_THRESHOLD_``.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED is None:
        _MALLOC_TUNED = False
        user_set = "MALLOC_TRIM_THRESHOLD_" in os.environ or "MALLOC_MMAP_THRESHOLD_" in os.environ
        if sys.platform.startswith("linux") and not user_set:
            try:
                mallopt = ctypes.CDLL("libc.so.6").mallopt
                M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3          # glibc's malloc.h
                ok_mmap = bool(mallopt(M_MMAP_THRESHOLD, 32 << 20))     # glibc's largest allowed value
                _MALLOC_TUNED = ok_mmap and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
            except (OSError, AttributeError):
                pass
    return _MALLOC_TUNED
