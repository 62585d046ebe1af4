r"""Lesson 24 - off_policy: when the sampler is not the trainer, every correction measured against the exact gradient.

Every large RL system for language models samples with one engine and trains with another: an inference
engine that computes the logits in bf16, a top-p or top-k truncation at sampling, weights a few updates stale
in asynchronous RL. The tokens then come from a sampler $\mu$, not from the policy $\pi$ whose gradient the
update wants, and `logp_old` from the sampler is not the trainer's log-probability of the same token. The
libraries answer with importance weights (`minippo.rl.off_policy`); this lesson measures how biased each
corrected gradient still is, and how much of PPO's clip band the mismatch alone uses up.

Pipeline step: stage 3 of RLHF (PPO / GRPO), the first minibatch of an update: the rollout came from a
sampler, the trainer computes $\pi$ of the same tokens. (a) runs on lesson 22's enumerable space, (c) on the
main job's SFT policy (the first RLHF lesson builds it once into `runs/cache/`).

Papers: the per-token ratio and its product over a response,

$$
\rho_t = \frac{\pi(a_t \mid s_t)}{\mu(a_t \mid s_t)}, \qquad
\rho(y) = \prod_t \rho_t = \frac{\pi(y)}{\mu(y)}, \qquad
\mathbb{E}_{y \sim \mu}\big[\rho(y) f(y)\big] = \mathbb{E}_{y \sim \pi}\big[f(y)\big],
$$

the last wherever $\mu > 0$ where $\pi > 0$ (importance sampling over whole responses). The corrections
weight each token's term of L^CLIP (PPO eq. (7)) by a constant $w_t$: none ($w = 1$), IS ($w = \rho$), truncated
IS ($w = \min(\rho, C)$), masked IS ($w = \rho$ where $\rho \le C$, else 0), IcePop's two-sided mask
($w = \rho$ where $C_{low} \le \rho \le C$), each with the token's $\rho_t$ or the response's $\rho(y)$.
AReaL's decoupled PPO (Fu et al. 2025, arXiv:2505.24298) weights the clipped term, whose ratio is taken against
the proximal policy, by $\pi_{prox}/\mu$: at the first minibatch ($\pi_\theta = \pi_{prox}$) its gradient is
token-level IS. The estimator measured in (a), at ratio 1 (nothing clipped), with RLOO advantages (Ahmadian et
al. 2024) over a batch of $n$ responses of $\mu$:

$$
g = \frac{1}{n} \sum_i \Big(R_i - \frac{1}{n-1}\sum_{j \ne i} R_j\Big)
\sum_t w_{i,t} \nabla \log \pi(y_{i,t} \mid s_{i,t}).
$$

Its expectation and its variance are finite sums over the space (a U-statistic: Hoeffding 1948), so its bias
$\|\mathbb{E}[g] - \nabla J\|$ against the exact gradient of $J = \mathbb{E}_\pi[R]$ and its noise
$\sqrt{\mathrm{tr}\,\mathrm{Cov}[g]}$ are exact (`minippo.studies.off_policy`); a Monte Carlo run of the
library's own code (`rloo_advantages`, `off_policy_weights`, `corrected_policy_loss`) checks them.

(a) The tabular policy of lesson 22 (4 tokens, responses of at most 5, 364 of them; the reward likes long
    responses), after two exact ascent steps, against seven samplers: its logits rounded to fp16, to bf16
    (nearest, and truncated toward zero) at an offset the softmax ignores and the rounding does not (a language
    model's logits sit far from 0), top-p 0.9, top-k 3, and the policy one and two updates stale.
(c) The RLHF SFT policy at lr = 0: one response per evaluation prompt from each sampler of
    `minippo.rlhf.generate` (`logits_precision`, `top_p`, `top_k`) and from the SFT policy scored by the policy
    one and two PPO iterations later (a stale sampler); the share of tokens whose ratio $\pi/\mu$ is outside
    $[1 - \epsilon, 1 + \epsilon]$. Lesson 16's lr = 0 check is the same phenomenon in miniature: there the
    trainer's own recompute differs from the sampler by float32 rounding only.

Only the LM head's logits are rounded here; a real bf16 engine rounds every activation, so (c)'s rounding rows
are a lower bound on an engine's mismatch. Every verdict is computed from the numbers printed beside it:
exact numbers are equal below a relative 1e-9 and differ when they differ by more than 5%; a share of tokens
is compared with its binomial standard error (2 se); "not shown at this size" where the numbers cannot decide.

The figure: (a) the relative bias of five estimators under each sampler; (b) under the sampler two updates
stale, the error of one batch (bias and noise, exact) against the batch size; (c) the share of tokens outside
the clip band at lr = 0 under each RLHF sampler, with 2 se; (d) the log-ratios behind it.

Exercises:
1. In (a), set `OFFSET = 0`: the tabular logits sit near 0, where bf16 has many more digits. How much of the
   rounding samplers' bias is left? What does that say about a model whose logits are large?
2. Give the top-p sampler the sequence-level IS weight computed from the full softmax (`logp` instead of
   `logp_sampler`) as some engines report: what happens to the weights of the tokens top-p never samples?
3. Lower the cap of the sequence-level TIS until its bias equals the uncorrected one: what is left of its
   advantage in panel (b)?
4. In (c), raise `STALE_ITERATIONS` to 4: from which staleness on does the mismatch fill the clip band?
5. Write the weights yourself: `minippo exercise start off_policy_weights`, then `minippo exercise check
   off_policy_weights` (the truncated and masked weights at both levels, graded by the project's checks).

Questions: Q63, Q64.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import lesson_main, pyplot, save, time_line
from minippo.studies import exact as ex
from minippo.studies import off_policy as op
from minippo.studies.study import Study

V, L = 4, 5                     # lesson 22's space: 364 responses
TRAIN_STEPS, LR = 2, 5.0        # the trainer's policy: two exact ascent steps from a random table
OFFSET = 10.0                   # the logits' level where (a) rounds them: about the RLHF SFT policy's largest
                                # logit, which (c) measures and prints
N_BATCH = 32                    # responses per batch
CLIP_EPS = 0.2                  # PPO's band [0.8, 1.2] in (c)
STALE_ITERATIONS = 2            # (c): the PPO iterations the stale sampler lags
FIGURE_ESTIMATORS = ("uncorrected", "IS, token", "IS, sequence", "TIS C=1.2, sequence", "MIS C=2, sequence")
EXACT, MARGIN, Z_MAX = 1e-9, 0.05, 5.0


def sizes(quick: bool) -> dict:
    """Monte Carlo batches per (sampler, estimator), and the RLHF study's size."""
    return dict(batches=8) if quick else dict(batches=100)


