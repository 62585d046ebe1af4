r"""Lesson 24 - off_policy: when the sampler is not the trainer, each correction measured against
the exact gradient.

Every large RL system for language models samples with one engine and trains with another: an
inference engine that computes the logits in bf16, a top-p or top-k truncation at sampling, weights
a few updates stale in asynchronous RL. The tokens then come from a sampler $\mu$, not from the
policy $\pi$ whose gradient the update wants, and `logp_old` from the sampler is not the trainer's
log-probability of the same token. The libraries answer with importance weights
(`minippo.rl.off_policy`); this lesson measures how biased each corrected gradient still is, how
much of PPO's clip band the mismatch alone uses up, and (with `--full`) whether the correction
helps a training run.

Pipeline step: stage 3 of RLHF (PPO / GRPO), the first minibatch of an update: the rollout came
from a sampler, the trainer computes $\pi$ of the same tokens. (a) runs on lesson 22's enumerable
space, (c) on the main job's SFT policy (the first RLHF lesson builds it once into `runs/cache/`),
(b) on the verifiable-reward task of `minippo rlvr`.

Papers: the per-token ratio and its product over a response,

$$
\rho_t = \frac{\pi(a_t \mid s_t)}{\mu(a_t \mid s_t)}, \qquad
\rho(y) = \prod_t \rho_t = \frac{\pi(y)}{\mu(y)}, \qquad
\mathbb{E}_{y \sim \mu}\big[\rho(y) f(y)\big] = \mathbb{E}_{y \sim \pi}\big[f(y)\big],
$$

the last wherever $\mu > 0$ where $\pi > 0$ (importance sampling over whole responses). The
corrections weight each token's term of L^CLIP (PPO eq. (7)) by a constant $w_t$: none ($w = 1$),
IS ($w = \rho$), truncated IS ($w = \min(\rho, C)$), masked IS ($w = \rho$ where $\rho \le C$,
else 0), IcePop's two-sided mask ($w = \rho$ where $C_{low} \le \rho \le C$), each with the
token's $\rho_t$ or the response's $\rho(y)$. AReaL's decoupled PPO (Fu et al. 2025,
arXiv:2505.24298) weights the clipped term, whose ratio is taken against the proximal policy, by
$\pi_{prox}/\mu$: at the first minibatch ($\pi_\theta = \pi_{prox}$) its gradient is token-level
IS. The estimator measured in (a), at ratio 1 (nothing clipped), with RLOO advantages (Ahmadian et
al. 2024) over a batch of $n$ responses of $\mu$:

$$
g = \frac{1}{n} \sum_i \Big(R_i - \frac{1}{n-1}\sum_{j \ne i} R_j\Big)
\sum_t w_{i,t} \nabla \log \pi(y_{i,t} \mid s_{i,t}).
$$

Its expectation and its variance are finite sums over the space (a U-statistic: Hoeffding 1948),
so its bias $\|\mathbb{E}[g] - \nabla J\|$ against the exact gradient of $J = \mathbb{E}_\pi[R]$
and its noise $\sqrt{\mathrm{tr}\,\mathrm{Cov}[g]}$ are exact (`minippo.studies.off_policy`); a
Monte Carlo run of the library's own code (`rloo_advantages`, `off_policy_weights`,
`corrected_policy_loss`) checks them.

(a) The tabular policy of lesson 22 (4 tokens, responses of at most 5, 364 of them; the reward
    likes long responses), after two exact ascent steps, against seven samplers: its logits
    rounded to fp16, to bf16 (nearest, and truncated toward zero) at an offset the softmax ignores
    and the rounding does not (a language model's logits sit far from 0), top-p 0.9, top-k 3, and
    the policy one and two updates stale.
(b) `--full` only (10 training runs of `minippo rlvr`'s size): PPO against the verifier (`minippo rlvr`'s config, run by
    `minippo.rlhf.corrected`) with the sampler's logits rounded to bf16, or the sampler 2
    iterations stale, each without correction and with token-level TIS (C = 2, the weight
    pi_old / mu, as TRL applies it), and the on-policy run; each final policy's own pass@1 on
    held-out problems, over two seeds (`minippo.studies.off_policy_training`).
(c) The RLHF SFT policy at lr = 0: one response per evaluation prompt from each sampler of
    `minippo.rlhf.generate` (`logits_precision`, `top_p`, `top_k`) and from the SFT policy scored
    by the policy one and two PPO iterations later (a stale sampler); the share of tokens whose
    ratio $\pi/\mu$ is outside $[1 - \epsilon, 1 + \epsilon]$. Lesson 16's lr = 0 check is a
    miniature of it with no sampler at all: there the trainer's minibatch recompute differs from
    its own full-batch forward pass by float32 rounding only.

Only the LM head's logits are rounded here; a real bf16 engine rounds every activation, so (c)'s
rounding rows are a lower bound on an engine's mismatch. Every verdict is computed from the
numbers printed beside it, with its rule (`minippo.studies.verdicts`): exact numbers are equal
below a relative 1e-9 and differ when they differ by more than 5%; a share of tokens is compared
with its binomial standard error, a mean |log r| with its standard error over tokens, a pass@1
with the seed noise of paired differences (2 se); "not shown at this size" where the numbers
cannot decide.

The figure: (a) the relative bias of five estimators under each sampler; (b) under the sampler
two updates stale, the error of one batch (bias and noise, exact) against the batch size; (c) the
share of tokens outside the clip band at lr = 0 under each RLHF sampler, with 2 se; (d) the
log-ratios behind it.

Exercises:
1. In (a), set `OFFSET = 0`: the tabular logits sit near 0, where bf16 has many more digits. How
   much of the rounding samplers' bias is left? What does that say about a model whose logits are
   large?
2. Give the top-p sampler the sequence-level IS weight computed from the full softmax (`logp`
   instead of `logp_sampler`) as some engines report: what happens to the weights of the tokens
   top-p never samples?
3. Lower the cap of the sequence-level TIS until its bias equals the uncorrected one: what is left
   of its advantage in panel (b)?
4. In (c), raise `STALE_ITERATIONS` to 4: from which staleness on does the mismatch fill the clip
   band?
5. Write the weights yourself: `minippo exercise start off_policy_weights`, then `minippo exercise
   check off_policy_weights` (the truncated and masked weights at both levels, graded by the
   project's checks).

Questions: Q63, Q64, Q65.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (Verdict, by_key, comparison, identity, lesson_main, measured,
                             measurement, pyplot, save, time_line)
from minippo.studies import exact as ex
from minippo.studies import off_policy as op
from minippo.studies import off_policy_training as opt
from minippo.studies.study import Study
from minippo.studies.sweep_stats import compare_paired

V, L = 4, 5                     # lesson 22's space: 364 responses
TRAIN_STEPS, LR = 2, 5.0        # the trainer's policy: two exact ascent steps from a random table
OFFSET = 10.0                   # the logits' level where (a) rounds them: about the RLHF SFT
                                # policy's largest logit, which (c) measures and prints
N_BATCH = 32                    # responses per batch
CLIP_EPS = 0.2                  # PPO's band [0.8, 1.2] in (c)
STALE_ITERATIONS = 2            # (c): the PPO iterations the stale sampler lags
FIGURE_ESTIMATORS = ("uncorrected", "IS, token", "IS, sequence", "TIS C=1.2, sequence",
                     "MIS C=2, sequence")
EXACT, MARGIN, Z_MAX = 1e-9, 0.05, 5.0
FULL_SUPPORT = ("fp16 logits", "bf16 logits", "bf16 logits, truncated", "stale by 1", "stale by 2")
TRUNCATING = ("top-p 0.9", "top-k 3")
BAND_HALF = float(np.log(1 + CLIP_EPS))  # log(1 + eps): the band's upper half-width in log r
TOPP_LOG_BOUND = -np.log(0.9) + 1e-5    # |log r| of top-p 0.9: log(1 / kept mass), float32


def sizes(quick: bool) -> dict:
    """Monte Carlo batches per (sampler, estimator)."""
    return dict(batches=8) if quick else dict(batches=100)


def world(seed: int):
    space = ex.SequenceSpace.build(V, L)
    rng = np.random.default_rng(seed)
    reward = ex.length_reward(space)
    theta, stale = op.trained_world(space, ex.random_policy(space, rng, 1.0), reward,
                                    steps=TRAIN_STEPS, lr=LR)
    return space, reward, theta, op.sampler_tables(theta, stale, OFFSET), rng


def batch_curve(row: dict, grad_norm: float, ns) -> np.ndarray:
    """Relative error sqrt(bias^2 + tr Cov[g](n)) / ||grad J|| of one estimator for each batch
    size in ``ns``."""
    var = op.batch_variance(row["zeta1"], row["zeta2"], ns)
    return np.sqrt(row["bias"] ** 2 + var) / grad_norm


def break_even(unc: dict, est: dict, grad_norm: float) -> int | None:
    """The smallest batch size (up to 10^6) from which the estimator's error is below the
    uncorrected one's."""
    ns = np.unique(np.geomspace(2, 1e6, 400).astype(int))
    better = batch_curve(est, grad_norm, ns) < batch_curve(unc, grad_norm, ns)
    return int(ns[np.argmax(better)]) if better.any() else None


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick)
    space, reward, theta, tables, rng = world(seed)
    table = op.bias_table(space, theta, tables, reward, N_BATCH)
    mc = op.monte_carlo_check(space, theta, tables, reward, table, N_BATCH, sz["batches"], rng)
    stale = table["samplers"]["stale by 2"]["rows"]
    even = {e: break_even(stale["uncorrected"], stale[e], table["grad_norm"])
            for e in op.ESTIMATORS}
    for s in table["samplers"].values():                 # the (S, V) means stay out of the results
        for row in s["rows"].values():
            row.pop("mean")
    study = Study(quick=quick, seed=seed)
    band = op.band_use(study, clip_eps=CLIP_EPS, max_new_tokens=study.config().max_new_tokens,
                       stale_iterations=STALE_ITERATIONS, seed=seed)
    r = {"quick": quick, "full": full, "seed": seed, "sizes": sz, "N": space.N,
         "S": space.n_states, "a": table, "mc": {f"{k[0]} | {k[1]}": v for k, v in mc.items()},
         "break_even": even, "c": band}
    if full:                                             # (b): two seeds of five training runs
        r["b"] = opt.training_comparison(quick, (seed, seed + 1))
    r["time"] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    return r


