"""minippo.studies.baselines: each baseline's residual against a loop, the variance identities, validation."""
import numpy as np
import pytest

from minippo.studies.baselines import BASELINES, baseline_residuals, between_prompt_fraction, compare_baselines


def residuals_loop(scores, n):
    """The four baselines written out response by response."""
    B = len(scores)
    out = {k: np.zeros(B) for k in BASELINES}
    for i in range(B):
        g = i // n
        group = [scores[j] for j in range(g * n, g * n + n)]
        others = [scores[j] for j in range(g * n, g * n + n) if j != i]
        out["none"][i] = scores[i]
        out["batch mean"][i] = scores[i] - sum(scores) / B
        out["group mean"][i] = scores[i] - sum(group) / n
        out["leave-one-out"][i] = scores[i] - sum(others) / (n - 1)
    return out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_residuals_match_a_loop(n):
    scores = np.random.default_rng(n).normal(size=6 * n)
    got, want = baseline_residuals(scores, n), residuals_loop(list(scores), n)
    assert list(got) == list(BASELINES)
    for k in BASELINES:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-12)


def test_variance_identities():
    rng = np.random.default_rng(0)
    G, n = 50, 4
    prompt_effect = rng.normal(size=(G, 1)) * 2.0                 # prompts differ a lot ...
    scores = (prompt_effect + rng.normal(size=(G, n))).ravel()      # ... plus per-response noise
    c = compare_baselines(scores, n)
    assert c["batch mean"]["relative"] == pytest.approx(1.0)
    # law of total variance: group-mean residual = within-group part = (1 - between) of Var(s)
    assert c["group mean"]["relative"] == pytest.approx(1.0 - c["between_prompts"])
    assert c["leave-one-out"]["mse"] == pytest.approx((n / (n - 1)) ** 2 * c["group mean"]["mse"])
    assert c["between_prompts"] > 0.6 and c["group mean"]["relative"] < 0.4   # the group baseline pays off here
    # prompts that do not matter: the group baseline removes no more than the batch mean (up to sampling noise)
    flat = rng.normal(size=G * n)
    assert between_prompt_fraction(flat, n) < 0.5
    assert compare_baselines(flat, n)["leave-one-out"]["relative"] > 1.0


def test_constant_scores_and_validation():
    c = compare_baselines(np.full(8, 3.0), 4)
    assert c["between_prompts"] == 0.0 and c["none"]["mse"] == 9.0 and np.isnan(c["none"]["relative"])
    with pytest.raises(ValueError, match="`scores`"):
        baseline_residuals(np.zeros(7), 4)
    with pytest.raises(ValueError, match="`group_size`"):
        compare_baselines(np.zeros(8), 1)
    with pytest.raises(ValueError, match="`scores`"):
        between_prompt_fraction(np.array([1.0, np.nan]), 2)
