"""tests/hf run against the real torch + transformers (the ``hf`` extra); without them they SKIP, the one
allowed skip. ``MINIPPO_REQUIRE_HF=1`` (set by .ci/run) turns a missing library, and any skip here, into a
failure, so CI cannot pass with these tests silently skipped."""
import importlib.util
import os

import pytest

MISSING = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
REQUIRE = os.environ.get("MINIPPO_REQUIRE_HF") == "1"
SKIP_REASON = (f"needs {' and '.join(MISSING)}: pip install torch==2.13.0 --index-url "
               f"https://download.pytorch.org/whl/cpu (the CPU build of torch), then pip install -e '.[test,hf]'")

if MISSING and REQUIRE:
    raise pytest.UsageError(f"MINIPPO_REQUIRE_HF=1 but {', '.join(MISSING)} cannot be imported: {SKIP_REASON}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With MINIPPO_REQUIRE_HF=1 a skipped test of this folder is a failed one."""
    outcome = yield
    report = outcome.get_result()
    if REQUIRE and report.skipped and "tests/hf/" in item.nodeid.replace("\\", "/"):
        report.outcome = "failed"
        report.longrepr = f"skipped under MINIPPO_REQUIRE_HF=1: {report.longrepr}"