# ------------------------------------------------------------------------------------ verdicts

def verdicts(r) -> list[Verdict]:
    """Each claim judged from the numbers of ``r``: equalities of exact (enumerated) numbers are
    identities; exact numbers against a threshold and the Monte Carlo check are measurements;
    shares of tokens and mean log-ratios, with their standard errors, are measurements and
    comparisons; (b)'s pass@1 (``--full``) are comparisons within the seed noise."""
    s = r["a"]["samplers"]
    rel = lambda n, e, k="rel_bias": s[n]["rows"][e][k]                   # noqa: E731
    cover = max(rel(n, "IS, sequence") for n in FULL_SUPPORT)
    trunc = min(row["rel_bias"] for n in TRUNCATING for row in s[n]["rows"].values())
    st2, bf = s["stale by 2"]["rows"], s["bf16 logits"]["rows"]
    c = r["c"]["rows"]
    stale_c = c[f"stale by {STALE_ITERATIONS} PPO iterations"]
    mc = r["mc"]
    z_max = max(v["z"] for v in mc.values())
    spread_dev = max(abs(v["spread_ratio"] - 1) for v in mc.values())
    mc_tol = 4 / np.sqrt(2 * (r["sizes"]["batches"] - 1))
    tok, unc = st2["IS, token"]["rel_bias"], st2["uncorrected"]["rel_bias"]
    topp, control = c["top-p 0.9"], c["same sampler (control)"]
    bf16, fp16 = c["bf16 logits"], c["fp16 logits"]
    out = [
        identity("seq_is_unbiased", "(a) Sequence-level IS is unbiased under every sampler that "
                 "covers pi's support (fp16 / bf16 rounding, staleness).", cover < EXACT,
                 "holds when every relative bias ||E[g] - grad J|| / ||grad J|| (exact, "
                 f"enumerated) is below {EXACT:g}", {"largest relative bias": cover},
                 f"largest over {len(FULL_SUPPORT)} samplers {cover:.1e}"),
        measurement("truncating_biased", "(a) No weight removes the bias of a truncating sampler "
                    "(top-p, top-k: pi has responses mu never draws).", trunc, MARGIN, ">",
                    "smallest relative bias of any estimator under top-p 0.9 / top-k 3",
                    fmt=".3f"),
        measured("token_is_partial", "(a) Token-level IS (decoupled PPO's first step) removes "
                 "only part of the staleness bias (stale by 2).",
                 EXACT < tok < (1 - MARGIN) * unc,
                 f"holds when {EXACT:g} < its relative bias < {1 - MARGIN:g} x the uncorrected one",
                 {"IS, token": tok, "uncorrected": unc},
                 f"relative bias {tok:.3f} against {unc:.3f} uncorrected"),
        measurement("tis_less_noise", "(a) Truncation (C = 1.2) lowers the noise of "
                    "sequence-level IS (stale by 2).",
                    st2["TIS C=1.2, sequence"]["spread"] / st2["IS, sequence"]["spread"],
                    1 - MARGIN, "<", "spread of a batch, TIS / IS", fmt=".3f"),
        measurement("tis_biased", "(a) ... at the price of a bias (C = 1.2, stale by 2; IS has "
                    "none).", st2["TIS C=1.2, sequence"]["rel_bias"], MARGIN, ">",
                    "relative bias of TIS C=1.2", fmt=".3f"),
        measurement("bf16_bias_below_noise", "(a) Under bf16 rounding the uncorrected bias is "
                    f"below a tenth of one batch's noise (n = {N_BATCH}).",
                    bf["uncorrected"]["bias"] / bf["uncorrected"]["spread"], 0.1, "<",
                    "bias / spread of a batch", fmt=".2g"),
        measurement("noise_beats_bias_stale", "(a) Stale by 2, at n = "
                    f"{N_BATCH}: the uncorrected gradient has a smaller error of one batch than "
                    "unbiased sequence IS (IS adds more noise than the bias it removes).",
                    st2["uncorrected"]["rel_rmse"] / st2["IS, sequence"]["rel_rmse"],
                    1 - MARGIN, "<", "error ratio uncorrected / IS", fmt=".3f",
                    numbers={"batch size from which IS is better":
                             r["break_even"]["IS, sequence"]}),
        measured("mc_agrees", "(a) The exact moments agree with Monte Carlo runs of the library's "
                 "code (off_policy_weights, corrected_policy_loss).",
                 z_max <= Z_MAX and spread_dev <= mc_tol,
                 f"holds when every cell's bias_z <= {Z_MAX:g} and its measured / exact spread is "
                 f"within 4 s.e. ({mc_tol:.3f}) of 1",
                 {"max bias_z": z_max, "max |spread ratio - 1|": spread_dev},
                 f"{len(mc)} cells: bias_z up to {z_max:+.1f}, spread ratio off by "
                 f"{spread_dev:.3f} at most"),
        identity("control_is_bitwise", "(c) With no mismatch option the sampler's log mu is the "
                 "trainer's log pi, bitwise.", control["max_abs_log_ratio"] == 0.0,
                 "holds when max |log r| of the control is exactly 0.0",
                 {"max |log r|": control["max_abs_log_ratio"]}),
        identity("topp_in_band", "(c) Top-p 0.9 keeps every ratio in the band: pi / q is the kept "
                 "mass, in [0.9, 1].",
                 topp["count"] == 0 and topp["max_abs_log_ratio"] <= TOPP_LOG_BOUND,
                 f"holds when no token is outside [{1 - CLIP_EPS:g}, {1 + CLIP_EPS:g}] and "
                 "max |log r| <= -log 0.9 + 1e-5 (float32)",
                 {"tokens outside": topp["count"], "max |log r|": topp["max_abs_log_ratio"]}),
        band_measurement("bf16_moves_tokens", "(c) bf16-rounded logits alone move tokens outside "
                         "the clip band at lr = 0.", bf16),
        band_measurement("stale_moves_tokens", f"(c) {STALE_ITERATIONS} PPO iterations of "
                         "staleness alone move tokens outside the clip band.", stale_c),
        comparison("bf16_more_than_fp16", "(c) bf16 rounding moves the ratios more than fp16 "
                   "rounding (mean |log r| over tokens).", log_ratio_diff(fp16, bf16), expect=+1,
                   labels=("fp16 logits", "bf16 logits"), quantity="mean |log r|",
                   values=(fp16["mean_abs_log_ratio"], bf16["mean_abs_log_ratio"]), fmt="+.2e",
                   noise="token", words=("larger", "smaller")),
        measurement("bf16_small_share_of_band", "(c) bf16 rounding alone uses less than a tenth "
                    "of the band's half-width on average (mean |log r| / log(1 + eps)).",
                    bf16["mean_abs_log_ratio"] / BAND_HALF, 0.1, "<",
                    "mean |log r| / log(1 + eps)", se=bf16["mean_abs_log_ratio_se"] / BAND_HALF,
                    noise="token", fmt=".4f"),
        comparison("stale_more_than_bf16", f"(c) {STALE_ITERATIONS} PPO iterations of staleness "
                   "use more of the band than bf16 rounding.", share_diff(bf16, stale_c),
                   expect=+1, labels=("bf16 logits", f"stale by {STALE_ITERATIONS}"),
                   quantity="share outside the band",
                   values=(bf16["outside"], stale_c["outside"]), fmt="+.4f",
                   noise="binomial (tokens)", words=("larger", "smaller")),
    ]
    if "b" in r:
        out += training_verdicts(r["b"])
    return out


