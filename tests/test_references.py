"""The project refers only to files it ships: every path named in the code, the docs and the README exists.

A reader who follows "see rl/gae.py" or "DESIGN.md" must find the file in this repository. Paths are
recognised as ``<folder>/<...>.<ext>`` under one of the project's folders (a bare ``rl/gae.py`` is looked up
under ``minippo/`` too) and as bare top-level documents (``README.md``); run-folder files (``metrics.jsonl``,
``samples.md`` inside a run) are not paths of the repository and are not matched.
"""
import re
import subprocess
from pathlib import Path

import minippo

ROOT = Path(minippo.__file__).resolve().parents[1]
FOLDERS = ("minippo", "lessons", "tests", "docs", "figures", "notebooks", ".ci")
SUBPACKAGES = ("nn", "rl", "rlhf", "rlvr", "classic", "toy", "studies", "bench", "exercises")
EXT = r"(?:py|md|png|ipynb|cfg|toml)"
PATH = re.compile(r"(?<![\w./-])((?:\.?[\w-]+/)+[\w.-]+\." + EXT + r"|[A-Z][A-Z_]+\.md)(?![\w/])")


def tracked_text_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    names = out.stdout.split() if out.returncode == 0 else [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")]
    for n in names:
        if n.startswith("tests/"):
            continue              # tests name missing files on purpose (to show a check can fail)
        if n.endswith((".py", ".md", ".cfg", ".toml")) or n == ".ci/run":
            yield ROOT / n


def exists(ref: str) -> bool:
    if (ROOT / ref).exists():
        return True
    first = ref.split("/")[0]
    if first in SUBPACKAGES and (ROOT / "minippo" / ref).exists():
        return True
    return False


def references(text: str):
    for m in PATH.finditer(text):
        ref = m.group(1)
        first = ref.split("/")[0]
        if "/" not in ref or first in FOLDERS or first in SUBPACKAGES:
            if "<" in ref or "*" in ref or "NN" in ref or "NAME" in ref:
                continue          # a pattern (lNN_<slug>.py), not a file
            yield ref


def test_every_referenced_file_exists():
    missing = []
    for path in tracked_text_files():
        if not path.exists():
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for ref in references(line):
                if not exists(ref):
                    missing.append(f"{path.relative_to(ROOT)}:{lineno}: {ref}")
    assert not missing, "references to files this repository does not ship:\n" + "\n".join(missing)


def test_the_checker_sees_a_missing_file():
    assert list(references("see DESIGN.md and rl/gae.py")) == ["DESIGN.md", "rl/gae.py"]
    assert not exists("DESIGN.md") and exists("rl/gae.py") and exists("README.md")
    assert list(references("lessons/lNN_<slug>.py, runs/x/metrics.jsonl")) == []