def world(seed: int):
    space = ex.SequenceSpace.build(V, L)
    rng = np.random.default_rng(seed)
    reward = ex.length_reward(space)
    theta, stale = op.trained_world(space, ex.random_policy(space, rng, 1.0), reward, steps=TRAIN_STEPS, lr=LR)
    return space, reward, theta, op.sampler_tables(theta, stale, OFFSET), rng


def batch_curve(row: dict, grad_norm: float, ns) -> np.ndarray:
    """Relative error sqrt(bias^2 + tr Cov[g](n)) / ||grad J|| of one estimator for each batch size in ``ns``."""
    return np.sqrt(row["bias"] ** 2 + op.batch_variance(row["zeta1"], row["zeta2"], ns)) / grad_norm


def break_even(unc: dict, est: dict, grad_norm: float) -> int | None:
    """The smallest batch size (up to 10^6) from which the estimator's error is below the uncorrected one's."""
    ns = np.unique(np.geomspace(2, 1e6, 400).astype(int))
    better = batch_curve(est, grad_norm, ns) < batch_curve(unc, grad_norm, ns)
    return int(ns[np.argmax(better)]) if better.any() else None


def run(quick: bool = False, seed: int = 0) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick)
    space, reward, theta, tables, rng = world(seed)
    table = op.bias_table(space, theta, tables, reward, N_BATCH)
    mc = op.monte_carlo_check(space, theta, tables, reward, table, N_BATCH, sz["batches"], rng)
    stale = table["samplers"]["stale by 2"]["rows"]
    even = {e: break_even(stale["uncorrected"], stale[e], table["grad_norm"]) for e in op.ESTIMATORS}
    for s in table["samplers"].values():                 # the (S, V) means stay out of the results
        for row in s["rows"].values():
            row.pop("mean")
    study = Study(quick=quick, seed=seed)
    band = op.band_use(study, clip_eps=CLIP_EPS, max_new_tokens=study.config().max_new_tokens,
                       stale_iterations=STALE_ITERATIONS, seed=seed)
    r = {"quick": quick, "seed": seed, "sizes": sz, "N": space.N, "S": space.n_states, "a": table,
         "mc": {f"{k[0]} | {k[1]}": v for k, v in mc.items()}, "break_even": even, "c": band}
    r["claims"] = claims(r)
    r["time"] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    return r


# ---------------------------------------------------------------------------------------------- verdicts
# One function per claim: the outcome from the numbers ("holds", "does not hold", "not shown at this size").

