"""The monitoring dashboard: several runs, early stops, an empty run."""
import numpy as np
import pytest

from minippo.classic.dashboard import plot_dashboard, rolling_mean


@pytest.mark.slow      # draws a full dashboard figure (matplotlib)
def test_dashboard_several_runs_with_early_stops(tmp_path):
    np.testing.assert_allclose(rolling_mean(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1, 2, 4, 6])
    hist = [{"global_step": 512 * (i + 1), "losses/policy_loss": 0.01, "losses/value_loss": 10.0 / (i + 1),
             "losses/entropy": 0.69 - 0.01 * i, "losses/approx_kl": 0.02 if i % 2 else 0.0,
             "losses/clipfrac": 0.1, "losses/explained_variance": 0.5, "losses/grad_norm": 1.0,
             "early_stop_epoch": 0 if i % 2 else None, "epochs": 1 if i % 2 else 4} for i in range(6)]
    res = {"episode_returns": np.arange(30.0), "episode_steps": np.arange(30) * 100, "history": hist,
           "config": {"kl_old_target": 0.01, "max_grad_norm": 0.5}}
    empty = dict(res, episode_returns=np.array([]), episode_steps=np.array([]))
    path = plot_dashboard({"a": res, "b": empty}, tmp_path / "d.png", title="t")
    assert path.stat().st_size > 50_000


def test_more_runs_than_colours_is_an_error_not_a_dropped_run(tmp_path):
    from minippo.classic.dashboard import COLORS
    runs = {f"seed {i}": {} for i in range(len(COLORS) + 1)}     # refused before anything is read or drawn
    with pytest.raises(ValueError, match=f"`runs` must hold 1 to {len(COLORS)} runs"):
        plot_dashboard(runs, tmp_path / "d.png")
    with pytest.raises(ValueError, match="`runs` must hold 1"):
        plot_dashboard({}, tmp_path / "d.png")
    assert not (tmp_path / "d.png").exists()
