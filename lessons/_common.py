"""Small helpers every lesson uses: where figures go, a consistent plot style, the CLI flags.

Where a lesson's figure goes (:func:`output_path`): a student's run never modifies the repository.

- ``python -m lessons.lNN_<slug>``: ``<repo>/runs/figures/lNN_<slug>.png`` (``runs/`` is git-ignored);
- ``--out DIR``: ``DIR/lNN_<slug>.png``;
- ``--quick``: this user's own temporary folder (the smoke tests; :func:`minippo.runs.user_temp_dir`);
- ``--figures``: the committed ``<repo>/figures/lNN_<slug>.png``, only at the size that produced it
  (``--full`` where the lesson has it). This is what ``python -m lessons all`` (the maintainer's
  regeneration) passes.

Every folder is resolved from the package location, never the working directory. ``--out`` is checked
before the lesson computes anything (a file, or a folder that cannot be made, is one line and exit status 2);
Ctrl-C stops a lesson with one line and exit status 130, as the ``minippo`` commands do. The flags are read by
:class:`minippo.cli.Parser`: a mistake is one line naming the flag, exit status 2.
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
from pathlib import Path

from minippo.cli import Parser
from minippo.flags import integer
from minippo.runs import user_temp_dir
from minippo.studies import sweep_stats
from minippo.studies.verdicts import (FAILS, HOLDS, NOT_SHOWN, Verdict, all_of, any_of, by_key, comparison,  # noqa: F401
                                      decide, diff_text, identity, measured, measurement)

# Figures are resolved from the package location, never from the working directory.
REPO_ROOT = Path(__file__).resolve().parent.parent
FIGURES_DIR = REPO_ROOT / "figures"                     # the committed figures (written only with --figures)
RUN_FIGURES_DIR = REPO_ROOT / "runs" / "figures"        # a student's runs (git-ignored)


def quick_figures_dir() -> Path:
    """Where ``--quick`` runs save their figures: ``<tmp>/minippo-<uid>/quick_figures``, this user's own."""
    return user_temp_dir("quick_figures")


def figure_path(module_name: str, directory: str | os.PathLike | None = None) -> Path:
    """``<directory>/lNN_<slug>.png`` for the lesson module ``lessons.lNN_<slug>`` (default directory:
    ``runs/figures/``; lessons choose with :func:`output_path`).

    Run as ``python -m lessons.lNN_<slug>`` the module is called ``__main__``; its real name is then
    read from ``__main__.__spec__``.
    """
    folder = Path(directory) if directory is not None else RUN_FIGURES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{lesson_slug(module_name)}.png"


def lesson_slug(module_name: str) -> str:
    """``lNN_<slug>`` of the lesson module ``lessons.lNN_<slug>`` (or ``__main__``, see :func:`figure_path`)."""
    if module_name == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is None:
            raise ValueError("cannot name the figure of a lesson run as a script; use `python -m lessons.lNN_<slug>`")
        module_name = spec.name
    return module_name.rsplit(".", 1)[-1]


def pyplot():
    """matplotlib.pyplot with the non-interactive backend and the course's style."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from minippo.plotting import STYLE
    plt.rcParams.update(STYLE)
    return plt


def save(fig, path: str | os.PathLike) -> Path:
    """Save ``fig`` with a tight layout, close it, and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def legend_in_margin(ax, frac: float = 0.3, side: str = "top", **kwargs):
    """A legend in an empty band above (``side="top"``) or below (``"bottom"``) the data: the y axis grows
    (linear or log) until that ``frac`` of the panel holds no data, and the legend goes there
    (``loc="upper center"`` / ``"lower center"`` unless given); for panels whose curves fill every corner.
    Returns the legend."""
    if not 0 < frac < 1:
        raise ValueError(f"`frac` must be in (0, 1), got {frac!r}")
    if side not in ("top", "bottom"):
        raise ValueError(f"`side` must be 'top' or 'bottom', got {side!r}")
    lo, hi = ax.get_ylim()
    log = ax.get_yscale() == "log"
    if side == "top":
        hi = lo * (hi / lo) ** (1 / (1 - frac)) if log else lo + (hi - lo) / (1 - frac)
    else:
        lo = hi / (hi / lo) ** (1 / (1 - frac)) if log else hi - (hi - lo) / (1 - frac)
    ax.set_ylim(lo, hi)
    kwargs.setdefault("loc", "upper center" if side == "top" else "lower center")
    return ax.legend(**kwargs)


def seed(text: str) -> int:
    """argparse ``type`` of ``--seed``: an integer >= 0, what ``np.random.default_rng`` takes (-1 was its
    "expected non-negative integer" traceback)."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 (N), got {text!r}")
    return value


def lesson_parser(description: str | None = None, prog: str | None = None) -> Parser:
    """The parser of the flags every lesson's ``main()`` accepts: ``--quick``, ``--full``, ``--seed``, ``--out``,
    ``--figures``."""
    parser = Parser(prog=prog, description=(description or "").strip().splitlines()[0] if description else None)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small, seconds-long version (used by the tests)")
    size.add_argument("--full", action="store_true",
                      help="the larger version that produced the committed figure, where a lesson has one")
    parser.add_argument("--seed", type=seed, default=0, metavar="N",
                        help="seed of the np.random.Generator (default 0)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", default=None, metavar="DIR",
                       help=f"folder for the figure (default: {RUN_FIGURES_DIR}, git-ignored)")
    where.add_argument("--figures", action="store_true",
                       help=f"maintainers: overwrite the committed figure in {FIGURES_DIR} "
                            "(at the size that produced it: with --full where the lesson has it)")
    return parser


def lesson_args(description: str | None = None, argv: list[str] | None = None) -> argparse.Namespace:
    """The flags of a lesson's ``main()`` read from ``argv`` (:func:`lesson_parser`)."""
    return lesson_parser(description).parse_args(argv)


