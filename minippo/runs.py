"""The rules of a run folder, kept by every command that writes one (``minippo sft``, ``rm``, ``ppo``, ``rlhf``,
and the trainers that follow them).

Why a module of its own: :mod:`minippo.io` is the file FORMAT (atomic writes, safetensors + JSON, metrics
lines, validated reads) and decides nothing; this module is the POLICY built on it, as small pieces a stage
calls where it needs them, so that every trainer keeps the same rules without copying them:

- :func:`run_lock` / :class:`RunLock`: one writer per folder. An OS file lock (``fcntl.flock`` on
  ``<folder>/.minippo.lock``) dies with its process, so a ``kill -9`` leaves no stale lock; a second writer
  refuses at once with :class:`RunFolderBusy`, naming the folder and the holder's pid. The lock is per
  process (a process may take it again, e.g. a trainer resumed in the same Python session).
- :func:`config_differences` / :func:`check_same_config`: a stored stage is reused or resumed only when its
  stored config equals the requested one on every field that changes its result; otherwise
  :class:`ConfigMismatch` names the differing fields and how to start fresh. Nothing is deleted for the user.
- :func:`input_identity` / :func:`check_same_inputs`: nor is it replaced or resumed from other inputs (another SFT
  model, reward model or preference pairs given with the same flags): a run records the SHA-256 of each input file
  and :class:`ConfigMismatch` names the flag and both identities.
- :func:`check_no_run`: a fresh run refuses a folder that already holds another run's checkpoint (it would
  overwrite its records); :func:`check_fresh_start`: nor does it start in a folder holding a model, another kind
  of run, someone's ``config.json`` or ``metrics.jsonl``; :func:`open_run` is the start of a trainer's run
  (lock, resume or fresh, the metrics file), and :class:`RunFolderTrainer` the part of a trainer built on it that the PPO and DPO
  trainers share (open, close, what a stop leaves on disk, the saved-checkpoint bookkeeping).
- :func:`assign_arrays`: copy validated arrays into live parameters in place, refusing any broadcast or cast.
- :func:`stage` / :class:`Stage`: what this process is running and which checkpoint it has on disk; on
  Ctrl-C the innermost stage attaches one line to the ``KeyboardInterrupt`` (``interrupted_message``), which
  the ``minippo`` command prints instead of a traceback.
- :meth:`Stage.kept`: the sentence a stopped run (a NaN stop) prints about what is on disk.

A trainer with a run folder ``out`` and a checkpoint folder ``ckpt = out / "checkpoint"`` (the PPO trainer in
``minippo/rlhf/run/trainer.py`` and SFT in ``minippo/rlhf/sft.py`` do exactly this)::

    lock = RunLock(out).acquire()                        # or ``with run_lock(out):`` around the whole run
    st = Stage("DPO", out, checkpoint=ckpt)
    if has_checkpoint(ckpt):
        if not resume:
            check_no_run(out, ckpt, "a DPO run")         # never overwrite another run's records
        arrays, state = load_checkpoint(ckpt, array_specs(policy.params, "policy/") | ...)   # minippo.io
        check_same_config(f"the DPO run in {out}", state["dpo_config"], cfg.to_dict(), ignore=("ckpt_interval",))
        with in_file(checkpoint_folder(ckpt) / STATE):   # every entry checked, the file named
            check_range("step", state["step"], 1, cfg.steps, integer=True)
            opt.check_state_dict(moments, state["optimizer"]); rng = rng_from_state(state["rng"])
        assign_arrays(policy.params, arrays, "policy/"); opt.load_state_dict(moments, state["optimizer"])
        MetricsWriter(out / "metrics.jsonl", append=True).truncate_after("step", state["step"])   # only now
        st.saved = f"step {state['step']}"
    with st.running():                                   # Ctrl-C: one line naming what is kept
        for step in progress_bar(range(start, cfg.steps), initial=start, total=cfg.steps, desc="dpo"):
            ...                                          # a NaN stop: ValueError(f"... {st.kept()}")
            save_checkpoint(ckpt, arrays, state); st.saved = f"step {step + 1}"
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

from minippo.checks import parameter_note
from minippo.io import (STATE, WEIGHTS, MetricsWriter, RunWarning, atomic_write_text, checkpoint_folder,
                        has_checkpoint)

LOCK_FILE = ".minippo.lock"


class RunFolderBusy(BlockingIOError):
    """Another process holds the run folder's lock."""


