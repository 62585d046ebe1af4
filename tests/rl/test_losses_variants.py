"""The variants of the clipped surrogate the field argues about, on both paths: DAPO's asymmetric band
(the six clip cases again), the three loss aggregations (token-mean, GRPO's 1/|o|, Dr. GRPO's constant),
GSPO's sequence ratio; and what every loss does when a ratio or an error overflows."""
import numpy as np
import pytest

from minippo.nn.gradcheck import assert_gradients
from minippo.rl.loss_variants import (aggregated_clipped_value_loss, aggregated_policy_loss, aggregated_value_loss,
                                      sequence_policy_loss)
from minippo.rl.losses import (NEG_ABOVE, NEG_CLIPPED, NEG_INSIDE, PAD, POS_BELOW, POS_CLIPPED, POS_INSIDE,
                               clip_cases, clipped_policy_loss, clipped_value_loss, value_loss)
from minippo.rl.masked import aggregation_denominator
from tests.helpers import with_kernels
from tests.rl.helpers import random_batch, right_padded_mask
from tests.rl.test_losses_policy import cases_of, exact_exp_point, tokens_with_ratios

clip_kernel, clip_numpy = with_kernels(clipped_policy_loss, True), with_kernels(clipped_policy_loss, False)
BOTH = [pytest.param(clip_kernel, id="kernel", marks=pytest.mark.kernels), pytest.param(clip_numpy, id="numpy")]
# the aggregated surrogate on each path (token-mean IS clipped_policy_loss, kernel included; the others NumPy)
agg_kernel, agg_numpy = with_kernels(aggregated_policy_loss, True), with_kernels(aggregated_policy_loss, False)
AGG_BOTH = [pytest.param(agg_kernel, id="kernel", marks=pytest.mark.kernels), pytest.param(agg_numpy, id="numpy")]
LOW, HIGH = 0.2, 0.28                                  # DAPO's band [0.8, 1.28]
AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")

# (code, sign of A, three ratios inside the case's range of the band [0.8, 1.28], clipped?)
SIX_CASES_ASYMMETRIC = [
    (POS_BELOW, +1, [0.5, 0.7, 0.79], False),
    (POS_INSIDE, +1, [0.85, 1.2, 1.27], False),       # 1.2 and 1.27 clip in PPO's band, not in DAPO's
    (POS_CLIPPED, +1, [1.29, 1.5, 3.0], True),
    (NEG_CLIPPED, -1, [0.3, 0.6, 0.79], True),
    (NEG_INSIDE, -1, [0.85, 1.2, 1.27], False),
    (NEG_ABOVE, -1, [1.29, 2.0, 5.0], False),
]


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("code,sign,ratios,clipped", SIX_CASES_ASYMMETRIC, ids=[str(c[0]) for c in SIX_CASES_ASYMMETRIC])
def test_six_clip_cases_with_an_asymmetric_band(fn, code, sign, ratios, clipped):
    adv = sign * np.array([0.5, 1.0, 2.0])
    logp, logp_old, adv_full, mask = tokens_with_ratios(ratios, adv)
    loss, dlogp, stats = fn(logp, logp_old, adv_full, mask, clip_eps=LOW, clip_eps_high=HIGH)
    r = np.exp(logp[0, :3] - logp_old[0, :3])
    if clipped:
        bound = 1 + HIGH if sign > 0 else 1 - LOW
        assert loss == pytest.approx(-np.mean(bound * adv), rel=1e-12)
        assert (dlogp[0, :3] == 0.0).all()                    # exactly zero: the term is a constant
        assert stats["clipfrac"] == 1.0
    else:
        assert loss == pytest.approx(-np.mean(r * adv), rel=1e-12)
        np.testing.assert_allclose(dlogp[0, :3], -adv * r / 3, rtol=1e-12)
        assert (dlogp[0, :3] != 0).all() and stats["clipfrac"] == 0.0
    assert dlogp[0, 3] == 0.0
    band = dict(clip_eps=LOW, clip_eps_high=HIGH)
    assert cases_of(logp, logp_old, adv_full, mask, **band).tolist() == [[code, code, code, PAD]]


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("side", ["upper", "lower"])
def test_asymmetric_band_is_closed_at_both_edges(fn, side):
    """Exactly at r = 1 + eps_high (A > 0) or 1 - eps_low (A < 0) the token is inside; one step beyond, it clips."""
    d, r = exact_exp_point(1.28 if side == "upper" else 0.8)
    low, high = (0.2, r - 1) if side == "upper" else (1 - r, 0.28)
    sign = 1.0 if side == "upper" else -1.0
    logp_old = np.array([-1.0, -1.0])
    logp = logp_old + np.array([d, 0.0])
    adv = np.array([sign * 2.0, 1.0])
    loss, dlogp, stats = fn(logp, logp_old, adv, None, clip_eps=low, clip_eps_high=high)
    assert np.exp(logp[0] - logp_old[0]) == r
    assert dlogp[0] == -adv[0] * r / 2 and stats["clipfrac"] == 0.0
    assert cases_of(logp, logp_old, adv, None, clip_eps=low, clip_eps_high=high)[0] == (
        POS_INSIDE if side == "upper" else NEG_INSIDE)
    logp2 = logp_old + np.array([d + sign * 1e-9, 0.0])
    _, dlogp2, stats2 = fn(logp2, logp_old, adv, None, clip_eps=low, clip_eps_high=high)
    assert dlogp2[0] == 0.0 and stats2["clipfrac"] == 0.5


