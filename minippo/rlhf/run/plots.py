"""Figures of an RLHF run: for PPO reward, gold, KL, entropy, clip fraction and length against iterations;
for DPO (``minippo rlhf --method dpo``) its loss, accuracy, implicit rewards, log-probs, gold and KL against steps.

:func:`draw_curves` draws the six standard panels into given axes (lessons add their own panels
beside them); :func:`plot_run` makes the whole figure from the ``metrics.jsonl`` records.
"""
from __future__ import annotations

import os

import numpy as np

from minippo.checks import check_choice
from minippo.plotting import course_style, new_figure, save_figure

#: panel title -> (y-axis label with units, [(metric, label)]), the curves of the standard dashboard
PANELS = {
    "reward-model score of the rollouts": ("score per response (normalised RM)",
                                           [("objective/scores", "score: RM minus penalties"),
                                            ("objective/rlhf_reward", "score minus beta x KL (what PPO maximises)")]),
    "gold score (simulated human)": ("gold score per response", [("gold/score", "gold score of the rollouts")]),
    "KL to the reference": ("KL (nats / response)", [("objective/kl", "sampled estimate (k1)"),
                                                      ("objective/kl_exact", "exact (full distributions)")]),
    "entropy of the policy (update's tokens)": ("entropy (nats / token)", [("policy/entropy_avg", "entropy")]),
    "clip fraction": ("fraction of tokens clipped", [("policy/clipfrac_avg", "policy ratio clipped"),
                                                     ("val/clipfrac_avg", "value clipped")]),
    "response length (rollout mean)": ("tokens per response", [("response/length", "length")]),
}


#: the same six panels for a DPO run (``metrics.jsonl`` of :mod:`minippo.rlhf.run.dpo_trainer`, by ``step``; the
#: held-out and sample metrics only at its evaluation steps)
DPO_PANELS = {
    "DPO loss": ("loss (nats per pair)", [("loss", "training pairs of the step"), ("eval_loss", "held-out pairs")]),
    "implicit reward model's accuracy": ("fraction of pairs ordered right",
                                         [("rewards/accuracies", "training pairs of the step"),
                                          ("eval_rewards/accuracies", "held-out pairs")]),
    "implicit rewards (training pairs)": ("beta x log(pi / pi_ref) per response",
                                          [("rewards/chosen", "chosen"), ("rewards/rejected", "rejected")]),
    "log-probs of the pairs (training)": ("log pi(y|x) (nats per response)",
                                          [("logps/chosen", "chosen"), ("logps/rejected", "rejected")]),
    "gold score (simulated human)": ("gold score per response", [("gold/score", "gold score of fresh samples")]),
    "KL to the reference": ("KL (nats / response)", [("objective/kl", "sampled estimate (k1)"),
                                                      ("objective/kl_exact", "exact (full distributions)")]),
}
#: method -> (its panels, the record key of the x axis, the x axis label)
LAYOUTS = {"ppo": (PANELS, "iteration", "PPO iteration"), "dpo": (DPO_PANELS, "step", "DPO step")}


def _series(records, key, x="iteration"):
    it = np.array([r[x] for r in records if r.get(key) is not None], dtype=float)
    y = np.array([r[key] for r in records if r.get(key) is not None], dtype=float)
    return it, y


def draw_curves(axes, records: list[dict], *, kl_ref_target: float | None = None, reference: dict | None = None,
                method: str = "ppo") -> None:
    """Draw the :data:`PANELS` (``method="dpo"``: :data:`DPO_PANELS`) into six matplotlib axes (any iterable of 6).

    ``kl_ref_target`` draws the adaptive controller's target on the KL panel; beta, when the records log
    it, goes on a right-hand axis of the same panel, and that panel's legend sits below the axes (beta
    and the KL cross anywhere, so no corner is free). ``reference`` maps a metric to a horizontal
    reference line (e.g. ``{"gold/score": sft_gold}``).
    """
    check_choice("method", method, tuple(LAYOUTS))
    panels, x_key, x_label = LAYOUTS[method]
    axes = list(axes)
    if len(axes) != len(panels):
        raise ValueError(f"`axes` must hold {len(panels)} axes, got {len(axes)}")
    for ax, (title, (ylabel, curves)) in zip(axes, panels.items()):
        for key, label in curves:
            x, y = _series(records, key, x_key)
            if len(x):
                ax.plot(x, y, label=label, lw=1.5, marker="o" if len(x) < 12 else None, ms=3)
            if reference and key in reference:
                ax.axhline(reference[key], color="grey", ls="--", lw=1,
                           label=f"before {method.upper()} (SFT policy)")
        ax.set_title(title)
        ax.set_xlabel(x_label)
        ax.set_ylabel(ylabel)
        handles, labels = ax.get_legend_handles_labels()
        below = False
        if title.startswith("KL"):
            if kl_ref_target is not None:
                handles.append(ax.axhline(kl_ref_target, color="crimson", ls=":", lw=1.2))
                labels.append(f"controller's target ({kl_ref_target:g})")
            x, beta = _series(records, "kl_coef", x_key)
            if len(x):
                twin = ax.twinx()
                handles += twin.plot(x, beta, color="tab:green", lw=1, alpha=0.8)
                labels.append("beta (right axis)")
                twin.set_ylabel("beta, the KL penalty's coefficient", color="tab:green")
                twin.tick_params(axis="y", colors="tab:green")
                twin.grid(False)
                below = True
        if len(handles) < 2:                    # one curve: the title and the y label say what it is
            continue
        if below:
            ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.17), fontsize=8, ncol=2)
        else:
            ax.legend(handles, labels, loc="best", fontsize=8)


def plot_run(records: list[dict], path: str | os.PathLike | None = None, *, kl_ref_target: float | None = None,
             reference: dict | None = None, title: str | None = None, method: str = "ppo"):
    """The six-panel dashboard of a run (``method``: "ppo" or "dpo"); saved to ``path`` when given. Returns the
    figure."""
    with course_style():
        fig = new_figure((15, 8.5))
        axes = fig.subplots(2, 3)
        draw_curves(axes.ravel(), records, kl_ref_target=kl_ref_target, reference=reference, method=method)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
    return fig
