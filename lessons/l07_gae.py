r"""Lesson 07 - GAE: the lambda sweep, bias and variance against the exact advantages of a chain MDP; kernel speed.

Pipeline step: rollout collection + GAE: turning per-token rewards and critic values into the advantages
$A_t$ the clipped loss multiplies and the returns $R_t = A_t + V(s_t)$ the critic fits. $\lambda = 0$ is
TD(0): low variance, biased by the critic; $\lambda = 1$ is Monte Carlo: its policy gradient is unbiased
whatever the critic (the advantage itself keeps the critic's error), high variance. Text
usually runs $\lambda = 0.95$, and the reason given is that reward-model rewards are noisy; this lesson
measures where the best $\lambda$ lies for clean and for noisy rewards.

Papers: Schulman et al. 2016 (GAE, arXiv:1506.02438): the TD residual (sec. 3)

$$
\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)
$$

and the estimator of eq. (16),

$$
\hat A_t^{GAE(\gamma, \lambda)} = \sum_{l \ge 0} (\gamma \lambda)^l\, \delta_{t+l}
$$

$\lambda = 0$ is the TD error and $\lambda = 1$ the Monte-Carlo return minus $V$ (eqs. (17)-(18)); with
$\lambda = 1$ the estimate is $\gamma$-just whatever the critic (Prop. 1: the critic only enters as a
baseline, which does not depend on the action). PPO paper (arXiv:1707.06347) eqs. (11)-(12): the same
estimator truncated at the end of the rollout.

The problem: a chain of 10 states, start in the middle, actions left/right (policy: right with probability
0.65); stepping off the right end pays +1, off the left end -1 (the episode ends); every step pays a fixed
reward per (state, action) plus Gaussian noise of std $\sigma$ (a noisy reward model). $\gamma = 1$ as in
RLHF. Each episode is one right-padded row, so `minippo.gae` runs on it exactly as on a batch of responses.
The true $V$, $Q$ and $A = Q - V$ come from linear algebra, and so does the EXACT expectation of every GAE
estimate for the critic we give it: the true $V$ plus a fixed error $e(s) \sim N(0, 0.3^2)$ (a critic that
has not converged). Bias is therefore computed exactly; variance is measured over many sampled batches.

The figure: (a) per-token advantage error against $\lambda$: the bias of $\hat A$ (exact), the bias of the
action gap $\hat A(s, \text{right}) - \hat A(s, \text{left})$ (the only part a policy gradient sees), and the
spread of $\hat A$ for two reward-noise levels; (b) the policy-gradient estimate of one batch: its relative
bias (exact) and its relative std, and their sum of squares (MSE), per noise level, the best $\lambda$ marked;
(c) the action gap per state: truth vs the expected GAE estimate at $\lambda$ = 0, 0.9, 1 (the TD end inherits
the critic's error, the Monte-Carlo end does not); (d) the GAE kernel against the NumPy reference and a
pure-Python loop.

Exercises:
1. Give the critic no error (`critic_err=0`): what happens to the bias at every lambda, and
   which lambda now has the lowest MSE?
2. Raise the reward noise to sigma = 3: where does the best lambda go? Relate it to the reason
   usually given for lambda = 0.95 in RLHF (Q16).
3. Set gamma = 0.9 (`gamma=0.9`): the chain now discounts the end reward. How does the
   effective horizon 1 / (1 - gamma lam) explain the variance curve?
4. Implement it: `minippo exercise start gae`, then `minippo exercise check gae`.

Questions: Q16, Q17, Q54.
"""
from __future__ import annotations

import numpy as np

from lessons._common import Verdict, all_of, by_key, comparison, diff_text, identity, measured, measurement, lesson_main, pyplot, save
from minippo.bench.rl import time_gae
from minippo.rl.gae import gae
from minippo.studies.sweep_stats import compare_paired

LAMS = (0.0, 0.5, 0.9, 0.95, 0.99, 1.0)
SIGMAS = (0.1, 1.0)            # reward noise: a clean reward, a noisy reward model
N_STATES, P_RIGHT, BATCH = 10, 0.65, 64


