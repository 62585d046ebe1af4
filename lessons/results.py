"""``python -m lessons results``: what each lesson computed, kept in ``docs/results/``, the one source of the
numbers the docs quote (``lessons/quote.py`` writes them into the Markdown).

One file per lesson, ``docs/results/lNN_<slug>.json``, and one per job beside them (:data:`JOBS`): the main job,
``docs/results/main_rlhf.json`` (``minippo rlhf`` at its default size: what the README's example output shows),
and ``docs/results/rlvr_methods.json`` (``minippo rlvr`` at its default size, every ``--method``: the README's
table; :func:`run_rlvr_methods`, :func:`rlvr_across_runs`). A lesson listed in :data:`FULL` has a second file
for its ``--full`` size (the size of its committed figure), ``docs/results/lNN_<slug>_full.json``: its target is
``lNN-full`` (``python -m lessons results 17 --full``; markers ``<!-- l17-full:KEY FORMAT -->``). ``all`` and
``stale`` add the ``--full`` files only with ``--full``: they are slow to make, and the reruns of the tests
(``pytest -m rerun``) never rerun them: their staleness is their hash. Each file holds

- ``target`` (``l08``, ``l17-full``, ``main``), ``size`` (``default``: what a student running the lesson sees;
  ``full`` for ``lNN-full``) and ``seed`` (0: the reference run, whose numbers the docs quote), ``command``
  (what regenerates the file);
- ``source_sha256``: the sha256 of the lesson's source (``lNN-full``: of the lesson and the study modules its
  --full part uses, listed in :data:`FULL`; the main job: of its pipeline modules), as for the notebooks
  (``lessons.notebooks.source_hash``); the file is stale once one of them changes (:func:`staleness`);
- ``machine``: CPU model, cores, the OpenBLAS kernel (``minippo.blas.blas_core_name()``), numba on or off,
  the float32 matmul GFLOP/s that ``minippo bench --only matmul`` measures around the reference run (the best
  of its readings before and after, with the load average then: a busy machine reads low); ``date``;
  ``time``: the CPU and wall seconds of the reference run's ``run()``;
- ``values``: every scalar leaf of the reference run's ``run()`` dict, flattened to dotted keys
  (``summary.defaults.steps_to_475``; a list's items by index, float dict keys written as ``0.95``, a
  dataclass's fields by name: ``config.iterations``, a numeric vector of at most :data:`MAX_LIST` items (one
  number per seed) like a list; per-iteration ``records`` left out: :data:`RECORDS`), plus what the lesson's
  optional ``derived(results) -> dict`` adds (numbers it prints that ``run()`` does not return as scalars),
  plus each verdict's outcome and numbers (``verdict.<key>.outcome``,
  ``verdict.<key>.<number>``: :func:`add_verdict_values`). Arrays and lists longer than :data:`MAX_LIST` are left
  out and named in ``left_out``;
- ``cpu_dependent``: the target's numbers depend on the CPU (:data:`CPU_DEPENDENT`: float32 training,
  CartPole). Each run is a subprocess with ``OPENBLAS_CORETYPE`` set: every target runs on seed 0 under every
  kernel given (default ``default Haswell Sandybridge``), a CPU-dependent one also on every other seed given
  (default ``0 1``: on another CPU such a run drifts apart like another seed). ``ranges`` holds, for each key
  whose value is not the same in every run, its min and max over the runs (``missing``: runs without a
  number there; a non-numeric key: its distinct values). Keys absent from it are the same in every run;
- ``runs``: each run's CPU model, kernel, seed, CPU and wall seconds and matmul GFLOP/s; ``verdicts``: what the
  lesson's ``verdicts(results)`` returns, when it has one (the outcomes of every run beside it).

On another CPU a CPU-dependent target rounds differently even under the same kernel and lands anywhere in the
seed noise, so its rerun may fall outside ranges measured on one machine. ``python -m lessons results N
--add-machine`` (:func:`add_machine`) runs it on this machine (seed 0 under its own kernel unless ``--seeds`` /
``--kernels`` say otherwise) and adds those runs to the file, which keeps its reference run: the ranges widen to
cover them, and the quotes say over how many CPUs they were measured. A change of a target's source that moves no
number keeps its file, runs from other CPUs included: ``python -m lessons restamp N --since REV``
(:mod:`lessons.restamp`) runs seed 0 from the commit REV the file was made from and from the current source, and
gives the file the current source's hash only if every number is the same, bit for bit.

Keys naming a measurement of the run itself (times, peak memory, the matmul GFLOP/s and load average around it:
:data:`MEASURED`) vary from run to run;
they are quoted as the reference run's, next to the machine's GFLOP/s, and never checked for equality.

A table of one row per seed (the ``rlvr`` job's) quotes each seed's run, not only the reference run: for such a
job (:data:`ACROSS_RUNS`) ``values`` also holds, for each run under the reference kernel, its values under
``seed.<S>.<key>`` (and its matmul GFLOP/s and load average), and the counts and extremes taken over those runs
(``across.<key>``: "pass@64 falls in N of M runs"). Each such key is one run's number, or a number of all of
them, named as such: it has no range and is quoted plainly. A rerun of seed 0 (``tests/lessons/test_results.py``)
checks ``seed.0.<key>`` as ``<key>``, within its range over the runs; it cannot check another seed's keys or the
counts over the runs. Runs added by ``--add-machine`` widen the ranges of the reference run's keys only.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lessons._common import REPO_ROOT
from lessons.notebooks import source_hash
from minippo.bench.report import cpu_model

RESULTS_DIR = REPO_ROOT / "docs" / "results"
MAIN = "main"                                  # the main job, `minippo rlhf` at its default size
MAIN_FILE = "main_rlhf"
#: the model every trained number goes through: TinyGPT, its layers and their numba twins, the log-probs
#: (a change there moves the numbers as surely as one in the algorithm: issue 30's padding-free rows)
MODEL_SOURCES = ("minippo/nn/gpt.py", "minippo/nn/attention.py", "minippo/nn/layers.py",
                 "minippo/nn/_kernels.py", "minippo/rl/losses.py")
MAIN_SOURCES = ("minippo/rlhf/run/pipeline.py", "minippo/rlhf/sft.py", "minippo/rlhf/lm_train.py",
                "minippo/rlhf/rm_train.py",
                "minippo/rlhf/ppo.py", "minippo/rlhf/ppo_config.py", "minippo/rlhf/run/trainer.py",
                "minippo/rlhf/run/evaluate.py", *MODEL_SOURCES)
RLVR = "rlvr"                                  # `minippo rlvr` at its default size, every --method, one SFT stage
RLVR_FILE = "rlvr_methods"
RLVR_SOURCES = ("minippo/rlvr/run.py", "minippo/rlvr/task.py", "minippo/rlvr/tokenizer.py",
                "minippo/rlvr/verifier.py", "minippo/rlvr/evaluate.py", "minippo/rlvr/trainer.py",
                "minippo/rlhf/lm_train.py", "minippo/rlhf/ppo.py", "minippo/rlhf/ppo_config.py",
                "minippo/rlhf/grpo.py", *MODEL_SOURCES)
RLVR_METHODS = ("grpo", "dr_grpo", "rloo", "ppo")   # `minippo rlvr --method M`, in the README table's order
RLVR_GROUP = ("grpo", "dr_grpo", "rloo")            # the critic-free family
RLVR_HIGH_LR = 3e-4         # the lr that over-updated GRPO (README): one more GRPO run at it, from the same SFT stage
#: the jobs beside the lessons: target -> (results file name, the source files its hash covers)
JOBS = {MAIN: (MAIN_FILE, MAIN_SOURCES), RLVR: (RLVR_FILE, RLVR_SOURCES)}
#: targets whose numbers depend on the CPU, and why: they are run on several seeds too (ranges over kernels x seeds)
CPU_DEPENDENT = {
    "l08": "CartPole: float32 MLPs whose rounding follows the OpenBLAS kernel and the CPU's SIMD code "
           "(NumPy, numba); an episode amplifies one flipped action",
    MAIN: "float32 TinyGPT training (SFT, reward model, PPO) and the text sampled from it",
    # l12 (untrained weights: counts and bytes) and l22 (exact float64 sums) do not depend on the CPU
    "l09": "a few float32 PPO iterations on the cached SFT policy and reward model (float32 TinyGPT training)",
    "l10": "float32 TinyGPT SFT training and the text sampled from it",
    "l11": "float32 reward-model training on pairs sampled from a float32-trained SFT policy",
    **{f"l{n}": "float32 TinyGPT training: the cached SFT policy and reward model, then PPO (or GRPO, RLOO, "
                "DPO, ...) runs and the text sampled from them"
       for n in (13, 14, 15, 16, 17, 18, 19, 20, 21)},
    "l23": "float32 TinyGPT training: SFT on the sums task, then GRPO, Dr. GRPO, RLOO and PPO runs",
    RLVR: "float32 TinyGPT training: SFT on the sums task, then GRPO, Dr. GRPO, RLOO and PPO runs (minippo rlvr)",
    "l24": "the float32-trained RLHF SFT policy (part (a)'s sampler mismatch) and, at --full, PPO training",
}
#: lessons with a second results file at ``--full`` (target ``lNN-full``, file ``lNN_<slug>_full.json``), and the
#: study modules their --full part uses beyond the lesson file: the file's hash covers them too
FULL = {
    "l13": ("minippo/studies/eps_by_task.py",),
    "l17": ("minippo/studies/knob_sweeps.py",),
    "l23": ("minippo/studies/verifiable.py",),
    "l24": ("minippo/studies/off_policy_training.py",),
}
FULL_SUFFIX = "-full"
DEFAULT_KERNELS = ("default", "Haswell", "Sandybridge")
DEFAULT_SEEDS = (0, 1)
MAX_LIST = 16               # longer lists and vectors are left out, like other arrays
MAX_STR = 200
RECORDS = ("records",)      # keys of per-iteration training logs, left out (a lesson quotes their summaries)
REL_TOL, ABS_TOL = 1e-9, 1e-12   # float64 results of differently ordered sums (BLAS kernels) agree to this
MEASURED = re.compile(r"(?:^|[._/])(?:time|timing|times|wall|cpu|cpu_share\w*|seconds|rss|matmul_gflops|load_average)"
                      r"(?=$|[._/])|_s$|_mb$")


class ResultsError(ValueError):
    """A results file that cannot be made or read; the message names the target and what to do."""


# ---------------------------------------------------------------- targets and files

def target_of(module_name: str, full: bool = False) -> str:
    """``l08`` for ``lessons.l08_ppo_cartpole`` (``l17-full`` with ``full``); a job's name (``main``, ``rlvr``)
    for itself."""
    if module_name in JOBS:
        return module_name
    return module_name.rsplit(".", 1)[-1][:3] + (FULL_SUFFIX if full else "")


def is_full(target: str) -> bool:
    """Whether ``target`` names a lesson's ``--full`` results (``l17-full``)."""
    return target.endswith(FULL_SUFFIX)


