"""Shared pytest configuration: matplotlib never opens a window; hypothesis runs a fixed profile."""
import os

os.environ.setdefault("MPLBACKEND", "Agg")

try:
    from hypothesis import settings

    # deterministic example generation, no deadline (shared CI machines are noisy)
    settings.register_profile("minippo", derandomize=True, deadline=None, max_examples=60)
    settings.load_profile("minippo")
except ImportError:  # pragma: no cover - hypothesis is in the test extras
    pass