def make_chain(seed: int, critic_err: float = 0.3, gamma: float = 1.0) -> dict:
    """The chain MDP solved exactly. States 0..N-1, action 0 = left, 1 = right (deterministic moves);
    leaving the chain ends the episode (+1 on the right, -1 on the left, on top of the step reward)."""
    rng = np.random.default_rng(seed)
    N, p = N_STATES, np.full(N_STATES, P_RIGHT)
    R = rng.uniform(-0.2, 0.2, size=(N, 2))                          # mean reward of (s, a)
    R[N - 1, 1] += 1.0
    R[0, 0] -= 1.0
    nxt = np.stack([np.arange(N) - 1, np.arange(N) + 1], axis=1)    # next state of (s, a); -1 or N = terminal
    pi = np.stack([1 - p, p], axis=1)                                # (N, 2)
    P = np.zeros((N, N))                                             # P_pi[s, s'] among non-terminal states
    for s in range(N):
        for a in (0, 1):
            if 0 <= nxt[s, a] < N:
                P[s, nxt[s, a]] += pi[s, a]
    # Bellman: V = r_pi + gamma P_pi V, then Q(s, a) = R(s, a) + gamma V(s'), A = Q - V
    V = np.linalg.solve(np.eye(N) - gamma * P, (pi * R).sum(1))
    terminal = (nxt < 0) | (nxt >= N)
    A = R + gamma * np.where(terminal, 0.0, V[np.clip(nxt, 0, N - 1)]) - V[:, None]
    start = N // 2
    visits = np.linalg.solve((np.eye(N) - P).T, np.eye(N)[start])   # expected visits per episode
    V_hat = V + critic_err * rng.standard_normal(N)                  # the critic we give GAE
    return dict(N=N, p=p, pi=pi, R=R, nxt=nxt, P=P, V=V, A=A, start=start, visits=visits,
                V_hat=V_hat, gamma=gamma)


def expected_gae(m: dict, lam: float) -> np.ndarray:
    """E[A_hat_t | s_t = s, a_t = a] of GAE(gamma, lam) with the critic V_hat, exactly (N, 2).

    With dbar(s, a) = E[delta_t | s, a] = R(s, a) + gamma V_hat(s') - V_hat(s) and
    D(s) = E[sum_l (gamma lam)^l delta_{t+l} | s_t = s] = (I - gamma lam P_pi)^-1 dbar_pi:
    E[A_hat | s, a] = dbar(s, a) + gamma lam D(s'), with D = 0 after the episode ends.
    """
    N, g = m["N"], m["gamma"]
    term = (m["nxt"] < 0) | (m["nxt"] >= N)
    V_hat_next = np.where(term, 0.0, m["V_hat"][np.clip(m["nxt"], 0, N - 1)])
    dbar = m["R"] + g * V_hat_next - m["V_hat"][:, None]                             # (N, 2)
    D = np.linalg.solve(np.eye(N) - g * lam * m["P"], (m["pi"] * dbar).sum(1))      # (N,)
    D_next = np.where(term, 0.0, D[np.clip(m["nxt"], 0, N - 1)])
    return dbar + g * lam * D_next


def policy_gradient(m: dict, adv_sa: np.ndarray) -> np.ndarray:
    """sum_s visits(s) sum_a pi(a|s) grad log pi(a|s) adv(s, a) for the policy logit theta_s of 'right'
    (grad log pi = 1[a = right] - p_s): the exact gradient when adv is the true A."""
    p = m["p"]
    return m["visits"] * p * (1 - p) * (adv_sa[:, 1] - adv_sa[:, 0])


def rollout(m: dict, B: int, rng: np.random.Generator, sigma: float):
    """B episodes from the start state, as right-padded (B, T) arrays: states, actions, rewards, mask."""
    s = np.full(B, m["start"])
    alive = np.ones(B, dtype=bool)
    cols = []
    while alive.any():
        a = (rng.random(B) < m["p"][np.clip(s, 0, m["N"] - 1)]).astype(np.int64)
        r = m["R"][np.clip(s, 0, m["N"] - 1), a] + sigma * rng.standard_normal(B)
        cols.append((np.where(alive, s, 0), a, np.where(alive, r, 0.0), alive.copy()))
        s = np.where(alive, s + 2 * a - 1, s)
        alive &= (s >= 0) & (s < m["N"])
    states, actions, rewards, mask = (np.stack(c, axis=1) for c in zip(*cols))     # (B, T) each
    return states, actions, rewards, mask.astype(np.float64)


