"""Checkpoints (round trip, atomic replacement that survives a crash mid-save), metrics, RNG state."""
import json
import os

import numpy as np
import pytest

from minippo import io


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    return {"wte": rng.standard_normal((5, 3)).astype(np.float32), "h.0.b": rng.standard_normal(4),
            "step_ids": np.arange(3, dtype=np.int64)}


def test_checkpoint_roundtrip(tmp_path):
    arrays = _arrays()
    state = {"step": np.int64(7), "cfg": {"n_layer": 2, "lr": np.float32(0.5)}, "hist": np.array([1.0, 2.0])}
    path = io.save_checkpoint(tmp_path / "ckpt", arrays, state)
    assert io.has_checkpoint(path)
    loaded, st = io.load_checkpoint(path)
    assert set(loaded) == set(arrays)
    for k in arrays:
        assert loaded[k].dtype == arrays[k].dtype
        np.testing.assert_array_equal(loaded[k], arrays[k])
    assert st == {"step": 7, "cfg": {"n_layer": 2, "lr": 0.5}, "hist": [1.0, 2.0]}
    # a second save replaces the first and leaves no temporary folders behind
    io.save_checkpoint(path, _arrays(1), {"step": 8})
    assert io.load_checkpoint(path)[1] == {"step": 8}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_missing_checkpoint(tmp_path):
    assert not io.has_checkpoint(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        io.load_checkpoint(tmp_path / "nope")


def test_crash_while_writing_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    io.save_checkpoint(path, _arrays(0), {"step": 1})
    calls = []

    def crash_on_state(p, text):
        calls.append(p)
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(io, "atomic_write_text", crash_on_state)   # weights written, state.json fails
    with pytest.raises(OSError):
        io.save_checkpoint(path, _arrays(1), {"step": 2})
    monkeypatch.undo()
    assert calls and ".tmp" in str(calls[0])
    arrays, state = io.load_checkpoint(path)
    assert state == {"step": 1}
    np.testing.assert_array_equal(arrays["wte"], _arrays(0)["wte"])
    # the next save succeeds and cleans the leftover temporary folder
    io.save_checkpoint(path, _arrays(2), {"step": 3})
    assert io.load_checkpoint(path)[1] == {"step": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_crash_between_the_renames_falls_back_to_old(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    io.save_checkpoint(path, _arrays(0), {"step": 1})
    real_replace = os.replace

    def crash_on_swap(src, dst):
        if str(src).endswith("ckpt.tmp"):
            raise OSError("killed (simulated)")
        return real_replace(src, dst)

    monkeypatch.setattr(io.os, "replace", crash_on_swap)
    with pytest.raises(OSError):
        io.save_checkpoint(path, _arrays(1), {"step": 2})
    assert not (path / io.WEIGHTS).exists() and (tmp_path / "ckpt.old" / io.WEIGHTS).exists()
    assert io.has_checkpoint(path) and io.load_checkpoint(path)[1] == {"step": 1}

    # a second crash at the same point: ckpt.old is now the only good checkpoint and must survive it
    with pytest.raises(OSError):
        io.save_checkpoint(path, _arrays(1), {"step": 2})
    monkeypatch.undo()
    assert io.load_checkpoint(path)[1] == {"step": 1}
    # and a successful save after the crash puts the new checkpoint in place and removes ckpt.old
    io.save_checkpoint(path, _arrays(2), {"step": 3})
    assert io.load_checkpoint(path)[1] == {"step": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_atomic_write_replaces_whole_file(tmp_path):
    p = tmp_path / "sub" / "f.txt"
    io.atomic_write_text(p, "first")
    io.atomic_write_text(p, "second")
    assert p.read_text() == "second"
    assert sorted(x.name for x in p.parent.iterdir()) == ["f.txt"]


def test_metrics_writer(tmp_path):
    path = tmp_path / "m" / "metrics.jsonl"
    w = io.MetricsWriter(path)
    for step in range(5):
        w.write({"step": step, "objective/kl": np.float32(0.25 * step), "hist": np.arange(2)})
    records = io.read_metrics(path)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    assert records[2] == {"step": 2, "objective/kl": 0.5, "hist": [0, 1]}
    assert all(json.loads(line) for line in path.read_text().splitlines())
    # resume: drop what a crashed run wrote after the checkpoint at step 2, then append
    w2 = io.MetricsWriter(path, append=True)
    w2.truncate_after("step", 2)
    w2.write({"step": 3, "objective/kl": 9.0})
    assert [r["step"] for r in io.read_metrics(path)] == [0, 1, 2, 3]
    # a new writer without append starts a fresh file
    io.MetricsWriter(path)
    assert io.read_metrics(path) == []


def test_rng_state_roundtrip():
    rng = np.random.default_rng(123)
    rng.random(10)
    state = io.rng_state(rng)
    json.dumps(state)                                   # JSON-serialisable
    a = rng.random(5)
    b = io.rng_from_state(json.loads(json.dumps(state))).random(5)
    np.testing.assert_array_equal(a, b)
