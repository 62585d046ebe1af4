"""The notebooks (``notebooks/lNN_<slug>.ipynb``) are generated from their lessons and kept fresh.

Standard library only (no Jupyter package is needed): each notebook's metadata holds the sha256 of the
lesson module and of the generator it was made from (``lessons.notebooks.source_hash``); a notebook whose
hash differs from the current sources is stale, and the message names it and the command that regenerates
it. The cells are read as JSON: they call that lesson's ``run``, ``narrative`` and ``plot``, the parameters
cell is tagged, and the committed notebook carries the outputs of an error-free run.
"""
import ast
import json
import re
import shutil
import sys

import pytest

from lessons import notebooks as nbgen
from lessons.__main__ import discover, main

LESSONS = discover()


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_every_lesson_has_a_fresh_notebook():
    problems = [msg for n in LESSONS if (msg := nbgen.staleness(n))]
    problems += [f"{p.name}: its lesson no longer exists (`python -m lessons notebooks` removes it)"
                 for p in nbgen.orphans(LESSONS)]
    assert not problems, "\n".join(problems)


def test_a_changed_lesson_or_generator_makes_the_notebook_stale(tmp_path, monkeypatch):
    n = "lessons.l04_clip_objective"
    nb_copy, lesson_copy = tmp_path / "l04_clip_objective.ipynb", tmp_path / "l04_clip_objective.py"
    shutil.copy(nbgen.notebook_path(n), nb_copy)
    shutil.copy(nbgen.lesson_file(n), lesson_copy)
    assert nbgen.staleness(n, nb_copy, lesson_copy) is None           # the copies agree
    lesson_copy.write_text(lesson_copy.read_text(encoding="utf-8").replace("Exercises:", "Exercises :"),
                           encoding="utf-8")                           # one character of the lesson
    msg = nbgen.staleness(n, nb_copy, lesson_copy)
    assert msg is not None and "l04_clip_objective.ipynb is stale" in msg
    assert "`python -m lessons notebooks 4`" in msg
    shutil.copy(nbgen.lesson_file(n), lesson_copy)                     # the lesson back, the generator changed
    gen_copy = tmp_path / "notebooks.py"
    gen_copy.write_text(nbgen.GENERATOR.read_text(encoding="utf-8") + "\n# a change\n", encoding="utf-8")
    monkeypatch.setattr(nbgen, "GENERATOR", gen_copy)
    assert "is stale" in nbgen.staleness(n, nb_copy, lesson_copy)
    missing = nbgen.staleness(n, tmp_path / "nowhere.ipynb", lesson_copy)
    assert "no notebook for lesson l04_clip_objective" in missing and "python -m lessons notebooks 4" in missing


def test_the_hash_ignores_line_endings_only():
    src, gen = "a = 1\nb = 2\n", "x\n"
    assert nbgen.source_hash(src, gen) == nbgen.source_hash(src.replace("\n", "\r\n"), gen)
    assert nbgen.source_hash(src, gen) != nbgen.source_hash(src + " ", gen)
    assert nbgen.source_hash(src, gen) != nbgen.source_hash(gen, src)     # which text is which matters