def run(quick: bool = False, seed: int = 0, critic_err: float = 0.3, gamma: float = 1.0) -> dict:
    m = make_chain(seed, critic_err=critic_err, gamma=gamma)
    N, w_sa = m["N"], m["visits"][:, None] * m["pi"] / m["visits"].sum()     # visit weights of (s, a)
    g_true = policy_gradient(m, m["A"])
    norm = np.linalg.norm(g_true)
    # exact bias of every lambda (it does not depend on the reward noise)
    exact = {lam: expected_gae(m, lam) for lam in LAMS}
    gap_true = m["A"][:, 1] - m["A"][:, 0]
    bias = {lam: {"adv": float(np.sqrt((w_sa * (e - m["A"]) ** 2).sum())),
                  "gap": float(np.sqrt((w_sa.sum(1) * ((e[:, 1] - e[:, 0]) - gap_true) ** 2).sum())),
                  "pg": float(np.linalg.norm(policy_gradient(m, e) - g_true) / norm)} for lam, e in exact.items()}
    exact_critic = dict(m, V_hat=m["V"])
    bias_exact_critic = max(float(np.abs(expected_gae(exact_critic, lam) - m["A"]).max()) for lam in LAMS)
    # variance: sample many batches; the same batches for every lambda
    n_batches = 30 if quick else 300
    var, mc_check, samples = {}, {}, {}
    for sigma in SIGMAS:
        rng = np.random.default_rng([seed, int(sigma * 1000)])
        grads = {lam: [] for lam in LAMS}
        sums = {lam: np.zeros((3, N * 2)) for lam in LAMS}                 # count, sum, sum of squares
        for _ in range(n_batches):
            states, actions, rewards, mask = rollout(m, BATCH, rng, sigma)
            valid = mask == 1
            sa = (states * 2 + actions)[valid]
            score = (actions - m["p"][states])[valid]                      # grad log pi of theta_s
            for lam in LAMS:
                adv, _ = gae(rewards, m["V_hat"][states] * mask, mask, gamma=gamma, lam=lam)
                a = adv[valid]
                grads[lam].append(np.bincount(states[valid], weights=score * a, minlength=N) / BATCH)
                sums[lam] += [np.bincount(sa, minlength=2 * N), np.bincount(sa, weights=a, minlength=2 * N),
                              np.bincount(sa, weights=a * a, minlength=2 * N)]
        var[sigma], mc_check[sigma], samples[sigma] = {}, {}, {}
        for lam in LAMS:
            G = np.array(grads[lam])                                       # (n_batches, N)
            samples[sigma][lam] = G / norm                                 # each batch's gradient, in units of |g|
            count, s1, s2 = sums[lam]
            adv_var = (s2 / np.maximum(count, 1) - (s1 / np.maximum(count, 1)) ** 2).reshape(N, 2)
            pg_std = float(np.sqrt(((G - G.mean(0)) ** 2).sum(1).mean()) / norm)
            var[sigma][lam] = {"adv_std": float(np.sqrt((w_sa * adv_var).sum())), "pg_std": pg_std,
                               "pg_mse": bias[lam]["pg"] ** 2 + pg_std ** 2}
            # Monte-Carlo mean vs the exact expectation, in standard errors of the mean
            se = G.std(0) / np.sqrt(n_batches) + 1e-12
            mc_check[sigma][lam] = float(np.abs((G.mean(0) - policy_gradient(m, exact[lam])) / se).max())
    best = {sigma: min(LAMS, key=lambda lam: var[sigma][lam]["pg_mse"]) for sigma in SIGMAS}
    timing = time_gae(B=128 if quick else 256, T=64 if quick else 128, loop_rows=8, repeat=3 if quick else 5)
    return {"model": m, "lams": LAMS, "sigmas": SIGMAS, "bias": bias, "var": var, "best_lam": best,
            "exact_gae": exact, "gap_true": gap_true, "bias_exact_critic": bias_exact_critic,
            "mc_check": mc_check, "pg_samples": samples, "pg_true": g_true / norm,
            "n_batches": n_batches, "batch": BATCH, "timing": timing,
            "critic_err": critic_err, "gamma": gamma}


EXACT = 1e-9        # a bias below this is 0 up to float64 rounding of the linear solves
MC_SE = 4.0          # the worst of 2N states within this many standard errors: the samples agree with the formula


