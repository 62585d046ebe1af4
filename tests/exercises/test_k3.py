"""The checker of exercise `k3` discriminates: reference passes, template and mistakes fail by name."""
from minippo.exercises import k3
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, failing, mutant, solution, template


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(k3.cases(), solution(k3)))
    assert all(r.got == "raised NotImplementedError" for r in grade(k3.cases(), template(k3)))


def test_k1_instead_of_k3_is_named():
    fn = mutant(k3, ("kl = rho_minus_1 - log_rho", "kl = -log_rho"))
    assert_fails_naming(k3, fn, "values on a (2, 3) batch", "never negative", hint="that is k1")


def test_the_ratio_upside_down_is_named():
    fn = mutant(k3, ("log_rho = logp_ref - logp ", "log_rho = logp - logp_ref "),
                ("dlogp = -rho_minus_1", "dlogp = np.expm1(-log_rho)"))
    assert_fails_naming(k3, fn, "values on a (2, 3) batch", hint="upside down")


def test_a_flipped_gradient_fails_only_the_gradient_checks():
    fn = mutant(k3, ("dlogp = -rho_minus_1", "dlogp = rho_minus_1"))
    fails = failing(k3, fn)
    assert set(fails) == {"gradient vs central differences (float64)", "gradient = 1 - rho"}
    assert all("d k3 / d logp_ref" in h for h in fails.values())


def test_np_exp_minus_one_loses_the_precision_near_rho_one():
    fn = mutant(k3, ("rho_minus_1 = np.expm1(log_rho)", "rho_minus_1 = np.exp(log_rho) - 1"))
    fails = failing(k3, fn)
    assert list(fails) == ["precision near rho = 1 (log rho = 1e-6)"] and "expm1" in fails[list(fails)[0]]


def test_a_wrong_formula_is_not_told_to_use_expm1():
    fn = mutant(k3, ("kl = rho_minus_1 - log_rho", "kl = -log_rho"))
    fails = failing(k3, fn)
    assert "expm1" not in fails["precision near rho = 1 (log rho = 1e-6)"]
    assert "k1" in fails["precision near rho = 1 (log rho = 1e-6)"]
    naive = mutant(k3, ("rho_minus_1 = np.expm1(log_rho)", "rho_minus_1 = np.exp(log_rho) - 1"))
    assert "expm1" in failing(k3, naive)["precision near rho = 1 (log rho = 1e-6)"]
