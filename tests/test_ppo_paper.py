"""docs/ppo_paper.md tells the truth: every function it names imports by its dotted path and its docstring
cites the row's equation (or section, algorithm) and names the paper; every lesson and test it names exists;
figure rows are demonstrated by a lesson whose docstring cites the figure."""
import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "ppo_paper.md").read_text(encoding="utf-8")

# section heading (its start) -> the words, one of which a docstring must contain to name that paper
PAPERS = {"## 1. PPO": ("PPO", "1707.06347"), "## 2. GAE": ("GAE", "1506.02438"),
          "## 3. InstructGPT": ("InstructGPT", "2203.02155"), "## 4. Ziegler": ("Ziegler", "1909.08593")}
COLUMNS = ("paper", "what", "code", "lesson", "test", "note")


def rows(doc: str) -> list[dict]:
    """Every table row under a paper's section: its cells, the paper's names, the backticked items."""
    found, names = [], None
    for line in doc.splitlines():
        if line.startswith("## "):
            names = next((v for k, v in PAPERS.items() if line.startswith(k)), None)
        if names is None or not line.startswith("| ") or line.startswith("| paper ") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        assert len(cells) == len(COLUMNS), f"a row of docs/ppo_paper.md has {len(cells)} cells: {line}"
        row = dict(zip(COLUMNS, cells))
        row["names"] = names
        for col in ("code", "lesson", "test"):
            row[col + "s"] = re.findall(r"`([^`]+)`", row[col])
        found.append(row)
    return found


def resolve(dotted: str):
    """The object at ``dotted``: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def cited_equations(text: str) -> set[int]:
    """Equation numbers a docstring cites: ``eq. (7)``, ``eqs. (11)-(12)``, ``eqs. (3), (4)``, ``Eq. (9)``."""
    numbers = set()
    for m in re.finditer(r"\beqs?\.\s*((?:\(\d+\)(?:\s*(?:-|,|and)\s*)?)+)", text, flags=re.I):
        found = [int(n) for n in re.findall(r"\((\d+)\)", m.group(1))]
        numbers.update(found)
        if "-" in m.group(1) and len(found) == 2:
            numbers.update(range(found[0], found[1] + 1))
    return numbers


def test_defined(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree))


test_defined.__test__ = False                               # a helper, not a test


def problems(row: dict) -> list[str]:
    """What is wrong with one row (empty: the row is true)."""
    label, out = row["paper"], []
    for lesson in row["lessons"]:
        if not (ROOT / lesson).is_file():
            out.append(f"{label}: lesson {lesson} does not exist")
    for test in row["tests"]:
        path, _, name = test.partition("::")
        if not (ROOT / path).is_file() or not test_defined(ROOT / path, name):
            out.append(f"{label}: test {test} does not exist")
    figure = re.match(r"Figure (\d+)", label)
    if figure:
        cites = ("Figure " + figure.group(1), "Fig. " + figure.group(1))
        for lesson in row["lessons"]:
            doc = ast.get_docstring(ast.parse((ROOT / lesson).read_text(encoding="utf-8"))) or ""
            if not any(c in doc for c in cites):
                out.append(f"{label}: the docstring of {lesson} does not cite {cites[0]}")
    for dotted in row["codes"]:
        try:
            obj = resolve(dotted)
        except (ImportError, AttributeError):
            out.append(f"{label}: {dotted} does not import")
            continue
        doc = inspect.getdoc(obj) or ""
        module_doc = inspect.getdoc(inspect.getmodule(obj)) or ""
        if not any(n in doc or n in module_doc for n in row["names"]):
            out.append(f"{label}: neither {dotted} nor its module names the paper ({' or '.join(row['names'])})")
        wanted = cited_equations(label)
        if label.startswith("eq") and not wanted <= cited_equations(doc):
            out.append(f"{label}: the docstring of {dotted} does not cite {label.split(',')[0]}")
        for word in ("Algorithm 1", "sec. 4", "sec. 2.2"):
            if label == word and word.lower() not in doc.lower():
                out.append(f"{label}: the docstring of {dotted} does not cite {word}")
    return out


def test_the_page_has_every_equation_of_the_four_papers():
    labels = {(r["names"][0], e) for r in rows(DOC) for e in cited_equations(r["paper"])}
    assert {("PPO", n) for n in range(1, 13)} <= labels
    assert {("GAE", n) for n in (16, 17, 18)} <= labels
    assert {("InstructGPT", 1), ("InstructGPT", 2), ("Ziegler", 2)} <= labels
    papers = {r["paper"] for r in rows(DOC)}
    assert {"Figure 1", "Figure 2", "Algorithm 1", "Table 1", "sec. 4", "sec. 2.2"} <= papers


@pytest.mark.parametrize("row", rows(DOC), ids=lambda r: f"{r['names'][0]} {r['paper']}")
def test_every_row_is_true(row):
    assert row["codes"] or row["lessons"], "a row names no code and no lesson"
    assert problems(row) == []


def test_the_checks_can_fail():
    """A row with a wrong equation, a missing function, lesson or test is caught (a check that cannot fail
    checks nothing)."""
    good = next(r for r in rows(DOC) if r["paper"] == "eq. (7)")
    assert problems(good) == []
    assert problems({**good, "paper": "eq. (8)"}) == [
        "eq. (8): the docstring of minippo.rl.losses.clipped_policy_loss does not cite eq. (8)"]
    assert problems({**good, "codes": ["minippo.rl.losses.no_such_loss"]}) == [
        "eq. (7): minippo.rl.losses.no_such_loss does not import"]
    assert problems({**good, "codes": [], "lessons": ["lessons/l99_nothing.py"], "tests": [
        "tests/rl/test_losses_policy.py::test_no_such_test"]}) == [
        "eq. (7): lesson lessons/l99_nothing.py does not exist",
        "eq. (7): test tests/rl/test_losses_policy.py::test_no_such_test does not exist"]
    assert problems({**good, "names": ("Nobody 1999",)}) == [
        "eq. (7): neither minippo.rl.losses.clipped_policy_loss nor its module names the paper (Nobody 1999)"]
    fig = next(r for r in rows(DOC) if r["paper"] == "Figure 1")
    assert problems({**fig, "paper": "Figure 2"}) == [
        "Figure 2: the docstring of lessons/l04_clip_objective.py does not cite Figure 2"]
    assert cited_equations("eqs. (11)-(12) and eq. (7); Eq. (9); eqs. (3), (4)") == {3, 4, 7, 9, 11, 12}
