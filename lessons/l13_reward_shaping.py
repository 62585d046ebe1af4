r"""Lesson 13 - reward_shaping: a response's score as per-token rewards (uniform vs KL + final); ratio explosion 1.2^50.

Pipeline step: between the reward model and GAE. The reward model gives ONE number per response; PPO needs a
reward $r_t$ for every sampled token. Two answers, both in `minippo.rlhf.ppo`:

    "uniform"    r_t = -beta kl_t + score / n          every valid token gets an equal share
    "kl_final"   r_t = -beta kl_t  (+ score at t = n-1) the score on the last valid token (Ziegler et al.
                                                        2019; InstructGPT eq. (2)); the minippo default

then GAE turns rewards into advantages, $\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)$ and
$A_t = \delta_t + \gamma \lambda A_{t+1}$ (PPO paper eqs. (11)-(12); $\gamma = 1$, $\lambda = 0.95$), and
$L^{CLIP}$ (eq. (7)) clips each token's ratio $r_t = \exp(\log\pi_t - \log\pi_{old,t})$ to
$[1 - \epsilon, 1 + \epsilon]$.

Paper: the per-token reward of Ziegler et al. 2019 (arXiv:1909.08593) eq. (2) and InstructGPT (Ouyang et al.
2022, arXiv:2203.02155) eq. (2), split over the tokens; the clipped surrogate of the PPO paper
(arXiv:1707.06347) eq. (7). A response's own ratio is the product of its token ratios
(`minippo.studies.sequence_ratio`):

$$
R = \frac{\pi(y \mid x)}{\pi_{old}(y \mid x)} = \prod_t r_t = \exp\Big(\sum_t (\log\pi_t - \log\pi_{old,t})\Big)
$$

It is often said that in-band token ratios can multiply up to $1.2^{50} \approx 9100$ over 50 tokens. The
lesson computes that worst case, the random walk of independent in-band ratios, and $R$ on real rollouts
after each PPO update.

What the lesson does, on the cached SFT policy and reward model (`minippo.studies.study.Study`): trains both
shapings (main-job config, 20 iterations x 32 responses, several PPO seeds), then shows on one rollout where
each shaping puts the reward and the credit (advantages), the per-position statistics of the advantages over
the last iterations, and the ratios the updates produced. Part 5 asks whether the clip range should depend on
the task (Q53): epsilon 0.1, 0.2 and 0.5 on two tasks of different response length (room for 8 tokens, where
the missing-EOS penalty teaches the policy to finish early, and the default 24; lr 1e-3, where the clip binds;
10 iterations x 32 responses, 2 PPO seeds; --full 20 x 64, 3 seeds), judged against the seed noise.

The figure (from --full: 4 seeds, 40 iterations x 64 responses): (a)-(b) per-token rewards of the same 10
responses under each shaping, (c)-(d) their GAE advantages (each shaping with its own trained critic); (e)
correlation between a token's advantage and its response's score, by position from the end, (f) mean
|advantage| by position, (g) gold score and (h) critic explained variance during training; (i) token ratios
vs sequence ratios after the updates, (j) log R against response length, (k) fractions of tokens vs
responses outside the clip band per iteration, (l) $1.2^n$ vs the random walk of in-band ratios; part 5,
against epsilon for each task: (m) gold score (dots: seeds), (n) clip fraction, (o) approx KL per update, (p)
response length.

Exercises:
1. Train "uniform" with `critic_init="sft"` (a critic that does not start as the reward model): does
   the anti-credit on the last tokens disappear, and does the gold catch up with "kl_final"?
2. Set `lam=1.0`: how do the per-position correlations (e) change for each shaping, and why?
3. Compute the fraction of responses a sequence-level clip would zero at `clip_eps=0.5`: is any
   epsilon both safe for tokens and usable for whole responses?
4. Implement it: `minippo exercise start token_rewards`, then `minippo exercise check token_rewards`.

Questions: Q35, Q36, Q37, Q53.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (Verdict, all_of, by_key, comparison, diff_text, legend_in_margin, lesson_main,
                             measurement, pyplot, save, seed_compare, time_line)
from minippo.rlhf.ppo import forward_response
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.studies.eps_by_task import eps_table as _eps_table, eps_verdict as _eps_verdict
from minippo.studies.probes import advantage_profile, token_credit, update_kl
from minippo.studies.sequence_ratio import (iid_sequence_ratios, ratio_band_stats, sequence_log_ratio,
                                           update_ratio_summary)
from minippo.studies.study import Study, final
from minippo.studies.sweep_stats import fisher_z, pooled_seed_std

SHAPINGS = ("kl_final", "uniform")
COLORS = {"kl_final": "tab:blue", "uniform": "tab:orange"}
N_ROWS = 10            # responses shown in the heat maps
N_POS = 6              # positions reported from each end of a response
LAST_ITERS = 10        # the advantage statistics pool the last iterations


EPS = (0.1, 0.2, 0.5)                     # part 5 (Q53): the clip range swept on two tasks
TASKS = {"8 tokens": 8, "24 tokens": 24}  # ... of different response length: room for max_new_tokens tokens
EPS_LR = 1e-3                             # ... at a step size where the clip binds (lesson 17's exercise 1)


def eps_key(task: str, eps: float) -> str:
    """The name of one run of part 5's sweep."""
    return f"{task}, eps {eps:g}"


