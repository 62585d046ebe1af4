r"""Lesson 06 - actor-critic loss: policy + c1 value - c2 entropy; entropy collapse vs the entropy bonus.

Legend: S contexts (8), V vocab (8), N samples per iteration (128); W (S, V) logits, V(s) (S,).

Pipeline step: the loss PPO actually minimises, with its critic: policy_loss $= -L^{CLIP}$, the critic's
squared error against the returns, and an entropy bonus that keeps the policy exploring. An entropy that
drops fast means the policy committed early; a small value loss does not mean a good policy.

Paper: Schulman et al. 2017 (arXiv:1707.06347), eq. (9), maximised:

$$
L^{CLIP+VF+S}_t(\theta) = \hat{\mathbb{E}}_t\left[L^{CLIP}_t(\theta) - c_1 L^{VF}_t(\theta) + c_2\, S[\pi_\theta](s_t)\right]
$$

with $L^{VF}_t = (V_\theta(s_t) - V^{targ}_t)^2$ and $S$ the entropy. Minimised as a loss:
$-L^{CLIP} + c_1 \cdot \tfrac12 (V - R)^2 - c_2 H$ (`minippo.toy.bandit.actor_critic_loss`). The gradients of
the three loss terms with respect to the logits $z$ of a context are, per sample ($n$ samples):

$$
\frac{\partial (-L^{CLIP})}{\partial z} = -\frac{A r}{n} (\mathrm{onehot}(a) - p) \quad \text{(where not clipped)},
\qquad
\frac{\partial (-c_2 H)}{\partial z} = \frac{c_2}{n}\, p \odot (\log p + H)
$$

and 0 from the value term: the critic is a separate table here, its own gradient is $c_1 (V(s) - R) / n$
(`logprobs_backward`, `entropy_backward`). A step moves the logits along minus these: the entropy term raises
every token with $\log p < -H$ (the rare ones) and lowers the dominant ones, i.e. it pushes towards uniform.

The task: a token bandit with 8 contexts and 8 tokens with a trap. In every context a decoy token (reward
0.7) starts likely (logit +2, p ~ 0.55) and the best token (reward 1.0) starts rare (logit -2.5, p ~ 0.006);
the other tokens earn 0-0.3, each context adds its own offset (+-0.75) and every reward has noise of std 0.5.
PPO-Clip, 128 samples per iteration, 4 epochs of minibatch (64) Adam, and a learned value table per context
($c_1 = 0.5$), for several $c_2$.

The figure shows (a) the policy entropy over training for each $c_2$: without a bonus it collapses onto the
decoy within a few iterations; (b) the probability of the best token: with a bonus it is found - late; (c)
the expected reward; (d) the end of training against $c_2$: too little bonus stays on the decoy, too much
keeps more entropy than it needs and gives up some reward; (e) the critic: value loss and explained variance
against that of the exact per-context $V(s)$ on the same batches, a ceiling on average (the rest of the
variance is action choice and noise, which $V(s)$ cannot explain); (f) the three gradients on the logits of
one context at the start, from one batch.

Exercises:
1. Anneal c2 linearly from 0.1 to 0 over training (as some PPO code does). Does the final reward
   beat the best constant c2?
2. Set vf_coef (c1) to 0 (no critic learning: A = R - 0). What happens to the explained variance,
   to the advantages (they now carry each context's offset) and to learning?
3. In (f), derive -c2 dH/dz by hand for a two-token policy and check the bar of the rare token.
4. Implement it: `minippo exercise start value_clip`, then `minippo exercise check value_clip`.

Questions: Q12, Q13, Q14, Q15.
"""
from __future__ import annotations

import numpy as np

from lessons._common import Verdict, by_key, comparison, diff_text, identity, measured, measurement, legend_in_margin, lesson_main, pyplot, save
from minippo.toy.bandit import BanditPPOConfig, TokenBandit, ppo_train
from minippo.rl.losses import (clipped_policy_loss, entropy_backward, entropy_from_logits, logprobs_backward,
                               logprobs_from_logits, value_loss)
from minippo.rl.masked import masked_whiten
from minippo.studies.sweep_stats import compare_paired