class ConfigMismatch(ValueError):
    """A stored stage (or a checkpoint to resume) was made with another configuration."""


def ensure_folder(folder) -> Path:
    """``folder`` as a Path, created if needed; a path that exists but is no folder is a ``NotADirectoryError``
    naming it (not ``FileExistsError`` from deep inside ``mkdir``)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a run folder")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def user_temp_dir(name: str) -> Path:
    """``<temporary folder>/minippo-<uid>/<name>``: a folder of this user's own under the temporary directory (the
    quick lessons' figures, the quick stage cache). On a server shared by a class every user gets their own:
    ``minippo-<uid>`` is created with mode 0700, and one that belongs to another user is refused with a
    ``PermissionError`` naming it (set ``TMPDIR`` to a folder of your own)."""
    root = Path(tempfile.gettempdir()) / f"minippo-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    owner = root.stat().st_uid
    if owner != os.getuid():
        raise PermissionError(f"{root} belongs to another user (uid {owner}), not to uid {os.getuid()}: set TMPDIR "
                              "to a folder of your own")
    return root / name


# ----------------------------------------------------------------------------------------------
# one writer per folder
# ----------------------------------------------------------------------------------------------

_held: dict[str, list] = {}          # resolved folder -> [fd, count]: the locks this process holds


class RunLock:
    """An exclusive lock on a run folder (``<folder>/.minippo.lock``), re-entrant within one process.

    ``RunLock(folder).acquire()`` returns the lock or raises :class:`RunFolderBusy` at once (``wait=True``:
    block until the holder finishes, after calling ``log`` with who is waited for); ``release()`` (or the
    ``with`` block's end, or the process's death) frees it. The holder's pid is written into the lock file
    so that the refusal can name it.

    ``check``: the refusals of a command that only read the folder (another run's records, someone's files, a
    config that differs). It is called before the folder or its lock file is created, so that a refused folder
    is left as it was found, and again once the lock is held, since another writer may have changed the folder
    in between (the lock is released if it refuses then).
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        self.held = False

    def acquire(self, *, check: Callable[[], None] | None = None, wait: bool = False,
                log: Callable[[str], None] | None = None) -> "RunLock":
        if check is not None and self.folder.is_dir():
            check()                                      # refused: no lock file, no folder created
        taken = not self.held
        if taken:
            self._take(wait, log)
        if check is not None:
            try:
                check()                                  # again, now that no other writer can change it
            except BaseException:
                if taken:
                    self.release()
                raise
        return self

    def _take(self, wait: bool, log: Callable[[str], None] | None) -> None:
        folder = ensure_folder(self.folder)
        key = str(folder.resolve())
        if key in _held:
            _held[key][1] += 1
        else:
            path = folder / LOCK_FILE
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _holder(fd)
                    if not wait:
                        raise RunFolderBusy(f"{folder} is being written by another process ({holder}, lock file "
                                            f"{path}): wait for it to finish, or use another folder") from None
                    if log is not None:
                        log(f"waiting for {holder}, which is writing {folder}")
                    fcntl.flock(fd, fcntl.LOCK_EX)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except BaseException:
                os.close(fd)
                raise
            _held[key] = [fd, 1]
        self.key, self.held = key, True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        entry = _held[self.key]
        entry[1] -= 1
        if entry[1] == 0:
            del _held[self.key]
            os.close(entry[0])            # closing the descriptor releases the flock

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(fd: int) -> str:
    """'pid N' from a lock file (written by the holder right after it took the lock)."""
    text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    return f"pid {text}" if text.isdigit() else "pid unknown"