def training_verdicts(b: dict) -> list[Verdict]:
    """(b): pass@1 of the final policies, paired by seed (each seed's runs share the SFT policy).
    The noise is the larger of the paired seeds' standard error and the evaluation's: given the
    problems, one pass@1 over P problems x n answers has a sampling variance of at most
    p (1 - p) / (P n) (the per-problem rates' binomial variances, averaged, are below it)."""
    runs = {name: np.array([x["pass@1"] for x in rows]) for name, rows in b["runs"].items()}
    draws = b["n_eval"] * b["n_samples"]

    def paired(key, claim, a, z, expect):
        c = dict(compare_paired(runs[a], runs[z]))
        var = lambda p: p * (1 - p) / draws                                  # noqa: E731
        se_eval = float(np.sqrt(np.sum(var(runs[a]) + var(runs[z])))) / len(runs[a])
        c["se"] = max(c["se"], se_eval)
        return comparison(key, claim, c, expect=expect, labels=(a, z), quantity="pass@1",
                          values=(float(np.mean(runs[a])), float(np.mean(runs[z]))),
                          noise="paired seeds (or, when larger, the evaluation's sampling)",
                          numbers={"seed se": compare_paired(runs[a], runs[z])["se"],
                                   "evaluation se bound": se_eval})

    return [
        paired("stale_hurts", "(b) A sampler 2 iterations stale, uncorrected, lowers pass@1.",
               "on-policy", "stale by 2, uncorrected", -1),
        paired("stale_tis_helps", "(b) Under 2-step staleness, TIS (C = 2) raises pass@1 over no "
               "correction.", "stale by 2, uncorrected", "stale by 2, TIS C=2", +1),
        paired("bf16_hurts", "(b) bf16-rounded sampling, uncorrected, lowers pass@1.",
               "on-policy", "bf16 logits, uncorrected", -1),
        paired("bf16_tis_helps", "(b) Under bf16-rounded sampling, TIS (C = 2) raises pass@1 over "
               "no correction.", "bf16 logits, uncorrected", "bf16 logits, TIS C=2", +1),
    ]


