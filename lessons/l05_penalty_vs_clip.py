r"""Lesson 05 - penalty vs clip: PPO-Penalty with the paper's adaptive beta rule vs PPO-Clip on one task.

Legend: S contexts (32), V vocab (32), N samples per iteration (256); W (S, V) tabular logits.

Pipeline step: the two ways PPO keeps the new policy near the old one. PPO-Penalty puts the KL between the
old and the new policy into the objective, as TRPO's Lagrangian would, and must keep adjusting its
coefficient $\beta$: raise it when the KL is too large, lower it when too small. PPO-Clip has no such
coefficient ($\epsilon$ stays at 0.1-0.2); in practice the KL is still monitored.

Paper: Schulman et al. 2017 (arXiv:1707.06347), the KL-penalised objective of eq. (8) against the clipped
one of eq. (7):

$$
L^{KLPEN}(\theta) = \hat{\mathbb{E}}_t\left[r_t(\theta) \hat A_t - \beta\, \mathrm{KL}[\pi_{\theta_{old}}(\cdot \mid s_t), \pi_\theta(\cdot \mid s_t)]\right]
$$

$$
L^{CLIP}(\theta) = \hat{\mathbb{E}}_t\left[\min\left(r_t(\theta) \hat A_t,\ \mathrm{clip}(r_t(\theta), 1 - \epsilon, 1 + \epsilon)\, \hat A_t\right)\right]
$$

and the adaptive rule of section 4, applied after each policy update with
$d = \hat{\mathbb{E}}_t[\mathrm{KL}[\pi_{\theta_{old}}(\cdot \mid s_t), \pi_\theta(\cdot \mid s_t)]]$:
if $d < d_{targ} / 1.5$ then $\beta \leftarrow \beta / 2$; if $d > 1.5\, d_{targ}$ then $\beta \leftarrow 2 \beta$
(`minippo.rl.kl_control.PPOPaperKLController`). The paper notes the initial $\beta$ "is not important in
practice because the algorithm quickly adjusts it"; this lesson measures that claim too.

The task: a token bandit with 32 contexts and 32 tokens (tabular softmax policy, rewards N(0, 1) plus noise
of std 1), 256 samples per iteration, 4 epochs of minibatch (64) Adam, lr 0.1, a learned value table as
critic (`minippo.toy.bandit.ppo_train`). The per-token KL in the penalty is the k3 estimate of the library's
`ppo_penalty_loss`; $d$ for the rule is the exact KL of the update over the batch's contexts. Rewards are
shown as the fraction of the achievable improvement, $(J - J_{uniform}) / (J_{optimal} - J_{uniform})$,
averaged over several seeds (tasks).

The figure shows (a) learning curves of PPO-Clip, PPO-Penalty with the adaptive rule and with a fixed
$\beta$; (b) the KL of every update against the rule's target band $[d_{targ}/1.5, 1.5\, d_{targ}]$; (c)
$\beta$ over time from four initial values 0.1 ... 100: halving and doubling, and drifting down as the policy
converges; (d) sensitivity: the reward after 10 iterations and at the end against the initial (adaptive) or
fixed $\beta$, with PPO-Clip as a reference line.

Exercises:
1. Run the adaptive rule with d_targ = 0.003 and 0.03 (the paper's other values). Which one
   comes closest to PPO-Clip? What is the KL of PPO-Clip's updates here?
2. Replace the factors 2 and 1.5 by 1.2 and 1.2: does beta still oscillate? How long does it take
   from beta0 = 100 to reach a useful value?
3. With a fixed beta, find the best value by a sweep. How would that sweep change if the reward
   scale doubled? (Hint: the lesson whitens the advantages; without that, r A would be measured in
   reward units and beta KL would not. Try `whiten_advantages=False` too.)

Questions: Q11, Q40.
"""
from __future__ import annotations

import numpy as np

from lessons._common import Verdict, by_key, comparison, diff_text, measurement, legend_in_margin, lesson_main, pyplot, save
from minippo.studies.sweep_stats import compare_paired
from minippo.toy.bandit import BanditPPOConfig, TokenBandit, ppo_train

D_TARG = 0.01
INIT_BETAS = (0.1, 1.0, 10.0, 100.0)
FIXED_BETAS = (0.1, 1.0, 10.0)
EARLY = 10                                          # "after 10 iterations" in panel (d)
FORGOTTEN = 10.0     # final betas within this factor of each other: the rule has forgotten the 1000x initial spread