@pytest.mark.parametrize("fn", BOTH)
def test_clip_eps_high_none_is_the_symmetric_band_bitwise(fn):
    rng = np.random.default_rng(5)
    (logp, logp_old, adv), mask = random_batch(rng, 5, 8, 3, scale=0.4, min_len=1)
    a = fn(logp, logp_old, adv, mask, clip_eps=0.2)
    b = fn(logp, logp_old, adv, mask, clip_eps=0.2, clip_eps_high=0.2)
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    with pytest.raises(ValueError, match="`clip_eps_high`"):
        fn(logp, logp_old, adv, mask, clip_eps=0.2, clip_eps_high=0.0)


# ------------------------------------------------------------------ aggregations

def loop_loss(logp, logp_old, adv, mask, low, high, loss_agg, norm_len):
    """The aggregated L^CLIP written as loops over responses and tokens (the independent computation)."""
    B, T = logp.shape
    total, rows = 0.0, []
    for b in range(B):
        terms = []
        for t in range(T):
            if mask[b, t]:
                r = np.exp(logp[b, t] - logp_old[b, t])
                terms.append(min(r * adv[b, t], float(np.clip(r, 1 - low, 1 + high)) * adv[b, t]))
        rows.append(terms)
    n = sum(len(t) for t in rows)
    if loss_agg == "token-mean":
        total = sum(sum(t) for t in rows) / n
    elif loss_agg == "seq-mean-token-mean":
        total = sum(sum(t) / max(len(t), 1) for t in rows) / B
    else:
        total = sum(sum(t) for t in rows) / (B * norm_len)
    return -total


@pytest.mark.parametrize("loss_agg", AGGS)
@pytest.mark.parametrize("fn", AGG_BOTH)
def test_aggregations_against_loops_and_finite_differences(fn, loss_agg):
    rng = np.random.default_rng(6)
    (logp, logp_old, adv), _ = random_batch(rng, 4, 7, 3, scale=0.3)
    mask = right_padded_mask([7, 2, 5, 0], 7)                 # lengths differ; an empty row counts in B
    kw = dict(clip_eps=0.2, clip_eps_high=0.28, loss_agg=loss_agg, norm_len=9)
    loss, dlogp, _ = fn(logp, logp_old, adv, mask, **kw)
    assert loss == pytest.approx(loop_loss(logp, logp_old, adv, mask, 0.2, 0.28, loss_agg, 9), rel=1e-12)
    assert_gradients(lambda: fn(logp, logp_old, adv, mask, **kw)[0], {"logp": logp}, {"logp": dlogp}, tol=1e-7)
    # the weight of one unclipped token of row b is A r / d_b
    d = aggregation_denominator(mask, loss_agg, 9)
    r = np.exp(logp - logp_old)
    d_row0 = d if np.isscalar(d) else d[0, 0]
    assert 0.8 <= r[0, 0] <= 1.28                              # token (0, 0) is inside the band
    assert dlogp[0, 0] == pytest.approx(-adv[0, 0] * r[0, 0] / d_row0, rel=1e-12)


def test_aggregation_denominators_and_their_errors():
    mask = right_padded_mask([3, 1, 0], 4)
    assert aggregation_denominator(mask) == 4.0
    np.testing.assert_array_equal(aggregation_denominator(mask, "seq-mean-token-mean"), [[9.0], [3.0], [3.0]])
    assert aggregation_denominator(mask, "seq-mean-token-sum-norm", 24) == 72.0
    with pytest.raises(ValueError, match="`norm_len` must be given"):
        aggregation_denominator(mask, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="`norm_len`"):
        aggregation_denominator(mask, "seq-mean-token-sum-norm", 0)
    with pytest.raises(ValueError, match="`loss_agg`"):
        aggregation_denominator(mask, "sum")
    with pytest.raises(ValueError, match="needs 2-D"):
        aggregated_policy_loss(np.zeros(3), np.zeros(3), np.ones(3), loss_agg="seq-mean-token-mean")
    with pytest.raises(ValueError, match="`logp` must be 2-D"):
        sequence_policy_loss(np.zeros(3), np.zeros(3), np.ones(3))