def lesson_of(target: str) -> str:
    """The lesson target of a ``--full`` one (``l17`` for ``l17-full``); any other target unchanged."""
    return target[:-len(FULL_SUFFIX)] if is_full(target) else target


def full_target(target: str) -> str:
    """``l17-full`` for ``l17``: a one-line ``ResultsError`` when the lesson has no ``--full`` results."""
    if target not in FULL:
        raise ResultsError(f"{target} has no --full results: lessons with them are "
                           f"{', '.join(str(int(t[1:])) for t in FULL)} (lessons/results.py FULL)")
    return target + FULL_SUFFIX


def module_of(target: str) -> str:
    """``lessons.l08_ppo_cartpole`` for ``l08`` and ``l08-full`` (the lesson files of the repository)."""
    lesson = lesson_of(target)
    found = sorted((REPO_ROOT / "lessons").glob(f"{lesson}_*.py"))
    if not re.fullmatch(r"l\d\d", lesson) or len(found) != 1:
        raise ResultsError(f"no lesson {target!r}: targets are l01 ... l{len(all_targets()) - len(JOBS):02d}, "
                           + ", ".join(repr(j) for j in JOBS) + " and " + ", ".join(full_target(t) for t in FULL))
    if is_full(target):
        full_target(lesson)                 # a lesson without --full results: the error names the ones with
    return f"lessons.{found[0].stem}"


