"""The house rules of the layout, read from the code: imports point one way, and sit at the top of files.

    lessons -> studies -> (rlhf, rlvr, classic, toy) -> (rl, nn) -> the shared base modules; rlvr -> rlhf
    rl knows no model (nothing from nn); nn knows nothing of RL; the library never imports studies or lessons.

A new import that breaks a rule fails here with the file, the line and the rule it breaks.
"""
import ast
from pathlib import Path

import minippo

ROOT = Path(minippo.__file__).resolve().parents[1]
BASE = {"minippo._lazy", "minippo.checks", "minippo.io", "minippo.runs", "minippo.progress", "minippo.blas",
        "minippo.malloc", "minippo.kernels", "minippo.flags",
        "minippo.plotting", "minippo.cli", "minippo.__main__"}
# part -> the parts it may import (besides itself and the base modules)
ALLOWED = {
    "base": set(),
    "facade": {"nn", "rl", "toy", "classic", "rlhf"},      # minippo/__init__.py's lazy re-exports
    "nn": set(),
    "rl": set(),
    "toy": {"nn", "rl"},
    "classic": {"nn", "rl"},
    "rlhf": {"nn", "rl"},
    "rlvr": {"nn", "rl", "rlhf"},                           # the SFT loop, generation and PPO of rlhf, reused
    "bench": {"nn", "rl", "classic", "rlhf"},
    "exercises": {"nn", "rl", "rlhf", "bench"},           # the checks grade students against the library
    "studies": {"nn", "rl", "toy", "classic", "rlhf", "rlvr"},
    "lessons": {"nn", "rl", "toy", "classic", "rlhf", "rlvr", "studies", "bench"},
}


def part_of(module: str) -> str | None:
    """The part of the house a dotted module name belongs to (None: not ours)."""
    if module == "lessons" or module.startswith("lessons."):
        return "lessons"
    if module == "minippo":
        return "facade"
    if any(module == b or module.startswith(b + ".") for b in BASE):
        return "base"
    if module.startswith("minippo."):
        return module.split(".")[1]
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path):
    """``(lineno, imported module, inside a function?, source line, previous line)`` for every import,
    including the lazy re-export tables (``_LAZY = {name: "module"}``) and relative imports."""
    src = path.read_text(encoding="utf-8")
    lines = src.splitlines()
    tree = ast.parse(src)
    me = module_name(path)
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_LAZY" for t in node.targets):
            targets = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                       and c.value.startswith("minippo.")]
        for t in targets:
            line = lines[node.lineno - 1]
            prev = lines[node.lineno - 2] if node.lineno >= 2 else ""
            yield node.lineno, t, id(node) in in_function, line, prev


def sources():
    yield from sorted((ROOT / "minippo").rglob("*.py"))
    yield from sorted((ROOT / "lessons").rglob("*.py"))


def test_imports_point_one_way():
    broken = []
    for path in sources():
        me = part_of(module_name(path))
        for lineno, target, _, line, _ in imports_of(path):
            other = part_of(target)
            if other is None or other == me or other in ("base", "facade"):
                continue
            if other not in ALLOWED[me]:
                broken.append(f"{path.relative_to(ROOT)}:{lineno}: {me} imports {other} ({target}): {line.strip()}")
    assert not broken, "imports that break the layout's one-way rule:\n" + "\n".join(broken)


def test_imports_sit_at_the_top_of_files_unless_a_comment_says_why_they_are_lazy():
    """An import inside a function is allowed only with a comment saying why (``lazy:`` ...): e.g. numba
    kernels that ``import minippo`` must not compile, an optional dependency, a slow plotting library."""
    hidden = []
    for path in sorted((ROOT / "minippo").rglob("*.py")):
        seen = set()
        for lineno, target, inside, line, prev in imports_of(path):
            if inside and lineno not in seen and "lazy" not in line and "lazy" not in prev:
                seen.add(lineno)
                hidden.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not hidden, "imports inside functions without a comment saying why:\n" + "\n".join(hidden)


def test_the_rules_can_fail():
    """The checker sees a violation when there is one (a test that cannot fail checks nothing)."""
    assert part_of("minippo.rl.gae") == "rl" and part_of("minippo.nn.gpt") == "nn"
    assert "nn" not in ALLOWED["rl"] and "studies" not in ALLOWED["rlhf"] and "lessons" not in ALLOWED["studies"]
    assert "rlvr" not in ALLOWED["rlhf"] and not {"studies", "lessons"} & ALLOWED["rlvr"]
    fake = ROOT / "minippo" / "rl" / "gae.py"
    found = [t for _, t, _, _, _ in imports_of(fake)]
    assert any(part_of(t) == "base" for t in found)
