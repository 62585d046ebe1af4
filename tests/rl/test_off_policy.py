"""Off-policy weights against a pure-Python loop for every mode and level, their properties (hypothesis), the
overflow of the sequence weight, bad input; the weighted L^CLIP and AReaL's decoupled loss against their
formulas written out, with central-difference gradients on both paths of clipped_policy_loss."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minippo.nn.gradcheck import assert_gradients
from minippo.rl import off_policy as op
from minippo.rl.losses import clipped_policy_loss
from tests.helpers import with_kernels
from tests.rl.helpers import padded_batches, random_batch, right_padded_mask

# every mode with the bounds it takes
MODES = {"none": {}, "is": {}, "tis": {"cap": 1.5}, "mis": {"cap": 1.5}, "icepop": {"cap": 1.5, "cap_low": 0.7}}
CASES = [(m, lv) for m in MODES for lv in op.LEVELS]


def loop_weights(logp_train, logp_sampler, mask, mode, level, cap=None, cap_low=None):
    """The weights token by token in Python floats, written from the module's table of modes."""
    B, T = mask.shape
    out = np.zeros((B, T))
    for b in range(B):
        row_log = 0.0
        for t in range(T):
            if mask[b, t]:
                row_log += float(logp_train[b, t]) - float(logp_sampler[b, t])
        for t in range(T):
            if not mask[b, t]:
                continue
            x = row_log if level == "sequence" else float(logp_train[b, t]) - float(logp_sampler[b, t])
            rho = math.exp(x) if x < 700 else math.inf
            if mode == "none":
                w = 1.0
            elif mode == "is":
                w = rho
            elif mode == "tis":
                w = min(rho, cap)
            elif mode == "mis":
                w = rho if rho <= cap else 0.0
            else:
                w = rho if cap_low <= rho <= cap else 0.0
            out[b, t] = w
    return out


def loop_stats(logp_train, logp_sampler, mask, mode, level, cap=None, cap_low=None):
    """truncated / masked shares and the ESS share over the units, from the loop's weights."""
    w = loop_weights(logp_train, logp_sampler, mask, mode, level, cap, cap_low)
    rho = loop_weights(logp_train, logp_sampler, mask, "is", level)
    units = mask.astype(bool) if level == "token" else np.zeros_like(mask, bool)
    if level == "sequence":
        units[:, 0] = mask[:, 0] == 1
    u, r = w[units], rho[units]
    trunc = float(np.mean(r > cap)) if mode == "tis" else 0.0
    lo = cap_low if mode == "icepop" else 0.0
    masked = float(np.mean([not (lo <= x <= cap) for x in r])) if mode in ("mis", "icepop") else 0.0
    sq = sum(x * x for x in u)
    ess = sum(u) ** 2 / (len(u) * sq) if sq > 0 else 0.0          # every unit masked: ESS 0
    return trunc, masked, ess


def batch(seed, scale=0.6, B=5, T=7):
    rng = np.random.default_rng(seed)
    (logp_sampler, noise), mask = random_batch(rng, B, T, 2, min_len=1)
    return logp_sampler - 1.0 + scale * noise, logp_sampler - 1.0, mask    # log-ratios ~ N(0, scale^2)