def all_targets(full: bool = False) -> list[str]:
    """Every lesson and job; with ``full``, also the ``--full`` targets of :data:`FULL`."""
    lessons = [p.stem[:3] for p in sorted((REPO_ROOT / "lessons").glob("l[0-9][0-9]_*.py"))]
    return lessons + list(JOBS) + ([t + FULL_SUFFIX for t in lessons if t in FULL] if full else [])


def results_path(target: str, directory: Path | None = None) -> Path:
    """``docs/results/lNN_<slug>.json``; ``lNN_<slug>_full.json`` for ``lNN-full``; a job's own file."""
    if target in JOBS:
        name = JOBS[target][0]
    else:
        name = module_of(target).rsplit(".", 1)[-1] + ("_full" if is_full(target) else "")
    return Path(directory or RESULTS_DIR) / f"{name}.json"


def source_files(target: str) -> list[Path]:
    """What the target's hash covers: the lesson file (and, for ``lNN-full``, the study modules FULL lists);
    a job's modules."""
    if target in JOBS:
        return [REPO_ROOT / p for p in JOBS[target][1]]
    lesson = REPO_ROOT / "lessons" / f"{module_of(target).rsplit('.', 1)[-1]}.py"
    return [lesson] + ([REPO_ROOT / p for p in FULL[lesson_of(target)]] if is_full(target) else [])


def current_hash(target: str, files: list[Path] | None = None) -> str:
    """sha256 of the target's source files (their texts in order), normalised as the notebooks' hash is."""
    return source_hash("\n".join(p.read_text(encoding="utf-8") for p in (files or source_files(target))), "")


def regenerate_command(target: str) -> str:
    if target in JOBS:
        return f"python -m lessons results {target}"
    return f"python -m lessons results {int(lesson_of(target)[1:])}" + (" --full" if is_full(target) else "")


def load(target: str, directory: Path | None = None) -> dict:
    """The target's results file; each of its ``runs`` gets ``outcomes``, verdict key -> that run's outcome (read
    from its ``verdict_outcomes``, in the order of ``verdicts``): the docs quote a verdict word that differs
    between the runs per run, ``@runs.1.outcomes.<key>``."""
    path = results_path(target, directory)
    if not path.is_file():
        raise ResultsError(f"{path.name}: no results for {target}; make them with `{regenerate_command(target)}`")
    data = json.loads(path.read_text(encoding="utf-8"))
    keys = [v.get("key") for v in data.get("verdicts") or []]
    for run in data.get("runs", []):
        if run.get("verdict_outcomes") is not None and len(run["verdict_outcomes"]) == len(keys):
            run["outcomes"] = dict(zip(keys, run["verdict_outcomes"]))
    return data


def staleness(target: str, directory: Path | None = None, files: list[Path] | None = None) -> str | None:
    """None if the target's results file was made from its current source, else a message naming the
    file, the source and the command that regenerates it (``files``: the tests pass edited copies)."""
    try:
        data = load(target, directory)
    except ResultsError as exc:
        return str(exc)
    if data.get("source_sha256") != current_hash(target, files):
        names = ", ".join(str(p.relative_to(REPO_ROOT)) if p.is_relative_to(REPO_ROOT) else p.name
                          for p in (files or source_files(target)))
        return (f"{results_path(target, directory).name} is stale: {names} changed since it was made; "
                f"regenerate it with `{regenerate_command(target)}`")
    return None


def is_measured(key: str) -> bool:
    """Whether ``key`` names a measurement of the run itself (a time, peak memory), not a result."""
    return MEASURED.search(key) is not None


# ---------------------------------------------------------------- flattening

def key_text(k) -> str:
    if isinstance(k, (float, np.floating)):
        short = f"{float(k):g}"
        return short if float(short) == float(k) else repr(float(k))
    if isinstance(k, tuple):
        return ",".join(key_text(x) for x in k)
    return str(k)


def scalar(x):
    """``x`` as a JSON scalar (numpy scalars unwrapped), or raise TypeError."""
    if isinstance(x, np.generic):
        x = x.item()
    if x is None or isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, str) and len(x) <= MAX_STR:
        return x
    raise TypeError(type(x).__name__)


