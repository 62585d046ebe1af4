"""Checkpoints and metrics on disk: the file formats, and reading them back without trusting them.

A checkpoint is a folder::

    <dir>/weights.safetensors   every array (parameters, optimizer moments), flat names
    <dir>/state.json            everything else: configs, step counters, RNG state, ...

Both files are written atomically (write to a temporary file in the same folder, flush, fsync,
``os.replace``), and the folder itself is first written as ``<dir>.tmp`` and then swapped in, so
a crash in the middle of a save always leaves the previous good checkpoint readable.

Metrics are JSON lines: one dict per line, appended and flushed at every write. A crash in the middle
of a write can leave a torn last line; it is dropped with a :class:`RunWarning` (the run resumes from
its checkpoint, which precedes it).

Reading back trusts nothing: a file that is not what it should be is a :class:`CorruptFileError` (a
``ValueError``) whose one-line message starts with the file's path; :func:`load_checkpoint` with
``expect`` checks every tensor's name, shape and dtype from the safetensors header before it reads
the data (so an unexpected tensor is refused, not loaded into memory), then every tensor's
finiteness, all before the caller assigns anything; :func:`rng_from_state` accepts only numpy's own
bit generators. The policies built on these (locks, stage reuse, resume) are in :mod:`minippo.runs`.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save as st_save

WEIGHTS = "weights.safetensors"
STATE = "state.json"
#: safetensors' names of the dtypes minippo writes
SAFETENSORS_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
                      "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}
#: the bit generators :func:`rng_from_state` accepts (numpy's own, by the name their state carries)
BIT_GENERATORS = {"PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937,
                  "Philox": np.random.Philox, "SFC64": np.random.SFC64}


class CorruptFileError(ValueError):
    """A file that cannot be read as what it should be; the message is one line starting with its path."""

    def __init__(self, path, problem: str):
        self.path = Path(path)
        super().__init__(f"{path}: {problem}")


class RunWarning(UserWarning):
    """Something about a run folder the user should know but that does not stop the run (a torn last metrics
    line dropped, a missing metrics file); the ``minippo`` command prints it as one line."""


@contextlib.contextmanager
def in_file(path):
    """Re-raise a ``ValueError`` / ``KeyError`` / ``TypeError`` raised while checking the content of ``path`` as a
    :class:`CorruptFileError` naming it: ``with in_file(p): check_range("iteration", state["iteration"], ...)``."""
    try:
        yield
    except CorruptFileError:
        raise
    except KeyError as exc:
        raise CorruptFileError(path, f"missing entry {exc.args[0]!r}") from exc
    except (ValueError, TypeError) as exc:
        raise CorruptFileError(path, str(exc)) from exc


def read_json(path) -> Any:
    """The JSON in ``path``; a :class:`CorruptFileError` naming the file if it is not valid UTF-8 JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorruptFileError(path, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with _naming(tmp):                  # a full disk fails in write(), whose OSError names no file
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def _naming(path):
    """Give an ``OSError`` that names no file (ENOSPC from ``write``) the ``path`` being written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def save_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` (name -> array) to the ``.npz`` file ``path``, atomically, as ``np.savez``
    does (``np.load`` reads every array back exactly) but byte-deterministic: every entry's date,
    system and mode are fixed, so the same arrays give the same bytes on any OS and at any time
    (``np.savez`` leaves them to ``ZipFile.open``'s defaults; a run records the SHA-256 of its
    ``--pairs`` file). An object array is a ``ValueError`` naming it."""
    buf = BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, a in arrays.items():
            a = np.asanyarray(a)
            if a.dtype.hasobject:
                raise ValueError(f"array {name!r} has dtype {a.dtype}: object arrays cannot be saved "
                                 "(they would need pickle)")
            entry = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            entry.create_system, entry.external_attr = 3, 0o600 << 16   # the same on every OS
            with zf.open(entry, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, a, allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())


def _to_jsonable(obj: Any) -> Any:
    """Convert NumPy scalars/arrays inside ``obj`` to plain Python for ``json.dumps``."""
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def save_checkpoint(directory: str | os.PathLike, arrays: dict[str, np.ndarray], state: dict | None = None,
                    *, files: dict[str, str] | None = None) -> Path:
    """Save ``arrays`` (safetensors) and ``state`` (JSON) into ``directory``, atomically.

    ``files`` maps extra file names to their text (e.g. ``{"tokenizer.json": ...}``); they are
    written into the same temporary folder, so they are swapped in together with the weights.
    The previous content of ``directory`` stays intact until the new one is complete.
    """

    def fill(tmp: Path) -> None:
        contiguous = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
        atomic_write_bytes(tmp / WEIGHTS, st_save(contiguous))
        atomic_write_text(tmp / STATE, json.dumps(_to_jsonable(state or {}), indent=1,
                                                  sort_keys=True))
        for name, text in (files or {}).items():
            if name in (WEIGHTS, STATE) or Path(name).name != name:
                raise ValueError(f"`files` names must be plain file names other than {WEIGHTS} "
                                 f"and {STATE}, got {name!r}")
            atomic_write_text(tmp / name, text)

    return write_folder(directory, fill)


def write_folder(directory: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """Replace the folder ``directory`` by what ``fill(tmp)`` writes into ``tmp``, a new empty
    folder ``<dir>.tmp``; returns ``Path(directory)``.

    The previous content of ``directory`` stays intact until the new one is complete: if ``fill``
    raises, nothing else is touched (the next write clears ``<dir>.tmp``); then ``directory`` is
    moved to ``<dir>.old``, ``<dir>.tmp`` renamed in its place, and ``<dir>.old`` deleted. A
    ``<dir>.old`` beside ``directory`` is a leftover, deleted first; without ``directory`` it is the
    only good copy (a write stopped between the two renames), kept until the new folder is in place.
    Both names come from the absolute path (``.`` is the current folder; the process stays in it).
    """
    folder = Path(directory).absolute()
    if not folder.name:
        raise ValueError(f"cannot replace the folder {directory}: it has no name")
    tmp, old = folder.with_name(folder.name + ".tmp"), _old_folder(folder)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    fill(tmp)
    here = False                          # the process is in ``directory`` (``.``)
    if folder.exists():
        if old.exists():                  # a stale leftover: ``directory`` is the good copy
            shutil.rmtree(old)
        here = os.path.samefile(os.curdir, folder)
        os.replace(folder, old)
    # else: an ``old`` here is the only good copy (a write stopped between the renames): kept
    os.replace(tmp, folder)
    if here:                              # not left in the old folder, deleted next: in the new one
        os.chdir(folder)
    if old.exists():
        shutil.rmtree(old)
    return Path(directory)


def checkpoint_folder(directory: str | os.PathLike) -> Path:
    """The folder :func:`load_checkpoint` reads: ``directory``, or ``<dir>.old`` when a save was interrupted
    between its two renames (``FileNotFoundError`` naming ``directory`` when neither holds a checkpoint)."""
    directory = Path(directory)
    if (directory / WEIGHTS).exists():
        return directory
    old = _old_folder(directory)
    if old is not None and (old / WEIGHTS).exists():
        return old
    raise FileNotFoundError(f"no checkpoint at {directory} (expected {WEIGHTS} and {STATE})")


Expect = Mapping[str, "tuple | None"]
"""name -> ``(shape, dtype)``: the tensors a checkpoint must hold, e.g. ``{"wte": ((V, C), "float32")}``
(None: the tensor must be there, any shape and dtype)."""


def array_specs(arrays: Mapping[str, np.ndarray], prefix: str = "") -> dict[str, tuple]:
    """``{prefix + name: (shape, dtype)}`` of live arrays: what a checkpoint of them must hold (:data:`Expect`)."""
    return {prefix + k: (tuple(a.shape), np.dtype(a.dtype).name) for k, a in arrays.items()}


def read_weights(path, expect: Expect | None = None, *, finite: bool = True) -> dict[str, np.ndarray]:
    """The arrays of the safetensors file ``path``, checked before they are used.

    With ``expect`` the names must be exactly its keys and each tensor's shape and dtype as given, all read
    from the header before any tensor's data (an extra tensor is refused unread, whatever its size); with
    ``finite`` every floating-point tensor must hold no NaN / inf. Anything else is a :class:`CorruptFileError`
    naming the file and the tensor.
    """
    path = Path(path)
    try:
        with safe_open(str(path), framework="numpy") as f:
            names = list(f.keys())
            if expect is not None:
                missing, extra = sorted(set(expect) - set(names)), sorted(set(names) - set(expect))
                if missing:
                    raise CorruptFileError(path, f"tensor {missing[0]!r} is missing"
                                           + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
                if extra:
                    raise CorruptFileError(path, f"holds the unexpected tensor {extra[0]!r}"
                                           + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")
                                           + "; it was not written for this model")
                for name in names:
                    if expect[name] is None:                   # declared, any shape and dtype
                        continue
                    sl = f.get_slice(name)
                    shape, st_dtype = tuple(sl.get_shape()), sl.get_dtype()
                    want_shape, want_dtype = tuple(expect[name][0]), np.dtype(expect[name][1])
                    dtype = SAFETENSORS_DTYPES.get(st_dtype)
                    if shape != want_shape:
                        raise CorruptFileError(path, f"tensor {name!r} has shape {shape}, expected {want_shape}")
                    if dtype is None or np.dtype(dtype) != want_dtype:
                        raise CorruptFileError(path, f"tensor {name!r} has dtype {st_dtype}, expected {want_dtype.name}")
            arrays = {name: f.get_tensor(name) for name in names}
    except SafetensorError as exc:
        raise CorruptFileError(path, f"not a readable safetensors file ({exc})") from exc
    if finite:
        for name, a in arrays.items():
            if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
                bad = np.argwhere(~np.isfinite(a))[0]
                raise CorruptFileError(path, f"tensor {name!r} holds {a[tuple(bad)].item()!r} at "
                                       f"{tuple(int(i) for i in bad)}: a checkpoint must be finite")
    return arrays


def load_checkpoint(directory: str | os.PathLike, expect=None, *, finite: bool = True) -> tuple[dict[str, np.ndarray], dict]:
    """Load ``(arrays, state)`` written by :func:`save_checkpoint`, checked (:func:`read_weights`).

    If a save was interrupted between the two renames, the previous checkpoint is at ``<dir>.old``
    and is used. ``expect`` is an :data:`Expect` or a function ``state -> Expect`` (the tensors a
    checkpoint must hold often follow from its state, e.g. its model config), called after state.json
    was read; ``finite`` as :func:`read_weights`. A state.json that is not a JSON object is a
    :class:`CorruptFileError` naming it, and so is anything ``expect(state)`` raises while reading it.
    """
    folder = checkpoint_folder(directory)
    if not (folder / STATE).is_file():
        raise CorruptFileError(folder / STATE, "is missing (the checkpoint has weights but no state)")
    state = read_json(folder / STATE)
    if not isinstance(state, dict):
        raise CorruptFileError(folder / STATE, f"must hold a JSON object, got {type(state).__name__}")
    if callable(expect):
        with in_file(folder / STATE):
            expect = expect(state)
    arrays = read_weights(folder / WEIGHTS, expect, finite=finite)
    return arrays, state


def _old_folder(directory: Path) -> Path | None:
    """``<dir>.old`` beside ``directory``, named from its absolute path (``.`` is the current folder, whose
    ``.old`` is ``../<name>.old``); None for ``/``, which has no name."""
    folder = directory.absolute()
    return folder.with_name(folder.name + ".old") if folder.name else None


def has_checkpoint(directory: str | os.PathLike) -> bool:
    directory = Path(directory)
    old = _old_folder(directory)
    return (directory / WEIGHTS).exists() or (old is not None and (old / WEIGHTS).exists())


def rng_state(rng: np.random.Generator) -> dict:
    """JSON-serialisable state of a ``np.random.Generator`` (for exact resume)."""
    return _to_jsonable(rng.bit_generator.state)


def rng_from_state(state) -> np.random.Generator:
    """Rebuild the Generator saved by :func:`rng_state`; only numpy's own bit generators
    (:data:`BIT_GENERATORS`) are accepted, and a state they refuse is a ``ValueError`` naming `rng`."""
    if not isinstance(state, dict) or state.get("bit_generator") not in BIT_GENERATORS:
        name = state.get("bit_generator") if isinstance(state, dict) else state
        raise ValueError(f"`rng` must be the state of one of numpy's bit generators ({', '.join(BIT_GENERATORS)}), "
                         f"got {name!r}")
    bitgen = BIT_GENERATORS[state["bit_generator"]]()
    try:
        bitgen.state = state
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"`rng` is not a valid {state['bit_generator']} state ({type(exc).__name__}: {exc})") from exc
    return np.random.Generator(bitgen)


class MetricsWriter:
    """Append one JSON dict per line to ``path``; each write is flushed (a crash loses nothing).

    ``truncate_after(key, value)`` is used on resume so that the file equals an uninterrupted run's; it reads
    the whole file first (a corrupt line stops it before anything is rewritten) and drops a torn last line.
    """

    def __init__(self, path: str | os.PathLike, *, append: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not append:
            self.path.write_text("", encoding="utf-8")
        elif not self.path.exists():
            self.path.touch()

    def write(self, record: dict) -> None:
        with _naming(self.path), open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(_to_jsonable(record), sort_keys=True) + "\n")
            f.flush()

    def truncate_after(self, key: str, value: float) -> None:
        """Keep only the records with ``record[key] <= value`` (drop what a crashed run wrote later)."""
        kept = [r for r in read_metrics(self.path) if r.get(key, -np.inf) <= value]
        atomic_write_text(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """All records of a metrics JSON-lines file (:func:`iter_metrics`)."""
    return list(iter_metrics(path))


def iter_metrics(path: str | os.PathLike) -> Iterator[dict]:
    """The records of a metrics JSON-lines file, one dict per line.

    A last line that is not valid JSON is what a crash in the middle of a write leaves: it is dropped
    with a :class:`RunWarning`. Any other line that is not a JSON object is a :class:`CorruptFileError`
    naming the file and the line.
    """
    path = Path(path)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, raw in enumerate(lines[:last + 1]):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if i == last:
                warnings.warn(f"{path}: dropped a torn last line {i + 1} ({len(raw)} bytes, not valid JSON: "
                              "a run stopped in the middle of writing it)", RunWarning, stacklevel=2)
                return
            raise CorruptFileError(path, f"line {i + 1} is not valid JSON ({exc})") from exc
        if not isinstance(record, dict):
            raise CorruptFileError(path, f"line {i + 1} is not a JSON object")
        yield record