def sizes(quick: bool, full: bool) -> dict:
    """Run lengths: quick (smoke test), default (classroom size), full (the committed figure);
    ``eps``: part 5's sweep."""
    if quick:
        return dict(iterations=4, batch_size=16, minibatch_size=8, seeds=(0, 1),
                    eps=dict(iterations=2, batch_size=16, minibatch_size=8, seeds=(0, 1)))
    if full:
        return dict(iterations=40, batch_size=64, minibatch_size=16, seeds=(0, 1, 2, 3),
                    eps=dict(iterations=20, batch_size=64, minibatch_size=16, seeds=(0, 1, 2)))
    return dict(iterations=20, batch_size=32, minibatch_size=8, seeds=(0, 1, 2),
                eps=dict(iterations=10, batch_size=32, minibatch_size=8, seeds=(0, 1)))


class _Probe:
    """Callback of every training run: per iteration, the advantages PPO used and the ratios its update made."""

    def __init__(self):
        self.batches = {}          # (shaping, seed) -> list of (adv, mask, scores)
        self.lengths, self.log_R, self.log_r = [], [], []

    def __call__(self, trainer, rollout, record) -> None:
        cfg, mask = trainer.cfg, rollout.response_mask
        self.batches.setdefault((cfg.reward_shaping, cfg.seed), []).append((rollout.adv, mask, rollout.scores))
        logp = update_kl(trainer.actor, rollout, cfg.temperature)["logp"]              # (B, Tn) pi after the update
        seq_adv = rollout.sequence_returns - rollout.sequence_returns.mean()         # (B,) a sequence-level advantage
        stats = ratio_band_stats(logp, rollout.logp, mask, cfg.clip_eps, adv=rollout.adv, seq_adv=seq_adv)
        record.update({f"probe/{k}": v for k, v in stats.items()})
        self.lengths.append(rollout.lengths)
        self.log_R.append(sequence_log_ratio(logp, rollout.logp, mask))
        self.log_r.append((logp - rollout.logp)[mask != 0])


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick, full)
    study = Study(quick=quick, seed=seed)
    probe = _Probe()
    base = dict(config=KnobsConfig, iterations=sz["iterations"], batch_size=sz["batch_size"],
                minibatch_size=sz["minibatch_size"])
    runs = study.sweep({s: {"reward_shaping": s} for s in SHAPINGS}, sz["seeds"], base=base, callback=probe,
                       extra=lambda r: r["trainer"])
    # one rollout (the kl_final run's last, seed 0) credited both ways, each shaping with its own critic
    tr = {s: runs[s]["extra"][0] for s in SHAPINGS}
    ro = tr["kl_final"].last_rollout.take(np.arange(N_ROWS))
    beta = tr["kl_final"].state.kl_ctl.value
    credit = {}
    for s in SHAPINGS:
        st = tr[s].state                        # the separate critic's values V(s_t) on this rollout
        head = forward_response(st.critic, ro.sequences, ro.attn_mask, ro.prompt_len, scalar=True)[1]
        values = st.value_norm.denormalise(head) * (ro.response_mask != 0)
        credit[s] = token_credit(ro, beta, shaping=s, values=values, gamma=tr[s].cfg.gamma, lam=tr[s].cfg.lam)
    profiles = {s: [advantage_profile(probe.batches[(s, k)][-LAST_ITERS:], N_POS) for k in sz["seeds"]]
                for s in SHAPINGS}
    for s in SHAPINGS:
        del runs[s]["extra"]                                             # the trainers: not part of the results
    # 5. epsilon on two tasks of different response length (Q53)
    ez = sz["eps"]
    eps_base = dict(iterations=ez["iterations"], batch_size=ez["batch_size"], minibatch_size=ez["minibatch_size"],
                    lr=EPS_LR)
    eps_runs = study.sweep({eps_key(task, e): {"max_new_tokens": T, "clip_eps": e} for task, T in TASKS.items()
                            for e in EPS}, ez["seeds"], base=eps_base)
    rng = np.random.default_rng([seed, 13])
    n_mean = float(np.mean(np.concatenate(probe.lengths)))
    iid = {n: iid_sequence_ratios(rng, n, 20_000) for n in (int(round(n_mean)), 50)}
    return {"sizes": sz, "runs": runs, "reference": study.reference, "beta": beta, "quick": quick, "full": full,
            "rollout": {"mask": ro.response_mask, "scores": ro.scores, "kl": credit["kl_final"]["kl"]},
            "credit": credit, "profiles": profiles, "lengths": np.concatenate(probe.lengths),
            "log_R": np.concatenate(probe.log_R), "log_r": np.concatenate(probe.log_r), "iid": iid, "n_mean": n_mean,
            "worst": {"1.2^50": 1.2 ** 50, "0.8^50": 0.8 ** 50}, "eps_runs": eps_runs,
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}


def _curve(variant: dict, key: str) -> np.ndarray:
    """(seeds, iterations) array of a record key of one variant of the sweep."""
    return np.array([[rec[key] for rec in recs] for recs in variant["records"]], dtype=float)