VF_COEF = 0.5
SHOW_ENT_COEF = 0.1                     # c2 used in panel (f)


def make_task(rng: np.random.Generator, S: int = 8, V: int = 8):
    """Rewards with a decoy (0.7, likely at the start) and a best token (1.0, rare at the start)."""
    rewards = rng.uniform(0.0, 0.3, (S, V))                             # (S, V)
    W0 = np.zeros((S, V))                                               # tabular: W = logits
    decoy, best = np.empty(S, dtype=int), np.empty(S, dtype=int)
    for s in range(S):
        decoy[s], best[s] = rng.choice(V, size=2, replace=False)
        rewards[s, decoy[s]], rewards[s, best[s]] = 0.7, 1.0
        W0[s, decoy[s]], W0[s, best[s]] = 2.0, -2.5
    rewards += rng.uniform(-0.75, 0.75, (S, 1))                         # each context's own level
    return TokenBandit(rewards, noise_std=0.5), W0, decoy, best


def config(ent_coef: float) -> BanditPPOConfig:
    return BanditPPOConfig(objective="clip", clip_eps=0.2, ent_coef=ent_coef, vf_coef=VF_COEF, critic="table",
                           lr=0.05, batch_size=128, minibatch_size=64, update_epochs=4)


def gradient_terms(bandit, W0, rng, context: int = 0) -> dict:
    """The three terms of eq. (9) and their gradients on the logits of one context, one batch, at W0."""
    states, actions, rewards = bandit.sample(W0, config(0).batch_size, rng)
    logits = W0[states]                                                  # (N, V): tabular policy
    logp, cache = logprobs_from_logits(logits, actions)
    values = np.zeros(bandit.n_states)[states]                           # critic at its init, V = 0
    adv = masked_whiten(rewards - values, None)
    # policy term: -L^CLIP; at W = W_old every ratio is 1, so nothing is clipped yet
    pol, dlogp, _ = clipped_policy_loss(logp, logp, adv, None, 0.2)
    d_pol = logprobs_backward(dlogp, cache)                              # (N, V)
    # entropy term: -c2 * mean H
    ent, ent_cache = entropy_from_logits(logits)
    d_ent = -SHOW_ENT_COEF * entropy_backward(np.full_like(ent, 1.0 / len(ent)), ent_cache)
    # value term: c1 * 0.5 mean (V - R)^2 -- its gradient reaches the critic only
    vl, dvalues, _ = value_loss(values, rewards)
    rows = states == context
    # dH/dz on this context's logits by central differences, against the library's entropy_backward
    z, h = W0[context][None, :], 1e-6
    analytic = entropy_backward(np.ones(1), entropy_from_logits(z)[1])[0]              # (V,) dH/dz
    numeric = np.array([(entropy_from_logits(z + h * e)[0][0] - entropy_from_logits(z - h * e)[0][0]) / (2 * h)
                        for e in np.eye(z.shape[1])[:, None, :]])
    fd_err = float(np.abs(analytic - numeric).max() / np.abs(analytic).max())
    return {"policy": -d_pol[rows].sum(axis=0), "entropy": -d_ent[rows].sum(axis=0),   # descent directions
            "value_on_critic": -VF_COEF * float(dvalues[rows].sum()), "n_context": int(rows.sum()),
            "entropy_fd_rel_err": fd_err,
            "probs": bandit.probs(W0)[context], "loss_terms": {"policy": pol, "value": VF_COEF * vl,
                                                               "entropy": -SHOW_ENT_COEF * float(ent.mean())}}


