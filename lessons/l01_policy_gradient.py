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

from lessons._common import clear_sign, diff_text, lesson_main, pyplot, save
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
    variance, bias = {}, {}
    for name in BASELINES:
        G = np.array([estimate(bandit, W0, batch_size, np.random.default_rng([seed, i]), name).ravel()
                      for i in range(n_estimates)])                                 # (n_estimates, V)
        variance[name] = float(np.mean(np.sum((G - g_true) ** 2, axis=1)))         # E||g_hat - g||^2
        # ||mean(g_hat) - g|| in units of its standard error sqrt(variance / n): ~1 when unbiased
        bias[name] = float(np.linalg.norm(G.mean(axis=0) - g_true) / np.sqrt(variance[name] / n_estimates))

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
        "variance": variance, "bias": bias,
        "variance_ratio": variance["none"] / variance[BASELINES[1]],
        "curves": curves,
        "final_reward": {k: float(v[:, -1].mean()) for k, v in curves.items()},
        "big_lrs": big_lrs, "entropy_after": entropy_after, "p_best_after": p_best_after,
        "reward_after": reward_after, "recovery": recovery,
        # a run is "stuck" if it ends more than 0.1 below the optimum (the 2nd best token is 0.2 below)
        "stuck_fraction": (final < bandit.optimal_reward() - 0.1).mean(axis=1),
    }


BIAS_SE = 3.0      # |mean(g_hat) - g| in standard errors above which a baseline counts as biased (see narrative)


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
    d = derived(r)
    v, steps = r["variance"], d["steps"]
    L = [f"A token bandit: 10 tokens, rewards {np.round(r['rewards'], 1).tolist()}, best token "
         f"{r['best_token']} (reward {r['optimal_reward']:.1f}); the uniform policy earns {r['initial_reward']:.2f}."]
    # the bias is the norm of a 10-vector in units of sqrt(E||g_hat - g||^2 / n): about 1 when unbiased, and
    # rarely above 3 (a chi-like variable with mean square 1)
    biased = [k for k in v if r["bias"][k] > BIAS_SE]
    L.append(f"(a) variance of g_hat over {r['n_estimates']} batches of {r['batch_size']}: "
             + ", ".join(f"{k}: {v[k]:.4f}" for k in v)
             + f". The batch-mean baseline divides it by {r['variance_ratio']:.1f}. |mean - true gradient| = "
             + ", ".join(f"{r['bias'][k]:.1f}" for k in v) + " standard errors (sampling noise alone gives ~1): "
             + (f"all three consistent with no bias (each within {BIAS_SE:g} standard errors)." if not biased else
                f"BIASED beyond {BIAS_SE:g} standard errors: {', '.join(biased)}."))
    c = compare_paired(r["curves"][BASELINES[0]][:, -1], r["curves"][BASELINES[1]][:, -1])
    L.append(f"(b) after {steps} steps: " + ", ".join(f"{k}: J = {x:.3f}" for k, x in r["final_reward"].items())
             + f" (optimum {r['optimal_reward']:.2f}); the baseline's gain over none, paired over the "
             f"{r['n_seeds']} seeds: {diff_text(c, noise='seed')}.")
    for s in d["one_step"]:
        L.append(f"(c,d) one step with lr = {s['lr']:6.1f}: entropy {s['entropy_median']:.2f} nats "
                 f"(uniform {r['max_entropy']:.2f}), p(best) {s['p_best_mean']:.3f}, "
                 f"J {s['reward_mean']:.3f}; after {steps} more steps "
                 f"{s['stuck']:.0%} of seeds are stuck below the optimum.")
    big = d["largest_step"]["lr"]
    jump = compare_paired(np.full(r["n_seeds"], r["initial_reward"]), r["reward_after"][-1])
    ent, p_best = d["largest_step"]["entropy_median"], d["largest_step"]["p_best_mean"]
    stuck, stuck0 = d["largest_step"]["stuck"], d["smallest_step"]["stuck"]
    moved = {1: "higher beyond 2 s.e. of the seed noise (the batch's favourite is usually a decent token)",
             -1: "lower beyond 2 s.e. of the seed noise", 0: "no different within 2 s.e. of the seed noise"}
    L.append(f"The largest step (lr {big:g}): right after it J is {moved[clear_sign(jump)]} ({jump['diff']:+.3f} +- "
             f"{jump['se']:.3f} vs the uniform policy); the policy is "
             + (f"almost deterministic (median entropy {ent:.2f} nats)" if ent < 0.1 else
                f"not deterministic (median entropy {ent:.2f} nats)")
             + (f", on a token that merely looked good in one noisy batch (p(best) {p_best:.2f})" if p_best < 0.5 else
                f", mostly on the best token (p(best) {p_best:.2f})") + ".")
    L.append(f"After it, plain REINFORCE {'does not recover' if stuck >= 0.5 and stuck > stuck0 else 'recovers'}: "
             f"{stuck:.0%} of seeds stuck vs {stuck0:.0%} after the smallest step"
             + (" (the collapsed policy samples only its own token, whose gradient 1 - p vanishes). Lessons 03-04 "
                "bound the step." if stuck >= 0.5 and stuck > stuck0 else "."))
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
    a.set_title("(c) one large step collapses the policy onto a token")
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
    a.set_title("(d) after the collapse: no recovery")
    a.legend(loc="lower right", fontsize=8)
    fig.suptitle("Lesson 01: REINFORCE on a 10-token bandit (PPO paper eqs. (1)-(2))", fontsize=12)
    save(fig, path)


if __name__ == "__main__":
    main()
