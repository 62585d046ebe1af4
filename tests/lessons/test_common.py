"""lessons/_common.py: the legend placed in an empty margin."""
import numpy as np
import pytest

from lessons._common import legend_in_margin, pyplot


@pytest.mark.parametrize("scale, side", [("linear", "top"), ("linear", "bottom"), ("log", "top"), ("log", "bottom")])
def test_legend_in_margin_leaves_that_margin_free_of_data(scale, side):
    plt = pyplot()
    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 50)
    ax.plot(x, 1 + 9 * x, label="a line")
    ax.set_yscale(scale)
    lo0, hi0 = ax.get_ylim()
    legend = legend_in_margin(ax, 0.3, side=side)
    lo, hi = ax.get_ylim()
    f = (lambda v: np.log(v)) if scale == "log" else (lambda v: v)
    span = f(hi) - f(lo)
    if side == "top":       # the old top sits at 70 % of the new axis, the legend above it
        assert lo == lo0 and np.isclose((f(hi0) - f(lo)) / span, 0.7) and legend._loc == 9    # upper center
    else:
        assert hi == hi0 and np.isclose((f(hi) - f(lo0)) / span, 0.7) and legend._loc == 8    # lower center
    with pytest.raises(ValueError, match="`frac`"):
        legend_in_margin(ax, 1.0)
    with pytest.raises(ValueError, match="`side`"):
        legend_in_margin(ax, 0.3, side="left")
    plt.close(fig)


@pytest.mark.parametrize("value, ok", [("-1", False), ("0", True), ("7", True)])
def test_a_lessons_seed_must_be_non_negative(value, ok, capsys):
    """``python -m lessons.l04_clip_objective --seed -1`` ran the lesson into numpy's "expected non-negative
    integer" traceback; it is a one-line error naming the flag, exit status 2."""
    from lessons._common import lesson_parser
    if ok:
        assert lesson_parser(prog="lesson").parse_args(["--seed", value]).seed == int(value)
        return
    with pytest.raises(SystemExit) as info:
        lesson_parser(prog="lesson").parse_args(["--seed", value])
    assert info.value.code == 2
    assert capsys.readouterr().err == "lesson: error: --seed: expected an integer >= 0 (N), got '-1'\n"
