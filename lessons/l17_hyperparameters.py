r"""Lesson 17 - hyperparameters: epsilon, lambda, beta, PPO epochs and minibatch count swept, testing common claims.

Pipeline step: the knobs of RLHF-PPO: clip epsilon, learning rate, epochs, minibatch size, gamma, lambda,
entropy and value coefficients, gradient clipping, target KL. PPO is sensitive to them, above all to the
learning rate, the clip range, the number of epochs and the scale of the advantages. Each knob below is moved
alone from the lesson's base run (the main job's defaults: clip_eps 0.2, lam 0.95, adaptive beta from 0.2
towards 4 nats/response, 4 epochs, 4 minibatches per batch) on the cached SFT policy and reward model, for
several PPO seeds, and the policy is judged on held-out prompts:

    clip_eps   0.1, 0.2, 0.5       epsilon of L^CLIP, PPO paper eq. (7)
    lam        0.9, 0.95, 0.99     GAE lambda, eqs. (11)-(12) (gamma = 1)
    beta       fixed 0.01, fixed 0.1, adaptive from 0.2 (Ziegler et al. 2019; the per-token KL penalty)
    update_epochs 1, 4, 8             passes over each rollout batch
    minibatches 1, 4, 16           Adam steps per epoch (minibatch_size = batch / count)

The claims tested, as they are usually made: epsilon = 0.2, too small converges slowly, too large (0.5)
collapses the policy because the clip stops working; lambda = 0.95 because a reward model's reward is noisy,
lower it to 0.9 when training oscillates and raise it to 0.99 when it is slow; beta in 0.01-0.1, adaptive,
because a fixed beta lets the KL run away or stalls the update; old data cannot be reused indefinitely
(epochs); a too-large batch per step makes the updates stale (minibatches). A difference counts as real when
it exceeds about two standard errors of the seed noise, pooled over all variants
(`minippo.studies.sweep_stats`).

Paper: the clipped surrogate of the PPO paper (Schulman et al. 2017, arXiv:1707.06347) eq. (7), whose Table 1
compares $\epsilon$ = 0.1, 0.2, 0.3 on MuJoCo (0.2 best); GAE (Schulman et al. 2016, arXiv:1506.02438)
eq. (16); the adaptive KL coefficient of Ziegler et al. 2019 (arXiv:1909.08593) sec. 2.2.

The figure (from --full: 30 iterations x 64 responses, lr 2e-4, 3 PPO seeds): one column per hyperparameter;
rows: gold score and KL to the reference per response of the final policy (held-out prompts), the policy clip
fraction and the approx KL of the updates (k3 of KL($\pi_{old} \| \pi$)) averaged over the run, each as one
dot per seed and the mean as a line; the base run's value is shaded.

Exercises:
1. Make epsilon matter: raise lr to 2e-3 (or update_epochs to 16) and sweep clip_eps again. At which clip
   fraction does epsilon = 0.5 start to hurt?
2. The adaptive controller barely moves beta in a short run. Set `kl_ref_horizon` to 100: does the beta
   column change, and does the adaptive run now land at the target?
3. Sweep `lam` with the critic initialised from the SFT trunk (`critic_init="sft"`): with a worse
   critic, does lambda matter more? Why should it (bias of TD(0) vs variance of Monte Carlo, lesson 07)?

Questions: Q52, Q54, Q55, Q56, Q57.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (Verdict, all_of, comparison, diff_text, lesson_main, measurement, pyplot, save,
                             seed_compare, time_line)
from minippo.studies.study import Study
from minippo.studies.sweep_stats import pooled_seed_std, seed_values

KL_TARGET = 4.0


def axes_of(batch_size: int) -> dict:
    """Hyperparameter -> [(label, config overrides)], the base run's value marked by empty overrides."""
    return {
        "clip_eps": [("0.1", {"clip_eps": 0.1}), ("0.2", {}), ("0.5", {"clip_eps": 0.5})],
        "lam": [("0.9", {"lam": 0.9}), ("0.95", {}), ("0.99", {"lam": 0.99})],
        "beta": [("fixed 0.01", {"kl_ref_controller": "fixed", "kl_ref_coef": 0.01}),
                 ("fixed 0.1", {"kl_ref_controller": "fixed", "kl_ref_coef": 0.1}), ("adaptive", {})],
        "update_epochs": [("1", {"update_epochs": 1}), ("4", {}), ("8", {"update_epochs": 8})],
        "minibatches": [("1", {"minibatch_size": batch_size}), ("4", {}), ("16", {"minibatch_size": batch_size // 16})],
    }


def sizes(quick: bool, full: bool) -> dict:
    """Run lengths: quick (smoke test), default (classroom size), full (the committed figure)."""
    if quick:
        return dict(iterations=2, batch_size=16, minibatch_size=4, lr=5e-4, seeds=(0, 1))
    if full:
        return dict(iterations=30, batch_size=64, minibatch_size=16, lr=2e-4, seeds=(0, 1, 2))
    return dict(iterations=10, batch_size=32, minibatch_size=8, lr=5e-4, seeds=(0, 1))


EVAL_KEYS = ("gold_mean", "kl_mean", "length_mean")                # the held-out evaluation of the final policy
RUN_KEYS = ("policy/clipfrac_avg", "policy/approxkl_avg")          # averaged over the run (the lr decays to 0)


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick, full)
    study = Study(quick=quick, seed=seed)
    base = {k: sz[k] for k in ("iterations", "batch_size", "minibatch_size", "lr")}
    axes = axes_of(sz["batch_size"])
    # every distinct variant once (the base run is shared by the five axes), several PPO seeds each
    variants = {"base": {}}
    for axis, points in axes.items():
        variants.update({f"{axis}={label}": ov for label, ov in points if ov})
    sweep = study.sweep(variants, seeds=sz["seeds"], base=base)
    table = {}
    for axis, points in axes.items():
        table[axis] = []
        for label, ov in points:
            v = sweep["base" if not ov else f"{axis}={label}"]
            row = {"label": label, "base": not ov, "cpu": float(np.mean([t["cpu"] for t in v["time"]]))}
            row.update({k: seed_values(v, k) for k in EVAL_KEYS})
            row.update({k: seed_values(v, k, last=sz["iterations"]) for k in RUN_KEYS})
            row["kl_coef"] = seed_values(v, "kl_coef", last=1)      # beta of the last iteration
            table[axis].append(row)
    noise = None                     # seed noise pooled over all variants (needs two seeds or more)
    if len(sz["seeds"]) > 1:
        noise = {k: pooled_seed_std([seed_values(v, k) for v in sweep.values()])[0] for k in EVAL_KEYS}
        noise.update({k: pooled_seed_std([seed_values(v, k, last=sz["iterations"]) for v in sweep.values()])[0]
                      for k in RUN_KEYS})
    cfg = study.config(**base)
    return {"sizes": sz, "base": base, "reference": study.reference, "quick": quick, "full": full, "table": table,
            "noise": noise, "kl_ref": {"coef": cfg.kl_ref_coef, "horizon": cfg.kl_ref_horizon},
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}


def _row(r: dict, axis: str, label: str) -> dict:
    return next(p for p in r["table"][axis] if p["label"] == label)


def _cmp(r: dict, a: dict, b: dict, key: str = "gold_mean") -> dict:
    """mean(b) - mean(a) of a per-seed key with the seed noise pooled over all variants (se None: one seed)."""
    return seed_compare(a[key], b[key], None if r["noise"] is None else r["noise"][key])


def _vs(r: dict, a: dict, b: dict, key: str = "gold_mean") -> str:
    """b - a with its standard error of the seed noise (or just the difference with one seed)."""
    return diff_text(_cmp(r, a, b, key), "+.2f" if key in ("gold_mean", "kl_mean") else "+.3f")


def _above(r: dict, p: dict, key: str, value: float) -> dict:
    """``mean(p[key]) - value`` over the seeds with its standard error (seed noise / sqrt(S); None with one seed)."""
    se = None if r["noise"] is None else float(r["noise"][key] / np.sqrt(len(p[key])))
    return {"diff": float(p[key].mean() - value), "se": se}


GOLD, CF, AK, KL = "gold_mean", "policy/clipfrac_avg", "policy/approxkl_avg", "kl_mean"
NAMES = {GOLD: "gold", CF: "clipfrac", AK: "approx KL", KL: "KL"}
FMT = {GOLD: "+.2f", KL: "+.2f", CF: "+.3f", AK: "+.4f"}


def _cv(r: dict, key: str, claim: str, a: dict, b: dict, what: str, expect: int, axis: str) -> Verdict:
    """A comparison verdict b vs a on ``what`` (a per-seed key), with the pooled seed noise."""
    return comparison(key, claim, _cmp(r, a, b, what), expect=expect, quantity=NAMES[what], fmt=FMT[what],
                      labels=(f"{axis} {a['label']}", f"{axis} {b['label']}"),
                      values=(float(a[what].mean()), float(b[what].mean())))


def claims(r: dict) -> list[tuple[str, str, list[Verdict]]]:
    """(common claim, what was measured, its verdicts) for each common claim; every verdict from the seed noise."""
    e1, e2, e5 = (_row(r, "clip_eps", x) for x in ("0.1", "0.2", "0.5"))
    l9, l95, l99 = (_row(r, "lam", x) for x in ("0.9", "0.95", "0.99"))
    b01, b1, bad = (_row(r, "beta", x) for x in ("fixed 0.01", "fixed 0.1", "adaptive"))
    p1, p4, p8 = (_row(r, "update_epochs", x) for x in ("1", "4", "8"))
    m1, m4, m16 = (_row(r, "minibatches", x) for x in ("1", "4", "16"))
    k = lambda p: p[KL].mean()                       # noqa: E731
    cf = lambda p: p[CF].mean()                      # noqa: E731
    ak = lambda p: p[AK].mean()                      # noqa: E731
    n_tok = float(l95["length_mean"].mean())         # the base run's response length, tokens
    beta0, horizon = r["kl_ref"]["coef"], r["kl_ref"]["horizon"]
    moved = bad["kl_coef"].mean() / beta0 - 1
    out = [
        ("A common claim: eps = 0.5 collapses the policy (the clip stops working)",
         f"gold 0.2 -> 0.5: {_vs(r, e2, e5)}; clipfrac {cf(e2):.3f} at eps 0.2, {cf(e5):.3f} at eps 0.5: the clip "
         f"still catches {cf(e5):.1%} of the tokens at eps 0.5",
         [_cv(r, "eps05_collapses", "eps = 0.5 collapses the policy: less gold than eps 0.2.", e2, e5, GOLD, -1,
              "eps")]),
        ("A common claim: too small an eps converges slowly",
         f"gold 0.2 -> 0.1: {_vs(r, e2, e1)}; KL 0.2 -> 0.1: {_vs(r, e2, e1, KL)}; clipfrac 0.2 -> 0.1: "
         f"{_vs(r, e2, e1, CF)}",
         [_cv(r, "small_eps_slow", "Too small an eps (0.1) converges slowly: less gold than eps 0.2.", e2, e1, GOLD,
              -1, "eps"),
          _cv(r, "small_eps_clips_more", "The narrow band (eps 0.1) clips more tokens.", e2, e1, CF, +1, "eps"),
          _cv(r, "small_eps_moves_less", "With the narrow band (eps 0.1) the policy moves less (lower KL).", e2, e1,
              KL, -1, "eps")]),
        ("A common claim: lambda = 0.95 is the right default (a noisy RM: low variance matters)",
         f"gold 0.95 -> 0.9: {_vs(r, l95, l9)}; 0.95 -> 0.99: {_vs(r, l95, l99)}. With gamma = 1 the weight of the "
         f"final score's delta on the first token is lambda^(n-1), for the base run's n = {n_tok:.0f} tokens: "
         + " / ".join(f"{lam ** (n_tok - 1):.2f}" for lam in (0.9, 0.95, 0.99)),
         [all_of("lam095_best", "lambda = 0.95 gives more gold than both 0.9 and 0.99.", [
             _cv(r, "vs 0.9", "", l95, l9, GOLD, -1, "lambda"), _cv(r, "vs 0.99", "", l95, l99, GOLD, -1, "lambda")])]),
        ("A common claim: a fixed beta lets the KL run away or stalls the update",
         f"KL: fixed 0.01 {k(b01):.1f}, fixed 0.1 {k(b1):.1f}, adaptive {k(bad):.1f} (target {KL_TARGET:g}); gold vs "
         f"adaptive: fixed 0.01 {_vs(r, bad, b01)}, fixed 0.1 {_vs(r, bad, b1)}. The adaptive controller moved beta "
         f"from {beta0:g} to {bad['kl_coef'].mean():.3f} in {r['sizes']['iterations']} iterations (at most 0.2 x "
         f"batch / {horizon:g} per iteration): "
         + ("in a short run it is almost a fixed beta" if abs(moved) < 0.1 else f"{moved:+.0%}, not a fixed beta"),
         [measurement("beta001_runaway", "Runaway: a fixed beta 0.01 lets the KL overshoot 1.5x the target.", k(b01),
                      1.5 * KL_TARGET, ">", "KL with beta 0.01 (nats)", se=_above(r, b01, KL, 0)["se"], fmt=".2f"),
          _cv(r, "beta01_stalls", "Stall: a fixed beta 0.1 gains less gold than the adaptive controller.", bad, b1,
              GOLD, -1, "beta")]),
        ("A common claim: beta belongs in 0.01 .. 0.1",
         f"gold fixed 0.01 -> 0.1: {_vs(r, b01, b1)}; KL {k(b01):.1f} -> {k(b1):.1f}. A beta multiplies a KL summed "
         f"over ~{n_tok:.0f} tokens: which beta is 'right' depends on the KL budget; a KL target states that budget "
         "directly",
         [measurement("beta001_passes_target", "At the low end of that range (beta 0.01) the KL passes the target.",
                      k(b01), KL_TARGET, ">", "KL with beta 0.01 (nats)", se=_above(r, b01, KL, 0)["se"], fmt=".2f")]),
        ("A common misconception: PPO can reuse old data indefinitely (more epochs)",
         f"approx KL per update 1/4/8 epochs: {ak(p1):.4f} / {ak(p4):.4f} / {ak(p8):.4f}; clipfrac "
         f"{cf(p1):.3f} / {cf(p4):.3f} / {cf(p8):.3f}; gold 4 -> 1: {_vs(r, p4, p1)}, 4 -> 8: {_vs(r, p4, p8)}",
         [all_of("epochs_move_further", "Each extra epoch moves pi further from pi_old on the same data: approx KL "
                 "rises from 1 to 4 to 8 epochs.", [_cv(r, "1 -> 4", "", p1, p4, AK, +1, "epochs"),
                                                    _cv(r, "4 -> 8", "", p4, p8, AK, +1, "epochs")]),
          all_of("epochs_clip_more", "The clip fraction rises with the epochs: the clip discards more of the gradient.",
                 [_cv(r, "1 -> 4", "", p1, p4, CF, +1, "epochs"), _cv(r, "4 -> 8", "", p4, p8, CF, +1, "epochs")]),
          _cv(r, "epochs8_cost_gold", "8 epochs cost gold against 4.", p4, p8, GOLD, -1, "epochs"),
          _cv(r, "epoch1_learns_less", "1 epoch learns less per batch than 4.", p4, p1, GOLD, -1, "epochs")]),
        ("A common claim: a too-large batch per step makes updates stale (minibatch count)",
         f"1 / 4 / 16 minibatches: approx KL {ak(m1):.4f} / {ak(m4):.4f} / {ak(m16):.4f}, clipfrac {cf(m1):.3f} / "
         f"{cf(m4):.3f} / {cf(m16):.3f}, gold {m1[GOLD].mean():+.2f} / {m4[GOLD].mean():+.2f} / "
         f"{m16[GOLD].mean():+.2f}; 4 -> 16: {_vs(r, m4, m16)}. More minibatches = more Adam steps on one batch, so "
         "the later steps use data from an older policy, like more epochs",
         [all_of("minibatches_move_further", "More minibatches per batch move the policy further per update: approx "
                 "KL rises from 1 to 4 to 16 minibatches.", [_cv(r, "1 -> 4", "", m1, m4, AK, +1, "minibatches"),
                                                              _cv(r, "4 -> 16", "", m4, m16, AK, +1, "minibatches")])]),
    ]
    return out


def verdicts(r: dict) -> list[Verdict]:
    """Every verdict of :func:`claims`, in order."""
    return [v for _, _, vs in claims(r) for v in vs]


def narrative(r: dict) -> str:
    sz = r["sizes"]
    L = [f"Base run: {sz['iterations']} iterations x {sz['batch_size']} responses, lr {sz['lr']:g}, PPO seeds "
         f"{list(sz['seeds'])} (linear lr decay, as the main job); SFT gold {r['reference']['gold_mean']:+.3f}. "
         "Values: mean over seeds of the held-out evaluation (gold / KL / length), of the clip fraction and approx "
         "KL averaged over the run, and of beta at the last iteration."]
    if r["noise"] is not None:
        L.append(f"Seed noise pooled over all variants: gold {r['noise']['gold_mean']:.3f}, "
                 f"KL {r['noise']['kl_mean']:.2f}.")
    L.append(f"  {'hyperparameter':<15}{'value':<12}{'gold':>8}{'+-':>6}{'KL':>7}{'length':>7}{'clipfrac':>9}"
             f"{'approx KL':>10}{'beta end':>9}{'CPU s':>7}")
    for axis, points in r["table"].items():
        for p in points:
            L.append(f"  {axis:<15}{p['label'] + (' *' if p['base'] else ''):<12}{p['gold_mean'].mean():>+8.3f}"
                     f"{p['gold_mean'].std():>6.3f}{p['kl_mean'].mean():>7.2f}{p['length_mean'].mean():>7.1f}"
                     f"{p['policy/clipfrac_avg'].mean():>9.3f}{p['policy/approxkl_avg'].mean():>10.4f}"
                     f"{p['kl_coef'].mean():>9.3f}{p['cpu']:>7.1f}")
    L.append("  (* the base run; +- is the std over seeds)\n\nCommon claims at this scale:")
    for claim, measured, vs in claims(r):
        L += [f"- {claim}", f"    measured: {measured}."] + [v.render("    ") for v in vs]
    L.append(time_line(r, sizes(quick=False, full=True)))
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    table = r["table"]
    rows = (("gold_mean", "gold score (held-out prompts)"), ("kl_mean", "KL to the reference (nats / response)"),
            ("policy/clipfrac_avg", "policy clip fraction (run mean)"),
            ("policy/approxkl_avg", "approx KL of the updates (run mean, log)"))
    fig, axes = plt.subplots(len(rows), len(table), figsize=(4.0 * len(table), 14), sharey="row")
    for j, (axis, points) in enumerate(table.items()):
        x = np.arange(len(points))
        for i, (key, ylabel) in enumerate(rows):
            ax = axes[i, j]
            for k, p in enumerate(points):
                vals = np.maximum(p[key], 1e-6) if key == "policy/approxkl_avg" else p[key]
                ax.plot(np.full(len(vals), k) + np.linspace(-0.08, 0.08, len(vals)), vals, "o", color="tab:blue",
                        alpha=0.6, ms=6)
                if p["base"]:
                    ax.axvspan(k - 0.3, k + 0.3, color="gold", alpha=0.25, lw=0)
            floor = 1e-6 if key == "policy/approxkl_avg" else -np.inf      # a log axis cannot show 0
            ax.plot(x, [max(p[key].mean(), floor) for p in points], "-", color="tab:blue", lw=2)
            if key == "gold_mean":
                ax.axhline(r["reference"]["gold_mean"], color="k", ls="--", lw=1, label="SFT policy")
            if key == "kl_mean":
                ax.axhline(KL_TARGET, color="crimson", ls=":", lw=1.2, label="adaptive target")
            if key == "policy/approxkl_avg":
                ax.set_yscale("log")
            ax.set_xticks(x, [p["label"] for p in points])
            ax.set_xlim(-0.5, len(points) - 0.5)
            if j == 0:
                ax.set_ylabel(ylabel)
                if key in ("gold_mean", "kl_mean"):
                    ax.legend(fontsize=8, loc="best")
        axes[0, j].set_title(f"({'abcde'[j]}) {axis}")
        axes[-1, j].set_xlabel(axis)
    sz = r["sizes"]
    fig.suptitle(f"One hyperparameter at a time from the base run (shaded): {sz['iterations']} iterations x "
                 f"{sz['batch_size']} responses, lr {sz['lr']:g}, {len(sz['seeds'])} PPO seeds (dots), mean (line); "
                 "clip fraction and approx KL averaged over the run", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    save(fig, path)


if __name__ == "__main__":
    main()
