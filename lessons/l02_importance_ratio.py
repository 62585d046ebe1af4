r"""Lesson 02 - importance ratio: r = exp(logp_new - logp_old), underflow of probability products, the four (A, r) quadrants.

Legend: T tokens of a sequence, V vocab, S contexts, N samples; W (D, V) policy parameters.

Pipeline step: PPO trains the NEW policy on samples of the OLD one, and the importance ratio
$r_t = \pi_\theta(a_t \mid s_t) / \pi_{\theta_{old}}(a_t \mid s_t)$ corrects for that. In code it is
`exp(logp_new - logp_old)`, never a quotient of probabilities: those underflow. With $A_t > 0$ or $< 0$ and
$r_t > 1$ or $< 1$ it pushes four ways, and without a constraint a few steps on one batch send the ratio
past 5 and 10: the reason PPO clips it (lesson 04).

Paper: the surrogate of conservative policy iteration, PPO paper (Schulman et al. 2017, arXiv:1707.06347)
eq. (6):

$$
L^{CPI}(\theta) = \hat{\mathbb{E}}_t\left[\frac{\pi_\theta(a_t \mid s_t)}{\pi_{\theta_{old}}(a_t \mid s_t)}\, \hat A_t\right]
= \hat{\mathbb{E}}_t\left[r_t(\theta)\, \hat A_t\right]
$$

and its gradient $\partial (r_t A_t) / \partial \log \pi_\theta(a_t \mid s_t) = r_t A_t$ (because
$\partial r / \partial \log \pi = r$). The same ratio gives the importance-sampling estimate of the new
policy's expected reward from the old samples, $J(\text{new}) \approx \frac{1}{N} \sum_i r_i R_i$ with
$a_i \sim \pi_{old}$; its variance grows like $\mathbb{E}_{old}[r^2] = \exp(D_2(\text{new} \,\|\, \text{old}))$
(a Renyi divergence), i.e. exponentially in how far the policies are apart.

The figure shows (a) the probability of a sampled sequence computed as a product of per-token
probabilities in float32 and float64 against its exact value from summed log-probabilities: the products hit
0 after a few dozen (float32) or a few hundred (float64) tokens; (b) the sequence ratio from those products
becomes nan (0/0) there, while exp(sum(logp_new - logp_old)) stays finite; (c) the four (A, r) quadrants: the
per-token gradient $r A$ of the unclipped surrogate; (d) maximising $L^{CPI}$ on one batch for many steps (a
policy whose contexts share parameters, like a network): the largest ratio runs past 5 and 10 and the gain
$L^{CPI}$ promises grows while the true expected reward does not follow (the clipped $L^{CLIP}$ of lesson 04
for comparison); (e) the importance-sampling estimate of J(new) from 64 old samples: its standard deviation
(exact and measured) against the exact KL(old || new); (f) the same estimates against the truth: their mean
is right (the estimator is unbiased) but the typical (median) batch misses the rarely sampled token that the
new policy favours and is far off.

Exercises:
1. Compute the product of probabilities in float64 but in the log domain's "safe" form
   exp(sum(log p)) - does it underflow? What is the largest T a float64 product survives for
   tokens of probability 1/V, as a formula in V?
2. Quadrant A > 0, r < 1: the update is "weakened" (Q5). By how much, for r = 0.5?
   Where does the same factor appear in (d)?
3. In (e), find the KL at which the estimate's standard deviation equals the gap between the
   best and the worst policy of the family. What does this say about how many epochs PPO may
   reuse a batch? Compute the effective sample size (sum r)^2 / sum r^2 per batch: why is it
   high exactly in the batches that miss the rare token?

Questions: Q3, Q5, Q6, Q20.
"""
from __future__ import annotations

import numpy as np

from lessons._common import Verdict, by_key, identity, measured, measurement, lesson_main, pyplot, save
from minippo.nn.optim import AdamW
from minippo.toy.bandit import TokenBandit
from minippo.rl.losses import clipped_policy_loss, log_softmax
from minippo.rl.masked import masked_whiten
from minippo.toy.trust_region import cpi_loss


