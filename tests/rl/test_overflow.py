"""Issue 13, item 4: every loss of minippo.rl on inputs that overflow, on both switch settings.

Each function gives the mathematically right finite answer where one exists, and otherwise a ``ValueError``
naming the argument a user passed (``logp`` / ``logp_old``, ``adv``, ``values`` / ``returns``), never an
internal name, an inf or a NaN. Each case runs with ``kernels.use_kernels(True)`` and ``(False)``: the
functions with a numba twin (clipped_policy_loss, gae) take both paths; the others must behave the same
whatever the switch says. (tests/rl/test_losses_variants.py has the clip cases with float64 inputs.)
"""
import numpy as np
import pytest

from minippo import kernels
from minippo.rl.gae import gae
from minippo.rl.kl import kl_estimate, kl_ref_loss
from minippo.rl.losses import clipped_policy_loss, clipped_value_loss, value_loss
from minippo.rl.penalty import ppo_penalty_loss

PATHS = [pytest.param(True, id="kernel", marks=pytest.mark.kernels), pytest.param(False, id="numpy")]
# float32 overflows exp at log r ~ 88.72, float64 at ~709.78
BIG = {np.float32: 100.0, np.float64: 1000.0}
DTYPES = [np.float32, np.float64]


def arr(dtype, *values):
    return np.array(values, dtype=dtype)


@pytest.fixture(params=PATHS)
def path(request):
    with kernels.use_kernels(request.param):
        yield request.param


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.filterwarnings("ignore:overflow encountered")   # NUMBA_DISABLE_JIT: numpy scalars warn
def test_clip_binds_on_an_overflowing_ratio_finite_answer(path, dtype):
    """A > 0, r -> inf: L^CLIP = (1 + eps) A exactly, gradient 0; r -> 0: r A = 0 (A > 0) or (1 - eps) A (A < 0)."""
    big = BIG[dtype]
    loss, dlogp, stats = clipped_policy_loss(arr(dtype, big), arr(dtype, 0.0), arr(dtype, 1.0))
    assert loss == -float(dtype(1.2)) and dlogp.tolist() == [0.0] and dlogp.dtype == dtype
    assert stats["clipfrac"] == 1.0 and stats["ratio_max"] == np.inf     # r itself is beyond the dtype: inf
    loss, dlogp, _ = clipped_policy_loss(arr(dtype, -big), arr(dtype, 0.0), arr(dtype, -1.0))
    assert loss == float(dtype(0.8)) and dlogp.tolist() == [0.0]
    loss, dlogp, _ = clipped_policy_loss(arr(dtype, -big), arr(dtype, 0.0), arr(dtype, 1.0))
    assert abs(loss) < float(np.finfo(dtype).tiny) and np.isfinite(dlogp).all()  # r A = e^-big: 0 or subnormal


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_clip_with_no_finite_answer_names_logp(path, dtype):
    """A < 0, r -> inf: r A -> -inf, the clip does not bound r on that side."""
    with pytest.raises(ValueError, match=r"`logp` - `logp_old` = .* at 0 .*A = -1.0.*check `logp` and `logp_old`"):
        clipped_policy_loss(arr(dtype, BIG[dtype]), arr(dtype, 0.0), arr(dtype, -1.0))