def share_diff(p: dict, q: dict) -> dict:
    """q's share of tokens outside the band minus p's, and its binomial standard error."""
    return {"diff": q["outside"] - p["outside"], "se": float(np.hypot(p["se"], q["se"]))}


def log_ratio_diff(p: dict, q: dict) -> dict:
    """q's mean |log r| minus p's, and its standard error (independent samples of tokens)."""
    return {"diff": q["mean_abs_log_ratio"] - p["mean_abs_log_ratio"],
            "se": float(np.hypot(p["mean_abs_log_ratio_se"], q["mean_abs_log_ratio_se"]))}


def band_measurement(key: str, claim: str, row: dict) -> Verdict:
    """A share of tokens outside the band against 0, with its binomial standard error: holds from
    about 4 tokens on; with none the share is below 3 / n at 95% (not shown at this size)."""
    n, k = row["n_tokens"], row["count"]
    seen = (f"share < {3 / n:.4f} at 95%" if k == 0
            else f"share {row['outside']:.4f} +- {row['se']:.4f}")
    return measurement(key, claim, row["outside"], 0.0, ">", "share outside the band",
                       se=row["se"], noise="binomial (tokens)", fmt=".4f",
                       numbers={"tokens": n, "outside": k},
                       because=f"{k} of {n} tokens outside ({seen})")