def flatten(obj, prefix: str = "", values: dict | None = None, left_out: dict | None = None):
    """``(values, left_out)``: the scalar leaves of ``obj`` (dicts, short lists and tuples, and dataclasses such as
    a config, by field) under dotted keys, and what was left out (key ->
    why: an array's shape, a long list's length, another type). A key twice is a ``ResultsError``."""
    values = {} if values is None else values
    left_out = {} if left_out is None else left_out
    if isinstance(obj, dict):
        items = [(key_text(k), v) for k, v in obj.items()]
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):      # a config: its fields
        items = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    elif isinstance(obj, (list, tuple)) and len(obj) <= MAX_LIST:
        items = [(str(i), v) for i, v in enumerate(obj)]
    elif isinstance(obj, np.ndarray) and obj.ndim == 1 and obj.size <= MAX_LIST and obj.dtype.kind in "biuf":
        items = [(str(i), v) for i, v in enumerate(obj)]       # a short vector (one number per seed) like a list
    elif isinstance(obj, np.ndarray) and obj.ndim == 0:
        return flatten(obj.item(), prefix, values, left_out)
    else:
        try:
            if prefix in values:
                raise ResultsError(f"the key {prefix!r} appears twice in the results")
            values[prefix] = scalar(obj)
        except TypeError:
            shape = getattr(obj, "shape", None)
            left_out[prefix] = (f"array {tuple(shape)}" if shape is not None else
                                f"list of {len(obj)}" if isinstance(obj, (list, tuple)) else type(obj).__name__)
        return values, left_out
    for k, v in items:
        if k in RECORDS:                            # per-iteration training logs: thousands of numbers, quote summaries
            left_out[f"{prefix}.{k}" if prefix else k] = "per-iteration records"
            continue
        if "-->" in k or "\n" in k or k != k.strip():
            raise ResultsError(f"the key {k!r} under {prefix!r} cannot be quoted (no '-->', newline or edge spaces)")
        flatten(v, f"{prefix}.{k}" if prefix else k, values, left_out)
    return values, left_out


def verdict_record(v) -> dict:
    """One verdict object (a dataclass, a named tuple, a dict or any object with attributes) as JSON."""
    d = (dataclasses.asdict(v) if dataclasses.is_dataclass(v) else dict(v) if isinstance(v, dict)
         else v._asdict() if hasattr(v, "_asdict") else dict(vars(v)))
    return json.loads(json.dumps(d, default=lambda x: x.tolist() if hasattr(x, "tolist") else str(x)))


# ---------------------------------------------------------------- one run (in a subprocess)

def machine() -> dict:
    from minippo import kernels
    from minippo.blas import blas_core_name
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "blas_kernel": blas_core_name(),
            "numba": kernels.enabled() and os.environ.get("NUMBA_DISABLE_JIT", "0") in ("", "0"),
            "python": platform.python_version(), "numpy": np.__version__}


def matmul_peak() -> tuple[float, float]:
    """``(GFLOP/s, load average)``: the float32 matmul peak as ``minippo bench --only matmul`` measures it, and
    the machine's 1-minute load average then (on a shared machine the peak reads low when the load is high)."""
    from minippo.bench.matmul import peak_gflops
    return round(peak_gflops(), 1), round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def run_main(seed: int) -> dict:
    """``minippo rlhf`` at its default size into a temporary folder: its summary and its configs."""
    from minippo.rlhf.run.pipeline import run_pipeline, stage_configs
    with tempfile.TemporaryDirectory() as folder:
        summary = run_pipeline(Path(folder) / "run", seed=seed, progress=False, log=lambda *a: None)
    sft, rm, ppo = stage_configs(False, seed)
    summary = {k: v for k, v in summary.items() if k not in ("out", "figure")}     # temporary paths
    ppo_cfg = dict(ppo.to_dict(), num_minibatches=ppo.num_minibatches)              # as the log prints it
    return dict(summary, config={"sft": sft.to_dict(), "rm": rm.to_dict(), "ppo": ppo_cfg})


def run_rlvr_methods(seed: int) -> dict:
    """``minippo rlvr --method M --seed seed`` for every M of :data:`RLVR_METHODS`, with one ``--out``, a temporary
    folder: the command's own function (:func:`minippo.rlvr.run.run_rlvr`, its default configs), so the first
    method trains the SFT stage and the others reuse it, as the command does. Then one more GRPO run from that
    SFT stage at lr :data:`RLVR_HIGH_LR` (``grpo_high_lr``: why the critic-free family trains at 1e-4).

    Per method: pass@1, 4, 16, 64 after RL (``pass1`` ...), the paired change of pass@1 over the held-out problems
    and its standard error, the mean lengths of the right and wrong answers, the well-formed share, and the CPU
    and wall seconds of its RL stage plus evaluation (``cpu_s``, ``wall_s``); ``sft``: the same numbers of the SFT
    policy (one evaluation: every method samples the one SFT model with the same seed and temperature; a
    difference is an error) and the CPU seconds of the SFT stage; the configs."""
    from minippo.rlvr.evaluate import KS
    from minippo.rlvr.run import run_rlvr, stage_configs
    from minippo.rlvr.trainer import rlvr_grpo_config

    def scores(ev: dict) -> dict:
        return dict({f"pass{k}": ev[f"pass@{k}"] for k in KS}, length_right=ev["length_right"],
                    length_wrong=ev["length_wrong"], formed=ev["formed"], all_right=ev["all_right"],
                    all_wrong=ev["all_wrong"])

    out = {"teacher_accuracy": None, "sft": None}
    sft_cfg, _, eval_cfg = stage_configs(False, seed)
    config = {"sft": sft_cfg.to_dict(), "eval": eval_cfg}
    quiet = lambda *a: None                                                             # noqa: E731
    with tempfile.TemporaryDirectory() as folder:
        runs = [(m, Path(folder) / "run", m, None) for m in RLVR_METHODS]
        runs.append(("grpo_high_lr", Path(folder) / "high_lr", "grpo", rlvr_grpo_config(seed=seed, lr=RLVR_HIGH_LR)))
        for name, where, method, rl_cfg in runs:
            if name == "grpo_high_lr":                   # its own folder (the grpo stage is taken), the same SFT stage
                shutil.copytree(Path(folder) / "run" / "sft", where / "sft",
                                ignore=shutil.ignore_patterns(".minippo.lock"))
            s = run_rlvr(where, seed=seed, method=method, progress=False, log=quiet, rl_cfg=rl_cfg)
            ev, cpu, wall = s["eval"], s["cpu_seconds"], s["seconds"]
            if out["sft"] is None:
                out["teacher_accuracy"] = s["teacher_accuracy"]
                out["sft"] = dict(scores(ev["sft"]), cpu_s=cpu["sft"], wall_s=wall["sft"])
            elif scores(ev["sft"]) != {k: v for k, v in out["sft"].items() if not is_measured(k)}:
                raise ResultsError(f"rlvr seed {seed}: the SFT policy's evaluation differs under --method {method}")
            out[name] = dict(scores(ev["rl"]), pass1_change=ev["pass@1_change"], pass1_change_se=ev["pass@1_change_se"],
                             cpu_s=cpu["rl"] + cpu["eval"], wall_s=wall["rl"] + wall["eval"])
            config[name] = (rl_cfg or stage_configs(False, seed, method)[1]).to_dict()
    return dict(out, config=config)