def run_lock(folder, *, check: Callable[[], None] | None = None, wait: bool = False,
             log: Callable[[str], None] | None = None) -> RunLock:
    """``with run_lock(folder, check=...): ...``: :class:`RunLock` acquired now (refusing at once unless
    ``wait``), after and before ``check``."""
    return RunLock(folder).acquire(check=check, wait=wait, log=log)


# ----------------------------------------------------------------------------------------------
# reuse and resume: the stored config must be the requested one
# ----------------------------------------------------------------------------------------------

def config_differences(stored: Mapping, requested: Mapping, ignore: Iterable[str] = ()) -> dict[str, tuple]:
    """``{field: (stored value, requested value)}`` for every field of either dict that differs, except
    ``ignore`` (fields that do not change the stage's result); a field absent on one side shows as
    ``"<absent>"``."""
    ignore = set(ignore)
    absent = "<absent>"
    return {k: (stored.get(k, absent), requested.get(k, absent))
            for k in sorted(set(stored) | set(requested)) if k not in ignore
            and stored.get(k, absent) != requested.get(k, absent)}


def check_same_config(what: str, stored: Mapping, requested: Mapping, *, ignore: Iterable[str] = (),
                      fresh: str = "use another folder") -> None:
    """:class:`ConfigMismatch` when ``stored`` and ``requested`` differ (:func:`config_differences`):
    "``what`` was made with another configuration: seed (stored 0, requested 1); to start fresh, ``fresh``"."""
    differ = config_differences(stored, requested, ignore)
    if differ:
        fields = ", ".join(f"{k} (stored {a!r}, requested {b!r})" for k, (a, b) in differ.items())
        raise ConfigMismatch(f"{what} was made with another configuration: {fields}; nothing was changed. "
                             f"To start fresh, {fresh}")


def check_stage_config(out, stages: Iterable[str], name: str, folder, stored: Mapping, requested: Mapping, *,
                       ignore: Iterable[str] = ()) -> None:
    """The reuse rule of a run folder made of stages (``minippo rlhf``, ``minippo rlvr``): the stage ``name`` found in
    ``folder`` (its finished model or its checkpoint) must have been made with the ``requested`` config, else
    :class:`ConfigMismatch` naming the stage, the fields, and how to start fresh: another ``--out``, or deleting
    that stage and the ones after it in ``stages`` (the order of the run) that exist. Nothing is deleted."""
    out, stages = Path(out), list(stages)
    later = [str(out / n) for n in stages[stages.index(name):] if (out / n).exists()]
    check_same_config(f"{folder} (stage {name} of the run in {out})", stored, requested, ignore=ignore,
                      fresh=f"use another --out, or delete {' and '.join(later)} to retrain "
                            f"{'that stage' if len(later) == 1 else 'those stages'} (nothing is deleted for you)")


