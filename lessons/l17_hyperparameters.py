r"""Lesson 17 - hyperparameters: epsilon, lambda, beta, PPO epochs and minibatch count swept, testing common claims.

Pipeline step: the knobs of RLHF-PPO: clip epsilon, learning rate, epochs, minibatch size, gamma, lambda,
entropy and value coefficients, gradient clipping, target KL. PPO is often said to be most sensitive to
the learning rate, the clip range, the number of epochs and the scale of the advantages; the lesson measures
which of them move the gold beyond the seed noise at this size (the advantages' scale: lesson 14, Q22).
Each knob below is moved alone from the lesson's base run (the main job's defaults: clip_eps 0.2, lam 0.95, adaptive beta from 0.2
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

`--full` also runs the knobs beyond the grid (`minippo.studies.knob_sweeps`), at the default size (10
iterations x 32 responses, lr 5e-4) on PPO seeds 0 and 1: the learning rate and c1 (vf_coef) divided and
multiplied by 4; gamma 0.9 against 1; the batch as prompts x responses per prompt (32 x 1, 8 x 4, 16 x 4); a
critic started from the SFT trunk instead of the reward model; whitened rewards; the terminal score alone (no
KL term). It measures the raw advantages' variance (before PPO whitens them) and how well the final score
reaches the first token, and, on the grid's lambda runs, the oscillation (std of the change of the batch's RM
score from one iteration to the next) and the speed (iterations until its 3-iteration mean reaches half-way
from the first iteration to lambda 0.95's final value) that the lambda rule of thumb speaks of.

Paper: the clipped surrogate of the PPO paper (Schulman et al. 2017, arXiv:1707.06347) eq. (7), whose Table 1
compares $\epsilon$ = 0.1, 0.2, 0.3 on MuJoCo (0.2 best); GAE (Schulman et al. 2016, arXiv:1506.02438)
eq. (16); the adaptive KL coefficient of Ziegler et al. 2019 (arXiv:1909.08593) sec. 2.2.

The figure (from --full: 30 iterations x 64 responses, lr 2e-4, 3 PPO seeds): one column per hyperparameter;
rows: gold score and KL to the reference per response of the final policy (held-out prompts), the policy clip
fraction and the approx KL of the updates (k3 of KL($\pi_{old} \| \pi$)) averaged over the run, each as one
dot per seed and the mean as a line; the base run's value is shaded. A fifth row shows the knobs beyond the
grid: (f) gold against the lr and c1 factors, (g) gold of the other variants, (h) the raw advantages'
variance, (i)-(j) the oscillation and speed of the lambda runs.

Exercises:
1. Make epsilon matter: raise lr to 2e-3 (or update_epochs to 16) and sweep clip_eps again. At which clip
   fraction does epsilon = 0.5 start to hurt?
2. The adaptive controller barely moves beta in a short run. Set `kl_ref_horizon` to 100: does the beta
   column change, and does the adaptive run now land at the target?
3. Sweep `lam` with the critic initialised from the SFT trunk (`critic_init="sft"`): with a worse
   critic, does lambda matter more? Why should it (bias of TD(0) vs variance of Monte Carlo, lesson 07)?

Questions: Q52, Q54, Q55, Q56, Q57, Q73, Q74, Q75, Q76, Q77, Q78, Q79, Q80.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (Verdict, all_of, comparison, diff_text, identity, lesson_main, measurement, pyplot,
                             save, seed_compare, time_line)
from minippo.studies.knob_sweeps import GAMMA, GROUP, LR_FACTOR, lambda_dynamics, run_extras
from minippo.studies.study import Study
from minippo.studies.sweep_stats import pooled_seed_std, seed_curves, seed_values

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
    if quick:      # quick + full (the tests of the --full claims): 4 iterations, enough for a reward curve
        return dict(iterations=4 if full else 2, batch_size=16, minibatch_size=4, lr=5e-4, seeds=(0, 1))
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
    out = {"sizes": sz, "base": base, "reference": study.reference, "quick": quick, "full": full, "table": table,
           "noise": noise, "kl_ref": {"coef": cfg.kl_ref_coef, "horizon": cfg.kl_ref_horizon}}
    if full:       # the knobs beyond the grid, at the default size on seeds 0 and 1, and lambda's dynamics
        out["extras"] = full_extras(study, sweep, quick)
    out["time"] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    return out


def extra_sizes(quick: bool) -> dict:
    """The --full extras' base run: the default size (the quick size in the tests), PPO seeds 0 and 1."""
    sz = sizes(quick, full=quick)
    return dict(sz, seeds=(0, 1))


