"""The exact-gradient lab: the enumeration, the exact gradients against central differences (<= 1e-8),
and every Monte Carlo estimator's mean against what theory says it estimates, with a tolerance from
its measured standard error."""
import numpy as np
import pytest

from minippo.nn.gradcheck import check_gradients
from minippo.studies import exact as ex
from minippo.studies import exact_updates as up


@pytest.fixture(scope="module")
def world():
    """V = 4 (tokens 0, 1, 2 and EOS), L = 5: 364 responses, 121 states; pi_ref random, pi near it."""
    space = ex.SequenceSpace.build(4, 5)
    rng = np.random.default_rng(0)
    ref = ex.random_policy(space, rng, 0.8)
    theta = ref + 0.5 * rng.standard_normal(ref.shape)
    return space, ref, theta


Z = 5.0   # a Monte Carlo mean is consistent with a target when bias_z <= Z: its squared error lies within 5
          # measured standard deviations of its expectation sum(se^2) (exact.bias_z); a biased estimator's z
          # grows with the number of batches, and each test also shows its target rejects a wrong one


def close_in_norm(mc, target):
    return ex.bias_z(mc, target) <= Z


def test_the_space_holds_every_response_once():
    for (V, L), (N, S) in {(3, 6): (127, 63), (4, 5): (364, 121), (2, 3): (4, 3)}.items():
        sp = ex.SequenceSpace.build(V, L)
        assert (sp.N, sp.n_states) == (N, S)
        seqs = {tuple(t[:n]) for t, n in zip(sp.tokens, sp.lengths)}
        assert len(seqs) == N
        ends = [t[n - 1] for t, n in zip(sp.tokens, sp.lengths)]
        # every response ends with EOS, except the truncated ones of length L
        assert all(e == V - 1 or n == L for e, n in zip(ends, sp.lengths))
        assert all((t[:n - 1] != V - 1).all() for t, n in zip(sp.tokens, sp.lengths))
        theta = ex.random_policy(sp, np.random.default_rng(1))
        assert ex.probabilities(sp, theta).sum() == pytest.approx(1.0, abs=1e-12)


def test_sampling_follows_the_probabilities(world):
    space, _, theta = world
    p = ex.probabilities(space, theta)
    rows = ex.sample(space, theta, 40_000, np.random.default_rng(2))
    for a in range(space.V):                                       # the first token's law
        sel = space.tokens[:, 0] == a
        q = p[sel].sum()
        freq = np.mean(sel[rows])
        assert abs(freq - q) <= 5 * np.sqrt(q * (1 - q) / rows.size)          # 5 binomial standard errors


def test_exact_gradients_match_central_differences(world):
    space, ref, theta = world
    R = ex.right_wrong_reward(space, right=(0, 1))
    cases = {"J right/wrong": (lambda: ex.objective(space, theta, R), ex.objective_gradient(space, theta, R)),
             "J length": (lambda: ex.objective(space, theta, ex.length_reward(space)),
                          ex.objective_gradient(space, theta, ex.length_reward(space))),
             "KL": (lambda: ex.kl(space, theta, ref), ex.kl_gradient(space, theta, ref)),
             "wrong length": (lambda: ex.answer_length(space, theta, 2), ex.answer_length_gradient(space, theta, 2))}
    for name, (f, g) in cases.items():
        result = check_gradients(f, {"theta": theta}, {"theta": g}, tol=1e-8, h=1e-5)
        # 1e-8 relative AND absolute: float64 central differences with h = 1e-5 err by ~h^2 |f3| / 6 + eps |f| / h
        assert result.ok and result[0].max_abs_err <= 1e-8, f"{name}\n{result.table()}"


def test_answer_lengths_do_not_move_under_the_exact_gradient(world):
    """The reward is decided by the first token, so grad J lives on the root state only."""
    space, _, theta = world
    R = ex.right_wrong_reward(space, right=(0, 1))
    g = ex.objective_gradient(space, theta, R)
    assert np.abs(g[1:]).max() < 1e-15 and np.abs(g[0]).max() > 1e-3
    assert abs((g * ex.answer_length_gradient(space, theta, 2)).sum()) < 1e-15