def sequence_underflow(T: int, vocab: int, rng: np.random.Generator) -> dict:
    """Sample one T-token sequence from an old per-position policy; compare products and log sums."""
    bandit = TokenBandit(np.zeros((T, vocab)))                 # T positions = T contexts (tabular)
    W_old = bandit.init_params(rng, 1.5)                       # (T, V) logits of the old policy
    W_new = W_old + 0.1 * rng.standard_normal(W_old.shape)     # a nearby new policy
    positions = np.arange(T)
    tokens = bandit.sample_actions(W_old, positions, rng)      # (T,) a_t ~ pi_old(.|t)
    logp_old, _ = bandit.logp(W_old, positions, tokens)        # (T,)
    logp_new, _ = bandit.logp(W_new, positions, tokens)
    out = {"T": np.arange(1, T + 1), "log10_prob": np.cumsum(logp_old) / np.log(10),
           "log_ratio": np.cumsum(logp_new - logp_old)}
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        for dt in (np.float32, np.float64):
            name = np.dtype(dt).name
            p_old = np.cumprod(np.exp(logp_old).astype(dt))    # prod_t p_old(a_t), in dtype
            p_new = np.cumprod(np.exp(logp_new).astype(dt))
            out[f"prod_{name}"] = p_old
            out[f"ratio_prod_{name}"] = p_new / p_old          # 0/0 = nan after underflow
            zero = np.flatnonzero(p_old == 0)
            out[f"underflow_T_{name}"] = int(zero[0]) + 1 if zero.size else None
        out["ratio_log"] = np.exp(out["log_ratio"])            # exp(sum logp_new - sum logp_old)
    return out


def token_underflow(gaps=(10.0, 50.0, 100.0, 120.0)) -> list[dict]:
    """One rare token of logit gap g behind its rival, in float32: probability vs log-probability."""
    rows = []
    for g in gaps:
        old = np.array([0.0, -g], dtype=np.float32)                   # logits, token 1 is rare
        new = np.array([0.0, -g + 0.5], dtype=np.float32)             # the new policy likes it a bit more
        lq_old, lq_new = log_softmax(old), log_softmax(new)           # float32 log-probabilities
        p_old, p_new = np.exp(lq_old[1]), np.exp(lq_new[1])           # float32 probabilities
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio_prob = float(p_new / p_old)
        rows.append({"gap": g, "p_old": float(p_old), "ratio_prob": ratio_prob,
                     "ratio_log": float(np.exp(lq_new[1] - lq_old[1])), "logp_old": float(lq_old[1])})
    return rows


def quadrants() -> dict:
    """Per-token gradient of the unclipped surrogate, d(r A)/dlogp = r A, for A = +1 and -1."""
    ratio = np.linspace(0.25, 3.0, 111)
    out = {"ratio": ratio, "fd_rel_err": 0.0}
    h = 1e-6
    for A in (1.0, -1.0):
        adv = np.full_like(ratio, A)
        _, dlogp, _ = cpi_loss(np.log(ratio), np.zeros_like(ratio), adv)
        out[A] = -dlogp * len(ratio)            # objective gradient of each token, without the 1/n
        # the same derivative by central differences of the loss, one token at a time: d(r A)/dlogp = r A
        fd = np.array([(cpi_loss(np.log(x) + h, 0.0 * x, A + 0 * x)[0] - cpi_loss(np.log(x) - h, 0.0 * x, A + 0 * x)[0])
                       / (2 * h) for x in ratio[:, None]])
        out["fd_rel_err"] = max(out["fd_rel_err"], float(np.max(np.abs(-fd - out[A]) / np.abs(out[A]))))
    return out


