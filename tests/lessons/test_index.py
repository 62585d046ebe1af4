"""The course index: `python -m lessons` lists every lesson; numbers and slugs resolve; every lesson
module has the one skeleton of CONTRIBUTING (docstring, run, narrative, main, plot last) and a smoke test."""
import shutil
import subprocess
from pathlib import Path

import pytest

import lessons.__main__ as index
from lessons.__main__ import discover, first_line, main, resolve
from lessons._common import FIGURES_DIR, RUN_FIGURES_DIR, check_figures_size, lesson_args, lesson_main, output_path
from minippo.runs import user_temp_dir

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


def test_resolve_numbers_and_slugs(capsys):
    names = discover()
    assert resolve("4", names) == "lessons.l04_clip_objective"
    assert resolve("l04", names) == "lessons.l04_clip_objective"
    assert resolve("clip_objective", names) == "lessons.l04_clip_objective"
    with pytest.raises(SystemExit) as exc:                     # a command-line mistake: one line, exit status 2
        resolve("nope", names)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "no lesson matches 'nope'" in err


def test_listing_prints_one_line_per_lesson_then_how_to_run_one(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    n = len(discover())
    assert lines[3].startswith("l04_clip_objective") and lines[n - 1].startswith("l23_verifiable_rewards")
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
    assert ROOT not in quick.parents and quick.parent == user_temp_dir("quick_figures")   # this user's own folder
    assert output_path("lessons.l07_gae", lesson_args(None, ["--out", "/tmp/x"])) == Path("/tmp/x/l07_gae.png")


def test_only_figures_writes_the_committed_figure(capsys):
    args = lesson_args(None, ["--figures"])
    assert output_path("lessons.l07_gae", args) == FIGURES_DIR / "l07_gae.png" == ROOT / "figures" / "l07_gae.png"
    check_figures_size(args, has_full=False)                       # lessons without --full: the default size
    for argv, has_full, why in ((["--figures"], True, "add --full"), (["--figures", "--quick"], False, "--quick"),
                                (["--figures", "--seed", "1"], False, "seed 0"),
                                (["--figures", "--out", "/tmp/x"], False, "not allowed with")):   # one place at a time
        with pytest.raises(SystemExit) as exc:                     # one line naming the flag, exit status 2
            check_figures_size(lesson_args(None, argv), has_full=has_full)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and why in err, err


@pytest.mark.parametrize("argv, expect", [
    (["all"], ["--full", "--figures"]),                # the maintainer's regeneration: figures/
    (["4", "--figures"], ["--full", "--figures"]),
    (["4"], []),                                       # a student's run: runs/figures/
    (["all", "--default"], []),
    (["all", "--quick"], ["--quick"]),
])
def test_which_runs_write_figures(monkeypatch, capsys, argv, expect):
    import lessons.l04_clip_objective as l04
    seen = []
    monkeypatch.setattr(index, "discover", lambda: ["lessons.l04_clip_objective"])
    monkeypatch.setattr(l04, "main", lambda a: seen.append(a))
    assert index.main(argv) == 0
    assert seen == [expect + ["--seed", "0"]]


# ---- issue 26 item 2: a lesson's mistakes cost seconds ----------------------------------------

def fake_lesson(calls, *, interrupt=False):
    """run / narrative / plot of a lesson that records what ran (``interrupt``: Ctrl-C inside run)."""
    def run(quick=False, seed=0):
        calls.append("run")
        if interrupt:
            raise KeyboardInterrupt
        return {"x": 1}

    def plot(results, path):
        calls.append("plot")
        Path(path).write_bytes(b"png")
    return run, lambda r: "the narrative", plot


def test_a_bad_out_is_refused_before_the_lesson_computes(tmp_path, capsys):
    """`python -m lessons 4 --out README.md` ran the whole lesson, then died with a traceback, losing the figure."""
    calls = []
    (tmp_path / "README.md").write_text("keep")
    for out in (tmp_path / "README.md", tmp_path / "README.md" / "sub"):
        with pytest.raises(SystemExit) as exc:
            lesson_main("Lesson 99 - fake", "lessons.l99_fake", *fake_lesson(calls), ["--out", str(out)])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and err.startswith(
            "python -m lessons.l99_fake: error: --out ") and "Traceback" not in err, err
    assert calls == [] and (tmp_path / "README.md").read_text() == "keep"
    with pytest.raises(SystemExit) as exc:
        main(["4", "--out", str(tmp_path / "README.md")])
    assert exc.value.code == 2 and "a file, not a folder" in capsys.readouterr().err
    lesson_main("Lesson 99 - fake", "lessons.l99_fake", *fake_lesson(calls), ["--out", str(tmp_path / "new")])
    assert calls == ["run", "plot"] and (tmp_path / "new" / "l99_fake.png").read_bytes() == b"png"


def test_ctrl_c_in_a_lesson_is_one_line_and_exit_130(tmp_path, capsys):
    calls = []
    with pytest.raises(SystemExit) as exc:
        lesson_main("Lesson 99 - fake", "lessons.l99_fake", *fake_lesson(calls, interrupt=True),
                    ["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exc.value.code == 130 and err == "interrupted the lesson l99_fake; its figure was not written\n"
    assert calls == ["run"] and not (tmp_path / "l99_fake.png").exists()


def test_ctrl_c_in_a_real_lesson_process(tmp_path):
    """A real SIGINT to `python -m lessons 8`: one line on stderr, exit status 130, no traceback."""
    import signal
    import sys
    import time
    out = tmp_path / "figures"
    p = subprocess.Popen([sys.executable, "-m", "lessons", "8", "--out", str(out)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not out.exists() and p.poll() is None:                       # --out checked (and made): the lesson runs
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("interrupted the lesson l08_ppo_cartpole")
