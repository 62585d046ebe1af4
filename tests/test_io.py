"""Checkpoints (round trip, atomic replacement that survives a crash mid-save), metrics, RNG state."""
import json
import os
from pathlib import Path

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


def test_the_current_folder_and_the_root_are_folders_like_any_other(tmp_path, monkeypatch):
    """``minippo rm --sft .`` in an SFT model folder: "." has no name of its own (``Path.with_name`` refused it,
    "PosixPath('.') has an empty name"); its ``.old`` is the one beside it, under its real name."""
    io.save_checkpoint(tmp_path / "ckpt", _arrays(), {"step": 1})
    monkeypatch.chdir(tmp_path / "ckpt")
    assert io.has_checkpoint(".") and io.checkpoint_folder(".") == Path(".")
    os.replace(tmp_path / "ckpt", tmp_path / "ckpt.old")     # a save stopped between its two renames
    os.mkdir(tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path / "ckpt")
    assert io.has_checkpoint(".") and io.checkpoint_folder(".") == tmp_path / "ckpt.old"
    assert not io.has_checkpoint("/")


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


# ---- write_folder: one folder swap for checkpoints and exports -------------------------------------

def _files(folder):
    return {p.name: p.read_text() for p in Path(folder).iterdir()}


def _writer(**files):
    """A ``fill`` writing ``files`` (name -> text) into the temporary folder."""
    def fill(tmp):
        for name, text in files.items():
            (tmp / name).write_text(text)
    return fill


