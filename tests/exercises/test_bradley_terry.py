"""The checker of exercise `bradley_terry` discriminates: reference passes, template and mistakes fail by name."""
from minippo.exercises import bradley_terry as ex
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, failing, mutant, solution, template

LOSS = "loss = np.mean(np.logaddexp(0.0, -margin))"
DM = "dmargin = -np.exp(-np.logaddexp(0.0, margin)) / N"


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(ex.cases(), solution(ex)))
    assert all(r.got == "raised NotImplementedError" for r in grade(ex.cases(), template(ex)))


def test_the_preference_the_wrong_way_round_is_named():
    fn = mutant(ex, ("margin = r_chosen - r_rejected ", "margin = r_rejected - r_chosen "))
    assert_fails_naming(ex, fn, "random 16 pairs", hint="the chosen response must score higher")


def test_a_sum_and_a_missing_one_over_n_are_named():
    fn = mutant(ex, (LOSS, LOSS.replace("np.mean", "np.sum")), (DM, DM.replace(" / N", "")))
    assert_fails_naming(ex, fn, "mean over pairs", "random 16 pairs", hint="N = 16 times too large")
    fn = mutant(ex, (DM, DM.replace(" / N", "")))
    assert_fails_naming(ex, fn, "gradients vs central differences", hint="each carries 1/N")


def test_sigmoid_of_the_wrong_sign_and_a_naive_log_sigmoid_are_named():
    fn = mutant(ex, (DM, "dmargin = -np.exp(-np.logaddexp(0.0, -margin)) / N"))
    assert_fails_naming(ex, fn, "gradients vs central differences", hint="not -sigmoid(margin) / N")
    fn = mutant(ex, (LOSS, "loss = np.mean(-np.log(1 / (1 + np.exp(-margin))))"),
                (DM, "dmargin = -(1 - 1 / (1 + np.exp(-margin))) / N"))
    import numpy as np
    with np.errstate(over="ignore", divide="ignore"):
        assert_fails_naming(ex, fn, "large margins", hint="logaddexp")


def test_a_wrong_gradient_is_not_told_about_overflow_or_shifts():
    """Finite but wrong numbers used to get the overflow hint, and a wrong gradient the shift hint."""
    fn = mutant(ex, ("dmargin = -np.exp(-np.logaddexp(0.0, margin)) / N",
                     "dmargin = -np.exp(-np.logaddexp(0.0, -margin)) / N"))
    hints = failing(ex, fn).values()
    assert not any("overflow" in h or "a shift changes nothing" in h for h in hints), list(hints)
    assert any("not -sigmoid(margin) / N" in h for h in hints)
