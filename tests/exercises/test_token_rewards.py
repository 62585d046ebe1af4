"""The checker of exercise `token_rewards` discriminates: reference passes, template and mistakes fail by name."""
from minippo.exercises import token_rewards as ex
from minippo.exercises.grading import grade
from tests.exercises.helpers import assert_fails_naming, mutant, solution, template

LAST = "last = mask.sum(axis=1).astype(int) - 1"


def test_the_reference_passes_and_the_template_reports_not_implemented():
    assert all(r.passed for r in grade(ex.cases(), solution(ex)))
    assert all(r.got == "raised NotImplementedError" for r in grade(ex.cases(), template(ex)))


def test_the_score_on_the_padding_or_the_first_token_is_named():
    fn = mutant(ex, (LAST, "last = np.full(B, T - 1)"))
    fails = assert_fails_naming(ex, fn, "t0 t1 EOS PAD PAD: score on the EOS", hint="not on position T - 1")
    assert "full rows: score on position T - 1" not in fails
    fn = mutant(ex, (LAST, "last = np.zeros(B, dtype=int)"))
    assert_fails_naming(ex, fn, "t0 t1 EOS PAD PAD", hint="not the first")


def test_a_kl_bonus_instead_of_a_penalty_and_the_score_on_every_token_are_named():
    fn = mutant(ex, ("rewards = -kl_coef * kl ", "rewards = kl_coef * kl "))
    fails = assert_fails_naming(ex, fn, "t0 t1 EOS PAD PAD", hint="with a minus sign")
    assert "kl_coef = 0: the score only" not in fails
    fn = mutant(ex, ("rewards[np.arange(B), last] += scores ", "rewards += scores[:, None] * mask "))
    assert_fails_naming(ex, fn, "t0 t1 EOS PAD PAD", hint="not on every token")


def test_unmasked_kl_on_the_padding_is_named():
    fn = mutant(ex, ("kl = (logp - logp_ref) * mask ", "kl = (logp - logp_ref) "))
    assert_fails_naming(ex, fn, "t0 t1 EOS PAD PAD", "random batch", hint="padding gets no reward")


def test_a_tiny_nonzero_on_the_padding_fails_the_exactly_zero_contract():
    """Within the comparisons' 1e-12 but not 0: the docstring promises exactly 0 on padding."""
    fn = mutant(ex, ("kl = (logp - logp_ref) * mask ", "kl = (logp - logp_ref) * (mask + 1e-15) "))
    assert_fails_naming(ex, fn, "t0 t1 EOS PAD PAD", "random batch")