def repeated_steps(rng: np.random.Generator, steps: int) -> dict:
    """Maximise L^CPI (and, for comparison, L^CLIP) on ONE batch for many Adam steps.

    The policy shares parameters across its 32 contexts (4 features, like a small network)
    and starts from a decent "SFT-like" fit; the batch has 64 noisy rewards.
    """
    bandit = TokenBandit.random(32, 8, rng, n_features=4, noise_std=2.0)
    W_old = bandit.fitted_params(2.0)
    states, actions, rewards = bandit.sample(W_old, 64, rng)
    logp_old, _ = bandit.logp(W_old, states, actions)
    adv = masked_whiten(rewards - bandit.state_values(W_old)[states], None)
    out = {"J_old": bandit.expected_reward(W_old), "J_opt": bandit.optimal_reward()}
    for name in ("L^CPI", "L^CLIP"):
        params = {"W": W_old.copy()}
        opt = AdamW(params, lr=0.05, weight_decay=0.0)
        hist = {k: np.empty(steps) for k in ("ratio_max", "surrogate", "J", "kl")}
        for t in range(steps):
            logp, cache = bandit.logp(params["W"], states, actions)
            if name == "L^CPI":
                loss, dlogp, st = cpi_loss(logp, logp_old, adv)
            else:
                loss, dlogp, st = clipped_policy_loss(logp, logp_old, adv, None, 0.2)
            opt.step({"W": bandit.logp_backward(dlogp, cache)})
            # statistics of the parameters after the step
            logp, _ = bandit.logp(params["W"], states, actions)
            ratio = np.exp(logp - logp_old)
            hist["ratio_max"][t], hist["surrogate"][t] = ratio.max(), np.mean(ratio * adv) - np.mean(adv)
            hist["J"][t], hist["kl"][t] = bandit.expected_reward(params["W"]), bandit.kl(W_old, params["W"], states)
        out[name] = hist
    return out


def importance_sampling(rng: np.random.Generator, n_batches: int, batch_size: int = 64) -> dict:
    """Estimate J(new) = E_new[R] from old samples, J_hat = mean(r R); its spread vs KL(old || new).

    The new policies move probability onto the best token, which the old policy rarely samples.
    """
    bandit = TokenBandit(rng.standard_normal((1, 10)), noise_std=0.5)
    best = int(bandit.rewards[0].argmax())
    W_old = bandit.init_params(rng, 0.5)
    W_old[0, best] = -2.0                                         # the best token is rare under pi_old
    direction = np.eye(10)[best][None, :]                         # raise its logit
    steps = np.linspace(0.0, 6.0, 13)
    keys = ("kl", "J_new", "std_exact", "std_measured", "mean", "median", "q10", "q90", "exact_mean")
    out = {k: np.empty(len(steps)) for k in keys}
    p_old = bandit.probs(W_old)[0]
    R = bandit.rewards[0]
    for i, t in enumerate(steps):
        W_new = W_old + t * direction
        p_new = bandit.probs(W_new)[0]
        out["kl"][i] = bandit.kl(W_old, W_new)
        out["J_new"][i] = bandit.expected_reward(W_new)
        out["exact_mean"][i] = np.sum(p_old * (p_new / p_old) * R)   # E_old[r R], summed over the 10 tokens
        # exact: Var_old[r R_obs] = sum_a p_new^2 / p_old E[R_obs^2 | a] - J_new^2, per sample
        second = np.sum(p_new ** 2 / p_old * (R ** 2 + bandit.noise_std ** 2))
        out["std_exact"][i] = np.sqrt((second - out["J_new"][i] ** 2) / batch_size)
        est = np.empty(n_batches)
        for b in range(n_batches):
            states, actions, rewards = bandit.sample(W_old, batch_size, rng)
            logp_new, _ = bandit.logp(W_new, states, actions)
            logp_old, _ = bandit.logp(W_old, states, actions)
            est[b] = np.mean(np.exp(logp_new - logp_old) * rewards)      # J_hat = mean(r R)
        out["std_measured"][i] = est.std()
        out["mean"][i], out["median"][i] = est.mean(), np.median(est)
        out["q10"][i], out["q90"][i] = np.percentile(est, [10, 90])
    out.update(batch_size=batch_size, n_batches=n_batches, J_old=bandit.expected_reward(W_old),
               p_old_best=float(p_old[best]))
    return out


