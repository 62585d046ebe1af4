"""minippo.blas: the active OpenBLAS kernel's name (which decides how float32 products round), and the
one-BLAS-thread context (it restores the thread count)."""
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from minippo.blas import blas_core_name, blas_threads, single_blas_thread


def test_core_name_is_a_name_or_none():
    name = blas_core_name()
    if blas_threads() is None:               # another BLAS, or no /proc: nothing to ask
        assert name is None
    else:
        assert isinstance(name, str) and name and name == name.strip()
        assert blas_core_name() == name      # a property of the process, asked twice


def _has_avx() -> bool:
    try:
        return " avx " in f" {Path('/proc/cpuinfo').read_text()} ".replace("\n", " ")
    except OSError:
        return False


def test_openblas_coretype_selects_the_kernel_it_reports():
    if blas_threads() is None or platform.machine() not in ("x86_64", "AMD64") or not _has_avx():
        pytest.skip("needs NumPy's OpenBLAS on an x86-64 CPU with AVX (the Sandybridge kernel)")
    env = {**os.environ, "OPENBLAS_CORETYPE": "Sandybridge"}
    out = subprocess.run([sys.executable, "-c", "from minippo.blas import blas_core_name; print(blas_core_name())"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "Sandybridge"


def test_single_blas_thread_restores_the_count():
    before = blas_threads()
    if before is None:
        pytest.skip("OpenBLAS not found in this process (another BLAS): the context is a no-op")
    with single_blas_thread():
        assert blas_threads() == 1
    assert blas_threads() == before
