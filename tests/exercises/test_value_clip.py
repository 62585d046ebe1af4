"""The checker of exercise `value_clip` discriminates: reference passes, template and mistakes fail by name."""
from minippo.exercises import value_clip
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, failing, mutant, solution, template

LOSS = "loss = 0.5 * np.sum(np.maximum(err_unclipped, err_clipped)[valid]) / n"
GRAD = "dvalues = np.where(valid & ~clipped, (values - returns) / n, 0.0)"


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(value_clip.cases(), solution(value_clip)))
    results = grade(value_clip.cases(), template(value_clip))
    assert all(r.got == "raised NotImplementedError" for r in results)


def test_without_the_half_every_value_fails_with_the_hint():
    fn = mutant(value_clip, (LOSS, LOSS.replace("0.5 * ", "")), (GRAD, GRAD.replace("(values - returns) / n",
                                                                                    "2 * (values - returns) / n")))
    assert_fails_naming(value_clip, fn, "inside the band (V=1.1, V_old=1, R=2): value",
                        "inside the band (V=1.1, V_old=1, R=2): gradient", hint="the factor 0.5")


def test_min_instead_of_max_fails_the_clipped_cases():
    fn = mutant(value_clip, (LOSS, LOSS.replace("np.maximum", "np.minimum")),
                ("& (err_clipped > err_unclipped)", "& (err_clipped < err_unclipped)"))
    assert_fails_naming(value_clip, fn, "above the band, clipped error larger", "below the band, clipped error larger",
                        "above the band, unclipped error larger")


def test_a_gradient_through_the_clipped_value_fails_the_zero_gradient_cases():
    fn = mutant(value_clip, (GRAD, "dvalues = np.where(valid, np.where(clipped, v_clipped, values) - returns, 0) / n"))
    fails = assert_fails_naming(value_clip, fn, "above the band, clipped error larger (V=1.5, V_old=1, R=2): gradient",
                                hint="must be exactly 0")
    assert not any(name.endswith(": value") for name in fails)


def test_a_sum_and_unmasked_padding_fail_by_name():
    fn = mutant(value_clip, (LOSS, LOSS[:-4]), (GRAD, GRAD.replace(" / n", "")))
    fails = assert_fails_naming(value_clip, fn, "token-level mean", hint="a sum instead of a mean?")
    assert not any(name.startswith(("inside", "above", "below")) for name in fails)
    fn = mutant(value_clip, (LOSS, LOSS.replace("[valid]", "")), ("n = max(int(valid.sum()), 1)", "n = mask.size"),
                (GRAD, GRAD.replace("valid & ", "")))
    assert_fails_naming(value_clip, fn, "padding holds other numbers", "token-level mean")



def test_a_wrong_gradient_on_valid_tokens_is_not_blamed_on_the_mask():
    fn = mutant(value_clip, ("clipped = (np.abs(values - values_old) > clip_eps) & (err_clipped > err_unclipped)",
                             "clipped = np.abs(values - values_old) > clip_eps"))
    hint = failing(value_clip, fn)["padding holds other numbers: loss and gradient unchanged"]
    assert "fix the failing cases above first" in hint and "use the mask" not in hint
