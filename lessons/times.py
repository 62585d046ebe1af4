"""``python -m lessons times [N ...] [--save]``: how long each lesson, the shared stages and the main job take,
measured in one session on this machine.

Each lesson's default run is a fresh ``python -m lessons N`` process, as a student starts it (its imports and its
numba cache load included; the figure goes to a temporary folder). Its CPU seconds are the process's user +
system time (``resource.getrusage(RUSAGE_CHILDREN)``: every thread), its wall seconds the clock around it.

The shared stages. The first RLHF lesson of a fresh clone builds the SFT policy and reward model it shares with
the others into ``runs/cache/``, and lesson 23 the verifier task's SFT model. A lesson whose run creates a folder
under ``runs/cache/`` is run a second time: its first run is the row "N, first run (builds runs/cache/NAME)", the
second its own row, with the cache warm. Last, ``minippo rlhf`` at its default size runs into a temporary folder.

The float32 matmul GFLOP/s (``minippo bench --only matmul``) and the load average are read before and after.
CPU seconds scale about inversely with the GFLOP/s: the column "at 140" is ``CPU s x GFLOP/s / 140``, the CPU
seconds expected where the matmul reads 140 GFLOP/s (the laptop the course is timed for). ``--save`` writes
``docs/lesson_times.json``, which the README's table is quoted from (``python -m lessons quote``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import resource
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


def measure(lessons: list[str], main_job: bool, log=print) -> dict:
    """Every row (module docstring), the machine and the readings around them."""
    before, rows = reading(), []
    with tempfile.TemporaryDirectory(prefix="minippo-times-") as tmp:
        tmp = Path(tmp)
        for name in lessons:
            number = name.split(".")[1][1:3]
            command = [sys.executable, "-m", "lessons", number, "--out", str(tmp / "figures")]
            built = cache_folders()
            row = timed(command, tmp / f"{number}.log")
            built = sorted(cache_folders() - built)
            if built:                        # this run built a shared stage: time the lesson again, warm
                rows.append({"what": f"{number}, first run (builds runs/cache/{', '.join(built)})",
                             "command": f"python -m lessons {number}", **row})
                log(f"{rows[-1]['what']}: {row['cpu_s']:.1f} s CPU, {row['wall_s']:.1f} s wall")
                row = timed(command, tmp / f"{number}-warm.log")
            rows.append({"what": number, "command": f"python -m lessons {number}", **row})
            log(f"{number}: {row['cpu_s']:.1f} s CPU, {row['wall_s']:.1f} s wall")
        if main_job:
            command = [sys.executable, "-m", "minippo", "rlhf", "--no-progress", "--out", str(tmp / "main")]
            rows.append({"what": "minippo rlhf", "command": "minippo rlhf", **timed(command, tmp / "main.log")})
            log(f"minippo rlhf: {rows[-1]['cpu_s']:.1f} s CPU, {rows[-1]['wall_s']:.1f} s wall")
    after = reading()
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    return {"date": datetime.date.today().isoformat(), "commit": commit, "machine": machine(),
            "before": before, "after": after, "rows": rows}


def peak(d: dict) -> float:
    """The higher of the two matmul readings: the machine's speed when the load let it show."""
    return max(d["before"]["matmul_gflops"], d["after"]["matmul_gflops"])


def table(d: dict) -> str:
    """The markdown table of ``d``'s rows (what the README quotes)."""
    g = peak(d)
    lines = [f"| run | CPU s | wall s | CPU s at {REFERENCE_GFLOPS:.0f} GFLOP/s |", "|---|---|---|---|"]
    for r in d["rows"]:
        lines.append(f"| {r['what']} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
                     f"{r['cpu_s'] * g / REFERENCE_GFLOPS:.0f} |")
    return "\n".join(lines) + "\n"


def caption(d: dict) -> str:
    """One line: where and when the table was measured."""
    b, a = d["before"], d["after"]
    return (f"Measured {d['date']} (commit {d['commit']}) on a {d['machine']['cores']}-core {d['machine']['cpu']} "
            f"(OpenBLAS {d['machine']['blas_kernel']} kernel): matmul {b['matmul_gflops']:.0f} GFLOP/s before and "
            f"{a['matmul_gflops']:.0f} after (load average {b['load_average']:.1f} and {a['load_average']:.1f}); "
            f"the last column scales by {peak(d):.0f} / {REFERENCE_GFLOPS:.0f}.")


def main(argv: list[str], names: list[str], resolve) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons times", description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="*", help="lesson numbers or slugs (default: every lesson)")
    parser.add_argument("--no-main", action="store_true", help="skip `minippo rlhf`")
    parser.add_argument("--save", action="store_true", help=f"write {TIMES_FILE.relative_to(REPO_ROOT)}")
    args = parser.parse_args(argv)
    chosen = [resolve(w) for w in args.which] if args.which else names
    if args.save and (args.which or args.no_main):
        parser.error("--save: the file holds every lesson and the main job; run without lessons and --no-main")
    try:
        d = measure(chosen, not args.no_main)
    except RuntimeError as exc:
        print(f"python -m lessons times: {exc}", file=sys.stderr)
        return 1
    print("\n" + caption(d) + "\n\n" + table(d), end="")
    if args.save:
        atomic_write_text(TIMES_FILE, json.dumps(d, indent=1) + "\n")
        print(f"written: {TIMES_FILE.relative_to(REPO_ROOT)}")
    return 0
