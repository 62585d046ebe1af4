"""The website's sources (``lessons/website/sources.py``) are complete and in sync, with no Sphinx installed.

Nothing of the site is committed: ``python -m lessons site`` generates its pages from the lessons' committed
notebooks, ``docs/*.md`` and the README at build time, so the site cannot drift from them as long as the
notebooks are fresh (``test_notebooks.py``), which the generator refuses otherwise (tested here). These tests
check what the generator makes from the repository as it is now: a page per discovered lesson with its
questions and code, every link pointing at a page or file of the site, every ``Q<n>`` at an entry of the bank,
a course-table row per lesson. The browser check of the built site runs in .ci/run (``test_site_check.py``).
"""
import json
import posixpath
import re

import pytest

from lessons import notebooks as nbgen
from lessons.__main__ import discover
from lessons.website import sources

LESSONS = discover()


@pytest.fixture(scope="module")
def site():
    return sources.generate(LESSONS)


def markdown_of(rel: str, text: str) -> str:
    if rel.endswith(".ipynb"):
        return "\n\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "markdown")
    return text


def test_a_page_per_lesson_with_its_questions_and_code(site):
    for n in LESSONS:
        page = sources.lesson_page(n)
        nb = json.loads(site.text[page])
        md = markdown_of(page, site.text[page])
        slug = nbgen.slug_of(n)
        assert f"```{{literalinclude}} /_code/lessons/{slug}.py" in md and f"_code/lessons/{slug}.py" in site.copies
        # the executed notebook's outputs are there (the narrative printed, the figure)
        outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
        assert any(o.get("name") == "stdout" for o in outputs), f"{page}: no printed narrative"
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{page}: no figure"
        cited = re.findall(r"Q(\d+)", nbgen.split_docstring(__import__(n, fromlist=["x"]).__doc__).get("questions", ""))
        for q in cited:
            title = site.questions[int(q)]
            assert f"{{ref}}`Q{q}. {title} <q{q}>`" in md, f"{page}: question Q{q} not listed with its title"


def test_every_link_leads_to_a_page_or_file_of_the_site(site):
    files = set(site.text) | set(site.copies)
    labels = set(re.findall(r"^\((q\d+)\)=$", site.text["questions.md"], re.M))
    assert len(labels) == len(site.questions) > 60
    for rel, text in site.text.items():
        md = markdown_of(rel, text)
        links = [m.group(0) for prose, chunk in sources._prose_chunks(md) if prose
                 for m in sources._TOKEN.finditer(chunk)
                 if m.group("link") and chunk[max(m.start() - 1, 0)] != "\\"]   # not in code or math, not \[
        for target in [sources._LINK.fullmatch(link).group(3) for link in links]:
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target.split("#")[0]))
            assert path in files, f"{rel}: link to {target} leads to no page of the site"
        for label in re.findall(r"<(q\d+)>`", md):
            assert label in labels, f"{rel}: {label} is not an entry of the bank"
        for inc in re.findall(r"\{(?:literalinclude|download)\}`?\s*[^`\n]*?/(_code/[^\s>`]+)", md):
            assert inc in files, f"{rel}: {inc} is not copied into the site"


def test_the_index_is_the_course_table_with_a_row_per_lesson(site):
    index = site.text["index.md"]
    rows = [ln for ln in index.split("\n") if re.match(r"^\| \d\d \|", ln)]
    assert [r.split("|")[1].strip() for r in rows] == [nbgen.slug_of(n)[1:3] for n in LESSONS]
    for n, row in zip(LESSONS, rows):
        assert f"]({sources.lesson_page(n)})" in row
    for page in list(sources.DOCS) + ["readme"]:
        assert f"\n{page}\n" in index, f"{page} is not in the table of contents"


def test_a_lesson_missing_from_the_readme_gets_a_row_from_its_docstring():
    b = sources.Builder(LESSONS)
    cells = b.docstring_row("lessons.l04_clip_objective")
    assert cells[0] == "04" and cells[1] == "[clip_objective](lessons/l04_clip_objective.py)"
    assert cells[4] == "Q9, Q10" and "figures/l04_clip_objective.png" in cells[6]
    assert any("no row for l04_clip_objective" in p for p in b.s.problems)


def test_links_are_rewritten_for_the_site_and_code_is_left_alone():
    b = sources.Builder(LESSONS)
    text = ("See [the bank](../docs/questions.md#q9), [`io`](../minippo/io.py), Q9 and `Q9`, "
            "[a folder](../minippo/), <pad>, [x](https://example.org).\n\n```\n[kept](nowhere.md) Q9\n```\n"
            "$$\nx_[a](b)\n$$\nand [pi](s_t).")
    out = b.rewrite(text, "docs", "lessons/lx.ipynb")
    assert "[the bank](../questions.md#q9)" in out
    assert "[`io`](../source/minippo/io.py.md)" in out and "source/minippo/io.py.md" in b.s.text
    assert "{ref}`Q9 <q9>` and `Q9`" in out
    assert "a folder, &lt;pad>" in out and "[x](https://example.org)" in out
    assert "```\n[kept](nowhere.md) Q9\n```" in out and "$$\nx_[a](b)\n$$" in out      # code and math as written
    assert r"\[pi\](s_t)" in out and any("docs/s_t" in p for p in b.s.problems)


def test_the_generated_markers_leave_only_their_values():
    """The quote generator's markers are HTML comments, which the site's Markdown would show as text: a quoted
    number, a quoted code block's template, the tables of times and the bench run keep only what they hold."""
    b = sources.Builder(LESSONS)
    text = ("A ratio of <!-- l01:variance_ratio .1f -->6.3<!-- end -->x.\n\n<!-- quote-block\nx {l01:steps d}\n-->\n"
            "```\nx 150\n```\n\n<!-- quote-times -->\n| lesson | CPU s |\n|---|---|\n| 01 | 17.2 |\n<!-- end-times -->\n"
            "<!-- quote-lesson-times -->\nMeasured here.\n\n| run | CPU s |\n|---|---|\n| 04 | 2.0 |\n"
            "<!-- end-lesson-times -->\n<!-- quote-bench -->\n`minippo bench`:\n\n```text\n== matmul ==\n```\n"
            "<!-- end-bench -->\n")
    out = b.rewrite(text, "", "readme.md")
    assert "<!--" not in out and "-->" not in out, out
    assert "A ratio of 6.3x." in out and "```\nx 150\n```" in out and "| 01 | 17.2 |" in out
    assert "Measured here.\n\n| run | CPU s |\n|---|---|\n| 04 | 2.0 |\n" in out
    assert "`minippo bench`:\n\n```text\n== matmul ==\n```\n" in out


def test_a_stale_notebook_is_refused(monkeypatch):
    monkeypatch.setattr(nbgen, "staleness", lambda n: "l04_clip_objective.ipynb is stale" if "l04" in n else None)
    with pytest.raises(ValueError, match="(?s)l04_clip_objective.ipynb is stale.*lessons notebooks --stale"):
        sources.generate(LESSONS)


def test_the_output_folder_is_refused_unless_it_is_an_earlier_build(tmp_path):
    from lessons.website import MARKER, check_out_dir
    check_out_dir(tmp_path / "new")                     # missing: fine
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="did not write"):
        check_out_dir(tmp_path / "mine")
    (tmp_path / "mine" / MARKER).write_text("")
    check_out_dir(tmp_path / "mine")                    # an earlier build: replaced
