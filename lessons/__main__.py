"""``python -m lessons``: list the lessons; ``python -m lessons 4``: run one; ``python -m lessons all``: regenerate.

``python -m lessons 4`` (or ``l04``, or ``clip_objective``, or ``python -m lessons.l04_clip_objective``)
runs one lesson at its default size and saves its figure in ``runs/figures/`` (git-ignored; ``--out DIR``
elsewhere): a student's run never modifies the repository.

``python -m lessons all`` is the maintainer's command: it regenerates every committed figure in
``figures/``, each lesson at the size that produced its committed figure (``--full`` for the lessons
with a larger version, 13, 15-21, 23 and 24, which say so in their docstrings; lessons without a
larger version ignore the flag). ``python -m lessons 13 --figures`` does the same for one lesson. ``--quick`` runs the seconds-long versions instead (figures go to a temporary folder);
``--default`` the classroom sizes (figures to ``runs/figures/``; each one's CPU seconds, beside the matmul
GFLOP/s of the machine that measured them: README, "How long each lesson takes").

``python -m lessons verdicts --seeds 0 1 [--quick]`` prints every lesson's verdicts as one table (claim, class,
rule, outcome per seed; ``lessons/verdict_table.py``).

``python -m lessons notebooks`` regenerates every ``notebooks/lNN_<slug>.ipynb`` from its lesson module,
executed at the default size (``notebooks 4``: one lesson; ``--no-execute``: without outputs; ``--verify
--quick``: execute the committed notebooks in quick mode, writing nothing); see ``lessons/notebooks.py``.
``python -m lessons site --out DIR`` builds the course's website from them (``lessons/website/``).

``python -m lessons results 4`` writes ``docs/results/l04_clip_objective.json``, what the lesson computed at its
default size (``all`` and ``--figures`` write them too, after the figures); ``python -m lessons results 17
--full`` the second file of a lesson with a ``--full`` part (lessons 13, 17, 23, 24: ``FULL`` in
``lessons/results.py``), ``docs/results/l17_hyperparameters_full.json`` (not written by ``all`` or
``--figures``: slow); ``python -m lessons quote`` fills the numbers the docs quote from those files
(``lessons/results.py``, ``lessons/quote.py``); ``python -m lessons restamp N --since REV`` keeps a results file
through a change of its source that moves no number (``lessons/restamp.py``).

``python -m lessons times --repeat 3 --save`` times every lesson's default run as a fresh process, the shared
stages' first build and ``minippo rlhf`` in one session, each three times (the median and the spread), and writes
``docs/lesson_times.json`` (the README's table; ``lessons/times.py``).
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path

import lessons
from lessons import notebooks, verdict_table
from lessons._common import RUN_FIGURES_DIR, interrupted
from minippo.cli import Parser
from minippo.flags import integer

USAGE = f"""
Run one lesson (default size, figure in {RUN_FIGURES_DIR}, git-ignored):
  python -m lessons 4                        # or: python -m lessons.l04_clip_objective
  python -m lessons 4 --quick                # the seconds-long version (figure in your own temporary folder)
  python -m lessons.l04_clip_objective --out DIR   # the figure in DIR