def run(quick: bool = False, seed: int = 0) -> dict:
    ent_coefs = (0.0, 0.1) if quick else (0.0, 0.01, 0.03, 0.1, 0.3)
    n_seeds = 2 if quick else 3
    n_iters = 25 if quick else 80
    keys = ("entropy", "p_best", "progress", "value_loss", "explained_variance", "explained_variance_exact")
    hist = {c: {k: [] for k in keys} for c in ent_coefs}
    for s in range(n_seeds):
        bandit, W0, decoy, best = make_task(np.random.default_rng([seed, s]))
        J0, J_opt = bandit.expected_reward(W0), bandit.optimal_reward()
        for c in ent_coefs:
            h = ppo_train(bandit, config(c), n_iters, np.random.default_rng([seed, s, 1]), W0=W0)
            h["progress"] = (h["reward"] - J0) / (J_opt - J0)
            for k in keys:
                hist[c][k].append(h[k])
    hist = {c: {k: np.array(v) for k, v in d.items()} for c, d in hist.items()}          # (n_seeds, n_iters)
    bandit, W0, decoy, best = make_task(np.random.default_rng([seed, 0]))
    grads = gradient_terms(bandit, W0, np.random.default_rng([seed, 2]))
    grads.update(decoy=int(decoy[0]), best=int(best[0]))
    final = {c: {k: float(hist[c][k][:, -5:].mean()) for k in ("entropy", "p_best", "progress")} for c in ent_coefs}
    return {"ent_coefs": ent_coefs, "hist": hist, "final": final, "grads": grads, "n_seeds": n_seeds,
            "n_iters": n_iters, "max_entropy": float(np.log(bandit.vocab)),
            "entropy_at_10": {c: float(hist[c]["entropy"][:, 9].mean()) for c in ent_coefs}}


def derived(r: dict) -> dict:
    """The critic of the c2 = SHOW_ENT_COEF runs (mean over the tasks), first and last iteration: explained
    variance, that of the exact V(s) (a ceiling on average) and the value loss, which the narrative prints and
    docs quote."""
    h = r["hist"][SHOW_ENT_COEF]
    return {"critic": {"ent_coef": SHOW_ENT_COEF,
                       "ev_first": float(h["explained_variance"][:, 0].mean()),
                       "ev_last": float(h["explained_variance"][:, -1].mean()),
                       "ev_ceiling": float(h["explained_variance_exact"][:, -1].mean()),
                       "value_loss_first": float(h["value_loss"][:, 0].mean()),
                       "value_loss_last": float(h["value_loss"][:, -1].mean())}}


def narrative(r: dict) -> str:
    L = []
    L.append(f"{r['n_seeds']} tasks x {r['n_iters']} iterations, PPO-Clip, c1 = {VF_COEF}; decoy reward 0.7 "
             "(p 0.55 at the start), best 1.0 (p 0.006).")
    L.append(f"{'c2':>6} | entropy @10 | final entropy | final p(best) | final progress")
    for c in r["ent_coefs"]:
        f = r["final"][c]
        L.append(f"{c:6g} | {r['entropy_at_10'][c]:11.3f} | {f['entropy']:13.3f} | {f['p_best']:13.3f} | {f['progress']:14.3f}")
    c = derived(r)["critic"]
    L.append(f"Critic (c2 = {c['ent_coef']}): explained variance {c['ev_first']:.2f} -> {c['ev_last']:.2f} "
             f"(exact V(s): {c['ev_ceiling']:.2f}, a ceiling on average); value loss {c['value_loss_first']:.3f} -> {c['value_loss_last']:.3f}.")
    g = r["grads"]
    lt = g["loss_terms"]
    ent, pol, d, best = g["entropy"], g["policy"], g["decoy"], g["best"]
    V = by_key(verdicts(r))
    L.append(f"Gradients on context 0's logits at the start (descent directions): policy term "
             f"{np.round(pol, 4).tolist()}, entropy term {np.round(ent, 4).tolist()}; the decoy (token {d}) is "
             f"pushed {'down' if ent[d] < 0 else 'up'} by the entropy term ({ent[d]:+.4f}) and "
             f"{'up' if pol[d] > 0 else 'down'} by the policy term ({pol[d]:+.4f}); the rare best token (token {best}) "
             f"gets {ent[best]:+.5f} from the entropy term."
             + f" The value term moves only the critic (descent direction on V(context 0): {g['value_on_critic']:+.4f}).")
    L += [V["entropy_gradient"].render(), V["bonus_holds_back_decoy"].render()]
    L.append(f"Loss terms on that batch: policy {lt['policy']:+.4f}, c1 * value {lt['value']:+.4f}, "
             f"-c2 * entropy {lt['entropy']:+.4f}.")
    c0, c1 = r["ent_coefs"][0], r["ent_coefs"][-1]
    last = lambda c, k: r["hist"][c][k][:, -5:].mean(axis=1)          # noqa: E731  per task, last 5 iterations
    e, p = (compare_paired(last(c0, k), last(c1, k)) for k in ("entropy", "p_best"))
    L.append(f"With c2 = {c1:g} instead of {c0:g}, paired over the {r['n_seeds']} tasks: final entropy "
             f"{diff_text(e, '+.3f', 'task')}, final p(best) {diff_text(p, '+.3f', 'task')}.")
    L += [V[k].render() for k in ("collapse_without_bonus", "bonus_keeps_entropy", "bonus_finds_best")]
    return "\n".join(L)


