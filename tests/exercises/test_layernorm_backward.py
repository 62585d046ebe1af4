"""The checker of exercise `layernorm_backward` discriminates: reference passes, template and mistakes fail."""
from minippo.exercises import layernorm_backward as ex
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, failing, mutant, solution, template

DX = "dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))"


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(ex.cases(), solution(ex)))
    assert all(r.got == "raised NotImplementedError" for r in grade(ex.cases(), template(ex)))


def test_dx_without_the_mean_and_variance_paths_fails_dx_only():
    fails = failing(ex, mutant(ex, (DX, "dx = rstd * g")))
    assert {"dx vs central differences, x 2x3x5", "dx vs central differences, x 4x6"} <= set(fails)
    assert not any(name.startswith(("dgamma", "dbeta")) for name in fails)
    assert any("mean and the variance" in h for h in fails.values())


def test_dx_without_the_variance_path_is_named():
    fn = mutant(ex, (DX, "dx = rstd * (g - g.mean(axis=-1, keepdims=True))"))
    assert_fails_naming(ex, fn, "dx vs central differences, x 2x3x5", hint="path through the variance")


def test_dx_without_the_gain_is_named():
    fn = mutant(ex, ("g = dout * w ", "g = dout "))
    assert_fails_naming(ex, fn, "dx vs central differences", hint="forgets the gain")


def test_swapped_parameter_gradients_and_a_sum_over_one_axis_are_named():
    fn = mutant(ex, ("return dx, dgamma, dbeta", "return dx, dbeta, dgamma"))
    assert_fails_naming(ex, fn, "dgamma vs central differences", "dbeta vs central differences", hint="swapped?")
    fn = mutant(ex, ("dout2, xhat2 = dout.reshape(-1, C), xhat.reshape(-1, C)",
                     "dout2, xhat2 = dout.reshape(-1, C)[:dout.shape[-2]], xhat.reshape(-1, C)[:dout.shape[-2]]"))
    fails = assert_fails_naming(ex, fn, "dgamma vs central differences, x 2x3x5", hint="EVERY leading axis")
    assert "dgamma vs central differences, x 4x6" not in fails              # 2-D: axis 0 is every row
