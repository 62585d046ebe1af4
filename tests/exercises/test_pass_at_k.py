"""The checker of exercise `pass_at_k` discriminates: the reference passes, the template and plausible mistakes
fail with the right checks named; three correct implementations (exact integers, no n - c < k branch, log-gamma) pass."""
from minippo.exercises import pass_at_k
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, failing, mutant, solution, template

PRODUCT = "out[p] = 1.0 - np.prod(1.0 - k / np.arange(n[p] - c[p] + 1, n[p] + 1))"


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(pass_at_k.cases(), solution(pass_at_k)))
    assert all(r.got == "raised NotImplementedError" for r in grade(pass_at_k.cases(), template(pass_at_k)))


def test_forgetting_the_one_minus_is_named():
    fn = mutant(pass_at_k, ("out[p] = 1.0 - np.prod(", "out[p] = np.prod("))
    assert_fails_naming(pass_at_k, fn, "no right answer", "k = 1 is c / n", "every k-subset",
                        hint="the chance that all k answers are WRONG")


def test_sampling_with_replacement_is_named():
    fn = mutant(pass_at_k, (PRODUCT, "out[p] = 1.0 - (1.0 - c[p] / n[p]) ** k"))
    fails = assert_fails_naming(pass_at_k, fn, "every k-subset", "40 random problems", hint="WITH replacement")
    assert "k = 1 is c / n" not in fails                   # at k = 1 both estimators are c / n


def test_float_binomials_overflow_and_are_named():
    comb = "__import__('math').comb"
    fn = mutant(pass_at_k, (PRODUCT, f"out[p] = 1.0 - float({comb}(int(n[p] - c[p]), k)) / float({comb}(int(n[p]), k))"))
    assert list(failing(pass_at_k, fn)) == ["n = 2000, k = 1000: no overflow"]


def test_an_off_by_one_product_is_caught():
    fn = mutant(pass_at_k, ("np.arange(n[p] - c[p] + 1, n[p] + 1)", "np.arange(n[p] - c[p], n[p])"))
    assert_fails_naming(pass_at_k, fn, "every k-subset", "40 random problems")


def test_an_average_over_problems_is_named_by_its_shape():
    fn = mutant(pass_at_k, ("    return out\n", "    return out.mean()\n"))
    fails = failing(pass_at_k, fn)
    assert len(fails) == len(pass_at_k.cases()) and all("must have shape" in h for h in fails.values() if h)


def test_three_correct_implementations_pass():
    comb = "__import__('math').comb"
    exact = mutant(pass_at_k, (PRODUCT, f"out[p] = 1.0 - {comb}(int(n[p] - c[p]), k) / {comb}(int(n[p]), k)"))
    no_branch = mutant(pass_at_k, ("        if n[p] - c[p] < k:", "        if False:"))   # the factor i = k is 0
    # log C(n - c, k) - log C(n, k) by log-gamma: ~1e-12 from exact at n = 2000, and 4e-16 instead of 0 at c = 0
    lg, a, b = "__import__('math').lgamma", "int(n[p])", "int(n[p] - c[p])"
    log_gamma = mutant(pass_at_k, (PRODUCT, f"out[p] = 1.0 - np.exp({lg}({b} + 1) - {lg}({b} - k + 1) - "
                                            f"{lg}({a} + 1) + {lg}({a} - k + 1))"))
    for fn in (exact, no_branch, log_gamma):
        assert failing(pass_at_k, fn) == {}


def test_a_finite_wrong_answer_is_not_told_about_overflow():
    fn = mutant(pass_at_k, ("np.arange(n[p] - c[p] + 1, n[p] + 1)", "np.arange(n[p] - c[p], n[p])"))
    hint = failing(pass_at_k, fn)["n = 2000, k = 1000: no overflow"]
    assert "overflows" not in hint and "1 - C(n - c, k) / C(n, k)" in hint