FD_RTOL = 1e-6            # central differences with h = 1e-6 in float64
COLLAPSED = 0.1           # entropy below this fraction of ln V counts as collapsed


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (noise: the spread over the tasks)."""
    g = r["grads"]
    ent, d, best = g["entropy"], g["decoy"], g["best"]
    c0, c1 = r["ent_coefs"][0], r["ent_coefs"][-1]
    last = lambda c, k: r["hist"][c][k][:, -5:].mean(axis=1)          # noqa: E731  per task, last 5 iterations
    lab = (f"c2 = {c0:g}", f"c2 = {c1:g}")
    return [
        identity("entropy_gradient", "The entropy bonus's gradient on a logit is dH/dz_j = -p_j (log p_j + H).",
                 g["entropy_fd_rel_err"] <= FD_RTOL, f"holds when the library's entropy_backward equals central "
                 f"differences of the entropy to {FD_RTOL:g} relative (context 0's logits)",
                 {"max relative error": g["entropy_fd_rel_err"]}),
        measured("bonus_holds_back_decoy", "The entropy bonus works by holding the dominant token back: it pushes the "
                 "decoy down, and the rare best token less than the decoy (the push on token j, c2 dH/dz_j = "
                 "-c2 p_j (log p_j + H), is small where p_j is small).",
                 bool(ent[d] < 0 and abs(ent[best]) < abs(ent[d])),
                 "holds when the entropy term's descent direction on the decoy is < 0 and |on the best token| < "
                 "|on the decoy|", {"on the decoy": float(ent[d]), "on the best token": float(ent[best])}),
        measurement("collapse_without_bonus", f"Without the bonus (c2 = {c0:g}) the entropy collapses.",
                    float(r["final"][c0]["entropy"]), COLLAPSED * r["max_entropy"], "<", "final entropy (nats)",
                    fmt=".3f", because=f"final entropy {r['final'][c0]['entropy']:.3f} nats; collapsed below "
                    f"{COLLAPSED:g} ln V = {COLLAPSED * r['max_entropy']:.3f}"),
        comparison("bonus_keeps_entropy", f"The bonus (c2 = {c1:g}) keeps the policy's entropy higher.",
                   compare_paired(last(c0, "entropy"), last(c1, "entropy")), expect=+1, labels=lab,
                   quantity="final entropy", values=(r["final"][c0]["entropy"], r["final"][c1]["entropy"]),
                   noise="task"),
        comparison("bonus_finds_best", f"With the bonus (c2 = {c1:g}) the best token is found more often: higher "
                   "final p(best).", compare_paired(last(c0, "p_best"), last(c1, "p_best")), expect=+1, labels=lab,
                   quantity="final p(best)", values=(r["final"][c0]["p_best"], r["final"][c1]["p_best"]), noise="task"),
    ]


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(2, 3, figsize=(17, 9.5), layout="constrained")
    cs = results["ent_coefs"]
    cmap = plt.get_cmap("viridis")
    color = {c: cmap(0.9 * k / max(len(cs) - 1, 1)) for k, c in enumerate(cs)}
    it = np.arange(1, results["n_iters"] + 1)
    hist = results["hist"]
    for a, key, ylabel, title in (
            (ax[0, 0], "entropy", "mean entropy H (nats)", "(a) entropy" + (
                ": collapse without the bonus" if by_key(verdicts(results))["collapse_without_bonus"].holds else "")),
            (ax[0, 1], "p_best", "p(best token), mean over contexts", "(b) p(best token)"),
            (ax[0, 2], "progress", "(J - J_start) / (J_opt - J_start)", "(c) expected reward")):
        for c in cs:
            a.plot(it, hist[c][key].mean(axis=0), color=color[c], lw=2, label=f"c2 = {c:g}")
        a.set_xlabel("PPO iteration")
        a.set_ylabel(ylabel)
        a.set_title(title + f" (mean of {results['n_seeds']} tasks)")
    ax[0, 0].axhline(results["max_entropy"], color="k", ls=":", lw=1, label="uniform = ln 8")
    legend_in_margin(ax[0, 0], 0.22, fontsize=8, ncol=3)       # above the uniform line (it covered it)
    ax[0, 1].legend(loc="center right", fontsize=8)
    ax[0, 2].legend(loc="lower right", fontsize=8)

    a = ax[1, 0]
    fin = results["final"]
    a.plot(cs, [fin[c]["progress"] for c in cs], "o-", color="tab:blue", label="reward progress")
    a.plot(cs, [fin[c]["p_best"] for c in cs], "s-", color="tab:green", label="p(best token)")
    a.plot(cs, [fin[c]["entropy"] / results["max_entropy"] for c in cs], "^-", color="tab:purple",
           label="entropy / ln 8")
    a.set_xscale("symlog", linthresh=0.01)
    a.set_xlabel("entropy coefficient c2 (symlog axis)")
    a.set_ylabel("value over the last 5 iterations")
    a.set_title("(d) end of training vs c2")
    a.legend(loc="upper left", fontsize=8)

    a = ax[1, 1]
    c = SHOW_ENT_COEF if SHOW_ENT_COEF in hist else cs[-1]
    h = hist[c]
    a.plot(it, h["explained_variance"].mean(axis=0), color="tab:orange", lw=2, label="explained variance of V(s)")
    a.plot(it, h["explained_variance_exact"].mean(axis=0), color="tab:orange", ls=":",
           label="ceiling: exact V(s) of the current policy")
    a.plot(it, h["value_loss"].mean(axis=0), color="tab:gray", lw=1.5, label="value loss 0.5 mean (V(s) - R)^2")
    a.set_ylim(-0.05, 0.7)
    a.set_xlabel("PPO iteration")
    a.set_ylabel("explained variance 1 - Var[R - V] / Var[R]; value loss")
    a.legend(loc="upper right", fontsize=8)
    a.set_title(f"(e) the critic (value table per context), c2 = {c:g}")

    a = ax[1, 2]
    g = results["grads"]
    V = len(g["probs"])
    x = np.arange(V)
    w = 0.27
    a.bar(x - w, g["policy"], w, color="tab:blue", label=r"policy term  $-\partial(-L^{CLIP})/\partial z$")
    a.bar(x, g["entropy"], w, color="tab:purple",
          label=rf"entropy term  $-\partial(-c_2 H)/\partial z$, $c_2$ = {SHOW_ENT_COEF:g}")
    a.bar(x + w, g["policy"] + g["entropy"], w, color="k", alpha=0.6, label="sum (value term: 0 on the logits)")
    a.axhline(0, color="k", lw=1)
    names = [f"{t}\np={p:.3f}" + ("\nDECOY" if t == g["decoy"] else "\nBEST" if t == g["best"] else "")
             for t, p in enumerate(g["probs"])]
    a.set_xticks(x, names, fontsize=8)
    a.set_xlabel("token of context 0 (probability at the start)")
    a.set_ylabel("descent direction on the logit (- gradient)")
    a.set_title(f"(f) the gradients of eq. (9) on one context's logits\n({g['n_context']} of the batch's samples)")
    a.legend(loc="lower left", fontsize=8)
    fig.suptitle("Lesson 06: loss = policy + c1 value - c2 entropy (PPO paper eq. (9)) on a token bandit with a "
                 "decoy token", fontsize=12)
    save(fig, path)


if __name__ == "__main__":
    main()
