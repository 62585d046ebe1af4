"""``python -m lessons site --out DIR``: the course as a static website, built offline with Sphinx + MyST-NB.

Pages: one per lesson (its executed notebook: the docstring, what it prints, the figure, the exercises, the
questions it answers with links into the bank, and its code), the question bank, the paper-to-code map, the
exercises guide, the map to TRL and the README; the index is the README's course table. Lessons are
discovered (``lessons.__main__.discover``). ``sources.py`` generates the pages (standard library only),
``conf.py`` configures Sphinx (and says why Sphinx). The site works from a web server or from ``file://``
(a USB stick): math (MathJax), search and the theme's scripts are bundled, nothing is fetched.

``DIR`` is replaced whole by a new build only if it holds an earlier build of this command (the marker
file :data:`MARKER`) or is empty; anything else is refused. Sphinx runs with warnings as errors: a link that
does not resolve, a notebook that does not parse, fails the build, naming the page.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from lessons.website.sources import generate

CONF_DIR = Path(__file__).resolve().parent
MARKER = ".minippo-site"


def check_out_dir(out: Path) -> None:
    """``ValueError`` unless ``out`` is missing, empty, or an earlier build (it holds :data:`MARKER`)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ValueError(f"--out {out}: the folder holds files this command did not write (no {MARKER}); "
                         f"choose another folder or empty it")


def build(module_names: list[str], out: Path, log=print) -> list[str]:
    """Generate the sources, run Sphinx into a fresh folder beside ``out`` and put it in ``out``'s place.
    Returns the problems the generator reported (links kept as text); raises on a failed build."""
    from sphinx.cmd.build import build_main     # lazy: the `docs` extra (the staleness tests run without it)
    out = out.resolve()
    check_out_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sources = generate(module_names)
    with tempfile.TemporaryDirectory(prefix="minippo_site_") as tmp:
        src, html = Path(tmp) / "src", Path(out.parent / f".{out.name}.building")
        shutil.rmtree(html, ignore_errors=True)
        sources.write(src)
        status = build_main(["-b", "html", "-q", "-W", "--keep-going", "-c", str(CONF_DIR),
                             "-d", str(Path(tmp) / "doctrees"), str(src), str(html)])
        if status != 0:
            shutil.rmtree(html, ignore_errors=True)
            raise RuntimeError(f"sphinx-build failed (status {status}); its messages are above")
        shutil.rmtree(html / ".doctrees", ignore_errors=True)
        (html / MARKER).write_text("built by `python -m lessons site`\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        html.rename(out)
    return sources.problems


def main(argv: list[str] | None, all_names: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons site", description=__doc__.split("\n\n")[0] + (
        " Needs the docs extra: pip install -e \".[docs]\"."))
    parser.add_argument("--out", required=True, metavar="DIR", help="folder of the site (open DIR/index.html)")
    args = parser.parse_args(argv)
    try:
        import myst_nb, sphinx  # noqa: F401  lazy: the `docs` extra, checked before any work
    except ImportError as err:
        print(f"python -m lessons site needs the docs extra ({err.name} is missing): pip install -e \".[docs]\"",
              file=sys.stderr)
        return 2
    t = time.perf_counter()
    try:
        problems = build(all_names, Path(args.out))
    except (ValueError, RuntimeError, OSError) as err:
        print(f"python -m lessons site: {err}", file=sys.stderr)
        return 2 if isinstance(err, ValueError) else 1
    for p in problems:
        print(f"note: {p}")
    pages = sum(1 for _ in Path(args.out).rglob("*.html"))
    print(f"site: {pages} pages in {args.out} ({time.perf_counter() - t:.1f} s); open {Path(args.out) / 'index.html'}")
    return 0
