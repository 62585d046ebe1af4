"""``python -m lessons notebooks``: every lesson as a Jupyter notebook, generated from the lesson module.

One source of truth: ``lessons/lNN_<slug>.py``. Its docstring becomes the markdown cells, split at its
sections; the code cells call the lesson's own ``run``, ``narrative`` and ``plot``. The generator builds a
jupytext "py:percent" text, jupytext turns it into a notebook, nbclient executes it on a real kernel of the
current environment (``python3``: the ipykernel installed beside this Python) and nbformat writes
``notebooks/lNN_<slug>.ipynb``. Never edit a notebook by hand: edit the lesson and regenerate.

The docstring conventions the converter reads (CONTRIBUTING "Notebooks"):

- the first paragraph (one line, or wrapped) is the title, ``Lesson NN - <name>: <one sentence>`` (the part
  before the first ``": "`` is the notebook's heading);
- a section starts with a paragraph that begins with one of the labels of :data:`SECTIONS`
  (``Pipeline step:``, ``Paper:`` / ``Papers:``, ``The figure:``, ``Exercises:``, ``Questions:``; a note
  in parentheses may stand before the colon, ``The figure (from --full: 3 seeds):``, and is shown in
  italics; ``The figure shows ...`` starts the figure's section too) and runs to the next such paragraph;
  paragraphs before the first label are the introduction. The sections are placed in that order around
  the code cells: the figure's text just above the figure, the exercises and the questions
  (``Questions: Q1, Q2.``, linked to docs/questions.md) last;
- any other paragraph starting ``Short label:`` (at most five words) keeps its label, in bold;
- the text is Markdown: ``code`` in backticks, LaTeX inline in ``$...$`` and displayed in ``$$ ... $$``
  blocks; a bare ``<word>`` is shown as text, not swallowed as an HTML tag;
- a block indented by four spaces after a blank line or a line ending in ``:`` (the plain-text equations
  and tables) is shown as preformatted text, exactly as written; other indented lines continue their
  paragraph (a hanging indent), and a line back at the margin after them starts a new paragraph.

Staleness: each notebook's metadata holds :func:`source_hash` of the lesson's source and of this file;
``tests/lessons/test_notebooks.py`` recomputes it with the standard library. This module imports
jupytext, nbformat and nbclient lazily (inside the functions that need them): they live in the
``notebooks`` extra, and the staleness check must run without them.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from lessons._common import REPO_ROOT
from minippo.cli import Parser
from minippo.flags import integer

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
GENERATOR = Path(__file__).resolve()
# docstring section label -> (notebook heading, section key); a section runs to the next labelled one
SECTIONS = {"Pipeline step": ("Pipeline step", "pipeline"), "Paper": ("The paper", "paper"),
            "Papers": ("The papers", "paper"), "The figure": ("The figure", "figure"),
            "Exercises": ("Exercises", "exercises"), "Questions": ("Questions", "questions")}
_SECTION = re.compile(r"(?P<label>Pipeline step|Papers?|The figure|Exercises|Questions)(?P<note>\s*\((?:[^()]|\([^()]*\))*\))?:(?=\s|$)"
                      r"|(?P<shows>The figure) shows(?=\s)")
_LABEL = re.compile(r"^([A-Z][\w'-]*(?: [\w'()-]+){0,4}):(?=\s|$)")
_INLINE = re.compile(r"(`+).*?\1|\$\$.*?\$\$|\$[^$\s][^$]*?\$")    # code spans and inline math: left alone
DEFAULT_TIMEOUT = 1800          # seconds per cell: the --full versions of the RLHF studies take minutes


# ---------------------------------------------------------------- staleness (standard library only)

def slug_of(module_name: str) -> str:
    """``lNN_<slug>`` of ``lessons.lNN_<slug>``."""
    return module_name.rsplit(".", 1)[-1]


def lesson_file(module_name: str) -> Path:
    return REPO_ROOT / "lessons" / f"{slug_of(module_name)}.py"


def notebook_path(module_name: str, directory: str | os.PathLike | None = None) -> Path:
    return Path(directory if directory is not None else NOTEBOOKS_DIR) / f"{slug_of(module_name)}.ipynb"


def regenerate_command(module_name: str) -> str:
    return f"python -m lessons notebooks {int(slug_of(module_name)[1:3])}"


def source_hash(lesson_source: str, generator_source: str) -> str:
    """sha256 of what a notebook's cells are made from: the lesson module's text and this generator's text
    (newlines normalised, so a checkout with CRLF line ends hashes alike)."""
    h = hashlib.sha256()
    for text in (generator_source, lesson_source):
        data = text.replace("\r\n", "\n").encode("utf-8")
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def current_hash(module_name: str) -> str:
    return source_hash(lesson_file(module_name).read_text(encoding="utf-8"), GENERATOR.read_text(encoding="utf-8"))


def staleness(module_name: str, notebook: str | os.PathLike | None = None,
              lesson: str | os.PathLike | None = None) -> str | None:
    """None if the notebook of ``module_name`` was generated from the current lesson and generator, else a
    message naming the notebook and the command that regenerates it. ``notebook`` and ``lesson`` default to
    the repository's files (the tests pass modified copies to show the check fails)."""
    path = Path(notebook) if notebook is not None else notebook_path(module_name)
    lesson = Path(lesson) if lesson is not None else lesson_file(module_name)
    cmd = regenerate_command(module_name)
    if not path.is_file():
        return f"{path.name}: no notebook for lesson {slug_of(module_name)}; generate it with `{cmd}`"
    meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("minippo", {})
    current = source_hash(lesson.read_text(encoding="utf-8"), GENERATOR.read_text(encoding="utf-8"))
    if meta.get("source_sha256") != current:
        return (f"{path.name} is stale: lessons/{slug_of(module_name)}.py or lessons/notebooks.py changed since "
                f"it was generated; regenerate it with `{cmd}` (every stale one: `python -m lessons notebooks --stale`)")
    return None


