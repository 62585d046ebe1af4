"""Checkpoints and metrics on disk.

A checkpoint is a folder::

    <dir>/weights.safetensors   every array (parameters, optimizer moments), flat names
    <dir>/state.json            everything else: configs, step counters, RNG state, ...

Both files are written atomically (write to a temporary file in the same folder, flush, fsync,
``os.replace``), and the folder itself is first written as ``<dir>.tmp`` and then swapped in, so
a crash in the middle of a save always leaves the previous good checkpoint readable.

Metrics are JSON lines: one dict per line, appended and flushed at every write.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from safetensors.numpy import load_file, save as st_save

WEIGHTS = "weights.safetensors"
STATE = "state.json"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


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

    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    contiguous = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    atomic_write_bytes(tmp / WEIGHTS, st_save(contiguous))
    atomic_write_text(tmp / STATE, json.dumps(_to_jsonable(state or {}), indent=1, sort_keys=True))
    for name, text in (files or {}).items():
        if name in (WEIGHTS, STATE) or Path(name).name != name:
            raise ValueError(f"`files` names must be plain file names other than {WEIGHTS} and {STATE}, got {name!r}")
        atomic_write_text(tmp / name, text)
    old = directory.with_name(directory.name + ".old")
    if directory.exists():
        if old.exists():                  # a stale leftover: ``directory`` is the good checkpoint
            shutil.rmtree(old)
        os.replace(directory, old)
    # else: if ``old`` exists, a previous save crashed between the two renames and ``old`` is the
    # only good checkpoint; it is kept until the new one is in place
    os.replace(tmp, directory)
    if old.exists():
        shutil.rmtree(old)
    return directory


def load_checkpoint(directory: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Load ``(arrays, state)`` written by :func:`save_checkpoint`.

    If a save was interrupted between the two renames, the previous checkpoint is at
    ``<dir>.old`` and is used.
    """

    directory = Path(directory)
    if not (directory / WEIGHTS).exists():
        old = directory.with_name(directory.name + ".old")
        if (old / WEIGHTS).exists():
            directory = old
        else:
            raise FileNotFoundError(f"no checkpoint at {directory} (expected {WEIGHTS} and {STATE})")
    arrays = load_file(str(directory / WEIGHTS))
    state = json.loads((directory / STATE).read_text(encoding="utf-8"))
    return arrays, state


def has_checkpoint(directory: str | os.PathLike) -> bool:
    directory = Path(directory)
    return (directory / WEIGHTS).exists() or (directory.with_name(directory.name + ".old") / WEIGHTS).exists()


def rng_state(rng: np.random.Generator) -> dict:
    """JSON-serialisable state of a ``np.random.Generator`` (for exact resume)."""
    return _to_jsonable(rng.bit_generator.state)


def rng_from_state(state: dict) -> np.random.Generator:
    """Rebuild the Generator saved by :func:`rng_state`."""
    bitgen = getattr(np.random, state["bit_generator"])()
    bitgen.state = state
    return np.random.Generator(bitgen)


class MetricsWriter:
    """Append one JSON dict per line to ``path``; each write is flushed (a crash loses nothing).

    ``truncate_after(step)`` is used on resume so that the file equals an uninterrupted run's.
    """

    def __init__(self, path: str | os.PathLike, *, append: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not append:
            self.path.write_text("", encoding="utf-8")
        elif not self.path.exists():
            self.path.touch()

    def write(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(_to_jsonable(record), sort_keys=True) + "\n")
            f.flush()

    def truncate_after(self, key: str, value: float) -> None:
        """Keep only the records with ``record[key] <= value`` (drop what a crashed run wrote later)."""
        kept = [r for r in read_metrics(self.path) if r.get(key, -np.inf) <= value]
        atomic_write_text(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """All records of a metrics JSON-lines file."""
    return list(iter_metrics(path))


def iter_metrics(path: str | os.PathLike) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)
