"""The course index: `python -m lessons` lists every lesson; numbers and slugs resolve; every lesson
module has the one skeleton of CONTRIBUTING (docstring, run, narrative, main, plot last) and a smoke test."""
from pathlib import Path

import pytest

from lessons.__main__ import discover, first_line, main, resolve

ROOT = Path(__file__).resolve().parents[2]


def test_the_lessons_in_order_each_with_a_smoke_test():
    names = discover()
    numbers = [int(n.split(".")[1][1:3]) for n in names]
    assert numbers == sorted(set(numbers)) and set(range(1, 23)) <= set(numbers)
    for n in names:
        slug = n.split(".")[1]
        assert (ROOT / "tests" / "lessons" / f"test_{slug}.py").is_file(), f"no smoke test for {slug}"
        assert first_line(n).startswith("Lesson"), f"{slug}: the docstring's first line names the lesson"


def test_every_lesson_has_the_one_skeleton():
    """CONTRIBUTING "Lessons": run(quick, seed), narrative(results), main() = lesson_main(...), plot() last."""
    import ast
    import importlib
    import inspect
    for n in discover():
        mod = importlib.import_module(n)
        for fn in ("run", "narrative", "plot", "main"):
            assert callable(getattr(mod, fn, None)), f"{n} lacks {fn}()"
        params = inspect.signature(mod.run).parameters
        assert "quick" in params and "seed" in params, f"{n}.run must take quick= and seed="
        assert len(inspect.signature(mod.narrative).parameters) == 1, f"{n}.narrative takes the results only"
        tree = ast.parse(Path(mod.__file__).read_text())
        defs = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
        assert defs[-1] == "plot", f"{n}: plot() is the last function (found {defs[-1]})"
        assert defs.index("run") < defs.index("narrative") < defs.index("main") < defs.index("plot"), \
            f"{n}: the order is run, narrative, main, plot"
        main_fn = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
        body = main_fn.body
        assert len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call) \
            and getattr(body[0].value.func, "id", None) == "lesson_main", f"{n}: main() is one call of lesson_main"


def test_resolve_numbers_and_slugs():
    names = discover()
    assert resolve("4", names) == "lessons.l04_clip_objective"
    assert resolve("l04", names) == "lessons.l04_clip_objective"
    assert resolve("clip_objective", names) == "lessons.l04_clip_objective"
    with pytest.raises(SystemExit, match="no lesson matches"):
        resolve("nope", names)


def test_listing_prints_one_line_per_lesson(capsys):
    assert main([]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(discover()) and lines[3].startswith("l04_clip_objective")
    assert any(line.startswith("l22_exact_gradients") for line in lines)


def test_running_one_lesson_quick(capsys):
    assert main(["4", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "lessons.l04_clip_objective" in out and "figure:" in out