def _read_or_none(path):
    """The JSON in ``path``, or None when it cannot be read (what reads it for real names the file)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def input_identity(path) -> dict:
    """What a run records of one of its inputs (the SFT model, the reward model, the preference pairs):
    ``{"sha256": ..., "folder": ...}``, the SHA-256 of the file ``path`` as it is on disk and the folder holding
    it. A model folder stands for its weights file (:func:`minippo.io.checkpoint_folder`: maybe ``<dir>.old``)."""
    path = Path(path)
    if not path.is_file():
        path = checkpoint_folder(path) / WEIGHTS
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"sha256": digest.hexdigest(), "folder": str(path.parent.absolute())}


def stored_inputs(checkpoint) -> Mapping | None:
    """The ``inputs`` recorded in the state.json of ``checkpoint`` (a checkpoint or model folder); None when it
    records none (it was written before inputs were recorded) or cannot be read (its restore names the file)."""
    state = _read_or_none(checkpoint_folder(checkpoint) / STATE)
    return state.get("inputs") if isinstance(state, dict) else None


def check_same_inputs(what: str, stored: Mapping | None, given: Mapping[str, Mapping], *,
                      fresh: str = "use another folder") -> None:
    """:class:`ConfigMismatch` when an input ``given`` to a run (``{"sft": input_identity(...), ...}``, by the name
    of its flag) is not the one ``stored`` with it: "``what`` was made from another --sft (stored 3f9a0c1d2e4b in
    /runs/a/sft/model, given 77c0e5a19b2f in /runs/b/sft/model); nothing was changed. To start fresh, ``fresh``".
    The same file by another path is the same input; an input that ``stored`` does not record (a run written
    before inputs were recorded) has nothing to compare: accepted."""
    for name, identity in given.items():
        old = stored.get(name) if isinstance(stored, Mapping) else None
        if isinstance(old, Mapping) and old.get("sha256") != identity["sha256"]:
            raise ConfigMismatch(f"{what} was made from another --{name} (stored {str(old.get('sha256'))[:12]} in "
                                 f"{old.get('folder')}, given {identity['sha256'][:12]} in {identity['folder']}); "
                                 f"nothing was changed. To start fresh, {fresh}")


def check_stage_inputs(out, name: str, inputs: Mapping[str, object]) -> None:
    """A finished stage of a run folder (``out / name / "policy"``: PPO, DPO, RL against a verifier) is reused
    only when it was made from the models and pairs now in ``out`` (``inputs``: flag name -> path): one
    retrained since (deleted, or made by another version) is a :class:`ConfigMismatch` naming it. What the
    policy (or, for a run made before the policy recorded them, its checkpoint) does not record is
    accepted."""
    folder = Path(out) / name
    stored = stored_inputs(folder / "policy")
    if stored is None and has_checkpoint(folder / "checkpoint"):
        stored = stored_inputs(folder / "checkpoint")
    check_same_inputs(f"{folder / 'policy'} (stage {name} of the run in {out})", stored,
                      {flag: input_identity(path) for flag, path in inputs.items()},
                      fresh=f"delete {folder} to retrain that stage (nothing is deleted for you)")


def check_run_folder(out, stages: Iterable[str], command: str) -> None:
    """``out`` must be empty or a run folder of ``command`` (one of its ``stages`` folders in it): a folder of
    something else (``--out .`` in a project, another command's run folder) is refused with ``FileExistsError``,
    since the files a run writes beside its stages (``summary.json``, ``samples.md``, ``figures/``) may not be
    ours there."""
    out, stages = Path(out), tuple(stages)
    entries = sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE)
    if entries and not any((out / name).is_dir() for name in stages):
        shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
        raise FileExistsError(f"{out} holds files of something other than a {command} run ({shown}; no "
                              f"{'/, '.join(stages)}/ folder): use another --out; nothing was written")


def check_no_run(folder, checkpoint, what: str) -> None:
    """A fresh run must not overwrite another run's records: ``FileExistsError`` when ``checkpoint`` (a
    checkpoint folder inside ``folder``) exists."""
    if has_checkpoint(checkpoint):
        raise FileExistsError(f"{folder} already holds {what} (checkpoint {checkpoint}): resume it, or use another "
                              "folder; nothing was overwritten")


def check_checkpoint_format(folder, checkpoint, formats: Iterable[str], what: str, config: Mapping) -> None:
    """Another minippo command's run (its checkpoint's state.json has a ``minippo.*`` format that is none of
    ``formats``, and its ``config.json``, if any, is not a config of ``config``'s kind) is refused with
    ``FileExistsError``, before a resume reads its tensors as this run's ("tensor 'actor/...' is missing", exit
    1, for ``minippo ppo --out`` an SFT run's folder). Anything else is left to the restore, which names the
    file."""
    state, stored = _read_or_none(checkpoint_folder(checkpoint) / STATE), _read_or_none(Path(folder) / "config.json")
    found = state.get("format") if isinstance(state, dict) else None
    if isinstance(found, str) and found.startswith("minippo.") and found not in tuple(formats) and not (
            isinstance(stored, dict) and set(stored) == set(config)):
        raise FileExistsError(f"{folder} holds something other than {what} (its checkpoint is of format {found!r}): "
                              "use another folder; nothing was overwritten")


def check_fresh_start(folder, config: Mapping, what: str, *, ignore: Iterable[str] = (), records: bool = True) -> None:
    """A run that starts fresh in ``folder`` (no checkpoint of its own there) writes ``config.json`` and
    ``metrics.jsonl``, so it first refuses, with ``FileExistsError`` and nothing written, a folder that holds a
    model (``weights.safetensors`` + ``state.json``), a ``config.json`` that is not a config of the same kind
    (another command's run, a Hugging Face folder, someone's file), or ``metrics.jsonl`` records without a
    ``config.json``; and (``records``) with :class:`ConfigMismatch` the records of an interrupted start of the same
    kind made with another configuration. An interrupted start with the same configuration starts again (it
    wrote the same records)."""
    folder = Path(folder)
    if has_checkpoint(folder):
        raise FileExistsError(f"{folder} is a model folder, not a run folder: use another folder for {what}; "
                              "nothing was written")
    config_path, metrics = folder / "config.json", folder / "metrics.jsonl"
    recorded = metrics.is_file() and metrics.stat().st_size > 0
    if not config_path.is_file():
        if recorded:
            raise FileExistsError(f"{metrics} holds records of something else (no config.json beside it): use "
                                  f"another folder for {what}; nothing was overwritten")
        return
    stored = _read_or_none(config_path)
    if not isinstance(stored, dict) or set(stored) != set(config):
        raise FileExistsError(f"{folder} holds something other than {what} ({config_path} is not its config): use "
                              "another folder; nothing was overwritten")
    if records and recorded:
        check_same_config(f"the interrupted start of {what} in {folder} (config.json and metrics.jsonl, no "
                          "checkpoint yet)", stored, dict(config), ignore=ignore,
                          fresh="use another folder, or delete that one")


def open_run(folder, config: Mapping, restore: Callable[[Path], int], *, what: str, resume: bool, key: str,
             formats: Iterable[str] = (), inputs: Mapping[str, Mapping] | None = None):
    """The start every trainer with a run folder shares: lock ``folder``, then resume or start fresh.

    With a checkpoint in ``folder / "checkpoint"``: a fresh run (``resume=False``) refuses (:func:`check_no_run`),
    and so does a resume given other ``inputs`` than the checkpoint records (:func:`check_same_inputs`);
    otherwise ``restore(checkpoint)`` validates and restores everything (before any file is touched) and returns
    how many ``key``s (iterations, steps) are done, and ``metrics.jsonl`` keeps the records of those only (a
    missing file is a :class:`~minippo.io.RunWarning`: its records are lost). Without a checkpoint:
    ``config.json`` and an empty ``metrics.jsonl``, in a folder :func:`check_fresh_start` accepts. Returns
    ``(lock, metrics)``; the lock is released again if anything fails before that.
    """
    folder = Path(folder)
    ckpt, metrics_path = folder / "checkpoint", folder / "metrics.jsonl"

    def refuse() -> None:
        if not has_checkpoint(ckpt):
            check_fresh_start(folder, config, what)          # never another run's or someone's files
        elif not resume:
            check_no_run(folder, ckpt, what)                 # never overwrite another run's records
        else:
            if formats:
                check_checkpoint_format(folder, ckpt, formats, what, config)  # another command's run
            check_same_inputs(f"the checkpoint in {ckpt}", stored_inputs(ckpt), inputs or {},
                              fresh=f"use another folder than {folder} (or delete it)")   # never other inputs

    lock = RunLock(folder).acquire(check=refuse)
    try:
        if not has_checkpoint(ckpt):
            atomic_write_text(folder / "config.json", json.dumps(dict(config), indent=1))
            return lock, MetricsWriter(metrics_path)
        done = restore(ckpt)                                 # everything checked before anything is assigned
        if not metrics_path.exists():
            warnings.warn(f"{metrics_path} is missing: the records of {key}s 0-{done - 1} are lost; it will hold "
                          f"the {key}s after them only", RunWarning, stacklevel=3)
        metrics = MetricsWriter(metrics_path, append=True)
        metrics.truncate_after(key, done - 1)
        return lock, metrics
    except BaseException:
        lock.release()
        raise


# ----------------------------------------------------------------------------------------------
# assigning a loaded checkpoint
# ----------------------------------------------------------------------------------------------

def assign_arrays(params: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray], prefix: str = "",
                  source="`arrays`") -> None:
    """``params[k][...] = arrays[prefix + k]`` for every k, in place (an optimizer holds these arrays), after
    checking ALL of them: the same names, shapes and dtypes, finite. Nothing is broadcast or cast; a
    ``ValueError`` naming ``source`` and the tensor is raised before anything is assigned."""
    want = {prefix + k for k in params}
    have = {k for k in arrays if k.startswith(prefix)}
    if want != have:
        name = sorted(want ^ have)[0]
        raise ValueError(f"{source}: tensor {name!r} is {'missing' if name in want else 'unexpected'}")
    for k, p in params.items():
        a = arrays[prefix + k]
        if a.shape != p.shape or a.dtype != p.dtype:
            raise ValueError(f"{source}: tensor {prefix + k!r} is {a.dtype}{list(a.shape)}, the model's is "
                             f"{p.dtype}{list(p.shape)}")
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
            raise ValueError(f"{source}: tensor {prefix + k!r} is not finite")
    for k, p in params.items():
        p[...] = arrays[prefix + k]


# ----------------------------------------------------------------------------------------------
# what is running, what is on disk: the Ctrl-C line and the stop messages
# ----------------------------------------------------------------------------------------------

@dataclass
class Stage:
    """A stage running in this process: ``name`` ("SFT"), its ``folder``, the ``checkpoint`` folder it
    saves to, and ``saved``: the label of the last checkpoint on disk ("step 200"), None before the first."""

    name: str
    folder: Path | None
    checkpoint: Path | None = None
    saved: str | None = None
    resume: str = "the same command resumes from it"
    restart: str = "the same command starts it again"
    extra: dict = field(default_factory=dict)
    on_disk: Callable[[], str] | None = None
    """What is kept, read from the disk when asked (a command made of stages: :func:`stages_kept`)."""

    def kept(self) -> str:
        """What is on disk now, as the end of a sentence."""
        if self.on_disk is not None:
            return self.on_disk()
        if self.saved is not None:
            return f"the last good checkpoint ({self.saved}) is kept in {self.checkpoint}"
        return "no checkpoint had been written yet"

    def interrupted_message(self) -> str:
        """The one line printed on Ctrl-C."""
        if self.folder is None:
            return f"interrupted {self.name} (it was writing no files)"
        then = self.resume if self.saved is not None else self.restart
        return f"interrupted {self.name} in {self.folder}; {self.kept()}; {then}"

    @contextlib.contextmanager
    def running(self):
        """A ``KeyboardInterrupt`` leaving the block carries :meth:`interrupted_message` as its
        ``minippo_message`` (the innermost stage's: an outer stage does not overwrite it)."""
        try:
            yield self
        except KeyboardInterrupt as exc:
            if not hasattr(exc, "minippo_message"):
                exc.minippo_message = self.interrupted_message()
            raise


def stages_kept(out, stages: Iterable[str]) -> str:
    """What a run folder made of ``stages`` holds (each stage's finished model, else its checkpoint), as the end of a
    sentence: the Ctrl-C line of ``minippo rlhf`` and ``minippo rlvr`` between and after their stages."""
    out = Path(out)
    kept = [next((f"{name}/{sub}" for sub in ("model", "policy", "checkpoint") if has_checkpoint(out / name / sub)),
                 None) for name in stages]
    kept = [k for k in kept if k is not None]
    if not kept:
        return "no stage had been finished or checkpointed yet"
    return f"{', '.join(kept)} {'is' if len(kept) == 1 else 'are'} kept"


def stage(name: str, folder, *, checkpoint=None, saved: str | None = None, **hints):
    """``with stage("SFT", out, checkpoint=out / "checkpoint") as s: ...; s.saved = "step 200"``: a
    :class:`Stage` and its :meth:`Stage.running` block."""
    return Stage(name, Path(folder), None if checkpoint is None else Path(checkpoint), saved, **hints).running()



class RunFolderTrainer:
    """What the PPO and DPO trainers share around their run folder (``out_dir``, None: nothing is written).

    A subclass sets ``STAGE`` ("PPO") and ``UNIT`` ("iteration": what ``metrics.jsonl`` records are keyed by),
    defines ``done`` (how many units are done), ``load(checkpoint)`` and ``save(checkpoint)`` (which records
    ``inputs``), and calls :meth:`_open_run_folder` at the end of its ``__init__``. It gets ``out_dir``,
    ``inputs``, ``metrics`` (a :class:`~minippo.io.MetricsWriter`), ``stage`` (:class:`Stage`), :meth:`close`,
    :meth:`_on_disk`, :meth:`_write` (a unit's record, then its checkpoint) and :meth:`_stopped` (the error
    of a failed unit)."""

    STAGE: str = ""
    UNIT: str = ""
    FORMATS: tuple[str, ...] = ()        # the formats of the checkpoints it resumes (another one is refused)

    @property
    def done(self) -> int:
        raise NotImplementedError

    def _open_run_folder(self, out_dir, config: Mapping, *, resume: bool, inputs: Mapping | None = None) -> None:
        """Lock ``out_dir`` and resume from its checkpoint or start it fresh (:func:`open_run`); ``inputs`` (what
        the run is made from: :func:`check_same_inputs`) become ``self.inputs``, which ``save`` records."""
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.metrics, self._lock, self.inputs = None, None, dict(inputs or {})
        self.stage = Stage(self.STAGE, self.out_dir, None if out_dir is None else self.out_dir / "checkpoint")
        if self.out_dir is not None:
            self._lock, self.metrics = open_run(self.out_dir, config, self._restore, what=f"a {self.STAGE} run",
                                                resume=resume, key=self.UNIT, formats=self.FORMATS, inputs=self.inputs)
            weakref.finalize(self, self._lock.release)

    def _restore(self, checkpoint) -> int:
        """Load ``checkpoint`` (validated before anything is assigned); the units it has done."""
        self.load(checkpoint)
        return self.done

    def _write(self, record: dict, checkpoint_every: int, total: int) -> None:
        """Append ``record`` to ``metrics.jsonl``, then save a checkpoint every ``checkpoint_every`` units and at
        ``total``: the record first, so a checkpoint never exists without its unit's record."""
        if self.out_dir is None:
            return
        self.metrics.write(record)
        if self.done % checkpoint_every == 0 or self.done == total:
            self.save(self.out_dir / "checkpoint")

    def _stopped(self, exc: Exception, params: Mapping[str, np.ndarray], at: int) -> ValueError:
        """The error of a unit that failed (the NaN guard, or bad data): ``exc``, which of ``params`` went
        non-finite (:func:`minippo.checks.parameter_note`), the unit ``at``, and what is kept on disk."""
        return ValueError(f"{exc}{parameter_note(params)}: training stopped at {self.UNIT} {at}; {self._on_disk()}")

    def _saved(self, done: int) -> None:
        """Record that the checkpoint on disk now holds ``done`` units."""
        self.stage.saved = f"{self.UNIT} {done}"

    def close(self) -> None:
        """Release the run folder's lock (also done when the trainer is garbage-collected)."""
        if self._lock is not None:
            self._lock.release()

    def _on_disk(self) -> str:
        """What a stopped run leaves: the last good checkpoint, or that there is none."""
        if self.out_dir is None:
            return "nothing is written (no out_dir)"
        return self.stage.kept()
