"""Reading the KL-control sweeps of lesson 15: each control's outcome, the seed noise, and the KL of each update.

Legend: S seeds, I iterations; a variant is one entry of :meth:`minippo.studies.study.Study.sweep`'s output.

Two KLs with two jobs (Ziegler et al. 2019, arXiv:1909.08593, eq. (2); InstructGPT, arXiv:2203.02155, eq. (2);
PPO paper, arXiv:1707.06347, eq. (8)):

* the KL to the reference, charged in the reward ``r_t = -beta kl_t`` (+ the score on the last token), logged
  per response as ``objective/kl_exact``: :func:`control_summary` reads where each control left it (mean of
  the last 5 iterations, :func:`minippo.studies.study.final`), with the gold and the final beta;
* the KL of one update, KL(pi_old || pi) per token (k3 on the rollout's tokens after the K epochs, logged by
  the lesson's callback as ``probe/update_kl``): :func:`update_kl_arms` reads, per arm and seed, its geometric
  mean over the iterations (``log10`` of it, a mean of logs, since one update's KL spans orders of magnitude),
  the largest update, how many exceed ``kl_old_target``, and the minibatches' approx KL before their steps.

The seed noise of each is pooled over the variants (:func:`minippo.studies.sweep_stats.pooled_seed_std`).
"""
from __future__ import annotations

import numpy as np

from minippo.studies.study import final
from minippo.studies.sweep_stats import pooled_seed_std, seed_curves


def control_seeds(variant: dict, key: str) -> list[float]:
    """(S,) per seed of one variant: evaluation gold (``key="gold"``) or the final exact KL to the reference
    (``key="kl"``, mean of the last 5 iterations' ``objective/kl_exact``)."""
    if key == "gold":
        return [e["gold_mean"] for e in variant["eval"]]
    if key != "kl":
        raise ValueError(f"`key` must be 'gold' or 'kl', got {key!r}")
    return [final(recs, "objective/kl_exact") for recs in variant["records"]]


def control_summary(runs: dict) -> dict:
    """Per variant of a sweep (name -> variant), means over the seeds: ``kl`` and ``gold`` (last 5 iterations of
    ``objective/kl_exact`` and ``gold/score``), ``eval_gold``, ``eval_kl`` (the evaluation's ``gold_mean`` and
    ``kl_exact_mean``), ``beta`` (the ``kl_coef`` of the last iteration) and ``peak_gold`` (the largest of the
    seed-mean gold curve, (I,))."""
    out = {}
    for name, v in runs.items():
        out[name] = {"kl": float(np.mean([final(recs, "objective/kl_exact") for recs in v["records"]])),
                     "gold": float(np.mean([final(recs, "gold/score") for recs in v["records"]])),
                     "eval_gold": float(np.mean([e["gold_mean"] for e in v["eval"]])),
                     "eval_kl": float(np.mean([e["kl_exact_mean"] for e in v["eval"]])),
                     "beta": float(np.mean([recs[-1]["kl_coef"] for recs in v["records"]])),
                     "peak_gold": float(np.max(seed_curves(v, "gold/score").mean(0)))}
    return out


def control_noise(runs: dict) -> dict | None:
    """Seed noise pooled over the variants (name -> variant) of evaluation gold (``"gold"``) and of the final exact
    KL (``"kl"``); None when a variant has a single seed."""
    if min(len(v["records"]) for v in runs.values()) < 2:
        return None
    return {k: pooled_seed_std([control_seeds(v, k) for v in runs.values()])[0] for k in ("gold", "kl")}


def update_kl_arms(arms: dict, target: float) -> dict:
    """Per arm (name -> variant whose records carry ``probe/update_kl``), per seed or over all its updates:

    ``after`` (S,) log10 of the KL of each update, averaged over the iterations; ``largest`` the largest update's
    KL; ``above`` how many updates exceed ``target`` (``kl_old_target``) of ``n_updates``; ``mb_max`` / ``mb_avg``
    the minibatches' approx KL before their steps (``policy/approxkl_max`` / ``_avg``, mean over the updates);
    ``steps`` the Adam steps per update (mean); ``lr`` and ``lr_max`` (S, I) the actor's lr at the end of each
    update and the largest inside it; ``skipped`` the minibatches skipped in all; ``gold`` (S,) evaluation gold;
    ``kl_ref`` (S,) the final exact KL to the reference.
    """
    out = {}
    for name, v in arms.items():
        after = seed_curves(v, "probe/update_kl")                          # (S, I)
        out[name] = {"after": np.log10(np.maximum(after, 1e-12)).mean(axis=1), "largest": float(after.max()),
                     "above": int((after > target).sum()), "n_updates": int(after.size),
                     "mb_max": float(seed_curves(v, "policy/approxkl_max").mean()),
                     "mb_avg": float(seed_curves(v, "policy/approxkl_avg").mean()),
                     "steps": float(seed_curves(v, "policy/steps").mean()), "lr": seed_curves(v, "lr"),
                     "lr_max": seed_curves(v, "lr_max"),
                     "skipped": int(seed_curves(v, "policy/skipped_minibatches").sum()),
                     "gold": np.array([e["gold_mean"] for e in v["eval"]]),
                     "kl_ref": np.array([final(recs, "objective/kl_exact") for recs in v["records"]])}
    return out


def arms_noise(arms: dict) -> dict | None:
    """Seed noise of :func:`update_kl_arms`'s ``after``, ``gold`` and ``kl_ref``, pooled over the arms; None when
    an arm has a single seed."""
    if min(len(a["gold"]) for a in arms.values()) < 2:
        return None
    return {k: pooled_seed_std([a[k] for a in arms.values()])[0] for k in ("after", "gold", "kl_ref")}
