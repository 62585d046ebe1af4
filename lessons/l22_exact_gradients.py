"""Lesson 22 - exact_gradients: every estimator the field argues about, measured against the true gradient.

Pipeline step: the update of stage 3 (RLHF PPO / GRPO), on a sequence space small enough to list: 4
tokens (two right answers 0 and 1, a wrong answer 2, EOS) and responses of at most 5 tokens, 364
responses in all. The policy is a table of logits per prefix (121 states), so the objective J = sum_y
pi(y) R(y), its gradient, KL(pi || pi_ref) and its gradient are finite sums in float64
(``minippo.studies.exact``; the update variants in ``minippo.studies.exact_updates``), and each estimator
below is the library's code (``clipped_policy_loss``, ``kl_ref_loss``, ``per_token_rewards``, ``gae``,
``grpo_advantages``) run on sampled batches: its bias is measured against the exact gradient (with its
standard error and the number of samples), its variance over repeated batches, and its expectation,
wherever it is a finite sum, exactly.

(a) The KL as a gradient. Schulman's (2020, "Approximating KL divergence") estimators of KL(pi || pi_ref)
    from a token a ~ pi, with x = log pi(a) - log pi_ref(a):

        k1 = x        k2 = x^2 / 2        k3 = e^{-x} - 1 + x

    In the REWARD (r_t = -beta k_t, a number; Ziegler et al. 2019, arXiv:1909.08593) the policy gradient
    of the KL to go, E_y[sum_t grad log pi_t sum_{t' >= t} k1_t'], is exactly grad KL(pi || pi_ref) of
    whole responses (on-policy). In the LOSS (GRPO: beta * k3, DeepSeekMath arXiv:2402.03300 eq. (4))
    the estimate is differentiated as it stands, E_y[sum_t dk/dx grad log pi_t], which is 0 for k1,
    sum_s P(s) grad KL(pi_s || ref_s) for k2 and sum_s P(s) grad KL(ref_s || pi_s) for k3: partial
    gradients that miss how the policy changes WHICH states s are visited (Tang & Munos 2025, "On a few
    pitfalls in KL divergence gradient estimation for RL", arXiv:2506.09477). Each is measured on-policy
    and after three exact updates (samples from the previous policy, as every minibatch after the first).
(b) The loss aggregation of L^CLIP's token terms l_{i,t} over G responses o_i (verl ``loss_agg_mode``,
    TRL ``loss_type``):

        GRPO (DeepSeekMath eq. (3))   1/G sum_i 1/|o_i| sum_t l_{i,t}        "seq-mean-token-mean"
        DAPO (arXiv:2503.14476)       1/sum_i |o_i| sum_i sum_t l_{i,t}      "token-mean"
        Dr. GRPO (arXiv:2503.20783)   1/(G L_max) sum_i sum_t l_{i,t}        "seq-mean-token-sum-norm"

    Dr. GRPO (Liu et al. 2025) also drops GRPO's division of A_i = R_i - mean(R) by the group's std; its
    abstract reports that GRPO's optimisation bias "artificially increases response length (especially for
    incorrect outputs)". Here the reward is decided by the first token, so the exact grad J does not touch
    an answer's length: any push on it is the aggregation's. Measured: the push of one update on the mean
    length of wrong and right answers (exact where a finite sum, Monte Carlo mean +- se otherwise), and a
    short training run.
(c) Clip-higher: L^CLIP with the band [1 - eps_low, 1 + eps_high] = [0.8, 1.28] instead of [0.8, 1.2]
    (DAPO's "Clip-Higher", proposed against the entropy collapse they observed: the upper clip bounds how
    far a low-probability "exploration" token can rise). The entropy after a few PPO iterations, with the
    exact expectation of each update (no sampling noise) and with sampled batches (paired seeds), and the
    probability of the rare right answer the mechanism is about.
(d) The ratio: PPO's per-token r_t, GSPO's length-normalised sequence ratio
    s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|), clipped per response (Zheng et al. 2025, arXiv:2507.18071,
    eq. (5), with the band 3e-4 / 4e-4; the paper reports clipping two orders of magnitude more tokens than
    GRPO), and the whole-response ratio pi(y)/pi_old(y) (importance sampling: unbiased), after five exact
    updates: the error of each expected gradient against the true grad J at the current policy, the spread
    of a batch, and how many tokens each band clips.

Every verdict is computed from the numbers printed beside it: an exact (finite-sum) equality holds when the
relative difference is below 1e-9 (float64 rounding), a Monte Carlo one when ``bias_z`` (the squared error
of the mean in standard deviations of the measured noise) is at most 5, a difference of seed means when it is
beyond 2 standard errors (else: not shown at this size); the last block lists which published claims hold
here.

The figure (the committed one is the default run, seed 0, ``python -m lessons.l22_exact_gradients``): (a) the
relative bias of each KL estimator's gradient, on- and off-policy, with 2 se bars; (b) the mean length of
wrong answers over a training run under the three aggregations; (c) the entropy over PPO iterations with and
without clip-higher; (d) the error and spread of the three ratios.

Exercises:
1. In (a), shrink the distance between pi and pi_ref (``PERTURBATION`` = 0.1): do the partial gradients
   of k2 and k3 in the loss become good estimates of grad KL? Why do the two KL directions agree to
   first order?
2. In (b), use GRPO's std-normalised advantage for the training run (``scale=True``): which of
   Dr. GRPO's two fixes moves the wrong answers' length here, and why can the std not matter with one
   question?
3. In (c), compare p(rare right answer) under the two bands. Print which first tokens clip in
   ``exact_updates.population_ppo`` (``clip_cases`` of its ratios): whose ratio reaches 1 + eps_high
   first, and why is a tabular softmax's rare token slow to get there (its logit's own gradient is
   proportional to its probability)? Make the common right answer near-certain (``ROOT[0] = 4.0``) and
   measure again.
4. In (d), give GSPO PPO's band (0.2): how many tokens does it clip now, and how far is its expected
   gradient from grad J?

Questions: Q38.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (FAILS, HOLDS, NOT_SHOWN, Verdict, comparison, decide, identity, lesson_main, measurement,
                             pyplot, save)
from minippo.rl.masked import LOSS_AGGS
from minippo.studies import exact as ex
from minippo.studies import exact_updates as up

V, L = 4, 5                                 # tokens 0, 1 (right), 2 (wrong), 3 (EOS); at most 5 tokens
RIGHT, WRONG = (0, 1), 2
ROOT = np.array([1.0, -1.5, 1.0, -2.0])     # first-token logits: right answer 1 is rare, empty answers rarer
PERTURBATION = 0.5                          # pi = pi_ref + this much noise on every logit
N_BATCH, GROUP = 32, 8                      # responses per Monte Carlo batch; GRPO group size
AGG_NAMES = {"token-mean": "token mean (DAPO)", "seq-mean-token-mean": "1/|o| per response (GRPO)",
             "seq-mean-token-sum-norm": "constant normaliser (Dr. GRPO)"}
RATIO_ROWS = (("token ratio", 1e9, None, "token ratio, no clip"),
              ("sequence ratio (GSPO)", 1e9, None, "sequence ratio, no clip"),
              ("whole-response ratio", 1e9, None, "whole-response ratio, no clip"),
              ("token ratio", 0.2, None, "token ratio, band 0.2 (PPO)"),
              ("sequence ratio (GSPO)", 3e-4, 4e-4, "sequence ratio, band 3e-4/4e-4 (GSPO)"))


def sizes(quick: bool) -> dict:
    """Monte Carlo batches and run lengths: quick (smoke test) or default (the lesson's)."""
    if quick:
        return dict(batches=40, direction_batches=40, train_seeds=2, train_iterations=10, clip_seeds=3,
                    clip_iterations=6)
    return dict(batches=300, direction_batches=300, train_seeds=4, train_iterations=40, clip_seeds=12,
                clip_iterations=15)


def world(seed: int):
    """The space, pi_ref (random table, first-token logits ROOT), pi (pi_ref perturbed), and the start of
    the training runs (pi with ROOT restored)."""
    space = ex.SequenceSpace.build(V, L)
    rng = np.random.default_rng(seed)
    ref = ex.random_policy(space, rng, 0.8)
    ref[0] = ROOT
    theta = ref + PERTURBATION * rng.standard_normal(ref.shape)
    start = theta.copy()
    start[0] = ROOT
    return space, ref, theta, start, rng


# ---------------------------------------------------------------------------------------------- verdicts

Z_MAX = 5.0            # a Monte Carlo mean "estimates" a target when exact.bias_z <= Z_MAX (its squared error within
                       # 5 measured standard deviations of what sampling noise alone gives)
EXACT = 1e-9           # exact (finite-sum) numbers: a relative difference below this is float64 rounding, i.e. equal


def kl_unbiased(row) -> bool:
    """Does the estimator's expectation equal grad KL? Exactly when its expectation is a finite sum (relative
    difference < EXACT), else by Monte Carlo (``bias_z`` <= Z_MAX)."""
    if row["exact_rel_bias"] is not None:
        return row["exact_rel_bias"] < EXACT
    return row["z"] <= Z_MAX


def push(mu, se) -> str:
    """A Monte Carlo mean against its standard error, by the course's rule (2 s.e.)."""
    return {HOLDS: "lengthens", FAILS: "shortens", NOT_SHOWN: "no push beyond noise"}[decide(mu, se, +1)]


MARGIN = 0.05          # exact numbers: "A is smaller than B" needs A < (1 - MARGIN) B, not a rounding-sized win
ENTROPY_MARGIN = 0.01  # nats: an exact entropy difference smaller than this is no difference


# ---------------------------------------------------------------------------------------------- (a)-(d)

def kl_estimators(space, ref, theta, sz, rng) -> dict:
    """(a): every KL estimator, on-policy and after three exact ascent steps on J - 0.1 KL."""
    R = ex.right_wrong_reward(space, RIGHT)
    moved = theta.copy()
    for _ in range(3):
        moved = moved + 1.0 * (ex.objective_gradient(space, moved, R) - 0.1 * ex.kl_gradient(space, moved, ref))
    out = {}
    for regime, now in (("on-policy", theta), ("off-policy", moved)):
        target = ex.kl_gradient(space, now, ref)
        scale = np.linalg.norm(target)
        per_state = {d: ex.per_state_kl_gradient(space, now, ref, d) for d in ("forward", "reverse")}
        rows = {}
        for est in ex.KL_ESTIMATORS:
            mc = ex.moments(lambda r: ex.kl_gradient_estimate(space, est, r, now, theta, ref),
                            lambda q: ex.sample(space, theta, N_BATCH, q), sz["batches"], rng)
            exact = ex.expected_kl_gradient_estimate(space, est, now, theta, ref)
            bias = np.linalg.norm(mc["mean"] - target)
            rel = (lambda g: None if exact is None else float(np.linalg.norm(exact - g) / scale))   # noqa: E731
            rows[est] = {"mc_bias": float(bias), "se": float(np.sqrt((mc["se"] ** 2).sum())),
                         "z": ex.bias_z(mc, target), "rel_bias": float(bias / scale), "spread": mc["spread"] / scale,
                         "exact_rel_bias": rel(target), "exact_norm": rel(0.0),
                         "exact_vs_forward": rel(per_state["forward"]), "exact_vs_reverse": rel(per_state["reverse"])}
        out[regime] = {"rows": rows, "kl": ex.kl(space, now, ref), "grad_norm": float(scale),
                       "kl_old_now": ex.kl(space, theta, now), "samples": N_BATCH * sz["batches"]}
    return out


def aggregations(space, start, sz, seed) -> dict:
    """(b): the push of each aggregation on the answers' lengths, then a short training run."""
    R = ex.right_wrong_reward(space, RIGHT)
    grads = {"wrong": ex.answer_length_gradient(space, start, WRONG),
             "right": ex.answer_length_gradient(space, start, 0), "J": ex.objective_gradient(space, start, R)}
    rng = np.random.default_rng(seed + 1)
    directions = {}
    for agg in LOSS_AGGS:
        for scale in (False, True):
            proj = []
            for _ in range(sz["direction_batches"]):
                u, _ = up.group_update(space, ex.sample(space, start, 4 * GROUP, rng), start, start, R, GROUP,
                                       loss_agg=agg, scale=scale)
                proj.append([float((u * g).sum()) for g in grads.values()])
            proj = np.array(proj)
            e = None if scale else up.expected_group_update(space, start, R, GROUP, agg)
            se = proj.std(0, ddof=1) / np.sqrt(len(proj))
            directions[(agg, scale)] = {
                "mean": dict(zip(grads, proj.mean(0))), "se": dict(zip(grads, se)),
                "exact": None if e is None else {k: float((e * g).sum()) for k, g in grads.items()}}
    runs = {agg: [up.train(space, start, R, iterations=sz["train_iterations"], groups=4, group_size=GROUP, lr=2.0,
                           rng=np.random.default_rng(1000 * seed + s), loss_agg=agg)[1]
                  for s in range(sz["train_seeds"])] for agg in LOSS_AGGS}
    drift = {agg: np.array([[h[-1][k] - h[0][k] for k in ("length_wrong", "length_right")] + [h[-1]["J"]]
                            for h in hs]) for agg, hs in runs.items()}
    return {"directions": directions, "runs": runs,
            "drift": {a: {"mean": d.mean(0).tolist(), "se": (d.std(0, ddof=1) / np.sqrt(len(d))).tolist()}
                      for a, d in drift.items()},
            "per_seed_wrong": {a: d[:, 0].tolist() for a, d in drift.items()}}


def clip_higher(space, start, sz, seed) -> dict:
    """(c): entropy after PPO iterations with the band [0.8, 1.2] and DAPO's [0.8, 1.28]."""
    R = ex.right_wrong_reward(space, RIGHT)
    pop = {h: up.population_ppo(space, start, R, iterations=sz["clip_iterations"], epochs=8, lr=1.0,
                                clip_eps_high=h)[1] for h in (None, 0.28)}
    sampled = {h: [up.train(space, start, R, iterations=sz["clip_iterations"], groups=2, group_size=GROUP, lr=2.0,
                            epochs=4, rng=np.random.default_rng(2000 * seed + s), loss_agg="token-mean", scale=True,
                            clip_eps=0.2, clip_eps_high=h)[1] for s in range(sz["clip_seeds"])] for h in (None, 0.28)}
    paired = np.array([b[-1]["entropy"] - a[-1]["entropy"] for a, b in zip(sampled[None], sampled[0.28])])
    return {"population": pop, "sampled": sampled,
            "population_diff": pop[0.28][-1]["entropy"] - pop[None][-1]["entropy"],
            "population_diff_first": pop[0.28][-1]["entropy_first"] - pop[None][-1]["entropy_first"],
            "sampled_diff": float(paired.mean()), "sampled_se": float(paired.std(ddof=1) / np.sqrt(len(paired)))}


def ratios(space, start) -> dict:
    """(d): after five exact ascent steps on the length reward, the three ratios' exact moments."""
    R = ex.length_reward(space)
    now = start.copy()
    for _ in range(5):
        now = now + 2.0 * ex.objective_gradient(space, now, R)
    gJ = ex.objective_gradient(space, now, R)
    J_old = ex.objective(space, start, R)
    rows = {}
    for est, eps, high, name in RATIO_ROWS:
        m = up.exact_ratio_moments(space, now, start, R, est, baseline=J_old, clip_eps=eps, clip_eps_high=high,
                                   n=N_BATCH)
        rows[name] = {"rel_err": float(np.linalg.norm(m["mean"] - gJ) / np.linalg.norm(gJ)),
                      "spread": m["spread"] / float(np.linalg.norm(gJ)), "clipfrac": m["clipfrac"]}
    return {"rows": rows, "kl_old_now": ex.kl(space, start, now)}


def run(quick: bool = False, seed: int = 0) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick)
    space, ref, theta, start, rng = world(seed)
    r = {"quick": quick, "seed": seed, "sizes": sz, "N": space.N, "S": space.n_states,
         "a": kl_estimators(space, ref, theta, sz, rng), "b": aggregations(space, start, sz, seed),
         "c": clip_higher(space, start, sz, seed), "d": ratios(space, start)}
    r["time"] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    return r


