"""Small helpers every lesson uses: where figures go, a consistent plot style, the CLI flags."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

# Figures are resolved from the package location, never from the working directory.
REPO_ROOT = Path(__file__).resolve().parent.parent
FIGURES_DIR = REPO_ROOT / "figures"


def figure_path(module_name: str, directory: str | os.PathLike | None = None) -> Path:
    """``figures/lNN_<slug>.png`` for the lesson module ``lessons.lNN_<slug>`` (or in ``directory``).

    Run as ``python -m lessons.lNN_<slug>`` the module is called ``__main__``; its real name is then
    read from ``__main__.__spec__``.
    """
    if module_name == "__main__":
        import sys
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is None:
            raise ValueError("cannot name the figure of a lesson run as a script; use `python -m lessons.lNN_<slug>`")
        module_name = spec.name
    slug = module_name.rsplit(".", 1)[-1]
    folder = Path(directory) if directory is not None else FIGURES_DIR
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


def lesson_args(description: str | None = None, argv: list[str] | None = None) -> argparse.Namespace:
    """The flags every lesson's ``main()`` accepts: ``--quick``, ``--seed``, ``--out``."""
    parser = argparse.ArgumentParser(description=(description or "").strip().splitlines()[0] if description else None)
    parser.add_argument("--quick", action="store_true", help="small, seconds-long version (used by the tests)")
    parser.add_argument("--full", action="store_true", help="the larger version that produced the committed figure, where a lesson has one")
    parser.add_argument("--seed", type=int, default=0, help="seed of the np.random.Generator (default 0)")
    parser.add_argument("--out", default=None, help="folder for the figure (default: the repository's figures/)")
    return parser.parse_args(argv)


def output_path(module_name: str, args: argparse.Namespace) -> Path:
    """Where ``main()`` saves the figure: ``--out`` if given; a temporary folder for ``--quick``
    runs (so a smoke run never overwrites a committed figure); else the repository's ``figures/``."""
    if args.out is not None:
        return figure_path(module_name, args.out)
    if args.quick:
        import tempfile
        return figure_path(module_name, Path(tempfile.gettempdir()) / "minippo_quick_figures")
    return figure_path(module_name)


def save_figure(plot, results: dict, module_name: str, args: argparse.Namespace) -> Path:
    """Draw a lesson's figure with ``plot(results, path)`` at :func:`output_path` and print where."""
    path = output_path(module_name, args)
    plot(results, path)
    print(f"figure: {path}")
    return path


def lesson_main(doc: str, module_name: str, run, narrative, plot, argv: list[str] | None = None) -> dict:
    """The ``main()`` of every lesson: parse the flags, ``run(quick, seed)`` (and ``full`` where the lesson has
    a larger version), print ``narrative(results)``, save ``plot(results, path)``; returns the results."""
    import inspect

    args = lesson_args(doc, argv)
    kwargs = {"full": args.full} if "full" in inspect.signature(run).parameters else {}
    r = run(quick=args.quick, seed=args.seed, **kwargs)
    print(narrative(r))
    save_figure(plot, r, module_name, args)
    return r


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
