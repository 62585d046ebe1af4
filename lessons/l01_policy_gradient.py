r"""Lesson 01 - policy gradient: REINFORCE on a token bandit, the baseline, and why one large step collapses the policy.

Legend: V vocab (10 tokens), N samples per batch; W (1, V) are the logits of the single context.

Pipeline step: the first link of the course's chain, policy gradient -> importance ratio -> trust region ->
clipped objective -> actor-critic loss -> GAE -> the PPO loop -> RLHF: how a policy learns from its own
samples. A plain policy gradient can wreck the policy with one update that is too large, and a baseline
lowers the variance of its estimate.

Paper: the policy gradient theorem (Williams 1992, REINFORCE) as written in the PPO paper (Schulman et al.
2017, arXiv:1707.06347), the estimator of eq. (1) and the loss of eq. (2):

$$
\hat g = \hat{\mathbb{E}}_t\left[\nabla_\theta \log \pi_\theta(a_t \mid s_t)\, \hat A_t\right]
$$

$$
L^{PG}(\theta) = \hat{\mathbb{E}}_t\left[\log \pi_\theta(a_t \mid s_t)\, \hat A_t\right]
$$

Here $\hat A_t = R_t - b$: the reward minus a baseline $b$ that does not depend on the action (none, the
mean reward of the OTHER samples of the batch, or the exact value $V(s) = \mathbb{E}_\pi[R]$). The task is a
token bandit (`minippo.toy.bandit`): one context, V = 10 tokens, rewards 1.0 ... 2.0 (all positive, like an
un-centred reward model score) observed with noise; the policy is a softmax over 10 logits, the gradient is
exact (no autograd).

The figure shows (a) the variance of $\hat g$ over many independent batches with each baseline (all three
are unbiased: the bias printed is sampling noise); (b) learning curves of the expected reward with and
without a baseline; (c) the entropy of the policy after ONE step of REINFORCE as the learning rate grows: a
large step puts almost all the mass on whichever token happened to look best in the batch; (d) what happens
next: starting from that collapsed policy, plain REINFORCE with a normal learning rate can no longer recover
(the collapsed policy only samples its own token, whose score-function gradient $1 - p$ is ~0), so the
expected reward stays low.

Exercises:
1. Shift every reward by -1.5 (centred rewards). How do the variance without a baseline and the
   collapse in (c) change? Why does a baseline matter less for centred rewards?
2. The batch-mean baseline uses the OTHER samples (leave-one-out). Use the plain batch mean,
   including the sample itself: measure the bias of $\hat g$ and explain it (hint: b then depends on a).
3. In (d), give the recovering run an entropy bonus (lesson 06) or a smaller first step bound
   (lessons 03-04): which fraction of seeds escapes the collapsed token?

Questions: Q1, Q2.
"""
from __future__ import annotations

import numpy as np

from lessons._common import Verdict, all_of, by_key, comparison, identity, lesson_main, measurement, pyplot, save
from minippo.studies.sweep_stats import compare_paired
from minippo.toy.bandit import TokenBandit, reinforce_gradient

BASELINES = ("none", "batch mean (leave-one-out)", "exact V(s)")


def make_bandit(rng: np.random.Generator) -> TokenBandit:
    """One context, 10 tokens with rewards 1.0, 1.1, ..., 1.8, 2.0 in a random order; noise 0.5."""
    rewards = np.array([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 2.0])[rng.permutation(10)]
    return TokenBandit(rewards[None, :], noise_std=0.5)


def estimate(bandit, W, batch_size, rng, baseline):
    """One REINFORCE estimate g_hat (eq. (1)) from a fresh batch, with the chosen baseline."""
    states, actions, rewards = bandit.sample(W, batch_size, rng)
    if baseline == "none":
        b = None
    elif baseline == "exact V(s)":
        b = bandit.state_values(W)[states]
    else:                                              # mean reward of the other samples
        b = (rewards.sum() - rewards) / (len(rewards) - 1)
    return reinforce_gradient(bandit, W, states, actions, rewards, b)