def test_write_folder_replaces_the_folder_and_leaves_nothing_beside_it(tmp_path):
    out = tmp_path / "out"
    assert io.write_folder(out, _writer(a="1", b="2")) == out and _files(out) == {"a": "1", "b": "2"}
    (tmp_path / "out.old").mkdir()                       # a stale leftover beside a whole folder
    (tmp_path / "out.old" / "stale").write_text("x")
    io.write_folder(out, _writer(c="3"))
    assert _files(out) == {"c": "3"} and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failing_fill_leaves_the_folder_untouched(tmp_path):
    out = tmp_path / "out"
    io.write_folder(out, _writer(a="1"))

    def fail(tmp):
        (tmp / "a").write_text("half")
        raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="disk full"):
        io.write_folder(out, fail)
    assert _files(out) == {"a": "1"} and not (tmp_path / "out.old").exists()
    io.write_folder(out, _writer(b="2"))                 # the next write clears the leftover out.tmp
    assert _files(out) == {"b": "2"} and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_write_folder_keeps_old_without_the_folder_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    """``<dir>.old`` without ``<dir>``: a write stopped between its two renames; ``.old`` is the only good
    copy and survives a failing fill and a write stopped at the swap."""
    out, old = tmp_path / "out", tmp_path / "out.old"
    io.write_folder(out, _writer(a="1", b="2"))
    os.replace(out, old)
    with pytest.raises(OSError):
        io.write_folder(out, lambda tmp: (_ for _ in ()).throw(OSError("simulated")))
    assert _files(old) == {"a": "1", "b": "2"} and not out.exists()
    real = os.replace

    def stopped_at_the_swap(src, dst):
        if Path(src).name == "out.tmp":
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(io.os, "replace", stopped_at_the_swap)
    with pytest.raises(KeyboardInterrupt):
        io.write_folder(out, _writer(c="3"))
    monkeypatch.undo()
    assert _files(old) == {"a": "1", "b": "2"} and not out.exists()
    io.write_folder(out, _writer(c="3"))
    assert _files(out) == {"c": "3"} and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_write_folder_and_save_checkpoint_into_the_current_folder(tmp_path, monkeypatch):
    """``.`` has no name of its own (``Path.with_name`` refused it); the process stays in the new folder, not in
    the old one, which is deleted."""
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path / "ckpt")
    io.save_checkpoint(Path("."), _arrays(), {"step": 1})
    io.save_checkpoint(Path("."), _arrays(1), {"step": 2})
    assert os.getcwd() == str(tmp_path / "ckpt") and io.load_checkpoint(".")[1] == {"step": 2}
    assert io.write_folder(".", _writer(a="1")) == Path(".") and _files(".") == {"a": "1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    with pytest.raises(ValueError, match="no name"):
        io.write_folder("/", _writer())


# ---- save_npz: np.savez, byte-deterministic ----------------------------------------------------------

def _npz_arrays():
    rng = np.random.default_rng(0)
    return {"f32": rng.standard_normal((3, 4)).astype(np.float32), "f64": np.array([np.nan, -np.inf, 0.5]),
            "f16": np.arange(5, dtype=np.float16), "i64": np.arange(-3, 3), "u8": np.arange(7, dtype=np.uint8),
            "bool": np.array([[True, False]]), "scalar": np.array(7, np.int32), "empty": np.zeros((0, 3)),
            "fortran": np.asfortranarray(rng.standard_normal((2, 5))), "strided": np.arange(20)[::3],
            "text": np.array(["ab", "c"])}


def test_save_npz_is_byte_deterministic_and_reads_back_exactly(tmp_path, monkeypatch):
    """The same arrays give the same bytes at another time and on another system (np.savez's entries carry
    the writing system, Windows or not, and the time if ``ZipFile.open`` sets it: CPython gh-121402)."""
    import sys
    import time
    arrays = _npz_arrays()
    monkeypatch.setattr(time, "time", lambda: 1.0e9)
    io.save_npz(tmp_path / "a.npz", arrays)
    monkeypatch.setattr(time, "time", lambda: 1.7e9)
    monkeypatch.setattr(sys, "platform", "win32")
    io.save_npz(tmp_path / "b.npz", {k: a.copy(order="K") for k, a in arrays.items()})   # equal, not the same
    monkeypatch.undo()
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    with np.load(tmp_path / "a.npz") as z:
        assert z.files == list(arrays)
        for name, a in arrays.items():
            assert z[name].dtype == a.dtype and z[name].shape == a.shape, name
            np.testing.assert_array_equal(z[name], a)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz", "b.npz"]      # written atomically


def test_save_npz_refuses_an_object_array_naming_it(tmp_path):
    with pytest.raises(ValueError, match="array 'labels' has dtype object"):
        io.save_npz(tmp_path / "a.npz", {"ok": np.zeros(2), "labels": np.array([{"a": 1}, None])})
    assert not (tmp_path / "a.npz").exists()


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


# ---- reading back without trusting the files (issue 13, items 1 and 5) -----------------------------

EXPECT = {"wte": ((5, 3), "float32"), "h.0.b": ((4,), "float64"), "step_ids": ((3,), "int64")}


@pytest.mark.parametrize("change, match", [
    (lambda a: a.update(wte=np.zeros((1, 3), np.float32)), r"tensor 'wte' has shape \(1, 3\), expected \(5, 3\)"),
    (lambda a: a.update(wte=a["wte"].astype(np.int32)), "tensor 'wte' has dtype I32, expected float32"),
    (lambda a: a.pop("h.0.b"), "tensor 'h.0.b' is missing"),
    (lambda a: a.update(extra=np.zeros(7)), "holds the unexpected tensor 'extra'"),
    (lambda a: a["h.0.b"].__setitem__(2, np.nan), r"tensor 'h.0.b' holds nan at \(2,\): a checkpoint must be finite"),
])
def test_load_checkpoint_checks_every_tensor_and_names_the_file(tmp_path, change, match):
    arrays = _arrays()
    change(arrays)
    io.save_checkpoint(tmp_path / "c", arrays, {"step": 1})
    with pytest.raises(io.CorruptFileError, match=match) as info:
        io.load_checkpoint(tmp_path / "c", EXPECT)
    assert str(info.value).startswith(str(tmp_path / "c" / io.WEIGHTS) + ": ")
    loaded, _ = io.load_checkpoint(tmp_path / "c", finite=False)           # without the checks: as stored
    assert set(loaded) == set(arrays) and all(np.array_equal(loaded[k], arrays[k], equal_nan=True) for k in arrays)


def test_an_unexpected_tensor_is_refused_unread(tmp_path, monkeypatch):
    """The names, shapes and dtypes come from the header; no tensor is read before they all passed."""
    import safetensors
    io.save_checkpoint(tmp_path / "c", {**_arrays(), "huge": np.zeros((1024, 1024), np.float32)}, {})
    read = []
    real = safetensors.safe_open

    class Spy:
        def __init__(self, *a, **k):
            self.f = real(*a, **k)

        def __enter__(self):
            self.inner = self.f.__enter__()
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def get_tensor(self, name):
            read.append(name)
            return self.inner.get_tensor(name)

    monkeypatch.setattr(io, "safe_open", Spy)
    with pytest.raises(io.CorruptFileError, match="unexpected tensor 'huge'"):
        io.load_checkpoint(tmp_path / "c", EXPECT)
    assert read == []
    io.load_checkpoint(tmp_path / "c", {**EXPECT, "huge": None})          # declared: any shape, read
    assert sorted(read) == sorted([*EXPECT, "huge"])


@pytest.mark.parametrize("damage", ["truncated", "random", "empty"])
def test_a_corrupt_weights_file_is_one_line_naming_it(tmp_path, damage):
    io.save_checkpoint(tmp_path / "c", _arrays(), {"step": 1})
    w = tmp_path / "c" / io.WEIGHTS
    data = w.read_bytes()
    w.write_bytes({"truncated": data[:len(data) // 2], "random": np.random.default_rng(0).bytes(500),
                   "empty": b""}[damage])
    with pytest.raises(io.CorruptFileError) as info:
        io.load_checkpoint(tmp_path / "c")
    msg = str(info.value)
    assert msg.startswith(f"{w}: not a readable safetensors file") and "\n" not in msg


def test_a_corrupt_state_json_is_one_line_naming_it(tmp_path):
    io.save_checkpoint(tmp_path / "c", _arrays(), {"step": 1})
    s = tmp_path / "c" / io.STATE
    s.write_text('{"step": 1,')
    with pytest.raises(io.CorruptFileError, match=r"state.json: not valid JSON \(Expecting .* at line 1"):
        io.load_checkpoint(tmp_path / "c")
    s.write_bytes(b"\xff\xfe")
    with pytest.raises(io.CorruptFileError, match="not UTF-8 text"):
        io.load_checkpoint(tmp_path / "c")
    s.write_text("[1, 2]")
    with pytest.raises(io.CorruptFileError, match="must hold a JSON object, got list"):
        io.load_checkpoint(tmp_path / "c")
    with pytest.raises(io.CorruptFileError, match=r"state.json: missing entry 'iteration'"):
        with io.in_file(s):
            {}["iteration"]


def test_a_torn_last_metrics_line_is_dropped_with_a_warning_and_resume_goes_on(tmp_path):
    path = tmp_path / "metrics.jsonl"
    w = io.MetricsWriter(path)
    for step in range(4):
        w.write({"step": step, "loss": 0.5})
    with open(path, "a") as f:
        f.write('{"step": 4, "lo')                         # the crash came in the middle of a write
    with pytest.warns(io.RunWarning, match=r"metrics.jsonl: dropped a torn last line 5"):
        assert [r["step"] for r in io.read_metrics(path)] == [0, 1, 2, 3]
    with pytest.warns(io.RunWarning):
        io.MetricsWriter(path, append=True).truncate_after("step", 2)
    assert path.read_text().count("\n") == 3 and io.read_metrics(path)[-1]["step"] == 2   # repaired, no warning
    path.write_text('{"step": 0}\nnot json\n{"step": 2}\n')              # not the last line: corrupt, refused
    with pytest.raises(io.CorruptFileError, match="metrics.jsonl: line 2 is not valid JSON"):
        io.read_metrics(path)
    path.write_text('{"step": 0}\n[1]\n')
    with pytest.raises(io.CorruptFileError, match="line 2 is not a JSON object"):
        io.read_metrics(path)


def test_rng_state_accepts_only_numpys_bit_generators():
    state = io.rng_state(np.random.default_rng(1))
    for name in ("os", "__import__", "Generator", "RandomState"):
        with pytest.raises(ValueError, match=f"`rng` must be the state of one of numpy's bit generators .* got '{name}'"):
            io.rng_from_state({**state, "bit_generator": name})
    with pytest.raises(ValueError, match="`rng` is not a valid PCG64 state"):
        io.rng_from_state({**state, "state": {"state": "x"}})
    with pytest.raises(ValueError, match="`rng` must be"):
        io.rng_from_state("PCG64")
    for cls in io.BIT_GENERATORS.values():                  # each of them round-trips
        rng = np.random.Generator(cls(5))
        again = io.rng_from_state(json.loads(json.dumps(io.rng_state(rng))))
        assert rng.random() == again.random()


def test_a_full_disk_names_the_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(28, "No space left on device")          # what write/fsync raise on a full disk: no file name

    monkeypatch.setattr(io.os, "fsync", full)
    with pytest.raises(OSError) as info:
        io.atomic_write_text(tmp_path / "a.json", "{}")
    assert info.value.errno == 28 and info.value.filename == str(tmp_path / "a.json.tmp")