def verdict_identity(rel_errors) -> str:
    """An exact equality: holds when every relative difference is below float64 rounding (EXACT)."""
    return "holds" if max(rel_errors) < EXACT else "does not hold"


def verdict_exact_less(a: float, b: float) -> str:
    """Exact numbers, "a < b": beyond MARGIN (relative) either way, else not shown at this size."""
    if a < (1 - MARGIN) * b:
        return "holds"
    return "does not hold" if a > (1 + MARGIN) * b else "not shown at this size"


def verdict_positive(x: float) -> str:
    """An exact relative bias that should stay: beyond MARGIN holds, below EXACT (rounding) does not hold."""
    if x > MARGIN:
        return "holds"
    return "does not hold" if x < EXACT else "not shown at this size"


def verdict_share_more(p: dict, q: dict) -> str:
    """Shares of tokens (binomial se): p's larger than q's beyond 2 se of the difference, smaller beyond it, or
    within it (not shown at this size)."""
    diff, se = p["outside"] - q["outside"], float(np.hypot(p["se"], q["se"]))
    if diff > 2 * se:
        return "holds"
    return "does not hold" if diff < -2 * se else "not shown at this size"


def verdict_any_outside(p: dict) -> str:
    """The mismatch alone moves tokens outside the band: holds with at least one token; with none the share is
    below 3 / n at 95% (not shown at this size)."""
    return "holds" if p["count"] > 0 else "not shown at this size"


def verdict_mc(mc: dict, batches: int) -> str:
    """The exact moments against Monte Carlo: every bias_z <= Z_MAX and every spread within 4 standard errors
    of its estimate (the spread of M batches has relative se about 1 / sqrt(2 (M - 1)))."""
    tol = 4 / np.sqrt(2 * (batches - 1))
    ok = all(v["z"] <= Z_MAX and abs(v["spread_ratio"] - 1) <= tol for v in mc.values())
    return "holds" if ok else "does not hold"


def claims(r) -> dict:
    """Each claim -> (outcome, the number it rests on, the rule), computed from ``r``."""
    s = r["a"]["samplers"]
    full_support = ("fp16 logits", "bf16 logits", "bf16 logits, truncated", "stale by 1", "stale by 2")
    truncating = ("top-p 0.9", "top-k 3")
    is_seq = [s[n]["rows"]["IS, sequence"]["rel_bias"] for n in full_support]
    min_trunc = min(row["rel_bias"] for n in truncating for row in s[n]["rows"].values())
    st2, bf = s["stale by 2"]["rows"], s["bf16 logits"]["rows"]
    c = r["c"]["rows"]
    stale_c = c[f"stale by {STALE_ITERATIONS} PPO iterations"]
    even = r["break_even"]["IS, sequence"]
    return {
        "(a) sequence-level IS is unbiased under every sampler that covers pi's support (rounding, staleness)":
            (verdict_identity(is_seq), max(is_seq), "every relative bias < 1e-9"),
        "(a) no weight removes the bias of a truncating sampler (top-p, top-k: missing support)":
            (verdict_positive(min_trunc), min_trunc, "smallest relative bias of any estimator under top-p / top-k "
                                                     "> 5%"),
        "(a) token-level IS (decoupled PPO's first step) removes only part of the staleness bias":
            (verdict_exact_less(st2["IS, token"]["rel_bias"], st2["uncorrected"]["rel_bias"])
             if st2["IS, token"]["rel_bias"] > EXACT else "does not hold", st2["IS, token"]["rel_bias"],
             "0 < its bias < 95% of the uncorrected bias, stale by 2"),
        "(a) truncation lowers the noise of sequence-level IS (C = 1.2, stale by 2)":
            (verdict_exact_less(st2["TIS C=1.2, sequence"]["spread"], st2["IS, sequence"]["spread"]),
             st2["TIS C=1.2, sequence"]["rel_spread"] - st2["IS, sequence"]["rel_spread"],
             "spread of a batch below 95% of IS's"),
        "(a) ... at the price of a bias (C = 1.2, stale by 2)":
            (verdict_exact_less(st2["IS, sequence"]["rel_bias"] + EXACT, st2["TIS C=1.2, sequence"]["rel_bias"]),
             st2["TIS C=1.2, sequence"]["rel_bias"], "its relative bias > IS's (0) by more than 5%"),
        f"(a) under bf16 rounding the uncorrected bias is below a tenth of one batch's noise (n = {N_BATCH})":
            (verdict_exact_less(bf["uncorrected"]["bias"], 0.1 * bf["uncorrected"]["spread"]),
             bf["uncorrected"]["bias"] / bf["uncorrected"]["spread"], "bias / spread < 0.1"),
        f"(a) stale by 2: unbiased IS beats no correction at n = {N_BATCH} (error of one batch)":
            (verdict_exact_less(st2["IS, sequence"]["rel_rmse"], st2["uncorrected"]["rel_rmse"]),
             even if even is not None else float("inf"), "relative error below 95% of the uncorrected one; "
                                                         "the number: the batch size from which IS is better"),
        "(a) the exact moments agree with Monte Carlo runs of the library's code":
            (verdict_mc(r["mc"], r["sizes"]["batches"]), max(v["z"] for v in r["mc"].values()),
             f"bias_z <= {Z_MAX:g} and spread within 4 se, every cell"),
        "(c) bf16-rounded logits alone move tokens outside the clip band at lr = 0":
            (verdict_any_outside(c["bf16 logits"]), c["bf16 logits"]["outside"], "at least one token"),
        "(c) bf16 rounding uses more of the band than fp16 rounding":
            (verdict_share_more(c["bf16 logits"], c["fp16 logits"]),
             c["bf16 logits"]["outside"] - c["fp16 logits"]["outside"], "difference of shares > 2 se"),
        f"(c) {STALE_ITERATIONS} PPO iterations of staleness use more of the band than bf16 rounding":
            (verdict_share_more(stale_c, c["bf16 logits"]), stale_c["outside"] - c["bf16 logits"]["outside"],
             "difference of shares > 2 se"),
        "(c) top-p 0.9 keeps every ratio in the band (pi / q is the kept mass, in [0.9, 1])":
            ("holds" if c["top-p 0.9"]["count"] == 0 else "does not hold", c["top-p 0.9"]["outside"],
             "no token outside [0.8, 1.2]"),
    }