Each default run's CPU seconds: README, "How long each lesson takes". The first RLHF lesson (09, 11, 13-21, 24)
you run first builds the SFT policy and reward model they share into runs/cache/ (once; it says so before it
starts), unless `minippo rlhf` (default config, seed 0, into runs/) already made them: then
they are copied from that run.
Every verdict the lessons print, as one table: python -m lessons verdicts --seeds 0 1 --quick
Maintainers: python -m lessons all  (regenerates the committed figures/: the --full sizes)."""


def discover() -> list[str]:
    """Module names ``lessons.lNN_<slug>`` in number order."""
    names = [m.name for m in pkgutil.iter_modules([str(Path(lessons.__file__).parent)])
             if m.name[:1] == "l" and m.name[1:3].isdigit()]
    return [f"lessons.{n}" for n in sorted(names)]


def first_line(module_name: str) -> str:
    mod = importlib.import_module(module_name)
    doc = (mod.__doc__ or "").strip().splitlines()
    return doc[0] if doc else ""


def resolve(key: str, names: list[str], parser: Parser | None = None) -> str:
    """The lesson module a number or slug names; no match: one line, exit status 2 (``parser.error``)."""
    k = key.lower().lstrip("l")
    for n in names:
        short = n.split(".")[1]
        if k.isdigit() and int(short[1:3]) == int(k):
            return n
        if key.lower() in (short, short[4:]):
            return n
    (parser or Parser(prog="python -m lessons")).error(
        f"no lesson matches {key!r}; expected a number (1-{len(names)}) or a slug (run `python -m lessons` for the "
        "list)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["notebooks"]:
        return notebooks.main(argv[1:], discover(), resolve)
    if argv[:1] == ["verdicts"]:
        return verdict_table.main(argv[1:], discover(), resolve)
    if argv[:1] == ["site"]:
        from lessons import website      # the site's generator (its Sphinx import is lazy too)
        return website.main(argv[1:], discover())
    if argv[:1] == ["times"]:
        from lessons import times
        return times.main(argv[1:], discover(), lambda key: resolve(key, discover()))
    if argv[:1] in (["results"], ["quote"], ["restamp"]):
        return results_main(argv)
    parser = Parser(prog="python -m lessons", description=__doc__)
    parser.add_argument("which", nargs="*", help="'all', or lesson numbers / slugs; empty lists them; "
                        "'notebooks [N ...]' regenerates the notebooks (python -m lessons notebooks -h)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the seconds-long version of each lesson")
    size.add_argument("--default", action="store_true", help="'all' at the classroom sizes instead of --full")
    size.add_argument("--figures", action="store_true",
                      help="maintainers: regenerate the committed figures/ of the lessons named (--full size)")
    parser.add_argument("--out", default=None, metavar="DIR", help="folder for the figures (default runs/figures/)")
    parser.add_argument("--seed", type=integer, default=0, metavar="N", help="seed of every lesson (default 0)")
    args = parser.parse_args(argv)
    names = discover()
    if not args.which:
        for n in names:
            print(f"{n.split('.')[1]:<26s} {first_line(n)}")
        print(USAGE)
        return 0
    regenerate = args.figures or (args.which == ["all"] and not (args.default or args.quick))
    if regenerate and args.out is not None:
        parser.error("--out: the regeneration writes the committed figures/; use --default or --quick with --out")
    if regenerate and args.seed != 0:
        parser.error("--seed: the committed figures come from seed 0; use --default or --quick with another seed")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out}: a file, not a folder: expected the folder to save the figures in")
    chosen = names if args.which == ["all"] else [resolve(w, names, parser) for w in args.which]
    with interrupted("python -m lessons"):       # a lesson's own Ctrl-C line is printed inside its main()
        return run_lessons(chosen, args, regenerate)


def run_lessons(chosen: list[str], args, regenerate: bool) -> int:
    """Run each lesson module's ``main()`` with the flags of ``python -m lessons`` and print its times."""
    for n in chosen:
        t, cpu = time.perf_counter(), time.process_time()
        print(f"\n######## {n} ########", flush=True)
        mod = importlib.import_module(n)
        if args.quick:
            extra = ["--quick"]
        elif regenerate:
            extra = ["--full", "--figures"]     # the size of the committed figure, written into figures/
        else:
            extra = []
        if args.out is not None:
            extra += ["--out", args.out]
        mod.main(extra + ["--seed", str(args.seed)])
        print(f"[{n} took {time.perf_counter() - t:.1f} s wall, {time.process_time() - cpu:.1f} s CPU]", flush=True)
    if regenerate:
        return write_results(["all"] if args.which == ["all"] else [n.split(".")[1] for n in chosen])
    return 0


def results_main(argv: list[str]) -> int:
    """``python -m lessons results ...`` (``lessons/results.py``), ``python -m lessons quote ...``
    (``lessons/quote.py``) and ``python -m lessons restamp ...`` (``lessons/restamp.py``)."""
    from lessons import quote, restamp, results
    if argv[0] == "quote":
        return quote.main(argv[1:])
    if argv[0] == "restamp":
        return restamp.main(argv[1:], lambda key: resolve(key, discover()))
    return results.main(argv[1:], lambda key: resolve(key, discover()))


def write_results(which: list[str]) -> int:
    """After a regeneration of figures: the results files of the same lessons (``all``: and of the jobs),
    as ``python -m lessons results`` writes them (default size, its default kernels and seeds)."""
    print(f"\n######## results files: python -m lessons results {' '.join(which)} ########", flush=True)
    return results_main(["results", *which])


if __name__ == "__main__":
    sys.exit(main())
