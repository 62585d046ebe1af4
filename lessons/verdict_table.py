"""``python -m lessons verdicts``: every lesson's verdicts as one table (lesson, claim, class, rule, outcome per seed).

    python -m lessons verdicts --seeds 0 1 --quick          # all lessons, the seconds-long sizes, two seeds
    python -m lessons verdicts 4 21 --seeds 0               # two lessons at their default size
    python -m lessons verdicts --seeds 0 1 --json FILE      # also the verdicts as data (one record per claim)

Each lesson's ``run(quick, seed)`` is called for every seed and its ``verdicts(results)`` collected
(:mod:`minippo.studies.verdicts`); the table is Markdown, one line per claim with its outcome on each seed.
Nothing is written unless ``--json`` names a file that does not exist yet (``--force`` to replace it).
"""
from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

from minippo.cli import Parser
from minippo.flags import integer
from minippo.studies.verdicts import table


def collect(module_name: str, seeds, quick: bool) -> dict:
    """{seed: [Verdict, ...]} of one lesson."""
    mod = importlib.import_module(module_name)
    return {s: mod.verdicts(mod.run(quick=quick, seed=s)) for s in seeds}


def main(argv, names: list[str], resolve) -> int:
    parser = Parser(prog="python -m lessons verdicts", description=__doc__.strip().splitlines()[0])
    parser.add_argument("which", nargs="*", help="lesson numbers or slugs (default: all)")
    parser.add_argument("--seeds", type=integer, nargs="+", default=[0], metavar="N", help="seeds of run() (default: 0)")
    parser.add_argument("--quick", action="store_true", help="the seconds-long sizes (default: the classroom sizes)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the verdicts as JSON to FILE")
    parser.add_argument("--force", action="store_true", help="with --json: replace FILE if it exists")
    args = parser.parse_args(argv)
    if any(s < 0 for s in args.seeds):
        parser.error(f"--seeds: seeds must be >= 0, got {args.seeds}")
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds: each seed once, got {args.seeds}")
    out = Path(args.json) if args.json else None
    if out is not None and out.exists() and not args.force:
        parser.error(f"--json: {out} exists; choose another file or add --force")
    chosen = names if not args.which else [resolve(w, names) for w in args.which]
    rows, records = [], []
    for name in chosen:
        t = time.process_time()
        per_seed = collect(name, args.seeds, args.quick)
        label = name.split(".")[1][1:3]
        rows.append((label, per_seed))
        records += [{"lesson": label, "seed": s, **v.as_dict()} for s, vs in per_seed.items() for v in vs]
        print(f"[{name}: {sum(len(v) for v in per_seed.values())} verdicts, {time.process_time() - t:.1f} s CPU]",
              file=sys.stderr, flush=True)
    print(table(rows))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"quick": args.quick, "seeds": args.seeds, "verdicts": records}, indent=1) + "\n")
    return 0
