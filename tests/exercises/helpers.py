"""Feeding the checker of an exercise: the reference solution, the template, and mutants (the reference
with one plausible mistake, written as a one-line edit of its source)."""
from __future__ import annotations

from minippo.exercises.grading import grade


def compile_source(source: str, function: str):
    """The function ``function`` defined by ``source`` (a whole exercise file)."""
    namespace: dict = {}
    exec(compile(source, "<exercise>", "exec"), namespace)
    return namespace[function]


def solution(module):
    return compile_source(module.SOLUTION, module.FUNCTION)


def template(module):
    return compile_source(module.TEMPLATE, module.FUNCTION)


def mutant(module, *edits: tuple[str, str]):
    """The reference solution with each ``(old, new)`` edit applied (each ``old`` must occur exactly once)."""
    source = module.SOLUTION
    for old, new in edits:
        assert source.count(old) == 1, f"the edit's target is not in the solution exactly once: {old!r}"
        source = source.replace(old, new)
    return compile_source(source, module.FUNCTION)


def failing(module, fn) -> dict[str, str]:
    """``{check name: hint}`` of every failing check of ``fn``."""
    return {r.name: r.hint for r in grade(module.cases(), fn) if not r.passed}


def assert_fails_naming(module, fn, *needles: str, hint: str | None = None) -> dict[str, str]:
    """``fn`` fails, every needle is part of some failing check's name, and (if given) ``hint`` is part of
    one of their hints. Returns the failures."""
    fails = failing(module, fn)
    assert fails, "a wrong implementation passed every check"
    for needle in needles:
        assert any(needle in name for name in fails), f"no failing check names {needle!r}; failing: {list(fails)}"
    if hint is not None:
        assert any(hint in h for h in fails.values()), f"no hint says {hint!r}; hints: {list(fails.values())}"
    return fails
