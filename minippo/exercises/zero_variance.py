"""Exercise ``zero_variance``: which prompt groups carry no signal for a group-relative method (DAPO's filter).

Legend: B batch (responses), G prompt groups, n group size, B = G * n (rows grouped by prompt contiguously).

The student writes ``zero_variance_groups(rewards, group_size) -> (G,) bool``: True for a group whose n rewards
are all equal, as :func:`minippo.rl.dapo.zero_variance_groups` computes it: exactly the groups whose GRPO
advantages are all 0 (RLOO's: to rounding, exactly for 0/1 rewards). Checked: all right, all wrong,
mixed; the contiguous layout; rewards that are not 0/1; a difference of 1e-9 (still a signal); equal
rewards whose std rounds to 1e-17, not 0 (0.1 x 3); one group; the shape.
"""
from __future__ import annotations

import numpy as np

from minippo.exercises.grading import Case, StudentError, call
from minippo.rl.dapo import zero_variance_groups as library_zero_variance_groups

NAME = "zero_variance"
FUNCTION = "zero_variance_groups"
SUMMARY = "which prompt groups have all-equal rewards: no GRPO signal (DAPO's dynamic-sampling filter)"
LESSON = "minippo/rl/dapo.py"               # lesson 23 (verifiable rewards) will take it over
REFERENCE = "minippo.rl.dapo.zero_variance_groups"

_HEADER = '''"""minippo exercise `zero_variance`: the groups that teach a group-relative method nothing.

GRPO, Dr. GRPO and RLOO sample n answers per prompt and give each answer its reward minus the mean reward of
its group (GRPO also divides by the group's std). When the n rewards of a group are all equal (a 0/1 verifier:
every answer right, or every answer wrong) every advantage of the group is 0, and so is its gradient. DAPO's
"dynamic sampling" (Yu et al. 2025, arXiv:2503.14476) drops such groups and samples more prompts instead.

Write the body of `zero_variance_groups` below, then run the project's checks on it:

    minippo exercise check zero_variance          (add --dir D when this file is not in ./exercises)
"""
import numpy as np


'''

_SIGNATURE = '''def zero_variance_groups(rewards, group_size):
    """Which prompt groups have all n rewards equal.

    Parameters
    ----------
    rewards : (B,) float64, one reward per answer, B = G * n; the rows of one prompt are CONTIGUOUS:
        group g is rewards[g*n : (g+1)*n].
    group_size : int n >= 2.

    Returns
    -------
    (G,) bool array: True where the group's rewards are all equal (compared exactly: a group whose
    rewards differ at all still gets non-zero advantages).
    """
'''

_TODO = '''    raise NotImplementedError("zero_variance_groups: write the body (the docstring says what)")
'''

_SOLUTION_BODY = '''    groups = rewards.reshape(len(rewards) // group_size, group_size)      # (G, n), one prompt per row
    return groups.max(axis=1) == groups.min(axis=1)                         # all equal: max == min
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY


def _student(fn, rewards, n):
    out = np.asarray(call(fn, rewards, n))
    G = len(rewards) // n
    if out.shape != (G,):
        raise StudentError(f"returned shape {out.shape}", f"return one bool per group: shape (G,) = ({G},)")
    if out.dtype != bool:
        raise StudentError(f"returned dtype {out.dtype}", "return a bool array (True: all rewards equal)")
    return out


def _hint(got, rewards, n) -> str:
    want = library_zero_variance_groups(rewards, n)
    if np.array_equal(got, ~want):
        return "these are the groups that KEEP a signal: True must mark the all-equal ones"
    strided = rewards.reshape(n, len(rewards) // n).T                       # group g = rows g, g+G, g+2G, ...
    if np.array_equal(got, strided.max(axis=1) == strided.min(axis=1)):
        return "group g is rewards[g*n : (g+1)*n] (contiguous): reshape to (G, n), not (n, G)"
    return "a group has no signal when ALL its n rewards are equal (max == min), whatever their value"


def _case(name: str, rewards, n: int, hint: str | None = None) -> Case:
    rewards = np.asarray(rewards, dtype=np.float64)
    want = library_zero_variance_groups(rewards, n)

    def run(fn):
        got = _student(fn, rewards, n)
        return str(got.astype(int).tolist()), bool(np.array_equal(got, want)), hint or _hint(got, rewards, n)
    return Case(name, str(want.astype(int).tolist()), run)


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    return [
        _case("0/1 rewards: all right, all wrong, mixed (n = 4)", [1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1], 4),
        _case("groups are contiguous rows (n = 3, G = 4)", [1, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1], 3),
        _case("rewards other than 0/1 (overlong penalty)", [-0.25, -0.25, 0.5, 0.5, 0.75, 0.5], 2,
              hint="the rewards need not be 0 or 1 (a length penalty makes them -0.25, 0.75, ...): test that all n "
                   "are EQUAL, not that they are all 0 or all 1"),
        _case("a difference of 1e-9 is still a signal", [0.3, 0.3 + 1e-9, 0.7, 0.7], 2,
              hint="compare exactly (max == min): rewards 1e-9 apart still give non-zero advantages, and GRPO "
                   "divides them by a std of ~1e-9"),
        _case("equal rewards that are not exact in binary (0.1, n = 3)", [0.1, 0.1, 0.1, 0.1, 0.2, 0.1], 3,
              hint="the first group's rewards are all equal (0.1): no signal. Their mean rounds to "
                   "0.10000000000000002, so np.std gives 1.4e-17, not 0: compare the rewards themselves (max == min)"),
        _case("one group", [0.0, 0.0, 0.0, 0.0, 0.0], 5),
        _case("16 groups of 8, random 0/1", np.random.default_rng(0).integers(0, 2, 128) *
              (np.random.default_rng(1).random(16).repeat(8) < 0.7), 8),
    ]
