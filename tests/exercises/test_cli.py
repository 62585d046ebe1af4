"""`minippo exercise list / start / check / solution`: files, exit codes, and one-line errors."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minippo.cli import main
from minippo.exercises import EXERCISES
from minippo.exercises.cli import exercise

ROOT = Path(__file__).resolve().parents[2]


def test_list_prints_one_line_per_exercise(capsys):
    assert main(["exercise", "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(EXERCISES)
    assert {"clip", "gae", "value_clip", "k3", "layernorm_backward", "token_rewards", "bradley_terry"} <= set(EXERCISES)


def test_start_writes_the_template_in_exercises_of_the_current_folder_and_refuses_to_overwrite(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["exercise", "start", "clip"]) == 0
    path = tmp_path / "exercises" / "clip.py"
    assert path.read_text() == exercise("clip").TEMPLATE
    assert "minippo exercise check clip" in capsys.readouterr().out
    path.write_text("# my work\n")
    assert main(["exercise", "start", "clip"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "exists" in err and "--force" in err
    assert path.read_text() == "# my work\n"
    assert main(["exercise", "start", "clip", "--force"]) == 0
    assert path.read_text() == exercise("clip").TEMPLATE


@pytest.mark.parametrize("name", list(EXERCISES))
def test_check_fails_on_the_template_and_passes_on_the_solution(name, tmp_path, capsys):
    assert main(["exercise", "start", name, "--dir", str(tmp_path)]) == 0
    assert main(["exercise", "check", name, "--dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "raised NotImplementedError" in out and "FAIL" in out and "checks fail" in out
    assert main(["exercise", "solution", name]) == 0
    (tmp_path / f"{name}.py").write_text(capsys.readouterr().out)
    assert main(["exercise", "check", name, "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and out.strip().endswith("checks pass")


@pytest.mark.parametrize("source,message,has_traceback", [
    ("def clipped_policy_loss(:\n", "line 1: SyntaxError", True),
    ("import numpy as np\n\ndef other(x):\n    return x\n", "defines no function `clipped_policy_loss`", False),
    ("raise RuntimeError('boom')\n", "line 1: importing it raised RuntimeError: boom", True),
])
def test_a_broken_file_is_one_line_without_traceback(source, message, has_traceback, tmp_path, capsys):
    (tmp_path / "clip.py").write_text(source)
    assert main(["exercise", "check", "clip", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert main(["exercise", "check", "clip", "--dir", str(tmp_path), "--debug"]) == 1
    assert ("Traceback" in capsys.readouterr().err) == has_traceback


def test_missing_file_and_unknown_exercise(tmp_path, capsys):
    assert main(["exercise", "check", "gae", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "not found" in err and "minippo exercise start gae" in err and len(err.splitlines()) == 1
    assert main(["exercise", "start", "clp", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown exercise 'clp'" in err and "clip" in err and len(err.splitlines()) == 1


def test_debug_shows_the_students_traceback(tmp_path, capsys):
    (tmp_path / "k3.py").write_text("def k3(logp, logp_ref):\n    return 1 / 0\n")
    assert main(["exercise", "check", "k3", "--dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "raised ZeroDivisionError" in out and "Traceback" not in out
    assert main(["exercise", "check", "k3", "--dir", str(tmp_path), "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().out


def test_in_a_fresh_shell_start_check_fails_then_a_correct_file_passes(tmp_path):
    """The commands a student types, as a subprocess from the repository root."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda *a: subprocess.run([sys.executable, "-m", "minippo", "exercise", *a, "--dir", str(tmp_path)],  # noqa
                                    cwd=ROOT, env=env, capture_output=True, text=True)
    assert run("start", "clip").returncode == 0
    failed = run("check", "clip")
    assert failed.returncode == 1 and "case 4: A<0, r<1-eps" in failed.stdout and failed.stderr == ""
    (tmp_path / "clip.py").write_text(exercise("clip").SOLUTION)
    passed = run("check", "clip")
    assert passed.returncode == 0, passed.stdout + passed.stderr
