"""Every validation helper and its message: the argument's name in backticks and what was expected."""
import numpy as np
import pytest

from minippo.checks import (as_array, check_choice, check_float_array, check_int_array, check_mask, check_range,
                            check_same_shape)


def test_as_array():
    assert isinstance(as_array("x", [1, 2]), np.ndarray)
    for bad in (None, "abc", {"a": 1}):
        with pytest.raises(TypeError, match="`x` must be an array"):
            as_array("x", bad)


def test_check_float_array():
    x = np.ones((2, 3), np.float32)
    assert check_float_array("x", x, ndim=2, shape=(2, None)) is x
    with pytest.raises(ValueError, match=r"`x` must be float32 or float64, got dtype int64"):
        check_float_array("x", np.ones(3, np.int64))
    with pytest.raises(ValueError, match=r"`x` must have dtype float64, got float32"):
        check_float_array("x", x, dtype=np.float64)
    with pytest.raises(ValueError, match=r"`x` must be 1-D, got shape \(2, 3\)"):
        check_float_array("x", x, ndim=1)
    with pytest.raises(ValueError, match=r"`x` must have shape \(2, 4\), got \(2, 3\)"):
        check_float_array("x", x, shape=(2, 4))
    with pytest.raises(ValueError, match=r"`x` must have shape \(\*, 4\)"):
        check_float_array("x", x, shape=(None, 4))
    y = np.zeros((2, 3))
    y[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"`y` must be finite, found nan at \(1, 2\)"):
        check_float_array("y", y)
    z = np.array([0.0, np.inf])
    with pytest.raises(ValueError, match=r"`z` must be finite, found inf at 1"):
        check_float_array("z", z)
    assert check_float_array("z", z, finite=False) is z


def test_check_int_array():
    ids = np.array([[0, 4], [2, 3]])
    assert check_int_array("idx", ids, low=0, high=5) is ids
    with pytest.raises(ValueError, match=r"`idx` must be < 4, found 4 at \(0, 1\)"):
        check_int_array("idx", ids, high=4)
    with pytest.raises(ValueError, match=r"`idx` must be >= 1, found 0 at \(0, 0\)"):
        check_int_array("idx", ids, low=1)
    with pytest.raises(ValueError, match=r"`idx` must be an integer array, got dtype float64"):
        check_int_array("idx", ids.astype(float))
    with pytest.raises(ValueError, match="`idx` must be an integer array"):
        check_int_array("idx", ids.astype(bool))
    with pytest.raises(ValueError, match=r"`idx` must have shape \(3, 2\)"):
        check_int_array("idx", ids, shape=(3, 2))


def test_check_same_shape():
    assert check_same_shape(a=np.ones((2, 3)), b=np.zeros((2, 3))) == (2, 3)
    with pytest.raises(ValueError, match=r"`b` has shape \(3,\) but `a` has shape \(2, 3\); they must match"):
        check_same_shape(a=np.ones((2, 3)), b=np.ones(3))


def test_check_mask_values_and_layouts():
    right = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    left = np.array([[0, 1, 1], [0, 0, 1], [1, 1, 1]])
    assert check_mask("mask", right) is right
    assert check_mask("mask", left, layout="left") is left
    assert check_mask("mask", right.astype(bool)) is not None
    with pytest.raises(ValueError, match=r"`mask` must contain only 0 and 1, found 2 at \(0, 1\)"):
        check_mask("mask", np.array([[1, 2]]))
    with pytest.raises(ValueError, match=r"`mask` row 1 has a hole: .*start at position 0.*\[1, 0, 1\]"):
        check_mask("mask", np.array([[1, 1, 1], [1, 0, 1]]))
    with pytest.raises(ValueError, match=r"`mask` row 0 has a hole: .*end at the last position"):
        check_mask("mask", right, layout="left")
    assert check_mask("mask", np.array([[1, 0, 1]]), layout="any") is not None
    with pytest.raises(ValueError, match="`layout`"):
        check_mask("mask", right, layout="middle")
    with pytest.raises(ValueError, match=r"`mask` must be 2-D"):
        check_mask("mask", np.ones(3))
    with pytest.raises(ValueError, match=r"`mask` must have shape \(2, 3\)"):
        check_mask("mask", np.ones((2, 2)), shape=(2, 3))
    with pytest.raises(ValueError, match="`mask` must be numeric or bool"):
        check_mask("mask", np.array([["a"]]))


def test_check_range_messages():
    check_range("clip_eps", 0.2, 0, None, lo_open=True)
    with pytest.raises(ValueError, match=r"`clip_eps` must be in \(0, inf\), got -0.1"):
        check_range("clip_eps", -0.1, 0, None, lo_open=True)
    with pytest.raises(ValueError, match=r"`lam` must be in \[0, 1\], got 1.5"):
        check_range("lam", 1.5, 0, 1)
    with pytest.raises(ValueError, match=r"`beta` must be in \[0, 1\), got 1"):
        check_range("beta", 1, 0, 1, hi_open=True)
    with pytest.raises(ValueError, match=r"`x` must be in \(-inf, 3\], got 4"):
        check_range("x", 4, None, 3)
    with pytest.raises(ValueError, match="`n` must be an integer, got 2.0"):
        check_range("n", 2.0, 1, None, integer=True)
    with pytest.raises(ValueError, match="`n` must be an integer, got True"):
        check_range("n", True, 0, None, integer=True)
    with pytest.raises(ValueError, match="`x` must be a number, got 'a'"):
        check_range("x", "a")
    with pytest.raises(ValueError, match="`x` must be a number, got nan"):
        check_range("x", float("nan"))
    check_range("n", np.int64(3), 1, None, integer=True)


def test_check_choice():
    check_choice("kind", "k3", ("k1", "k2", "k3"))
    with pytest.raises(ValueError, match=r"`kind` must be one of 'k1', 'k2'; got 'k4'"):
        check_choice("kind", "k4", ["k1", "k2"])


def test_a_range_never_contains_infinity():
    """`lr=inf` passed check_range("lr", lr, 0, None) and failed later (issue 13 item 8): (0, inf) excludes inf."""
    from minippo.checks import check_range
    for value in (float("inf"), -float("inf"), np.float32("inf")):
        with pytest.raises(ValueError, match="`lr` must be a finite number"):
            check_range("lr", value, None, None)
    check_range("lr", 1e308, 0, None)


def test_config_fields_and_what_a_nan_stop_names():
    from dataclasses import dataclass

    from minippo.checks import check_fields, first_nonfinite, parameter_note

    @dataclass
    class Cfg:
        a: int = 1

    assert check_fields(Cfg, {"a": 2}, "cfg") == {"a": 2}
    with pytest.raises(ValueError, match=r"`cfg` has the unknown field\(s\) \['b'\]; Cfg's fields are \['a'\]"):
        check_fields(Cfg, {"a": 2, "b": 3}, "cfg")
    with pytest.raises(ValueError, match="`cfg` must be a dict of Cfg fields, got list"):
        check_fields(Cfg, [], "cfg")
    params = {"w": np.ones(3), "b": np.array([1.0, -5e29])}
    assert first_nonfinite(params) is None
    assert parameter_note(params) == " (every parameter is finite; the largest is `b`, |x| = 5e+29)"
    params["w"][1] = np.nan
    assert first_nonfinite(params) == "w" and parameter_note(params) == " (the parameter `w` is not finite)"
