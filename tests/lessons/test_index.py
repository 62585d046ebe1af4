"""The course index: `python -m lessons` lists every lesson; numbers and slugs resolve; every lesson
module has the one skeleton of CONTRIBUTING (docstring, run, narrative, main, plot last) and a smoke test."""
import shutil
import subprocess
from pathlib import Path

import pytest

import lessons.__main__ as index
from lessons.__main__ import discover, first_line, main, resolve
from lessons._common import FIGURES_DIR, RUN_FIGURES_DIR, check_figures_size, lesson_args, output_path

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


def test_listing_prints_one_line_per_lesson_then_how_to_run_one(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    n = len(discover())
    assert lines[3].startswith("l04_clip_objective") and lines[n - 1].startswith("l22_exact_gradients")
    usage = "\n".join(lines[n:])
    for how in ("python -m lessons 4", "python -m lessons.l04_clip_objective", "--quick", "--out", "runs/cache"):
        assert how in usage, f"the listing does not say {how!r}"


def test_running_one_lesson_quick(capsys):
    assert main(["4", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "lessons.l04_clip_objective" in out and "figure:" in out


def test_a_students_run_writes_outside_the_tracked_tree():
    """Issue 20: a lesson's default run writes runs/figures/ (git-ignored), never the committed figures/."""
    args = lesson_args(None, [])
    path = output_path("lessons.l07_gae", args)
    assert path == RUN_FIGURES_DIR / "l07_gae.png" and path.parent != FIGURES_DIR
    rel = path.relative_to(ROOT)
    assert rel.parts[0] == "runs" and "runs/" in (ROOT / ".gitignore").read_text().splitlines()
    if (ROOT / ".git").exists() and shutil.which("git"):          # the repository's own answer, where it has one
        assert subprocess.run(["git", "check-ignore", "-q", str(rel)], cwd=ROOT).returncode == 0
    quick = output_path("lessons.l07_gae", lesson_args(None, ["--quick"]))
    assert ROOT not in quick.parents
    assert output_path("lessons.l07_gae", lesson_args(None, ["--out", "/tmp/x"])) == Path("/tmp/x/l07_gae.png")


def test_only_figures_writes_the_committed_figure():
    args = lesson_args(None, ["--figures"])
    assert output_path("lessons.l07_gae", args) == FIGURES_DIR / "l07_gae.png" == ROOT / "figures" / "l07_gae.png"
    check_figures_size(args, has_full=False)                       # lessons without --full: the default size
    with pytest.raises(SystemExit, match="--full"):
        check_figures_size(args, has_full=True)
    with pytest.raises(SystemExit, match="--quick"):
        check_figures_size(lesson_args(None, ["--figures", "--quick"]), has_full=False)
    with pytest.raises(SystemExit, match="seed 0"):
        check_figures_size(lesson_args(None, ["--figures", "--seed", "1"]), has_full=False)
    with pytest.raises(SystemExit):                                # one place at a time
        lesson_args(None, ["--figures", "--out", "/tmp/x"])


@pytest.mark.parametrize("argv, expect", [
    (["all"], ["--full", "--figures"]),                # the maintainer's regeneration: figures/
    (["4", "--figures"], ["--full", "--figures"]),
    (["4"], []),                                       # a student's run: runs/figures/
    (["all", "--default"], []),
    (["all", "--quick"], ["--quick"]),
])
def test_which_runs_write_figures(monkeypatch, capsys, argv, expect):
    import lessons.l04_clip_objective as l04
    seen, results = [], []
    monkeypatch.setattr(index, "discover", lambda: ["lessons.l04_clip_objective"])
    monkeypatch.setattr(l04, "main", lambda a: seen.append(a))
    monkeypatch.setattr(index, "write_results", lambda which: results.append(which) or 0)
    assert index.main(argv) == 0
    assert seen == [expect + ["--seed", "0"]]
    # a regeneration of figures also writes the results files (docs/results/) of the same lessons
    assert results == ([] if "--figures" not in expect else [["all"]] if argv == ["all"] else [["l04_clip_objective"]])