def output_path(module_name: str, args: argparse.Namespace) -> Path:
    """Where ``main()`` saves the figure: ``--out`` if given; the committed ``figures/`` with
    ``--figures``; a temporary folder for ``--quick``; else ``runs/figures/`` (git-ignored), so a
    student's run never modifies the repository."""
    if args.out is not None:
        return figure_path(module_name, args.out)
    if args.figures:
        return figure_path(module_name, FIGURES_DIR)
    if args.quick:
        return figure_path(module_name, quick_figures_dir())
    return figure_path(module_name, RUN_FIGURES_DIR)


def check_figures_size(args: argparse.Namespace, has_full: bool, parser: Parser | None = None) -> None:
    """``--figures`` writes a committed figure, so only at the size and seed that produced it: never with
    ``--quick``, only with seed 0, and with ``--full`` where the lesson has a larger version (otherwise
    ``parser.error``: one line, exit status 2)."""
    error = (parser or lesson_parser()).error
    if not args.figures:
        return
    if args.quick:
        error("--figures: it writes the committed figure: run without --quick")
    if args.seed != 0:
        error(f"--figures: it writes the committed figure, which comes from seed 0 (got --seed {args.seed})")
    if has_full and not args.full:
        error("--figures: it writes the committed figure, which comes from --full for this lesson: add --full")


def check_out(module_name: str, args: argparse.Namespace, parser: Parser) -> Path:
    """The figure's path (:func:`output_path`), checked before the lesson computes: ``--out`` must be a folder
    or a path where one can be made, and an existing figure there a file (``parser.error`` otherwise: one line,
    exit status 2). Returns the path."""
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out}: a file, not a folder: expected the folder to save the figure in")
    try:
        path = output_path(module_name, args)
    except OSError as exc:                 # a folder that cannot be made
        parser.error(f"--out {args.out or exc.filename}: {exc.strerror or exc}: expected a folder for the figure")
    if path.is_dir():
        parser.error(f"--out {args.out}: {path} is a folder, not a figure file: expected a folder for the figure")
    if not os.access(path.parent, os.W_OK):
        parser.error(f"--out {args.out}: {path.parent} is not writable")
    return path


def save_figure(plot, results: dict, module_name: str, args: argparse.Namespace, path: Path | None = None) -> Path:
    """Draw a lesson's figure with ``plot(results, path)`` at ``path`` (default :func:`output_path`) and print
    where."""
    path = output_path(module_name, args) if path is None else path
    plot(results, path)
    print(f"figure: {path}")
    return path


def lesson_main(doc: str, module_name: str, run, narrative, plot, argv: list[str] | None = None) -> dict:
    """The ``main()`` of every lesson: parse the flags, check ``--out``, ``run(quick, seed)`` (and ``full`` where
    the lesson has a larger version), print ``narrative(results)``, save ``plot(results, path)``; returns the
    results. Ctrl-C: one line on stderr and exit status 130 (:func:`interrupted`)."""
    parser = lesson_parser(doc, prog=f"python -m lessons.{lesson_slug(module_name)}")
    args = parser.parse_args(argv)
    has_full = "full" in inspect.signature(run).parameters
    check_figures_size(args, has_full, parser)
    path = check_out(module_name, args, parser)          # before anything is computed
    kwargs = {"full": args.full} if has_full else {}
    with interrupted(f"the lesson {path.stem}"):
        r = run(quick=args.quick, seed=args.seed, **kwargs)
        print(narrative(r))
        save_figure(plot, r, module_name, args, path)
    return r


@contextlib.contextmanager
def interrupted(what: str):
    """``with interrupted("the lesson l04_clip_objective"): ...``: Ctrl-C inside prints one line on stderr (with the
    line of the innermost run stage when a trainer set one, :func:`minippo.runs.stage`) and exits with status 130,
    as the ``minippo`` commands do; ``MINIPPO_DEBUG=1`` shows the traceback instead."""
    try:
        yield
    except KeyboardInterrupt as exc:
        if os.environ.get("MINIPPO_DEBUG", "") not in ("", "0"):
            raise
        detail = getattr(exc, "minippo_message", None)
        print(f"interrupted {what}" + (f": {detail}" if detail else "; its figure was not written"),
              file=sys.stderr, flush=True)
        raise SystemExit(130) from None


seed_compare = sweep_stats.seed_compare     # the lessons import it from here with the verdict helpers


def time_line(r: dict, full_sizes: dict | None = None) -> str:
    """The closing line of a narrative: the run's wall and CPU time (``r["time"]``) and, after a
    default-size run, the size of the ``--full`` run that produced the committed figure."""
    t = r["time"]
    line = f"\nTime: {t['wall']:.1f} s wall, {t['cpu']:.1f} s CPU."
    if full_sizes is not None and not r.get("full", False):
        fs = full_sizes
        line += (f" The committed figure comes from --full ({fs['iterations']} iterations x {fs['batch_size']} "
                 f"responses, {len(fs['seeds'])} PPO seeds).")
    return line