# ---------------------------------------------------------------- docstring -> markdown

def _escape_html(line: str) -> str:
    """``<word`` outside code spans and math becomes ``&lt;word`` (Markdown would take it for an HTML tag)."""
    out, pos = [], 0
    for m in _INLINE.finditer(line):
        out.append(re.sub(r"<(?=[A-Za-z/!])", "&lt;", line[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(re.sub(r"<(?=[A-Za-z/!])", "&lt;", line[pos:]))
    return "".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def to_markdown(text: str) -> str:
    """A docstring section as Markdown: display math (``$$ ... $$``) copied as it is; a block indented four
    spaces deeper than the text around it, after a blank line or a line ending in ``:``, fenced as
    preformatted text; hanging indents (``(a) ...`` with its continuation lines indented) and the paragraphs
    inside them moved to the margin; labels in bold; ``<word>`` escaped."""
    lines, out, i, body = text.split("\n"), [], 0, 0      # body: the indent of the hanging item we are in
    while i < len(lines):
        line, prev = lines[i], lines[i - 1] if i else ""
        after_blank, ind = not prev.strip(), _indent(line)
        if not line.strip():
            out.append("")
            i += 1
        elif line.strip().startswith("$$"):                  # display math, up to the closing $$
            j = i
            while j + 1 < len(lines) and not (lines[j].strip().endswith("$$") and (j > i or len(lines[j].strip()) > 2)):
                j += 1
            out += [ln.strip() for ln in lines[i:j + 1]]
            i = j + 1
        elif (after_blank or prev.rstrip().endswith(":")) and ind >= body + 4:   # plain-text formulas, tables
            j = i
            while j < len(lines) and (_indent(lines[j]) >= body + 4 and lines[j].strip() or
                                      (not lines[j].strip() and j + 1 < len(lines) and lines[j + 1].strip()
                                       and _indent(lines[j + 1]) >= body + 4)):
                j += 1
            cut = min(_indent(ln) for ln in lines[i:j] if ln.strip())
            out += ["", "```text"] + [ln[cut:] for ln in lines[i:j]] + ["```", ""]
            i = j
        else:
            if ind == 0:
                if not after_blank and _indent(prev) > 0 and out[-1] != "```":
                    out.append("")      # a hanging-indent item ended: the next one ("(b) ...") is its own paragraph
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                body = _indent(nxt) if nxt.strip() and not line.rstrip().endswith(":") else 0
            m = _LABEL.match(line) if after_blank and ind == 0 else None
            line = line[min(ind, body):].rstrip()
            line = line[:-1] if line.endswith("::") else line      # reST's literal-block marker: one colon
            out.append(f"**{m.group(1)}:**{_escape_html(line[m.end():])}" if m else _escape_html(line))
            i += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def split_docstring(doc: str) -> dict[str, str]:
    """The docstring's parts as Markdown: ``title``, ``intro`` and one entry per section of :data:`SECTIONS`
    present (``pipeline``, ``paper``, ``figure``, ``exercises``, ``questions``), each led by its heading."""
    first, _, body = inspect.cleandoc(doc).partition("\n\n")
    title = " ".join(ln.strip() for ln in first.split("\n"))    # the first paragraph, should it wrap
    head, _, rest = title.partition(": ")
    if " - " not in head:                      # not "Lesson NN - <name>: ...": the whole line is the heading
        head, rest = title, ""
    parts = {"title": f"# {_escape_html(head)}" + (f"\n\n{_escape_html(rest[:1].upper() + rest[1:])}" if rest else "")}
    key, buf = "intro", []
    for para in re.split(r"\n[ \t]*\n", body.strip("\n")):
        m = _SECTION.match(para)
        if not m:
            buf.append(para)
            continue
        parts[key] = "\n\n".join(buf)
        label = m.group("label") or m.group("shows")
        heading, key = SECTIONS[label]
        if key in parts:
            raise ValueError(f"the docstring has two {label!r} sections; expected one")
        note, text = m.group("note"), para[m.end():].strip()
        buf = [f"## {heading}"]
        if note:                               # "The figure (from --full: ...):" -> an italic line
            note = note.strip()[1:-1].strip()
            buf.append(f"*{note[:1].upper() + note[1:]}.*")
        if text:
            buf.append(text[:1].upper() + text[1:])
    parts[key] = "\n\n".join(buf)
    return {k: v if k == "title" else to_markdown(v) for k, v in parts.items() if v.strip()}


# ---------------------------------------------------------------- the notebook

def percent_script(module_name: str) -> str:
    """The jupytext "py:percent" text of the lesson's notebook."""
    mod = importlib.import_module(module_name)
    for fn in ("run", "narrative", "plot"):
        if not callable(getattr(mod, fn, None)):
            raise ValueError(f"`{module_name}` has no {fn}(); a lesson follows the skeleton of CONTRIBUTING 'Lessons'")
    parts, slug = split_docstring(mod.__doc__ or ""), slug_of(module_name)
    full = "full" in inspect.signature(mod.run).parameters
    note = (f"*Generated from `lessons/{slug}.py` by `{regenerate_command(module_name)}`: edit the lesson, not "
            f"this notebook. `QUICK = True` below runs the seconds-long version.*")
    cells = [("md", parts["title"] + "\n\n" + note + ("\n\n" + parts["intro"] if "intro" in parts else ""))]
    cells += [("md", parts[k]) for k in ("pipeline", "paper") if k in parts]
    cells += [("md", f"## Run the lesson\n\n`run` measures, `narrative` says what the numbers show (every verdict "
                     f"is computed from them), `plot` draws the figure: the functions of `lessons/{slug}.py`.")]
    cells += [("code", "import tempfile\nfrom pathlib import Path\n\nfrom IPython.display import Image\n\n"
                       f"import lessons.{slug} as lesson")]
    params = ["QUICK = False   # True: the seconds-long version (what the tests and .ci/run execute)",
              "SEED = 0        # the seed of every np.random.Generator the lesson makes"]
    if full:
        params.append("FULL = False    # True: the larger version that produced the committed figure (minutes)")
    cells += [("parameters", "\n".join(params))]
    cells += [("code", "results = lesson.run(quick=QUICK, seed=SEED" + (", full=FULL" if full else "") + ")")]
    cells += [("code", "print(lesson.narrative(results))")]
    cells += [("md", parts.get("figure", "## The figure"))]
    cells += [("code", "# a temporary folder: running this notebook never writes into the repository's figures/\n"
                       f"figure = Path(tempfile.mkdtemp(prefix=\"minippo_\")) / \"{slug}.png\"\n"
                       "lesson.plot(results, figure)\nImage(filename=str(figure))")]
    if "exercises" in parts:
        cells += [("md", parts["exercises"])]
    if "questions" in parts:
        cells += [("md", parts["questions"] + "\n\nEach is answered, with measurements, in "
                         "[docs/questions.md](../docs/questions.md).")]
    text = []
    for kind, src in cells:
        if kind == "md":
            text.append("# %% [markdown]\n" + "\n".join(("# " + ln).rstrip() for ln in src.split("\n")))
        else:
            text.append(("# %% tags=[\"parameters\"]\n" if kind == "parameters" else "# %%\n") + src)
    return "\n\n".join(text) + "\n"


def build(module_name: str):
    """The notebook (an ``nbformat.NotebookNode``, no outputs) of ``module_name``, made by jupytext."""
    import jupytext          # lazy: the `notebooks` extra
    nb = jupytext.reads(percent_script(module_name), fmt="py:percent")
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["minippo"] = {"generated_from": f"lessons/{slug_of(module_name)}.py",
                              "regenerate": regenerate_command(module_name),
                              "source_sha256": current_hash(module_name)}
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"               # stable ids: regenerating changes only what changed
    return nb


def set_parameters(nb, **values) -> None:
    """Rewrite ``NAME = ...`` lines of the cell tagged "parameters" (what an executor does, as papermill);
    ``nb`` is an nbformat notebook or its JSON as a dict."""
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"expected one cell tagged 'parameters', found {len(cells)}")
    src = cells[0]["source"]
    src = "".join(src) if isinstance(src, list) else src          # a notebook read as JSON keeps a list of lines
    for name, value in values.items():
        src, n = re.subn(rf"^{name}\s*=.*$", f"{name} = {value!r}   # set by the executor", src, flags=re.M)
        if n != 1:
            raise ValueError(f"the parameters cell has no line `{name} = ...`")
    cells[0]["source"] = src


def execute(nb, timeout: int = DEFAULT_TIMEOUT) -> None:
    """Run every cell top to bottom on a fresh ``python3`` kernel of this environment, in a temporary working
    folder; raises nbclient's ``CellExecutionError`` at the first cell that fails."""
    from jupyter_client import KernelManager  # lazy: the `notebooks` extra
    from nbclient import NotebookClient
    with tempfile.TemporaryDirectory(prefix="minippo_nb_") as cwd:
        # POSIX: local sockets (ipc) in the temporary folder, not TCP ports (Windows has no ipc transport)
        km = (KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(cwd, "kernel-ipc"))
              if os.name == "posix" else KernelManager(kernel_name="python3"))
        try:
            NotebookClient(nb, km=km, timeout=timeout, record_timing=False,
                           resources={"metadata": {"path": cwd}}).execute()
        finally:                              # nbclient leaves a kernel it was given running
            if km.has_kernel:
                km.shutdown_kernel()


def write(nb, path: Path) -> None:
    """Validate and write atomically (a failed run never leaves half a notebook)."""
    import nbformat          # lazy: the `notebooks` extra
    nbformat.validate(nb)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".ipynb.tmp")
    nbformat.write(nb, str(tmp))
    tmp.replace(path)