def _cell(x) -> str:
    return f"{x:7.3f}" if x >= 1e-3 or x == 0 else f"{x:7.0e}"


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per cell: the Monte Carlo
    check's smallest and largest bias_z and measured / exact spread, and (c)'s fewest and most tokens."""
    zs = [v["z"] for v in r["mc"].values()]
    ratios = [v["spread_ratio"] for v in r["mc"].values()]
    tokens = [row["n_tokens"] for row in r["c"]["rows"].values()]
    return {"mc_z_min": min(zs), "mc_z_max": max(zs), "mc_spread_ratio_min": min(ratios),
            "mc_spread_ratio_max": max(ratios), "band_tokens_min": min(tokens), "band_tokens_max": max(tokens)}


def narrative(r: dict) -> str:
    a, names = r["a"], list(r["a"]["samplers"])
    short = [n.replace(" logits", "").replace(", truncated", " trunc") for n in names]
    out = [f"(a) A sequence space of {r['N']} responses (V = {V}, up to L = {L} tokens), a table "
           f"of {r['S']} states; the trainer's policy after {TRAIN_STEPS} exact ascent steps "
           f"(lr {LR:g}); seed {r['seed']}. ||grad J|| = {a['grad_norm']:.4f}; batches of "
           f"n = {a['n']} responses of the sampler; rounding at logit level {OFFSET:g}. Exact "
           "(finite sums), relative to ||grad J||:"]
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
            cells = [_cell(a["samplers"][n]["rows"][est][key]) for n in names]
            out.append(f"    {est:<27}" + "".join(f"{x:>11}" for x in cells))
    zs = [v["z"] for v in r["mc"].values()]
    ratios = [v["spread_ratio"] for v in r["mc"].values()]
    out.append(f"  Monte Carlo check ({r['sizes']['batches']} batches of {a['n']} per cell, the "
               f"library's code): bias_z from {min(zs):+.1f} to {max(zs):+.1f}; measured / exact "
               f"spread {min(ratios):.2f} to {max(ratios):.2f}.")
    even = {e: n for e, n in r["break_even"].items() if e != "uncorrected"}
    out.append("  Stale by 2, the batch size from which each estimator's error (bias and noise) "
               "is below the uncorrected one's: "
               + "; ".join(f"{e} {'never' if n is None else n}" for e, n in even.items()) + ".")
    if "b" in r:
        out += training_table(r["b"])
    c = r["c"]
    out.append(f"\n(c) lr = 0, the RLHF SFT policy (mean largest logit {c['top_logit']:.1f}), one "
               f"response per prompt ({c['n_prompts']} prompts): ratio r = pi / mu of every "
               f"token, band [{1 - c['clip_eps']:g}, {1 + c['clip_eps']:g}]:")
    out.append(f"    {'sampler':<28} {'tokens':>6} {'outside +- se':>17} {'count':>6} "
               f"{'mean |log r|':>13} {'/ log(1+eps)':>12} {'max |log r|':>12} "
               f"{'KL(mu||pi)':>11}")
    for name, row in c["rows"].items():
        out.append(f"    {name:<28} {row['n_tokens']:6d} {row['outside']:8.4f} +- "
                   f"{row['se']:6.4f} {row['count']:6d} {row['mean_abs_log_ratio']:13.2e} "
                   f"{row['mean_abs_log_ratio'] / BAND_HALF:12.1%} "
                   f"{row['max_abs_log_ratio']:12.2e} {row['mismatch_kl']:11.2e}")
    if "b" not in r:
        out.append("\n(b) The training comparison runs with --full (minutes of CPU).")
    out.append("\nWhat holds here (computed from the numbers above):")
    out += [v.render("  ") for v in by_key(verdicts(r)).values()]
    out.append(time_line(r))
    return "\n".join(out)


def training_table(b: dict) -> list[str]:
    """(b)'s table: pass@1 of each run on each seed, and the rollouts' pass rate."""
    seeds = b["seeds"]
    out = [f"\n(b) PPO against the verifier, {b['iterations']} iterations x {b['batch_size']} "
           f"answers; pass@1 of the final policy on {b['n_eval']} held-out problems x "
           f"{b['n_samples']} answers (its own samples), seeds {', '.join(map(str, seeds))}; "
           "the last 5 rollouts' pass rate (the sampler's answers) in brackets:",
           f"    {'run':<28}" + "".join(f"{'seed ' + str(s):>18}" for s in seeds)]
    out.append(f"    {'SFT policy':<28}" + "".join(f"{x:18.3f}" for x in b["sft_pass@1"]))
    for name, rows in b["runs"].items():
        out.append(f"    {name:<28}" + "".join(f"{x['pass@1']:9.3f} ({x['train_pass_rate']:.3f})"
                                               for x in rows))
    return out


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(15, 10.5))
    (a, b), (c, d) = axes
    sam = r["a"]["samplers"]
    names = list(sam)
    x = np.arange(len(names))
    width = 0.8 / len(FIGURE_ESTIMATORS)
    for k, est in enumerate(FIGURE_ESTIMATORS):
        a.bar(x + (k - len(FIGURE_ESTIMATORS) / 2 + 0.5) * width,
              [sam[n]["rows"][est]["rel_bias"] for n in names], width, label=est)
    a.set_xticks(x, [n.replace(", ", "\n") for n in names], fontsize=9)
    a.set_yscale("symlog", linthresh=1e-3)
    top = max(sam[n]["rows"][e]["rel_bias"] for n in names for e in FIGURE_ESTIMATORS)
    a.set_ylim(0, 3 * top)
    a.set_ylabel("bias of the expected gradient / ||grad J|| (exact)")
    cover = max(sam[n]["rows"]["IS, sequence"]["rel_bias"] for n in FULL_SUPPORT)
    trunc = min(row["rel_bias"] for n in TRUNCATING for row in sam[n]["rows"].values())
    a.set_title(f"(a) Sequence IS: bias {cover:.0e} wherever mu covers pi;\nunder top-p / top-k "
                f"every estimator keeps >= {trunc:.0%} of ||grad J||")
    a.legend(loc="upper left", fontsize=8)
    ns = np.unique(np.geomspace(2, 4096, 60).astype(int))
    rows, gn = sam["stale by 2"]["rows"], r["a"]["grad_norm"]
    for est, ls in zip(FIGURE_ESTIMATORS, ("-", "-", "-", "--", ":")):   # MIS C=2 may equal IS
        b.plot(ns, batch_curve(rows[est], gn, ns), lw=2, ls=ls, label=est)
    b.axvline(N_BATCH, color="grey", ls=":", label=f"n = {N_BATCH} (the tables)")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("batch size n (responses)")
    b.set_ylabel("error of one batch sqrt(bias^2 + noise^2) / ||grad J||")
    even = r["break_even"]["IS, sequence"]
    b.set_title("(b) Sampler two updates stale: sequence IS beats no correction "
                + ("at no batch size" if even is None else f"from n = {even}"))
    b.legend(loc="lower left", fontsize=8)
    crow = r["c"]["rows"]
    labels = list(crow)
    y = [crow[k]["outside"] for k in labels]
    c.bar(np.arange(len(labels)), y, yerr=[2 * crow[k]["se"] for k in labels], capsize=3,
          color="tab:red")
    ticks = [k.replace(", ", "\n").replace(" PPO", "\nPPO").replace(" (", "\n(") for k in labels]
    c.set_xticks(np.arange(len(labels)), ticks, fontsize=8, rotation=30, ha="right")
    c.set_ylabel(f"share of tokens with r outside [{1 - CLIP_EPS:g}, {1 + CLIP_EPS:g}] "
                 "(bars: 2 se)")
    bf, st = crow["bf16 logits"], crow[f"stale by {STALE_ITERATIONS} PPO iterations"]
    c.set_title(f"(c) lr = 0, RLHF SFT policy: bf16 moves {bf['count']} of {bf['n_tokens']} "
                f"tokens out of the band,\nstale by {STALE_ITERATIONS} iterations "
                f"{st['count']} of {st['n_tokens']} ({st['outside']:.1%})")
    for k, lab in enumerate(labels):
        d.scatter(np.full(1, k), [crow[lab]["mean_abs_log_ratio"]], color="tab:blue",
                  marker="o", label="mean |log r|" if k == 0 else None)
        d.scatter(np.full(1, k), [crow[lab]["max_abs_log_ratio"]], color="tab:orange",
                  marker="^", label="max |log r|" if k == 0 else None)
    d.axhline(BAND_HALF, color="grey", ls="--", label=f"log(1 + eps) = {BAND_HALF:.3f}")
    d.set_yscale("symlog", linthresh=1e-4)
    d.set_ylim(0, 2 * max(BAND_HALF, max(crow[k]["max_abs_log_ratio"] for k in labels)))
    d.set_xticks(np.arange(len(labels)), ticks, fontsize=8, rotation=30, ha="right")
    d.set_ylabel("|log r| = |log pi - log mu| (nats)")
    use = {k: crow[k]["mean_abs_log_ratio"] / BAND_HALF for k in labels}
    d.set_title(f"(d) The log-ratios behind (c): on average bf16 uses {use['bf16 logits']:.1%} "
                f"of log(1 + eps),\nstale by {STALE_ITERATIONS} iterations "
                f"{use[f'stale by {STALE_ITERATIONS} PPO iterations']:.0%}")
    d.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
