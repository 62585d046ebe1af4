"""The one-BLAS-thread context (minippo.blas) restores the thread count."""
import pytest

from minippo.blas import blas_threads, single_blas_thread


def test_single_blas_thread_restores_the_count():
    before = blas_threads()
    if before is None:
        pytest.skip("OpenBLAS not found in this process (another BLAS): the context is a no-op")
    with single_blas_thread():
        assert blas_threads() == 1
    assert blas_threads() == before
