"""Figures of an RLHF-PPO run: reward, gold, KL, entropy, clip fraction and length against iterations.

:func:`draw_curves` draws the six standard panels into given axes (lessons add their own panels
beside them); :func:`plot_run` makes the whole figure from the ``metrics.jsonl`` records.
"""
from __future__ import annotations

import os

import numpy as np

from minippo.plotting import course_style, new_figure, save_figure

#: panel title -> [(metric, label)], the curves of the standard dashboard
PANELS = {
    "reward model score": [("objective/scores", "score (RM - penalties)"), ("objective/rlhf_reward", "score - beta KL")],
    "gold score (simulated human)": [("gold/score", "gold")],
    "KL to the reference (nats / response)": [("objective/kl", "k1 per response"),
                                              ("objective/kl_exact", "exact per response")],
    "entropy (nats / token)": [("policy/entropy_avg", "H[pi(.|s_t)]")],
    "clip fraction": [("policy/clipfrac_avg", "policy"), ("val/clipfrac_avg", "value")],
    "response length (tokens)": [("response/length", "mean length")],
}


def _series(records, key):
    it = np.array([r["iteration"] for r in records if r.get(key) is not None], dtype=float)
    y = np.array([r[key] for r in records if r.get(key) is not None], dtype=float)
    return it, y


def draw_curves(axes, records: list[dict], *, kl_ref_target: float | None = None, reference: dict | None = None) -> None:
    """Draw the :data:`PANELS` into six matplotlib axes (any iterable of 6).

    ``kl_ref_target`` draws the adaptive controller's target on the KL panel (with beta on a twin axis);
    ``reference`` maps a metric to a horizontal reference line (e.g. ``{"gold/score": sft_gold}``).
    """
    axes = list(axes)
    if len(axes) != len(PANELS):
        raise ValueError(f"`axes` must hold {len(PANELS)} axes, got {len(axes)}")
    for ax, (title, curves) in zip(axes, PANELS.items()):
        for key, label in curves:
            x, y = _series(records, key)
            if len(x):
                ax.plot(x, y, label=label, lw=1.5)
            if reference and key in reference:
                ax.axhline(reference[key], color="grey", ls="--", lw=1, label=f"{label} before PPO")
        if title.startswith("KL"):
            if kl_ref_target is not None:
                ax.axhline(kl_ref_target, color="crimson", ls=":", lw=1.2, label=f"target {kl_ref_target:g}")
            x, beta = _series(records, "kl_coef")
            if len(x):
                twin = ax.twinx()
                twin.plot(x, beta, color="tab:green", lw=1, alpha=0.7)
                twin.set_ylabel("beta (kl_coef)", color="tab:green")
                twin.tick_params(axis="y", colors="tab:green")
        ax.set_title(title)
        ax.set_xlabel("iteration")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")


def plot_run(records: list[dict], path: str | os.PathLike | None = None, *, kl_ref_target: float | None = None,
             reference: dict | None = None, title: str | None = None):
    """The six-panel dashboard of a run; saved to ``path`` when given. Returns the figure."""
    with course_style():
        fig = new_figure((15, 8))
        axes = fig.subplots(2, 3)
        draw_curves(axes.ravel(), records, kl_ref_target=kl_ref_target, reference=reference)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
    return fig
