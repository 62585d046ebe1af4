r"""Lesson 03 - trust region: vanilla PG vs KL-constrained (TRPO-style) vs PPO-clip steps; PPO paper Figure 2 reproduced.

Legend: S contexts (32), D features (4), V vocab (8), N samples (128); W (D, V) the policy.

Pipeline step: how far may one update move the policy? TRPO bounds the KL between the old and the new
policy, with second-order machinery; PPO keeps the idea of a stable step but replaces the constraint by a
clipped objective and a plain first-order optimizer. The clip is not a hard constraint: this lesson measures
how far a PPO update actually moves.

Paper: Schulman et al. 2017 (arXiv:1707.06347), with $r_t = \pi_\theta / \pi_{\theta_{old}}$. TRPO, eqs.
(3)-(4):

$$
\max_\theta\ \hat{\mathbb{E}}_t\left[r_t(\theta)\, \hat A_t\right]
\quad \text{subject to} \quad
\hat{\mathbb{E}}_t\left[\mathrm{KL}[\pi_{\theta_{old}}(\cdot \mid s_t), \pi_\theta(\cdot \mid s_t)]\right] \le \delta
$$

the penalised problem of eq. (5), $\max_\theta \hat{\mathbb{E}}_t[r_t \hat A_t - \beta\, \mathrm{KL}[\pi_{\theta_{old}}(\cdot \mid s_t), \pi_\theta(\cdot \mid s_t)]]$,
$L^{CPI} = \hat{\mathbb{E}}_t[r_t \hat A_t]$ of eq. (6), and the clipped objective of eq. (7):

$$
L^{CLIP}(\theta) = \hat{\mathbb{E}}_t\left[\min\left(r_t(\theta) \hat A_t,\ \mathrm{clip}(r_t(\theta), 1 - \epsilon, 1 + \epsilon)\, \hat A_t\right)\right]
$$

and TRPO itself (Schulman et al. 2015, arXiv:1502.05477): the natural-gradient step $F^{-1} g$ scaled to the
KL bound, then a backtracking line search on the exact KL (`minippo.toy.trust_region`).

The problem: a token bandit whose 32 contexts share one parameter matrix (4 features x 8 tokens, like a small
network), starting from a decent "SFT-like" policy; each batch has 128 noisy rewards and an exact critic
($A = R - V(s)$, whitened). From the same policy and the same batch we take a vanilla policy-gradient step
$W + \alpha g$ ($g$ the gradient of $L^{CPI}$, eq. (1)); a TRPO step with KL bound $\delta$; a PPO-clip update:
10 epochs of minibatch (32) Adam on $L^{CLIP}$ with step size lr. We measure the exact KL of the step, the
gain $L^{CPI}$ promises on the batch, and the true gain $J(\text{new}) - J(\text{old})$ (exact, no sampling),
as each method's step-size knob grows.

TRPO's guarantee, and why PPO gives it up: TRPO paper Theorem 1 bounds the true return $\eta$ of any new
policy $\tilde\pi$ by the surrogate $L_\pi(\tilde\pi) = \eta(\pi) + \sum_s \rho_\pi(s) \sum_a \tilde\pi(a \mid s)
A_\pi(s, a)$ (its eq. (3)), in the KL form of its eq. (9):

$$
\eta(\tilde\pi) \ge L_\pi(\tilde\pi) - C\, D_{KL}^{max}(\pi, \tilde\pi), \qquad
C = \frac{4 \epsilon \gamma}{(1 - \gamma)^2}, \quad \epsilon = \max_{s, a} |A_\pi(s, a)|
$$

with $D_{KL}^{max}$ the largest KL over the states. Maximising the right-hand side $M_i(\pi)$ at every
iteration can only raise $\eta$, because $M_i(\pi_i) = \eta(\pi_i)$: $\eta(\pi_{i+1}) - \eta(\pi_i) \ge M_i(\pi_{i+1}) -
M_i(\pi_i) \ge 0$ (its Algorithm 1): a monotonic-improvement guarantee, which no clipped objective has. The
guarantee belongs to that penalised, max-KL problem; the practical TRPO replaces it by a constraint on the
mean KL ($\delta$) estimated from samples, which the paper calls an approximation, and keeps only its spirit.
Two cases this course meets: in a one-step (bandit) problem like this lesson's, $\gamma = 0$ gives $C = 0$ and
$L_\pi = \eta$ exactly, so a step can only go wrong because $L$ is estimated on a finite batch (below); in
RLHF, $\gamma = 1$ (one response is one episode, Q18) makes $C$ infinite: the bound says nothing there, and
what keeps a step small is the trust region's KL itself (or PPO's clip and a KL watch, Q8).

Why the surrogate lies: it is evaluated on the very batch the step was fitted to (so part of the promised
gain is fitted noise, at every step size), and the ratio-weighted batch says less and less about policies
far from the old one (lesson 02). Both grow with the KL.

The figure shows (a) the KL of each step against its knob ($\alpha$, $\delta$, lr = m x a base value): the
PG step's KL grows like $m^2$, TRPO's stays at $\delta$ (or below it after backtracking), PPO's grows much more
slowly than PG's but is NOT bounded; (b) the true gain against the KL: where each method's peaks, and whether it falls for the large steps; (c) the
fraction of the gain promised by $L^{CPI}$ on the batch that is real; (d) PPO paper Figure 2: from the PPO
update whose KL is closest to the paper's 0.02, interpolate $\theta_{old} + a (\theta_{ppo} - \theta_{old})$
and plot $L^{CPI}$, $\mathbb{E}[\mathrm{clip}(r) A]$, $L^{CLIP}$ and the exact KL against $a$ (plus the true
gain, which the paper could not compute); $L^{CLIP}$ is a pessimistic lower bound of $L^{CPI}$ that peaks
near $a = 1$; (e) how much the KL of ONE fixed knob varies between batches (TRPO's is pinned to $\delta$);
(f) the numbers at m = 1.

Exercises:
1. Give PPO 30 epochs instead of 10 at the base lr. Does the KL stay bounded? Where is the peak
   of L^CLIP along the interpolation line now?
2. Replace TRPO's natural gradient direction by the plain gradient (keep the scaling and the line
   search): at the same delta, which gains more true reward? (Hint: fisher_vector_product.)
3. Make the policy tabular (n_features=None). Does the true gain in (b) still fall for large
   steps, and for which method most? (Think of what a greedy step does when no parameters are
   shared.)

Questions: Q7, Q8, Q71.
"""
from __future__ import annotations