@pytest.mark.parametrize("loss_agg", AGGS)
def test_value_losses_aggregate_the_same_way(loss_agg):
    rng = np.random.default_rng(7)
    (values, values_old, returns), _ = random_batch(rng, 3, 6, 3)
    mask = right_padded_mask([6, 1, 4], 6)
    kw = dict(loss_agg=loss_agg, norm_len=8)
    loss, dv, _ = aggregated_value_loss(values, returns, mask, **kw)
    err = [[0.5 * (values[b, t] - returns[b, t]) ** 2 for t in range(6) if mask[b, t]] for b in range(3)]
    want = {"token-mean": sum(map(sum, err)) / sum(map(len, err)),        # the same aggregation, as loops
            "seq-mean-token-mean": np.mean([sum(e) / len(e) for e in err]),
            "seq-mean-token-sum-norm": sum(map(sum, err)) / (3 * 8)}[loss_agg]
    assert loss == pytest.approx(want, rel=1e-12)
    assert_gradients(lambda: aggregated_value_loss(values, returns, mask, **kw)[0], {"v": values}, {"v": dv}, tol=1e-7)
    values = values_old + np.where(np.abs(values - values_old) > 0.3, values - values_old, 0.5)  # off the kink
    loss, dv, st = aggregated_clipped_value_loss(values, values_old, returns, mask, 0.3, **kw)
    assert 0 < st["vf_clipfrac"] < 1
    v_clip = values_old + np.clip(values - values_old, -0.3, 0.3)
    err = [[0.5 * max((values[b, t] - returns[b, t]) ** 2, (v_clip[b, t] - returns[b, t]) ** 2)
            for t in range(6) if mask[b, t]] for b in range(3)]
    want = {"token-mean": sum(map(sum, err)) / sum(map(len, err)),
            "seq-mean-token-mean": np.mean([sum(e) / len(e) for e in err]),
            "seq-mean-token-sum-norm": sum(map(sum, err)) / (3 * 8)}[loss_agg]
    assert loss == pytest.approx(want, rel=1e-12)
    assert_gradients(lambda: aggregated_clipped_value_loss(values, values_old, returns, mask, 0.3, **kw)[0], {"v": values},
                     {"v": dv}, tol=1e-7)


# ------------------------------------------------------------------ GSPO's sequence ratio

def test_sequence_ratio_is_gspo_and_its_gradient_is_the_derivative():
    rng = np.random.default_rng(8)
    logp_old = rng.uniform(-3, -0.5, (3, 5))
    mask = right_padded_mask([5, 3, 2], 5)
    lengths = mask.sum(1)
    logp = logp_old + 0.05 * rng.standard_normal((3, 5))
    seq_adv = np.array([1.0, -0.5, 2.0])
    adv = seq_adv[:, None] * mask
    kw = dict(clip_eps=0.2, loss_agg="seq-mean-token-mean")
    loss, dlogp, stats = sequence_policy_loss(logp, logp_old, adv, mask, **kw)
    s = np.exp(((logp - logp_old) * mask).sum(1) / lengths)            # s_b = (pi(y)/pi_old(y))^(1/|o|)
    # GSPO's objective: 1/G sum_b min(s_b A_b, clip(s_b) A_b)
    want = np.mean(np.minimum(s * seq_adv, np.clip(s, 0.8, 1.2) * seq_adv))
    assert loss == pytest.approx(-want, rel=1e-12)
    # ds_b / dlogp_t = s_b / |o_b|: every token of row b gets -A_b s_b / (G |o_b|) when unclipped
    np.testing.assert_allclose(dlogp, -(seq_adv * s / (3 * lengths))[:, None] * mask, rtol=1e-12)
    assert stats["ratio_max"] == pytest.approx(s.max(), rel=1e-12)
    # token advantages that vary within a row: still the exact derivative of the returned loss
    adv2 = rng.standard_normal((3, 5)) * mask
    for agg in AGGS:
        kw2 = dict(clip_eps=0.2, loss_agg=agg, norm_len=6)
        _, d2, _ = sequence_policy_loss(logp, logp_old, adv2, mask, **kw2)
        assert_gradients(lambda: sequence_policy_loss(logp, logp_old, adv2, mask, **kw2)[0], {"logp": logp},
                         {"logp": d2}, tol=1e-7)


