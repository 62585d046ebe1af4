"""The site's sources, generated from the repository (standard library only: no Sphinx needed here).

One source of truth. A lesson's page IS its committed notebook (``notebooks/lNN_<slug>.ipynb``, generated
from the lesson module by ``lessons/notebooks.py`` and executed: the text, the printed narrative, the figure),
copied with three changes: links rewritten to the site's pages, the questions section listing each
question's title with a link into the bank, and a last section with the lesson's code (a listing, a download
link, and links to the library modules it imports). The other pages are the repository's own Markdown files
(``docs/*.md``, ``README.md``) with their links rewritten; the index is the README's first paragraph and its
course table. Nothing generated is committed: the build writes these sources into a temporary folder, so the
only thing that can go stale is a notebook, which ``tests/lessons/test_notebooks.py`` checks and
:func:`generate` refuses.

Links. A relative link in any page is resolved against the file it appears in and sent where that file is
on the site: ``README.md`` -> ``readme.md``, a page of ``docs/`` -> the same name at the top, ``lessons/lNN_<slug>.py`` and
``notebooks/lNN_<slug>.ipynb`` -> the lesson page, ``figures/*.png`` -> a copy, any other file of the
repository -> a page with its source listing (``source/<path>.md``); a folder or a missing file loses its
link (kept as text) and is reported. ``Q<n>`` in the text links to that entry of the bank (label ``q<n>``).
"""
from __future__ import annotations

import ast
import importlib
import json
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from lessons import notebooks, quote
from lessons._common import REPO_ROOT

DOCS = ("questions", "ppo_paper", "exercises", "to_trl")      # docs/<name>.md, in the sidebar's order
_FENCE = re.compile(r"^(```|~~~)")
_CODE = re.compile(r"(?P<tick>`+).*?(?P=tick)")                              # an inline code span
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\s][^$]*?\$")           # inline math ($...$) left alone
_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)\)")
_IMG = re.compile(r'<img src="([^"]+)"(?: width="(\d+)")?\s*/?>')
_QREF = re.compile(r"(?<![\w<`/#])Q(\d+)\b")
_QHEAD = re.compile(r"^### Q(\d+)\. (.*)$", re.M)
_LEXERS = {".py": "python", ".cfg": "ini", ".toml": "toml", ".md": "markdown", ".json": "json", ".sh": "bash"}


@dataclass
class Sources:
    """What the build writes into Sphinx's source folder: ``text`` pages (path -> Markdown or notebook JSON),
    ``copies`` (path -> repository file), and the ``problems`` found on the way (links that lead nowhere)."""
    text: dict[str, str] = field(default_factory=dict)
    copies: dict[str, Path] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    questions: dict[int, str] = field(default_factory=dict)   # Q number -> its title (English part)
    lessons: dict[str, str] = field(default_factory=dict)     # repository path -> site page

    def write(self, srcdir: Path) -> None:
        for rel, content in self.text.items():
            (srcdir / rel).parent.mkdir(parents=True, exist_ok=True)
            (srcdir / rel).write_text(content, encoding="utf-8")
        for rel, path in self.copies.items():
            (srcdir / rel).parent.mkdir(parents=True, exist_ok=True)
            (srcdir / rel).write_bytes(path.read_bytes())


def lesson_page(module_name: str) -> str:
    return f"lessons/{notebooks.slug_of(module_name)}.ipynb"


def question_titles(bank: str) -> dict[int, str]:
    """``{n: title}`` of the bank's ``### Q<n>. <title> (<Chinese terms>)`` headings (the title without them)."""
    return {int(n): re.sub(r"\s*\([^()]*[^\x00-\x7f][^()]*\)\s*$", "", t).strip() for n, t in _QHEAD.findall(bank)}


def _prose_chunks(text: str) -> list[tuple[bool, str]]:
    """``text`` cut into ``(is_prose, chunk)``: fenced code blocks and ``$$`` display math are not prose."""
    chunks, buf, fence, math = [], [], False, False
    for line in text.split("\n"):
        stripped = line.strip()
        opens = not fence and not math and (_FENCE.match(stripped) or stripped.startswith("$$"))
        if opens:
            chunks.append((True, "\n".join(buf)))
            buf = []
        buf.append(line)
        if _FENCE.match(stripped):
            fence = not fence
        elif not fence and stripped.startswith("$$"):
            math = not (math or (len(stripped) > 2 and stripped.endswith("$$")))
        if (opens or buf) and not fence and not math and (_FENCE.match(stripped) or stripped.endswith("$$")) \
                and not (opens and (fence or math)):
            chunks.append((False, "\n".join(buf)))
            buf = []
    chunks.append((True, "\n".join(buf)))
    return chunks