def visit_probabilities(space, theta):
    """(S,) P(the response passes through state s), summed response by response (an independent loop)."""
    p = ex.probabilities(space, theta)
    out = np.zeros(space.n_states)
    for y in range(space.N):
        for t in range(space.lengths[y]):
            out[space.states[y, t]] += p[y]
    return out


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_the_kl_losses_estimate_per_state_gradients_not_the_kl_gradient(world):
    """On-policy, state by state (tabular): E[grad of loss k1] = 0; loss k2 = P(s) grad KL(pi_s || ref_s);
    loss k3 = P(s) grad KL(ref_s || pi_s) = P(s) (pi_s - ref_s). None is grad KL of whole responses."""
    space, ref, theta = world
    P = visit_probabilities(space, theta)[:, None]
    pi, q = softmax(theta), softmax(ref)
    kl_s = (pi * (np.log(pi) - np.log(q))).sum(axis=1, keepdims=True)
    want = {"loss k1": np.zeros_like(theta), "loss k2": P * pi * (np.log(pi) - np.log(q) - kl_s),
            "loss k3": P * (pi - q)}
    gkl = ex.kl_gradient(space, theta, ref)
    for est, w in want.items():
        e = ex.expected_kl_gradient_estimate(space, est, theta, theta, ref)
        np.testing.assert_allclose(e, w, atol=1e-12)
        assert np.linalg.norm(e - gkl) > 0.05 * np.linalg.norm(gkl)            # a partial gradient: biased
    # the k1 reward (policy gradient with the KL to go) is exactly grad KL
    np.testing.assert_allclose(ex.expected_kl_gradient_estimate(space, "reward k1", theta, theta, ref), gkl, atol=1e-12)


@pytest.mark.slow      # a Monte Carlo check (hundreds of sampled batches): the slow suite
@pytest.mark.parametrize("estimator", ex.KL_ESTIMATORS)
def test_each_kl_estimator_converges_to_its_exact_expectation(world, estimator):
    space, ref, theta = world
    rng = np.random.default_rng(3)
    mc = ex.moments(lambda rows: ex.kl_gradient_estimate(space, estimator, rows, theta, theta, ref),
                    lambda r: ex.sample(space, theta, 32, r), 300, rng)
    assert close_in_norm(mc, ex.expected_kl_gradient_estimate(space, estimator, theta, theta, ref))


def per_state_targets(space, ref, theta):
    """What theory says each on-policy KL estimator's gradient estimates, from the tables alone (independent of
    the estimators' code): reward k1 -> grad KL(pi || pi_ref) of whole responses; loss k1 -> 0; loss k2 ->
    sum_s P(s) grad KL(pi_s || ref_s) = P(s) pi_s (log pi_s - log ref_s - KL_s); loss k3 -> sum_s P(s) grad
    KL(ref_s || pi_s) = P(s) (pi_s - ref_s)."""
    P = visit_probabilities(space, theta)[:, None]
    pi, q = softmax(theta), softmax(ref)
    kl_s = (pi * (np.log(pi) - np.log(q))).sum(axis=1, keepdims=True)
    return {"reward k1": ex.kl_gradient(space, theta, ref), "loss k1": np.zeros_like(theta),
            "loss k2": P * pi * (np.log(pi) - np.log(q) - kl_s), "loss k3": P * (pi - q)}


@pytest.mark.slow      # a Monte Carlo check (hundreds of sampled batches): the slow suite
def test_kl_estimators_converge_to_what_theory_says_they_estimate(world):
    """Monte Carlo means (300 batches of 32 on-policy responses) against the per-state targets, and the power
    of the check: loss k3 is rejected as an estimate of grad KL(pi || pi_ref), loss k2 as one of the other
    direction, and the reward k1 as one of a per-state gradient."""
    space, ref, theta = world
    targets = per_state_targets(space, ref, theta)
    rng = np.random.default_rng(12)
    mc = {est: ex.moments(lambda rows: ex.kl_gradient_estimate(space, est, rows, theta, theta, ref),
                          lambda r: ex.sample(space, theta, 32, r), 300, rng) for est in targets}
    for est, target in targets.items():
        assert ex.bias_z(mc[est], target) <= Z, est
    # the library's per-state targets (used by lesson 22) are these loops' numbers
    np.testing.assert_allclose(ex.per_state_kl_gradient(space, theta, ref, "forward"), targets["loss k2"], atol=1e-14)
    np.testing.assert_allclose(ex.per_state_kl_gradient(space, theta, ref, "reverse"), targets["loss k3"], atol=1e-14)
    assert ex.bias_z(mc["loss k3"], targets["reward k1"]) > Z              # k3 in the loss is not grad KL
    assert ex.bias_z(mc["loss k2"], targets["loss k3"]) > Z                # the two directions differ here
    assert ex.bias_z(mc["reward k1"], targets["loss k2"]) > Z              # the full gradient is not per state
    assert ex.bias_z(mc["loss k2"], targets["reward k1"]) > Z              # nor is the per-state one the full one


@pytest.mark.slow      # a Monte Carlo check (hundreds of sampled batches): the slow suite
def test_on_policy_k1_reward_estimates_the_gradient_of_j_minus_beta_kl(world):
    space, ref, theta = world
    R, beta = ex.length_reward(space), 0.3
    want = ex.objective_gradient(space, theta, R) - beta * ex.kl_gradient(space, theta, ref)
    mc = ex.moments(lambda rows: ex.policy_gradient(space, rows, theta, theta, ref, R[rows], beta, "k1"),
                    lambda r: ex.sample(space, theta, 32, r), 400, np.random.default_rng(4))
    assert close_in_norm(mc, want)
    assert not close_in_norm(mc, ex.objective_gradient(space, theta, R))   # the KL part is seen: not grad J alone


