"""One look for every figure minippo draws: the course's matplotlib style and a safe save.

Library code (the CartPole dashboard, the RLHF run curves) draws with matplotlib's object API
inside :func:`course_style`, so it never switches the backend or changes global settings of the
program that calls it; lessons use :func:`lessons._common.pyplot`, which applies the same
:data:`STYLE` to their own process.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

#: the rcParams of every minippo figure
STYLE = {
    "figure.dpi": 100, "savefig.dpi": 110, "font.size": 10, "axes.titlesize": 11,
    "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 9, "legend.framealpha": 0.85,
    "axes.spines.top": False, "axes.spines.right": False,
}


@contextlib.contextmanager
def course_style():
    """``with course_style():`` draw and save with :data:`STYLE`; the caller's settings come back after."""
    with matplotlib.rc_context(STYLE):
        yield


def new_figure(figsize):
    """A matplotlib ``Figure`` from the object API (no pyplot, no global state), ``figsize`` in inches."""
    return Figure(figsize=figsize)


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save ``fig`` as a PNG at ``path`` (parent folders created), tightly cropped; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return path