def full_extras(study: Study, sweep: dict, quick: bool) -> dict:
    """--full only: :func:`minippo.studies.knob_sweeps.run_extras` at :func:`extra_sizes`, with the seed noise of
    every summary pooled over its variants, and the oscillation and speed of the grid's lambda runs' reward
    curves (``objective/scores``: the RM score of each iteration's batch)."""
    esz = extra_sizes(quick)
    base = {k: esz[k] for k in ("iterations", "batch_size", "minibatch_size", "lr")}
    ex = run_extras(study, base, esz["seeds"])
    keys = [k for k in next(iter(ex["table"].values())) if k != "cpu"]
    ex["noise"] = {k: pooled_seed_std([row[k] for row in ex["table"].values()])[0] for k in keys}
    ex["sizes"] = esz
    curves = {lab: seed_curves(sweep["base" if lab == "0.95" else f"lam={lab}"], "objective/scores")
              for lab in ("0.9", "0.95", "0.99")}
    dyn = lambda_dynamics(curves, "0.95")
    dyn["noise"] = {k: pooled_seed_std(list(dyn[k].values()))[0] for k in ("osc", "speed")}
    ex["lam"] = dyn
    return ex


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
         f"final score's delta on the first token is lambda^(n-1), for the base run's mean n = {n_tok:.1f} tokens: "
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
    return out + (extra_claims(r) if "extras" in r else [])


XN = {"gold_mean": "gold", "kl_mean": "KL", "length_mean": "length", "adv_var_first": "log Var(A) at iteration 1",
      "ev": "explained variance over the run",
      "adv_var": "log Var(A) over the run", "ev_first": "explained variance at iteration 1",
      "first_corr": "corr(A at token 1, score)"}
XS = {"gold_mean": "gold", "kl_mean": "kl", "length_mean": "length"}     # derived()'s short names of the XN keys


def _xcmp(ex: dict, a: str, b: str, key: str) -> dict:
    """mean(b) - mean(a) of an extras summary with its seed noise pooled over the extras' variants."""
    return seed_compare(ex["table"][a][key], ex["table"][b][key], ex["noise"][key])


def _xcv(ex: dict, vkey: str, claim: str, a: str, b: str, key: str, expect: int, fmt: str = "+.3f",
         words=("higher", "lower")) -> Verdict:
    t = ex["table"]
    return comparison(vkey, claim, _xcmp(ex, a, b, key), expect=expect, labels=(a, b), quantity=XN[key], fmt=fmt,
                      values=(float(t[a][key].mean()), float(t[b][key].mean())), words=words)