def run(quick: bool = False, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "sequence": sequence_underflow(400 if quick else 1000, 50, rng),
        "tokens": token_underflow(),
        "quadrants": quadrants(),
        "repeated": repeated_steps(rng, 60 if quick else 200),
        "is": importance_sampling(rng, 100 if quick else 1000),
    }


def _underflow(seq: dict, name: str) -> str:
    T = seq[f"underflow_T_{name}"]
    return f"from T = {T}" if T is not None else f"never within {len(seq['T'])} tokens"


def spread_growth(is_: dict) -> dict:
    """The measured std of the importance-sampling estimate at the largest KL minus at KL 0, with the standard
    error of two std estimates from n batches each (std / sqrt(2 (n - 1)) for a normal sample)."""
    s0, s1, n = is_["std_measured"][0], is_["std_measured"][-1], is_["n_batches"]
    se = float(np.hypot(s0, s1) / np.sqrt(2 * (n - 1)))
    return {"diff": float(s1 - s0), "se": se, "clear": abs(s1 - s0) >= 2 * se}


FD_RTOL = 1e-6      # central differences with h = 1e-6 in float64: truncation ~h^2, rounding ~1e-10 / h
IS_TOL = 1e-12      # E_old[r R] against J(new): two float64 sums over 10 tokens


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r``."""
    seq, q, rep, is_ = r["sequence"], r["quadrants"], r["repeated"], r["is"]
    T32, n = seq["underflow_T_float32"], len(seq["T"])
    cpi = rep["L^CPI"]
    promise, true_gain = float(cpi["surrogate"][-1]), float(cpi["J"][-1] - rep["J_old"])
    g = spread_growth(is_)
    is_err = float(np.max(np.abs(is_["exact_mean"] - is_["J_new"])))
    return [
        measured("product_underflows", f"Over {n} tokens the product of float32 probabilities underflows to 0 while "
                 "exp(sum(logp_new - logp_old)) stays finite.", T32 is not None and bool(np.isfinite(seq["ratio_log"]).all()),
                 "holds when the float32 product reaches exactly 0 within the sequence and the log-space ratio is "
                 "finite at every length", {"float32 product = 0 from T": T32, "log-space ratio at the end": seq["ratio_log"][-1]}),
        identity("gradient_r_A", "The unclipped surrogate's per-token gradient is d(r A)/dlogp = r A: whatever the sign "
                 "of A, a token whose probability rose (r > 1) is pushed harder, one whose probability fell (r < 1) "
                 "more weakly.",
                 q["fd_rel_err"] <= FD_RTOL, f"holds when the library's gradient equals central differences of the loss "
                 f"to {FD_RTOL:g} relative, on {len(q['ratio'])} ratios from {q['ratio'][0]:g} to {q['ratio'][-1]:g}, A = +-1",
                 {"max relative error": q["fd_rel_err"]}),
        measurement("cpi_overpromises", "Maximised on one batch, L^CPI promises more gain than the policy really gets.",
                    promise - true_gain, 0.0, ">", "promised - true gain",
                    because=f"promised {promise:.2f}, true gain {true_gain:+.3f}"),
        identity("is_unbiased", "The importance-sampling estimate mean(r R) of J(new) from old samples is unbiased.",
                 is_err <= IS_TOL, f"holds when E_old[r R] = sum_a p_old(a) (p_new(a) / p_old(a)) R(a) equals J(new) to "
                 f"{IS_TOL:g} at every KL of the sweep", {"max |E_old[r R] - J(new)|": is_err}),
        measurement("spread_grows", "The estimate's spread grows as the new policy moves away from the old one (old "
                    "samples only tell us about a nearby policy).", g["diff"], 0.0, ">",
                    f"std at KL {is_['kl'][-1]:.2f} - std at KL 0", se=g["se"], noise=f"{is_['n_batches']}-batch sampling",
                    fmt="+.3f"),
    ]


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps inside arrays: the sequence's
    length and final log-space ratio, the gradient r A at r = 2 and 0.5 for A = +1 / -1, the end of the 200
    steps on one batch (largest ratio, KL, promised and true gain), the first and the last KL of (e, f)."""
    seq, rep, is_, q = r["sequence"], r["repeated"], r["is"], r["quadrants"]
    grad = {f"{'pos' if A > 0 else 'neg'}.r{x:g}": float(np.interp(x, q["ratio"], q[A]))
            for A in (1.0, -1.0) for x in (2.0, 0.5)}
    end = {name: {"ratio_max": float(h["ratio_max"][-1]), "kl": float(h["kl"][-1]),
                  "promise": float(h["surrogate"][-1]), "true_gain": float(h["J"][-1] - rep["J_old"])}
           for name, h in (("cpi", rep["L^CPI"]), ("clip", rep["L^CLIP"]))}
    is_rows = {f"is_{name}": {k: float(is_[k][i]) for k in ("kl", "J_new", "std_exact", "std_measured", "mean",
                                                              "median")} for name, i in (("first", 0), ("last", -1))}
    return {"sequence_length": len(seq["T"]), "ratio_log_last": float(seq["ratio_log"][-1]),
            "quadrant_grad": grad, "steps": len(rep["L^CPI"]["ratio_max"]), **end, **is_rows}