def rlvr_across_runs(runs: list[dict]) -> dict:
    """The ``rlvr`` job's numbers over its runs (one per seed, under the reference kernel): each run's values as
    ``seed.<S>.<key>`` (configs aside) with its matmul GFLOP/s and load average, and ``across.<key>``: in how many
    of the method x seed runs RL raised pass@1 (above 0; by more than 2 standard errors), passed the teacher,
    lowered pass@64 (and the largest fall: its method, seed, before and after), the range of the paired change of
    PPO and of the critic-free family and of its standard error, on how many seeds PPO raised pass@1 the most and
    its lead over the best critic-free method (smallest and largest over the seeds), and on how many seeds GRPO at
    lr :data:`RLVR_HIGH_LR` ended below GRPO at its own lr."""
    out = {}
    for r in runs:
        for k, v in r["values"].items():
            if not k.startswith("config."):
                out[f"seed.{r['seed']}.{k}"] = v
        out[f"seed.{r['seed']}.matmul_gflops"] = r["machine"]["matmul_gflops"]
        out[f"seed.{r['seed']}.load_average"] = r["machine"]["load_average"]
    rows = [(r["seed"], m, r["values"]) for r in runs for m in RLVR_METHODS]       # one per method x seed
    falls = [(v["sft.pass64"] - v[f"{m}.pass64"], s, m, v) for s, m, v in rows]
    drop, seed, method, v = max(falls, key=lambda x: x[0])
    ppo = [v["ppo.pass1_change"] for _, m, v in rows if m == "ppo"]
    group = [v[f"{m}.pass1_change"] for _, m, v in rows if m in RLVR_GROUP]
    # per seed: PPO's change minus the largest change of the critic-free family (> 0: PPO gained the most)
    leads = [r["values"]["ppo.pass1_change"] - max(r["values"][f"{m}.pass1_change"] for m in RLVR_GROUP) for r in runs]
    out.update({f"across.{k}": x for k, x in {
        "runs": len(rows), "seeds": len(runs),
        "pass1_rises_runs": sum(v[f"{m}.pass1_change"] > 0 for _, m, v in rows),
        "pass1_rises_2se_runs": sum(v[f"{m}.pass1_change"] > 2 * v[f"{m}.pass1_change_se"] for _, m, v in rows),
        "pass1_above_teacher_runs": sum(v[f"{m}.pass1"] > v["teacher_accuracy"] for _, m, v in rows),
        "pass1_after_min": min(v[f"{m}.pass1"] for _, m, v in rows),
        "pass1_after_max": max(v[f"{m}.pass1"] for _, m, v in rows),
        "teacher_accuracy_min": min(r["values"]["teacher_accuracy"] for r in runs),
        "teacher_accuracy_max": max(r["values"]["teacher_accuracy"] for r in runs),
        "pass64_falls_runs": sum(d > 0 for d, *_ in falls),
        "pass64_rises_runs": sum(d < 0 for d, *_ in falls),
        "pass64_drop_max": drop, "pass64_drop_max_seed": seed, "pass64_drop_max_method": method,
        "pass64_drop_max_sft": v["sft.pass64"], "pass64_drop_max_rl": v[f"{method}.pass64"],
        "ppo_change_min": min(ppo), "ppo_change_max": max(ppo),
        "group_change_min": min(group), "group_change_max": max(group),
        "change_se_min": min(v[f"{m}.pass1_change_se"] for _, m, v in rows),
        "change_se_max": max(v[f"{m}.pass1_change_se"] for _, m, v in rows),
        "ppo_most_seeds": sum(lead > 0 for lead in leads),
        "ppo_lead_min": min(leads), "ppo_lead_max": max(leads),
        "high_lr_lower_seeds": sum(r["values"]["grpo_high_lr.pass1"] < r["values"]["grpo.pass1"] for r in runs),
    }.items()})
    return out


#: jobs whose file also holds numbers over their runs (module docstring): target -> the function that makes them
ACROSS_RUNS = {RLVR: rlvr_across_runs}


