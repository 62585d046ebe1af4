"""The checker of exercise `off_policy_weights` discriminates: reference passes, template and mistakes fail by
name."""
from minippo.exercises import off_policy_weights as ex
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, failing, mutant, solution, template


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(ex.cases(), solution(ex)))
    assert all(r.got == "raised NotImplementedError" for r in grade(ex.cases(), template(ex)))


def test_the_ratio_upside_down_is_named():
    fn = mutant(ex, ("logp_train - logp_sampler, 0.0)", "logp_sampler - logp_train, 0.0)"))
    assert_fails_naming(ex, fn, "tis, token level", "mis, sequence level", hint="upside down")


def test_the_geometric_mean_instead_of_the_product_is_named():
    fn = mutant(ex, ("log_rho = log_rho.sum(axis=1, keepdims=True)",
                     "log_rho = log_rho.sum(axis=1, keepdims=True) / valid.sum(axis=1, keepdims=True)"))
    fails = assert_fails_naming(ex, fn, "tis, sequence level", hint="geometric MEAN")
    assert not any("token level" in name for name in fails)


def test_truncating_instead_of_masking_is_named():
    fn = mutant(ex, ('if mode == "tis" else np.where(rho <= cap, rho, 0.0)', 'if mode else None'))
    assert_fails_naming(ex, fn, "mis, token level", hint="that is mode 'tis'")


def test_padding_in_the_row_sum_is_caught():
    fn = mutant(ex, ("log_rho = np.where(valid, logp_train - logp_sampler, 0.0)",
                     "log_rho = logp_train - logp_sampler"))
    fails = failing(ex, fn)
    assert "padding: weight 0, its junk ignored" in fails and "tis, sequence level, C = 1.3 vs the library" in fails


def test_an_overflow_to_nan_is_caught():
    fn = mutant(ex, ("w = np.minimum(rho, cap) if mode == \"tis\" else np.where(rho <= cap, rho, 0.0)",
                     "w = np.minimum(rho, cap) if mode == \"tis\" else rho * (rho <= cap)"))
    fails = failing(ex, fn)
    assert list(fails) == ["a response whose ratio overflows (log rho = 1200)"] and "inf * 0" in fails[list(fails)[0]]


def test_masking_a_ratio_at_the_cap_is_caught_only_at_the_cap():
    """`rho < cap` for mis passed every check (the random batches never land on C); the closed band is checked at
    rho = exp(0) = C = 1, exact in float64."""
    fn = mutant(ex, ("np.where(rho <= cap, rho, 0.0)", "np.where(rho < cap, rho, 0.0)"))
    fails = assert_fails_naming(ex, fn, "mis: rho equal to C = 1 is kept", hint="the band is closed at C")
    assert len(fails) == 1
