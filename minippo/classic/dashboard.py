"""The PPO monitoring dashboard: the nine panels to watch while classic PPO trains.

The metrics to watch (Q21): episode return, policy loss,
value loss, entropy, approx KL, clip fraction, explained variance and gradient norm, plus the
epochs each update ran (where target-KL early stopping cut them short). Used by the
``minippo classic --out`` command and by lesson 08.

Every panel's x axis is the global environment step. Several runs (e.g. with and without a
``kl_old_target``) can share one figure; each gets its own colour.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np
from matplotlib.ticker import FuncFormatter, MaxNLocator

from minippo.plotting import course_style, new_figure, save_figure

# (metric key, panel title, y-axis label with units, y scale)
PANELS = (
    ("losses/policy_loss", "policy loss -L^CLIP", "loss (whitened-advantage units)", "linear"),
    ("losses/value_loss", "value loss 0.5 (V - R)^2", "loss (return units squared)", "log"),
    ("losses/entropy", "entropy of the policy", "entropy (nats per action)", "linear"),
    ("losses/approx_kl", "KL to the rollout policy (k3 estimate)", "KL (nats per action)", "log"),
    ("losses/clipfrac", "clip fraction", "fraction of samples clipped", "linear"),
    ("losses/explained_variance", "explained variance of the critic", "1 - Var[R - V] / Var[R]", "linear"),
    ("losses/grad_norm", "gradient norm (before clipping)", "global L2 norm", "log"),
)
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")


def rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each position (fewer at the start)."""
    c = np.cumsum(np.concatenate([[0.0], np.asarray(x, dtype=np.float64)]))   # (E + 1,)
    idx = np.arange(1, len(x) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def plot_dashboard(runs: Mapping[str, dict], path: str | os.PathLike, *, title: str | None = None,
                   goal: float | None = 475.0, window: int = 20) -> Path:
    """Draw the dashboard of one or more :func:`~minippo.classic.ppo.train_ppo` results.

    Parameters
    ----------
    runs : label -> result dict (``episode_returns``, ``episode_steps``, ``history``, ``config``);
        at most as many runs as :data:`COLORS` (a ``ValueError`` otherwise: none is dropped).
    path : the PNG to write.
    goal : a dashed line on the return panel (None: none).
    window : episodes in the rolling mean of the return panel.
    """
    if not 1 <= len(runs) <= len(COLORS):
        raise ValueError(f"`runs` must hold 1 to {len(COLORS)} runs (one colour each), got {len(runs)}")
    # matplotlib's object API inside the course style: no pyplot, no global state (safe in any program)
    with course_style():
        return _draw_dashboard(runs, path, title, goal, window)


def _draw_dashboard(runs, path, title, goal, window) -> Path:

    fig = new_figure((15, 10.5))
    axes = fig.subplots(3, 3).ravel()
    for (label, res), color in zip(runs.items(), COLORS):
        hist = res["history"]
        steps = np.array([h["global_step"] for h in hist])
        stops = np.array([h.get("early_stop_epoch") is not None for h in hist])
        # return: every episode as a dot, the rolling mean as a line
        ax = axes[0]
        ret, ep_steps = np.asarray(res["episode_returns"]), np.asarray(res["episode_steps"])
        ax.scatter(ep_steps, ret, s=3, color=color, alpha=0.15, linewidths=0)
        if len(ret):
            ax.plot(ep_steps, rolling_mean(ret, window), color=color, lw=1.8,
                    label=f"{label}: mean of last {window}")
        for ax, (key, name, ylabel, scale) in zip(axes[1:8], PANELS):
            y = np.array([np.nan if h.get(key) is None else h[key] for h in hist], dtype=float)
            if scale == "log":
                y = np.where(y > 0, y, np.nan)                 # log axes cannot show 0
            ax.plot(steps, y, color=color, lw=1.0, alpha=0.9, label=label)
            ax.set_title(name)
            ax.set_ylabel(ylabel)
            ax.set_yscale(scale)
            if key == "losses/approx_kl" and stops.any():
                ax.scatter(steps[stops], y[stops], marker="x", s=28, color=color, zorder=3,
                           label=f"{label}: early stop ({stops.sum()})")
        kl_old_target = res.get("config", {}).get("kl_old_target")
        if kl_old_target is not None:
            axes[4].axhline(kl_old_target, color=color, ls="--", lw=1, label=f"early-stop threshold {kl_old_target:g}")
        max_norm = res.get("config", {}).get("max_grad_norm")
        if max_norm is not None and label == next(iter(runs)):
            axes[7].axhline(max_norm, color="gray", ls="--", lw=1, label=f"clipped to {max_norm:g} (max_grad_norm)")
        # epochs actually run per update: drops below update_epochs are target-KL early stops
        epochs = np.array([h.get("epochs", np.nan) for h in hist], dtype=float)
        axes[8].step(steps, epochs, where="mid", color=color, lw=1.0, label=label)
        if stops.any():
            axes[8].scatter(steps[stops], epochs[stops], marker="x", s=20, color=color)
    axes[0].set_title("episode return")
    axes[0].set_ylabel("return (steps balanced)")
    if goal is not None:
        axes[0].axhline(goal, color="gray", ls="--", lw=1, label=f"goal {goal:g}")
    axes[3].axhline(np.log(2), color="gray", ls=":", lw=1, label="log 2 (uniform over 2 actions)")
    axes[6].axhline(1.0, color="gray", ls=":", lw=1)
    axes[8].set_title("epochs run per update (x = target-KL stop)")
    axes[8].set_ylabel("epochs")
    axes[8].yaxis.set_major_locator(MaxNLocator(integer=True))
    kilo = FuncFormatter(lambda x, _: f"{x / 1000:g}k" if x else "0")
    for ax in axes:
        ax.set_xlabel("environment steps")
        ax.xaxis.set_major_formatter(kilo)
        ax.grid(True, alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if handles and ax in (axes[0], axes[3], axes[4], axes[7], axes[8]):
            ax.legend(loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)