def configs() -> dict:
    """name -> BanditPPOConfig of every run of the lesson."""
    common = dict(batch_size=256, minibatch_size=64, update_epochs=4, lr=0.1, critic="table", vf_coef=0.5)
    out = {"clip": BanditPPOConfig(objective="clip", clip_eps=0.2, **common)}
    for b in INIT_BETAS:
        out[f"adaptive beta0={b:g}"] = BanditPPOConfig(objective="penalty", kl_old_coef=b, kl_old_target=D_TARG, **common)
    for b in FIXED_BETAS:
        out[f"fixed beta={b:g}"] = BanditPPOConfig(objective="penalty", kl_old_coef=b, kl_old_target=None, **common)
    return out


def run(quick: bool = False, seed: int = 0) -> dict:
    n_seeds = 2 if quick else 4
    n_iters = 10 if quick else 40
    cfgs = configs()
    runs = {name: {k: [] for k in ("progress", "kl", "kl_coef", "clipfrac")} for name in cfgs}
    for s in range(n_seeds):
        bandit = TokenBandit.random(32, 32, np.random.default_rng([seed, s]), noise_std=1.0)
        J_uniform, J_opt = bandit.expected_reward(bandit.init_params()), bandit.optimal_reward()
        for name, cfg in cfgs.items():
            h = ppo_train(bandit, cfg, n_iters, np.random.default_rng([seed, s, 1]))
            runs[name]["progress"].append((h["reward"] - J_uniform) / (J_opt - J_uniform))
            for k in ("kl", "kl_coef", "clipfrac"):
                runs[name][k].append(h[k])
    runs = {name: {k: np.array(v) for k, v in d.items()} for name, d in runs.items()}   # (n_seeds, n_iters)
    lo, hi = D_TARG / 1.5, D_TARG * 1.5
    summary = {}
    for name, d in runs.items():
        beta = d["kl_coef"]
        steps = np.sign(np.diff(np.log(beta), axis=1))                                      # +1 up, -1 down, 0 kept
        moves = [st[st != 0] for st in steps]
        summary[name] = {
            "early": float(d["progress"][:, EARLY - 1].mean()), "final": float(d["progress"][:, -1].mean()),
            "in_band": float(np.mean((d["kl"] >= lo) & (d["kl"] <= hi))),
            "kl_median": float(np.median(d["kl"])),
            "beta_changes": float(np.mean([len(m) for m in moves])),
            "beta_reversals": float(np.mean([np.sum(m[1:] != m[:-1]) for m in moves])),
            "beta_final": float(np.median(beta[:, -1])),
        }
    return {"runs": runs, "summary": summary, "n_seeds": n_seeds, "n_iters": n_iters, "d_targ": D_TARG,
            "band": (lo, hi)}


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (noise: the spread over the tasks)."""
    a1, clip = r["summary"]["adaptive beta0=1"], r["summary"]["clip"]
    ends = [r["summary"][f"adaptive beta0={b:g}"]["beta_final"] for b in INIT_BETAS]
    lo_b, hi_b = INIT_BETAS[0], INIT_BETAS[-1]
    early = {b: r["runs"][f"adaptive beta0={b:g}"]["progress"][:, EARLY - 1] for b in (lo_b, hi_b)}
    return [
        measurement("beta_oscillates", "The paper's adaptive rule makes beta oscillate: it reverses direction "
                    "(beta0 = 1).", a1["beta_reversals"], 0.0, ">", "reversals per run (mean over tasks)",
                    because=f"beta moves {a1['beta_changes']:.1f} times in {r['n_iters']} updates and reverses "
                    f"{a1['beta_reversals']:.1f} times"),
        measurement("kl_in_band", "The adaptive rule keeps the update's KL inside its band [d_targ / 1.5, 1.5 d_targ] "
                    "in most updates (beta0 = 1).", a1["in_band"], 0.5, ">", "fraction of updates in the band",
                    fmt=".2f"),
        comparison("clip_beats_penalty", "PPO-Clip, with no beta to tune, ends higher than PPO-Penalty with the "
                   "adaptive beta (beta0 = 1) (PPO paper, Table 1).",
                   compare_paired(r["runs"]["adaptive beta0=1"]["progress"][:, -1], r["runs"]["clip"]["progress"][:, -1]),
                   expect=+1, labels=("penalty (beta0 = 1)", "clip"), quantity="final progress",
                   values=(a1["final"], clip["final"]), fmt="+.2f", noise="task"),
        measurement("forgets_beta0", f"The adaptive rule forgets its initial beta: initial values x{hi_b / lo_b:g} apart "
                    f"end within x{FORGOTTEN:g} of each other after {r['n_iters']} iterations.",
                    max(ends) / min(ends), FORGOTTEN, "<", "final beta spread (max / min)", fmt=".1f"),
        comparison("beta0_matters_early", f"Early on the initial beta matters: after {EARLY} iterations beta0 = "
                   f"{hi_b:g} has made less progress than beta0 = {lo_b:g} (the paper calls the initial beta 'not "
                   "important in practice').", compare_paired(early[lo_b], early[hi_b]), expect=-1,
                   labels=(f"beta0 = {lo_b:g}", f"beta0 = {hi_b:g}"), quantity=f"progress after {EARLY}",
                   values=(float(early[lo_b].mean()), float(early[hi_b].mean())), fmt="+.2f", noise="task"),
    ]


def derived(r: dict) -> dict:
    """The spread over the initial betas of the adaptive rule (lowest and highest), which docs/questions.md
    quotes: progress after EARLY iterations, final progress, final beta."""
    runs = [r["summary"][f"adaptive beta0={b:g}"] for b in INIT_BETAS]
    spread = {k: {"min": min(s[k] for s in runs), "max": max(s[k] for s in runs)}
              for k in ("early", "final", "beta_final")}
    return {"early_iteration": EARLY, "init_beta": {"min": min(INIT_BETAS), "max": max(INIT_BETAS)},
            "adaptive": spread}


def narrative(r: dict) -> str:
    V = by_key(verdicts(r))
    L = []
    L.append(f"{r['n_seeds']} tasks x {r['n_iters']} iterations; progress = fraction of the achievable improvement; "
             f"d_targ = {r['d_targ']}.")
    L.append(f"{'run':>22} | after {EARLY:>2} | final | KL median | KL in band | beta changes | reversals | final beta")
    for name, s in r["summary"].items():
        L.append(f"{name:>22} | {s['early']:8.3f} | {s['final']:5.3f} | {s['kl_median']:9.4f} | {s['in_band']:10.0%} | "
                 f"{s['beta_changes']:12.1f} | {s['beta_reversals']:9.1f} | {s['beta_final']:.3g}")
    a1, clip = r["summary"]["adaptive beta0=1"], r["summary"]["clip"]
    lo, hi = r["band"]
    L.append(f"The adaptive rule (beta0 = 1) moves beta {a1['beta_changes']:.1f} times in {r['n_iters']} updates and "
             f"reverses direction {a1['beta_reversals']:.1f} times; the KL is inside its band [{lo:.4f}, {hi:.4f}] in "
             f"{a1['in_band']:.0%} of the updates.")
    L += [V["beta_oscillates"].render(), V["kl_in_band"].render()]
    c = compare_paired(r["runs"]["adaptive beta0=1"]["progress"][:, -1], r["runs"]["clip"]["progress"][:, -1])
    L.append(f"PPO-Clip has no beta at all and ends at {clip['final']:.2f} (penalty, beta0 = 1: {a1['final']:.2f}); "
             f"clip minus penalty, paired over the {r['n_seeds']} tasks: {diff_text(c, '+.2f', 'task')}.")
    L.append(V["clip_beats_penalty"].render())
    early = {b: r["runs"][f"adaptive beta0={b:g}"]["progress"][:, EARLY - 1] for b in INIT_BETAS}
    ends = [r["summary"][f"adaptive beta0={b:g}"]["beta_final"] for b in INIT_BETAS]
    spread = max(ends) / min(ends)
    L.append(f"Initial beta {INIT_BETAS[0]:g} ... {INIT_BETAS[-1]:g} (x{INIT_BETAS[-1] / INIT_BETAS[0]:g}) ends at beta "
             f"{min(ends):.3g} ... {max(ends):.3g} (x{spread:.1f}).")
    L.append(V["forgets_beta0"].render())
    best, worst = max(early, key=lambda b: early[b].mean()), min(early, key=lambda b: early[b].mean())
    c = compare_paired(early[worst], early[best])
    L.append(f"Progress after {EARLY} iterations, best (beta0 = {best:g}) minus worst (beta0 = {worst:g}) initial "
             f"beta, paired over the tasks: {diff_text(c, '+.2f', 'task')}.")
    L.append(V["beta0_matters_early"].render())
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(2, 2, figsize=(12, 9), layout="constrained")
    runs, summ = results["runs"], results["summary"]
    it = np.arange(1, results["n_iters"] + 1)
    lo, hi = results["band"]
    style = {"clip": ("tab:blue", "-"), "adaptive beta0=1": ("tab:red", "-"), "fixed beta=1": ("tab:orange", "--"),
             "fixed beta=10": ("tab:brown", ":")}

    a = ax[0, 0]
    for name, (c, ls) in style.items():
        p = runs[name]["progress"]
        label = "PPO-Clip (eps 0.2)" if name == "clip" else f"PPO-Penalty, {name}"
        a.plot(it, p.mean(axis=0), color=c, ls=ls, lw=2, label=f"{label}: final {p[:, -1].mean():.2f}")
        a.fill_between(it, p.min(axis=0), p.max(axis=0), color=c, alpha=0.12)
    a.set_xlabel("PPO iteration (rollout of 256 + 4 epochs)")
    a.set_ylabel("(J - J_uniform) / (J_opt - J_uniform)")
    a.set_title(f"(a) learning curves, mean and range over {results['n_seeds']} tasks")
    a.legend(loc="lower right", fontsize=8)

    a = ax[0, 1]
    a.axhspan(lo, hi, color="tab:green", alpha=0.15, label="target band [d_targ/1.5, 1.5 d_targ]")
    a.axhline(results["d_targ"], color="tab:green", lw=1)
    for name, c, mk in (("clip", "tab:blue", "o"), ("adaptive beta0=1", "tab:red", "s")):
        kl = runs[name]["kl"]
        label = "PPO-Clip" if name == "clip" else "PPO-Penalty adaptive, beta0 = 1"
        a.plot(it, kl[0], mk + "-", color=c, ms=3, lw=1, label=f"{label} (task 1)")
        a.plot(it, np.median(kl, axis=0), color=c, lw=2.5, alpha=0.5, label=f"{label} (median of tasks)")
    a.set_yscale("log")
    a.set_xlabel("PPO iteration")
    a.set_ylabel("exact KL(old || new) of the update")
    a.set_title(f"(b) KL per update; penalty in band {summ['adaptive beta0=1']['in_band']:.0%} of the time")
    a.legend(loc="lower left", fontsize=8)

    a = ax[1, 0]
    cmap = plt.get_cmap("plasma")
    for k, b in enumerate(INIT_BETAS):
        name = f"adaptive beta0={b:g}"
        a.step(it, runs[name]["kl_coef"][0], where="post", color=cmap(0.85 * k / (len(INIT_BETAS) - 1)), lw=2,
               label=f"beta0 = {b:g}: all tasks: {summ[name]['beta_reversals']:.1f} reversals (mean), "
                     f"final beta {summ[name]['beta_final']:.2g} (median)")
    a.set_yscale("log")
    a.set_xlabel("PPO iteration")
    a.set_ylabel("beta (kl_coef) used in the update")
    osc = by_key(verdicts(results))["beta_oscillates"]
    a.set_title("(c) beta under the paper's rule (task 1): x2, /2"
                + (", oscillating" if osc.holds else f"; oscillation (beta0 = 1) {osc.outcome}"))
    legend_in_margin(a, 0.3, side="bottom", fontsize=8)       # the steps fill the top and the left

    a = ax[1, 1]
    clip = summ["clip"]
    a.axhline(clip["early"], color="tab:blue", ls="--", lw=1.5, label=f"PPO-Clip after {EARLY} iterations")
    a.axhline(clip["final"], color="tab:blue", lw=1.5, label=f"PPO-Clip after {results['n_iters']}")
    for kind, betas, c in (("adaptive beta0", INIT_BETAS, "tab:red"), ("fixed beta", FIXED_BETAS, "tab:orange")):
        names = [f"{kind}={b:g}" for b in betas]
        a.plot(betas, [summ[n]["early"] for n in names], "o--", color=c, label=f"{kind}: after {EARLY}")
        a.plot(betas, [summ[n]["final"] for n in names], "s-", color=c, label=f"{kind}: after {results['n_iters']}")
    a.set_xscale("log")
    a.set_xlabel("initial beta (adaptive) or beta (fixed)")
    a.set_ylabel("fraction of the achievable improvement")
    a.set_title("(d) sensitivity to beta")
    a.legend(loc="lower left", fontsize=8)
    fig.suptitle("Lesson 05: PPO-Penalty (eq. (8), adaptive beta of sec. 4) vs PPO-Clip (eq. (7)) on a 32 x 32 "
                 "token bandit", fontsize=12)
    save(fig, path)


if __name__ == "__main__":
    main()
