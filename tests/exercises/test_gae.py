"""The checker of exercise `gae` discriminates: reference passes, template and mistakes fail by name."""
from minippo.exercises import gae
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, mutant, solution, template

NEXT = "next_values = values[:, t + 1] * mask[:, t + 1] if t + 1 < T else np.zeros(B)"
REC = "last_adv = (delta + gamma * lam * last_adv) * mask[:, t]"
RET = "returns = (advantages + values) * mask"


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(gae.cases(), solution(gae)))
    assert all(r.got == "raised NotImplementedError" for r in grade(gae.cases(), template(gae)))


def test_bootstrapping_from_the_padding_fails_the_end_of_row_check():
    fn = mutant(gae, (NEXT, NEXT.replace(" * mask[:, t + 1]", "")))
    assert_fails_naming(gae, fn, "value after a row's last valid token is 0", "padding holds other numbers",
                        "random batch", hint="do not bootstrap from the padding")


def test_leaving_gamma_out_of_the_recursion_fails_the_loop_comparison():
    fn = mutant(gae, (REC, REC.replace("gamma * lam", "lam")))
    fails = assert_fails_naming(gae, fn, "lam = 1: discounted reward-to-go", "random batch 4x6, gamma=0.99",
                                hint="you left out gamma")
    assert "lam = 0: the TD errors (GAE eq. (17))" not in fails            # lam = 0 hides the slip


def test_returns_without_the_values_and_unmasked_padding_fail_by_name():
    fn = mutant(gae, (RET, "returns = advantages * mask"))
    assert_fails_naming(gae, fn, "returns = advantages + values", "one-token rows")
    fn = mutant(gae, (REC, REC.replace(" * mask[:, t]", "")), (RET, "returns = advantages + values"))
    assert_fails_naming(gae, fn, "empty row: all 0", "padding holds other numbers", hint="exactly 0")


def test_a_forward_recursion_fails():
    fn = mutant(gae, ("for t in reversed(range(T)):", "for t in range(T):"))
    assert_fails_naming(gae, fn, "lam = 1", "random batch")


def test_a_tiny_nonzero_on_the_padding_fails_the_exactly_zero_contract():
    """Within the comparisons' 1e-12 but not 0: the docstring promises exactly 0 on padding."""
    fn = mutant(gae, (RET, "returns = (advantages + values) * (mask + 1e-15)"))
    assert_fails_naming(gae, fn, "padding holds other numbers")
