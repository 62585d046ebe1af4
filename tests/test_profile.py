"""minippo.bench.profile: every second is charged once, to the innermost open stage and part, and the
wrappers are gone afterwards."""
import sys
import time
import types

import numpy as np

from minippo.bench import profile


def _busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _fake_module(monkeypatch):
    mod = types.ModuleType("fake_run")

    def forward():
        _busy(0.02)

    def stage_a():
        _busy(0.01)              # other
        mod.forward()            # forward inside stage A

    def stage_b():
        mod.stage_a()            # stage A nested in B: charged to A
        _busy(0.03)              # other in B

    for f in (forward, stage_a, stage_b):
        f.__module__ = "fake_run"                 # defined there: wrapped wherever it was imported by name
        setattr(mod, f.__name__, f)
    monkeypatch.setitem(sys.modules, "fake_run", mod)
    user = types.ModuleType("fake_user")        # a module that imported stage_a by name
    user.stage_a = stage_a
    monkeypatch.setitem(sys.modules, "fake_user", user)
    monkeypatch.setattr(profile, "WRAPPED", (("fake_run", "stage_a", "stage", "A"), ("fake_run", "stage_b", "stage", "B"),
                                             ("fake_run", "forward", "part", "forward")))
    return mod, user


def test_time_goes_to_the_innermost_stage_and_part(monkeypatch):
    mod, user = _fake_module(monkeypatch)
    originals = (mod.forward, mod.stage_a, mod.stage_b)
    prof = profile.Profiler()
    t0 = time.process_time()
    with prof.installed():
        assert user.stage_a is mod.stage_a is not originals[1]     # wrapped where it was imported by name too
        mod.stage_b()
        user.stage_a()
    total = time.process_time() - t0
    assert (mod.forward, mod.stage_a, mod.stage_b) == originals and user.stage_a is originals[1]
    cpu = dict(prof.cpu)
    # A: twice (0.01 other + 0.02 forward), B: 0.03 other; nothing else but a little bookkeeping
    assert cpu[("A", "forward")] >= 0.04 and cpu[("A", "other")] >= 0.02 and cpu[("B", "other")] >= 0.03
    assert cpu[("A", "forward")] < 0.06 and cpu[("B", "other")] < 0.05
    assert ("B", "forward") not in cpu
    np.testing.assert_allclose(sum(cpu.values()), total, atol=0.01)  # every second counted once
    assert prof.calls[("stage", "A")] == 2 and prof.calls[("part", "forward")] == 2
    table = prof.table("t")
    assert "A" in table and "forward" in table.splitlines()[2]
    assert "everything else" in prof.summary()


def test_a_missing_function_is_skipped(monkeypatch):
    _fake_module(monkeypatch)
    monkeypatch.setattr(profile, "WRAPPED", profile.WRAPPED + (("fake_run", "gone", "stage", "X"),))
    with profile.Profiler().installed():
        pass


def test_every_wrapped_function_exists():
    """A renamed function would leave its row silently empty (the rollout's and the held-out loss's did)."""
    import importlib
    missing = []
    for module_name, attr, _, label in profile.WRAPPED:
        owner = importlib.import_module(module_name)
        for part in attr.split("."):
            owner = getattr(owner, part, None)
        if owner is None:
            missing.append(f"{module_name}.{attr} ({label})")
    assert not missing, "profile.WRAPPED names functions that do not exist: " + ", ".join(missing)