import numpy as np

from lessons._common import Verdict, all_of, by_key, comparison, lesson_main, measurement, pyplot, save
from minippo.nn.optim import AdamW
from minippo.toy.bandit import BanditPPOConfig, TokenBandit, ppo_update, reinforce_gradient
from minippo.rl.masked import masked_whiten
from minippo.rl.losses import clipped_policy_loss
from minippo.studies.sweep_stats import compare_paired
from minippo.toy.trust_region import cpi_loss, trpo_step

METHODS = ("vanilla PG", "TRPO", "PPO-clip")
BASE = {"vanilla PG": 5.0, "TRPO": 0.01, "PPO-clip": 0.005}     # alpha, delta, lr at m = 1
KNOB = {"vanilla PG": "alpha", "TRPO": "delta", "PPO-clip": "lr"}
PAPER_KL = 0.02                                                  # KL of the update in PPO Fig. 2


def make_problem(rng: np.random.Generator):
    bandit = TokenBandit.random(32, 8, rng, n_features=4, noise_std=2.0)
    return bandit, bandit.fitted_params(2.0)


def draw_batch(bandit, W0, rng, n=128):
    states, actions, rewards = bandit.sample(W0, n, rng)
    logp_old, _ = bandit.logp(W0, states, actions)
    adv = masked_whiten(rewards - bandit.state_values(W0)[states], None)     # exact critic
    return {"states": states, "actions": actions, "logp_old": logp_old, "adv": adv}


