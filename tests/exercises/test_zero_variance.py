"""The checker of exercise `zero_variance` discriminates: the reference passes, the template and plausible mistakes
fail with the right checks and hints named; np.std(...) == 0 is not (a mean of equal rewards rounds)."""
from minippo.exercises import zero_variance
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, failing, mutant, solution, template

RETURN = "return groups.max(axis=1) == groups.min(axis=1)"


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(zero_variance.cases(), solution(zero_variance)))
    assert all(r.got == "raised NotImplementedError" for r in grade(zero_variance.cases(), template(zero_variance)))


def test_strided_groups_are_named():
    fn = mutant(zero_variance, ("reshape(len(rewards) // group_size, group_size)",
                                "reshape(group_size, len(rewards) // group_size).T"))
    assert_fails_naming(zero_variance, fn, "contiguous rows", hint="reshape to (G, n), not (n, G)")


def test_the_inverted_mask_is_named():
    fn = mutant(zero_variance, (RETURN, "return groups.max(axis=1) != groups.min(axis=1)"))
    assert_fails_naming(zero_variance, fn, "all right, all wrong, mixed", hint="KEEP a signal")


def test_all_zero_or_all_one_only_is_named():
    fn = mutant(zero_variance, (RETURN, "return (groups.mean(axis=1) == 0) | (groups.mean(axis=1) == 1)"))
    assert set(failing(zero_variance, fn)) == {"rewards other than 0/1 (overlong penalty)",
                                               "a difference of 1e-9 is still a signal",
                                               "equal rewards that are not exact in binary (0.1, n = 3)"}


def test_a_tolerance_is_named():
    fn = mutant(zero_variance, (RETURN, "return groups.std(axis=1) < 1e-6"))
    assert list(failing(zero_variance, fn)) == ["a difference of 1e-9 is still a signal"]


def test_a_shares_instead_of_a_mask_is_named_by_its_shape():
    fn = mutant(zero_variance, (RETURN, "return (groups.max(axis=1) == groups.min(axis=1)).mean()"))
    assert all("shape (G,)" in h for h in failing(zero_variance, fn).values())


def test_std_equal_zero_fails_on_equal_rewards_that_are_not_exact_in_binary():
    """np.std([0.1, 0.1, 0.1]) is 1.4e-17: the group has no signal (max == min) but its std is not 0."""
    for expr in ("groups.std(axis=1) == 0", "groups.var(axis=1) == 0"):
        fn = mutant(zero_variance, (RETURN, f"return {expr}"))
        assert list(failing(zero_variance, fn)) == ["equal rewards that are not exact in binary (0.1, n = 3)"]
        assert_fails_naming(zero_variance, fn, "not exact in binary", hint="compare the rewards themselves")


def test_other_exact_comparisons_are_correct_too():
    for expr in ("np.ptp(groups, axis=1) == 0", "np.all(groups == groups[:, :1], axis=1)"):
        assert failing(zero_variance, mutant(zero_variance, (RETURN, f"return {expr}"))) == {}
