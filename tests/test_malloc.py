"""minippo.malloc: the glibc malloc tuning TinyGPT asks for is process-wide and idempotent."""
import sys

from minippo.malloc import keep_freed_memory


def test_keep_freed_memory_is_idempotent():
    first = keep_freed_memory()
    assert isinstance(first, bool)
    assert keep_freed_memory() is first                 # asked once, the answer is remembered
    if not sys.platform.startswith("linux"):
        assert first is False