def extra_claims(r: dict) -> list[tuple[str, str, list[Verdict]]]:
    """The --full claims: the knobs beyond the grid (:mod:`minippo.studies.knob_sweeps`) and lambda's dynamics."""
    ex, t, f = r["extras"], r["extras"]["table"], LR_FACTOR
    lo, hi, c_lo, c_hi = f"lr / {f:g}", f"lr x {f:g}", f"c1 / {f:g}", f"c1 x {f:g}"
    g = lambda name, key="gold_mean": float(t[name][key].mean())                 # noqa: E731
    esz, n_tok = ex["sizes"], g("base", "length_mean")
    b1, b2 = (f"{m * esz['batch_size'] // GROUP} x {GROUP}" for m in (1, 2))
    # the learning rate against c1: |gold(x f) - gold(/ f)| of each, se of a difference of two such contrasts
    se1 = None if ex["noise"]["gold_mean"] is None else float(ex["noise"]["gold_mean"]
                                                             * np.sqrt(4 / len(t["base"]["gold_mean"])))
    spread = {"diff": abs(g(hi) - g(lo)) - abs(g(c_hi) - g(c_lo)), "se": se1}
    ratio = float(np.exp(g("whitened rewards", "adv_var") - g("base", "adv_var")))
    se_w = _xcmp(ex, "base", "whitened rewards", "adv_var")["se"]
    ref = r["reference"]["gold_mean"]
    S = len(t["base"]["gold_mean"])
    se_g = float(ex["noise"]["gold_mean"] / np.sqrt(S))
    lam = ex["lam"]
    lam_c = {k: seed_compare(lam[k]["0.95"], lam[k][lab], lam["noise"][k]) for k, lab in (("osc", "0.9"),
                                                                                         ("speed", "0.99"))}
    return [
        ("A common claim: the learning rate is the knob PPO is most sensitive to",
         f"{esz['iterations']} iterations x {esz['batch_size']} responses, seeds {list(esz['seeds'])}: gold lr / {f:g} "
         f"/ base / x {f:g}: {g(lo):+.2f} / {g('base'):+.2f} / {g(hi):+.2f} (KL {g(lo, 'kl_mean'):.2f} / "
         f"{g('base', 'kl_mean'):.2f} / {g(hi, 'kl_mean'):.2f}); c1 / {f:g} / base {ex['vf_coef']:g} / x {f:g}: "
         f"{g(c_lo):+.2f} / {g('base'):+.2f} / {g(c_hi):+.2f} (the critic's explained variance averaged over the run "
         f"{g(c_lo, 'ev'):+.2f} / {g('base', 'ev'):+.2f} / {g(c_hi, 'ev'):+.2f}). Under AdamW a constant factor on a "
         "separate critic's loss cancels; c1 only changes the critic's share of the global gradient-norm clip (Q12)",
         [comparison("lr_more_sensitive_than_c1", f"The gold moves more over lr / {f:g} .. x {f:g} than over c1 / "
                     f"{f:g} .. x {f:g}.", spread, expect=+1, labels=("c1 range", "lr range"),
                     quantity="|gold(x 4) - gold(/ 4)|", values=(abs(g(c_hi) - g(c_lo)), abs(g(hi) - g(lo))),
                     words=("larger", "smaller")),
          _xcv(ex, "small_lr_learns_less", f"A learning rate {f:g}x smaller learns less in the same iterations.",
               "base", lo, "gold_mean", -1)]),
        ("A common claim: gamma = 1 in RLHF because a response has no time-step decay; gamma < 1 would only "
         "shrink the score reaching the early tokens",
         f"gamma {GAMMA:g} vs 1: gold {g(f'gamma {GAMMA:g}'):+.2f} vs {g('base'):+.2f}, length "
         f"{g(f'gamma {GAMMA:g}', 'length_mean'):.1f} vs {n_tok:.1f} tokens; with the score at the end the first "
         f"token's weight on it is gamma^(n-1) = {GAMMA ** (n_tok - 1):.2f} for n = {n_tok:.0f}; corr(A at token 1, "
         f"score) {g(f'gamma {GAMMA:g}', 'first_corr'):+.2f} vs {g('base', 'first_corr'):+.2f}",
         [_xcv(ex, "gamma_costs_gold", f"gamma = {GAMMA:g} gains less gold than gamma = 1.", "base",
               f"gamma {GAMMA:g}", "gold_mean", -1),
          _xcv(ex, "gamma_shortens", f"gamma = {GAMMA:g} makes the responses shorter (a discounted end score "
               "favours reaching it sooner).", "base", f"gamma {GAMMA:g}", "length_mean", -1, "+.2f",
               ("longer", "shorter"))]),
        (f"A common claim: a batch of 64-128 prompts x 4-8 responses; fewer responses per prompt raise the variance",
         f"same {esz['batch_size']} responses as {esz['batch_size']} x 1 (the base) or {b1}: gold {g('base'):+.2f} vs "
         f"{g(b1):+.2f}; twice the prompts at {GROUP} each ({b2}, {2 * esz['batch_size']} responses, minibatches of "
         f"batch / 4): gold {g(b2):+.2f}; CPU s per run {t['base']['cpu']:.1f} / {t[b1]['cpu']:.1f} / "
         f"{t[b2]['cpu']:.1f}. PPO's critic is the baseline: several responses per prompt are what the critic-free "
         "baselines need (Q61)",
         [_xcv(ex, "group_beats_spread", f"At {esz['batch_size']} responses, {GROUP} per prompt beat 1 per prompt.",
               "base", b1, "gold_mean", +1),
          _xcv(ex, "more_prompts_help", f"Twice the prompts ({b2} against {b1}) give more gold.", b1, b2, "gold_mean",
               +1)]),
        ("A common claim: a critic that starts badly makes the advantages noisy (start it from the reward model)",
         "raw advantages (before whitening) at iteration 1, same samples: Var "
         f"{np.exp(g('base', 'adv_var_first')):.3f} "
         f"with the RM-initialised critic, {np.exp(g('critic from SFT', 'adv_var_first')):.3f} with the SFT-trunk "
         f"critic (head 0, bias at the mean score); explained variance {g('base', 'ev_first'):+.2f} vs "
         f"{g('critic from SFT', 'ev_first'):+.2f}; over the run Var {np.exp(g('base', 'adv_var')):.3f} vs "
         f"{np.exp(g('critic from SFT', 'adv_var')):.3f}; gold {g('base'):+.2f} vs {g('critic from SFT'):+.2f}. "
         "The update sees whitened advantages (variance 1) either way: a bad critic shows up as noise in them, "
         "not as scale",
         [_xcv(ex, "bad_critic_noisier", "A critic started from the SFT trunk gives higher-variance advantages at "
               "iteration 1 than one started from the reward model.", "base", "critic from SFT", "adv_var_first",
               +1, "+.2f")]),
        ("A common claim: whitening the rewards fixes reward-model drift and length cheating, with 30% less "
         "advantage variance",
         f"whitened rewards vs the base: raw-advantage variance over the run x{ratio:.2f} (each in its own units: "
         f"whitening divides the per-token rewards by their std); the share of the returns' variance the critic leaves "
         f"in them, 1 - explained variance, {1 - g('whitened rewards', 'ev'):.2f} vs {1 - g('base', 'ev'):.2f} "
         f"(free of units); gold {g('whitened rewards'):+.2f} vs "
         f"{g('base'):+.2f}, length {g('whitened rewards', 'length_mean'):.1f} vs {n_tok:.1f}",
         [measurement("whitening_cuts_30pct", "Whitening the rewards cuts the advantages' variance by 30% or more.",
                      float(np.log(ratio)), float(np.log(0.7)), "<=", "log(Var ratio)", se=se_w, fmt="+.2f",
                      because=f"Var(A) with whitened rewards / without = {ratio:.2f} (log {np.log(ratio):+.2f} "
                      f"+- {se_w:.2f}; 30% less is log 0.7 = {np.log(0.7):+.2f})"),
          _xcv(ex, "whitening_shortens", "Whitening the rewards makes the responses shorter (less length cheating).",
               "base", "whitened rewards", "length_mean", -1, "+.2f", ("longer", "shorter"))]),
        ("A common claim: without reward shaping or a KL term in the reward 'the gradient cannot flow back' to the "
         "tokens",
         f"no KL term (beta 0), the score on the last token only: gold {g('score only'):+.2f} against the SFT "
         f"policy's {ref:+.2f} (KL to the reference {g('score only', 'kl_mean'):.2f} nats; with the KL term, the "
         f"base run: gold {g('base'):+.2f}, KL {g('base', 'kl_mean'):.2f}); corr(A at token 1, score) "
         f"{g('score only', 'first_corr'):+.2f}: GAE carries the score back to the first token. The reward is never "
         "differentiated: the policy gradient is grad log pi x A, A computed from the score's value; the reward "
         "model's parameters after every run: "
         + ("bitwise unchanged" if ex["rm_unchanged"] else "CHANGED"),
         [measurement("score_only_learns", "With only a terminal score (no shaping, no KL) the policy still learns: "
                      "more gold than the SFT policy.", g("score only"), ref, ">", "gold (score only)", se=se_g,
                      fmt="+.3f"),
          measurement("credit_reaches_token1", "The terminal score reaches the first token: its raw advantage "
                      "correlates positively with the score.", g("score only", "first_corr"), 0.0, ">",
                      "corr(A at token 1, score)", se=float(ex["noise"]["first_corr"] / np.sqrt(S)), fmt="+.3f"),
          identity("rm_gets_no_gradient", "The reward model's parameters get no gradient from PPO: they are "
                   "bitwise the same after every run.", ex["rm_unchanged"], "holds when the sha256 of the reward "
                   "model's parameters is the same before and after the runs", {"unchanged": ex["rm_unchanged"]})]),
        ("A common claim: lower lambda when training oscillates, raise it when training is slow",
         f"the grid's lambda runs ({r['sizes']['iterations']} iterations, seeds {list(r['sizes']['seeds'])}), the "
         "batch's RM score per iteration: oscillation (std of its change from one iteration to the next) "
         "0.9 / 0.95 / 0.99: "
         + " / ".join(f"{lam['osc'][k].mean():.3f}" for k in ("0.9", "0.95", "0.99"))
         + f"; iterations until its 3-iteration mean reaches {lam['level']:+.2f} (half-way from {lam['start']:+.2f} "
         f"to lambda 0.95's final {lam['end']:+.2f}; {r['sizes']['iterations'] + 1} = never): "
         + " / ".join(f"{lam['speed'][k].mean():.1f}" for k in ("0.9", "0.95", "0.99")),
         [comparison("lam09_oscillates_less", "lambda 0.9 oscillates less than 0.95.", lam_c["osc"], expect=-1,
                     labels=("lambda 0.95", "lambda 0.9"), quantity="oscillation", fmt="+.3f",
                     values=(float(lam["osc"]["0.95"].mean()), float(lam["osc"]["0.9"].mean()))),
          comparison("lam099_faster", "lambda 0.99 reaches the level in fewer iterations than 0.95.", lam_c["speed"],
                     expect=-1, labels=("lambda 0.95", "lambda 0.99"), quantity="iterations to the level",
                     fmt="+.1f", values=(float(lam["speed"]["0.95"].mean()), float(lam["speed"]["0.99"].mean())),
                     words=("more", "fewer"))]),
    ]