@pytest.mark.parametrize("loss_agg", AGGS)
def test_sequence_ratio_gradient_with_clipped_rows_away_from_the_kinks(loss_agg):
    """Per-sequence clipping with DAPO's asymmetric band and advantages of both signs inside a row: rows whose s_b
    is outside [0.8, 1.28] by a margin (clipped where A pushes it further) and rows inside it, every s_b at least
    1e-3 from an edge (h = 1e-6 of central differences moves s_b by ~1e-6): the analytic gradient is the
    derivative of the returned loss, and a clipped token contributes nothing to its row's common gradient."""
    rng = np.random.default_rng(11)
    B, T = 6, 5
    mask = right_padded_mask([5, 4, 3, 5, 2, 4], T)
    lengths = mask.sum(1)
    logp_old = rng.uniform(-3, -0.5, (B, T))
    target = np.log([1.6, 0.5, 1.0, 1.1, 0.9, 1.5])                    # log s_b: rows 0, 1, 5 outside the band
    noise = 0.1 * rng.standard_normal((B, T)) * mask
    noise -= (noise.sum(1) / lengths)[:, None] * mask                  # zero mean per row: s_b is exactly the target
    logp = logp_old + (target[:, None] + noise) * mask
    adv = rng.choice([-1.0, 1.0], (B, T)) * rng.uniform(0.5, 2.0, (B, T)) * mask   # both signs within a row
    kw = dict(clip_eps=LOW, clip_eps_high=HIGH, loss_agg=loss_agg, norm_len=7)
    loss, dlogp, stats = sequence_policy_loss(logp, logp_old, adv, mask, **kw)
    s = np.exp(((logp - logp_old) * mask).sum(1) / lengths)
    np.testing.assert_allclose(s, np.exp(target), rtol=1e-12)
    assert np.min(np.abs(s[:, None] - [1 - LOW, 1 + HIGH])) > 1e-3    # away from the kinks
    # the independent computation: per token A_t min(s_b, 1.28) (A >= 0) or A_t max(s_b, 0.8), aggregated by loops
    surr = np.where(adv >= 0, adv * np.minimum(s, 1 + HIGH)[:, None], adv * np.maximum(s, 1 - LOW)[:, None]) * mask
    d = {"token-mean": np.full((B, 1), mask.sum()), "seq-mean-token-mean": B * lengths[:, None],
         "seq-mean-token-sum-norm": np.full((B, 1), B * 7.0)}[loss_agg]
    assert loss == pytest.approx(-np.sum(surr / d), rel=1e-12)
    # row gradient: -(s_b / |o_b|) sum over the row's unclipped tokens of A_t / d_b, the same on each of its tokens
    free = mask * ~(((adv > 0) & (s[:, None] > 1 + HIGH)) | ((adv < 0) & (s[:, None] < 1 - LOW)))
    want = -(s / lengths * (free * adv / d).sum(1))[:, None] * mask
    np.testing.assert_allclose(dlogp, want, rtol=1e-12, atol=1e-15)
    assert stats["clipfrac"] == pytest.approx(((mask - free) * (adv != 0)).sum() / mask.sum(), rel=1e-12)
    assert 0 < stats["clipfrac"] < 0.5                                # clipped tokens in clipped rows only
    assert_gradients(lambda: sequence_policy_loss(logp, logp_old, adv, mask, **kw)[0], {"logp": logp},
                     {"logp": dlogp}, tol=1e-7)


def test_sequence_ratio_clips_whole_responses():
    logp_old = np.zeros((2, 3)) - 1.0
    logp = logp_old + np.array([[0.5, 0.5, 0.5], [0.01, -0.01, 0.0]])   # row 0: s = e^0.5 > 1.2; row 1: s = 1
    adv = np.ones((2, 3))
    _, dlogp, stats = sequence_policy_loss(logp, logp_old, adv, None)
    assert (dlogp[0] == 0).all() and (dlogp[1] != 0).all()
    s = np.exp((logp - logp_old).mean(axis=1))                          # s_b of each row, on its tokens
    cases = clip_cases(np.broadcast_to(s[:, None], logp.shape), adv)
    assert stats["clipfrac"] == 0.5 and cases[0].tolist() == [POS_CLIPPED] * 3


# ------------------------------------------------------------------ overflow: finite answers, or a ValueError naming the inputs

