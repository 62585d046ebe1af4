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