def _profile(r: dict, shaping: str, key: str) -> np.ndarray:
    """Mean over the seeds of one advantage-profile array."""
    return np.nanmean([p[key] for p in r["profiles"][shaping]], axis=0)


def summary(r: dict) -> dict:
    """Per shaping: evaluation gold / KL / length (mean of the seeds), final explained variance, credit profile."""
    out = {}
    for s, v in r["runs"].items():
        out[s] = {"eval_gold": float(np.mean([e["gold_mean"] for e in v["eval"]])),
                  "eval_gold_seeds": [e["gold_mean"] for e in v["eval"]],
                  "eval_kl": float(np.mean([e["kl_exact_mean"] for e in v["eval"]])),
                  "eval_length": float(np.mean([e["length_mean"] for e in v["eval"]])),
                  "eval_length_seeds": [e["length_mean"] for e in v["eval"]],
                  "ev_seeds": [final(recs, "val/explained_variance") for recs in v["records"]],
                  "ev_first_seeds": [recs[0]["val/explained_variance"] for recs in v["records"]],
                  "n_responses": sum(p["n_responses"] for p in r["profiles"][s]),
                  "corr_end": _profile(r, s, "corr_end"), "corr_start": _profile(r, s, "corr_start"),
                  "abs_end": _profile(r, s, "abs_end"), "abs_start": _profile(r, s, "abs_start")}
        out[s]["ev"], out[s]["ev_first"] = float(np.mean(out[s]["ev_seeds"])), float(np.mean(out[s]["ev_first_seeds"]))
    # the ratio statistics of the first half of the run (the lr decays linearly to 0 at the end)
    half = r["sizes"]["iterations"] // 2 or 1
    recs = [rec for v in r["runs"].values() for recs in v["records"] for rec in recs[:half]]
    out["ratios"] = update_ratio_summary(recs, r["log_R"], r["log_r"], r["n_mean"])
    return out


def _heat(ax, fig, values, mask, title, vmax, label, linthresh=None):
    """A (responses x tokens) heat map, padding left blank, diverging colours around 0 (symlog with ``linthresh``)."""
    from matplotlib.colors import Normalize, SymLogNorm
    shown = np.ma.masked_where(mask == 0, values)
    norm = (SymLogNorm(linthresh, vmin=-vmax, vmax=vmax, base=10) if linthresh else Normalize(-vmax, vmax))
    im = ax.imshow(shown, aspect="auto", cmap="RdBu", norm=norm, interpolation="nearest")
    ax.set(title=title, xlabel="response token t (padding blank)", ylabel="response")
    ax.grid(False)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02, label=label)


def seed_noise(r: dict, key: str) -> float | None:
    """The seed noise of a per-seed summary (``key`` of :func:`summary`), pooled over the two shapings; None with
    one seed."""
    s = summary(r)
    return pooled_seed_std([s[sh][key] for sh in SHAPINGS])[0] if len(r["sizes"]["seeds"]) > 1 else None


def eps_table(r: dict) -> dict:
    """Part 5 per task and epsilon, per seed (:func:`minippo.studies.eps_by_task.eps_table`)."""
    return _eps_table(r["eps_runs"], TASKS, EPS, eps_key)