def verdicts(r: dict) -> list[Verdict]:
    """Every verdict of :func:`claims`, in order."""
    return [v for _, _, vs in claims(r) for v in vs]


SHORT = {GOLD: "gold", KL: "kl", "length_mean": "length", CF: "clipfrac", AK: "approx_kl", "kl_coef": "beta_end"}


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed: each grid point's mean
    over the seeds (``mean.<axis>.<label>.gold``), the base run's response length and the first token's weight
    lambda^(n-1) on the final score, and the comparisons printed without a verdict; at --full also each extra
    variant's mean (``extras_mean.<variant>.<key>``; a variance as exp of its mean log, as printed), the lambda
    runs' oscillation and speed averaged over the seeds, and the lr and c1 ranges."""
    n_tok = float(_row(r, "lam", "0.95")["length_mean"].mean())
    out = {"mean": {axis: {p["label"]: {SHORT[k]: float(p[k].mean()) for k in SHORT} for p in points}
                    for axis, points in r["table"].items()},
           "n_tokens": n_tok,
           "first_weight": {lab: float(float(lab) ** (n_tok - 1)) for lab in ("0.9", "0.95", "0.99")},
           "compare": {"minibatches_4_16_gold": _cmp(r, _row(r, "minibatches", "4"), _row(r, "minibatches", "16")),
                       "epochs_4_8_gold": _cmp(r, _row(r, "update_epochs", "4"), _row(r, "update_epochs", "8"))}}
    if "extras" not in r:
        return out
    ex, f = r["extras"], LR_FACTOR
    t = ex["table"]
    g = lambda name, key="gold_mean": float(t[name][key].mean())                 # noqa: E731
    logs = ("adv_var_first", "adv_var")
    out["extras_mean"] = {name: {XS.get(k, k): float(np.exp(row[k].mean()) if k in logs else row[k].mean())
                                 for k in XN} for name, row in t.items()}
    n_x = g("base", "length_mean")
    out["extras_derived"] = {
        "n_tokens": n_x, "gamma_first_weight": float(GAMMA ** (n_x - 1)),
        "lr_range": abs(g(f"lr x {f:g}") - g(f"lr / {f:g}")), "c1_range": abs(g(f"c1 x {f:g}") - g(f"c1 / {f:g}")),
        "lr_kl_ratio": g(f"lr x {f:g}", "kl_mean") / g(f"lr / {f:g}", "kl_mean"),
        "whitened_var_ratio": float(np.exp(g("whitened rewards", "adv_var") - g("base", "adv_var"))),
        "log_0.7": float(np.log(0.7)),
        "unexplained": {name: 1 - g(name, "ev") for name in t},
        "compare": {"whitened_gold": _xcmp(ex, "base", "whitened rewards", "gold_mean"),
                    "critic_sft_gold": _xcmp(ex, "base", "critic from SFT", "gold_mean"),
                    "gamma_gold": _xcmp(ex, "base", f"gamma {GAMMA:g}", "gold_mean")},
        "lam_osc": {k: float(v.mean()) for k, v in ex["lam"]["osc"].items()},
        "lam_speed": {k: float(v.mean()) for k, v in ex["lam"]["speed"].items()}}
    return out


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


