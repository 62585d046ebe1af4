"""Exercises for the classroom: the student writes one function, the project's own checks grade it.

    minippo exercise list                       one line per exercise
    minippo exercise start NAME [--dir D]       write D/NAME.py (default D = ./exercises): the function to
                                                write, its docstring (equation, shapes, conventions) and a
                                                body that raises NotImplementedError
    minippo exercise check NAME [--dir D]       import D/NAME.py by path and run the checks: a table
                                                (check, expected, got, pass), each hint once, under
                                                the first failing case that has it;
                                                exit status 0 only when every check passes
    minippo exercise solution NAME              the reference for teachers

Each exercise is one module of this package holding the template text, the reference solution, the
checks and their hints (:mod:`minippo.exercises.grading` runs them). The contracts are documented for
teachers in ``docs/exercises.md``; ``tests/exercises/`` feeds the checker the reference and several
plausible wrong implementations of each exercise and asserts that each fails with the right case named.
"""
from __future__ import annotations

#: exercise name -> the module that holds it (imported when that exercise is used); the order of `list`
EXERCISES: dict[str, str] = {
    "clip": "minippo.exercises.clip",
    "value_clip": "minippo.exercises.value_clip",
    "gae": "minippo.exercises.gae",
    "k3": "minippo.exercises.k3",
    "layernorm_backward": "minippo.exercises.layernorm_backward",
    "bradley_terry": "minippo.exercises.bradley_terry",
    "token_rewards": "minippo.exercises.token_rewards",
    "pass_at_k": "minippo.exercises.pass_at_k",
    "zero_variance": "minippo.exercises.zero_variance",
    "off_policy_weights": "minippo.exercises.off_policy_weights",
}