@pytest.mark.parametrize("mode,level", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weights_and_stats_equal_the_loop(mode, level, seed):
    logp_train, logp_sampler, mask = batch(seed, scale=0.6 if level == "token" else 0.25)
    w, stats = op.off_policy_weights(logp_train, logp_sampler, mask, mode=mode, level=level, **MODES[mode])
    ref = loop_weights(logp_train, logp_sampler, mask, mode, level, **MODES[mode])
    # float64: exp of a sum of <= 7 differences, summed in another order: a few ulps of rho
    np.testing.assert_allclose(w, ref, rtol=1e-13, atol=0)
    trunc, masked, ess = loop_stats(logp_train, logp_sampler, mask, mode, level, **MODES[mode])
    assert stats["truncated_frac"] == pytest.approx(trunc, abs=1e-15)
    assert stats["masked_frac"] == pytest.approx(masked, abs=1e-15)
    assert stats["ess_frac"] == pytest.approx(ess, rel=1e-12)
    n = int(mask.sum()) if level == "token" else int((mask[:, 0] == 1).sum())
    assert stats["n_units"] == n


@pytest.mark.parametrize("mode,level", CASES)
def test_weight_mean_and_max_are_over_the_units(mode, level):
    """weight_mean and weight_max are over the units (valid tokens, or one weight per row with a valid token; an
    empty row is no unit), from the loop's weights. Catches another denominator: the padding's zeros counted, or
    a sequence weight counted once per token (a long row weighing more)."""
    logp_train, logp_sampler, mask = batch(4, scale=0.6 if level == "token" else 0.25)
    mask[2] = 0                                              # an empty row
    _, stats = op.off_policy_weights(logp_train, logp_sampler, mask, mode=mode, level=level, **MODES[mode])
    ref = loop_weights(logp_train, logp_sampler, mask, mode, level, **MODES[mode])
    units = ref[mask == 1] if level == "token" else ref[mask[:, 0] == 1, 0]
    # float64: a mean of <= 28 weights summed in another order, each a few ulps from the loop's: rel 1e-13
    assert stats["weight_mean"] == pytest.approx(units.mean(), rel=1e-13)
    assert stats["weight_max"] == pytest.approx(units.max(), rel=1e-13)


def test_the_bands_are_closed():
    """A ratio exactly on a bound is inside the band (the table's rho <= C and C_low <= rho): equal log-probs give
    rho = exp(0) = 1 exactly, and with C = 1 or C_low = 1 every unit keeps its weight 1, neither masked nor
    truncated. Catches `<` for `<=` (or `>` for `>=`) in the masks and `>=` for `>` in truncated_frac."""
    logp = np.array([[-0.5, -1.25, -2.0], [-0.75, -3.0, 0.0]])
    mask = right_padded_mask([3, 2], 3)
    bounds = [("tis", dict(cap=1.0)), ("mis", dict(cap=1.0)), ("icepop", dict(cap=1.0, cap_low=0.5)),
              ("icepop", dict(cap=2.0, cap_low=1.0))]
    for mode, bound in bounds:
        for level in op.LEVELS:
            w, s = op.off_policy_weights(logp, logp.copy(), mask, mode=mode, level=level, **bound)
            np.testing.assert_array_equal(w, mask)          # exp(0) = 1 exactly: exact
            assert s["truncated_frac"] == s["masked_frac"] == 0.0, (mode, bound, level)


def test_the_band_cases_occur():
    """The loop comparison above sees every branch: some units truncated, masked below and above."""
    logp_train, logp_sampler, mask = batch(0)
    _, tis = op.off_policy_weights(logp_train, logp_sampler, mask, mode="tis", cap=1.5)
    _, ice = op.off_policy_weights(logp_train, logp_sampler, mask, mode="icepop", cap=1.5, cap_low=0.7)
    _, mis = op.off_policy_weights(logp_train, logp_sampler, mask, mode="mis", cap=1.5)
    assert 0 < tis["truncated_frac"] < 1 and 0 < mis["masked_frac"] < ice["masked_frac"] < 1


def test_mismatch_statistics():
    logp_train, logp_sampler, mask = batch(3)
    _, s = op.off_policy_weights(logp_train, logp_sampler, mask, mode="none")
    x = (logp_train - logp_sampler)[mask == 1]
    assert s["mismatch_kl"] == pytest.approx(np.mean(np.exp(x) - 1 - x), rel=1e-12)
    assert s["log_ratio_max"] == pytest.approx(np.abs(x).max(), rel=1e-15)


def test_mismatch_kl_keeps_its_precision_for_a_close_sampler():
    """mismatch_kl is the mean of k3 = expm1(x) - x, x = logp_train - logp_sampler; with x of order 1e-5 (a sampler
    that rounds differently) it is ~x^2/2 = 1e-10, against the series x^2/2 + x^3/6 + x^4/24 (next term 1e-16 of
    it). expm1 is within an ulp of x, so each term errs by at most 4.4e-16 / |x| = 4.4e-11 relative; rtol 1e-9
    leaves a margin of 20. Catches (exp(x) - 1) - x, off by 1.1e-16 absolute per token (1e-6 of the result)."""
    logp_sampler = np.full((1, 4), -2.0)
    logp_train = logp_sampler + np.array([[1e-5, -1e-5, 2e-5, -2e-5]])
    x = logp_train - logp_sampler                        # the log-ratio as off_policy_weights computes it
    _, stats = op.off_policy_weights(logp_train, logp_sampler, None, mode="none")
    assert stats["mismatch_kl"] == pytest.approx(np.mean(x ** 2 / 2 + x ** 3 / 6 + x ** 4 / 24),
                                                    rel=1e-9, abs=0)     # abs=0: the value is ~1e-10


@settings(max_examples=60, deadline=None)
@given(padded_batches(n_arrays=3, scale=0.8), st.sampled_from(CASES))
def test_padding_never_matters(data, case):
    (logp_train, logp_sampler, junk), mask, _ = data
    mode, level = case
    w, s = op.off_policy_weights(logp_train, logp_sampler, mask, mode=mode, level=level, **MODES[mode])
    pad = mask == 0
    w2, s2 = op.off_policy_weights(np.where(pad, 50 * junk, logp_train), np.where(pad, -50 * junk, logp_sampler),
                                   mask, mode=mode, level=level, **MODES[mode])
    np.testing.assert_array_equal(w, w2)          # the same computation on the valid entries
    assert s == s2
    assert (w[pad] == 0).all() and (w >= 0).all()


@settings(max_examples=60, deadline=None)
@given(padded_batches(n_arrays=1, scale=2.0), st.sampled_from(CASES))
def test_equal_log_probs_give_weight_one(data, case):
    (logp,), mask, _ = data
    mode, level = case
    w, s = op.off_policy_weights(logp, logp.copy(), mask, mode=mode, level=level, **MODES[mode])
    np.testing.assert_array_equal(w, mask)        # rho = exp(0) = 1 exactly, inside every band here
    assert s["truncated_frac"] == s["masked_frac"] == 0.0 and s["mismatch_kl"] == 0.0
    assert s["ess_frac"] == (1.0 if s["n_units"] else 0.0)


@settings(max_examples=60, deadline=None)
@given(padded_batches(n_arrays=2, scale=1.5), st.floats(0.5, 4.0))
def test_each_mode_is_bounded_by_its_rule(data, cap):
    (logp_train, logp_sampler), mask, _ = data
    rho, _ = op.off_policy_weights(logp_train, logp_sampler, mask, mode="is")
    tis, _ = op.off_policy_weights(logp_train, logp_sampler, mask, mode="tis", cap=cap)
    mis, _ = op.off_policy_weights(logp_train, logp_sampler, mask, mode="mis", cap=cap)
    assert (tis <= cap).all() and (tis <= rho).all()
    assert ((mis == rho) | (mis == 0)).all() and (mis <= cap).all()
    np.testing.assert_array_equal(np.where(rho <= cap, rho, 0), mis)


def test_sequence_weight_overflow():
    """A row whose log-ratios sum past float64's exp (and float32's) is truncated to C or masked; plain IS
    refuses, naming the inputs and the row."""
    mask = right_padded_mask([4, 2], 4)
    logp_train = np.array([[300.0, 300.0, 300.0, 1.0], [0.1, 0.2, 0.0, 0.0]])
    logp_sampler = np.zeros((2, 4))
    w, s = op.off_policy_weights(logp_train, logp_sampler, mask, mode="tis", level="sequence", cap=2.0)
    np.testing.assert_array_equal(w[0], [2.0] * 4)
    assert s["truncated_frac"] == 0.5
    w, s = op.off_policy_weights(logp_train, logp_sampler, mask, mode="mis", level="sequence", cap=2.0)
    np.testing.assert_array_equal(w[0], [0.0] * 4)
    assert w[1, 0] == pytest.approx(np.exp(0.3), rel=1e-15) and s["masked_frac"] == 0.5
    w, _ = op.off_policy_weights(logp_train, logp_sampler, mask, mode="icepop", level="sequence", cap=2.0,
                                 cap_low=0.5)
    assert (w[0] == 0).all() and s["ess_frac"] == 0.5        # one row of two kept
    with pytest.raises(ValueError, match=r"`logp_train` - `logp_sampler`.*exp\(901\).*\(0, 0\)"):
        op.off_policy_weights(logp_train, logp_sampler, mask, mode="is", level="sequence")
    # float32: exp(100) is finite in float64, beyond float32's 3.4e38
    f32 = np.array([[50.0, 50.0, 0.0, 0.0]], np.float32)
    with pytest.raises(ValueError, match="float32"):
        op.off_policy_weights(f32, np.zeros_like(f32), right_padded_mask([2], 4, np.float32), mode="is",
                              level="sequence")
    w, _ = op.off_policy_weights(f32, np.zeros_like(f32), right_padded_mask([2], 4, np.float32), mode="tis",
                                 level="sequence", cap=2.0)
    assert w.dtype == np.float32 and (w[0, :2] == 2.0).all()


@pytest.mark.parametrize("kwargs,match", [
    (dict(mode="clip"), "`mode`"),
    (dict(mode="tis"), "`cap`"),
    (dict(mode="tis", cap=0.0), "`cap`"),
    (dict(mode="none", cap=2.0), "`cap` does not apply to mode 'none'"),
    (dict(mode="mis", cap=2.0, cap_low=0.5), "`cap_low` does not apply"),
    (dict(mode="icepop", cap=2.0), "`cap_low`"),
    (dict(mode="icepop", cap=2.0, cap_low=3.0), "`cap_low` must be below `cap`"),
    (dict(mode="none", level="row"), "`level`"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        op.off_policy_weights(np.zeros((2, 3)), np.zeros((2, 3)), None, **kwargs)


def test_bad_arrays():
    with pytest.raises(ValueError, match="`logp_sampler`"):
        op.off_policy_weights(np.zeros((2, 3)), np.zeros((2, 4)), None, mode="none")
    with pytest.raises(ValueError, match="`logp_train`"):
        op.off_policy_weights(np.array([np.nan, 0.0]), np.zeros(2), None, mode="none")
    with pytest.raises(ValueError, match="'sequence' needs 2-D"):
        op.off_policy_weights(np.zeros(3), np.zeros(3), None, mode="none", level="sequence")
    with pytest.raises(ValueError, match="`mask`"):
        op.off_policy_weights(np.zeros((1, 3)), np.zeros((1, 3)), np.array([[1, 0, 1]]), mode="none")


# ---------------------------------------------------------------------------------------------- the losses

clip_kernel, clip_numpy = with_kernels(op.corrected_policy_loss, True), with_kernels(op.corrected_policy_loss, False)
BOTH = [pytest.param(clip_kernel, id="kernel", marks=pytest.mark.kernels), pytest.param(clip_numpy, id="numpy")]
dec_kernel, dec_numpy = with_kernels(op.decoupled_policy_loss, True), with_kernels(op.decoupled_policy_loss, False)
DEC = [pytest.param(dec_kernel, id="kernel", marks=pytest.mark.kernels), pytest.param(dec_numpy, id="numpy")]


def loss_batch(seed):
    """logp away from the clip's kinks (|r - (1 +- eps)| > 0.02), a mask with padding, weights >= 0 with zeros."""
    rng = np.random.default_rng(seed)
    (logp_old, adv), mask = random_batch(rng, 4, 6, 2, min_len=1)
    logp = logp_old + rng.uniform(-0.5, 0.5, logp_old.shape)
    r = np.exp(logp - logp_old)
    near = (np.abs(r - 0.8) < 0.02) | (np.abs(r - 1.2) < 0.02)
    logp = np.where(near, logp_old, logp)
    weights = np.where(rng.random(logp.shape) < 0.2, 0.0, rng.uniform(0.2, 3.0, logp.shape)) * mask
    return logp, logp_old, adv, weights, mask


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("seed", [0, 1])
def test_corrected_loss_is_the_weighted_formula(fn, seed):
    logp, logp_old, adv, weights, mask = loss_batch(seed)
    loss, dlogp, stats = fn(logp, logp_old, adv, weights, mask, 0.2)
    r = np.exp(logp - logp_old)
    term = weights * np.minimum(r * adv, np.clip(r, 0.8, 1.2) * adv)          # w_t min(r A, clip(r) A)
    assert loss == pytest.approx(-(term * mask).sum() / mask.sum(), rel=1e-12)
    assert 0 < stats["clipfrac"] < 1
    assert_gradients(lambda: fn(logp, logp_old, adv, weights, mask, 0.2)[0], {"logp": logp}, {"logp": dlogp},
                     tol=1e-7)
    assert (dlogp[weights == 0] == 0).all()


@pytest.mark.parametrize("fn", BOTH)
def test_weights_of_one_are_plain_lclip(fn):
    logp, logp_old, adv, _, mask = loss_batch(2)
    got = fn(logp, logp_old, adv, mask.copy(), mask, 0.2)
    want = with_kernels(clipped_policy_loss, fn.__name__.endswith("[kernel]"))(logp, logp_old, adv, mask, 0.2)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])


def test_corrected_loss_refuses_negative_weights():
    logp, logp_old, adv, weights, mask = loss_batch(0)
    with pytest.raises(ValueError, match="`weights` must be >= 0"):
        op.corrected_policy_loss(logp, logp_old, adv, -weights - 0.1, mask)
    with pytest.raises(ValueError, match="`weights`"):
        op.corrected_policy_loss(logp, logp_old, adv, weights[:, :2], mask)


@pytest.mark.parametrize("fn", DEC)
@pytest.mark.parametrize("seed", [0, 1])
def test_decoupled_loss_is_areal_first_form(fn, seed):
    """AReaL's objective as its authors first write it, min(pi/mu A, (pi_prox/mu) clip(pi/pi_prox) A), equals
    the weighted form the code computes; the gradient (w.r.t. logp only) by central differences."""
    logp_prox, logp_behav, adv, _, mask = loss_batch(seed)
    rng = np.random.default_rng(10 + seed)
    logp = logp_prox + rng.uniform(-0.4, 0.4, logp_prox.shape)
    logp_behav = logp_prox + rng.uniform(-0.3, 0.3, logp_prox.shape)
    loss, dlogp, stats = fn(logp, logp_prox, logp_behav, adv, mask, 0.2)
    pi_over_mu, prox_over_mu = np.exp(logp - logp_behav), np.exp(logp_prox - logp_behav)
    u = np.exp(logp - logp_prox)
    first = np.minimum(pi_over_mu * adv, prox_over_mu * np.clip(u, 0.8, 1.2) * adv)
    assert loss == pytest.approx(-(first * mask).sum() / mask.sum(), rel=1e-12)
    assert stats["off_policy"]["n_units"] == mask.sum()
    assert_gradients(lambda: fn(logp, logp_prox, logp_behav, adv, mask, 0.2)[0], {"logp": logp}, {"logp": dlogp},
                     tol=1e-7)


@pytest.mark.parametrize("fn", DEC)
def test_decoupled_loss_on_policy_is_ppo(fn):
    logp, logp_old, adv, _, mask = loss_batch(3)
    loss, dlogp, _ = fn(logp, logp_old, logp_old.copy(), adv, mask, 0.2)
    want = with_kernels(clipped_policy_loss, fn.__name__.endswith("[kernel]"))(logp, logp_old, adv, mask, 0.2)
    assert loss == want[0]
    np.testing.assert_array_equal(dlogp, want[1])