def _plot_extras(fig, row, r: dict) -> None:
    """The --full row: (f) gold against the lr and c1 factors, (g) gold of the other variants, (h) the raw
    advantages' variance, (i) lambda's oscillation and (j) iterations to the level; one dot per seed."""
    ex, f = r["extras"], LR_FACTOR
    t = ex["table"]
    axes = []
    for ax in row:                              # the grid's rows share y; these panels each have their own
        spec = ax.get_subplotspec()
        ax.remove()
        axes.append(fig.add_subplot(spec))
    dots = lambda ax, x, vals, **kw: ax.plot(np.full(len(vals), x) + np.linspace(-0.06, 0.06, len(vals)), vals,  # noqa
                                             "o", alpha=0.6, ms=6, **kw)
    ax = axes[0]
    for knob, color in (("lr", "tab:blue"), ("c1", "tab:orange")):
        names = (f"{knob} / {f:g}", "base", f"{knob} x {f:g}")
        for k, name in enumerate(names):
            dots(ax, k, t[name]["gold_mean"], color=color)
        ax.plot(range(3), [t[n]["gold_mean"].mean() for n in names], "-", color=color, lw=2, label=knob)
    ax.set_xticks(range(3), [f"/ {f:g}", "base", f"x {f:g}"])
    ax.set_ylabel("gold score (held-out prompts)")
    ax.legend(fontsize=8)
    ax.set_title("(f) learning rate and c1")
    b = ex["sizes"]["batch_size"]
    names = ["base", f"gamma {GAMMA:g}", f"{b // GROUP} x {GROUP}", f"{2 * b // GROUP} x {GROUP}", "critic from SFT",
             "whitened rewards", "score only"]
    for k, name in enumerate(names):
        dots(axes[1], k, t[name]["gold_mean"], color="tab:blue")
    axes[1].axhline(r["reference"]["gold_mean"], color="k", ls="--", lw=1, label="SFT policy")
    axes[1].set_xticks(range(len(names)), [n.replace(" ", "\n", 1) for n in names], fontsize=7,
                       rotation=35, ha="right")
    axes[1].legend(fontsize=8)
    axes[1].set_title(f"(g) gold; base = {b} x 1, gamma 1")
    names = ["base", "critic from SFT", "whitened rewards"]
    for key, color, lab in (("adv_var_first", "tab:red", "iteration 1"), ("adv_var", "tab:purple", "run mean")):
        for k, name in enumerate(names):
            dots(axes[2], k, np.exp(t[name][key]), color=color, label=lab if k == 0 else None)
    axes[2].set_yscale("log")
    axes[2].set_xticks(range(3), ["RM critic", "SFT critic", "whitened rewards\n(own units)"])
    axes[2].set_ylabel("Var of the raw advantages")
    axes[2].legend(fontsize=8)
    axes[2].set_title("(h) advantages before whitening")
    lam, labs = ex["lam"], ("0.9", "0.95", "0.99")
    for ax, key, ylabel, title in ((axes[3], "osc", "std of the reward's change per iteration", "(i) oscillation"),
                                   (axes[4], "speed", "iterations to the level", "(j) speed")):
        for k, lab in enumerate(labs):
            dots(ax, k, lam[key][lab], color="tab:green")
        ax.plot(range(3), [lam[key][lab].mean() for lab in labs], "-", color="tab:green", lw=2)
        ax.set_xticks(range(3), labs)
        ax.set_xlabel("lambda")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} (the grid's lambda runs)")


def plot(r: dict, path) -> None:
    plt = pyplot()
    table = r["table"]
    rows = (("gold_mean", "gold score (held-out prompts)"), ("kl_mean", "KL to the reference (nats / response)"),
            ("policy/clipfrac_avg", "policy clip fraction (run mean)"),
            ("policy/approxkl_avg", "approx KL of the updates (run mean, log)"))
    extra = "extras" in r                       # --full: one more row, the knobs beyond the grid
    fig, axes = plt.subplots(len(rows) + extra, len(table), figsize=(4.0 * len(table), 14 + 3.5 * extra),
                             sharey="row")
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
        axes[len(rows) - 1, j].set_xlabel(axis)
    sz = r["sizes"]
    if extra:
        _plot_extras(fig, axes[-1], r)
    fig.suptitle(f"One hyperparameter at a time from the base run (shaded): {sz['iterations']} iterations x "
                 f"{sz['batch_size']} responses, lr {sz['lr']:g}, {len(sz['seeds'])} PPO seeds (dots), mean (line); "
                 "clip fraction and approx KL averaged over the run", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    save(fig, path)



if __name__ == "__main__":
    main()
