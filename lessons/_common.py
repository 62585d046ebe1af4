"""Small helpers every lesson uses: where figures go, a consistent plot style, the CLI flags.

Where a lesson's figure goes (:func:`output_path`): a student's run never modifies the repository.

- ``python -m lessons.lNN_<slug>``: ``<repo>/runs/figures/lNN_<slug>.png`` (``runs/`` is git-ignored);
- ``--out DIR``: ``DIR/lNN_<slug>.png``;
- ``--quick``: a temporary folder (the smoke tests);
- ``--figures``: the committed ``<repo>/figures/lNN_<slug>.png``, only at the size that produced it
  (``--full`` where the lesson has it). This is what ``python -m lessons all`` (the maintainer's
  regeneration) passes.

Every folder is resolved from the package location, never the working directory.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
from pathlib import Path

from minippo.studies import sweep_stats
from minippo.studies.verdicts import (FAILS, HOLDS, NOT_SHOWN, Verdict, all_of, any_of, by_key, comparison,  # noqa: F401
                                      decide, diff_text, identity, measured, measurement)

# Figures are resolved from the package location, never from the working directory.
REPO_ROOT = Path(__file__).resolve().parent.parent
FIGURES_DIR = REPO_ROOT / "figures"                     # the committed figures (written only with --figures)
RUN_FIGURES_DIR = REPO_ROOT / "runs" / "figures"        # a student's runs (git-ignored)
QUICK_FIGURES_DIR = Path(tempfile.gettempdir()) / "minippo_quick_figures"


def figure_path(module_name: str, directory: str | os.PathLike | None = None) -> Path:
    """``<directory>/lNN_<slug>.png`` for the lesson module ``lessons.lNN_<slug>`` (default directory:
    ``runs/figures/``; lessons choose with :func:`output_path`).

    Run as ``python -m lessons.lNN_<slug>`` the module is called ``__main__``; its real name is then
    read from ``__main__.__spec__``.
    """
    if module_name == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is None:
            raise ValueError("cannot name the figure of a lesson run as a script; use `python -m lessons.lNN_<slug>`")
        module_name = spec.name
    slug = module_name.rsplit(".", 1)[-1]
    folder = Path(directory) if directory is not None else RUN_FIGURES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{slug}.png"


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


def lesson_args(description: str | None = None, argv: list[str] | None = None) -> argparse.Namespace:
    """The flags every lesson's ``main()`` accepts: ``--quick``, ``--full``, ``--seed``, ``--out``, ``--figures``."""
    parser = argparse.ArgumentParser(description=(description or "").strip().splitlines()[0] if description else None)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small, seconds-long version (used by the tests)")
    size.add_argument("--full", action="store_true",
                      help="the larger version that produced the committed figure, where a lesson has one")
    parser.add_argument("--seed", type=int, default=0, help="seed of the np.random.Generator (default 0)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", default=None, metavar="DIR",
                       help=f"folder for the figure (default: {RUN_FIGURES_DIR}, git-ignored)")
    where.add_argument("--figures", action="store_true",
                       help=f"maintainers: overwrite the committed figure in {FIGURES_DIR} "
                            "(at the size that produced it: with --full where the lesson has it)")
    return parser.parse_args(argv)


def output_path(module_name: str, args: argparse.Namespace) -> Path:
    """Where ``main()`` saves the figure: ``--out`` if given; the committed ``figures/`` with
    ``--figures``; a temporary folder for ``--quick``; else ``runs/figures/`` (git-ignored), so a
    student's run never modifies the repository."""
    if args.out is not None:
        return figure_path(module_name, args.out)
    if args.figures:
        return figure_path(module_name, FIGURES_DIR)
    if args.quick:
        return figure_path(module_name, QUICK_FIGURES_DIR)
    return figure_path(module_name, RUN_FIGURES_DIR)


def check_figures_size(args: argparse.Namespace, has_full: bool) -> None:
    """``--figures`` writes a committed figure, so only at the size and seed that produced it: never with
    ``--quick``, only with seed 0, and with ``--full`` where the lesson has a larger version (``SystemExit``
    otherwise)."""
    if not args.figures:
        return
    if args.quick:
        raise SystemExit("--figures writes the committed figure: run without --quick")
    if args.seed != 0:
        raise SystemExit(f"--figures writes the committed figure, which comes from seed 0 (got --seed {args.seed})")
    if has_full and not args.full:
        raise SystemExit("--figures writes the committed figure, which comes from --full for this lesson: "
                         "add --full")


def save_figure(plot, results: dict, module_name: str, args: argparse.Namespace) -> Path:
    """Draw a lesson's figure with ``plot(results, path)`` at :func:`output_path` and print where."""
    path = output_path(module_name, args)
    plot(results, path)
    print(f"figure: {path}")
    return path


def lesson_main(doc: str, module_name: str, run, narrative, plot, argv: list[str] | None = None) -> dict:
    """The ``main()`` of every lesson: parse the flags, ``run(quick, seed)`` (and ``full`` where the lesson has
    a larger version), print ``narrative(results)``, save ``plot(results, path)``; returns the results."""
    args = lesson_args(doc, argv)
    has_full = "full" in inspect.signature(run).parameters
    check_figures_size(args, has_full)
    kwargs = {"full": args.full} if has_full else {}
    r = run(quick=args.quick, seed=args.seed, **kwargs)
    print(narrative(r))
    save_figure(plot, r, module_name, args)
    return r


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
