"""The gradient-check helper itself: it passes correct gradients, catches wrong ones, restores the
parameters, and prints the per-tensor table."""
import numpy as np
import pytest

from minippo.nn.gradcheck import assert_gradients, check_gradients, numerical_gradient, rel_error


def _quadratic():
    rng = np.random.default_rng(0)
    p = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(5)}
    f = lambda: float(np.sum(p["a"] ** 3) + np.sum(np.sin(p["b"])))
    grads = {"a": 3 * p["a"] ** 2, "b": np.cos(p["b"])}
    return p, f, grads


def test_correct_gradients_pass_and_params_are_restored():
    p, f, grads = _quadratic()
    before = {k: v.copy() for k, v in p.items()}
    result = assert_gradients(f, p, grads, tol=1e-7)
    assert result.ok and [r.name for r in result] == ["a", "b"]
    assert all(r.rel_err < 1e-8 for r in result)
    for k in p:
        np.testing.assert_array_equal(p[k], before[k])


def test_wrong_gradient_fails_with_a_table():
    p, f, grads = _quadratic()
    grads["b"] = grads["b"] * 1.01
    result = check_gradients(f, p, grads, tol=1e-7)
    assert [r.ok for r in result] == [True, False]
    with pytest.raises(AssertionError) as err:
        assert_gradients(f, p, grads, tol=1e-7)
    text = str(err.value)
    assert "name" in text and "rel err" in text and "FAIL" in text and "(5,)" in text


def test_numerical_gradient_subset_and_errors():
    x = np.array([1.0, 2.0, 3.0])
    g = numerical_gradient(lambda: float(np.sum(x ** 2)), x, indices=np.array([2]))
    np.testing.assert_allclose(g, [0.0, 0.0, 6.0], atol=1e-8)
    with pytest.raises(ValueError, match="float64"):
        numerical_gradient(lambda: 0.0, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        numerical_gradient(lambda: 0.0, np.ones((4, 4))[:, :2])


def test_max_entries_checks_a_sample():
    p, f, grads = _quadratic()
    result = check_gradients(f, p, grads, max_entries=3, rng=np.random.default_rng(1))
    assert result.ok


def test_key_and_shape_mismatch():
    p, f, grads = _quadratic()
    with pytest.raises(ValueError, match="same keys"):
        check_gradients(f, p, {"a": grads["a"]})
    with pytest.raises(ValueError, match="shape"):
        check_gradients(f, p, {"a": grads["a"].T, "b": grads["b"]})


def test_rel_error():
    assert rel_error(np.zeros(3), np.zeros(3)) == 0.0
    assert rel_error(np.array([1.0, 0.0]), np.array([0.0, 0.0])) == 1.0
    assert rel_error(np.array([2.0]), np.array([1.0])) == pytest.approx(0.5)