def run_target(target: str, seed: int) -> dict:
    """Run ``target`` once in this process at its size (``lNN-full``: ``run(full=True)``): values, left_out,
    verdicts, time, machine."""
    from minippo.blas import blas_core_name
    print(f"OpenBLAS kernel: {blas_core_name()}", flush=True)
    mod = None if target in JOBS else importlib.import_module(module_of(target))
    peaks = [matmul_peak()]                       # before and after the run: the better of the two is kept
    t, cpu = time.perf_counter(), time.process_time()
    if mod is None:
        results = run_main(seed) if target == MAIN else run_rlvr_methods(seed)
    else:
        results = mod.run(quick=False, seed=seed, **({"full": True} if is_full(target) else {}))
    seconds = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - t}
    peaks.append(matmul_peak())
    values, left_out = flatten(results)
    if hasattr(mod, "derived"):
        extra, extra_left = flatten(mod.derived(results))
        twice = sorted(set(extra) & set(values))
        if twice:
            raise ResultsError(f"{target}: derived() repeats keys of run(): {', '.join(twice)}")
        values.update(extra)
        left_out.update(extra_left)
    verdicts = [verdict_record(v) for v in mod.verdicts(results)] if hasattr(mod, "verdicts") else None
    add_verdict_values(values, left_out, verdicts or [])
    return {"seed": seed, "values": values, "left_out": left_out, "verdicts": verdicts, "time": seconds,
            "machine": dict(machine(), matmul_gflops=max(peaks)[0], load_average=max(peaks)[1])}


def add_verdict_values(values: dict, left_out: dict, verdicts: list[dict]) -> None:
    """Each verdict's outcome and the numbers its rule used, as quotable keys ``verdict.<key>.outcome`` and
    ``verdict.<key>.<number>`` (the words "holds" and the difference +- s.e. the narrative prints beside it)."""
    extra, extra_left = flatten({"verdict": {v["key"]: {"outcome": v["outcome"], **(v.get("numbers") or {})}
                                             for v in verdicts}})
    twice = sorted(set(extra) & set(values))
    if twice:
        raise ResultsError(f"the verdicts' keys repeat keys of run() or derived(): {', '.join(twice)}")
    values.update(extra)
    left_out.update(extra_left)