@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.filterwarnings("ignore:overflow encountered")   # NUMBA_DISABLE_JIT: numpy scalars warn
def test_an_overflowing_ratio_is_finite_where_the_clip_binds(fn):
    """log r = +1000: exp overflows. With A > 0 the clip binds: (1 + eps) A, gradient exactly 0; A = 0: 0."""
    logp_old = np.array([[-1001.0, -1.0, -1.0]])
    logp = np.array([[-1.0, -1.0, -1000.0]])                   # log r = +1000, 0, -999
    adv = np.array([[2.0, 1.0, 3.0]])
    loss, dlogp, stats = fn(logp, logp_old, adv, None, clip_eps=0.2)
    # token 0: (1 + 0.2) * 2 (clipped); token 1: r = 1 -> 1; token 2: r = 0 -> 0 (case 1)
    assert loss == pytest.approx(-(1.2 * 2 + 1.0 + 0.0) / 3, rel=1e-15)
    assert dlogp[0, 0] == 0.0 and dlogp[0, 1] == pytest.approx(-1 / 3) and dlogp[0, 2] == 0.0
    with np.errstate(over="ignore"):                                    # r = e^1000 is +inf: case 3 all the same
        assert cases_of(logp, logp_old, adv, None).tolist() == [[POS_CLIPPED, POS_INSIDE, POS_BELOW]]
    assert stats["ratio_max"] == np.inf and stats["approx_kl"] == np.inf   # its true value, e^1000, is not a float
    z, _, _ = fn(logp, logp_old, np.array([[0.0, 1.0, 1.0]]), None)     # A = 0: no 0 * inf
    assert np.isfinite(z)
    padded = fn(np.array([[0.0, 900.0]]), np.array([[0.0, -900.0]]), np.array([[-1.0, -1.0]]),
                np.array([[1.0, 0.0]]))                                  # an overflow on padding never matters
    assert padded[0] == 1.0 and padded[2]["approx_kl"] == 0.0


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.filterwarnings("ignore:overflow encountered")   # NUMBA_DISABLE_JIT: numpy scalars warn
def test_an_overflowing_ratio_with_a_negative_advantage_names_logp(fn):
    logp_old = np.array([[-1.0, -1001.0]], dtype=np.float32)
    logp = np.array([[-1.0, -1.0]], dtype=np.float32)
    with pytest.raises(ValueError, match=r"`logp` - `logp_old` = 1000.0 at \(0, 1\).*A = -1.0.*not finite"):
        fn(logp, logp_old, np.array([[1.0, -1.0]], dtype=np.float32), None)
    # float32 overflows already at log r ~ 88.7
    with pytest.raises(ValueError, match="`logp` and `logp_old`"):
        fn(np.array([0.0], np.float32), np.array([-90.0], np.float32), np.array([-1.0], np.float32), None)


@pytest.mark.kernels
@pytest.mark.filterwarnings("ignore:overflow encountered")   # NUMBA_DISABLE_JIT: numpy scalars warn
def test_overflow_messages_are_the_same_on_both_paths():
    args = (np.array([[-1.0, -1.0]]), np.array([[-1.0, -1001.0]]), np.array([[1.0, -1.0]]), None)
    messages = []
    for fn in (clip_kernel, clip_numpy):
        with pytest.raises(ValueError) as info:
            fn(*args)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    # an input error after an overflow still wins, as in the formula (which validates first)
    bad = (np.array([[-1.0, -1.0], [0.0, np.nan]]), np.array([[-1001.0, -1.0], [0.0, 0.0]]),
           np.array([[-1.0, 1.0], [1.0, 1.0]]), None)
    for fn in (clip_kernel, clip_numpy):
        with pytest.raises(ValueError, match="`logp` must be finite"):
            fn(*bad)


def test_value_losses_square_in_float64_or_name_the_inputs():
    v32 = np.array([1e20, 0.0], dtype=np.float32)           # (1e20)^2 overflows float32, not float64
    R32 = np.zeros(2, dtype=np.float32)
    loss, dv, _ = value_loss(v32, R32)
    assert loss == pytest.approx(0.5 * 1e40 / 2, rel=1e-6) and dv.dtype == np.float32 and np.isfinite(dv).all()
    loss_c, _, _ = clipped_value_loss(v32, R32, R32, clip_eps=0.2)
    assert np.isfinite(loss_c)
    with pytest.raises(ValueError, match="`values` and `returns` at 0 .*no finite value loss"):
        value_loss(np.array([1e200, 0.0]), np.array([-1e200, 0.0]))
    with pytest.raises(ValueError, match="`values` and `values_old` and `returns`"):
        clipped_value_loss(np.array([1e200]), np.array([0.0]), np.array([-1e200]))