def surrogates(bandit, W, batch, clip_eps=0.2) -> dict:
    """L^CPI, E[clip(r) A] and L^CLIP of the batch at W (objectives, to maximise)."""
    logp, _ = bandit.logp(W, batch["states"], batch["actions"])
    cpi = -cpi_loss(logp, batch["logp_old"], batch["adv"])[0]
    clip = -clipped_policy_loss(logp, batch["logp_old"], batch["adv"], None, clip_eps)[0]
    ratio = np.exp(logp - batch["logp_old"])
    return {"L^CPI": cpi, "clipped term": float(np.mean(np.clip(ratio, 1 - clip_eps, 1 + clip_eps) * batch["adv"])),
            "L^CLIP": clip}


def take_step(method, knob, bandit, W0, batch, rng):
    """One update of the given method from W0 on the batch; returns the new W."""
    s, a, adv = batch["states"], batch["actions"], batch["adv"]
    if method == "vanilla PG":
        return W0 + knob * reinforce_gradient(bandit, W0, s, a, adv)          # g of eq. (1), A = adv
    if method == "TRPO":
        return trpo_step(bandit, W0, s, a, adv, max_kl=knob)[0]
    cfg = BanditPPOConfig(objective="clip", update_epochs=10, minibatch_size=32, batch_size=len(s), lr=knob,
                          clip_eps=0.2, critic="none", vf_coef=0.0)
    params = {"W": W0.copy(), "values": np.zeros(bandit.n_states)}
    ppo_update(bandit, params, AdamW(params, lr=knob, weight_decay=0.0), batch, cfg, rng)
    return params["W"]


