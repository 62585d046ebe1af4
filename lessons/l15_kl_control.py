r"""Lesson 15 - kl_control: fixed vs adaptive beta; k1/k2/k3 bias and variance; negative KL from top-k; target-KL stop.

Pipeline step: the KL terms of RLHF-PPO. The per-token reward is $r_t = -\beta\, kl_t$ plus the score on the
last token and $\beta$ is either fixed or adapted after every iteration (a usual range for a fixed $\beta$
is 0.01-0.1, and a fixed $\beta$ is said to let the KL run away or stall the update); inside an update,
`kl_old_target` stops the epochs when the policy moved too far from $\pi_{old}$ (the approx KL, in the
direction of PPO paper eq. (8), KL($\pi_{old} \| \pi$)). The KL to the reference and the KL to $\pi_{old}$ are
different quantities with different jobs.

Papers: the KL-penalised reward of Ziegler et al. 2019 (arXiv:1909.08593) eq. (2) and InstructGPT (Ouyang et
al. 2022, arXiv:2203.02155) eq. (2), per token; its proportional controller (Ziegler et al. sec. 2.2):

$$
e_t = \mathrm{clip}\left(\frac{KL_t - KL_{target}}{KL_{target}}, -0.2, 0.2\right), \qquad \beta_{t+1} = \beta_t (1 + K_\beta\, e_t)
$$

and the PPO paper's rule (Schulman et al. 2017, arXiv:1707.06347, sec. 4: halve $\beta$ below
$d_{targ}/1.5$, double it above $1.5\, d_{targ}$). The estimators of Schulman 2020, "Approximating KL
divergence" (http://joschu.net/blog/kl-approx.html), with $\rho = \pi_{ref}(a \mid s) / \pi(a \mid s)$ on a
token sampled from $\pi$:

$$
k_1 = -\log \rho, \qquad k_2 = \tfrac12 (\log \rho)^2, \qquad k_3 = (\rho - 1) - \log \rho
$$

k1 and k3 are unbiased for KL($\pi \| \pi_{ref}$), k2 is biased; k3 is never negative.

What the lesson does, on the cached SFT policy and reward model (`minippo.studies.study.Study`):

A. Five KL controls trained alike (lr 5e-4 constant, 32 responses per iteration; 14 iterations x 2 PPO seeds
   by default, 40 x 3 with `--full`): no penalty, fixed beta 0.02 (inside the usual range), fixed beta 1,
   Ziegler's adaptive and the PPO paper's adaptive rule, both starting from beta 0.02 with a target of 4 nats
   per response.
B. k1, k2, k3 on fresh samples of two trained policies (a close one and a far one) against the exact KL at
   the same states (`minippo.studies.kl_moments`): per token and per response.
C. Top-k sampling (k = 10): the exact mean of the k1 estimate for policies that flatten the reference (moving
   mass into the tokens top-k never samples) -- negative, so the penalty pays them for moving -- and what a
   PPO run with top-k actually did to the estimate.
D. `kl_old_target` early stopping on the no-penalty run (the seeds of A): where it fires and the KL of each
   update.
E. What bounds one update (Q44, Q45): the KL of each update (KL($\pi_{old} \| \pi$), measured after it, and the
   minibatches' approx KL before their steps) with the penalty at beta 0 and beta 1, with the early stop, and
   with the same `kl_old_target` adapting the learning rate instead (`kl_old_action="adapt_lr"`, rsl_rl's rule:
   lr / 1.5 when a minibatch's approx KL exceeds twice the target, x 1.5 when it is below half of it); their
   gold and KL to the reference, against the seed noise.

The figure (from --full: 3 seeds, 40 iterations): (a) exact KL to the reference per response, (b) gold score
(mean of the seeds), (c) beta; (d) per-token k1 / k2 / k3 values on the far policy, (e) per-response bias and
spread of the three estimators; (f) top-k: estimated vs exact KL of flattened policies, (g) the top-k PPO
run's k1 vs its exact KL; (h) the KL of each update with and without early stopping, (i) the KL to the
reference of the same two runs; (j) the KL of each update for beta 0, beta 1, the early stop and the adapted
lr, (k) the adapted lr (at the end of each update and its largest inside it) and the early stop's steps per
update, (l) gold and KL to the reference of the four (dots: seeds).

Exercises:
1. Run the fixed-beta variants longer (`--full`): does the KL of beta = 0.02 keep growing or settle?
   Find the beta whose KL settles at the target: how does it compare with the adaptive controllers'?
2. Change the adaptive controller's `kl_ref_horizon`: how fast must it be to catch the lr-5e-4 policy?
3. Put k3 in the reward (`kl_ref_estimator="k3"`): every sample is >= 0, but can a flattened policy still
   pay less penalty than the reference under top-k? Compute E_q[k3] at tau = 1.5 with
   `kl_estimator_moments(..., probs=q)`.
4. Implement it: `minippo exercise start k3`, then `minippo exercise check k3`.

Questions: Q40, Q41, Q42, Q43, Q44, Q45, Q34, Q55.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (Verdict, all_of, by_key, comparison, diff_text, identity, lesson_main, measurement,
                             pyplot, save, seed_compare, time_line)
from minippo.blas import single_blas_thread
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.studies.kl_control import arms_noise, control_noise, control_seeds, control_summary, update_kl_arms
from minippo.studies.kl_moments import probe_estimators, response_mean, topk_probe
from minippo.studies.probes import kl_probe, tempered_policy, update_kl
from minippo.studies.study import Study, final
from minippo.studies.sweep_stats import compare_paired, curve_slope, seed_curves

# A: the KL controls (name -> PPOConfig overrides), all on the same BASE
CONTROLS = {
    "no penalty": dict(kl_ref_controller="fixed", kl_ref_coef=0.0),
    "fixed beta 0.02": dict(kl_ref_controller="fixed", kl_ref_coef=0.02),
    "fixed beta 1": dict(kl_ref_controller="fixed", kl_ref_coef=1.0),
    "adaptive (Ziegler)": dict(kl_ref_controller="adaptive", kl_ref_coef=0.02, kl_ref_target=4.0, kl_ref_horizon=64),
    "adaptive (PPO paper)": dict(kl_ref_controller="ppo_paper", kl_ref_coef=0.02, kl_ref_target=4.0),
}
KL_TARGET = 4.0
TOP_K = 10
TAUS = (1.0, 1.15, 1.3, 1.5)              # C: flattened copies of the reference, logits / tau
TARGET_KL = 0.05                          # D, E: the KL(pi_old || pi) a minibatch may reach (kl_old_target)
CAP = 2.0                                 # E: an update is "bounded" when its KL stays below CAP x TARGET_KL
KL_OLD_ARMS = {                           # D, E: what happens when it does, on the no-penalty run
    "early stop": dict(kl_old_target=TARGET_KL),
    "adapt lr": dict(config=KnobsConfig, kl_old_target=TARGET_KL, kl_old_action="adapt_lr"),
}


def sizes(quick: bool, full: bool) -> dict:
    """Run lengths: quick (smoke test), default (classroom size), full (the committed figure)."""
    if quick:
        return dict(iterations=4, batch_size=16, minibatch_size=8, seeds=(0, 1), side_seeds=(0,), n_probe=32)
    if full:
        return dict(iterations=40, batch_size=32, minibatch_size=8, seeds=(0, 1, 2), side_seeds=(0, 1, 2), n_probe=256)
    return dict(iterations=14, batch_size=32, minibatch_size=8, seeds=(0, 1), side_seeds=(0,), n_probe=256)


def _probe_update(trainer, rollout, record) -> None:
    """Callback: the KL of the update just made, pi_old -> pi after the epochs (k3 on the rollout's tokens)."""
    record["probe/update_kl"] = update_kl(trainer.actor, rollout, trainer.cfg.temperature)["approx_kl"]


def _sweep(study, variants: dict, seeds, base: dict) -> dict:
    """``study.sweep`` with the update probe; keeps each seed's final actor (``extra``)."""
    return study.sweep(variants, seeds, base=base, callback=_probe_update, extra=lambda run: run["trainer"].actor,
                       log_exact_kl=True)


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick, full)
    study = Study(quick=quick, seed=seed)
    base = dict(iterations=sz["iterations"], batch_size=sz["batch_size"], minibatch_size=sz["minibatch_size"],
                lr=5e-4, lr_schedule="constant")
    # A. the five controls, several PPO seeds; C and D: a top-k run beside "fixed beta 1", an
    # early-stopping run beside "no penalty"
    runs = _sweep(study, CONTROLS, sz["seeds"], base)
    side = _sweep(study, {"top-k": {**CONTROLS["fixed beta 1"], "config": KnobsConfig, "top_k": TOP_K}},
                  sz["side_seeds"], base)
    # D, E: what kl_old_target does with the KL to pi_old, on the no-penalty run, with the seeds of A (seed noise)
    kl_old = _sweep(study, {name: {**CONTROLS["no penalty"], **ov} for name, ov in KL_OLD_ARMS.items()}, sz["seeds"],
                    base)
    cfg = study.config(**base)

    def sample(policy, prompts, key, top_k=0):
        """Fresh responses of ``policy`` with the KL probe (``minippo.studies.probes.kl_probe``)."""
        return kl_probe(policy, study.sft, study.tokenizer, prompts, rng=np.random.default_rng([seed, key]),
                        top_k=top_k, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature)

    prompts = study.prompts * max(sz["n_probe"] // len(study.prompts), 1)          # B: 256 samples (2 per prompt)
    with single_blas_thread():
        # B. the estimators on a close policy (fixed beta 1) and a far one (no penalty), seed 0 of each
        estimators = {name: probe_estimators(sample(runs[name]["extra"][0], prompts, 51))
                      for name in ("fixed beta 1", "no penalty")}
        # C. flattened references under top-k sampling (plain sampling needs no probe: E_pi[k1] = KL exactly),
        # and the top-k PPO policy with the two terms of E_q[k1] = KL(q || q_ref) + log(M / M_ref)
        tempered = []
        for tau in TAUS:
            p = sample(tempered_policy(study.sft, tau), study.prompts, 52, TOP_K)
            tempered.append({"tau": tau, "kl_exact": response_mean(p["kl_exact"], p["mask"]),
                             "k1_sampled": response_mean(p["logp"] - p["logp_ref"], p["mask"]),
                             "k1_expected": response_mean(p["k1_mean"], p["mask"]),
                             "rm": float(study.reward_model.score(p["sequences"], p["attn_mask"]).mean())})
        topk_policy = topk_probe(sample(side["top-k"]["extra"][0], prompts, 53, TOP_K), TOP_K, cfg.temperature)
    for v in (*runs.values(), *side.values(), *kl_old.values()):
        del v["extra"]                                                    # the actors: not part of the results
    return {"sizes": sz, "base": base, "reference": study.reference, "quick": quick, "full": full,
            "update_epochs": cfg.update_epochs, "steps_per_update": cfg.update_epochs * cfg.num_minibatches,
            "runs": runs, "topk_runs": side["top-k"], "early_runs": kl_old["early stop"],
            "adapt_runs": kl_old["adapt lr"],
            "estimators": estimators, "tempered": tempered, "topk_policy": topk_policy, "beta_topk": 1.0,
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}


def _curve(variant: dict, key: str, n_seeds: int | None = None) -> np.ndarray:
    """(seeds, iterations) array of a record key of one variant of a sweep (its first ``n_seeds`` seeds)."""
    return seed_curves(variant, key)[:n_seeds]


def _final(variant: dict, key: str, n_seeds: int | None = None) -> float:
    """``final`` (mean of the last 5 iterations) of a record key, averaged over the seeds."""
    return float(np.mean([final(recs, key) for recs in variant["records"][:n_seeds]]))


def summary(r: dict) -> dict:
    """Per control: final exact KL, gold (last 5 iterations, mean of the seeds), evaluation gold and KL, beta."""
    return control_summary(r["runs"])


def _band(ax, x, Y, label, color, ls="-"):
    """Mean of the seeds (line) and their range (band)."""
    ax.plot(x, Y.mean(0), color=color, ls=ls, lw=1.8, label=label)
    if len(Y) > 1:
        ax.fill_between(x, Y.min(0), Y.max(0), color=color, alpha=0.15, lw=0)


COLORS = dict(zip(CONTROLS, ("tab:red", "tab:orange", "tab:purple", "tab:blue", "tab:green")))


def _narrative_controls(r: dict, s: dict) -> list[str]:
    """Part A: the five controls, against the common claim about a fixed beta."""
    sz, ref, runs = r["sizes"], r["reference"], r["runs"]
    noise = control_noise(runs)
    cmp_ = lambda a, b, key: seed_compare(control_seeds(runs[a], key), control_seeds(runs[b], key),  # noqa: E731
                                          None if noise is None else noise[key])
    L = [f"A. KL control: {sz['iterations']} iterations x {sz['batch_size']} responses, lr {r['base']['lr']:g} "
         f"constant, PPO seeds {list(sz['seeds'])}; SFT gold {ref['gold_mean']:+.3f}. KL = exact, nats per response.",
         f"  {'control':<22}{'KL (last 5)':>12}{'beta end':>9}{'gold (last 5)':>14}{'peak gold':>10}"
         f"{'eval gold':>10}{'eval KL':>8}"]
    for name, x in s.items():
        L.append(f"  {name:<22}{x['kl']:>12.2f}{x['beta']:>9.3f}{x['gold']:>+14.3f}{x['peak_gold']:>+10.3f}"
                 f"{x['eval_gold']:>+10.3f}{x['eval_kl']:>8.2f}")
    none, low, high = s["no penalty"], s["fixed beta 0.02"], s["fixed beta 1"]
    zie, ppo = s["adaptive (Ziegler)"], s["adaptive (PPO paper)"]
    rival = max((k for k in s if k != "no penalty"), key=lambda k: s[k]["kl"])
    kl_c = cmp_(rival, "no penalty", "kl")
    V = by_key(verdicts(r))
    L.append(f"  No penalty: KL {none['kl']:.1f} nats, minus the next largest ({rival}) {diff_text(kl_c, '+.2f')}."
             f" Its gold peaked at {none['peak_gold']:+.2f} (the best of {sz['iterations']} noisy iterations) and "
             f"ended at {none['gold']:+.2f}.")
    L.append(V["no_penalty_largest_kl"].render("  "))
    ranked = sorted(s, key=lambda k: s[k]["eval_gold"], reverse=True)
    best_c = cmp_(ranked[1], ranked[0], "gold")
    L.append(f"  Fixed beta 0.02 ends at {low['kl']:.1f} nats ({low['kl'] / KL_TARGET:.1f}x the target), fixed beta 1 "
             f"at {high['kl']:.1f}. Best evaluation gold: {ranked[0]} ({s[ranked[0]]['eval_gold']:+.2f}); ahead of "
             f"{ranked[1]} by {diff_text(best_c, '+.2f')}.")
    L.append("  A common claim: a fixed beta lets the KL run away or stalls the update.")
    climb = curve_slope(_curve(runs["fixed beta 0.02"], "objective/kl_exact")[:, sz["iterations"] // 2:])
    zero = curve_slope(_curve(runs["no penalty"], "objective/kl_exact")[:, sz["iterations"] // 2:])
    L.append(f"    runaway: beta = 0 ends at {none['kl']:.1f} nats ({zero['diff']:+.2f} nats/iteration over the second "
             f"half); beta 0.02 at {low['kl']:.1f} nats, slope over the second half "
             f"{diff_text(climb, '+.2f', climb['noise'])}.")
    L.append(V["fixed_beta_runaway"].render("    "))
    sft = [ref["gold_mean"]]
    gain = seed_compare(sft, control_seeds(runs["fixed beta 1"], "gold"), None if noise is None else noise["gold"])
    vs_low = cmp_("fixed beta 0.02", "fixed beta 1", "gold")
    L.append(f"    stall: beta 1 holds {high['kl']:.1f} nats; its gold gain over the SFT policy "
             f"{diff_text(gain, '+.2f')}; its gold minus beta 0.02's {diff_text(vs_low, '+.2f')}.")
    L.append(V["fixed_beta_stalls"].render("    "))
    horizon = CONTROLS["adaptive (Ziegler)"]["kl_ref_horizon"]
    L.append(f"  Ziegler's controller moves beta by at most {0.2 * sz['batch_size'] / horizon:.0%} per iteration (error "
             f"clipped to 0.2, batch/horizon = {sz['batch_size']}/{horizon}): beta 0.02 -> {zie['beta']:.3f}, KL "
             f"{zie['kl']:.1f}. The PPO paper's rule halves / doubles: beta 0.02 -> {ppo['beta']:.3f}, KL "
             f"{ppo['kl']:.1f} (evaluation {ppo['eval_kl']:.1f}; target {KL_TARGET:g}). Both are fed the KL to the "
             "reference per response; the paper applies its rule to the per-update KL(pi_old, pi) of its penalty "
             "objective (eq. (8)), as lesson 05 does: here it is the same rule on another KL.")
    return L


EXACT_TOL = 1e-9     # |E[k] - KL| from exact float64 sums over the vocabulary: rounding only


def _estimator_bias(c: dict, n: int) -> dict:
    """The per-response bias of an estimator with its standard error over the n responses."""
    se = c["response_err_std"] / np.sqrt(n)
    return {"diff": c["response_bias"], "se": se, "clear": abs(c["response_bias"]) >= 2 * se}


def _narrative_estimators(r: dict) -> list[str]:
    """Part B: k1 / k2 / k3 against the exact KL, against Schulman's claims."""
    L = ["\nB. The estimators on fresh samples (exact KL from the full distributions at the same states):",
         f"  {'policy':<8}{'est':>4}{'bias/tok':>9}{'std/tok':>8}{'neg/tok':>8}{'bias/resp':>10}"
         f"{'noise/resp':>11}{'exact/resp':>11}"]
    for name, label in (("fixed beta 1", "close"), ("no penalty", "far")):
        cmp_ = r["estimators"][name]["compare"]
        for k in ("k1", "k2", "k3"):
            c = cmp_[k]
            L.append(f"  {label:<8}{k:>4}{c['token_bias']:>+9.3f}{c['token_std']:>8.2f}{c['token_neg_frac']:>8.0%}"
                     f"{c['response_bias']:>+10.2f}{c['response_err_std']:>11.2f}"
                     f"{cmp_['exact']['response_mean']:>11.2f}")
    cl, fa = r["estimators"]["fixed beta 1"], r["estimators"]["no penalty"]
    n = fa["n_responses"]
    bias = {k: _estimator_bias(fa["compare"][k], n) for k in ("k1", "k2", "k3")}
    neg = {k: max(e["compare"][k]["token_neg_frac"] for e in (cl, fa)) for k in ("k1", "k2", "k3")}
    k2_rel = fa["compare"]["k2"]["response_bias"] / fa["compare"]["exact"]["response_mean"]
    var = {name: (e["exact_var"]["k1"], e["exact_var"]["k3"]) for name, e in (("close", cl), ("far", fa))}
    L += ["  (close = the fixed-beta-1 policy, far = the no-penalty policy; noise/resp = std over responses of "
          "sum_t k - sum_t KL_exact; biases below on the far policy, with their s.e. over the "
          f"{n} responses.)",
          f"  k1: measured bias {diff_text(bias['k1'], '+.2f', 'response')}; one token's k1 is negative "
          f"{cl['compare']['k1']['token_neg_frac']:.0%} of the time on the close policy (exact probability "
          f"{cl['k1_neg_prob']:.0%}).",
          f"  k2: negative on {neg['k2']:.0%} of the tokens, bias {diff_text(bias['k2'], '+.2f', 'response')} "
          f"({k2_rel:+.0%} of the exact KL).",
          f"  k3: negative on {neg['k3']:.0%} of the tokens, bias {diff_text(bias['k3'], '+.2f', 'response')}.",
          f"  exact variance of one token's estimate, k1 {var['close'][0]:.2f} vs k3 {var['close'][1]:.2f} (close), "
          f"{var['far'][0]:.1f} vs {var['far'][1]:.1f} (far)."]
    V = by_key(verdicts(r))
    L += [V[k].render("  ") for k in ("k1_unbiased", "k1_negative", "k2_biased", "k3_unbiased_nonnegative",
                                      "k3_lower_variance_close", "k3_lower_variance_far")]
    if not (V["k3_lower_variance_close"].holds and V["k3_lower_variance_far"].holds):
        L.append("  (k3 = (rho - 1) - log rho grows like rho on tokens the reference likes much more than the policy, "
                 "rho = pi_ref / pi >> 1.)")
    return L


def _narrative_topk(r: dict) -> list[str]:
    """Part C: negative k1 under top-k sampling, and what PPO with top-k did."""
    beta = r["beta_topk"]
    L = [f"\nC. Top-k = {TOP_K} sampling, log-probs from the full softmax (the trainer's convention). The reference "
         "flattened (logits / tau), scored by the reward model, penalised with beta 1:",
         f"  {'tau':>5}{'exact KL':>9}{'E[k1] top-k':>12}{'k1 sampled':>11}{'RM':>7}{'RM - 1*k1':>10}   "
         "(plain sampling: E[k1] = exact KL)"]
    for t in r["tempered"]:
        L.append(f"  {t['tau']:>5.2f}{t['kl_exact']:>9.2f}{t['k1_expected']:>12.2f}{t['k1_sampled']:>11.2f}"
                 f"{t['rm']:>+7.2f}{t['rm'] - beta * t['k1_expected']:>+10.2f}")
    t0, tl = r["tempered"][0], r["tempered"][-1]
    j0, jl = t0["rm"] - beta * t0["k1_expected"], tl["rm"] - beta * tl["k1_expected"]
    tp = r["topk_policy"]
    found = ("its top-k mass fell (log M/M_ref < 0), so the k1 penalty UNDER-estimates the KL."
             if tp["log_mass_ratio"] < 0 else
             "it SHARPENED its top-k (log M/M_ref > 0), so the k1 penalty OVER-estimates the KL.")
    L += [f"  tau {tl['tau']}: {tl['kl_exact']:.2f} nats away from the reference, top-k k1 estimate "
          f"{tl['k1_expected']:+.2f}; the penalised objective goes {j0:+.2f} -> {jl:+.2f}. "
          "Why: E_q[k1] = KL(q || q_ref) + log(M / M_ref), and flattening lowers M, the policy's top-k mass.",
          by_key(verdicts(r))["topk_k1_negative"].render("  "),
          f"  Did PPO with top-k find that exploit? The top-k run's final policy: E[k1] {tp['k1_expected']:+.2f} vs "
          f"exact {tp['kl_exact']:.2f} nats/response, top-{TOP_K} mass {tp['mass']:.2f} vs {tp['mass_ref']:.2f} for "
          f"the reference (log M/M_ref summed over a response {tp['log_mass_ratio']:+.2f}): {found} The tail is never "
          "sampled: PPO moves it only through the softmax normalisation, with (whitened) advantages of both signs. "
          "Under top-k the penalty is biased either way; the sign follows the top-k mass.",
          by_key(verdicts(r))["topk_exploit_found"].render("  ")]
    return L


def _narrative_early_stop(r: dict) -> list[str]:
    """Part D: where target-KL early stopping fires and what it bounds."""
    early, none = r["early_runs"], r["runs"]["no penalty"]
    n_side = len(early["records"])
    upd_none, upd_early = _curve(none, "probe/update_kl", n_side), _curve(early, "probe/update_kl")
    stops = [rec["early_stop_epoch"] for recs in early["records"] for rec in recs]
    fired = [e for e in stops if e is not None]
    where = ", ".join(f"{ep}: {fired.count(ep)}x" for ep in sorted(set(fired))) or "none"
    first = upd_none.mean(0)
    smaller = compare_paired(first, upd_early.mean(0)) if len(first) > 1 else None
    drift = curve_slope(_curve(early, "objective/kl_exact"))
    L = [f"\nD. kl_old_target = {TARGET_KL} (approx KL of a minibatch, k3 per token, checked before its step), "
         "no KL penalty:",
         f"  it stopped {len(fired)} of {len(stops)} updates, in epoch {where} (epochs 0-{r['update_epochs'] - 1}).",
         f"  KL of each update (per token, measured after it), without -> with the early stop: "
         f"{upd_none[:, 0].mean():.3f} -> {upd_early[:, 0].mean():.3f} at iteration 0, "
         f"{upd_none[:, 1:].mean():.3f} -> {upd_early[:, 1:].mean():.3f} afterwards."]
    V = by_key(verdicts(r))
    L.append(V["iteration0_largest"].render("  "))
    if smaller is not None:
        L.append(f"  With minus without the stop, paired by iteration: {diff_text(smaller, '+.3f', 'iteration')}.")
    L.append(V["stop_smaller_updates"].render("  "))
    L.append(f"  KL to the reference at the end: {_final(none, 'objective/kl_exact', n_side):.1f} -> "
             f"{_final(early, 'objective/kl_exact'):.1f} nats; gold (last 5) {_final(none, 'gold/score', n_side):+.2f}"
             f" -> {_final(early, 'gold/score'):+.2f}. With the stop the KL to the reference grows by "
             f"{diff_text(drift, '+.2f', drift['noise'])} nats per iteration.")
    L.append(V["stop_does_not_bound_ref"].render("  "))
    if V["stop_does_not_bound_ref"].holds:
        L.append("  It shortens each update (whether it caps one: part E); it does not replace the KL penalty.")
    return L


def kl_old_arms(r: dict) -> dict:
    """Part E, per arm (beta 0, beta 1, early stop, adapt lr): :func:`minippo.studies.kl_control.update_kl_arms`."""
    return update_kl_arms({"no penalty": r["runs"]["no penalty"], "fixed beta 1": r["runs"]["fixed beta 1"],
                           "early stop": r["early_runs"], "adapt lr": r["adapt_runs"]}, TARGET_KL)


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed or per iteration: part
    A's summary per control, part D's early stops, part E's table per arm, and each estimator's per-response
    bias +- se in part B."""
    a, early = kl_old_arms(r), r["early_runs"]
    stops = [rec["early_stop_epoch"] for recs in early["records"] for rec in recs]
    fired = [e for e in stops if e is not None]
    upd_none = _curve(r["runs"]["no penalty"], "probe/update_kl", len(early["records"]))
    upd_early = _curve(early, "probe/update_kl")
    return {"summary": summary(r), "arms": a,
            "arm_table": {name: {"update_kl_geomean": float(10 ** x["after"].mean()), "lr_end": float(x["lr"][:, -1].mean()),
                                 "lr_max": float(x["lr_max"].max()), "gold": float(x["gold"].mean()),
                                 "kl_ref": float(x["kl_ref"].mean())} for name, x in a.items()},
            "early_stop": {"fired": len(fired), "updates": len(stops),
                           "by_epoch": {str(ep): fired.count(ep) for ep in sorted(set(fired))},
                           "update_kl_first": {"without": float(upd_none[:, 0].mean()), "with": float(upd_early[:, 0].mean())},
                           "update_kl_later": {"without": float(upd_none[:, 1:].mean()),
                                               "with": float(upd_early[:, 1:].mean())}},
            "estimator_bias": {name: {k: _estimator_bias(e["compare"][k], e["n_responses"])
                                      for k in ("k1", "k2", "k3")} for name, e in r["estimators"].items()}}


def _narrative_kl_old(r: dict) -> list[str]:
    """Part E: what bounds one update, the KL penalty or kl_old_target (early stop, adapted lr) (Q44, Q45). An arm
    bounds the update when no update's KL exceeds CAP x kl_old_target (the stop checks before each step, so the
    last step taken may carry an update past the target)."""
    a, steps, cap = kl_old_arms(r), r["steps_per_update"], CAP * TARGET_KL
    noise = arms_noise(a)
    cmp_ = lambda x, y, k: seed_compare(a[x][k], a[y][k], None if noise is None else noise[k])   # noqa: E731  y - x
    capped = {name: x["largest"] <= cap for name, x in a.items()}
    L = [f"\nE. What bounds one update? KL(pi_old || pi) per token (k3) of each update: 'after' measured on the "
         "rollout after the K epochs (geometric mean over the iterations and the seeds; compared below in log10 units, "
         "-0.30 = half), 'largest' over all updates, 'mb max' / 'mb avg' over the minibatches, each before its step "
         f"(policy/approxkl_max / _avg, mean over the updates); kl_old_target {TARGET_KL:g}; 'bounded' = no update "
         f"above {CAP:g} x the target = {cap:g}; PPO seeds {list(r['sizes']['seeds'])}.",
         f"  {'arm':<14}{'after':>7}{'largest':>8}{'>target':>9}{'mb max':>8}{'mb avg':>8}{'steps':>7}{'lr end':>9}"
         f"{'lr max':>8}{'eval gold':>10}{'KL ref':>7}"]
    for name, x in a.items():
        L.append(f"  {name:<14}{10 ** x['after'].mean():>7.3f}{x['largest']:>8.3f}{x['above']:>4d}/{x['n_updates']:<4d}"
                 f"{x['mb_max']:>8.3f}{x['mb_avg']:>8.3f}{x['steps']:>7.1f}{x['lr'][:, -1].mean():>9.2g}"
                 f"{x['lr_max'].max():>8.2g}{x['gold'].mean():>+10.3f}{x['kl_ref'].mean():>7.1f}")
    pen, stop = cmp_("no penalty", "fixed beta 1", "after"), cmp_("no penalty", "early stop", "after")
    ref = cmp_("no penalty", "fixed beta 1", "kl_ref")
    pb, es = a["fixed beta 1"], a["early stop"]
    V = by_key(verdicts(r))
    L.append(f"  Q44. The KL penalty (beta 1 vs 0): KL to the reference {diff_text(ref, '+.1f')} nats; log10 KL of each "
             f"update {diff_text(pen, '+.2f')}; its largest update {pb['largest']:.3f} ({pb['largest'] / TARGET_KL:.1f}x "
             f"the target, {pb['above']} of {pb['n_updates']} updates above it). The early stop (beta 0): log10 KL of "
             f"each update {diff_text(stop, '+.2f')}; largest {es['largest']:.3f} ({es['largest'] / TARGET_KL:.1f}x the "
             f"target, {es['above']} of {es['n_updates']} above it), {es['steps']:.1f} of {steps} steps per update "
             "taken.")
    L += [V[k].render("  ") for k in ("penalty_lowers_ref_kl", "penalty_smaller_updates", "q44_stop_bounds_update")]
    if V["q44_stop_bounds_update"].holds:
        L.append("  The penalty sets where the policy settles over many iterations, the stop caps each update.")
    ad, lr0 = a["adapt lr"], r["base"]["lr"]
    up, ae = cmp_("no penalty", "adapt lr", "after"), cmp_("early stop", "adapt lr", "after")
    gold, kl = cmp_("early stop", "adapt lr", "gold"), cmp_("early stop", "adapt lr", "kl_ref")
    L.append(f"  Q45. The KL-adapted lr (kl_old_action 'adapt_lr', rsl_rl's rule on the same target, per minibatch: "
             f"/ 1.5 above {2 * TARGET_KL:g}, x 1.5 below {TARGET_KL / 2:g}, within [1e-5, 1e-2]): no update stopped, "
             f"{ad['steps']:.1f} of {steps} steps per update taken ({ad['skipped']} minibatches skipped by "
             f"ratio_threshold in all); the lr went {lr0:g} -> {ad['lr'][:, -1].mean():.2g} at the end of the run, and "
             f"inside the updates up to {ad['lr_max'].max():.2g} "
             + (f"({ad['lr_max'].max() / lr0:.1f}x the configured rate: the KL of pi_old restarts from 0 in every "
                f"update, so its first minibatches raise the rate until the KL has passed {TARGET_KL / 2:g})"
                if ad["lr_max"].max() > lr0 else "(never above the configured rate)")
             + f". log10 KL of each update vs neither {diff_text(up, '+.2f')}, vs the early "
             f"stop {diff_text(ae, '+.2f')}; largest update {ad['largest']:.3f}. Gold vs the early stop "
             f"{diff_text(gold, '+.2f')}, KL to the reference {diff_text(kl, '+.1f')} nats.")
    L.append(V["q45_adapt_lr_bounds_update"].render("  "))
    if not V["q45_adapt_lr_bounds_update"].holds:
        L.append("  (both read the KL before each step: above the target the stop takes no more steps, while "
                 "above 2 x target the adapted rate only divides that step's lr by 1.5 and goes on.)")
    return L


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (seed noise pooled over the variants)."""
    s, sz, ref, runs = summary(r), r["sizes"], r["reference"], r["runs"]
    noise = control_noise(runs)
    cmp_ = lambda a, b, key: seed_compare(control_seeds(runs[a], key), control_seeds(runs[b], key),  # noqa: E731
                                          None if noise is None else noise[key])
    rival = max((k for k in s if k != "no penalty"), key=lambda k: s[k]["kl"])
    climb = curve_slope(_curve(runs["fixed beta 0.02"], "objective/kl_exact")[:, sz["iterations"] // 2:])
    out = [
        comparison("no_penalty_largest_kl", "Without a KL penalty the KL to the reference grows the most (more than "
                   f"the next largest, {rival}).", cmp_(rival, "no penalty", "kl"), expect=+1,
                   labels=(rival, "no penalty"), quantity="KL (last 5)", values=(s[rival]["kl"], s["no penalty"]["kl"]),
                   fmt="+.2f"),
        measurement("fixed_beta_runaway", "A small fixed beta (0.02) lets the KL run away: it still climbs over the "
                    "second half of the run.", climb["diff"], 0.0, ">", "slope of the KL (nats/iteration)",
                    se=climb["se"], noise=climb["noise"], fmt="+.2f"),
        comparison("fixed_beta_stalls", "A large fixed beta (1) stalls the update: it gains less gold than beta 0.02.",
                   cmp_("fixed beta 0.02", "fixed beta 1", "gold"), expect=-1, labels=("beta 0.02", "beta 1"),
                   quantity="evaluation gold", values=(s["fixed beta 0.02"]["eval_gold"], s["fixed beta 1"]["eval_gold"]),
                   fmt="+.2f"),
    ]
    # B: the estimators; the identities from the exact moments at the sampled states
    cl, fa = r["estimators"]["fixed beta 1"], r["estimators"]["no penalty"]
    n = fa["n_responses"]
    exact_bias = {k: max(e["exact_bias"][k] for e in (cl, fa)) for k in ("k1", "k2", "k3")}
    neg = {k: max(e["compare"][k]["token_neg_frac"] for e in (cl, fa)) for k in ("k1", "k2", "k3")}
    kl_mean = fa["compare"]["exact"]["response_mean"]
    out += [
        identity("k1_unbiased", "k1 is unbiased: E[k1] = KL exactly at every state.", exact_bias["k1"] <= EXACT_TOL,
                 f"holds when max over the sampled states of |E[k1] - KL| (exact sums over the vocabulary) <= "
                 f"{EXACT_TOL:g}", {"max |E[k1] - KL|": exact_bias["k1"],
                                    "measured bias per response (far)": fa["compare"]["k1"]["response_bias"]}),
        measurement("k1_negative", "One token's k1 can be negative.", neg["k1"], 0.0, ">",
                    "share of sampled tokens with k1 < 0", fmt=".0%",
                    numbers={"exact probability (close)": cl["k1_neg_prob"]}),
        measurement("k2_biased", "k2 is biased: its expectation is not the KL (here above it, on the far policy).",
                    _estimator_bias(fa["compare"]["k2"], n)["diff"], 0.0, ">", "k2 bias per response (far)",
                    se=_estimator_bias(fa["compare"]["k2"], n)["se"], noise="response", fmt="+.2f",
                    numbers={"exact KL per response": kl_mean, "max |E[k2] - KL| per token, exact": exact_bias["k2"]}),
        identity("k3_unbiased_nonnegative", "k3 is unbiased and never negative: E[k3] = KL exactly, and k3 = (rho - "
                 "1) - log rho >= 0 for every token.", exact_bias["k3"] <= EXACT_TOL and neg["k3"] == 0,
                 f"holds when max |E[k3] - KL| <= {EXACT_TOL:g} (exact) and no sampled token has k3 < 0",
                 {"max |E[k3] - KL|": exact_bias["k3"], "share of tokens with k3 < 0": neg["k3"]}),
    ]
    for label, e in (("close", cl), ("far", fa)):
        out.append(measurement(f"k3_lower_variance_{label}", f"k3 has lower variance than k1 ({label} to the "
                               "reference): the exact variance of one token's estimate.",
                               e["exact_var"]["k3"] - e["exact_var"]["k1"], 0.0, "<", "Var[k3] - Var[k1]", fmt="+.2f",
                               numbers={"Var[k1]": e["exact_var"]["k1"], "Var[k3]": e["exact_var"]["k3"]}))
    # C: top-k
    tl, tp = r["tempered"][-1], r["topk_policy"]
    out += [
        measurement("topk_k1_negative", f"Under top-{TOP_K} sampling a policy that flattens its distribution "
                    f"(tau {tl['tau']}) shows a negative expected k1 although its true KL is positive.",
                    tl["k1_expected"], 0.0, "<", f"E[k1] under top-{TOP_K} (nats/response)", fmt="+.2f",
                    numbers={"exact KL": tl["kl_exact"]}),
        measurement("topk_exploit_found", f"PPO with top-{TOP_K} sampling finds that exploit: its top-k mass falls "
                    "below the reference's.", tp["log_mass_ratio"], 0.0, "<", "log M / M_ref per response", fmt="+.2f"),
    ]
    # D: the early stop
    early, none = r["early_runs"], r["runs"]["no penalty"]
    n_side = len(early["records"])
    upd_none, upd_early = _curve(none, "probe/update_kl", n_side), _curve(early, "probe/update_kl")
    first = upd_none.mean(0)
    drift = curve_slope(_curve(early, "objective/kl_exact"))
    out.append(measurement("iteration0_largest", "Without the stop, iteration 0's update is the largest of the run "
                           "(Adam starts without second-moment history: its first steps have size ~lr per parameter).",
                           float(first[0] - first[1:].max()) if len(first) > 1 else 0.0, 0.0, ">",
                           "KL of update 0 - largest later update KL", fmt="+.3f"))
    smaller = (compare_paired(first, upd_early.mean(0)) if len(first) > 1 else
               {"diff": float(upd_early.mean() - first.mean()), "se": None})
    out += [
        comparison("stop_smaller_updates", "The early stop makes each update smaller.", smaller, expect=-1,
                   labels=("without the stop", "with the stop"), quantity="KL of the update", fmt="+.3f",
                   noise="iteration", values=(float(first.mean()), float(upd_early.mean()))),
        measurement("stop_does_not_bound_ref", "The early stop does not bound the distance to the reference: with it "
                    "the KL to the reference still grows.", drift["diff"], 0.0, ">",
                    "slope of the KL to the reference (nats/iteration)", se=drift["se"], noise=drift["noise"],
                    fmt="+.2f"),
    ]
    # E: what bounds one update
    a, cap = kl_old_arms(r), CAP * TARGET_KL
    an = arms_noise(a)
    acmp = lambda x, y, k: seed_compare(a[x][k], a[y][k], None if an is None else an[k])   # noqa: E731  y - x
    out += [
        comparison("penalty_lowers_ref_kl", "The KL penalty (beta 1 vs 0) keeps the policy nearer the reference.",
                   acmp("no penalty", "fixed beta 1", "kl_ref"), expect=-1, labels=("beta 0", "beta 1"),
                   quantity="KL to the reference", fmt="+.1f",
                   values=(float(a["no penalty"]["kl_ref"].mean()), float(a["fixed beta 1"]["kl_ref"].mean()))),
        comparison("penalty_smaller_updates", "The KL penalty (beta 1 vs 0) also makes each update smaller.",
                   acmp("no penalty", "fixed beta 1", "after"), expect=-1, labels=("beta 0", "beta 1"),
                   quantity="log10 KL of each update", fmt="+.2f",
                   values=(float(a["no penalty"]["after"].mean()), float(a["fixed beta 1"]["after"].mean()))),
        all_of("q44_stop_bounds_update", "Q44: the penalty does not bound one update's drift; the early stop does.", [
            measurement("penalty unbounded", "", a["fixed beta 1"]["largest"], cap, ">",
                        "largest update KL with beta 1", fmt=".3f"),
            measurement("stop bounded", "", a["early stop"]["largest"], cap, "<=",
                        "largest update KL with the early stop", fmt=".3f")]),
        measurement("q45_adapt_lr_bounds_update", "Q45: an lr adapted from the KL bounds each update, an alternative "
                    "to the early stop.", a["adapt lr"]["largest"], cap, "<=", "largest update KL with the adapted lr",
                    fmt=".3f"),
    ]
    return out


def narrative(r: dict) -> str:
    """The measured numbers, and which common claims hold at this scale."""
    L = (_narrative_controls(r, summary(r)) + _narrative_estimators(r) + _narrative_topk(r)
         + _narrative_early_stop(r) + _narrative_kl_old(r))
    L.append(time_line(r))
    return "\n".join(L)


ARM_COLORS = {"no penalty": "tab:red", "fixed beta 1": "tab:purple", "early stop": "tab:cyan", "adapt lr": "tab:olive"}


def _plot_kl_old(r: dict, j, k, l) -> None:
    """Part E: (j) the KL of each update per arm, (k) the adapted lr and the early stop's steps, (l) gold and KL."""
    a = kl_old_arms(r)
    arms = {"no penalty": r["runs"]["no penalty"], "fixed beta 1": r["runs"]["fixed beta 1"],
            "early stop": r["early_runs"], "adapt lr": r["adapt_runs"]}
    it = np.arange(r["sizes"]["iterations"])
    for name, v in arms.items():
        _band(j, it, _curve(v, "probe/update_kl"), name, ARM_COLORS[name])
    j.axhline(TARGET_KL, color="k", ls=":", lw=1, label=f"kl_old_target {TARGET_KL:g}")
    j.axhline(CAP * TARGET_KL, color="k", ls="--", lw=0.8, label=f"{CAP:g} x target ('bounded' below)")
    j.set_yscale("log")
    j.set(title="(j) Q44 / Q45: the KL of each update (band: seed range)", xlabel="iteration",
          ylabel="KL(pi_old || pi) per token after the update (log)")
    j.legend(fontsize=8, ncol=2, loc="upper right")
    lr = _curve(r["adapt_runs"], "lr")
    _band(k, it, lr, "adapted lr at the end of each update", "tab:olive")
    _band(k, it, _curve(r["adapt_runs"], "lr_max"), "adapted lr, largest inside the update", "tab:olive", ls="--")
    k.axhline(r["base"]["lr"], color="grey", ls=":", lw=1, label=f"configured lr {r['base']['lr']:g}")
    k.set_yscale("log")
    k.set(title="(k) the KL-adapted lr, and the early stop's steps", xlabel="iteration", ylabel="actor lr (log)")
    twin = k.twinx()
    twin.plot(it, _curve(r["early_runs"], "policy/steps").mean(0), color="tab:cyan", marker=".", lw=1,
              label="early stop: steps per update (right)")
    twin.set_ylim(0, r["steps_per_update"] * 1.1)
    twin.set_ylabel("Adam steps taken per update")
    twin.grid(False)
    h1, l1 = k.get_legend_handles_labels()
    h2, l2 = twin.get_legend_handles_labels()
    k.legend(h1 + h2, l1 + l2, fontsize=8, loc="lower left")
    names = list(a)
    x = np.arange(len(names))
    for i, name in enumerate(names):
        g = a[name]["gold"]
        l.plot(np.full(len(g), i) + np.linspace(-0.08, 0.08, len(g)), g, "o", color=ARM_COLORS[name], alpha=0.7)
        l.plot([i - 0.25, i + 0.25], [g.mean()] * 2, color=ARM_COLORS[name], lw=2.5)
    l.axhline(r["reference"]["gold_mean"], color="grey", ls="--", lw=1, label="SFT policy")
    l.set_xticks(x, [f"{n}\nKL ref {a[n]['kl_ref'].mean():.1f}" for n in names], fontsize=8)
    l.set(title="(l) gold on held-out prompts (dots: seeds); KL to the reference in the labels",
          ylabel="gold score")
    l.legend(fontsize=8, loc="lower left")


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(4, 3, figsize=(17, 19))
    (a, b, c), (d, e, f), (g, h, i) = axes[:3]
    it = np.arange(r["sizes"]["iterations"])
    n_seeds = len(r["sizes"]["seeds"])
    for name, v in r["runs"].items():
        _band(a, it, _curve(v, "objective/kl_exact"), name, COLORS[name])
        _band(b, it, _curve(v, "gold/score"), name, COLORS[name])
        c.plot(it, _curve(v, "kl_coef").mean(0), color=COLORS[name], lw=1.8, label=name)
    a.axhline(KL_TARGET, color="k", ls=":", lw=1, label=f"target {KL_TARGET:g} (adaptive)")
    a.set_ylim(bottom=0)
    a.set(title=f"(a) exact KL to the reference, mean of {n_seeds} seeds (band: range)", xlabel="iteration",
          ylabel="nats / response")
    a.legend(loc="upper left", fontsize=8)
    b.axhline(r["reference"]["gold_mean"], color="grey", ls="--", lw=1, label="SFT policy")
    b.set(title="(b) gold score of the rollouts (simulated human)", xlabel="iteration", ylabel="gold score")
    b.legend(loc="lower left", fontsize=8)
    c.set_yscale("symlog", linthresh=0.01)
    c.set(title="(c) beta (kl_coef) used in each iteration", xlabel="iteration", ylabel="beta (symlog)")
    c.legend(loc="center right", fontsize=8)
    # (d) per-token values of the estimators on the far policy; (e) per-response bias and spread
    far = r["estimators"]["no penalty"]
    tok = far["tokens"]
    x = tok["logp"] - tok["logp_ref"]
    bins = np.linspace(-6, 10, 81)
    estimates = (("k1", x, "tab:blue"), ("k2", 0.5 * x * x, "tab:orange"), ("k3", np.expm1(-x) + x, "tab:green"))
    for kind, vals, col in estimates:
        c_ = far["compare"][kind]
        d.hist(np.clip(vals, bins[0], bins[-1]), bins=bins, histtype="step", lw=1.5, color=col,
               label=f"{kind}: mean {c_['token_mean']:.2f}, std {c_['token_std']:.1f}")
    d.axvline(far["compare"]["exact"]["token_mean"], color="k", ls="--", lw=1,
              label=f"exact KL, mean {far['compare']['exact']['token_mean']:.2f}")
    d.set_yscale("log")
    d.set(title="(d) one token's estimate, far policy (no penalty)", ylabel="tokens",
          xlabel="estimate of KL at the token (nats, clipped to [-6, 10])")
    d.legend(fontsize=8)
    kinds, width = ("k1", "k2", "k3"), 0.38
    for j, (name, label) in enumerate((("fixed beta 1", "close"), ("no penalty", "far"))):
        cmp_ = r["estimators"][name]["compare"]
        exact = cmp_["exact"]["response_mean"]
        rel_bias = [cmp_[k]["response_bias"] / exact for k in kinds]
        rel_err = [cmp_[k]["response_err_std"] / exact for k in kinds]
        e.bar(np.arange(3) + (j - 0.5) * width, rel_bias, width, yerr=rel_err, capsize=4, alpha=0.8,
              label=f"{label} policy ({name}), exact KL {exact:.1f} nats/response")
    e.axhline(0, color="k", lw=0.8)
    e.set_xticks(range(3), kinds)
    e.set(title="(e) per response: bias (bar) and noise (error bar)", ylabel="relative to the exact KL per response")
    e.legend(fontsize=8, loc="upper right")
    # (f) flattened references under top-k sampling
    taus = [row["tau"] for row in r["tempered"]]
    f.plot(taus, [row["kl_exact"] for row in r["tempered"]], "k-o",
           label="exact KL(pi || pi_ref) = E[k1], plain sampling")
    f.plot(taus, [row["k1_expected"] for row in r["tempered"]], "C3-^", label=f"E[k1], top-k = {TOP_K} sampling")
    f.plot(taus, [row["k1_sampled"] for row in r["tempered"]], "C3x", ms=9, label="k1 of the top-k samples")
    f.axhline(0, color="grey", lw=0.8)
    f.set(title="(f) the reference flattened (logits / tau): top-k hides the move",
          xlabel="tau (1 = the reference itself)", ylabel="nats / response")
    f.legend(fontsize=8)
    # (g) the top-k PPO run: estimated vs exact KL, next to the same run with plain sampling
    n_side = len(r["topk_runs"]["records"])
    pair = ((r["topk_runs"], f"top-k = {TOP_K}", "C3"), (r["runs"]["fixed beta 1"], "plain sampling", "C0"))
    for v, label, col in pair:
        _band(g, it, _curve(v, "objective/kl", n_side), f"{label}: k1 estimate", col)
        _band(g, it, _curve(v, "objective/kl_exact", n_side), f"{label}: exact", col, ls=":")
    tp = r["topk_policy"]
    g.set(title=f"(g) PPO, fixed beta 1: top-k = {TOP_K} vs plain sampling", xlabel="iteration",
          ylabel="nats / response")
    g.legend(fontsize=8, loc="upper left", title=f"final top-k policy: top-{TOP_K} mass {tp['mass']:.2f} (reference "
             f"{tp['mass_ref']:.2f})", title_fontsize=8)
    # (h) the KL of each update and (i) the KL to the reference, with and without early stopping
    none, early = r["runs"]["no penalty"], r["early_runs"]
    n_side = len(early["records"])
    _band(h, it, _curve(none, "probe/update_kl", n_side), "no penalty", "tab:red")
    _band(h, it, _curve(early, "probe/update_kl"), f"no penalty + kl_old_target {TARGET_KL}", "tab:cyan")
    h.axhline(TARGET_KL, color="k", ls=":", lw=1, label="kl_old_target")
    for k, rec in enumerate(early["records"][0]):
        if rec["early_stop_epoch"] is not None:
            h.annotate(str(rec["early_stop_epoch"]), (k, rec["probe/update_kl"]), textcoords="offset points",
                       xytext=(0, 6), ha="center", fontsize=7, color="tab:cyan")
    h.set_yscale("log")
    h.set(title="(h) KL of each update (digits: epoch it stopped in)", xlabel="iteration",
          ylabel="KL(pi_old || pi) per token after the update (k3, log)")
    h.legend(fontsize=8)
    for v, label, col in ((none, "no penalty", "tab:red"), (early, f"+ kl_old_target {TARGET_KL}", "tab:cyan")):
        _band(i, it, _curve(v, "objective/kl_exact", n_side), f"{label}: KL to reference", col)
    twin = i.twinx()
    for v, col in ((none, "tab:red"), (early, "tab:cyan")):
        twin.plot(it, _curve(v, "gold/score", n_side).mean(0), color=col, ls="--", lw=1)
    twin.set_ylabel("gold score (dashed)")
    twin.grid(False)
    Vd = by_key(verdicts(r))
    i.set(title="(i) early stopping: " + ("each update smaller" if Vd["stop_smaller_updates"].holds else
                                          f"smaller updates {Vd['stop_smaller_updates'].outcome}") + "; "
          + ("the KL to the reference still grows" if Vd["stop_does_not_bound_ref"].holds else
             f"growth of the KL to the reference {Vd['stop_does_not_bound_ref'].outcome}"), xlabel="iteration",
          ylabel="exact KL to the reference (nats / response)")
    i.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)   # below: the dashed gold fills the top
    _plot_kl_old(r, *axes[3])
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