# ---------------------------------------------------------------- the commands

def _failure(module_name: str, err: Exception) -> str:
    name = f"notebooks/{slug_of(module_name)}.ipynb"
    if hasattr(err, "ename"):                 # nbclient's CellExecutionError: the kernel's traceback follows
        return f"{name}: a cell failed with {err.ename}: {err.evalue}\n{err}"
    return f"{name}: {type(err).__name__}: {err}"


def generated(path: Path) -> bool:
    """Whether the notebook ``path`` was written by this generator (its metadata says which lesson it came from):
    only those are replaced or removed; a notebook someone saved under such a name is never touched."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(meta, dict) and "generated_from" in (meta.get("minippo") or {})


def orphans(module_names: list[str]) -> list[Path]:
    """Generated notebooks in ``notebooks/`` whose lesson no longer exists (:func:`generated`)."""
    known = {slug_of(n) for n in module_names}
    return sorted(p for p in NOTEBOOKS_DIR.glob("l*.ipynb") if p.stem not in known and generated(p))


def generate(module_names: list[str], *, run: bool = True, timeout: int = DEFAULT_TIMEOUT, log=print) -> list[str]:
    """Write ``notebooks/lNN_<slug>.ipynb`` for each lesson, executed at the default size unless ``run`` is
    False; returns the failures (a notebook whose execution fails is not written)."""
    failures = []
    for n in module_names:
        t = time.perf_counter()
        if notebook_path(n).exists() and not generated(notebook_path(n)):
            failures.append(f"{notebook_path(n).relative_to(REPO_ROOT)} was not written by this generator (no "
                            "minippo metadata): not overwritten; move it away to regenerate it")
            continue
        try:
            nb = build(n)
            if run:
                execute(nb, timeout)
            write(nb, notebook_path(n))
        except Exception as err:              # report every lesson, then fail: one broken lesson is not all
            failures.append(_failure(n, err))
            log(f"FAILED {notebook_path(n).relative_to(REPO_ROOT)}")
            continue
        log(f"{notebook_path(n).relative_to(REPO_ROOT)}  ({'executed' if run else 'not executed'}, "
            f"{time.perf_counter() - t:.1f} s)")
    return failures


def verify(module_names: list[str], *, quick: bool, timeout: int = DEFAULT_TIMEOUT, log=print) -> list[str]:
    """Check that each committed notebook is fresh and execute it top to bottom in memory (``quick``: the
    executor sets ``QUICK = True`` in its parameters cell); nothing is written. Returns the failures."""
    import nbformat          # lazy: the `notebooks` extra
    failures = []
    for n in module_names:
        t = time.perf_counter()
        stale = staleness(n)
        if stale:
            failures.append(stale)
            log(f"STALE  {stale}")
            continue
        try:
            nb = nbformat.read(str(notebook_path(n)), as_version=4)
            if quick:
                set_parameters(nb, QUICK=True)
            execute(nb, timeout)
        except Exception as err:
            failures.append(_failure(n, err))
            log(f"FAILED notebooks/{slug_of(n)}.ipynb")
            continue
        log(f"ok     notebooks/{slug_of(n)}.ipynb  ({'quick' if quick else 'default size'}, "
            f"{time.perf_counter() - t:.1f} s)")
    return failures


def main(argv: list[str] | None, all_names: list[str], resolve) -> int:
    """``python -m lessons notebooks [N ...] [--stale] [--no-execute | --verify [--quick]]``: ``all_names`` are the lesson
    modules (``lessons.__main__.discover()``), ``resolve(key, all_names)`` maps a number or slug to one."""
    parser = Parser(prog="python -m lessons notebooks", description=(
        "Generate notebooks/lNN_<slug>.ipynb from the lesson modules, executed at the default size (the "
        "committed notebooks carry those outputs); needs the `notebooks` extra: pip install -e \".[notebooks]\"."))
    parser.add_argument("which", nargs="*", help="lesson numbers / slugs (default: every lesson)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--no-execute", action="store_true", help="write the notebooks without outputs")
    parser.add_argument("--stale", action="store_true", help="only the notebooks whose lesson or generator changed "
                        "since they were generated")
    mode.add_argument("--verify", action="store_true", help="check the committed notebooks are fresh and execute "
                      "them top to bottom in memory (nothing is written); exit 1 if any is stale or a cell fails")
    parser.add_argument("--quick", action="store_true", help="with --verify: set QUICK = True in the parameters cell")
    parser.add_argument("--timeout", type=integer, default=DEFAULT_TIMEOUT, metavar="N",
                        help="seconds per cell (default %(default)s)")
    args = parser.parse_args(argv)
    module_names = [resolve(w, all_names, parser) for w in args.which] if args.which else all_names
    if args.stale and args.verify:
        parser.error("--stale goes with generating (--verify checks every notebook it is given)")
    if args.stale:
        module_names = [n for n in module_names if staleness(n)]
    if args.quick and not args.verify:
        parser.error("--quick goes with --verify (the committed notebooks are executed at the default size)")
    if args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    try:
        import jupytext, nbclient, nbformat   # noqa: F401  lazy: the `notebooks` extra, checked before any work
    except ImportError as err:
        print(f"python -m lessons notebooks needs the notebooks extra ({err.name} is missing): "
              f"pip install -e \".[notebooks]\"", file=sys.stderr)
        return 2
    if args.verify:
        failures = verify(module_names, quick=args.quick, timeout=args.timeout)
    else:
        failures = generate(module_names, run=not args.no_execute, timeout=args.timeout)
        if not args.which:
            for p in orphans(all_names):
                p.unlink()
                print(f"removed {p.relative_to(REPO_ROOT)}: its lesson no longer exists")
    for f in failures:
        print(f, file=sys.stderr)
    done = len(module_names) - len(failures)
    print(f"notebooks: {done} passed, {len(failures)} failed" if args.verify else
          f"{done} notebooks written to {NOTEBOOKS_DIR.relative_to(REPO_ROOT)}/, {len(failures)} failed", flush=True)
    return 1 if failures else 0