def _cell(x) -> str:
    return f"{x:7.3f}" if x >= 1e-3 or x == 0 else f"{x:7.0e}"


def narrative(r: dict) -> str:
    a, names = r["a"], list(r["a"]["samplers"])
    short = [n.replace(" logits", "").replace(", truncated", " trunc") for n in names]
    out = [f"(a) A sequence space of {r['N']} responses (V = {V}, up to L = {L} tokens), a table of {r['S']} "
           f"states; the trainer's policy after {TRAIN_STEPS} exact ascent steps (lr {LR:g}); seed {r['seed']}. "
           f"||grad J|| = {a['grad_norm']:.4f}; batches of n = {a['n']} responses of the sampler; rounding at "
           f"logit level {OFFSET:g}. Exact (finite sums), relative to ||grad J||:"]
    head = f"    {'':<27}" + "".join(f"{s:>11}" for s in short)
    for title, key in (("bias ||E[g] - grad J|| / ||grad J||", "rel_bias"),
                       ("noise of one batch sqrt(tr Cov[g]) / ||grad J||", "rel_spread"),
                       ("share of tokens whose weight the bound changed", "changed_frac")):
        out += [f"  {title}:", head]
        if key == "rel_bias":
            kls = [_cell(a["samplers"][n]["kl"]) for n in names]
            out.append(f"    {'KL(mu || pi), nats':<27}" + "".join(f"{k:>11}" for k in kls))
        for est in op.ESTIMATORS:
            if key == "changed_frac" and op.ESTIMATORS[est][0] in ("none", "is"):
                continue
            out.append(f"    {est:<27}" + "".join(f"{_cell(a['samplers'][n]['rows'][est][key]):>11}" for n in names))
    zs = [v["z"] for v in r["mc"].values()]
    ratios = [v["spread_ratio"] for v in r["mc"].values()]
    out.append(f"  Monte Carlo check ({r['sizes']['batches']} batches of {a['n']} per cell, the library's code): "
               f"bias_z from {min(zs):+.1f} to {max(zs):+.1f}; measured / exact spread {min(ratios):.2f} to "
               f"{max(ratios):.2f}.")
    even = {e: n for e, n in r["break_even"].items() if e != "uncorrected"}
    out.append("  Stale by 2, the batch size from which each estimator's error (bias and noise) is below the "
               "uncorrected one's: " + "; ".join(f"{e} {'never' if n is None else n}" for e, n in even.items()) + ".")
    c = r["c"]
    out.append(f"\n(c) lr = 0, the RLHF SFT policy (mean largest logit {c['top_logit']:.1f}), one response per "
               f"prompt ({c['n_prompts']} prompts): ratio r = pi / mu of every token, band [{1 - c['clip_eps']:g}, "
               f"{1 + c['clip_eps']:g}]:")
    half = np.log(1 + c["clip_eps"])
    out.append(f"    {'sampler':<28} {'tokens':>6} {'outside +- se':>17} {'count':>6} {'mean |log r|':>13} "
               f"{'/ log(1+eps)':>12} {'max |log r|':>12} {'KL(mu||pi)':>11}")
    for name, row in c["rows"].items():
        out.append(f"    {name:<28} {row['n_tokens']:6d} {row['outside']:8.4f} +- {row['se']:6.4f} {row['count']:6d} "
                   f"{row['mean_abs_log_ratio']:13.2e} {row['mean_abs_log_ratio'] / half:12.1%} "
                   f"{row['max_abs_log_ratio']:12.2e} {row['mismatch_kl']:11.2e}")
    out.append("\nWhat holds here (computed from the numbers above; the rule in brackets):")
    for claim, (outcome, number, rule) in r["claims"].items():
        out.append(f"  - {claim}: {outcome} ({number:+.3g}; {rule})")
    out.append(time_line(r))
    return "\n".join(out)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(15, 10.5))
    (a, b), (c, d) = axes
    names = list(r["a"]["samplers"])
    x = np.arange(len(names))
    width = 0.8 / len(FIGURE_ESTIMATORS)
    for k, est in enumerate(FIGURE_ESTIMATORS):
        a.bar(x + (k - len(FIGURE_ESTIMATORS) / 2 + 0.5) * width,
              [r["a"]["samplers"][n]["rows"][est]["rel_bias"] for n in names], width, label=est)
    a.set_xticks(x, [n.replace(", ", "\n") for n in names], fontsize=9)
    a.set_yscale("symlog", linthresh=1e-3)
    top = max(r["a"]["samplers"][n]["rows"][e]["rel_bias"] for n in names for e in FIGURE_ESTIMATORS)
    a.set_ylim(0, 3 * top)
    a.set_ylabel("bias of the expected gradient / ||grad J|| (exact)")
    a.set_title("(a) How biased is each corrected gradient, per sampler?")
    a.legend(loc="upper left", fontsize=8)
    ns = np.unique(np.geomspace(2, 4096, 60).astype(int))
    rows, gn = r["a"]["samplers"]["stale by 2"]["rows"], r["a"]["grad_norm"]
    for est, ls in zip(FIGURE_ESTIMATORS, ("-", "-", "-", "--", ":")):     # MIS C=2 may coincide with IS
        b.plot(ns, batch_curve(rows[est], gn, ns), lw=2, ls=ls, label=est)
    b.axvline(N_BATCH, color="grey", ls=":", label=f"n = {N_BATCH} (the tables)")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("batch size n (responses)")
    b.set_ylabel("error of one batch sqrt(bias^2 + noise^2) / ||grad J||")
    b.set_title("(b) Sampler two updates stale: bias against noise")
    b.legend(loc="lower left", fontsize=8)
    crow = r["c"]["rows"]
    labels = list(crow)
    y = [crow[k]["outside"] for k in labels]
    c.bar(np.arange(len(labels)), y, yerr=[2 * crow[k]["se"] for k in labels], capsize=3, color="tab:red")
    ticks = [k.replace(", ", "\n").replace(" PPO", "\nPPO").replace(" (", "\n(") for k in labels]
    c.set_xticks(np.arange(len(labels)), ticks, fontsize=8, rotation=30, ha="right")
    c.set_ylabel(f"share of tokens with r outside [{1 - CLIP_EPS:g}, {1 + CLIP_EPS:g}] (bars: 2 se)")
    c.set_title("(c) lr = 0: what the mismatch alone uses of the clip band (RLHF SFT policy)")
    for k, lab in enumerate(labels):
        d.scatter(np.full(1, k), [crow[lab]["mean_abs_log_ratio"]], color="tab:blue", marker="o",
                  label="mean |log r|" if k == 0 else None)
        d.scatter(np.full(1, k), [crow[lab]["max_abs_log_ratio"]], color="tab:orange", marker="^",
                  label="max |log r|" if k == 0 else None)
    d.axhline(np.log(1 + CLIP_EPS), color="grey", ls="--", label=f"log(1 + eps) = {np.log(1 + CLIP_EPS):.3f}")
    d.set_yscale("symlog", linthresh=1e-4)
    d.set_ylim(bottom=0)
    d.set_xticks(np.arange(len(labels)), ticks, fontsize=8, rotation=30, ha="right")
    d.set_ylabel("|log r| = |log pi - log mu| (nats)")
    d.set_title("(d) The log-ratios behind (c)")
    d.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