def narrative(r: dict) -> str:
    seq = r["sequence"]
    T64 = seq["underflow_T_float64"]
    V = by_key(verdicts(r))
    L = [f"(a,b) One sampled sequence of {len(seq['T'])} tokens over a 50-token vocabulary: the product of "
         f"probabilities is exactly 0 {_underflow(seq, 'float32')} in float32 and {_underflow(seq, 'float64')} in "
         "float64" + (f" (true log10 probability there: {seq['log10_prob'][T64 - 1]:.0f})" if T64 else "")
         + f"; the ratio of products is then {seq['ratio_prod_float64'][-1]} while exp(sum(logp_new - logp_old)) = "
         f"{seq['ratio_log'][-1]:.3g}.", "    One rare token in float32 (new policy: logit +0.5):"]
    for row in r["tokens"]:
        L.append(f"      logit gap {row['gap']:5.0f}: p_old = {row['p_old']:.3g}, logp_old = {row['logp_old']:.1f}, "
                 f"p_new/p_old = {row['ratio_prob']}, exp(logp_new - logp_old) = {row['ratio_log']:.4f}")
    L.append(V["product_underflows"].render())
    q = r["quadrants"]
    grad = {(A, x): float(np.interp(x, q["ratio"], q[A])) for A in (1.0, -1.0) for x in (2.0, 0.5)}
    L.append("(c) Unclipped surrogate, per-token gradient r A: " + ", ".join(
        f"A{'>' if A > 0 else '<'}0 & r={x:g} -> {g:+.2f} "
        f"({('pushed up harder' if A > 0 else 'pushed down harder') if abs(g) > 1 else 'weakened'})"
        for (A, x), g in grad.items()) + ".")
    L.append(V["gradient_r_A"].render())
    rep = r["repeated"]
    cpi, clip = rep["L^CPI"], rep["L^CLIP"]
    promise, true_gain = cpi["surrogate"][-1], cpi["J"][-1] - rep["J_old"]
    L.append(f"(d) Maximising L^CPI on one batch of 64: after {len(cpi['ratio_max'])} steps the largest ratio is "
             f"{cpi['ratio_max'][-1]:.1f}, KL = {cpi['kl'][-1]:.2f}; L^CPI promises a gain of {promise:.2f}, the true "
             f"gain is {true_gain:+.3f}; with L^CLIP the largest ratio is {clip['ratio_max'][-1]:.2f} (KL = "
             f"{clip['kl'][-1]:.3f}, true gain {clip['J'][-1] - rep['J_old']:+.3f}).")
    L.append(V["cpi_overpromises"].render())
    is_ = r["is"]
    for i in (0, len(is_["kl"]) // 3, 2 * len(is_["kl"]) // 3, len(is_["kl"]) - 1):
        L.append(f"(e,f) KL(old||new) = {is_['kl'][i]:.3f}: J(new) = {is_['J_new'][i]:.3f}, its estimate from "
                 f"{is_['batch_size']} old samples has std {is_['std_exact'][i]:.3f} (measured {is_['std_measured'][i]:.3f}), "
                 f"mean {is_['mean'][i]:.3f}, median {is_['median'][i]:.3f}.")
    L.append(f"    (the new policies raise the best token, which the old policy samples with p = {is_['p_old_best']:.3f})")
    L += [V["is_unbiased"].render(), V["spread_grows"].render()]
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(2, 3, figsize=(16, 9), layout="constrained")
    seq = results["sequence"]
    T = seq["T"]

    a = ax[0, 0]
    a.plot(T, seq["log10_prob"], color="k", lw=2, label="exact: sum of log-probs / ln 10")
    for name, c in (("float32", "tab:red"), ("float64", "tab:blue")):
        with np.errstate(divide="ignore"):
            y = np.log10(seq[f"prod_{name}"].astype(np.float64))
        a.plot(T, np.where(np.isfinite(y), y, np.nan), color=c, ls="--", label=f"product of probs, {name}")
        u = seq[f"underflow_T_{name}"]
        if u is not None:
            a.axvline(u, color=c, ls=":", lw=1)
            # label below the curve, with an arrow to the point where the product hits 0
            a.annotate(f"{name} product = 0\nfrom T = {u}", (u, seq["log10_prob"][u - 1]),
                       xytext=(u + 0.05 * T[-1], seq["log10_prob"][u - 1] - 0.4 * abs(seq["log10_prob"][-1])),
                       color=c, fontsize=8, ha="left", va="top", arrowprops={"arrowstyle": "->", "color": c})
    a.set_xlabel("sequence length T (tokens)")
    a.set_ylabel(r"$\log_{10}\ \pi_{old}$(sequence)")
    u32 = seq["underflow_T_float32"]
    a.set_title("(a) a sequence's probability underflows" if u32 is not None else
                f"(a) a sequence's probability (no float32 underflow within {T[-1]} tokens)")
    a.legend(loc="lower left", fontsize=8)

    a = ax[0, 1]
    a.plot(T, seq["ratio_log"], color="k", lw=2, label="exp(sum(logp_new - logp_old))")
    for name, c in (("float32", "tab:red"), ("float64", "tab:blue")):
        a.plot(T, seq[f"ratio_prod_{name}"], color=c, ls="--", label=f"prod(p_new) / prod(p_old), {name}")
        u = seq[f"underflow_T_{name}"]
        if u is not None:
            a.axvline(u, color=c, ls=":", lw=1)
    a.set_yscale("log")
    a.set_xlabel("sequence length T (tokens)")
    a.set_ylabel("sequence ratio r (log scale)")
    a.set_title("(b) the ratio of products becomes nan (0/0)" if np.isnan(seq["ratio_prod_float32"]).any() else
                "(b) the ratio of products against the log-space ratio")
    a.legend(loc="upper right", fontsize=8)

    a = ax[0, 2]
    q = results["quadrants"]
    r = q["ratio"]
    a.plot(r, q[1.0], color="tab:green", lw=2, label="A = +1: gradient r A pushes logp up")
    a.plot(r, q[-1.0], color="tab:red", lw=2, label="A = -1: gradient r A pushes logp down")
    a.axvline(1.0, color="k", lw=1)
    a.axhline(0.0, color="k", lw=1)
    notes = [(2.0, 2.55, "A>0, r>1: already preferred,\npushed up even harder"),
             (0.3, 1.45, "A>0, r<1: good action\nless liked, push weakened"),
             (2.0, -1.15, "A<0, r>1: bad action preferred,\nstrong push down"),
             (0.3, -1.9, "A<0, r<1: already avoided,\npush weakened")]
    for x, y, text in notes:
        a.text(x, y, text, fontsize=8, va="center")
    a.set_ylim(-3.3, 3.3)
    a.set_xlabel(r"ratio $r = \pi_{new}/\pi_{old}$")
    a.set_ylabel(r"$\partial (r A) / \partial \log \pi_{new}(a|s) = r A$")
    a.set_title("(c) the four (A, r) quadrants of the unclipped surrogate")
    a.legend(loc="center right", fontsize=8)

    a = ax[1, 0]
    rep = results["repeated"]
    steps = np.arange(1, len(rep["L^CPI"]["ratio_max"]) + 1)
    for name, tex, c in (("L^CPI", "$L^{CPI}$", "tab:red"), ("L^CLIP", "$L^{CLIP}$", "tab:blue")):
        a.plot(steps, rep[name]["ratio_max"], color=c, lw=2, label=f"largest ratio, maximising {tex}")
    a.axhline(1.2, color="tab:blue", ls=":", lw=1, label="1 + eps = 1.2")
    a.set_yscale("log")
    ticks = [1.2, 2, 5, 10, 20]
    a.set_yticks(ticks, [f"{t:g}" for t in ticks])
    a.minorticks_off()
    a.set_xlabel("Adam steps on the SAME batch of 64")
    a.set_ylabel("largest ratio in the batch (log scale)")
    a.set_title(f"(d) unconstrained, the largest ratio reaches {rep['L^CPI']['ratio_max'].max():.1f}")
    b = a.twinx()
    b.plot(steps, rep["L^CPI"]["surrogate"], color="tab:red", ls="--", label="$L^{CPI}$ gain (what it promises)")
    b.plot(steps, rep["L^CPI"]["J"] - rep["J_old"], color="k", ls="--", label="true gain J - J_old")
    b.set_ylabel("gain in expected reward (dashed)")
    b.grid(False)
    b.spines["right"].set_visible(True)
    h1, l1 = a.get_legend_handles_labels()
    h2, l2 = b.get_legend_handles_labels()
    a.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8)

    is_ = results["is"]
    a = ax[1, 1]
    a.plot(is_["kl"], is_["std_exact"], "o-", color="tab:purple", label="exact std")
    a.plot(is_["kl"], is_["std_measured"], "x", color="k", ms=8,
           label=f"measured over {is_['n_batches']} batches")
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("exact KL(old || new)")
    a.set_ylabel(r"std of $\hat J(new) = $ mean$(r R)$")
    a.set_title(f"(e) importance-sampling estimate of J(new), {is_['batch_size']} old samples")
    a.legend(loc="upper left", fontsize=8)

    a = ax[1, 2]
    a.fill_between(is_["kl"], is_["q10"], is_["q90"], color="tab:purple", alpha=0.2, label="10-90% of batches")
    a.plot(is_["kl"], is_["J_new"], color="k", lw=2, label="exact J(new)")
    a.plot(is_["kl"], is_["mean"], "x", color="k", ms=8, label=r"mean of $\hat J$ (unbiased)")
    a.plot(is_["kl"], is_["median"], "o--", color="tab:purple", label=r"median of $\hat J$ (a typical batch)")
    a.set_xscale("log")
    a.set_xlabel("exact KL(old || new)")
    a.set_ylabel("expected reward of the new policy")
    V = by_key(verdicts(results))
    off = is_["median"][-1] - is_["J_new"][-1]
    a.set_title(("(f) unbiased on average" if V["is_unbiased"].holds else "(f) NOT unbiased")
                + f"; a typical batch (median) {off:+.2f} off at KL {is_['kl'][-1]:.1f}")
    a.legend(loc="upper left", fontsize=8)
    fig.suptitle("Lesson 02: the importance ratio r = exp(logp_new - logp_old) (PPO paper eq. (6), L^CPI)", fontsize=12)
    save(fig, path)


if __name__ == "__main__":
    main()
