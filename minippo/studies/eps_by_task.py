"""Does the best clip range depend on the task? A sweep of clip_eps on two tasks, read as a 2 x E table (Q53).

Legend: S seeds; a run is one entry of :meth:`minippo.studies.study.Study.sweep`'s output.

PPO's L^CLIP (Schulman et al. 2017, arXiv:1707.06347, eq. (7)) clips each ratio to [1 - eps, 1 + eps]. A
common claim is that eps should depend on the task (wider for longer, sparser-reward tasks). With gold
g(task, eps) per seed, the question is an interaction (:func:`minippo.studies.sweep_stats.compare_interaction`)::

    d(eps) = (mean g(long, eps) - mean g(long, 0.2)) - (mean g(short, eps) - mean g(short, 0.2))

with the seed noise pooled over every run. :func:`eps_table` reads the per-seed numbers, :func:`eps_verdict`
the best eps per task, its lead over the runner-up, and d(eps) for every eps other than 0.2 (the default).
"""
from __future__ import annotations

from minippo.studies.sweep_stats import compare_interaction, pooled_seed_std, seed_compare, seed_values

EVAL_KEYS = ("gold_mean", "length_mean", "kl_exact_mean", "ended_frac")      # evaluation summaries, per seed
RUN_KEYS = ("policy/clipfrac_avg", "policy/approxkl_avg")                    # record keys, mean over the whole run


def eps_table(runs: dict, tasks, eps, name) -> dict:
    """Per task and eps, per seed: the evaluation's ``gold_mean``, ``length_mean``, ``kl_exact_mean``,
    ``ended_frac`` and the run means of ``policy/clipfrac_avg`` and ``policy/approxkl_avg`` ((S,) arrays);
    ``name(task, eps)`` is the run's key in ``runs``. Returns ``{"table": task -> eps -> dict, "noise"}``,
    ``noise`` the seed noise of the gold pooled over every run (None when a run has a single seed)."""
    out = {}
    for task in tasks:
        out[task] = {}
        for e in eps:
            v = runs[name(task, e)]
            n = len(v["records"][0])
            out[task][e] = {**{k: seed_values(v, k) for k in EVAL_KEYS},
                            **{k: seed_values(v, k, last=n) for k in RUN_KEYS}}
    groups = [x["gold_mean"] for t in out.values() for x in t.values()]
    noise = pooled_seed_std(groups)[0] if min(len(g) for g in groups) > 1 else None
    return {"table": out, "noise": noise}


def eps_verdict(q: dict, tasks, eps, base: float = 0.2) -> dict:
    """From :func:`eps_table`'s ``q`` (two tasks: short, long): per task the best eps by mean gold and its lead
    over the runner-up
    (:func:`minippo.studies.sweep_stats.seed_compare`); per eps other than ``base`` the interaction
    d(eps) (module docstring), for a verdict by :mod:`minippo.studies.verdicts`. Returns ``{"best", "lead",
    "interaction", "noise"}``."""
    t, noise = q["table"], q["noise"]
    short, long_ = tasks
    best, lead = {}, {}
    for task in tasks:
        ranked = sorted(eps, key=lambda e: t[task][e]["gold_mean"].mean(), reverse=True)
        best[task] = ranked[0]
        lead[task] = seed_compare(t[task][ranked[1]]["gold_mean"], t[task][ranked[0]]["gold_mean"], noise)
    inter = {}
    for e in eps:
        if e != base and noise is not None:
            inter[e] = compare_interaction(t[short][base]["gold_mean"], t[short][e]["gold_mean"],
                                           t[long_][base]["gold_mean"], t[long_][e]["gold_mean"], noise)
    return {"best": best, "lead": lead, "interaction": inter, "noise": noise}