def tree_env(tree: Path, kernel: str = "default") -> dict:
    """The environment of a run of the checkout ``tree`` (its ``lessons`` and ``minippo`` first on the path)
    with ``OPENBLAS_CORETYPE=kernel`` (``default``: unset, the CPU's own choice)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if kernel != "default":
        env["OPENBLAS_CORETYPE"] = kernel
    return env


def run_in_subprocess(target: str, seed: int, kernel: str, log=print, tree: Path = REPO_ROOT) -> dict:
    """:func:`run_target` in a fresh Python with ``OPENBLAS_CORETYPE=kernel`` (``default``: unset, the CPU's
    own choice), from the checkout ``tree`` (default: this one); checks that OpenBLAS selected that kernel."""
    env = tree_env(tree, kernel)
    with tempfile.TemporaryDirectory() as folder:
        out, log_file = Path(folder) / "run.json", Path(folder) / "run.log"
        with open(log_file, "w") as f:
            proc = subprocess.run([sys.executable, "-m", "lessons.results", "--child", target, str(seed),
                                   str(out)], env=env, stdout=f, stderr=subprocess.STDOUT, cwd=tree)
        text = log_file.read_text(errors="replace")
        if proc.returncode != 0:
            raise ResultsError(f"{target} seed {seed} under OPENBLAS_CORETYPE={kernel} failed "
                               f"(exit {proc.returncode}):\n" + "\n".join(text.splitlines()[-20:]))
        run = json.loads(out.read_text(encoding="utf-8"))
    active = run["machine"]["blas_kernel"]
    if kernel != "default" and (active or "").lower() != kernel.lower():
        raise ResultsError(f"OPENBLAS_CORETYPE={kernel}: OpenBLAS selected {active!r} instead "
                           "(a kernel this OpenBLAS build does not have?)")
    run["kernel"] = active
    log(f"  {target} seed {seed}, OpenBLAS kernel {active}{' (the default)' if kernel == 'default' else ''}: "
        f"{run['time']['cpu']:.1f} s CPU, {run['time']['wall']:.1f} s wall, "
        f"matmul {run['machine']['matmul_gflops']:.0f} GFLOP/s")
    return run


# ---------------------------------------------------------------- all the runs of one target -> its file

def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return a == b and type(a) is type(b)


def differences(ref: dict, other: dict, equal=same) -> list[str]:
    """The keys (measurements of the run aside) whose values differ between two runs' ``values``: not ``equal``
    (default :func:`same`, to float64 rounding; ``lessons.restamp`` asks for the same bits)."""
    keys = sorted((set(ref) | set(other)) - {k for k in set(ref) | set(other) if is_measured(k)})
    return [f"{k}: {ref.get(k, '(missing)')!r} vs {other.get(k, '(missing)')!r}" for k in keys
            if k not in ref or k not in other or not equal(ref[k], other[k])]


def numbers(xs: list) -> list:
    """The numbers among ``xs`` (no booleans, no NaN): what a range spans; the others count as missing."""
    return [x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)
            and not (isinstance(x, float) and math.isnan(x))]


def ranges(runs: list[dict]) -> dict:
    """Per key of the reference run whose value is not the same in every run: the min and max of its numeric
    values over ``runs`` (``missing``: runs without a number there), or the distinct values of a non-numeric
    key."""
    out = {}
    for key, ref in runs[0]["values"].items():
        seen = [r["values"].get(key) for r in runs]
        if all(x == ref or (isinstance(x, float) and isinstance(ref, float) and math.isnan(x) and math.isnan(ref))
               for x in seen):
            continue
        nums = numbers(seen)
        if nums and (ref is None or isinstance(ref, (int, float)) and not isinstance(ref, bool)):
            out[key] = {"min": min(nums), "max": max(nums), "missing": len(seen) - len(nums)}
        else:
            out[key] = {"values": sorted({json.dumps(x) for x in seen})}
    return out


def generate(target: str, seeds=DEFAULT_SEEDS, kernels=DEFAULT_KERNELS, directory: Path | None = None,
             log=print, jobs: int = 1) -> Path:
    """Run ``target`` under every kernel (and, when it depends on the CPU, every seed) and write its file
    (``jobs``: the seeds of one kernel run as that many subprocesses at once; each run's CPU seconds are its
    own, its wall seconds longer when the runs share the cores)."""
    seeds, kernels = list(seeds), list(kernels)
    if 0 not in seeds:
        raise ResultsError(f"--seeds {seeds}: seed 0 is the reference run whose numbers the docs quote")
    dependent = lesson_of(target) in CPU_DEPENDENT
    seeds = [0] + [s for s in seeds if s != 0] if dependent else [0]
    log(f"{target}: {len(kernels)} OpenBLAS kernel(s) x {len(seeds)} seed(s)"
        + (f" (depends on the CPU: {CPU_DEPENDENT[lesson_of(target)]})" if dependent else " (seed 0 only)"))
    source = current_hash(target)
    runs, done = [], set()
    for kernel in kernels:
        if kernel.lower() in done:
            log(f"  {kernel}: already run (the default kernel)")
            continue
        if jobs > 1:                  # the seeds of one kernel side by side: the same CPU seconds, sooner
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(min(jobs, len(seeds))) as pool:
                runs += list(pool.map(lambda seed: run_in_subprocess(target, seed, kernel, log), seeds))
        else:
            runs += [run_in_subprocess(target, seed, kernel, log) for seed in seeds]
        done |= {kernel.lower(), runs[-1]["kernel"].lower()}
    ref = runs[0]
    for run in runs[1:]:
        diff = differences(ref["values"], run["values"]) if run["seed"] == 0 else []
        if diff:
            log(f"  note: {len(diff)} value(s) differ between OpenBLAS kernels {ref['kernel']} and {run['kernel']} "
                f"beyond float64 rounding (quoted plainly only where every run prints the same digits): "
                + "; ".join(diff[:5]) + (" ..." if len(diff) > 5 else ""))
    mod = None if target in JOBS else importlib.import_module(module_of(target))
    data = {
        "target": target, "module": target if mod is None else mod.__name__,
        "size": "full" if is_full(target) else "default", "seed": 0, "command": regenerate_command(target),
        "source_sha256": source, "date": datetime.date.today().isoformat(),
        # the reference run's machine, with the matmul peak measured around that run (the best of its
        # readings before and after, with the load average then): the GFLOP/s beside ``time`` is that run's
        "machine": dict(ref["machine"]),
        "time": ref["time"],
        "cpu_dependent": dependent, "why_cpu_dependent": CPU_DEPENDENT.get(lesson_of(target)),
        "runs": [run_record(r) for r in runs],
        "verdicts": ref["verdicts"],
        "values": ref["values"],
        "ranges": ranges(runs),
        "left_out": ref["left_out"],
    }
    if target in ACROSS_RUNS:                         # one row per seed: each run's values, and counts over them
        data["values"] = dict(ref["values"], **ACROSS_RUNS[target]([r for r in runs if r["kernel"] == ref["kernel"]]))
    path = write(target, data, directory)
    log(f"  -> {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}")
    return path


def write(target: str, data: dict, directory: Path | None = None) -> Path:
    """Write a results file whole, atomically (:func:`minippo.io.atomic_write_text`): a failed write leaves the
    previous file as it was."""
    from minippo.io import atomic_write_text
    path = results_path(target, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return path


def merged_ranges(data: dict, new_runs: list[dict]) -> dict:
    """The file's ``ranges`` widened to cover ``new_runs`` too (a key absent from ``ranges`` had the reference
    value in every earlier run)."""
    old = data["ranges"]
    merged = {}
    for key, ref in data["values"].items():
        if data.get("target") in ACROSS_RUNS and key.startswith(("seed.", "across.")):
            continue                    # one run's number, or a count over the runs: a new run does not widen it
        seen = [r["values"].get(key) for r in new_runs]
        spread = old.get(key)
        if spread is None:
            both = ranges([{"values": {key: ref}}] + [{"values": {key: x}} for x in seen]).get(key)
            if both is not None:
                merged[key] = both
            continue
        if "values" in spread:
            merged[key] = {"values": sorted(set(spread["values"]) | {json.dumps(x) for x in seen})}
            continue
        nums = numbers(seen)
        merged[key] = {"min": min([spread["min"], *nums]), "max": max([spread["max"], *nums]),
                       "missing": spread["missing"] + len(seen) - len(nums)}
    return merged


def run_record(r: dict) -> dict:
    """One run as its file lists it (its values are in ``values``, the reference run's, and ``ranges``)."""
    return {"cpu": r["machine"]["cpu"], "kernel": r["kernel"], "seed": r["seed"], "cpu_s": round(r["time"]["cpu"], 2),
            "wall_s": round(r["time"]["wall"], 2), "matmul_gflops": r["machine"]["matmul_gflops"],
            "load_average": r["machine"]["load_average"],
            "verdict_outcomes": None if r["verdicts"] is None else [v.get("outcome") for v in r["verdicts"]]}


def run_cpu(data: dict, run: dict) -> str:
    """The CPU of a listed run (files made before runs named theirs: the reference machine's)."""
    return run.get("cpu", data["machine"]["cpu"])


def add_machine(target: str, seeds=(0,), kernels=("default",), directory: Path | None = None, log=print) -> Path:
    """Run a CPU-dependent ``target`` on this machine and add the runs to its file: the reference run and its
    values stay; ``runs`` lists the new ones with their CPU, and ``ranges`` widen to cover them. Another CPU
    rounds float32 training differently (README, "What is bitwise"), so a rerun there lands anywhere in the seed
    noise; once its runs are in the file, the quoted ranges hold for it too."""
    if lesson_of(target) not in CPU_DEPENDENT:
        raise ResultsError(f"{target} does not depend on the CPU: its numbers are the same on every machine "
                           f"(regenerate it with `{regenerate_command(target)}`)")
    problem = staleness(target, directory)
    if problem:
        raise ResultsError(problem)
    data = load(target, directory)
    from minippo.blas import blas_core_name
    here, own = cpu_model(), (blas_core_name() if "OPENBLAS_CORETYPE" not in os.environ else None)
    for kernel in kernels:
        name = own if kernel == "default" else kernel
        for seed in seeds:
            if any(run_cpu(data, r) == here and r["kernel"].lower() == (name or "").lower() and r["seed"] == seed
                   for r in data["runs"]):
                raise ResultsError(f"{results_path(target, directory).name} already has seed {seed} on {here} "
                                   f"with OpenBLAS kernel {name}: nothing added (nothing is replaced)")
    runs = [run_in_subprocess(target, seed, kernel, log) for kernel in kernels for seed in seeds]
    data["ranges"] = merged_ranges(data, runs)
    data["runs"] = [dict(r, cpu=run_cpu(data, r)) for r in data["runs"]] + [run_record(r) for r in runs]
    path = write(target, data, directory)
    log(f"  -> {path.name}: {len(runs)} run(s) on {here} added")
    return path


# ---------------------------------------------------------------- the command

def main(argv: list[str], resolve=None) -> int:
    """``python -m lessons results WHICH ... [--seeds 0 1] [--kernels default Haswell Sandybridge]``."""
    parser = argparse.ArgumentParser(prog="python -m lessons results", description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="+", help="lesson numbers or slugs, 'main' (minippo rlhf), 'rlvr' "
                        "(minippo rlvr, every method), 'all' (every lesson and job), 'stale' (those missing or stale)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="run the seeds of one kernel as N subprocesses at once (default 1; the CPU seconds "
                             "recorded are each run's own)")
    parser.add_argument("--full", action="store_true",
                        help="the lessons' --full results (lNN_<slug>_full.json, lessons in FULL): a lesson named "
                             "means its --full file; 'all' and 'stale' add the --full files to the others")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS),
                        help="seeds of the CPU-dependent targets (0 is the reference; default 0 1)")
    parser.add_argument("--kernels", nargs="+", default=list(DEFAULT_KERNELS),
                        help="OpenBLAS kernels, each run under OPENBLAS_CORETYPE, in the order given: the "
                             "first one's seed-0 run is the reference (default: default Haswell Sandybridge; "
                             "'default' = the CPU's own choice)")
    parser.add_argument("--add-machine", action="store_true",
                        help="keep the file and add this machine's runs (default: seed 0 under its own kernel) to "
                             "its runs and ranges: for a CPU-dependent lesson on a CPU its file does not list yet")
    args = parser.parse_args(argv)
    try:
        if args.add_machine:
            seeds = args.seeds if "--seeds" in argv else [0]
            kernels = args.kernels if "--kernels" in argv else ["default"]
            targets = ([t for t in all_targets(args.full)
                        if lesson_of(t) in CPU_DEPENDENT and results_path(t).is_file()]
                       if "all" in args.which else [name_target(w, args.full, resolve) for w in args.which])
            for target in targets:
                add_machine(target, seeds, kernels)
            return 0
        if "stale" in args.which:
            targets = [t for t in all_targets(args.full) if staleness(t) is not None]
        elif "all" in args.which:
            targets = all_targets(args.full)
        else:
            targets = [name_target(w, args.full, resolve) for w in args.which]
    except ResultsError as exc:          # a target the command line names wrongly, or refused: 2
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t0 = time.process_time()
    for target in targets:
        try:
            generate(target, args.seeds, args.kernels, jobs=args.jobs)
        except ResultsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(f"{len(targets)} results file(s) written ({time.process_time() - t0:.1f} s CPU in this process; "
          "the runs' own CPU seconds are above)")
    return 0


def name_target(word: str, full: bool, resolve=None) -> str:
    """The target a word of the command line names: a job (``main``, ``rlvr``); ``l17-full`` as written; a lesson
    number or slug (``resolve``: to its module), with ``full`` its ``--full`` target (a ``ResultsError`` if it has
    none)."""
    if word in JOBS:
        if full:
            raise ResultsError(f"{word} has no --full results (a job's file is its default size)")
        return word
    if is_full(word):
        target = word
    else:
        target = target_of(resolve(word)) if resolve else word
        target = full_target(target) if full else target
    module_of(target)                     # an unknown lesson, or one without --full results: named, refused
    return target


def child(argv: list[str]) -> int:
    """``python -m lessons.results --child TARGET SEED OUT``: one run, its record written to OUT as JSON."""
    target, seed, out = argv[0], int(argv[1]), Path(argv[2])
    out.write_text(json.dumps(run_target(target, seed), indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
