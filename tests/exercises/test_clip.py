"""The checker of exercise `clip` discriminates: the reference passes, the template and each plausible
wrong implementation fail, naming the case that catches them (and only the cases that should)."""
import pytest

from minippo.exercises import clip
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, failing, mutant, solution, template

GRAD_LINE = "dlogp = np.where(valid & ~clipped, -adv * ratio / n, 0.0)"
LOSS_LINE = "loss = -np.sum(np.minimum(surr_unclipped, surr_clipped)[valid]) / n"
CLIPPED_LINE = "clipped = ((adv > 0) & (ratio > 1 + clip_eps)) | ((adv < 0) & (ratio < 1 - clip_eps))"


def test_the_reference_passes_every_check():
    results = grade(clip.cases(), solution(clip))
    assert len(results) == 21 and all(r.passed for r in results), [r for r in results if not r.passed]


def test_the_template_fails_every_check_with_not_implemented_reported():
    results = grade(clip.cases(), template(clip))
    assert results and all(not r.passed and r.got == "raised NotImplementedError" for r in results)
    assert "NotImplementedError" in results[0].hint


def test_no_clipping_for_negative_advantages_fails_case_4():
    fn = mutant(clip, ("np.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv",
                       "np.where(adv > 0, np.minimum(ratio, 1 + clip_eps), ratio) * adv"),
                (CLIPPED_LINE, "clipped = (adv > 0) & (ratio > 1 + clip_eps)"))
    fails = assert_fails_naming(clip, fn, "case 4: A<0, r<1-eps (A=-2, r=0.5): value",
                                "case 4: A<0, r<1-eps (A=-2, r=0.5): gradient",
                                hint="A < 0 and r < 1 - eps: this token's gradient must be exactly 0; did you take "
                                     "the min of the two terms?")
    assert not any(name.startswith(("case 1", "case 2", "case 3", "case 5", "case 6")) for name in fails)


def test_a_sum_instead_of_a_mean_fails_the_mean_but_not_the_one_token_cases():
    fn = mutant(clip, (LOSS_LINE, LOSS_LINE[:-4]), (GRAD_LINE, GRAD_LINE.replace(" / n", "")))
    fails = assert_fails_naming(clip, fn, "token-level mean over n = 6 valid tokens: loss",
                                "token-level mean over n = 6 valid tokens: gradient", "random batch",
                                hint="a sum instead of a mean?")
    assert not any(name.startswith("case") for name in fails)            # n = 1 there: a sum is the mean


def test_the_gradient_with_respect_to_the_ratio_fails_the_unclipped_cases():
    fn = mutant(clip, (GRAD_LINE, GRAD_LINE.replace("-adv * ratio / n", "-adv / n")))
    fails = assert_fails_naming(clip, fn, "case 1: A>0, r<1-eps (A=2, r=0.5): gradient", "case 6",
                                "closed band", hint="that is d loss / d r")
    assert not any(name.endswith(": value") for name in fails)            # the loss itself is right
    assert "case 3: A>0, r>1+eps (A=2, r=1.5): gradient" not in fails      # 0 on clipped tokens either way


def test_an_open_band_fails_exactly_at_the_edges():
    fn = mutant(clip, (CLIPPED_LINE, CLIPPED_LINE.replace(">", ">=").replace("< 1", "<= 1")))
    fails = failing(clip, fn)
    assert set(fails) == {"closed band at r = 1 + eps exactly (A=2): gradient",
                          "closed band at r = 1 - eps exactly (A=-2): gradient"}
    assert all("CLOSED" in h for h in fails.values())


def test_unmasked_padding_fails_the_padding_and_mean_checks():
    fn = mutant(clip, ("n = max(int(valid.sum()), 1)", "n = mask.size"),
                (LOSS_LINE, LOSS_LINE.replace("[valid]", "")), (GRAD_LINE, GRAD_LINE.replace("valid & ", "")))
    assert_fails_naming(clip, fn, "padding holds other numbers", "token-level mean", "random batch")


def test_clipping_without_the_min_fails_cases_1_and_6():
    fn = mutant(clip, (LOSS_LINE, LOSS_LINE.replace("np.minimum(surr_unclipped, surr_clipped)", "surr_clipped")),
                (CLIPPED_LINE, "clipped = (ratio > 1 + clip_eps) | (ratio < 1 - clip_eps)"))
    assert_fails_naming(clip, fn, "case 1: A>0, r<1-eps (A=2, r=0.5): value", "case 1: A>0, r<1-eps (A=2, r=0.5): "
                        "gradient", "case 6: A<0, r>1+eps (A=-2, r=1.5): value", "case 6: A<0, r>1+eps (A=-2, r=1.5): "
                        "gradient")


def test_the_objective_instead_of_the_loss_fails_every_value():
    fn = mutant(clip, ("loss = -np.sum", "loss = np.sum"))
    fails = failing(clip, fn)
    assert all(f"case {k}" in " ".join(fails) for k in range(1, 7))


def test_a_division_by_zero_on_an_empty_batch_is_caught():
    fn = mutant(clip, ("n = max(int(valid.sum()), 1)", "n = int(valid.sum())"))
    with pytest.warns(RuntimeWarning):
        fails = failing(clip, fn)
    assert list(fails) == ["empty batch (no valid token)"]


@pytest.mark.parametrize("bad", ["return float(loss)", "return float(loss), dlogp[0]", "return 'loss', dlogp"])
def test_a_wrong_return_value_is_reported_not_raised(bad):
    fn = mutant(clip, ("return float(loss), dlogp", bad))
    results = grade(clip.cases(), fn)
    assert all(not r.passed for r in results)
    assert any(w in results[0].got for w in ("returned", "shape", "loss is"))


def test_an_unmasked_gradient_fails_the_padding_check_by_name():
    """The padded tokens' junk used to be clipped tokens (gradient 0 either way): the slip passed that check."""
    fn = mutant(clip, (GRAD_LINE, GRAD_LINE.replace("valid & ", "")))
    fails = assert_fails_naming(clip, fn, "padding holds other numbers", "empty batch", hint="use the mask")
    assert "divide by max(n, 1)" not in fails["empty batch (no valid token)"]          # it does divide by max(n, 1)


def test_a_wrong_gradient_on_valid_tokens_is_not_blamed_on_the_mask():
    fn = mutant(clip, (GRAD_LINE, GRAD_LINE.replace("-adv * ratio / n", "-adv / n")))
    assert "fix the failing cases above first" in failing(clip, fn)["padding holds other numbers: loss and gradient "
                                                                    "unchanged"]
