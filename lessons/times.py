"""``python -m lessons times [N ...] [--repeat K] [--save]``: how long each lesson, the shared stages and the
main job take, measured in one session on this machine.

Each lesson's default run is a fresh ``python -m lessons N`` process, as a student starts it (its imports and its
numba cache load included; the figure goes to a temporary folder). Its CPU seconds are the process's user +
system time (``resource.getrusage(RUSAGE_CHILDREN)``: every thread), its wall seconds the clock around it.

The shared stages. The first RLHF lesson of a fresh clone builds the SFT policy and reward model it shares with
the others into ``runs/cache/``, and lesson 23 the verifier task's SFT model. A lesson whose run creates a folder
under ``runs/cache/`` is run a second time: its first run is the row "N, first run (builds runs/cache/NAME)", the
second its own row, with the cache warm. The row "runs/cache/NAME alone" is each first run minus the warm runs'
median: what building the stages costs. Last, ``minippo rlhf`` at its default size runs into a temporary folder.

``--repeat K`` runs every row K times, one process after the other: a row's numbers are then the median of its K
runs and, beside it, their lowest and highest (on a shared machine the same run's CPU seconds differ by a tenth or
more from one run to the next). A first run is repeated by deleting the cache folders that this same call's first
run created (never one it found) and running the lesson again.

The float32 matmul GFLOP/s (``minippo bench --only matmul``) and the load average are read before and after.
CPU seconds scale about inversely with the GFLOP/s: the column "at 140" is ``CPU s x GFLOP/s / 140``, the CPU
seconds expected where the matmul reads 140 GFLOP/s (the laptop the course is timed for). The last column compares
it with the course's targets there (:data:`TARGETS`): "met" when every run's scaled seconds are within the target,
"missed" when none is, "not shown" when the runs fall on both sides. ``--save`` (with ``--repeat`` 3 or more) writes
``docs/lesson_times.json``, which the README's table is quoted from (``python -m lessons quote``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lessons._common import REPO_ROOT
from lessons.results import machine, matmul_peak
from minippo.io import atomic_write_text

TIMES_FILE = REPO_ROOT / "docs" / "lesson_times.json"
CACHE_DIR = REPO_ROOT / "runs" / "cache"
#: the GFLOP/s of the laptop the course's times are scaled to (issue: "every lesson within a minute")
REFERENCE_GFLOPS = 140.0
#: CPU seconds at REFERENCE_GFLOPS that a row should stay within (issue "fast on a slow laptop"): each lesson's
#: default run with the shared stages cached, building those stages, and the main job
TARGETS = {"lesson": 45.0, "stages": 60.0, "main": 60.0}


def children_cpu() -> float:
    """User + system CPU seconds of every finished child process so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(command: list[str], log_path: Path) -> dict:
    """Run ``command`` in the repository (output to ``log_path``); its CPU and wall seconds. A failed command
    raises ``RuntimeError`` naming it and its log."""
    cpu, wall = children_cpu(), time.perf_counter()
    with open(log_path, "w") as f:
        proc = subprocess.run(command, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT)
    wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
    if proc.returncode:
        raise RuntimeError(f"`{' '.join(command)}` exited with status {proc.returncode}; its output: {log_path}")
    return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}


def cache_folders() -> set[str]:
    return {p.name for p in CACHE_DIR.iterdir()} if CACHE_DIR.is_dir() else set()


def reading() -> dict:
    """The matmul GFLOP/s and the 1-minute load average now."""
    gflops, load = matmul_peak()
    return {"matmul_gflops": gflops, "load_average": load}


def summary(what: str, kind: str, command: str, runs: list[dict]) -> dict:
    """A row: what it times (``kind``: a key of :data:`TARGETS`, or ``"first run"``: a lesson plus a build,
    judged against no target), the median CPU and wall seconds of ``runs`` and the runs themselves."""
    return {"what": what, "kind": kind, "command": command,
            "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2),
            "wall_s": round(statistics.median(r["wall_s"] for r in runs), 2), "runs": runs}


def measure(lessons: list[str], main_job: bool, repeat: int = 1, log=print) -> dict:
    """Every row (module docstring), each run ``repeat`` times, the machine and the readings around them."""
    before, rows = reading(), []
    with tempfile.TemporaryDirectory(prefix="minippo-times-") as tmp:
        tmp = Path(tmp)
        for name in lessons:
            number = name.split(".")[1][1:3]
            command = [sys.executable, "-m", "lessons", number, "--out", str(tmp / "figures")]
            found = cache_folders()
            runs = [timed(command, tmp / f"{number}.log")]
            built = sorted(cache_folders() - found)
            if built:                        # this run built a shared stage: build it again, then time it warm
                for _ in range(repeat - 1):
                    for folder in built:     # made by this call's first run, so ours to delete
                        shutil.rmtree(CACHE_DIR / folder)
                    runs.append(timed(command, tmp / f"{number}.log"))
                    if sorted(cache_folders() - found) != built:
                        raise RuntimeError(f"`{' '.join(command)}` built {sorted(cache_folders() - found)} on a "
                                           f"repeated first run, {built} on the first")
                first = summary(f"{number}, first run (builds runs/cache/{', '.join(built)})", "first run",
                                f"python -m lessons {number}", runs)
                rows.append(first)
                log(f"{first['what']}: {first['cpu_s']:.1f} s CPU, {first['wall_s']:.1f} s wall")
                runs = []
            runs += [timed(command, tmp / f"{number}-warm.log") for _ in range(repeat - len(runs))]
            warm = summary(number, "lesson", f"python -m lessons {number}", runs)
            rows.append(warm)
            log(f"{number}: {warm['cpu_s']:.1f} s CPU, {warm['wall_s']:.1f} s wall")
            if built:                        # the build alone: each first run minus the warm runs' median
                rows.append(summary(f"runs/cache/{', '.join(built)} alone (first run - warm run)", "stages",
                                    f"python -m lessons {number}",
                                    [{k: round(r[k] - warm[k], 2) for k in ("cpu_s", "wall_s")}
                                     for r in first["runs"]]))
        if main_job:
            runs = [timed([sys.executable, "-m", "minippo", "rlhf", "--no-progress", "--out", str(tmp / f"main{i}")],
                          tmp / "main.log") for i in range(repeat)]
            rows.append(summary("minippo rlhf", "main", "minippo rlhf", runs))
            log(f"minippo rlhf: {rows[-1]['cpu_s']:.1f} s CPU, {rows[-1]['wall_s']:.1f} s wall")
    after = reading()
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    return {"date": datetime.date.today().isoformat(), "commit": commit, "machine": machine(), "repeat": repeat,
            "before": before, "after": after, "rows": rows}