def verdicts(r) -> list[Verdict]:
    """Each published claim, judged from the numbers of ``r``: exact (finite-sum) equalities are identities, exact
    numbers against a threshold and Monte Carlo means are measurements, seed means are comparisons."""
    on, off = r["a"]["on-policy"]["rows"], r["a"]["off-policy"]["rows"]
    one, const = "seq-mean-token-mean", "seq-mean-token-sum-norm"
    d1, dc = r["b"]["directions"][(one, False)], r["b"]["directions"][(const, False)]
    drift = r["b"]["drift"]
    c, rows = r["c"], r["d"]["rows"]
    tok, seq = rows["token ratio, no clip"], rows["sequence ratio, no clip"]
    clip_gspo = rows["sequence ratio, band 3e-4/4e-4 (GSPO)"]["clipfrac"]
    clip_ppo = rows["token ratio, band 0.2 (PPO)"]["clipfrac"]
    p_rare = {h: c["population"][h][-1]["p_first"][RIGHT[1]] for h in (None, 0.28)}
    e1 = d1["exact"]["wrong"]
    rel = f"holds when the relative difference of the exact (enumerated) expectations is below {EXACT:g}"

    def exact(key, claim, x, what):
        return identity(key, claim, x < EXACT, rel + f" ({what})", {"relative difference": x})

    return [
        exact("k1_reward_is_grad_kl", "k1 in the reward: its expected gradient is grad KL on-policy (Tang & Munos).",
              on["reward k1"]["exact_rel_bias"], "E[g] against grad KL"),
        exact("k1_loss_zero", "k1 in the loss: zero expected gradient on-policy (Tang & Munos).",
              on["loss k1"]["exact_norm"], "|E g| / |grad KL|"),
        measurement("k3_loss_is_grad_kl", "k3 in the loss (GRPO): its expected gradient is grad KL on-policy.",
                    on["loss k3"]["exact_rel_bias"], EXACT, "<", "relative difference of the exact expectations"),
        exact("k3_loss_is_reverse_kl", "k3 in the loss is the per-state gradient of KL(pi_ref || pi), the other "
              "direction (Tang & Munos).", on["loss k3"]["exact_vs_reverse"], "E[g] against that gradient"),
        exact("k2_loss_is_forward_kl", "k2 in the loss is the per-state gradient of KL(pi || pi_ref) (Tang & Munos).",
              on["loss k2"]["exact_vs_forward"], "E[g] against that gradient"),
        measurement("k1_reward_unbiased_off_policy", "k1 in the reward stays unbiased off-policy (PPO's token ratio): "
                    "no bias beyond the Monte Carlo noise.", off["reward k1"]["z"], Z_MAX, "<=", "bias_z"),
        measurement("one_over_len_lengthens", "1/|o| (seq-mean-token-mean) pushes wrong answers longer (Dr. GRPO; "
                    "exact expected update).", e1, EXACT * abs(d1["exact"]["J"]), ">",
                    "d length(wrong) along the exact update"),
        identity("constant_norm_no_push", "The constant normaliser (seq-mean-token-sum-norm) does not push the length "
                 "of wrong answers (Dr. GRPO; exact expected update).",
                 abs(dc["exact"]["wrong"]) < EXACT * abs(dc["exact"]["J"]),
                 f"holds when |d length(wrong)| along the exact update is below {EXACT:g} x |d J|",
                 {"d length(wrong)": dc["exact"]["wrong"], "d J": dc["exact"]["J"]}),
        comparison("wrong_longer_in_training", "In training, wrong answers grow longer under 1/|o| than under the "
                   "constant normaliser.", {"diff": drift[one]["mean"][0] - drift[const]["mean"][0],
                                            "se": float(np.hypot(drift[one]["se"][0], drift[const]["se"][0]))},
                   expect=+1, labels=("constant", "1/|o|"), quantity="length change of wrong answers (tokens)",
                   values=(drift[const]["mean"][0], drift[one]["mean"][0]), words=("longer", "shorter")),
        measurement("clip_higher_entropy_exact", "Clip-higher keeps the entropy higher (DAPO), exact updates.",
                    c["population_diff"], ENTROPY_MARGIN, ">", "entropy difference (nats)", fmt="+.3f"),
        comparison("clip_higher_entropy_sampled", "Clip-higher keeps the entropy higher (DAPO), sampled updates.",
                   {"diff": c["sampled_diff"], "se": c["sampled_se"]}, expect=+1,
                   labels=("band [0.8, 1.2]", "clip-higher [0.8, 1.28]"), quantity="entropy", noise="paired-seed"),
        measurement("clip_higher_rare_grows", "Clip-higher lets the rare right answer grow more (DAPO's mechanism), "
                    "exact updates.", p_rare[0.28] - p_rare[None], 0.0, ">", "final p(rare right) difference",
                    fmt="+.4f"),
        measurement("gspo_clips_more", "GSPO's band 3e-4/4e-4 clips more tokens than PPO's token band 0.2.",
                    clip_gspo - clip_ppo, 0.0, ">", "difference of clipped fractions", fmt="+.3f"),
        measurement("gspo_100x", "... two orders of magnitude more, as GSPO reports against GRPO.",
                    clip_gspo / clip_ppo if clip_ppo > 0 else float("inf"), 100.0, ">=",
                    "ratio of clipped fractions", fmt=".3g"),
        measurement("sequence_ratio_closer", "The sequence ratio is closer to grad J than the token ratio (no clip, "
                    "by 5%).", seq["rel_err"] / tok["rel_err"], 1 - MARGIN, "<", "error ratio, sequence / token",
                    fmt=".3f"),
        measurement("sequence_ratio_less_variance", "The sequence ratio has less variance than the token ratio (no "
                    "clip, by 5%).", seq["spread"] / tok["spread"], 1 - MARGIN, "<", "spread ratio, sequence / token",
                    fmt=".3f"),
        exact("whole_ratio_unbiased", "The whole-response ratio pi(y)/pi_old(y) (importance sampling) gives an "
              "unbiased gradient.", rows["whole-response ratio, no clip"]["rel_err"], "E[g] against grad J"),
    ]