def run(quick: bool = False, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    bandit, W0 = make_problem(rng)
    J0 = bandit.expected_reward(W0)
    n_batches = 3 if quick else 12
    mults = np.logspace(-1, 2, 7 if quick else 13)                           # m
    batches = [draw_batch(bandit, W0, rng) for _ in range(n_batches)]
    shape = (len(METHODS), len(mults), n_batches)
    kl, gain, promise = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    ppo_W = {}
    for b, batch in enumerate(batches):
        base_cpi = surrogates(bandit, W0, batch)["L^CPI"]
        for i, method in enumerate(METHODS):
            for j, m in enumerate(mults):
                W = take_step(method, m * BASE[method], bandit, W0, batch, np.random.default_rng([seed, b, j]))
                kl[i, j, b] = bandit.kl(W0, W, batch["states"])
                gain[i, j, b] = bandit.expected_reward(W) - J0
                promise[i, j, b] = surrogates(bandit, W, batch)["L^CPI"] - base_cpi
                if method == "PPO-clip" and b == 0:
                    ppo_W[j] = W
    # Figure 2: the PPO update of batch 0 whose KL is closest to the paper's 0.02
    j2 = int(np.argmin(np.abs(np.log(kl[2, :, 0] / PAPER_KL))))
    direction = ppo_W[j2] - W0
    alphas = np.linspace(0.0, 2.0, 41)
    fig2 = {k: np.empty(len(alphas)) for k in ("L^CPI", "clipped term", "L^CLIP", "KL", "true gain")}
    for k, alpha in enumerate(alphas):
        W = W0 + alpha * direction
        for name, v in surrogates(bandit, W, batches[0]).items():
            fig2[name][k] = v
        fig2["KL"][k] = bandit.kl(W0, W, batches[0]["states"])
        fig2["true gain"][k] = bandit.expected_reward(W) - J0
    peak = int(np.argmax(fig2["L^CLIP"]))
    return {
        "mults": mults, "kl": kl, "gain": gain, "promise": promise, "J0": J0,
        "J_opt": bandit.optimal_reward(), "n_batches": n_batches, "batch_size": len(batches[0]["states"]),
        "fig2": fig2, "alphas": alphas, "fig2_lr": float(mults[j2] * BASE["PPO-clip"]),
        "fig2_kl_at_1": float(kl[2, j2, 0]), "fig2_peak_alpha": float(alphas[peak]),
        "fig2_peak_kl": float(fig2["KL"][peak]),
        # the best true gain of each method and the KL where it happened (batch means)
        "best_gain": {m: float(gain[i].mean(axis=1).max()) for i, m in enumerate(METHODS)},
        "best_gain_kl": {m: float(kl[i].mean(axis=1)[gain[i].mean(axis=1).argmax()]) for i, m in enumerate(METHODS)},
    }


def shares(r: dict, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Per batch, the share of L^CPI's promised gain that is real for method ``i``: at the smallest and at the
    largest step."""
    frac = r["gain"][i] / r["promise"][i]                                     # (mults, batches)
    return frac[0], frac[-1]


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (noise: the spread over the batches)."""
    m, kl = r["mults"], r["kl"]
    j = int(np.argmin(np.abs(m - 1.0)))
    bound = float(np.max(kl[1] / (m[:, None] * BASE["TRPO"])))
    f2 = r["fig2"]
    peak = int(np.argmax(f2["L^CLIP"]))
    out = [measurement("trpo_in_bound", "TRPO's line search keeps every update inside its trust region: KL <= delta.",
                       bound, 1.0, "<=", "max KL / delta"),
           measurement("fig2_cpi_rises_past_peak", "Along the PPO update's direction (PPO Fig. 2), L^CPI keeps rising "
                       "past the point where L^CLIP peaks.", float(f2["L^CPI"][-1] - f2["L^CPI"][peak]), 0.0, ">",
                       "L^CPI(a = 2) - L^CPI(peak of L^CLIP)", fmt="+.4f")]
    below = []
    for i, method in enumerate(METHODS):
        small, _ = shares(r, i)
        below.append(comparison(f"share_below_1[{method}]", "below 1", compare_paired(np.ones_like(small), small),
                                expect=-1, labels=("1", f"{method} at the smallest step"), quantity="real share",
                                values=(1.0, float(small.mean())), fmt="+.2f", noise="batch"))
    out.append(all_of("promise_partly_noise", "Even at the smallest step only part of L^CPI's promised gain is real "
                      "(the rest is fitted batch noise), for every method.", below))
    for i, method in enumerate(METHODS):
        small, large = shares(r, i)
        out.append(comparison(f"overpromise_grows[{method}]", f"{method}: the batch's surrogate over-promises more as "
                              "the step grows (the real share of the promise falls).", compare_paired(small, large),
                              expect=-1, labels=("smallest step", "largest step"), quantity="real share",
                              values=(float(small.mean()), float(large.mean())), fmt="+.2f", noise="batch"))
    out.append(comparison("ppo_kl_grows", "PPO's clip alone does not bound how far one update moves: its KL grows "
                          "with the learning rate.", compare_paired(kl[2, j], kl[2, -1]), expect=+1,
                          labels=("lr x1", f"lr x{m[-1]:g}"), quantity="KL", values=(kl[2, j].mean(), kl[2, -1].mean()),
                          fmt="+.4f", noise="batch"))
    return out


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps inside arrays: each method's
    mean KL (over the batches) at the base step size (x1) and at the largest multiple, the largest
    multiple, and TRPO's largest KL over its bound delta."""
    m, kl = r["mults"], r["kl"]
    j = int(np.argmin(np.abs(m - 1.0)))
    return {"largest_mult": float(m[-1]),
            "kl_x1": {method: float(kl[i, j].mean()) for i, method in enumerate(METHODS)},
            "kl_largest": {method: float(kl[i, -1].mean()) for i, method in enumerate(METHODS)},
            "trpo_max_kl_over_delta": float(np.max(kl[1] / (m[:, None] * BASE["TRPO"])))}


def narrative(r: dict) -> str:
    m, kl = r["mults"], r["kl"]
    j = int(np.argmin(np.abs(m - 1.0)))
    V = by_key(verdicts(r))
    L = [f"Start: J(old) = {r['J0']:.3f} (optimum {r['J_opt']:.3f}); {r['n_batches']} batches of {r['batch_size']}."]
    for i, method in enumerate(METHODS):
        L.append(f"{method:>10}: {KNOB[method]} x1 -> KL {kl[i, j].mean():.4f} (batches: {kl[i, j].min():.4f} .. "
                 f"{kl[i, j].max():.4f}); x{m[-1]:g} -> KL {kl[i, -1].mean():.3f}; best true gain "
                 f"{r['best_gain'][method]:+.3f} at KL {r['best_gain_kl'][method]:.3f}; at the largest step the "
                 f"gain is {r['gain'][i, -1].mean():+.3f} while L^CPI promised {r['promise'][i, -1].mean():+.3f}.")
    bound = float(np.max(kl[1] / (m[:, None] * BASE["TRPO"])))
    L.append(f"TRPO's KL against its bound: max KL / delta = {bound:.3f}.")
    L.append(V["trpo_in_bound"].render())
    f2 = r["fig2"]
    L.append(f"Figure 2: the PPO update (lr {r['fig2_lr']:.3g}) has KL {r['fig2_kl_at_1']:.4f}; along the line "
             f"L^CLIP peaks at a = {r['fig2_peak_alpha']:.2f} (KL {r['fig2_peak_kl']:.4f}); L^CPI is "
             f"{f2['L^CPI'][-1]:.3f} at a = 2 against L^CLIP {f2['L^CLIP'][-1]:.3f}.")
    L.append(V["fig2_cpi_rises_past_peak"].render())
    L.append("Share of the promised L^CPI gain that is real, smallest -> largest step (mean over the batches; "
             "s.e. from their spread):")
    for i, method in enumerate(METHODS):
        small, large = shares(r, i)
        L.append(f"  {method:>10}: {small.mean():.2f} -> {large.mean():.2f}")
    L.append(V["promise_partly_noise"].render())
    L += [V[f"overpromise_grows[{method}]"].render() for method in METHODS]
    L.append("TRPO enforces a trust region with second-order machinery (Fisher products, conjugate gradient, "
             f"line search); PPO approximates one with a clip and plain Adam, and its KL went from "
             f"{kl[2, j].mean():.4f} at lr x1 to {kl[2, -1].mean():.3f} at x{m[-1]:g}.")
    L.append(V["ppo_kl_grows"].render())
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(2, 3, figsize=(17, 10), layout="constrained")
    colors = {"vanilla PG": "tab:red", "TRPO": "tab:green", "PPO-clip": "tab:blue"}
    m = results["mults"]
    kl, gain, promise = results["kl"], results["gain"], results["promise"]

    a = ax[0, 0]
    for i, method in enumerate(METHODS):
        a.plot(m, kl[i].mean(axis=1), "o-", color=colors[method],
               label=f"{method}: {KNOB[method]} = m x {BASE[method]:g}")
    a.plot(m, m * BASE["TRPO"], ":", color="tab:green", label="TRPO bound delta")
    a.axhline(PAPER_KL, color="gray", lw=1, ls="--", label=f"KL = {PAPER_KL} (PPO Fig. 2)")
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("step-size multiplier m")
    a.set_ylabel("exact KL(old || new) of the step")
    a.set_title(f"(a) KL of one update vs its step size\n(mean of {results['n_batches']} batches)")
    a.legend(loc="upper left", fontsize=8)

    a = ax[0, 1]
    for i, method in enumerate(METHODS):
        a.plot(kl[i].mean(axis=1), gain[i].mean(axis=1), "o-", color=colors[method], label=method)
    a.axhline(0, color="k", lw=1)
    a.set_xscale("log")
    a.set_xlabel("exact KL(old || new) of the step")
    a.set_ylabel("true gain J(new) - J(old)  (exact)")
    a.set_title(f"(b) what the step really gains\n(J(old) = {results['J0']:.3f}, best linear policy is far higher)")
    a.legend(loc="upper left", fontsize=8)

    a = ax[0, 2]
    for i, method in enumerate(METHODS):
        a.plot(kl[i].mean(axis=1), gain[i].mean(axis=1) / promise[i].mean(axis=1), "o-", color=colors[method],
               label=method)
    a.axhline(0, color="k", lw=1)
    a.axhline(1, color="k", lw=1, ls=":", label="surrogate = truth")
    a.set_xscale("log")
    a.set_xlabel("exact KL(old || new) of the step")
    a.set_ylabel("true gain / gain promised by $L^{CPI}$ on the batch")
    V = by_key(verdicts(results))
    falls = [x for x in METHODS if V[f"overpromise_grows[{x}]"].holds]
    a.set_title("(c) how much of the promise is real: "
                + ("a fraction even for tiny\nsteps (fitted to batch noise)" if V["promise_partly_noise"].holds else
                   f"at tiny steps\n{V['promise_partly_noise'].outcome}")
                + (f", falling as KL grows ({', '.join(falls)})" if falls else
                   ";\nfalling with KL: not shown for any method"))
    a.legend(loc="center right", fontsize=8)                    # the empty middle (it covered the dotted line)

    a = ax[1, 0]
    f2, al = results["fig2"], results["alphas"]
    a.plot(al, f2["L^CPI"], color="tab:orange", label=r"$L^{CPI}$ = E[r A] (unclipped)")
    a.plot(al, f2["clipped term"], color="tab:purple", label="E[clip(r, 1-eps, 1+eps) A]")
    a.plot(al, f2["L^CLIP"], color="tab:red", lw=2, label=r"$L^{CLIP}$ = E[min(r A, clip(r) A)]")
    a.plot(al, f2["KL"], color="tab:blue", label="E[KL(old || new)] (exact)")
    a.plot(al, f2["true gain"], color="k", ls="--", label="true gain J - J(old) (not in the paper)")
    a.axvline(1.0, color="k", lw=1, ls=":")
    a.axvline(results["fig2_peak_alpha"], color="tab:red", lw=1, ls="--")
    a.annotate(f"PPO update (a = 1): KL = {results['fig2_kl_at_1']:.3f}\n$L^{{CLIP}}$ peaks at a = "
               f"{results['fig2_peak_alpha']:.2f} (KL {results['fig2_peak_kl']:.3f})",
               (1.0, f2["L^CLIP"].max()), xytext=(0.03, 0.97), textcoords="axes fraction", fontsize=8, va="top")
    a.set_xlabel("linear interpolation factor a:  theta_old + a (theta_ppo - theta_old)")
    a.set_ylabel("objective value / KL")
    a.set_title(f"(d) PPO paper Fig. 2 on our problem\n(PPO: lr {results['fig2_lr']:.3g}, 10 epochs of Adam)")
    a.legend(loc="center left", bbox_to_anchor=(0.0, 0.62), fontsize=8)

    a = ax[1, 1]
    j = int(np.argmin(np.abs(m - 1.0)))
    data = [kl[i, j] for i in range(len(METHODS))]
    a.boxplot(data, tick_labels=[f"{x}\n{KNOB[x]} = {BASE[x]:g}" for x in METHODS])
    for i, d in enumerate(data):
        a.plot(np.full(len(d), i + 1) + np.linspace(-0.12, 0.12, len(d)), d, ".", color=colors[METHODS[i]])
    a.axhline(BASE["TRPO"], color="tab:green", ls=":", label="TRPO bound delta")
    a.set_yscale("log")
    a.set_ylabel("exact KL(old || new)")
    a.set_title(f"(e) one fixed step size on {results['n_batches']} batches:\nhow far does each update move?")
    a.legend(loc="lower right", fontsize=8)

    a = ax[1, 2]
    a.axis("off")
    rows = [[method, f"{kl[i, j].mean():.4f}", f"{kl[i, j].max():.4f}", f"{promise[i, j].mean():+.4f}",
             f"{gain[i, j].mean():+.4f}", f"{results['best_gain'][method]:+.3f}\n@ KL {results['best_gain_kl'][method]:.2g}"]
            for i, method in enumerate(METHODS)]
    table = a.table(cellText=rows, colLabels=["m = 1", "mean KL", "max KL", "promised", "true gain",
                                              "best true gain\n(any m)"], loc="center", cellLoc="center",
                     colWidths=[0.2, 0.14, 0.14, 0.15, 0.15, 0.22])
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.scale(1.0, 2.6)
    a.set_title("(f) the three updates at m = 1 (means over batches)")
    fig.suptitle("Lesson 03: trust regions - vanilla PG vs TRPO vs PPO-clip from the same policy and batch "
                 f"({results['batch_size']} samples, 32 contexts sharing 4 x 8 parameters)", fontsize=12)
    save(fig, path)


if __name__ == "__main__":
    main()
