"""Probing a shared critic: how much of the actor trunk's gradient comes from the value loss.

Legend: B minibatch (responses), Tn response tokens, C channels.

With ``critic="shared"`` the value head reads the actor's last hidden state h_L(s_t) (a value
head on the language model, Q59). Without stop-gradient the value loss pushes on the trunk too::

    V = w . h_L + b          dL^VF / dh_L = w * dL^VF / dV          (fan-out into the trunk, gpt.py)

A critic on the actor's trunk is said to over-fit to the actor's features, and stop-gradient is the
usual recommendation (Q59). :func:`trunk_gradient_split` measures the push directly on one minibatch: the
gradient of the whole loss (PPO eq. (9), plus whatever the config adds) with the value loss flowing into
the trunk, minus the same gradient with stop-gradient, is exactly the value loss's share (everything
else is unchanged by the switch). Its norm next to the norm of the whole trunk gradient says how hard
the critic pulls on the features the policy uses.
"""
from __future__ import annotations

import math

import numpy as np

from minippo.rlhf.ppo_knobs import KnobsConfig, minibatch_loss_and_grads

HEAD = ("scalar_head.w", "scalar_head.b")


def _norm(grads: dict) -> float:
    return math.sqrt(sum(float(np.sum(np.asarray(g, dtype=np.float64) ** 2)) for g in grads.values()))


def trunk_gradient_split(state, rollout, cfg, rows=None) -> dict:
    """Norms of the actor trunk's gradient on a minibatch, and of the value loss's part of it.

    Parameters
    ----------
    state : the :class:`minippo.rlhf.ppo_knobs.KnobsState` of a run with ``cfg.critic == "shared"`` (e.g.
        ``trainer.state``)
    rollout : a Rollout with ``adv`` and ``returns`` (e.g. ``trainer.last_rollout``)
    cfg : the KnobsConfig of the run (``vf_coef``, clipping, ...)
    rows : indices of the minibatch (default: the first ``cfg.minibatch_size`` rows)

    Returns
    -------
    dict: ``total`` the norm of the trunk gradient with the value loss flowing in (no stop-gradient),
    ``value`` the norm of the value loss's part (``total``'s gradient minus the stop-gradient one),
    ``share`` = value / total, ``head_w_norm`` = |w| of the value head. Nothing is updated.
    """
    critic = cfg.critic if isinstance(cfg, KnobsConfig) else f"a {type(cfg).__name__} (no shared critic)"
    if critic != "shared":
        raise ValueError(f"`cfg.critic` must be 'shared' (a value head on the actor's trunk), got {critic!r}")
    if rollout.adv is None or rollout.returns is None:
        raise ValueError("`rollout` must carry `adv` and `returns` (compute_advantages first)")
    if rows is None:
        rows = np.arange(cfg.minibatch_size)
    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim != 1 or not 1 <= rows.size <= rollout.batch_size or rows.min() < 0 or rows.max() >= rollout.batch_size:
        raise ValueError(f"`rows` must hold 1 .. {rollout.batch_size} row indices in [0, {rollout.batch_size}), "
                         f"got {rows.tolist()}")
    mb, grads = rollout.take(rows), {}
    for sg in (False, True):
        g = minibatch_loss_and_grads(state, mb, cfg.replace(shared_stop_gradient=sg))[2]
        grads[sg] = {k: v for k, v in g.items() if k not in HEAD}
    total = _norm(grads[False])
    value = _norm({k: grads[False][k].astype(np.float64) - grads[True][k] for k in grads[False]})
    return {"total": total, "value": value, "share": value / total if total > 0 else 0.0,
            "head_w_norm": float(np.linalg.norm(state.actor.params["scalar_head.w"]))}