@pytest.mark.filterwarnings("ignore:overflow encountered")   # NUMBA_DISABLE_JIT: numpy scalars warn
def test_clip_with_a_huge_advantage(path):
    """float32 A = 3e38, r = e: the clip binds, (1 + eps) A = 3.6e38 is beyond float32 but the loss is a float64
    number: finite and right. Unclipped (r = 1.05), the gradient -A r / n is beyond float32: `adv` is named."""
    loss, dlogp, _ = clipped_policy_loss(arr(np.float32, 1.0), arr(np.float32, 0.0), arr(np.float32, 3e38))
    assert loss == pytest.approx(-1.2 * float(np.float32(3e38)), rel=1e-7) and dlogp.tolist() == [0.0]
    loss, dlogp, _ = clipped_policy_loss(arr(np.float32, 0.05), arr(np.float32, 0.0), arr(np.float32, 3e38))
    assert np.isfinite(loss) and np.isfinite(dlogp).all()                 # 3.15e38 still fits float32
    with pytest.raises(ValueError, match=r"`adv` = 3\.\d+e\+38 at 0 .*beyond the range of float32; check `adv`"):
        clipped_policy_loss(arr(np.float32, 0.1), arr(np.float32, 0.0), arr(np.float32, 3.3e38))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_penalty_loss_overflow_names_logp_not_an_internal_name(path, dtype):
    """L^KLPEN = r A - beta ((r - 1) - log r) -> +-inf as r -> inf (unless A = beta): `logp` / `logp_old`
    are named, not k3's `logp_ref`; an overflow on padding never matters."""
    with pytest.raises(ValueError, match=r"`logp` - `logp_old` = .* at 0 .*L\^KLPEN.*check `logp` and `logp_old`"):
        ppo_penalty_loss(arr(dtype, BIG[dtype]), arr(dtype, 0.0), arr(dtype, 1.0), kl_coef=0.5)
    loss, dlogp, stats = ppo_penalty_loss(arr(dtype, 0.0, BIG[dtype]), arr(dtype, 0.0, 0.0), arr(dtype, 1.0, 1.0),
                                          mask=arr(dtype, 1, 0), kl_coef=0.5)
    assert loss == -1.0 and dlogp.tolist() == [-1.0, 0.0] and stats["kl"] == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_value_losses_finite_or_named(path, dtype):
    """The squared errors are float64: float32 values of 1e20 (or 1e30) give a finite loss; a float64 error
    whose square overflows, or a float32 gradient beyond 3.4e38, is a ValueError naming the inputs."""
    v, R = arr(dtype, 1e20), arr(dtype, -1e20)
    assert value_loss(v, R)[0] == pytest.approx(0.5 * 4e40, rel=1e-6)
    assert clipped_value_loss(v, arr(dtype, 1e20), R)[0] == pytest.approx(0.5 * 4e40, rel=1e-6)
    if dtype == np.float64:
        with pytest.raises(ValueError, match="`values` and `returns` at 0 .*beyond float64's range"):
            value_loss(arr(dtype, 1e200), arr(dtype, -1e200))
        with pytest.raises(ValueError, match="`values` and `values_old` and `returns` at 0"):
            clipped_value_loss(arr(dtype, 1e200), arr(dtype, 1e200), arr(dtype, -1e200))
    else:
        with pytest.raises(ValueError, match="gradient .* beyond the range of float32.*pass float64"):
            value_loss(arr(dtype, 3e38), arr(dtype, -3e38))
        with pytest.raises(ValueError, match="`values` and `values_old` and `returns` at 0 .*gradient"):
            clipped_value_loss(arr(dtype, 3e38), arr(dtype, 3e38), arr(dtype, -3e38))


@pytest.mark.parametrize("dtype", DTYPES)
def test_kl_k3_overflow_is_named_and_large_finite_values_are_kept(path, dtype):
    big = BIG[dtype]
    # logp - logp_ref = +big: k3 = e^-big - 1 + big, finite (the policy put more mass on the token)
    np.testing.assert_allclose(kl_estimate(arr(dtype, big), arr(dtype, 0.0), "k3"), [big - 1.0], rtol=1e-6)
    # logp_ref - logp = +big: k3 ~ e^big, beyond the dtype: named
    with pytest.raises(ValueError, match="`logp` = .* and `logp_ref` = 0.0 at 0 give k3 = inf"):
        kl_estimate(arr(dtype, -big), arr(dtype, 0.0), "k3")
    with pytest.raises(ValueError, match="`logp` = .* and `logp_ref`"):
        kl_ref_loss(arr(dtype, -big), arr(dtype, 0.0), kind="k3")
    if dtype == np.float32:
        # k3 = e^88 = 1.65e38 fits float32, kl_coef * dk/dlogp = 10 * 1.65e38 does not: named too
        with pytest.raises(ValueError, match="gradient `kl_coef` \\* dk/dlogp beyond the range of float32"):
            kl_ref_loss(arr(dtype, -88.0), arr(dtype, 0.0), kl_coef=10.0, kind="k3")


def test_gae_float32_overflow_from_finite_inputs_is_named(path):
    """40 rewards of 3e37 sum to 5.2e38 > float32's 3.4e38: no finite float32 advantage; float64 inputs are fine."""
    rewards = np.full((1, 40), 3e37, dtype=np.float32)
    values = np.zeros((1, 40), dtype=np.float32)
    with pytest.raises(ValueError, match=r"`rewards` and `values` are finite but the adv at \(0, 0\) .*pass float64"):
        gae(rewards, values, None, 1.0, 1.0)
    adv, _ = gae(rewards.astype(np.float64), values.astype(np.float64), None, 1.0, 1.0)
    assert np.isfinite(adv).all() and adv[0, 0] == pytest.approx(40 * float(np.float32(3e37)), rel=1e-12)
