"""``minippo bench``: performance measured side by side, in one run, printed as ratios.

Benchmarks are programs, not tests: the machines that run the tests are shared and noisy, so no
test asserts a duration. Each section measures a fast path against its reference *in the same run*
and prints the ratio next to the target the project set for it, e.g.::

    == gae (B=512, T=256, float32) ==
    numba kernel             1.9 ms
    vectorized NumPy        31.0 ms     16.3x   (target >= 8x)

Sections live in their own modules and are imported only when run:
``minippo bench --only gae clip`` runs a subset; ``--quick`` uses fewer repetitions.
``minippo bench --only profile`` (not in the default run: it trains the whole main job) prints where
the time of ``minippo rlhf`` goes (:mod:`minippo.bench.profile`; ``--quick``: at CI size).
``--save FILE`` also writes the run as JSON: the command, the date, the machine, every line printed and
every target (the README's "Measured numbers" quote ``docs/bench.json``, written by ``minippo bench
--save docs/bench.json`` in a venv with the hf extra: ``python -m lessons quote``).
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import sys
import time
from pathlib import Path

from minippo.bench.report import Report
from minippo.io import atomic_write_text

# section name -> module defining ``bench(report: Report, quick: bool) -> None``
SECTIONS: dict[str, str] = {
    "matmul": "minippo.bench.matmul",      # this machine's float32 matmul peak (the yardstick)
    "gpt": "minippo.bench.gpt",            # TinyGPT forward+backward tokens/s and % of matmul peak
    "kvcache": "minippo.bench.kvcache",    # KV-cache decoding vs recomputing the prefix
    "gae": "minippo.bench.rl",             # GAE kernel vs NumPy reference vs pure Python
    "clip": "minippo.bench.rl_clip",       # clipped-surrogate kernel vs NumPy expression
    "import": "minippo.bench.startup",     # import + first call with a warm numba cache
    "cartpole": "minippo.bench.cartpole",  # classic PPO: steps to return 475, wall time
    "profile": "minippo.bench.profile",    # minippo rlhf: wall and CPU seconds by stage and part
    "trl": "minippo.bench.trl",            # one GRPO iteration of TRL vs minippo's (needs the hf extra)
}
#: sections that run only when named with --only (the profile runs the whole main job: minutes)
ON_REQUEST = ("profile",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), metavar="SECTION",
                        help=f"run only these sections ({', '.join(SECTIONS)})")
    parser.add_argument("--skip", nargs="+", choices=list(SECTIONS), default=[], metavar="SECTION",
                        help="skip these sections (cartpole takes minutes; profile runs only with --only)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (noisier numbers)")
    parser.add_argument("--save", default=None, metavar="FILE",
                        help="also write the run (command, date, machine, every line, the targets) as JSON")


def command_line(args: argparse.Namespace) -> str:
    """The ``minippo bench`` command that ``args`` come from (what ``--save`` records)."""
    words = ["minippo bench"]
    words += ["--only", *args.only] if args.only else []
    words += ["--skip", *args.skip] if args.skip else []
    words += ["--quick"] if args.quick else []
    words += ["--save", args.save] if args.save is not None else []
    return " ".join(words)


def is_bench_record(path: Path) -> bool:
    """Is ``path`` a JSON file that ``--save`` wrote (the only kind it replaces)?"""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (isinstance(d, dict) and {"command", "date", "machine", "lines", "targets"} <= set(d)
            and str(d["command"]).startswith("minippo bench"))


def cli_main(args: argparse.Namespace) -> int:
    both = [s for s in args.only or () if s in args.skip]
    if both:                                  # a section named to run and to skip: neither silently wins
        print(f"minippo bench: error: --only and --skip both name {', '.join(both)}: give it to one of them",
              file=sys.stderr)
        return 2
    names = args.only or [s for s in SECTIONS if s not in args.skip and s not in ON_REQUEST]
    save = None if args.save is None else Path(args.save)
    if save is not None and not save.parent.is_dir():
        print(f"minippo bench: error: --save {args.save}: the folder {save.parent} does not exist",
              file=sys.stderr)
        return 2
    if save is not None and save.is_dir():
        print(f"minippo bench: error: --save {args.save}: a folder; expected a file name", file=sys.stderr)
        return 2
    if save is not None and save.exists() and not is_bench_record(save):
        print(f"minippo bench: error: --save {args.save}: exists and is not a file `minippo bench --save` "
              "wrote; it is left as it is (choose another name)", file=sys.stderr)
        return 2
    report = Report()
    t0 = time.perf_counter()
    for name in names:
        module = importlib.import_module(SECTIONS[name])
        report.section_start(name)
        module.bench(report, quick=args.quick)
    report.summary(time.perf_counter() - t0)
    if save is not None:
        record = report.record(command_line(args), datetime.date.today().isoformat())
        # atomic: a run that fails before this line leaves FILE as it was
        atomic_write_text(save, json.dumps(record, indent=1) + "\n")
        print(f"written: {save}")
    return 0