@pytest.mark.slow      # a Monte Carlo check (hundreds of sampled batches): the slow suite
@pytest.mark.parametrize("loss_agg", ["seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_group_updates_converge_to_their_exact_expectation(world, loss_agg):
    space, _, theta = world
    R, G = ex.right_wrong_reward(space, right=(0, 1)), 8
    e = up.expected_group_update(space, theta, R, G, loss_agg)
    if loss_agg == "seq-mean-token-sum-norm":   # Dr. GRPO's constant: (G-1)/(G L) grad J, an unbiased direction
        np.testing.assert_allclose(e, (G - 1) / (G * space.L) * ex.objective_gradient(space, theta, R), atol=1e-14)
    mc = ex.moments(lambda rows: up.group_update(space, rows, theta, theta, R, G, loss_agg=loss_agg)[0],
                    lambda r: ex.sample(space, theta, 4 * G, r), 400, np.random.default_rng(5))
    assert close_in_norm(mc, e)
    assert up.expected_group_update(space, theta, R, G, "token-mean") is None


def old_policy(world):
    """theta, an older policy 0.3 away, the length reward, J(old), and the generator that made it (continued)."""
    space, _, theta = world
    rng = np.random.default_rng(6)
    old = theta + 0.3 * rng.standard_normal(theta.shape)
    R = ex.length_reward(space)
    return space, theta, old, R, ex.objective(space, old, R), rng


def test_importance_sampling_identities(world):
    space, theta, old, R, J_old, _ = old_policy(world)
    gJ = ex.objective_gradient(space, theta, R)
    unclipped = dict(baseline=J_old, clip_eps=1e9)
    whole = up.exact_ratio_moments(space, theta, old, R, "whole-response ratio", **unclipped)
    np.testing.assert_allclose(whole["mean"], gJ, atol=1e-12)                 # pi/pi_old reweights exactly
    on = up.exact_ratio_moments(space, theta, theta, R, "token ratio", baseline=0.3, clip_eps=0.2)
    np.testing.assert_allclose(on["mean"], gJ, atol=1e-12)                    # on-policy, any fixed baseline


@pytest.mark.slow      # a Monte Carlo check (hundreds of sampled batches): the slow suite
def test_exact_ratio_moments_are_what_sampled_batches_give(world):
    space, theta, old, R, J_old, rng = old_policy(world)
    for est in up.RATIO_ESTIMATORS:
        m = up.exact_ratio_moments(space, theta, old, R, est, baseline=J_old, clip_eps=0.2, n=16)
        cf = []

        def estimate(rows):
            g, c = up.ratio_gradient(space, rows, theta, old, R, est, baseline=J_old, clip_eps=0.2)
            cf.append(c)
            return g

        mc = ex.moments(estimate, lambda r: ex.sample(space, old, 16, r), 400, rng)
        assert close_in_norm(mc, m["mean"]), est
        # the spread of a batch, measured over 400 batches: within 15% of the exact one (its relative
        # sampling error is ~ 1/sqrt(2 * 400) = 3.5% for a Gaussian, heavier tails allowed)
        assert mc["spread"] == pytest.approx(m["spread"], rel=0.15), est
        assert np.mean(cf) == pytest.approx(m["clipfrac"], abs=0.03), est


def test_population_ppo_is_deterministic_and_clips():
    space = ex.SequenceSpace.build(4, 4)
    rng = np.random.default_rng(7)
    theta0 = ex.random_policy(space, rng, 0.5)
    R = ex.right_wrong_reward(space, right=(0, 1))
    runs = [up.population_ppo(space, theta0, R, iterations=3, epochs=6, lr=1.0, clip_eps_high=h) for h in (None, None, 0.3)]
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1][0]["clipfrac"] > 0 and runs[2][1][-1]["J"] > runs[0][1][0]["J"]
    assert not np.array_equal(runs[0][0], runs[2][0])                        # the band matters once it binds


def test_per_response_gradients_add_up_to_the_batch_gradient(world):
    space, _, theta = world
    dlogp = np.random.default_rng(8).standard_normal(space.mask.shape)
    np.testing.assert_allclose(ex.per_response_gradients(space, theta, dlogp).sum(axis=0),
                               ex.backprop(space, theta, dlogp), atol=1e-12)


def test_bad_arguments():
    space = ex.SequenceSpace.build(3, 4)
    with pytest.raises(ValueError, match="`right`"):
        ex.right_wrong_reward(space, right=(1,))                             # token V - 2 is the wrong answer
    with pytest.raises(ValueError, match="`estimator`"):
        ex.kl_gradient_estimate(space, "loss k4", np.arange(3), *(np.zeros((space.n_states, 3)),) * 3)
    with pytest.raises(ValueError, match="`V`"):
        ex.SequenceSpace.build(1, 3)