def eps_verdict(r: dict) -> dict:
    """Part 5's comparisons (:func:`minippo.studies.eps_by_task.eps_verdict`)."""
    return _eps_verdict(eps_table(r), TASKS, EPS)


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed or per iteration: the
    summary per shaping (and the ratio statistics, with the std of log R independent tokens would give), part
    5's table, its means over the seeds and its comparisons, and the quantiles of R for independent in-band
    ratios (``iid.mean length``: as many tokens as the mean response, ``iid.50 tokens``)."""
    s, q = summary(r), eps_table(r)
    s["ratios"]["independent_log_R_std"] = float(np.sqrt(r["n_mean"]) * s["ratios"]["token_log_ratio_std"])
    for sh in SHAPINGS:
        s[sh]["eval_gold_std"] = float(np.std(s[sh]["eval_gold_seeds"]))
    means = {task: {e: {k: float(np.mean(v)) for k, v in x.items()} for e, x in t.items()}
             for task, t in q["table"].items()}
    clipfrac = [x["policy/clipfrac_avg"] for t in means.values() for x in t.values()]
    iid = {}
    for n_tok, R in r["iid"].items():
        qs = np.quantile(R, [0.05, 0.5, 0.95])
        iid["50 tokens" if n_tok == 50 else "mean length"] = {
            "n": n_tok, "q05": float(qs[0]), "median": float(qs[1]), "q95": float(qs[2]), "max": float(R.max()),
            "outside": float(np.mean(np.abs(R - 1) > 0.2))}
    return {"summary": s, "eps": q, "eps_mean": means, "eps_clipfrac_min": min(clipfrac),
            "eps_clipfrac_max": max(clipfrac), "eps_compare": eps_verdict(r), "iid": iid}


def _narrative_eps(r: dict) -> list[str]:
    """Part 5: does the best clip range depend on the task (Q53)?"""
    q, v = eps_table(r), eps_verdict(r)
    ez, short, long_ = r["sizes"]["eps"], *TASKS
    L = [f"\n5. Does epsilon depend on the task? eps {' / '.join(f'{e:g}' for e in EPS)} on two tasks of different "
         f"response length: room for {TASKS[short]} tokens (the missing-EOS penalty teaches the policy to finish within "
         f"it) and for {TASKS[long_]} (the default); {ez['iterations']} iterations x {ez['batch_size']} responses, lr "
         f"{EPS_LR:g} (linear decay), PPO seeds {list(ez['seeds'])}"
         + (f"; seed noise of the gold pooled over the six runs {v['noise']:.3f}." if v["noise"] is not None else "."),
         f"  {'task':<11}{'eps':>5}{'gold':>8}{'+-':>6}{'length':>7}{'EOS':>5}{'KL':>6}{'clipfrac':>9}{'approx KL':>10}"]
    for task in TASKS:
        for e in EPS:
            x = q["table"][task][e]
            L.append(f"  {task:<11}{e:>5g}{x['gold_mean'].mean():>+8.3f}{x['gold_mean'].std():>6.3f}"
                     f"{x['length_mean'].mean():>7.1f}{x['ended_frac'].mean():>5.0%}{x['kl_exact_mean'].mean():>6.2f}"
                     f"{x['policy/clipfrac_avg'].mean():>9.3f}{x['policy/approxkl_avg'].mean():>10.4f}")
    L.append("  Best epsilon by gold: " + "; ".join(
        f"{task}: {v['best'][task]:g}, ahead of the next by {diff_text(v['lead'][task], '+.2f')}" for task in TASKS)
        + ".")
    if v["interaction"]:
        L.append(f"  Gain over eps 0.2 on the {long_} task minus on the {short} task: " + "; ".join(
            f"eps {e:g}: {diff_text(c, '+.2f')}" for e, c in v["interaction"].items()) + ".")
    L.append(by_key(verdicts(r))["eps_wider_for_longer"].render("  "))
    clear = {e: c for e, c in v["interaction"].items() if c["clear"]}
    if clear:
        # an interaction for a wider eps (e > 0.2) that favours the long task, or a narrower one that favours the
        # short task, points the way of "wider for longer"; the other signs point the other way
        agree = [np.sign(c["diff"]) == np.sign(e - 0.2) for e, c in clear.items()]
        L.append("  Yet the task changes what epsilon does: " + "; ".join(
            f"eps {e:g} against 0.2 does {abs(c['diff']):.2f} {'better' if c['diff'] > 0 else 'worse'} in gold on the "
            f"{long_} task than on the {short} task" for e, c in clear.items()) + " (beyond 2 s.e.): "
            + ("the direction of 'wider for longer'." if all(agree) else
               "the opposite of 'wider for longer': the short task needs the wider band more." if not any(agree) else
               "mixed directions."))
    return L


def narrative(r: dict) -> str:
    """The measured numbers, and which common claims hold at this scale."""
    s, sz, ref = summary(r), r["sizes"], r["reference"]
    m = r["rollout"]["mask"] != 0
    kf, un = r["credit"]["kl_final"], r["credit"]["uniform"]
    last = m.sum(axis=1) - 1
    rows = np.arange(len(last))
    kl_part = np.abs(-r["beta"] * r["rollout"]["kl"][m]).mean()
    L = [f"Training: main-job PPO config, {sz['iterations']} iterations x {sz['batch_size']} responses, PPO seeds "
         f"{list(sz['seeds'])}, both shapings alike. SFT policy: gold {ref['gold_mean']:+.3f}.",
         f"\n1. Rewards of the same {len(last)} responses (beta {r['beta']:.3f}): the KL part is "
         f"{kl_part:.3f} per token on average; kl_final puts the score "
         f"(|score| {np.abs(r['rollout']['scores']).mean():.2f}) on the last token "
         f"(|r| there {np.abs(kf['rewards'][rows, last]).mean():.2f}), uniform spreads it "
         f"(|r| {np.abs(un['rewards'][m]).mean():.3f} per token, the KL part included).",
         f"\n2. Where the credit goes (GAE, lam 0.95, advantages as PPO used them, last {LAST_ITERS} iterations):",
         f"  {'shaping':<9}{'corr(A,score) last':>19}{'2nd last':>9}{'first':>7}{'|A| last':>9}{'|A| first':>10}"
         f"{'EV first':>9}{'EV end':>7}"]
    for sh in SHAPINGS:
        x = s[sh]
        L.append(f"  {sh:<9}{x['corr_end'][0]:>+19.2f}{x['corr_end'][1]:>+9.2f}{x['corr_start'][0]:>+7.2f}"
                 f"{x['abs_end'][0]:>9.2f}{x['abs_start'][0]:>10.2f}{x['ev_first']:>+9.2f}{x['ev']:>+7.2f}")
    k, u = s["kl_final"], s["uniform"]
    V = by_key(verdicts(r))
    L += [f"  (corr(A,score): over the {k['n_responses']} responses, between a token's advantage and its response's "
          "score, judged against 0 with 2 s.e. of Fisher's z; EV: the critic's explained variance, first "
          "iteration and last 5.)",
          "  kl_final: every token's return-to-go is about the score, the quantity the critic (initialised from the "
          f"reward model) was built to predict; its explained variance at the first iteration is {k['ev_first']:+.2f}; "
          "each advantage carries the critic's error score - V(s_t).",
          V["kl_final_ev_first_positive"].render("  "), V["kl_final_credit_positive"].render("  "),
          "  uniform: the return-to-go of token t is score (n - t) / n, a target the critic must learn per position; "
          f"its explained variance starts at {u['ev_first']:+.2f}, and the last token's advantage is score / n - V "
          f"(correlation with the score {u['corr_end'][0]:+.2f}).",
          V["uniform_punishes_ending"].render("  ")]
    ev = seed_compare(k["ev_seeds"], u["ev_seeds"], seed_noise(r, "ev_seeds"))
    L.append("  A common claim: spreading the score uniformly ignores what the middle tokens contributed. Here the "
             f"critic's explained variance at the end, uniform minus kl_final: {diff_text(ev, '+.2f')}; the score's "
             f"credit on the first vs the last token under uniform: corr {u['corr_start'][0]:+.2f} vs "
             f"{u['corr_end'][0]:+.2f}.")
    L += [V["uniform_worse_critic"].render("  "), V["uniform_credit_moves_early"].render("  ")]
    L.append(f"\n3. Outcome on {len(ref['gold'])} held-out prompts (mean of the seeds; per seed in brackets):")
    for sh in SHAPINGS:
        x = s[sh]
        L.append(f"  {sh:<9} gold {x['eval_gold']:+.3f} [{', '.join(f'{g:+.2f}' for g in x['eval_gold_seeds'])}]  "
                 f"KL {x['eval_kl']:.2f} nats/response  length {x['eval_length']:.1f} tokens")
    gold = seed_compare(u["eval_gold_seeds"], k["eval_gold_seeds"], seed_noise(r, "eval_gold_seeds"))
    L.append(f"  kl_final - uniform gold: {diff_text(gold)}.")
    L.append(V["kl_final_better_gold"].render("  "))
    longer = seed_compare(k["eval_length_seeds"], u["eval_length_seeds"], seed_noise(r, "eval_length_seeds"))
    L.append(f"  uniform - kl_final length (tokens): {diff_text(longer, '+.1f')}.")
    L.append(V["uniform_longer"].render("  "))
    q = s["ratios"]
    n_mean = r["n_mean"]
    L += [f"\n4. A common claim: the sequence ratio explodes, 1.2^50 = {r['worst']['1.2^50']:.0f}, 0.8^50 = "
          f"{r['worst']['0.8^50']:.1e}: the worst case, every token at the edge of the band in the same direction."]
    for n_tok, R in r["iid"].items():
        qs = np.quantile(R, [0.05, 0.5, 0.95])
        L.append(f"  {n_tok} tokens with independent ratios uniform in [0.8, 1.2] (none would be clipped): median R "
                 f"{qs[1]:.2f}, 5-95% [{qs[0]:.2f}, {qs[2]:.2f}], max of 20000 {R.max():.1f}; "
                 f"{np.mean(np.abs(R - 1) > 0.2):.0%} of the responses outside [0.8, 1.2].")
    L += [f"  Measured after every update (pi / pi_old on the rollout's tokens; {len(r['log_R'])} responses, mean "
          f"length {n_mean:.1f}; per-update statistics averaged over the first half of the run): std of log r_t "
          f"{q['token_log_ratio_std']:.3f} per token, std of log R "
          f"{q['sequence_log_ratio_std']:.3f} per response (independent tokens would give "
          f"{np.sqrt(n_mean) * q['token_log_ratio_std']:.3f}); R from {q['R_min']:.3f} to {q['R_max']:.1f}.",
          f"  Outside [1 - eps, 1 + eps] (first half of the run, before the lr has decayed): {q['token_outside']:.1%} "
          f"of the tokens vs {q['sequence_outside']:.0%} of the "
          f"responses. PPO's token clip zeroed {q['token_clipfrac']:.1%} of the tokens at the end of the update "
          f"({q['train_clipfrac']:.1%} on average during it); a sequence-level clip would have zeroed "
          f"{q['sequence_clipfrac']:.0%} of the responses."]
    w = q["width"]
    w_se = w.std(ddof=1) / np.sqrt(len(w)) if len(w) > 1 else np.inf
    L.append(f"  log R per update is {w.mean():.2f} +- {w_se:.2f} times the width independent tokens would give over "
             f"{len(w)} updates; R reaches at most {q['R_max']:.1f}; it leaves the band for "
             f"{q['sequence_outside']:.0%} of the responses while {q['token_outside']:.1%} of the tokens do.")
    L += [V[k].render("  ") for k in ("explodes_in_direction", "explodes_in_size", "tokens_move_together")]
    L.append("  PPO for LMs clips per token, and nothing in its loss bounds a whole response's drift within one update: "
             f"the KL penalty in the reward (beta {r['beta']:.3f} here) pulls towards the reference over iterations, "
             "it is not measured against pi_old; the per-update drift above was measured with it on. An early stop "
             "on approx KL (lesson 15) shortens an update; it does not cap it (lesson 15, part E).")
    L += _narrative_eps(r)
    L.append(time_line(r))
    return "\n".join(L)


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (seed noise pooled over the variants)."""
    s = summary(r)
    k, u = s["kl_final"], s["uniform"]
    n = k["n_responses"]
    S = len(r["sizes"]["seeds"])
    evf = np.asarray(k["ev_first_seeds"], dtype=float)
    pos = [measurement(where, "positive", fisher_z(c, n)["diff"], 0.0, ">", f"atanh corr at {where}",
                       se=fisher_z(c, n)["se"], noise="response-sampling", fmt="+.2f")
           for where, c in (("last", k["corr_end"][0]), ("2nd last", k["corr_end"][1]), ("first", k["corr_start"][0]))
           if np.isfinite(c)]
    out = [
        measurement("kl_final_ev_first_positive", "With kl_final shaping the critic (the reward model's weights) "
                    "predicts its targets from the first iteration: explained variance above 0.", float(evf.mean()),
                    0.0, ">", "explained variance at iteration 0 (mean of the seeds)",
                    se=float(evf.std(ddof=1) / np.sqrt(S)) if S > 1 else None, fmt="+.2f"),
        all_of("kl_final_credit_positive", "With kl_final shaping each token's advantage is positively correlated "
               "with its response's score (last, 2nd last and first token).", pos),
        measurement("uniform_punishes_ending", "With uniform shaping the last token's advantage is anti-correlated "
                    "with the score: a good response is punished for ending.", fisher_z(u["corr_end"][0], n)["diff"],
                    0.0, "<", "atanh corr(A_last, score)", se=fisher_z(u["corr_end"][0], n)["se"],
                    noise="response-sampling", fmt="+.2f", numbers={"corr": float(u["corr_end"][0])}),
        comparison("uniform_worse_critic", "Uniform shaping makes the critic's job harder: its explained variance at "
                   "the end is lower than with kl_final.",
                   seed_compare(k["ev_seeds"], u["ev_seeds"], seed_noise(r, "ev_seeds")), expect=-1,
                   labels=("kl_final", "uniform"), quantity="explained variance", values=(k["ev"], u["ev"]),
                   fmt="+.2f"),
        measurement("uniform_credit_moves_early", "Under uniform shaping the score's credit moves to the early tokens: "
                    "the first token's advantage is more correlated with the score than the last one's.",
                    fisher_z(u["corr_start"][0], n)["diff"] - fisher_z(u["corr_end"][0], n)["diff"], 0.0, ">",
                    "atanh corr(first) - atanh corr(last)", se=float(np.sqrt(2.0 / (n - 3))),
                    noise="response-sampling (as if independent)", fmt="+.2f"),
        comparison("kl_final_better_gold", "kl_final shaping ends with a better gold score than uniform.",
                   seed_compare(u["eval_gold_seeds"], k["eval_gold_seeds"], seed_noise(r, "eval_gold_seeds")),
                   expect=+1, labels=("uniform", "kl_final"), quantity="gold", values=(u["eval_gold"], k["eval_gold"])),
        comparison("uniform_longer", "Uniform shaping's responses are longer (what the anti-credit on ending predicts).",
                   seed_compare(k["eval_length_seeds"], u["eval_length_seeds"], seed_noise(r, "eval_length_seeds")),
                   expect=+1, labels=("kl_final", "uniform"), quantity="length (tokens)",
                   values=(k["eval_length"], u["eval_length"]), fmt="+.1f", words=("longer", "shorter")),
    ]
    q = s["ratios"]
    pt, ps = q["token_outside"], q["sequence_outside"]
    w = q["width"]
    out += [
        measurement("explodes_in_direction", "The sequence ratio explodes, in direction: whole responses leave "
                    "[1 - eps, 1 + eps] far more often than tokens.", ps - pt, 0.0, ">",
                    "share of responses outside - share of tokens outside",
                    se=float(np.sqrt(pt * (1 - pt) / q["n_tokens"] + ps * (1 - ps) / q["n_responses"])),
                    noise="binomial", fmt="+.3f"),
        measurement("explodes_in_size", "The sequence ratio explodes, in size: R reaches the worst case 1.2^50.",
                    q["R_max"], r["worst"]["1.2^50"], ">=", "largest R measured", fmt=".1f"),
        measurement("tokens_move_together", "The tokens of a response move together: log R spreads wider than "
                    "independent tokens would give.", float(w.mean()), 1.0, ">",
                    "width of log R / width with independent tokens",
                    se=float(w.std(ddof=1) / np.sqrt(len(w))) if len(w) > 1 else None, noise="update", fmt=".2f"),
    ]
    v = eps_verdict(r)
    short, long_ = TASKS
    parts = [comparison(f"eps {e:g}", f"eps {e:g}", {"diff": c["diff"], "se": c["se"]}, expect=1 if e > 0.2 else -1,
                        labels=(f"{short} task", f"{long_} task"), quantity=f"gold gain of eps {e:g} over 0.2",
                        fmt="+.2f") for e, c in v["interaction"].items()]
    if not parts:                                   # one seed: no noise, so no interaction was computed
        gain = {t: float(eps_table(r)["table"][t][max(EPS)]["gold_mean"].mean()
                         - eps_table(r)["table"][t][0.2]["gold_mean"].mean()) for t in TASKS}
        parts = [comparison(f"eps {max(EPS):g}", "", {"diff": gain[long_] - gain[short], "se": None}, expect=1,
                            labels=(f"{short} task", f"{long_} task"), quantity=f"gold gain of eps {max(EPS):g} over 0.2",
                            fmt="+.2f")]
    out.append(all_of("eps_wider_for_longer", "A common claim: epsilon should depend on the task, wider for the "
                      "longer, sparser-reward task (a wider eps gains more over 0.2 on it, a narrower one loses more).",
                      parts))
    return out