def peak(d: dict) -> float:
    """The higher of the two matmul readings: the machine's speed when the load let it show."""
    return max(d["before"]["matmul_gflops"], d["after"]["matmul_gflops"])


def target(row: dict) -> float | None:
    """The row's target in CPU seconds at REFERENCE_GFLOPS (:data:`TARGETS`, by the row's ``kind``); None for
    a first run, which is a lesson plus a build."""
    kind = row.get("kind")
    if kind == "first run":
        return None
    if kind not in TARGETS:
        raise ValueError(f"row {row['what']!r}: `kind` must be one of {sorted(TARGETS)} or 'first run', "
                         f"got {kind!r}")
    return TARGETS[kind]


def spread(values: list[float], median: float, fmt: str) -> str:
    """``median`` alone for one run; ``median (lowest-highest)`` for several."""
    if len(values) == 1:
        return format(median, fmt)
    return f"{median:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def table(d: dict) -> str:
    """The markdown table of ``d``'s rows (what the README quotes). A row without ``runs`` (a file saved
    before ``--repeat``) is one run."""
    g = peak(d) / REFERENCE_GFLOPS
    lines = [f"| run | CPU s | wall s | CPU s at {REFERENCE_GFLOPS:.0f} GFLOP/s | target at "
             f"{REFERENCE_GFLOPS:.0f} |", "|---|---|---|---|---|"]
    for r in d["rows"]:
        runs = r.get("runs") or [r]
        scaled = [x["cpu_s"] * g for x in runs]
        cap = target(r)
        if cap is None:
            verdict = ""
        elif max(scaled) <= cap:
            verdict = f"<= {cap:.0f}: met"
        elif min(scaled) > cap:
            verdict = f"<= {cap:.0f}: missed"
        else:
            verdict = f"<= {cap:.0f}: not shown (runs on both sides)"
        lines.append(f"| {r['what']} | {spread([x['cpu_s'] for x in runs], r['cpu_s'], '.1f')} | "
                     f"{spread([x['wall_s'] for x in runs], r['wall_s'], '.1f')} | "
                     f"{spread(scaled, r['cpu_s'] * g, '.1f')} | {verdict} |")
    return "\n".join(lines) + "\n"


def caption(d: dict) -> str:
    """One line: where and when the table was measured, and how many runs each row is."""
    b, a = d["before"], d["after"]
    k = d.get("repeat", 1)
    runs = (f"; each row is the median of {k} runs, their lowest and highest in brackets" if k > 1 else
            "; each row is one run")
    return (f"Measured {d['date']} (commit {d['commit']}) on a {d['machine']['cores']}-core {d['machine']['cpu']} "
            f"(OpenBLAS {d['machine']['blas_kernel']} kernel): matmul {b['matmul_gflops']:.0f} GFLOP/s before and "
            f"{a['matmul_gflops']:.0f} after (load average {b['load_average']:.1f} and {a['load_average']:.1f}); "
            f"the last columns scale by {peak(d):.0f} / {REFERENCE_GFLOPS:.0f}{runs}.")


def main(argv: list[str], names: list[str], resolve) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons times", description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="*", help="lesson numbers or slugs (default: every lesson)")
    parser.add_argument("--no-main", action="store_true", help="skip `minippo rlhf`")
    parser.add_argument("--repeat", type=int, default=1, metavar="K",
                        help="run every row K times; quote the median, the lowest and the highest (default 1)")
    parser.add_argument("--save", action="store_true", help=f"write {TIMES_FILE.relative_to(REPO_ROOT)}")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be an integer >= 1, got {args.repeat}")
    chosen = [resolve(w) for w in args.which] if args.which else names
    if args.save and (args.which or args.no_main):
        parser.error("--save: the file holds every lesson and the main job; run without lessons and --no-main")
    if args.save and args.repeat < 3:
        parser.error(f"--save: the file quotes each row's median and spread; give --repeat 3 or more, got "
                     f"{args.repeat}")
    try:
        d = measure(chosen, not args.no_main, args.repeat)
    except RuntimeError as exc:
        print(f"python -m lessons times: {exc}", file=sys.stderr)
        return 1
    print("\n" + caption(d) + "\n\n" + table(d), end="")
    if args.save:
        atomic_write_text(TIMES_FILE, json.dumps(d, indent=1) + "\n")
        print(f"written: {TIMES_FILE.relative_to(REPO_ROOT)}")
    return 0