_TOKEN = re.compile(f"(?P<link>{_LINK.pattern})|(?P<code>{_CODE.pattern})|(?P<math>{_MATH.pattern})", re.S)


class Builder:
    """Generates :class:`Sources` for the lessons ``module_names`` (``lessons.__main__.discover()``)."""

    def __init__(self, module_names: list[str], root: Path = REPO_ROOT):
        self.root, self.names, self.s = root, module_names, Sources()
        for n in module_names:
            slug = notebooks.slug_of(n)
            self.s.lessons[f"lessons/{slug}.py"] = self.s.lessons[f"notebooks/{slug}.ipynb"] = lesson_page(n)
        self.s.questions = question_titles((root / "docs" / "questions.md").read_text(encoding="utf-8"))

    # ------------------------------------------------------------ links

    def site_path(self, repo_path: str, where: str) -> str | None:
        """The site page or file that stands for the repository file ``repo_path`` (None: nothing does)."""
        if repo_path in self.s.lessons:
            return self.s.lessons[repo_path]
        if repo_path == "README.md":
            return "readme.md"
        if repo_path.startswith("docs/") and Path(repo_path).stem in DOCS:
            return repo_path[len("docs/"):]
        path = self.root / repo_path
        if not path.is_file():
            kind = "a folder" if path.is_dir() else "missing"
            self.s.problems.append(f"{where}: the link to {repo_path} is not a file of the site ({kind}); kept as text")
            return None
        if repo_path.startswith("figures/") or path.suffix in (".png", ".svg", ".jpg"):
            self.s.copies[repo_path] = path
            return repo_path
        page = f"source/{repo_path}.md"
        if page not in self.s.text:
            self.s.text[page] = self.source_page(repo_path)
        return page

    def rewrite(self, text: str, repo_dir: str, page: str) -> str:
        """Links resolved against ``repo_dir`` (the folder of the file the text comes from) and pointed at the
        site, relative to ``page``; ``<img>`` tags as Markdown images; ``Q<n>`` linked to the bank; any other
        ``<word>`` shown as text. The quoted-number markers of ``lessons/quote.py`` are HTML comments the
        Markdown renderer would show (its typography turns ``--`` into a dash): only their values stay."""
        text = quote.SPAN.sub(lambda m: m.group("text"), text)
        text = re.sub(r"<!-- quote-block\n.*?\n-->\n", "", text, flags=re.S)
        text = quote.TIMES.sub(lambda m: m.group("body"), text)       # the generated table of times
        text = quote.GENERATED_BLOCK.sub(lambda m: m.group("body"), text)   # lesson times, the bench run

        def link(m: re.Match, label: str) -> str:
            bang, _, target = m.groups()
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                return f"{bang}[{label}]({target})"                     # a web address, or this page
            path, _, anchor = target.partition("#")
            repo_path = posixpath.normpath(posixpath.join(repo_dir, path))
            dest = self.site_path(repo_path, page)
            if dest is None:           # a folder: its name as text; no such file: the text as written
                return label if (self.root / repo_path).is_dir() else rf"{bang}\[{label}\]({target})"
            rel = posixpath.relpath(dest, posixpath.dirname(page) or ".")
            return f"{bang}[{label}]({rel}{'#' + anchor if anchor else ''})"

        def qref(m: re.Match, prose: str, offset: int) -> str:
            line_start = prose.rfind("\n", 0, offset + m.start()) + 1
            n = int(m.group(1))
            if prose[line_start:].startswith("#") or n not in self.s.questions:
                return m.group(0)                                       # a heading, or no such entry
            return f"{{ref}}`Q{n} <q{n}>`"

        def text_part(s: str, prose: str, offset: int, refs: bool = True) -> str:
            s = _IMG.sub(lambda m: f"![]({m.group(1)})" + (f"{{w={m.group(2)}px}}" if m.group(2) else ""), s)
            s = re.sub(r"<(?!br>)(?=[A-Za-z/!])", "&lt;", s)
            return _QREF.sub(lambda m: qref(m, prose, offset), s) if refs else s

        out = []
        for is_prose, chunk in _prose_chunks(text):
            if not is_prose:
                out.append(chunk)
                continue
            pos, parts = 0, []
            for m in _TOKEN.finditer(chunk):
                parts.append(text_part(chunk[pos:m.start()], chunk, pos))
                if m.group("link"):
                    lm = _LINK.fullmatch(m.group(0))
                    label = text_part(lm.group(2), chunk, m.start(), refs=False)
                    parts.append(link(lm, label))
                else:
                    parts.append(m.group(0))
                pos = m.end()
            parts.append(text_part(chunk[pos:], chunk, pos))
            out.append("".join(parts))
        return "\n".join(c for c in out)

    # ------------------------------------------------------------ pages

    def source_page(self, repo_path: str) -> str:
        """A page with the listing of one repository file and a link to download it."""
        self.s.copies[f"_code/{repo_path}"] = self.root / repo_path
        lexer = _LEXERS.get(Path(repo_path).suffix, "text")
        return (f"---\norphan: true\n---\n\n# `{repo_path}`\n\n"
                f"{{download}}`Download {Path(repo_path).name} </_code/{repo_path}>`\n\n"
                f"```{{literalinclude}} /_code/{repo_path}\n:language: {lexer}\n:linenos:\n```\n")

    def imported_files(self, module_name: str) -> list[str]:
        """Repository paths of the ``minippo`` and ``lessons`` modules the lesson imports."""
        tree = ast.parse(notebooks.lesson_file(module_name).read_text(encoding="utf-8"))
        found = []
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [f"{node.module}.{a.name}" for a in node.names] + [node.module]
                    if isinstance(node, ast.ImportFrom) and node.module else [])
            for mod in mods:
                if not mod.startswith(("minippo", "lessons")):
                    continue
                base = mod.replace(".", "/")
                for cand in (f"{base}.py", f"{base}/__init__.py"):
                    if (self.root / cand).is_file() and cand not in found:
                        found.append(cand)
                        break
        return sorted(found)

    def lesson(self, module_name: str) -> str:
        """The lesson's page: its committed notebook, changed as the module docstring says."""
        nb = json.loads(notebooks.notebook_path(module_name).read_text(encoding="utf-8"))
        slug, page = notebooks.slug_of(module_name), lesson_page(module_name)
        for cell in nb["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if src.startswith("## Questions"):
                src = self.questions_section(src)
            cell["source"] = self.rewrite(src, "notebooks", page)
        nb["cells"].append({"cell_type": "markdown", "id": "site-code", "metadata": {},
                            "source": self.code_section(module_name, page)})
        self.s.copies[f"_code/lessons/{slug}.py"] = notebooks.lesson_file(module_name)
        return json.dumps(nb, ensure_ascii=False, indent=1) + "\n"

    def questions_section(self, src: str) -> str:
        """``## Questions`` with one line per question cited: its number and title, linked into the bank."""
        cited = [int(n) for n in re.findall(r"Q(\d+)", src.split("\n\n")[1] if "\n\n" in src else "")]
        lines = [f"- {{ref}}`Q{n}. {self.s.questions[n]} <q{n}>`" if n in self.s.questions else f"- Q{n}"
                 for n in dict.fromkeys(cited)]
        return "## Questions\n\nThe questions of the bank this lesson answers, with measurements:\n\n" + "\n".join(lines)

    def code_section(self, module_name: str, page: str) -> str:
        slug = notebooks.slug_of(module_name)
        calls = [f"[{p}]({posixpath.relpath(self.site_path(p, page), posixpath.dirname(page))})"
                 for p in self.imported_files(module_name)]
        return (f"## The code\n\nThe whole lesson, `lessons/{slug}.py` ({{download}}`download it "
                f"</_code/lessons/{slug}.py>`; run it with `python -m lessons.{slug}`). "
                + (f"The code of the course it imports: {', '.join(calls)}.\n\n" if calls else "\n\n")
                + f"```{{literalinclude}} /_code/lessons/{slug}.py\n:language: python\n:linenos:\n```\n")

    def bank(self) -> str:
        """docs/questions.md with a label ``(q<n>)=`` before each entry (what ``Q<n>`` links point to)."""
        text = (self.root / "docs" / "questions.md").read_text(encoding="utf-8")
        text = _QHEAD.sub(lambda m: f"(q{m.group(1)})=\n{m.group(0)}", text)
        return self.rewrite(text, "docs", "questions.md")

    def index(self) -> str:
        """The README's title, first paragraph and course table (a row per discovered lesson), and the
        table of contents."""
        readme = (self.root / "README.md").read_text(encoding="utf-8")
        title, intro = readme.split("\n", 1)[0], readme.split("\n\n")[1]
        lines = readme.split("\n")
        start = next(i for i, ln in enumerate(lines) if ln.startswith("| # | lesson"))
        rows = {}
        for ln in lines[start + 2:]:
            if not ln.startswith("|"):
                break
            cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
            if len(cells) != 7:
                raise ValueError(f"README.md: a course-table row with {len(cells)} cells, expected 7: {ln[:80]}")
            rows[cells[0]] = cells
        # the README's seven columns in five, so that the table fits a page beside the sidebar
        table = ["| # | lesson | what it shows (pipeline step; paper) | questions | figure |",
                 "|---|---|---|---|---|"]
        for n in self.names:
            num, lesson, step, shows, qs, paper, fig = rows.pop(notebooks.slug_of(n)[1:3], None) or self.docstring_row(n)
            fig = fig.replace('width="160"', 'width="120"')
            lesson = lesson.split("<br>")[0]          # the command is on the lesson's page
            table.append(f"| {num} | {lesson} | {shows} *({step}; {paper})* | {qs} | {fig} |")
        for number in rows:
            self.s.problems.append(f"README.md: the course table has a row {number} with no lesson; left out")
        toc = "\n".join(["```{toctree}", ":hidden:", ":caption: Lessons", ""] + [lesson_page(n)[:-len(".ipynb")] for n in self.names]
                        + ["```", "", "```{toctree}", ":hidden:", ":caption: Reference", ""]
                        + list(DOCS) + ["readme", "```"])
        body = (f"{title}\n\n{intro}\n\nEvery lesson is a page: its text and equations, what it prints, its "
                f"figure, its exercises, the questions it answers and its code. Beside them: the "
                f"[question bank](docs/questions.md), the [paper-to-code map](docs/ppo_paper.md), the "
                f"[exercises](docs/exercises.md), the [map to TRL](docs/to_trl.md) and the [README](README.md).\n\n"
                + "\n".join(table) + "\n\n" + toc + "\n")
        return self.rewrite(body, "", "index.md")

    def docstring_row(self, module_name: str) -> list[str]:
        """The seven course-table cells of a lesson the README's table does not list yet (from its docstring)."""
        slug = notebooks.slug_of(module_name)
        parts = notebooks.split_docstring(importlib.import_module(module_name).__doc__ or "")
        title = parts["title"].split("\n\n")
        qs = ", ".join(re.findall(r"Q\d+", parts.get("questions", "")))
        fig = f'<img src="figures/{slug}.png" width="120">' if (self.root / "figures" / f"{slug}.png").is_file() else ""
        self.s.problems.append(f"README.md: the course table has no row for {slug}; made from its docstring")
        return [slug[1:3], f"[{slug[4:]}](lessons/{slug}.py)", "-", title[1] if len(title) > 1 else "", qs, "-", fig]


def generate(module_names: list[str], root: Path = REPO_ROOT) -> Sources:
    """Every page of the site (see the module docstring); raises ``ValueError`` for a stale or missing notebook."""
    b = Builder(module_names, root)
    stale = [p for n in module_names if (p := notebooks.staleness(n))]
    if stale:
        raise ValueError("the site's lesson pages are the executed notebooks, and these are not fresh:\n  "
                         + "\n  ".join(stale) + "\n(every stale one: `python -m lessons notebooks --stale`)")
    for n in module_names:
        b.s.text[lesson_page(n)] = b.lesson(n)
    b.s.text["questions.md"] = b.bank()
    for d in DOCS[1:]:
        b.s.text[f"{d}.md"] = b.rewrite((root / "docs" / f"{d}.md").read_text(encoding="utf-8"), "docs", f"{d}.md")
    b.s.text["readme.md"] = b.rewrite((root / "README.md").read_text(encoding="utf-8"), "", "readme.md")
    b.s.text["index.md"] = b.index()
    return b.s