def cell_problems(nb: dict, slug: str) -> list[str]:
    """What is wrong with the cells of the notebook of ``lessons.<slug>`` (empty: nothing)."""
    cells, problems = code_cells(nb), []
    params = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    if len(params) != 1:
        return [f"{len(params)} code cells tagged 'parameters', expected one"]
    if not (re.search(r"^QUICK = False\b", source(params[0]), re.M) and re.search(r"^SEED = 0\b", source(params[0]), re.M)):
        problems.append("the parameters cell lacks `QUICK = False` / `SEED = 0`")
    # what the code really calls (comments and strings do not count): lesson.run / narrative / plot
    imported, calls = set(), {}
    for i, c in enumerate(cells):
        for node in ast.walk(ast.parse(source(c))):
            if isinstance(node, ast.Import):
                imported |= {(a.name, a.asname) for a in node.names}
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "lesson"):
                calls[node.func.attr] = (i, node)
    if (f"lessons.{slug}", "lesson") not in imported:
        problems.append(f"no `import lessons.{slug} as lesson`")
    if not {"run", "narrative", "plot"} <= set(calls):
        return problems + [f"the cells call {sorted(calls)} of the lesson, not run, narrative and plot"]
    run_kw = {k.arg: ast.unparse(k.value) for k in calls["run"][1].keywords}
    if run_kw.get("quick") != "QUICK" or run_kw.get("seed") != "SEED":
        problems.append(f"lesson.run is called with {run_kw}, not quick=QUICK, seed=SEED")
    if not cells.index(params[0]) < calls["run"][0] < calls["narrative"][0] <= calls["plot"][0]:
        problems.append("the cells are not in the order parameters, run, narrative, plot")
    if "tempfile.mkdtemp" not in source(cells[calls["plot"][0]]):
        problems.append("the figure is not drawn into a temporary folder")
    # executed top to bottom without an error; the narrative printed; the figure shown inline
    if not all(c.get("execution_count") for c in cells):
        return problems + ["not executed"]
    if any(o["output_type"] == "error" for c in cells for o in c.get("outputs", [])):
        problems.append("an error output")
    printed = "".join(source({"source": o.get("text", "")}) for o in cells[calls["narrative"][0]]["outputs"]
                      if o["output_type"] == "stream")
    if not printed.strip():
        problems.append("the narrative cell printed nothing")
    if not any("image/png" in o.get("data", {}) for o in cells[calls["plot"][0]]["outputs"]):
        problems.append("the figure is not shown")
    return problems


@pytest.mark.parametrize("name", LESSONS)
def test_the_cells_call_the_lesson_and_carry_its_outputs(name):
    path = nbgen.notebook_path(name)
    assert path.is_file(), f"{path.name} missing; run `{nbgen.regenerate_command(name)}`"
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    problems = cell_problems(nb, nbgen.slug_of(name))
    assert not problems, f"{path.name}: " + "; ".join(problems) + f"; regenerate it with `{nbgen.regenerate_command(name)}`"


def test_the_cell_check_fails_on_a_broken_notebook():
    nb = json.loads(nbgen.notebook_path("lessons.l04_clip_objective").read_text(encoding="utf-8"))
    assert cell_problems(nb, "l04_clip_objective") == []
    assert cell_problems(nb, "l05_penalty_vs_clip") == ["no `import lessons.l05_penalty_vs_clip as lesson`"]
    cells = code_cells(nb)
    (narr,) = [c for c in cells if "lesson.narrative(" in source(c)]
    saved = narr["source"]
    narr["source"] = "# print(lesson.narrative(results))"           # a comment is no call
    assert "not run, narrative and plot" in cell_problems(nb, "l04_clip_objective")[0]
    narr["source"], narr["outputs"] = saved, []
    assert cell_problems(nb, "l04_clip_objective") == ["the narrative cell printed nothing"]
    (params,) = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    params["metadata"]["tags"] = []
    assert cell_problems(nb, "l04_clip_objective") == ["0 code cells tagged 'parameters', expected one"]


def test_every_docstring_has_the_sections_the_converter_reads():
    import importlib
    for n in LESSONS:
        parts = nbgen.split_docstring(importlib.import_module(n).__doc__)
        missing = {"title", "pipeline", "exercises"} - set(parts)
        assert not missing, f"{n}: its docstring lacks {sorted(missing)} (CONTRIBUTING 'Notebooks')"
        assert parts["title"].startswith("# Lesson")