def train(bandit, W, steps, lr, batch_size, rng, baseline):
    """Plain REINFORCE, W <- W + lr g_hat; returns the expected reward after each step."""
    W = W.copy()
    curve = np.empty(steps)
    for t in range(steps):
        W += lr * estimate(bandit, W, batch_size, rng, baseline)
        curve[t] = bandit.expected_reward(W)
    return W, curve


def run(quick: bool = False, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    bandit = make_bandit(rng)
    best = int(bandit.rewards[0].argmax())
    W0 = bandit.init_params()                                     # uniform policy
    batch_size, lr = 8, 1.0
    n_estimates = 400 if quick else 3000
    n_seeds = 8 if quick else 30
    steps = 60 if quick else 150
    seeds = rng.integers(0, 2**31, size=n_seeds)

    # (a) variance and bias of g_hat at the uniform policy, per baseline
    g_true = bandit.expected_reward_grad(W0).ravel()
    variance, bias, sq_err = {}, {}, {}
    for name in BASELINES:
        G = np.array([estimate(bandit, W0, batch_size, np.random.default_rng([seed, i]), name).ravel()
                      for i in range(n_estimates)])                                 # (n_estimates, V)
        sq_err[name] = np.sum((G - g_true) ** 2, axis=1)                            # same batches for each
        variance[name] = float(np.mean(sq_err[name]))                               # E||g_hat - g||^2
        # ||mean(g_hat) - g|| in units of its standard error sqrt(variance / n): ~1 when unbiased
        bias[name] = float(np.linalg.norm(G.mean(axis=0) - g_true) / np.sqrt(variance[name] / n_estimates))

    # the identity behind "a baseline adds no bias": E_a[grad log pi(a)] = sum_a pi(a) grad log pi(a) = 0, so
    # E[grad log pi(a) b] = 0 for any b that does not depend on a; exact sums at W0 and at a random policy
    score_mean = 0.0
    for W in (W0, rng.standard_normal(W0.shape)):
        p = bandit.probs(W)[0]
        scores = [reinforce_gradient(bandit, W, np.array([0]), np.array([a]), np.array([1.0])).ravel()
                  for a in range(bandit.vocab)]                                     # grad log pi(a), each a
        score_mean = max(score_mean, float(np.abs(np.einsum("a,av->v", p, np.array(scores))).max()))

    # (b) learning curves with and without a baseline (same seeds for both)
    curves = {name: np.array([train(bandit, W0, steps, lr, batch_size, np.random.default_rng(s), name)[1]
                              for s in seeds]) for name in BASELINES[:2]}

    # (c) one step with a growing learning rate, (d) then normal REINFORCE from there
    big_lrs = np.array([0.3, 1.0, 3.0, 10.0, 30.0, 100.0])
    entropy_after = np.empty((len(big_lrs), n_seeds))
    p_best_after = np.empty((len(big_lrs), n_seeds))
    reward_after = np.empty((len(big_lrs), n_seeds))
    recovery = {}
    for i, big in enumerate(big_lrs):
        runs = []
        for j, s in enumerate(seeds):
            g = np.random.default_rng(s)
            W1 = W0 + big * estimate(bandit, W0, batch_size, g, BASELINES[1])
            entropy_after[i, j] = bandit.mean_entropy(W1)
            p_best_after[i, j] = bandit.probs(W1)[0, best]
            reward_after[i, j] = bandit.expected_reward(W1)
            runs.append(train(bandit, W1, steps, lr, batch_size, g, BASELINES[1])[1])
        recovery[float(big)] = np.array(runs)                                        # (n_seeds, steps)
    final = np.array([recovery[float(b)][:, -1] for b in big_lrs])                  # (n_lrs, n_seeds)
    return {
        "rewards": bandit.rewards[0], "best_token": best, "optimal_reward": bandit.optimal_reward(),
        "initial_reward": bandit.expected_reward(W0), "max_entropy": float(np.log(bandit.vocab)),
        "batch_size": batch_size, "lr": lr, "n_estimates": n_estimates, "n_seeds": n_seeds,
        "variance": variance, "bias": bias, "sq_err": sq_err, "score_mean": score_mean,
        "variance_ratio": variance["none"] / variance[BASELINES[1]],
        "curves": curves,
        "final_reward": {k: float(v[:, -1].mean()) for k, v in curves.items()},
        "big_lrs": big_lrs, "entropy_after": entropy_after, "p_best_after": p_best_after,
        "reward_after": reward_after, "recovery": recovery,
        # a run is "stuck" if it ends more than 0.1 below the optimum (the 2nd best token is 0.2 below)
        "stuck_fraction": (final < bandit.optimal_reward() - 0.1).mean(axis=1),
    }


BIAS_SE = 3.0      # |mean(g_hat) - g| in standard errors above which a baseline counts as biased (see narrative)
SCORE_TOL = 1e-12  # |sum_a pi(a) grad log pi(a)|: 0 up to float64 rounding of ten terms of size <= 1


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r``."""
    steps, n = r["curves"][BASELINES[0]].shape[1], r["n_seeds"]
    big, small = r["big_lrs"][-1], r["big_lrs"][0]
    stuck = {float(x): r["recovery"][float(x)][:, -1] < r["optimal_reward"] - 0.1 for x in (small, big)}
    ent, p_best = float(np.median(r["entropy_after"][-1])), float(r["p_best_after"][-1].mean())
    worst = max(r["bias"].values())
    return [
        identity("baseline_unbiased", "A baseline that does not depend on the action adds no bias to the "
                 "policy gradient: E[grad log pi(a)] = 0.", r["score_mean"] <= SCORE_TOL,
                 f"holds when max |sum_a pi(a) grad log pi(a)| <= {SCORE_TOL:g} (exact sums over the 10 tokens at "
                 "the uniform and at a random policy)", {"max |E grad log pi|": r["score_mean"]}),
        measurement("bias_measured", f"Measured on {r['n_estimates']} batches, every baseline's mean gradient is "
                    f"within {BIAS_SE:g} standard errors of the true gradient.", worst, BIAS_SE, "<=",
                    "largest |mean - true| in s.e.", numbers={k: b for k, b in r["bias"].items()},
                    because=", ".join(f"{k}: {b:.1f}" for k, b in r["bias"].items())
                    + " s.e. (sampling noise alone gives ~1, a chi-like variable rarely above 3)"),
        comparison("variance_cut", "A baseline lowers the variance of the REINFORCE gradient.",
                   compare_paired(r["sq_err"][BASELINES[0]], r["sq_err"][BASELINES[1]]), expect=-1,
                   labels=("no baseline", "batch-mean baseline"), quantity="||g_hat - g||^2", noise="batch",
                   values=(r["variance"][BASELINES[0]], r["variance"][BASELINES[1]]), fmt="+.4f",
                   numbers={"variance ratio": r["variance_ratio"]}),
        comparison("baseline_learns_faster", f"With the batch-mean baseline REINFORCE ends higher after {steps} steps.",
                   compare_paired(r["curves"][BASELINES[0]][:, -1], r["curves"][BASELINES[1]][:, -1]), expect=+1,
                   labels=("no baseline", "batch-mean baseline"), quantity="J",
                   values=tuple(r["final_reward"][k] for k in BASELINES[:2])),
        measurement("big_step_collapses", f"One step with lr {big:g} collapses the policy onto one token.", ent, 0.1,
                    "<", "median entropy after the step (nats)",
                    because=f"median entropy {ent:.2f} nats (uniform {r['max_entropy']:.2f}); the token it lands on "
                    + (f"merely looked good in one noisy batch (mean p(best) {p_best:.2f})" if p_best < 0.5 else
                       f"is mostly the best (mean p(best) {p_best:.2f})")),
        comparison("big_step_jump", f"Right after the step with lr {big:g}, J is higher than the uniform policy's "
                   "(the batch's favourite is usually a decent token).",
                   compare_paired(np.full(n, r["initial_reward"]), r["reward_after"][-1]), expect=+1,
                   labels=("uniform policy", f"after lr {big:g}"), quantity="J",
                   values=(r["initial_reward"], float(r["reward_after"][-1].mean()))),
        all_of("no_recovery", f"After the step with lr {big:g}, plain REINFORCE does not recover: at least half of "
               f"the seeds stay stuck below the optimum, more than after the step with lr {small:g}.", [
                   measurement("stuck_half", "half stuck", float(stuck[big].mean()), 0.5, ">=",
                               f"stuck fraction after lr {big:g}"),
                   comparison("stuck_more", "more stuck", compare_paired(stuck[small].astype(float),
                                                                          stuck[big].astype(float)),
                              expect=+1, labels=(f"lr {small:g}", f"lr {big:g}"), quantity="stuck fraction",
                              values=(float(stuck[small].mean()), float(stuck[big].mean())), fmt="+.2f")]),
    ]


def derived(r: dict) -> dict:
    """The numbers of (c, d) per first-step learning rate (median entropy right after the step, mean p(best)
    and J, share of seeds stuck after the recovery), the smallest and the largest step by name, and the
    number of recovery steps: what the narrative prints and docs/questions.md quotes."""
    one_step = [{"lr": float(lr), "entropy_median": float(np.median(r["entropy_after"][i])),
                 "p_best_mean": float(r["p_best_after"][i].mean()),
                 "reward_mean": float(r["reward_after"][i].mean()), "stuck": float(r["stuck_fraction"][i])}
                for i, lr in enumerate(r["big_lrs"])]
    return {"steps": int(r["curves"][BASELINES[0]].shape[1]), "one_step": one_step,
            "smallest_step": one_step[0], "largest_step": one_step[-1]}


def narrative(r: dict) -> str:
    v, steps = r["variance"], r["curves"][BASELINES[0]].shape[1]
    V = by_key(verdicts(r))
    L = [f"A token bandit: 10 tokens, rewards {np.round(r['rewards'], 1).tolist()}, best token "
         f"{r['best_token']} (reward {r['optimal_reward']:.1f}); the uniform policy earns {r['initial_reward']:.2f}."]
    L.append(f"(a) variance of g_hat over {r['n_estimates']} batches of {r['batch_size']}: "
             + ", ".join(f"{k}: {v[k]:.4f}" for k in v)
             + f". The batch-mean baseline divides it by {r['variance_ratio']:.1f}. |mean - true gradient| = "
             + ", ".join(f"{r['bias'][k]:.1f}" for k in v) + " standard errors (sampling noise alone gives ~1).")
    L += [V[k].render() for k in ("baseline_unbiased", "bias_measured", "variance_cut")]
    L.append(f"(b) after {steps} steps: " + ", ".join(f"{k}: J = {x:.3f}" for k, x in r["final_reward"].items())
             + f" (optimum {r['optimal_reward']:.2f}).")
    L.append(V["baseline_learns_faster"].render())
    for i, big in enumerate(r["big_lrs"]):
        L.append(f"(c,d) one step with lr = {big:6.1f}: entropy {np.median(r['entropy_after'][i]):.2f} nats "
                 f"(uniform {r['max_entropy']:.2f}), p(best) {r['p_best_after'][i].mean():.3f}, "
                 f"J {r['reward_after'][i].mean():.3f}; after {steps} more steps "
                 f"{r['stuck_fraction'][i]:.0%} of seeds are stuck below the optimum.")
    L += [V[k].render() for k in ("big_step_collapses", "big_step_jump", "no_recovery")]
    if V["no_recovery"].holds:
        L.append("(the collapsed policy samples only its own token, whose gradient 1 - p vanishes; lessons 03-04 "
                 "bound the step.)")
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(2, 2, figsize=(11, 8.5), layout="constrained")
    colors = {BASELINES[0]: "tab:red", BASELINES[1]: "tab:blue", BASELINES[2]: "tab:green"}

    a = ax[0, 0]
    names = list(results["variance"])
    vals = [results["variance"][n] for n in names]
    bars = a.bar(range(len(names)), vals, color=[colors[n] for n in names])
    a.set_yscale("log")
    a.set_xticks(range(len(names)), ["no baseline", "batch mean\n(leave-one-out)", "exact V(s)"])
    for bar, n in zip(bars, names):
        a.annotate(f"{results['variance'][n]:.3f}\n(bias {results['bias'][n]:.1f} s.e.)",
                   (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    a.set_ylim(top=max(vals) * 4)
    a.set_ylabel(r"$E\,\|\hat g - \nabla J\|^2$ (log scale)")
    a.set_title(f"(a) variance of the REINFORCE gradient ({results['n_estimates']} batches\n"
                f"of {results['batch_size']}, uniform policy); bias in standard errors: ~1 = none")

    a = ax[0, 1]
    for name, c in results["curves"].items():
        m, s = c.mean(axis=0), c.std(axis=0)
        x = np.arange(1, len(m) + 1)
        a.plot(x, m, color=colors[name], label=f"{name}: final {m[-1]:.3f}")
        a.fill_between(x, m - s, m + s, color=colors[name], alpha=0.2)
    a.axhline(results["optimal_reward"], color="k", ls="--", lw=1, label="optimum (best token)")
    a.set_xlabel("REINFORCE step")
    a.set_ylabel("expected reward J")
    a.set_title(f"(b) learning curves, lr = {results['lr']}, mean $\\pm$ std of {results['n_seeds']} seeds")
    a.legend(loc="lower right")

    a = ax[1, 0]
    lrs = results["big_lrs"]
    ent = results["entropy_after"]
    a.plot(lrs, np.median(ent, axis=1), "o-", color="tab:purple", label="entropy after the step (median)")
    a.fill_between(lrs, np.percentile(ent, 25, axis=1), np.percentile(ent, 75, axis=1),
                   color="tab:purple", alpha=0.2, label="25-75% of seeds")
    a.plot(lrs, results["p_best_after"].mean(axis=1), "s-", color="tab:orange", label="p(best token) after (mean)")
    a.axhline(results["max_entropy"], color="k", ls=":", lw=1, label="uniform policy entropy = ln 10")
    a.set_xscale("log")
    a.set_xlabel("learning rate of ONE REINFORCE step (batch of 8, with baseline)")
    a.set_ylabel("nats / probability")
    V = by_key(verdicts(results))
    a.set_title("(c) one large step collapses the policy onto a token" if V["big_step_collapses"].holds else
                f"(c) one large step: median entropy {np.median(ent[-1]):.2f} nats at lr {lrs[-1]:g}")
    a.legend(loc="center left", fontsize=8)

    a = ax[1, 1]
    cmap = plt.get_cmap("viridis")
    for k, big in enumerate(lrs):
        c = results["recovery"][float(big)]
        a.plot(np.arange(1, c.shape[1] + 1), c.mean(axis=0), color=cmap(0.85 * k / (len(lrs) - 1)),
               label=f"first step lr={big:g}: {results['stuck_fraction'][k]:.0%} stuck")
    a.axhline(results["optimal_reward"], color="k", ls="--", lw=1)
    a.set_xlabel(f"REINFORCE step after the first one (lr = {results['lr']})")
    a.set_ylabel("expected reward J (mean over seeds)")
    a.set_title("(d) after the collapse: no recovery" if V["no_recovery"].holds else
                f"(d) after the large step: no recovery {V['no_recovery'].outcome}")
    a.legend(loc="lower right", fontsize=8)
    fig.suptitle("Lesson 01: REINFORCE on a 10-token bandit (PPO paper eqs. (1)-(2))", fontsize=12)
    save(fig, path)


if __name__ == "__main__":
    main()
