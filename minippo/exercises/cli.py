"""The ``minippo exercise`` command: ``list``, ``start NAME``, ``check NAME``, ``solution NAME``.

Errors are one line on stderr: exit status 2 for a command line that cannot work (an unknown exercise, a file
that ``start`` would overwrite without ``--force``), 1 for a file that does not import or a failed check;
``check`` exits 0 only when every check passes.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from minippo.exercises import EXERCISES
from minippo.exercises.grading import LoadError, eprint, grade, load_function, table

DEFAULT_DIR = "exercises"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("list", help="one line per exercise")
    p = sub.add_parser("start", help="write DIR/NAME.py: the function to implement")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--dir", default=DEFAULT_DIR, metavar="DIR",
                   help=f"folder of the exercise files (default ./{DEFAULT_DIR})")
    p.add_argument("--force", action="store_true", help="overwrite DIR/NAME.py if it exists")
    p = sub.add_parser("check", help="run the project's checks on DIR/NAME.py")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--dir", default=DEFAULT_DIR, metavar="DIR",
                   help=f"folder of the exercise files (default ./{DEFAULT_DIR})")
    p.add_argument("--debug", action="store_true", help="show the tracebacks of errors in the student's code")
    p = sub.add_parser("solution", help="print the reference solution (for teachers)")
    p.add_argument("name", metavar="NAME")


def exercise(name: str):
    """The module of exercise ``name``; ``ValueError`` naming the known exercises otherwise."""
    if name not in EXERCISES:
        raise ValueError(f"unknown exercise {name!r}; the exercises are: {', '.join(EXERCISES)}")
    return importlib.import_module(EXERCISES[name])


def list_lines() -> list[str]:
    width = max(len(n) for n in EXERCISES)
    lines = []
    for name in EXERCISES:
        m = exercise(name)
        where = Path(m.LESSON)               # a lesson (lessons/lNN_*.py), or the module a command teaches it in
        shown = f"lesson {where.stem[1:3]}" if where.parts[0] == "lessons" else str(where)
        lines.append(f"{name:<{width}}  {m.SUMMARY}  [{shown}]")
    return lines


def check_hint(name: str, directory: str) -> str:
    """The command that checks exercise ``name`` in ``directory``."""
    return f"minippo exercise check {name}" + ("" if directory == DEFAULT_DIR else f" --dir {directory}")


def cli_main(args: argparse.Namespace) -> int:
    if args.action is None or args.action == "list":
        print("\n".join(list_lines()))
        if args.action is None:
            print("\nminippo exercise start NAME, then check NAME (minippo exercise --help)")
        return 0
    try:
        m = exercise(args.name)
    except ValueError as exc:
        eprint(f"minippo exercise: error: {exc}")
        return 2
    if args.action == "solution":
        print(f"# reference solution of `minippo exercise {args.name}` (for teachers): equal to {m.REFERENCE}\n"
              f"# on every check (tests/exercises prove it); save it as {DEFAULT_DIR}/{args.name}.py to grade it.")
        print(m.SOLUTION, end="")
        return 0
    path = Path(args.dir) / f"{args.name}.py"
    if args.action == "start":
        if path.exists() and not args.force:
            eprint(f"minippo exercise: error: {path} exists; not overwritten (add --force to replace it)")
            return 2
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(m.TEMPLATE, encoding="utf-8")
        print(f"wrote {path}: implement {m.FUNCTION}, then run `{check_hint(args.name, args.dir)}`")
        return 0
    # check
    try:
        fn = load_function(path, m.FUNCTION)
    except LoadError as exc:
        if args.debug and exc.detail:
            eprint(exc.detail.rstrip())
        missing = "" if path.exists() else f" (write it with `minippo exercise start {args.name}`)"
        eprint(f"minippo exercise: {exc}{missing}")
        return 1
    results = grade(m.cases(), fn)
    print(f"minippo exercise check {args.name}: {path} :: {m.FUNCTION}")
    print(table(results, debug=args.debug))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="minippo exercise")
    add_arguments(parser)
    sys.exit(cli_main(parser.parse_args()))