def _fmt(x) -> str:
    return "   n/a" if x is None else f"{x:6.3f}"


def narrative(r: dict) -> str:
    sz = r["sizes"]
    out = [f"A sequence space of {r['N']} responses (V = {V}, up to L = {L} tokens), a table of {r['S']} states x {V} "
           f"logits; seed {r['seed']}.",
           f"\n(a) The KL's gradient, estimated from batches of {N_BATCH} responses, {sz['batches']} batches per row "
           f"(N = {N_BATCH * sz['batches']} sampled responses). bias = ||mean - grad KL|| / ||grad KL|| +- se, its "
           f"standard error (relative); z = bias_z (the squared bias in standard deviations of the noise: > {Z_MAX:g} is "
           f"a bias); spread = one batch's noise (relative); exact = ||E[g] - grad KL|| / ||grad KL|| by enumeration; "
           f"|E g| = ||E[g]|| / ||grad KL||."]
    for regime, a in r["a"].items():
        out.append(f"  {regime}: KL(pi || pi_ref) = {a['kl']:.3f}, ||grad KL|| = {a['grad_norm']:.3f}"
                   + (f", KL(pi_old || pi) = {a['kl_old_now']:.3f}" if regime == "off-policy" else ""))
        out.append(f"    {'estimator':<12} {'bias +- se':>15} {'z':>7} {'spread':>6} {'exact':>6} {'|E g|':>6}  verdict")
        for est, row in a["rows"].items():
            word = "estimates grad KL" if kl_unbiased(row) else "biased"
            out.append(f"    {est:<12} {row['rel_bias']:6.3f} +- {row['se'] / a['grad_norm']:5.3f} {row['z']:7.1f} "
                       f"{row['spread']:6.2f} {_fmt(row['exact_rel_bias'])} {_fmt(row['exact_norm'])}  {word}")
    b = r["b"]
    out.append(f"\n(b) The push of one update on the mean length of answers (d length / d step along the expected update; "
               f"{sz['direction_batches']} batches of 4 groups x {GROUP}; exact where a finite sum):")
    out.append(f"    {'aggregation':<32} {'advantage':<10} {'wrong answers':>22} {'right answers':>22} {'reward J':>16}")
    for (agg, scale), d in b["directions"].items():
        m, s, e = d["mean"], d["se"], d["exact"]
        cells = [f"{m[k]:+.4f} +- {s[k]:.4f}" for k in ("wrong", "right", "J")]
        exact = f"  exact wrong {e['wrong']:+.4f}, right {e['right']:+.4f}" if e else ""
        out.append(f"    {AGG_NAMES[agg]:<32} {'R - mean' if not scale else '/ std':<10} {cells[0]:>22} {cells[1]:>22} "
                   f"{cells[2]:>16}  {push(m['wrong'], s['wrong'])} wrong answers{exact}")
    out.append(f"  Training, {sz['train_iterations']} iterations of 4 groups x {GROUP} (A = R - mean), SGD lr 2, "
               f"{sz['train_seeds']} seeds: change of the mean length (tokens) and final J, mean +- se over seeds:")
    for agg, dr in b["drift"].items():
        (w, rt, J), (sw, sr, sJ) = dr["mean"], dr["se"]
        out.append(f"    {AGG_NAMES[agg]:<32} wrong answers {w:+.3f} +- {sw:.3f}   right answers {rt:+.3f} +- {sr:.3f}   "
                   f"J {J:.3f} +- {sJ:.3f}")
    c = r["c"]
    pop = c["population"]
    out.append(f"\n(c) Clip-higher, from p(rare right answer) = {np.exp(ROOT[1]) / np.exp(ROOT).sum():.3f}. Exact "
               f"expected updates ({sz['clip_iterations']} iterations x 8 epochs, lr 1): entropy of a response "
               f"{pop[None][0]['entropy']:.3f} -> {pop[None][-1]['entropy']:.3f} (band [0.8, 1.2]) vs "
               f"{pop[0.28][-1]['entropy']:.3f} ([0.8, 1.28]); of the first token {pop[None][-1]['entropy_first']:.3f} vs "
               f"{pop[0.28][-1]['entropy_first']:.3f}; p(rare right answer) {pop[None][-1]['p_first'][RIGHT[1]]:.4f} vs "
               f"{pop[0.28][-1]['p_first'][RIGHT[1]]:.4f}; J {pop[None][-1]['J']:.3f} vs {pop[0.28][-1]['J']:.3f}.")
    out.append(f"  Sampled ({sz['clip_iterations']} iterations x 4 epochs, 2 groups x {GROUP}, {sz['clip_seeds']} paired "
               f"seeds): entropy difference (clip-higher - symmetric) {c['sampled_diff']:+.3f} +- {c['sampled_se']:.3f}.")
    d = r["d"]
    out.append(f"\n(d) The ratio, after five exact updates (KL(pi_old || pi) = {d['kl_old_now']:.3f}), against grad J at "
               f"the current policy; exact moments by enumeration, batches of {N_BATCH}:")
    out.append(f"    {'ratio':<40} {'rel. error':>10} {'spread':>7} {'tokens clipped':>15}")
    for name, row in d["rows"].items():
        out.append(f"    {name:<40} {row['rel_err']:10.3f} {row['spread']:7.3f} {row['clipfrac']:15.3f}")
    out.append("\nWhich published claims hold here (computed from the numbers above):")
    out += [v.render("  ") for v in verdicts(r)]
    t = r["time"]
    out.append(f"\nTime: {t['wall']:.1f} s wall, {t['cpu']:.1f} s CPU.")
    return "\n".join(out)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(15, 10.5))
    (a, b), (c, d) = axes
    # (a) relative bias of each KL estimator
    labels = [e.replace("reward", "KL in the reward,").replace("loss", "KL in the loss,") for e in ex.KL_ESTIMATORS]
    x = np.arange(len(labels))
    for k, (regime, colour) in enumerate((("on-policy", "tab:blue"), ("off-policy", "tab:orange"))):
        rows = r["a"][regime]["rows"]
        bias = [rows[e]["rel_bias"] for e in ex.KL_ESTIMATORS]
        err = [2 * rows[e]["se"] / r["a"][regime]["grad_norm"] for e in ex.KL_ESTIMATORS]
        a.bar(x + (k - 0.5) * 0.38, bias, 0.38, yerr=err, capsize=3, color=colour,
              label=f"{regime}: samples from the {'current' if regime == 'on-policy' else 'previous'} policy")
    a.set_xticks(x, labels, rotation=20, ha="right")
    a.set_ylabel("error of the mean gradient / size of the true gradient (bars: 2 se)")
    a.set_title("(a) Which KL estimator's gradient is the gradient of the KL?")
    a.legend(loc="upper left")
    # (b) wrong-answer length over training
    colours = {"token-mean": "tab:green", "seq-mean-token-mean": "tab:red", "seq-mean-token-sum-norm": "tab:blue"}
    for agg, hs in r["b"]["runs"].items():
        y = np.array([[h["length_wrong"] for h in run_] for run_ in hs])
        yr = np.array([[h["length_right"] for h in run_] for run_ in hs])
        it = np.arange(y.shape[1])
        b.plot(it, y.mean(0), color=colours[agg], lw=2, label=f"wrong answers, {AGG_NAMES[agg]}")
        b.fill_between(it, y.min(0), y.max(0), color=colours[agg], alpha=0.15)
        b.plot(it, yr.mean(0), color=colours[agg], lw=1.2, ls="--")
    b.plot([], [], color="grey", ls="--", label="right answers (dashed)")
    b.set_xlabel("training iteration")
    b.set_ylabel("mean length of the answer (tokens)")
    b.set_title("(b) Length of wrong answers under three loss normalisations")
    b.legend(loc="best", fontsize=8)
    # (c) entropy with and without clip-higher
    for h, colour, name in ((None, "tab:purple", "band [0.8, 1.2]"), (0.28, "tab:olive", "clip-higher [0.8, 1.28]")):
        pop = r["c"]["population"][h]
        c.plot([p["entropy"] for p in pop], color=colour, lw=2, label=f"{name}, exact updates")
        s = np.array([[p["entropy"] for p in run_] for run_ in r["c"]["sampled"][h]])
        c.plot(s.mean(0), color=colour, lw=1.5, ls="--", label=f"{name}, sampled (mean of seeds)")
    c.set_xlabel("PPO iteration")
    c.set_ylabel("entropy of a whole response (nats)")
    c.set_title("(c) Does clip-higher keep the entropy up?")
    c.legend(loc="best", fontsize=8)
    # (d) ratios: error and spread
    names = list(r["d"]["rows"])
    rows = [r["d"]["rows"][n] for n in names]
    x = np.arange(len(names))
    d.bar(x - 0.2, [q["rel_err"] for q in rows], 0.4, color="tab:gray", label="error of the expected gradient")
    d.bar(x + 0.2, [q["spread"] for q in rows], 0.4, color="tab:cyan", label=f"noise of one batch of {N_BATCH}")
    top = max(max(q["rel_err"], q["spread"]) for q in rows)
    for i, q in enumerate(rows):
        if q["clipfrac"] > 0:
            d.text(i, max(q["rel_err"], q["spread"]) + 0.02 * top, f"{q['clipfrac']:.0%} of tokens\nclipped",
                   ha="center", fontsize=9)
    d.set_ylim(0, 1.45 * top)
    d.set_xticks(x, [n.replace(", ", "\n").replace(" (", "\n(") for n in names], fontsize=9)
    d.set_ylabel("relative to the size of the true gradient")
    d.set_title("(d) Token, sequence and whole-response ratios after a few updates")
    d.legend(loc="upper left", ncol=2)
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