def sq_dev(r: dict, sigma: float, lam: float) -> np.ndarray:
    """(n_batches,) each batch's squared distance |g_hat - mean g_hat|^2 (in units of |g|^2): its mean is the variance."""
    G = r["pg_samples"][sigma][lam]
    return ((G - G.mean(axis=0)) ** 2).sum(axis=1)


def sq_err(r: dict, sigma: float, lam: float) -> np.ndarray:
    """(n_batches,) each batch's squared error |g_hat - g|^2 against the true gradient: its mean is the MSE."""
    return ((r["pg_samples"][sigma][lam] - r["pg_true"]) ** 2).sum(axis=1)


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (noise: the spread over the batches)."""
    b, v = r["bias"], r["var"]
    clean, noisy = r["sigmas"]
    best = r["best_lam"]
    out = [
        identity("mc_gap_unbiased", "With lambda = 1 (Monte Carlo) the critic's error e(s) shifts both actions alike "
                 "and cancels in the gradient (GAE paper Prop. 1): the action gap is unbiased.", b[1.0]["gap"] < EXACT,
                 f"holds when the exact bias of E[GAE gap] at lambda = 1 is below {EXACT:g} (float64 rounding of the "
                 "linear solves)", {"gap bias at lambda = 1": b[1.0]["gap"], "bias of A_hat itself": b[1.0]["adv"]}),
        identity("exact_critic_unbiased", "With an exact critic every lambda gives unbiased advantages.",
                 r["bias_exact_critic"] < EXACT, f"holds when max |E[A_hat] - A| over every lambda is below {EXACT:g}",
                 {"max |E[A_hat] - A|": r["bias_exact_critic"]}),
        all_of("lam095_vs_099", "A common claim: lambda = 0.95 has lower variance and higher bias than 0.99.", [
            comparison("variance", "lower variance", compare_paired(sq_dev(r, noisy, 0.99), sq_dev(r, noisy, 0.95)),
                       expect=-1, labels=("lambda 0.99", "lambda 0.95"), quantity=f"squared deviation (sigma {noisy:g})",
                       values=(v[noisy][0.99]["pg_std"] ** 2, v[noisy][0.95]["pg_std"] ** 2), noise="batch"),
            measurement("bias", "higher bias", b[0.95]["pg"] - b[0.99]["pg"], 0.0, ">",
                        "exact pg bias(0.95) - pg bias(0.99)", fmt="+.3f")]),
    ]
    # the lowest lambda below the clean optimum at the noisy level, against the clean optimum, at the noisy level
    lower = [lam for lam in r["lams"] if lam < best[clean]]
    claim = "The noisier the reward, the lower the best lambda: with noisy rewards a lower lambda than the clean " \
            "rewards' best beats it."
    if not lower:
        out.append(measured("noisier_lower_lambda", claim, False, "no lambda is lower than the clean rewards' best",
                            {"best lambda (clean)": best[clean]}))
    else:
        low = min(lower, key=lambda lam: v[noisy][lam]["pg_mse"])
        out.append(comparison("noisier_lower_lambda", claim,
                              compare_paired(sq_err(r, noisy, low), sq_err(r, noisy, best[clean])), expect=+1,
                              labels=(f"lambda {low:g}", f"lambda {best[clean]:g} (best for sigma {clean:g})"),
                              quantity=f"squared error (sigma {noisy:g})", noise="batch",
                              values=(v[noisy][low]["pg_mse"], v[noisy][best[clean]]["pg_mse"])))
    worst = max(max(r["mc_check"][s_].values()) for s_ in r["sigmas"])
    out.append(measurement("mc_agrees", "The sampled GAE agrees with the exact expectation of the formula.", worst,
                           MC_SE, "<", "worst state's |MC mean - exact| in s.e.", fmt=".1f"))
    return out


def narrative(r: dict) -> str:
    L = []
    b, v = r["bias"], r["var"]
    V = by_key(verdicts(r))
    L.append(f"Chain MDP: {N_STATES} states, pi(right) = {P_RIGHT}, gamma = {r['gamma']:g}; true V = "
             f"{np.round(r['model']['V'], 2).tolist()}; critic error std {r['critic_err']:g}. "
             f"{r['n_batches']} batches of {r['batch']} episodes per reward-noise level.")
    L.append(f"{'lambda':>6s} | {'bias A_hat':>10s} {'bias gap':>9s} {'pg bias':>8s} | "
             + " | ".join(f"sigma={s:g}: {'std A_hat':>9s} {'pg std':>7s} {'pg MSE':>7s}" for s in r["sigmas"]))
    for lam in r["lams"]:
        L.append(f"{lam:6g} | {b[lam]['adv']:10.4f} {b[lam]['gap']:9.4f} {b[lam]['pg']:8.4f} | "
                 + " | ".join(f"{'':>8s} {v[s][lam]['adv_std']:9.3f} {v[s][lam]['pg_std']:7.3f} {v[s][lam]['pg_mse']:7.3f}"
                              for s in r["sigmas"]))
    L.append(f"lambda = 1 (Monte Carlo): the action-gap bias is {b[1.0]['gap']:.1e} (bias of A_hat itself "
             f"{b[1.0]['adv']:.3f}). lambda = 0 (TD) has gradient bias {b[0.0]['pg']:.2f}. With an exact critic, "
             f"max |E[A_hat] - A| over every lambda = {r['bias_exact_critic']:.1e}.")
    L += [V["mc_gap_unbiased"].render(), V["exact_critic_unbiased"].render()]
    clean, noisy = r["sigmas"]
    best = r["best_lam"]
    var_c = compare_paired(sq_dev(r, noisy, 0.99), sq_dev(r, noisy, 0.95))
    def runner_up(sigma):             # the lowest MSE against the next lowest, paired over the batches
        nxt = sorted((lam for lam in r["lams"] if lam != best[sigma]), key=lambda lam: v[sigma][lam]["pg_mse"])[0]
        c = compare_paired(sq_err(r, sigma, best[sigma]), sq_err(r, sigma, nxt))
        return f"next lambda = {nxt:g}: squared error per batch {diff_text(c, '+.4f', 'batch')}"

    L.append(f"Lowest gradient MSE: lambda = {best[clean]:g} with clean rewards (sigma = {clean:g}; "
             f"{runner_up(clean)}), lambda = {best[noisy]:g} with noisy ones (sigma = {noisy:g}; {runner_up(noisy)}).")
    L.append(f"lambda = 0.95 vs 0.99: std {v[noisy][0.95]['pg_std']:.2f} vs {v[noisy][0.99]['pg_std']:.2f}; squared "
             f"deviation per batch, 0.95 minus 0.99, paired over the {r['n_batches']} batches: "
             f"{diff_text(var_c, '+.3f', 'batch')}; bias {b[0.95]['pg']:.3f} vs {b[0.99]['pg']:.3f}.")
    L += [V["lam095_vs_099"].render(), V["noisier_lower_lambda"].render()]
    worst = {s_: max(r["mc_check"][s_].values()) for s_ in r["sigmas"]}
    L.append("Monte-Carlo means vs exact expectations (worst state, in standard errors): "
             + ", ".join(f"sigma={s_:g}: {w:.1f}" for s_, w in worst.items()) + ".")
    L.append(V["mc_agrees"].render())
    t = r["timing"]
    L.append(f"GAE on a {t['shape']} float32 batch: kernel {t['kernel'] * 1e3:.3f} ms, NumPy reference "
             f"{t['numpy'] * 1e3:.2f} ms ({t['numpy'] / t['kernel']:.0f}x), pure Python {t['python'] * 1e3:.1f} ms "
             f"({t['python'] / t['kernel']:.0f}x; {t['loop_rows']} rows timed and scaled). `minippo bench --only gae` "
             f"measures the (512, 256) case.")
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    lams, sigmas = results["lams"], results["sigmas"]
    x = np.arange(len(lams))
    labels = [f"{lam:g}" for lam in lams]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5), gridspec_kw={"hspace": 0.35, "wspace": 0.25})
    b, v = results["bias"], results["var"]
    colors = {sigmas[0]: "tab:blue", sigmas[1]: "tab:red"}

    ax = axes[0, 0]
    ax.plot(x, [b[lam]["adv"] for lam in lams], "k-o", label="bias of A_hat (exact, RMS over tokens)")
    floor = 1e-3                                  # the lambda = 1 gap bias is exactly 0 (rounding: ~1e-16)
    gap = [b[lam]["gap"] for lam in lams]
    ax.plot(x, np.maximum(gap, floor), "k--s", label="bias of the action gap (what the gradient sees)")
    if gap[-1] < floor:
        ax.annotate(f"exactly 0\n({gap[-1]:.0e})", (x[-1], floor), textcoords="offset points", xytext=(-8, 12),
                    ha="center", fontsize=8)
    for sigma in sigmas:
        ax.plot(x, [v[sigma][lam]["adv_std"] for lam in lams], "-^", color=colors[sigma],
                label=f"std of A_hat, reward noise sigma = {sigma:g}")
    ax.set_yscale("log")
    ax.set_xticks(x, labels)
    ax.set_xlabel("GAE lambda  (0 = TD(0) ... 1 = Monte Carlo)")
    ax.set_ylabel("per-token error (log scale)")
    ax.set_ylim(floor / 2, 20)
    falls = b[lams[-1]]["gap"] < b[lams[0]]["gap"]
    rises = all(v[s][lams[-1]]["adv_std"] > v[s][lams[0]]["adv_std"] for s in sigmas)
    ax.set_title("(a) per-token advantages: the gap's bias " + ("falls" if falls else "does not fall")
                 + ", the spread " + ("rises" if rises else "does not rise") + " with lambda")
    ax.legend(fontsize=8, loc="lower left")

    ax = axes[0, 1]
    ax.plot(x, [b[lam]["pg"] for lam in lams], "k-o", label="relative bias (exact, any sigma)")
    for sigma in sigmas:
        ax.plot(x, [v[sigma][lam]["pg_std"] for lam in lams], ":^", color=colors[sigma],
                label=f"relative std, sigma = {sigma:g}")
        mse = [v[sigma][lam]["pg_mse"] for lam in lams]
        ax.plot(x, mse, "-", lw=2, color=colors[sigma], label=f"bias^2 + std^2, sigma = {sigma:g}")
        i = lams.index(results["best_lam"][sigma])
        ax.plot([x[i]], [mse[i]], "*", ms=16, color=colors[sigma], mec="k")
    ax.set_xticks(x, labels)
    ax.set_xlabel("GAE lambda")
    ax.set_ylabel("relative to |true gradient|")
    ax.set_title(f"(b) policy gradient of one batch of {results['batch']} episodes (star: lowest MSE)")
    ax.legend(fontsize=8, loc="upper left")

    ax = axes[1, 0]
    states = np.arange(len(results["gap_true"]))
    ax.bar(states, results["gap_true"], color="0.8", label="true A(s, right) - A(s, left)")
    for lam, style in ((0.0, "o-"), (0.9, "s-"), (1.0, "^-")):
        e = results["exact_gae"][lam]
        ax.plot(states, e[:, 1] - e[:, 0], style, label=f"E[GAE gap], lambda = {lam:g}")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xticks(states)
    ax.set_xlabel("state of the chain (start = 5; leaving left: -1, right: +1)")
    ax.set_ylabel("advantage of 'right' over 'left'")
    worse = results["bias"][0.0]["gap"] > results["bias"][1.0]["gap"]
    ax.set_title("(c) action gap per state" + (": lambda = 0 inherits the critic's error" if worse else ""))
    ax.legend(fontsize=8)

    ax = axes[1, 1]
    t = results["timing"]
    names = ["numba kernel", "NumPy reference\n(loop over T)", "pure Python\n(double loop)"]
    secs = [t["kernel"], t["numpy"], t["python"]]
    bars = ax.bar(names, [s * 1e3 for s in secs], color=["tab:green", "tab:blue", "tab:gray"])
    ax.set_yscale("log")
    for bar, s in zip(bars, secs):
        ax.annotate(f"{s * 1e3:.2f} ms" + (f"\n({s / secs[0]:.0f}x the kernel)" if s is not secs[0] else ""), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylim(top=max(secs) * 1e3 * 8)
    ax.set_ylabel("time per call (ms, log scale)")
    ax.set_title(f"(d) gae, (B, T) = {t['shape']}, float32 (Python: {t['loop_rows']} rows, scaled)")
    fig.suptitle(f"GAE on a 10-state chain, gamma = {results['gamma']:g}; critic = true V + N(0, "
                 f"{results['critic_err']:g}^2); {results['n_batches']} batches per noise level", fontsize=12)
    save(fig, path)


if __name__ == "__main__":
    main()