TASK_COLORS = dict(zip(TASKS, ("tab:green", "tab:blue")))


def _plot_eps(r: dict, m, n, o, p) -> None:
    """Part 5 against epsilon for each task: (m) gold, (n) clip fraction, (o) approx KL, (p) response length."""
    t, v = eps_table(r)["table"], eps_verdict(r)
    x = np.arange(len(EPS))
    for ax, key, ylabel in ((m, "gold_mean", "gold score, held-out prompts"),
                            (n, "policy/clipfrac_avg", "policy clip fraction (run mean)"),
                            (o, "policy/approxkl_avg", "approx KL per update (run mean, log)"),
                            (p, "length_mean", "response length (tokens)")):
        for k, task in enumerate(TASKS):
            col, off = TASK_COLORS[task], (k - 0.5) * 0.12
            for j, e in enumerate(EPS):
                vals = t[task][e][key]
                ax.plot(np.full(len(vals), j + off), vals, "o", color=col, alpha=0.5, ms=5)
            ax.plot(x + off, [t[task][e][key].mean() for e in EPS], "-", color=col, lw=2,
                    label=f"room for {TASKS[task]} tokens" + (f" (best eps {v['best'][task]:g})" if ax is m else ""))
        ax.set_xticks(x, [f"{e:g}" for e in EPS])
        ax.set(xlabel="clip_eps", ylabel=ylabel)
        ax.legend(fontsize=8, loc="best")
    o.set_yscale("log")
    ez = r["sizes"]["eps"]
    m.set_title(f"(m) Q53: gold against epsilon on two tasks\n{ez['iterations']} iterations x {ez['batch_size']}, lr "
                f"{EPS_LR:g}, {len(ez['seeds'])} seeds (dots), mean (line)")
    n.set_title("(n) the clip fraction against epsilon")
    o.set_title("(o) how far each update moves (k3 of KL(pi_old || pi))")
    p.set_title("(p) response length of the final policies")


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(4, 4, figsize=(21, 18.5))
    (a, b, c, d), (e, f, g, h), (i, j, k, l) = axes[:3]
    mask, scores, cr = r["rollout"]["mask"], r["rollout"]["scores"], r["credit"]
    vr = max(np.abs(cr[s]["rewards"][mask != 0]).max() for s in SHAPINGS)
    va = max(np.abs(cr[s]["adv"][mask != 0]).max() for s in SHAPINGS)
    _heat(a, fig, cr["kl_final"]["rewards"], mask,
          f"(a) kl_final rewards: -beta kl_t, score on the last token (beta {r['beta']:.2f})", vr,
          "reward r_t (symlog)", linthresh=0.01)
    _heat(b, fig, cr["uniform"]["rewards"], mask, "(b) uniform rewards: -beta kl_t + score / n", vr,
          "reward r_t (symlog)", linthresh=0.01)
    _heat(c, fig, cr["kl_final"]["adv"], mask, "(c) kl_final: GAE advantage (its critic)", va, "advantage A_t")
    _heat(d, fig, cr["uniform"]["adv"], mask, "(d) uniform: GAE advantage, same responses (its critic)", va,
          "advantage A_t")
    for ax in (a, b, c, d):
        ax.set_yticks(range(len(scores)), [f"{s:+.2f}" for s in scores], fontsize=7)
        ax.set_ylabel("response (its score)")
    n_seeds, it = len(r["sizes"]["seeds"]), np.arange(r["sizes"]["iterations"])
    s = summary(r)
    pos = np.arange(N_POS)
    for sh in SHAPINGS:
        e.plot(pos, s[sh]["corr_end"], "-o", color=COLORS[sh], label=f"{sh}: from the end")
        e.plot(pos, s[sh]["corr_start"], "--s", color=COLORS[sh], alpha=0.6, label=f"{sh}: from the start")
        f.plot(pos, s[sh]["abs_end"], "-o", color=COLORS[sh], label=f"{sh}: from the end")
        f.plot(pos, s[sh]["abs_start"], "--s", color=COLORS[sh], alpha=0.6, label=f"{sh}: from the start")
        for ax, key in ((g, "gold/score"), (h, "val/explained_variance")):
            y = _curve(r["runs"][sh], key)
            ax.plot(it, y.mean(0), color=COLORS[sh], lw=1.8, label=f"{sh} (mean of {n_seeds} seeds)")
            ax.fill_between(it, y.min(0), y.max(0), color=COLORS[sh], alpha=0.15, lw=0)
    e.axhline(0, color="k", lw=0.8)
    e.set(title=f"(e) corr(A_t, score) over responses, last {LAST_ITERS} iterations", ylabel="correlation",
          xlabel="position k (from the end: 0 = last token; from the start: 0 = first token)")
    e.legend(fontsize=8)
    f.set(title="(f) mean |A_t| (whitened, as PPO used them)", ylabel="mean |advantage|",
          xlabel="position k (from the end / from the start)")
    f.legend(fontsize=8)
    g.axhline(r["reference"]["gold_mean"], color="grey", ls="--", lw=1, label="SFT policy")
    g.set(title="(g) gold score of the rollouts", xlabel="iteration", ylabel="gold score")
    g.legend(fontsize=8)
    h.axhline(0, color="k", lw=0.8)
    h.set(title="(h) critic explained variance 1 - Var[R - V] / Var[R]", xlabel="iteration",
          ylabel="explained variance")
    h.legend(fontsize=8)
    # the ratios after each update, both shapings and every seed pooled
    lo, hi = np.log10(0.8), np.log10(1.2)
    bins = np.linspace(-1.5, 1.5, 91)
    i.hist(np.clip(r["log_r"] / np.log(10), bins[0], bins[-1]), bins=bins, alpha=0.5, color="tab:blue", density=True,
           label=f"token ratio r_t: {s['ratios']['token_outside']:.1%} outside the band")
    i.hist(np.clip(r["log_R"] / np.log(10), bins[0], bins[-1]), bins=bins, alpha=0.5, color="tab:red", density=True,
           label=f"response ratio R = prod r_t: {s['ratios']['sequence_outside']:.0%} outside")
    i.axvspan(lo, hi, color="grey", alpha=0.2, label="clip band [0.8, 1.2]")
    i.set_yscale("log")
    i.set(title="(i) ratios after each update, pi / pi_old on the rollout", xlabel="log10 ratio (clipped to +-1.5)",
          ylabel="density (log)")
    i.legend(fontsize=8)
    n = np.arange(1, int(r["lengths"].max()) + 1)
    j.scatter(r["lengths"] + np.random.default_rng(0).uniform(-0.3, 0.3, len(r["lengths"])), np.abs(r["log_R"]),
              s=4, alpha=0.25, color="tab:red", label="|log R| of a response")
    sig = s["ratios"]["token_log_ratio_std"]
    j.plot(n, np.sqrt(n) * sig, "k-", label=f"sqrt(n) x token std ({sig:.3f}): independent tokens")
    j.axhline(np.log(1.2), color="grey", ls=":", label="log 1.2 (edge of the band)")
    j.set(title="(j) |log R| grows with the response length", xlabel="response length n (tokens)", ylabel="|log R|")
    j.legend(fontsize=8)
    for key, label, col in (("probe/token_outside", "tokens outside the band", "tab:blue"),
                            ("probe/token_clipfrac", "tokens clipped (zero gradient)", "tab:cyan"),
                            ("probe/sequence_outside", "responses outside the band", "tab:red"),
                            ("probe/sequence_clipfrac", "responses a sequence clip would zero", "tab:pink")):
        y = np.array([[rec[key] for rec in recs] for v in r["runs"].values() for recs in v["records"]])
        k.plot(it, y.mean(0), color=col, lw=1.8, label=label)
    during = [[rec["policy/clipfrac_avg"] for rec in recs] for v in r["runs"].values() for recs in v["records"]]
    k.plot(it, np.mean(during, axis=0), color="tab:blue", ls=":", label="clipfrac during the update (trainer)")
    k.set(title="(k) after each update: tokens vs whole responses (lr decays to 0)", xlabel="iteration",
          ylabel="fraction")
    legend_in_margin(k, 0.35, fontsize=8, ncol=2)           # the curves start high and fall: no free corner
    nn = np.arange(1, 51)
    l.semilogy(nn, 1.2 ** nn, "k-", label="worst case 1.2^n (every token at 1.2)")
    l.semilogy(nn, 0.8 ** nn, "k--", label="0.8^n")
    for (n_tok, R), col in zip(r["iid"].items(), ("tab:red", "tab:purple")):
        q = np.quantile(R, [0.05, 0.5, 0.95])
        l.errorbar([n_tok], [q[1]], yerr=[[q[1] - q[0]], [q[2] - q[1]]], fmt="o", color=col, capsize=5,
                   label=f"n={n_tok}, iid r_t ~ U[0.8, 1.2]: 5-95% of R in [{q[0]:.2f}, {q[2]:.2f}], "
                         f"{np.mean(np.abs(R - 1) > 0.2):.0%} outside the band")
    l.annotate(f"1.2^50 = {r['worst']['1.2^50']:.0f}", (50, r["worst"]["1.2^50"]), textcoords="offset points",
               xytext=(-80, -4), fontsize=8)
    l.set(title="(l) the claim 1.2^50 (Q37) vs independent ratios uniform in [0.8, 1.2]", xlabel="tokens n",
          ylabel="sequence ratio R (log)")
    l.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.13))     # below: the lines fill the corners
    _plot_eps(r, *axes[3])
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
