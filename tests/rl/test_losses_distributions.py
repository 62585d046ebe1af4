"""Log-softmax, taken-token log-probs and entropy: values, stability, temperature, gradients."""
import numpy as np
import pytest

from minippo.nn.gradcheck import assert_gradients
from minippo.rl.losses import (entropy_backward, entropy_from_logits, log_softmax, logprobs_backward,
                               logprobs_from_logits)


def test_log_softmax_matches_naive_and_is_stable():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 4, 7))
    naive = np.log(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(log_softmax(logits), naive, atol=1e-12)
    big = log_softmax(logits + 1000.0)                      # naive exp overflows here
    np.testing.assert_allclose(big, naive, atol=1e-9)
    np.testing.assert_allclose(np.exp(log_softmax(logits, 0.5)).sum(-1), 1.0, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_softmax_works_on_its_own_copy(dtype, temperature):
    """log_softmax shifts and normalises in place, on its own z = logits / T: the caller's logits are left as
    they were, and the result is the textbook three lines' bit for bit (the same IEEE operations)."""
    logits = (np.random.default_rng(1).standard_normal((4, 5, 9)) * 3).astype(dtype)
    before = logits.copy()
    z = logits / logits.dtype.type(temperature)
    z = z - z.max(axis=-1, keepdims=True)
    textbook = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    out = log_softmax(logits, temperature)
    np.testing.assert_array_equal(logits, before)
    assert out.dtype == dtype and not np.shares_memory(out, logits)
    np.testing.assert_array_equal(out, textbook)          # same machine, same shapes, same operations: exact


def test_one_temperature_everywhere():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((5, 6))
    actions = rng.integers(0, 6, size=5)
    logp, _ = logprobs_from_logits(logits, actions, temperature=0.7)
    logp_scaled, _ = logprobs_from_logits(logits / 0.7, actions)
    np.testing.assert_allclose(logp, logp_scaled, atol=1e-12)
    ent, _ = entropy_from_logits(logits, temperature=0.7)
    ent_scaled, _ = entropy_from_logits(logits / 0.7)
    np.testing.assert_allclose(ent, ent_scaled, atol=1e-12)


def test_values():
    logits = np.zeros((2, 8))
    ent, _ = entropy_from_logits(logits)
    np.testing.assert_allclose(ent, np.log(8), atol=1e-12)          # uniform: log V
    logp, _ = logprobs_from_logits(np.array([[0.0, np.log(3.0)]]), np.array([1]))
    np.testing.assert_allclose(logp, np.log(0.75), atol=1e-12)
    # nearly deterministic: p = (q, 1 - q) with q = 1 / (1 + e^50); no log(0) on the way
    ent, _ = entropy_from_logits(np.array([[0.0, 50.0]]))
    q = 1.0 / (1.0 + np.exp(50.0))
    assert ent[0] == pytest.approx(-q * np.log(q) - (1 - q) * np.log1p(-q), rel=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_entropy_is_finite_where_a_probability_underflows(dtype):
    """logits (0, 0, -200) at temperature 0.25: z = (0, 0, -800), and exp(-800) underflows to 0 in both dtypes
    (float32 below ~-103, float64 below ~-745). The third token's term p log p is 0 (its limit), not 0 * -inf =
    NaN: H = log 2 (the true value differs by 800 e^-800, far below an ulp). Catches an entropy computed with
    log(p) instead of the log-softmax."""
    logits = np.array([[0.0, 0.0, -200.0]], dtype=dtype)
    ent, cache = entropy_from_logits(logits, temperature=0.25)
    assert np.exp(log_softmax(logits, 0.25))[0, 2] == 0.0               # the probability did underflow
    # H = -2 (1/2) log(1/2) from log 2 rounded in the dtype, exp, products and a sum: a few ulps of the dtype
    np.testing.assert_allclose(ent, [np.log(2.0)], rtol=8 * np.finfo(dtype).eps)
    assert np.isfinite(entropy_backward(np.ones(1, dtype), cache)).all()


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_logprobs_gradient(temperature):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((3, 4, 6))
    actions = rng.integers(0, 6, size=(3, 4))
    actions[0, :2] = 5                                              # repeated ids
    w = rng.standard_normal((3, 4))                                 # L = sum(w * logp)
    logp, cache = logprobs_from_logits(logits, actions, temperature)
    dlogits = logprobs_backward(w, cache)
    f = lambda: float(np.sum(w * logprobs_from_logits(logits, actions, temperature)[0]))  # noqa: E731
    assert_gradients(f, {"logits": logits}, {"logits": dlogits}, tol=1e-7)


@pytest.mark.parametrize("temperature", [1.0, 1.7])
def test_entropy_gradient(temperature):
    rng = np.random.default_rng(3)
    logits = 2 * rng.standard_normal((5, 7))
    w = rng.standard_normal(5)
    ent, cache = entropy_from_logits(logits, temperature)
    dlogits = entropy_backward(w, cache)
    f = lambda: float(np.sum(w * entropy_from_logits(logits, temperature)[0]))  # noqa: E731
    assert_gradients(f, {"logits": logits}, {"logits": dlogits}, tol=1e-7)


def test_float32_keeps_dtype():
    logits = np.random.default_rng(4).standard_normal((2, 3, 5)).astype(np.float32)
    logp, cache = logprobs_from_logits(logits, np.zeros((2, 3), dtype=np.int64))
    assert logp.dtype == np.float32 and logprobs_backward(np.ones((2, 3), np.float32), cache).dtype == np.float32
    ent, cache = entropy_from_logits(logits)
    assert ent.dtype == np.float32 and entropy_backward(np.ones((2, 3), np.float32), cache).dtype == np.float32


def test_bad_input():
    logits = np.zeros((2, 5))
    with pytest.raises(ValueError, match="`actions` must be < 5"):
        logprobs_from_logits(logits, np.array([0, 5]))
    with pytest.raises(ValueError, match="`actions` must have shape"):
        logprobs_from_logits(logits, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="`actions` must be an integer array"):
        logprobs_from_logits(logits, np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="`temperature`"):
        entropy_from_logits(logits, temperature=0.0)
    with pytest.raises(ValueError, match="`logits` must be finite"):
        log_softmax(np.array([[0.0, np.nan]]))
    _, cache = entropy_from_logits(logits)
    with pytest.raises(ValueError, match="`dent` must have shape"):
        entropy_backward(np.ones(3), cache)
