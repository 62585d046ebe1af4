"""docs/exercises.md is the contract teachers write against: it must match the code, exercise by exercise;
and each exercise's lesson tells students how to start it."""
import ast
import importlib
import re
from pathlib import Path

from minippo.exercises import EXERCISES

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "exercises.md").read_text(encoding="utf-8")


def problems(doc: str) -> list[str]:
    """Where ``doc`` disagrees with the exercises: sections, signatures, the list of checks."""
    parts = re.split(r"^## `(\w+)`", doc, flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2]))
    if list(sections) != list(EXERCISES):
        return [f"sections {list(sections)} are not the exercises {list(EXERCISES)}"]
    found = []
    for name, module in EXERCISES.items():
        m = importlib.import_module(module)
        signature = re.search(r"^def .*:$", m.TEMPLATE, re.M).group(0)
        if signature not in sections[name]:
            found.append(f"{name}: the signature is not {signature}")
        if re.findall(r"^- `(.+)`$", sections[name], re.M) != [c.name for c in m.cases()]:
            found.append(f"{name}: the documented checks differ from the code's")
    return found


def test_every_exercise_has_a_section_with_its_signature_and_exactly_its_checks():
    assert problems(DOC) == []


def test_the_doc_check_can_fail():
    assert problems(DOC.replace("- `case 4: A<0, r<1-eps (A=-2, r=0.5): value`\n", "")) == [
        "clip: the documented checks differ from the code's"]
    assert problems(DOC.replace("def gae(rewards, values, mask, gamma, lam):", "def gae(rewards, values):")) == [
        "gae: the signature is not def gae(rewards, values, mask, gamma, lam):"]


def test_each_exercises_lesson_says_how_to_start_it():
    for name, module in EXERCISES.items():
        lesson = ROOT / importlib.import_module(module).LESSON
        doc = ast.get_docstring(ast.parse(lesson.read_text(encoding="utf-8")))
        assert f"`minippo exercise start {name}`" in doc, f"{lesson.name} does not say `minippo exercise start {name}`"