DOC = r'''Lesson 99 - demo: a made-up lesson
whose title wraps.

Legend: B batch, T tokens.

Pipeline step: the step, with <bos> and ``code <x>`` and $a < b$.

Paper: plain text, indented after a line ending in a colon:
    L^CLIP(theta) = E_t[ min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t) ]          eq. (7)
and in LaTeX:

$$
L^{CLIP}(\theta) = \hat{\mathbb{E}}_t\left[\min\left(r_t(\theta) \hat A_t,\,
    \operatorname{clip}(r_t(\theta), 1 - \epsilon, 1 + \epsilon) \hat A_t\right)\right] \qquad (7)
$$

with inline $r_t = \exp(\log\pi_\theta - \log\pi_{old})$, and a model written::

    state   s_t = prompt + tokens

(a) a hanging item
    continued here, with a formula inside the item:

        k1 = x        k3 = e^{-x} - 1 + x

    and a paragraph of the item;
(b) the next item.

The figure (from --full: 3 seeds (~20 s each)): (a) one panel.

Exercises:
1. One.
2. Two.
'''


def test_the_converter_renders_plain_text_and_latex():
    parts = nbgen.split_docstring(DOC)
    assert list(parts) == ["title", "intro", "pipeline", "paper", "figure", "exercises"]
    assert parts["title"] == "# Lesson 99 - demo\n\nA made-up lesson whose title wraps."
    assert parts["intro"] == "**Legend:** B batch, T tokens."
    assert parts["pipeline"] == "## Pipeline step\n\nThe step, with &lt;bos> and ``code <x>`` and $a < b$."
    paper = parts["paper"]
    assert "\n```text\nL^CLIP(theta) = E_t[ min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t) ]          eq. (7)\n```\n" in paper
    assert ("$$\nL^{CLIP}(\\theta) = \\hat{\\mathbb{E}}_t\\left[\\min\\left(r_t(\\theta) \\hat A_t,\\,\n"
            "\\operatorname{clip}(r_t(\\theta), 1 - \\epsilon, 1 + \\epsilon) \\hat A_t\\right)\\right] \\qquad (7)\n$$") in paper
    assert "$r_t = \\exp(\\log\\pi_\\theta - \\log\\pi_{old})$, and a model written:\n\n```text\nstate   s_t = prompt + tokens\n```" in paper
    assert ("(a) a hanging item\ncontinued here, with a formula inside the item:\n\n```text\n"
            "k1 = x        k3 = e^{-x} - 1 + x\n```\n\nand a paragraph of the item;\n\n(b) the next item.") in paper
    assert parts["figure"] == "## The figure\n\n*From --full: 3 seeds (~20 s each).*\n\n(a) one panel."
    assert parts["exercises"] == "## Exercises\n\n1. One.\n2. Two."
    with pytest.raises(ValueError, match="two 'Exercises' sections"):
        nbgen.split_docstring(DOC + "\nExercises: more.\n")


def test_the_executor_sets_the_parameters_cell():
    nb = json.loads(nbgen.notebook_path("lessons.l04_clip_objective").read_text(encoding="utf-8"))
    nbgen.set_parameters(nb, QUICK=True)
    (cell,) = [c for c in code_cells(nb) if "parameters" in c["metadata"].get("tags", [])]
    assert re.search(r"^QUICK = True\b", source(cell), re.M) and not re.search(r"^QUICK = False", source(cell), re.M)
    with pytest.raises(ValueError, match="no line `STEPS = ...`"):
        nbgen.set_parameters(nb, STEPS=3)
    cell["metadata"]["tags"] = []
    with pytest.raises(ValueError, match="one cell tagged 'parameters', found 0"):
        nbgen.set_parameters(nb, QUICK=True)


def test_the_command_needs_the_extra_and_checks_its_flags(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "jupytext", None)           # as in an install without the extra
    assert main(["notebooks", "4", "--no-execute"]) == 2
    assert 'pip install -e ".[notebooks]"' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["notebooks", "--quick"])
    assert "--quick goes with --verify" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:                        # one line, exit status 2
        main(["notebooks", "99"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("python -m lessons notebooks: error: no lesson matches '99'")
