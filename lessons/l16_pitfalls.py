r"""Lesson 16 - pitfalls: the critic's start (value clip / norm / bias init), length hacking, the lr = 0 ratio check.

Pipeline step: the parts of RLHF-PPO that fail silently. Three experiments on the cached SFT policy and
reward model (`minippo.studies.study.Study`), helpers in `minippo.studies.pitfalls`.

A. **The critic.** Value networks are unstable early on, and the fixes usually proposed are clipping the
   value loss, normalising the values, and initialising the value head's bias to the reward model's mean
   score. A critic from the SFT trunk with a zero head (values 0) is trained against the reward model plus
   10 (the Bradley-Terry loss fixes only score differences, so a raw RM's mean is arbitrary): no fix, value
   clipping (`value_clip`, with `clip_eps_value` 0.2), value normalisation (`value_norm`, PopArt running mean
   / std of the returns), bias initialisation to the mean score (`critic_bias_init="mean_score"`), all three,
   and the main job's critic initialised from the reward model (`critic_init="reward_model"`); and (Q47), from
   the bias init's start, the critic's output clamped to [-10, 10] (`studies.pitfalls.ClampedCritic`), what some
   code calls value clipping, beside PPO's value clipping, which bounds the change around V_old instead. Measured: the
   critic's error $\tfrac12\, \mathrm{mean}(V - R)^2$ in return units at each rollout (before its update),
   the explained variance $1 - \mathrm{Var}[R - V] / \mathrm{Var}[R]$, and the gold score. GAE turns a value
   offset into advantages that depend on the token's distance to the end. A small value error does not mean
   a better policy: A checks that too.
B. **Length hacking.** A reward model that likes length is exploited: the score plus 0.3 per response token
   (`length_bonus`) with room for 40 tokens; then the same bonus with `length_penalty` set to the slope of
   the shaped score against length on SFT samples (`pitfalls.length_slope`); then the same bonus divided by
   the length to the power $\alpha = 0.5$ (`length_norm_alpha`), another proposed fix. The gold score
   penalises > 30 words, run-on sentences (> 3 conjunctions) and missing periods.
C. **The lr = 0 check.** With lr = 0 the first minibatch must give ratio 1, approx KL 0, clip fraction 0
   ($L^{CLIP}$, PPO paper eq. (7)). Exact on any machine: the parameters stay bitwise unchanged, and
   recomputing the whole rollout batch with the rollout's own shapes ("same forward (the trainer)") is
   bitwise its logp. To float32 rounding only: the update's minibatches hold b of the B responses, and a BLAS
   kernel may sum a product of b*T rows in another order than one of B*T rows (OpenBLAS's Haswell / Zen
   kernels do, SkylakeX does not), so the first minibatch's ratio is bitwise 1 on some machines and 1 to
   within `pitfalls.logp_rounding_tolerance` ($\epsilon_{f32} (4L + 2) \sqrt{4C} \max|\log p|$) on others;
   clipfrac is exactly 0 either way. The lesson prints which of the two this machine measured, and names its
   BLAS kernel. Then the same rollout's log-probs recomputed with one deliberate bug each: another
   temperature, no attention mask, the logits one column off, and (a control) more padding with the mask
   extended.

Paper: the value loss of PPO eq. (9) (Schulman et al. 2017, arXiv:1707.06347) with the clipped variant of
OpenAI's baselines (not in the paper), $V_{clip} = V_{old} + \mathrm{clip}(V - V_{old}, -\epsilon_v, \epsilon_v)$:

$$
L^{VF} = \tfrac12\, \max\left((V - R)^2,\ (V_{clip} - R)^2\right)
$$

and GAE (PPO eqs. (11)-(12)) for how a value offset reaches the advantages.

The figure (from --full: 24 iterations x 64 responses, 3 PPO seeds; lengths 30 iterations): (a) critic error
in return units, (b) explained variance, (c) gold per critic variant, one point per seed (the clamp of Q47 dashed
in (a), (b)); (d) response length
and (e) gold of the rollouts under the length bonus, (f) the gold penalty terms of the final policies; (g) the
lr = 0 check table, (h) the log-ratios each bug produces, (i) approx KL and the fraction of tokens outside
the clip band against the recompute temperature.

Exercises:
1. Set `clip_eps_value` to 10 in the "value clip" variant: does value clipping still slow the critic?
   Why is a clip range in return units a poor idea when the returns' scale is unknown?
2. (s + 0.3 n) / n^alpha: which alpha cancels the linear bonus exactly? Run it (`length_norm_alpha=1.0`)
   and compare the lengths. What does it do to the reward model's own score differences?
3. Add "sampler log-probs" to the lr = 0 check: use `rollout.gen_logp` (the KV-cache sampler's numbers)
   as logp_old. How far from 1 is the ratio, and why is it not exactly 1?

Questions: Q46, Q47, Q48, Q49, Q50, Q51, Q15, Q3.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (FAILS, HOLDS, Verdict, all_of, by_key, comparison, decide, diff_text, identity,
                             legend_in_margin, lesson_main, measured, measurement, pyplot, save, seed_compare, time_line)
from minippo.blas import blas_core_name
from minippo.rlhf.data.gold import gold_breakdown, gold_profile
from minippo.rlhf.generate import show_sample
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.rlhf.reward_model import sequence_scores
from minippo.rl.masked import masked_mean
from minippo.studies.pitfalls import (clamp_critic, length_slope, logp_rounding_tolerance, lr_zero_verdict,
                                      offset_reward_model, ratio_statistics, recompute_logp, value_error)
from minippo.studies.study import Study
from minippo.studies.sweep_stats import compare, compare_paired, pooled_seed_std, seed_curves, seed_values

OFFSET = 10.0                   # A: added to every reward-model score
NO_FIX = dict(config=KnobsConfig, critic_init="sft", value_clip=False, value_norm=False, critic_bias_init="keep")
CRITICS = {
    "no fix": NO_FIX,
    "value clip": {**NO_FIX, "value_clip": True},
    "value norm": {**NO_FIX, "value_norm": True},
    "bias init": {**NO_FIX, "critic_bias_init": "mean_score"},
    "all three": {**NO_FIX, "value_clip": True, "value_norm": True, "critic_bias_init": "mean_score"},
    "RM-init critic": dict(critic_init="reward_model"),      # the main job's: RM weights, value clip, bias init
}
BOX = (-10.0, 10.0)             # A, Q47: the value clamped to a fixed box instead of clipped around V_old,
CLAMP = "bias init + clamp [-10, 10]"   # ... from the bias init's start (V near the returns: where a box binds)
BONUS, LONG_TOKENS = 0.3, 40    # B: score + BONUS per token, responses up to LONG_TOKENS tokens
ALPHA = 0.5                     # B: the length normalisation score / n^ALPHA (Q50)
TERMS = ("unknown", "run_on", "no_period", "word_order", "adj_chain", "long")   # the gold's penalty terms shown
RECOMPUTES = {                  # C: label -> (recompute mode, temperature)
    "same forward (the trainer)": ("same", 1.0),
    "temperature 0.7, not 1": ("same", 0.7),
    "no attention mask": ("no_mask", 1.0),
    "logits one column off": ("shifted", 1.0),
    "3 more pads, mask kept": ("repadded", 1.0),
}
CONTROLS_C = ("same forward (the trainer)", "3 more pads, mask kept")   # C: recomputes that must change nothing
TEMPS = (0.5, 0.6, 0.7, 0.85, 1.0, 1.15, 1.3, 1.5, 2.0)


def sizes(quick: bool, full: bool) -> dict:
    """Run lengths: quick (smoke test), default (classroom size), full (the committed figure)."""
    if quick:
        return dict(iterations=3, batch_size=16, minibatch_size=8, seeds=(0, 1), long_iterations=4, long_seeds=(0,))
    if full:
        return dict(iterations=24, batch_size=64, minibatch_size=16, seeds=(0, 1, 2), long_iterations=30,
                    long_seeds=(0, 1, 2))
    return dict(iterations=12, batch_size=32, minibatch_size=8, seeds=(0, 1), long_iterations=15, long_seeds=(0,))


def lr_zero_check(study, base: dict) -> dict:
    """One lr = 0 iteration, then its rollout's log-probs recomputed right and with each bug; the float32
    rounding tolerance of this model and what the first minibatch measured against it."""
    r = study.run(study.config(**{**base, "iterations": 1, "lr": 0.0}))
    tr = r["trainer"]
    ro = tr.last_rollout
    T = tr.cfg.temperature
    logps = {label: recompute_logp(tr.actor, ro, temperature=t * T, mode=mode, pad_id=study.tokenizer.pad_id)
             for label, (mode, t) in RECOMPUTES.items()}
    valid = ro.response_mask != 0
    scale = float(np.abs(ro.logp[valid]).max())              # the largest |log pi_old| compared
    tol = logp_rounding_tolerance(tr.actor.cfg, scale)
    dtype = tr.actor.cfg.dtype
    stats = {k: ratio_statistics(v, ro, tr.cfg.clip_eps, row_tol=tol) for k, v in logps.items()}
    temps = [dict(t=t, **ratio_statistics(recompute_logp(tr.actor, ro, temperature=t * T), ro, tr.cfg.clip_eps))
             for t in TEMPS]
    return {"first_minibatch": tr.first_minibatch, "record": r["records"][0], "clip_eps": tr.cfg.clip_eps,
            "padded_rows": float(np.mean((ro.prompt_mask == 0).any(axis=1))), "stats": stats,
            "log_ratio": {k: (v - ro.logp)[valid].astype(np.float64) for k, v in logps.items()}, "temps": temps,
            "tolerance": tol, "logp_scale": scale, "dtype": str(dtype), "kernel": blas_core_name(),
            "model": {"n_layer": tr.actor.cfg.n_layer, "n_embd": tr.actor.cfg.n_embd},
            "batch_size": tr.cfg.batch_size, "minibatch_size": tr.cfg.minibatch_size,
            "verdict": lr_zero_verdict(tr.first_minibatch, tol, dtype),
            "same_verdict": lr_zero_verdict(stats["same forward (the trainer)"], tol, dtype),
            "params_unchanged": all(np.array_equal(tr.actor.params[k], study.sft.params[k]) for k in study.sft.params)}


def _log_critic(trainer, rollout, record) -> None:
    """Callback of part A: the critic's error in return units, and the fractions of valid tokens whose value /
    return lies on or outside :data:`BOX` (for the clamped critic: where the clamp binds)."""
    m, (lo, hi) = rollout.response_mask, BOX
    outside = lambda x: masked_mean(((x <= lo) | (x >= hi)).astype(np.float64), m)     # noqa: E731
    record.update({"val/value_error": value_error(rollout), "val/values_outside_box": outside(rollout.values),
                   "val/returns_outside_box": outside(rollout.returns)})


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick, full)
    study = Study(quick=quick, seed=seed)
    base = dict(iterations=sz["iterations"], batch_size=sz["batch_size"], minibatch_size=sz["minibatch_size"], lr=5e-4)
    # A. six critics against the offset reward model, and (Q47) the no-fix critic clamped to BOX; the callback logs
    # the critic's error in return units and where a clamp to BOX binds (or would bind) on values and returns
    offset_rm = offset_reward_model(study.reward_model, OFFSET)
    critic = study.sweep(CRITICS, seeds=sz["seeds"], base=base, callback=_log_critic, reward_model=offset_rm)
    q47 = study.sweep({CLAMP: CRITICS["bias init"]}, seeds=sz["seeds"], base=base, callback=_log_critic,
                      reward_model=offset_rm, setup=lambda tr: clamp_critic(tr, *BOX))
    # B. length: the SFT samples with room for LONG_TOKENS give the slope of the bonus-shaped score
    cfg_long = study.config(max_new_tokens=LONG_TOKENS)
    ref_long = study.evaluate(study.sft, max_new_tokens=LONG_TOKENS, sample_seed=1)
    shaped = sequence_scores(ref_long["rm"], ref_long["ended"], ref_long["length"].astype(np.int64),
                             missing_eos_penalty=cfg_long.missing_eos_penalty, length_bonus=BONUS)
    slope = length_slope(shaped, ref_long["length"])
    penalty = round(max(slope, 0.0), 4)                  # a penalty, never a bonus
    knobs = {"config": KnobsConfig}
    variants = {"RM score": {}, f"RM + {BONUS}/token": {**knobs, "length_bonus": BONUS},
                f"RM + {BONUS}/token - fitted {penalty}/token": {**knobs, "length_bonus": BONUS, "length_penalty": penalty},
                f"(RM + {BONUS}/token) / length^{ALPHA}": {**knobs, "length_bonus": BONUS, "length_norm_alpha": ALPHA}}
    length = study.sweep(variants, seeds=sz["long_seeds"],   # evaluated with room for LONG_TOKENS too
                         base={**base, "iterations": sz["long_iterations"], "max_new_tokens": LONG_TOKENS})
    for v in length.values():
        v["terms"] = [gold_profile(e["texts"]) for e in v["eval"]]
        v["sentiment"] = [np.array([gold_breakdown(t)["sentiment"] for t in e["texts"]]) for e in v["eval"]]
    # C. the lr = 0 check
    check = lr_zero_check(study, base)
    return {"sizes": sz, "base": base, "reference": study.reference, "quick": quick, "full": full,
            "critic": critic, "q47": q47, "clip_eps_value": study.config(**base).clip_eps_value, "ref_long": {**ref_long, "terms": gold_profile(ref_long["texts"])},
            "slope": slope, "penalty": penalty, "length": length, "check": check,
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}


def summary(r: dict) -> dict:
    """Per critic variant: error at iteration 0 and at the end, explained variance, gold (per seed)."""
    out = {}
    for name, v in r["critic"].items():
        err, ev = seed_curves(v, "val/value_error"), seed_curves(v, "val/explained_variance")
        out[name] = {"err0": float(err[:, 0].mean()), "err_end": float(err[:, -3:].mean()),
                     "err_end_seeds": err[:, -3:].mean(axis=1), "ev_end_seeds": ev[:, -5:].mean(axis=1),
                     "ev_end": float(ev[:, -5:].mean()), "gold": seed_values(v, "gold_mean"),
                     "kl": float(seed_values(v, "kl_mean").mean()),
                     "loss_end": float(seed_values(v, "loss/value_avg").mean())}
    return out


def clamp_summary(r: dict) -> dict:
    """Q47: PPO's value clipping (from no fix: V starts at 0, far from the returns) and the clamp (from the bias init:
    V starts near the returns), each beside its run without it; per seed the error at the end (last 3 iterations,
    return units), where a clamp to BOX binds (values on or outside it, first iteration and last 3), the returns
    outside it, the value-clip fraction during the update (last 3), and evaluation gold. Seed noise (None with one
    seed): of log10 of the error pooled over these four runs (errors are positive and their spread grows with
    their size: compared as ratios), of the gold over the six critics of part A and the clamp."""
    variants = {name: r["critic"][name] for name in ("no fix", "value clip", "bias init")}
    variants[CLAMP] = r["q47"][CLAMP]
    out = {}
    for name, v in variants.items():
        box = seed_curves(v, "val/values_outside_box")
        err = seed_curves(v, "val/value_error")[:, -3:].mean(axis=1)
        out[name] = {"err_end": err, "log_err": np.log10(np.maximum(err, 1e-12)),
                     "box_first": float(box[:, 0].mean()), "box_end": float(box[:, -3:].mean()),
                     "returns_out": float(seed_curves(v, "val/returns_outside_box")[:, -3:].mean()),
                     "vclip_end": float(seed_curves(v, "val/clipfrac_avg")[:, -3:].mean()),
                     "gold": seed_values(v, "gold_mean")}
    every = [*r["critic"].values(), *r["q47"].values()]
    noise = None
    if min(len(v["records"]) for v in every) > 1:
        noise = {"log_err": pooled_seed_std([x["log_err"] for x in out.values()])[0],
                 "gold": pooled_seed_std([seed_values(v, "gold_mean") for v in every])[0]}
    return {"variants": out, "noise": noise}


def clamp_lines(r: dict) -> list[str]:
    """The narrative of Q47: a clamp of V to a fixed box against PPO's value clipping around V_old."""
    q = clamp_summary(r)
    x, noise = q["variants"], q["noise"]
    cmp_ = lambda a, b, k: seed_compare(x[a][k], x[b][k], None if noise is None else noise[k])   # noqa: E731
    nf, vc, bi, cl = x["no fix"], x["value clip"], x["bias init"], x[CLAMP]
    e_clip, e_clamp = cmp_("no fix", "value clip", "log_err"), cmp_("bias init", CLAMP, "log_err")
    gold = cmp_("bias init", CLAMP, "gold")
    lo, hi = BOX
    L = [f"  Q47. A clamp of V to [{lo:g}, {hi:g}] (the critic's output clamped: zero gradient outside) against PPO's "
         f"value clipping (V_old +- {r['clip_eps_value']:g} around each rollout value). Against RM + {OFFSET:g}, "
         f"{cl['returns_out']:.0%} of the returns lie outside the box at the end. Value clipping binds where V moves: "
         f"from V = 0 on {vc['vclip_end']:.0%} of the tokens during the update at the end (val/clipfrac_avg), while "
         f"{vc['box_end']:.0%} of its values lie on or outside the box. The clamp binds where V is: from the bias "
         f"init (V at the mean score) on {cl['box_first']:.0%} of the tokens at iteration 0 and {cl['box_end']:.0%} "
         "at the end (values pinned at the edge).",
         f"    error at the end (log10 differences: +0.30 = twice): value clip {vc['err_end'].mean():.2f} vs no fix "
         f"{nf['err_end'].mean():.2f} ({diff_text(e_clip, '+.2f')}); clamp {cl['err_end'].mean():.2f} vs bias init "
         f"{bi['err_end'].mean():.2f} ({diff_text(e_clamp, '+.2f')}), gold {diff_text(gold, '+.2f')}.",
         by_key(verdicts(r))["q47_clamp_differs"].render("    ")]
    return L


def mean_terms(variant: dict) -> dict:
    """The gold breakdown (penalty terms, sentiment, words, ...) of a length variant, mean over its seeds."""
    return {k: float(np.mean([x[k] for x in variant["terms"]])) for k in variant["terms"][0]}


COLORS = {**dict(zip(CRITICS, ("tab:red", "tab:orange", "tab:green", "tab:blue", "tab:purple", "tab:gray"))),
          CLAMP: "tab:brown"}
LCOLORS = ("tab:gray", "tab:red", "tab:blue", "tab:orange")


def per_prompt(variant: dict, key: str) -> list[np.ndarray]:
    """Per seed, the evaluation's per-prompt array ``key`` (``gold``, ``length``) or the per-sample sentiment."""
    if key == "sentiment":
        return variant["sentiment"]
    return [np.asarray(e[key], dtype=float) for e in variant["eval"]]


def eval_compare(a: dict, b: dict, key: str) -> dict:
    """b - a of an evaluation key, with the noise the lesson measured: the seed noise of the two variants pooled
    when each has two seeds or more; else the sampling noise, paired over the prompts (both are evaluated on the
    same prompts), which leaves out the training seed's noise (``noise`` says which)."""
    A, B = per_prompt(a, key), per_prompt(b, key)
    if len(A) >= 2 and len(B) >= 2:
        ma, mb = [x.mean() for x in A], [x.mean() for x in B]
        return {**compare(ma, mb, pooled_seed_std([ma, mb])[0]), "noise": "seed"}
    return {**compare_paired(A[0], B[0]), "noise": "prompt-sampling"}


def critic_noise(s: dict, key: str) -> float | None:
    """Seed noise of a per-seed critic summary (``gold``, ``err_end_seeds``, ``ev_end_seeds``) pooled over the six
    critics; None with one seed."""
    groups = [x[key] for x in s.values()]
    return pooled_seed_std(groups)[0] if min(len(g) for g in groups) > 1 else None


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed or per iteration: part
    A's critic summary, Q47's clamp summary, and part B's length variants (by position: their names hold the
    fitted penalty) with their mean length, gold and sentiment over the seeds."""
    names = list(r["length"])
    length = {str(i): {"name": k, "length_mean": float(seed_values(r["length"][k], "length_mean").mean()),
                       **mean_terms(r["length"][k])} for i, k in enumerate(names)}
    s, q = summary(r), clamp_summary(r)["variants"]
    return {"summary": s, "clamp": clamp_summary(r), "length_variants": length,
            "critic_mean": {name: {"gold": float(np.mean(x["gold"]))} for name, x in s.items()},
            "clamp_mean": {name: {"err_end": float(np.mean(x["err_end"])), "gold": float(np.mean(x["gold"]))}
                           for name, x in q.items()},
            "sft_long": {"length_mean": float(r["ref_long"]["length_mean"]), **r["ref_long"]["terms"]}}


def narrative(r: dict) -> str:
    """The measured numbers, and which common claims hold at this scale."""
    sz, s = r["sizes"], summary(r)
    L = [f"A. The critic: {sz['iterations']} iterations x {sz['batch_size']} responses, lr {r['base']['lr']:g}, "
         f"PPO seeds {list(sz['seeds'])}; reward = RM score + {OFFSET:g}; SFT gold {r['reference']['gold_mean']:+.3f}.",
         f"  {'critic':<16}{'error it 0':>11}{'error end':>10}{'loss/value':>11}{'EV end':>8}{'gold':>8}{'KL':>6}"]
    for name, x in s.items():
        L.append(f"  {name:<16}{x['err0']:>11.2f}{x['err_end']:>10.2f}{x['loss_end']:>11.3f}{x['ev_end']:>8.2f}"
                 f"{x['gold'].mean():>+8.3f}{x['kl']:>6.2f}")
    nf = s["no fix"]
    noise = {k: critic_noise(s, k) for k in ("gold", "err_end_seeds", "ev_end_seeds")}
    cmp_ = lambda a, b, k: seed_compare(a[k], b[k], noise[k])          # noqa: E731  b - a

    if noise["gold"] is not None:
        L.append(f"  Seed noise of the gold (pooled over variants): {noise['gold']:.3f}. Gold vs 'no fix':")
        L += [f"    {name:<16}{diff_text(cmp_(nf, x, 'gold'), '+.2f')}" for name, x in s.items() if name != "no fix"]

    vc, vn, bi, rm = s["value clip"], s["value norm"], s["bias init"], s["RM-init critic"]
    clip_err, norm_err = cmp_(nf, vc, "err_end_seeds"), cmp_(nf, vn, "err_end_seeds")
    V = by_key(verdicts(r))
    L += [f"  Value clipping: its error at the end minus no fix's {diff_text(clip_err, '+.2f')}; gold "
          f"{diff_text(cmp_(nf, vc, 'gold'), '+.2f')}. The clipped loss has no gradient once V is 0.2 from its rollout "
          f"value, so a critic {OFFSET:g} off needs ~{OFFSET / 0.2:.0f} iterations to arrive: clipping is a brake, "
          "useful only near the target.", V["value_clip_calms"].render("  "),
          f"  Value normalisation: error minus no fix's {diff_text(norm_err, '+.2f')} (its loss is in units of the "
          f"returns' std, whatever their scale); gold {diff_text(cmp_(nf, vn, 'gold'), '+.2f')}.",
          V["value_norm_fixes_scale"].render("  "),
          f"  The value head's bias at the mean RM score: error at iteration 0 {nf['err0']:.1f} -> {bi['err0']:.2f}; gold "
          f"{diff_text(cmp_(nf, bi, 'gold'), '+.2f')}.", V["bias_init_removes_offset"].render("  ")]
    ev = cmp_(bi, rm, "ev_end_seeds")
    L.append(f"  The main job's critic (RM weights, value clip, bias init) starts at error {rm['err0']:.2f} and explains "
             f"{rm['ev_end']:.2f} of the returns' variance at the end, vs {bi['ev_end']:.2f} for the SFT-trunk critic "
             f"with the bias fixed ({diff_text(ev, '+.2f')}; gold {diff_text(cmp_(bi, rm, 'gold'), '+.2f')}). EV is "
             "blind to a constant offset (compare (a) with (b)): it measures what the critic knows about the text.")
    L.append(V["rm_critic_explains_more"].render("  "))
    L.append("  A common claim: a smaller value loss means a better policy. The six critics, logged loss/value at the "
             "end / gold: " + ", ".join(f"{k} {x['loss_end']:.3f} / {x['gold'].mean():+.2f}" for k, x in s.items()) + "."
             + (f" The logged loss/value is no common scale either: 'value norm' logs {vn['loss_end']:.3f} for an "
                f"error of {vn['err_end']:.2f} in return units." if vn["loss_end"] < vn["err_end"] / 2 else "")
             + " Judge the policy by gold / return, KL and entropy.")
    L.append(V["smaller_loss_better_policy"].render("  "))
    L += clamp_lines(r)
    # B
    names = list(r["length"])
    lens = {k: float(seed_values(r["length"][k], "length_mean").mean()) for k in names}
    tm = {k: mean_terms(r["length"][k]) for k in names}
    ref = {**r["ref_long"]["terms"], "length_mean": r["ref_long"]["length_mean"]}
    L += [f"\nB. Length: {sz['long_iterations']} iterations, room for {LONG_TOKENS} tokens, "
          f"seeds {list(sz['long_seeds'])}"
          + (f" (one training seed: the s.e. below are the sampling noise over the {len(r['reference']['gold'])} "
             "prompts, paired, without the training seed's noise). " if len(sz["long_seeds"]) == 1 else ". ")
          + 
          f"Slope of the bonus-shaped score against length on SFT samples: {r['slope']:+.3f}/token (the RM's own "
          f"{r['slope'] - BONUS:+.3f} plus the bonus) -> length_penalty {r['penalty']}.",
          f"  {'reward':<36}{'tokens':>7}{'words':>6}{'>30w':>5}" + "".join(f"{t:>11}" for t in TERMS)
          + f"{'sentim.':>8}{'gold':>7}"]
    for k, x in [("SFT policy", ref)] + [(k, {**tm[k], "length_mean": lens[k]}) for k in names]:
        L.append(f"  {k:<36}{x['length_mean']:>7.1f}{x['n_words']:>6.1f}{x['frac_too_long']:>5.0%}"
                 + "".join(f"{x[t]:>11.3f}" for t in TERMS) + f"{x['sentiment']:>+8.2f}{x['gold']:>+7.3f}")
    plain, hack, fixed, normed = (r["length"][k] for k in names)
    n0 = lens[names[0]]                                 # a typical response length without the bonus
    ph, hk, fx, nm_ = names
    longer, worse = eval_compare(plain, hack, "length"), eval_compare(plain, hack, "gold")
    grown = sorted(TERMS, key=lambda t: tm[ph][t] - tm[hk][t])[:3]
    V = by_key(verdicts(r))
    L += [f"  A common claim: a reward model's preference for length is exploited. With the bonus: length "
          f"{diff_text(longer, '+.1f', longer['noise'])} tokens, gold {diff_text(worse, '+.2f', worse['noise'])}. "
          f"Sentiment {tm[ph]['sentiment']:+.2f} -> {tm[hk]['sentiment']:+.2f}. The penalty terms that "
          "grew most: " + ", ".join(f"{t} {tm[ph][t]:.2f} -> {tm[hk][t]:.2f}" for t in grown)
          + f". More than 30 words: {tm[hk]['frac_too_long']:.0%} of the responses, so the gold's 'long' term "
          + ("hardly fires" if tm[hk]["long"] < 0.05 else "fires")
          + (": each extra token is another chance to misspell a word (BPE pieces glued wrongly: 'unknown') or to "
             "chain one more clause." if tm[hk]["unknown"] > tm[ph]["unknown"] else "."),
          V["length_exploited"].render("  ")]
    fix = eval_compare(plain, fixed, "length")
    L.append(f"  The fitted length penalty: {lens[fx]:.1f} tokens, gold {tm[fx]['gold']:+.2f}; length minus no "
             f"bonus's {diff_text(fix, '+.1f', fix['noise'])}. Fitted on SFT samples it removes the linear length term "
             "(here exactly the bonus plus the RM's own slope); a real RM's length bias is neither linear nor known, "
             "and has to be measured like this.")
    L.append(V["penalty_undoes_bonus"].render("  "))
    nl, ns = eval_compare(plain, normed, "length"), eval_compare(plain, normed, "sentiment")
    L.append(f"  The division by length^{ALPHA} (another common fix): {lens[nm_]:.1f} tokens, length minus no bonus's "
             f"{diff_text(nl, '+.1f', nl['noise'])}; gold {tm[nm_]['gold']:+.2f}. The bonus is flattened, not removed: "
             f"(s + {BONUS} n) / n^{ALPHA} = s / n^{ALPHA} + {BONUS} n^{1 - ALPHA:g}. Doubling a {n0:.0f}-token response "
             f"now gains {BONUS * (n0 * 2) ** (1 - ALPHA) - BONUS * n0 ** (1 - ALPHA):.2f} instead of {BONUS * n0:.1f}. "
             f"The price: the reward model's own signal s is divided by n^{ALPHA} ~ {n0 ** ALPHA:.1f} too; sentiment "
             f"minus no bonus's {diff_text(ns, '+.2f', ns['noise'])}. Also, a negative s / n^{ALPHA} rises towards 0 as "
             f"n grows, and {np.mean(r['ref_long']['rm'] < 0):.0%} of the SFT samples score below 0 on the normalised "
             "RM. Dividing by n^alpha cancels exactly only a bias that grows like n^alpha.")
    L += [V["norm_still_longer"].render("  "), V["norm_learns_less"].render("  ")]
    L.append("  Samples with the bonus: " + " | ".join(
        show_sample(t, e) for t, e in zip(hack["eval"][0]["texts"][:2], hack["eval"][0]["ended"][:2])))
    # C
    L += lr_zero_paragraph(r["check"])
    ck = r["check"]
    L += [f"  {'recompute':<28}{'ratio mean':>11}{'min':>9}{'max':>9}{'approx KL':>10}{'clipfrac':>9}"
          f"{'|r-1|>eps':>10}{'rows':>6}"]
    for k, x in ck["stats"].items():
        L.append(f"  {k:<28}{x['ratio_mean']:>11.4f}{x['ratio_min']:>9.3g}{x['ratio_max']:>9.3g}{x['approx_kl']:>10.2g}"
                 f"{x['clipfrac']:>9.1%}{x['outside_band']:>10.1%}{x['rows_changed']:>6.0%}")
    st = ck["stats"]
    nm, rp = st["no attention mask"], st["3 more pads, mask kept"]
    bugs = [k for k in RECOMPUTES if k not in CONTROLS_C]
    hidden = [k for k in bugs if abs(st[k]["ratio_mean"] - 1) < 0.05]
    L.append("  " + (f"The mean ratio hides {', '.join(hidden)} (within 0.05 of 1); approx KL, clipfrac and the extreme "
                     "ratios do not." if hidden else "Every bug also moves the mean ratio by 0.05 or more.")
             + f" Without the mask {nm['rows_changed']:.0%} of rows are hit (a token beyond the rounding tolerance); "
             f"{ck['padded_rows']:.0%} have prompt padding. With 3 more pads and the mask extended, max |log r| "
             f"{rp['max_abs_log_ratio']:.2g} (tolerance {ck['tolerance']:.2g}; other shapes, so not bitwise).")
    V = by_key(verdicts(r))
    L += [V[k].render("  ") for k in ("no_mask_hits_padded_rows", "padding_harmless", "bugs_clip")]
    L.append(time_line(r, sizes(quick=False, full=True)))
    return "\n".join(L)


def lr_zero_paragraph(ck: dict) -> list[str]:
    """The lr = 0 check's verdict in words, each claim decided by the numbers this machine measured."""
    fm, rec, v = ck["first_minibatch"], ck["record"], ck["verdict"]
    kernel = ck["kernel"] or "unknown: OpenBLAS not found"
    B, b, tol = ck["batch_size"], ck["minibatch_size"], ck["tolerance"]
    m = ck["model"]
    L = [f"\nC. lr = 0, one iteration (BLAS kernel {kernel}, {ck['dtype']}): the rollout's forward pass scores B = {B} "
         f"responses at once, the update's minibatches b = {b}.",
         f"  First minibatch: ratio mean {fm['ratio_mean']!r} (min {fm['ratio_min']!r}, max {fm['ratio_max']!r}), "
         f"max |log r| {v['max_abs_log_ratio']:.2g}, approx KL {fm['approx_kl']!r}, clipfrac {fm['clipfrac']!r}; "
         f"over all minibatches val/ratio {rec['val/ratio']!r}, approxkl_max {rec['policy/approxkl_max']!r}, "
         f"clipfrac_avg {rec['policy/clipfrac_avg']!r}.",
         f"  float32 rounding tolerance of this model (L {m['n_layer']}, C {m['n_embd']}, max |logp| "
         f"{ck['logp_scale']:.1f}): eps * (4L + 2) * sqrt(4C) * max|logp| = {tol:.2g} on |log r|, "
         f"{v['approx_kl_tol']:.2g} on approx KL."]
    if v["verdict"] == "bitwise":
        L.append("  Bitwise 1 on this machine: every ratio of the first minibatch is exactly 1.0, approx KL "
                 f"and clipfrac exactly 0. That b-row minibatches reproduce the B-row rollout bitwise is a property "
                 f"of this BLAS kernel ({kernel}), not a guarantee: other kernels (OpenBLAS Haswell, Zen) sum a product "
                 "in an order that depends on its row count, and there the check holds to float32 rounding only.")
    elif v["verdict"] == "rounding":
        L.append(f"  1 to within {v['max_abs_log_ratio']:.2g} (tolerance {tol:.2g}): float32 rounding of "
                 f"differently shaped matrix products on this BLAS kernel ({kernel}). The rollout multiplied "
                 f"B*T-row matrices, the update b*T-row ones, and this kernel sums them in another order. clipfrac is "
                 f"still exactly 0: {v['max_abs_log_ratio']:.2g} is far below log(1 + clip_eps) = "
                 f"{np.log1p(ck['clip_eps']):.3f}.")
    else:
        L.append(f"  max |log r| {v['max_abs_log_ratio']:.2g}, approx KL {fm['approx_kl']:.2g}, "
                 f"clipfrac {fm['clipfrac']:.2g} are more than float32 rounding explains (tolerance {tol:.2g} / "
                 f"{v['approx_kl_tol']:.2g}, clipfrac 0): the update does not compute the rollout's log-probs. "
                 "Look for one of the bugs below.")
    same_max = ck["stats"]["same forward (the trainer)"]["max_abs_log_ratio"]
    L.append(f"  With lr = 0 the parameters stay {'bitwise unchanged' if ck['params_unchanged'] else 'CHANGED'}, and "
             f"recomputing the whole batch with the rollout's own shapes ('same forward' below) gives max |log r| "
             f"{same_max:.2g}.")
    L += [lr_zero_verdicts(ck)[0].render("  "), lr_zero_verdicts(ck)[1].render("  ")]
    return L


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (seed noise pooled over the variants; part B with
    one training seed: the prompt-sampling noise, which leaves out the seed's)."""
    s = summary(r)
    noise = {k: critic_noise(s, k) for k in ("gold", "err_end_seeds", "ev_end_seeds")}
    cmp_ = lambda a, b, k: seed_compare(s[a][k], s[b][k], noise[k])          # noqa: E731  b - a
    nf, bi = s["no fix"], s["bias init"]
    q = clamp_summary(r)
    cx, cn = q["variants"], q["noise"]
    e_clamp = seed_compare(cx["bias init"]["log_err"], cx[CLAMP]["log_err"], None if cn is None else cn["log_err"])
    # "a smaller value loss means a better policy", as a rule over every pair of critics: wherever the logged
    # loss/value of one is clearly smaller (log10, seed noise pooled over the critics), is its gold clearly higher?
    loss = {k: np.log10(np.maximum(seed_values(r["critic"][k], "loss/value_avg"), 1e-12)) for k in s}
    loss_noise = pooled_seed_std(list(loss.values()))[0] if noise["gold"] is not None else None
    names = list(s)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            lo_, hi_ = (a, b) if loss[a].mean() < loss[b].mean() else (b, a)
            if decide(float(loss[hi_].mean() - loss[lo_].mean()), None if loss_noise is None else
                      float(loss_noise * np.sqrt(1 / len(loss[a]) + 1 / len(loss[b]))), +1) == HOLDS:
                pairs.append(comparison(f"{lo_} < {hi_}", "", cmp_(hi_, lo_, "gold"), expect=+1,
                                        labels=(hi_, lo_), quantity="gold", values=(float(s[hi_]["gold"].mean()),
                                                                                   float(s[lo_]["gold"].mean()))))
    against = [v.key for v in pairs if v.outcome == FAILS]
    q15_because = (f"{len(pairs)} pairs of the {len(names)} critics differ in logged value loss beyond 2 s.e.; in "
                   f"{sum(v.holds for v in pairs)} the smaller loss has the higher gold beyond 2 s.e., in {len(against)} "
                   "the lower gold" + (f" ({'; '.join(against)})" if against else "") + ", the rest within the noise")
    out = [
        comparison("value_clip_calms", "A common claim: clipping the value loss calms the critic (lower error at the "
                   "end than no fix).", cmp_("no fix", "value clip", "err_end_seeds"), expect=-1,
                   labels=("no fix", "value clip"), quantity="critic error", values=(nf["err_end"],
                                                                                     s["value clip"]["err_end"]),
                   fmt="+.2f"),
        comparison("value_norm_fixes_scale", "A common claim: value normalisation fixes the critic's scale (lower "
                   "error at the end than no fix).", cmp_("no fix", "value norm", "err_end_seeds"), expect=-1,
                   labels=("no fix", "value norm"), quantity="critic error",
                   values=(nf["err_end"], s["value norm"]["err_end"]), fmt="+.2f"),
        measurement("bias_init_removes_offset", "A common claim: initialise the value head's bias to the mean RM "
                    "score: the offset is gone from every delta_t at iteration 0.", bi["err0"] / nf["err0"], 0.25, "<",
                    "error at iteration 0, bias init / no fix", fmt=".3f"),
        comparison("rm_critic_explains_more", "The main job's critic (RM weights, value clip, bias init) knows more "
                   "about the text than the tricks give: higher explained variance than the SFT-trunk critic with the "
                   "bias fixed.", cmp_("bias init", "RM-init critic", "ev_end_seeds"), expect=+1,
                   labels=("bias init", "RM-init critic"), quantity="explained variance",
                   values=(bi["ev_end"], s["RM-init critic"]["ev_end"]), fmt="+.2f"),
        (all_of("smaller_loss_better_policy", "A common claim (Q15): a smaller value loss means a better policy: "
                "of any two critics, the one with the smaller logged loss/value has the higher gold.", pairs,
                because=q15_because) if pairs else
         comparison("smaller_loss_better_policy", "A common claim (Q15): a smaller value loss means a better policy: "
                    "of any two critics, the one with the smaller logged loss/value has the higher gold.",
                    {"diff": 0.0, "se": None}, expect=+1, labels=("larger loss", "smaller loss"), quantity="gold")),
        comparison("q47_clamp_differs", "Q47: a clamp of V to a box is another operation than value clipping: it pins "
                   "V at the box's edge and raises the critic's error where returns lie beyond it.", e_clamp,
                   expect=+1, labels=("bias init", "bias init + clamp"), quantity="log10 critic error", fmt="+.2f",
                   values=(float(cx["bias init"]["log_err"].mean()), float(cx[CLAMP]["log_err"].mean())),
                   numbers={"clamp: values on the box's edge at the end": cx[CLAMP]["box_end"]}),
    ]
    names = list(r["length"])
    plain, hack, fixed, normed = (r["length"][k] for k in names)
    ln = lambda k: float(seed_values(r["length"][k], "length_mean").mean())      # noqa: E731
    longer, worse = eval_compare(plain, hack, "length"), eval_compare(plain, hack, "gold")
    bonus = eval_compare(hack, fixed, "length")
    nl, ns = eval_compare(plain, normed, "length"), eval_compare(plain, normed, "sentiment")
    tm = {k: mean_terms(r["length"][k]) for k in names}
    lab = ("no bonus", "bonus")
    out += [
        all_of("length_exploited", "A common claim: a reward model's preference for length is exploited: with a "
               "length bonus the responses get longer and the gold lower.", [
                   comparison("longer", "longer", longer, expect=+1, labels=lab, quantity="length", fmt="+.1f",
                              noise=longer["noise"], words=("longer", "shorter"), values=(ln(names[0]), ln(names[1]))),
                   comparison("gold", "lower gold", worse, expect=-1, labels=lab, quantity="gold", fmt="+.2f",
                              noise=worse["noise"], values=(tm[names[0]]["gold"], tm[names[1]]["gold"]))]),
        comparison("penalty_undoes_bonus", "The fitted length penalty undoes the bonus's length gain: shorter than "
                   "with the bonus alone.", bonus, expect=-1, labels=("bonus", "bonus - fitted penalty"),
                   quantity="length", fmt="+.1f", noise=bonus["noise"], words=("longer", "shorter"),
                   values=(ln(names[1]), ln(names[2]))),
        comparison("norm_still_longer", f"Dividing by length^{ALPHA} flattens the bonus but does not remove it: still "
                   "longer than without the bonus.", nl, expect=+1, labels=(lab[0], f"bonus / length^{ALPHA}"),
                   quantity="length", fmt="+.1f", noise=nl["noise"], words=("longer", "shorter"),
                   values=(ln(names[0]), ln(names[3]))),
        comparison("norm_learns_less", f"Dividing by length^{ALPHA} also divides the reward model's own signal: the "
                   "policy learns less sentiment against the same KL penalty.", ns, expect=-1,
                   labels=(lab[0], f"bonus / length^{ALPHA}"), quantity="sentiment", fmt="+.2f", noise=ns["noise"],
                   values=(tm[names[0]]["sentiment"], tm[names[3]]["sentiment"])),
    ]
    ck = r["check"]
    st = ck["stats"]
    nm, rp = st["no attention mask"], st["3 more pads, mask kept"]
    bugs = [k for k in RECOMPUTES if k not in CONTROLS_C]
    out += lr_zero_verdicts(ck) + [
        identity("no_mask_hits_padded_rows", "Without the attention mask exactly the rows with prompt padding change.",
                 bool(np.isclose(nm["rows_changed"], ck["padded_rows"])),
                 "holds when the share of rows with a token beyond the rounding tolerance equals the share of rows "
                 "with prompt padding", {"rows hit": nm["rows_changed"], "rows padded": ck["padded_rows"]}),
        identity("padding_harmless", "Padding itself is harmless: 3 more pads with the mask extended move no row "
                 "beyond float32 rounding.", rp["max_abs_log_ratio"] <= ck["tolerance"],
                 "holds when max |log r| <= the float32 tolerance", {"max |log r|": rp["max_abs_log_ratio"],
                                                                     "tolerance": ck["tolerance"]}),
        measured("bugs_clip", "At lr = 0 each recompute bug makes PPO clip tokens before the policy learned anything; "
                 "the two controls clip nothing: a non-zero clipfrac at lr = 0 is a bug.",
                 all(st[k]["clipfrac"] > 0 for k in bugs) and all(st[k]["clipfrac"] == 0 for k in CONTROLS_C),
                 "holds when every bug's clipfrac is > 0 and every control's is exactly 0",
                 {k: st[k]["clipfrac"] for k in RECOMPUTES}),
    ]
    return out


def lr_zero_verdicts(ck: dict) -> list[Verdict]:
    """Part C's two identities, decided by the numbers this machine measured."""
    v = ck["verdict"]
    same_max = ck["stats"]["same forward (the trainer)"]["max_abs_log_ratio"]
    return [
        identity("lr0_ratio_is_one", "With lr = 0 the first minibatch's ratio is 1 (bitwise on some BLAS kernels, to "
                 "float32 rounding on others), approx KL 0 to rounding, clipfrac exactly 0.",
                 v["verdict"] in ("bitwise", "rounding"), "holds when pitfalls.lr_zero_verdict says 'bitwise' or "
                 "'rounding': max |log r| <= the float32 tolerance, |approx KL| within its bound, clipfrac 0.0",
                 {"max |log r|": v["max_abs_log_ratio"], "tolerance": v["log_ratio_tol"],
                  "clipfrac": ck["first_minibatch"]["clipfrac"]}, f"{v['verdict']} on this machine"),
        identity("lr0_bitwise_on_every_machine", "On every machine, with lr = 0 the parameters stay bitwise unchanged "
                 "and recomputing the batch with the rollout's own shapes gives bitwise its log-probs.",
                 bool(ck["params_unchanged"]) and same_max == 0.0, "holds when every parameter is bitwise unchanged "
                 "and the same-shape recompute has max |log r| exactly 0", {"same-forward max |log r|": same_max}),
    ]


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(3, 3, figsize=(17, 14))
    (a, b, c), (d, e, f), (g, h, i) = axes
    s, n_seeds = summary(r), len(r["sizes"]["seeds"])
    critics = {**r["critic"], **r["q47"]}                      # the six of part A and Q47's two
    for name, v in critics.items():
        err, ev = seed_curves(v, "val/value_error"), seed_curves(v, "val/explained_variance")
        ls = "--" if name in r["q47"] else "-"
        a.plot(err.mean(0), color=COLORS[name], lw=1.8, ls=ls, label=name)
        b.plot(ev.mean(0), color=COLORS[name], lw=1.8, ls=ls, label=name)
    a.set_yscale("log")
    a.set(title=f"(a) critic error 0.5 mean (V - R)^2, RM score + {OFFSET:g}", xlabel="iteration",
          ylabel="return units^2, before the update (log)")
    legend_in_margin(a, 0.33, fontsize=8, ncol=2, title=f"mean of {n_seeds} seeds; SFT-trunk critic, head 0",
                  title_fontsize=8)
    b.set(title="(b) explained variance 1 - Var[R - V] / Var[R]", xlabel="iteration", ylabel="explained variance")
    b.legend(fontsize=8, ncol=2, loc="lower right")          # the curves rise from 0: the bottom right stays free
    for k, name in enumerate(critics):
        g_ = s[name]["gold"] if name in s else seed_values(r["q47"][name], "gold_mean")
        c.plot(np.full(len(g_), k) + np.linspace(-0.1, 0.1, len(g_)), g_, "o", color=COLORS[name], alpha=0.7)
        c.plot([k - 0.25, k + 0.25], [g_.mean()] * 2, color=COLORS[name], lw=2.5)
    c.axhline(r["reference"]["gold_mean"], color="k", ls="--", lw=1, label="SFT policy")
    short = {CLAMP: "bias init\n+ clamp\n[-10, 10]"}                # narrow labels: seven fit side by side
    c.set_xticks(range(len(critics)), [short.get(n, n.replace(" ", "\n", 1)) for n in critics], fontsize=8)
    c.set(title="(c) gold score of the trained policies (dots: seeds, bar: mean)",
          ylabel="gold score, held-out prompts")
    c.legend(fontsize=8)
    # B. length hacking
    for col, (name, v) in zip(LCOLORS, r["length"].items()):
        d.plot(seed_curves(v, "response/length").mean(0), color=col, lw=1.8, label=name)
        e.plot(seed_curves(v, "gold/score").mean(0), color=col, lw=1.8, label=name)
    d.axhline(r["ref_long"]["length_mean"], color="k", ls="--", lw=1, label="SFT policy")
    d.set(title=f"(d) response length, room for {LONG_TOKENS} tokens", xlabel="iteration", ylabel="tokens per response")
    legend_in_margin(d, 0.3, fontsize=8, ncol=2)
    e.axhline(r["ref_long"]["gold_mean"], color="k", ls="--", lw=1, label="SFT policy")
    e.set(title="(e) gold score of the rollouts", xlabel="iteration", ylabel="gold score")
    legend_in_margin(e, 0.3, fontsize=8, ncol=2)
    terms = [r["ref_long"]["terms"]] + [mean_terms(v) for v in r["length"].values()]
    width = 0.8 / len(TERMS)
    for j, t in enumerate(TERMS):
        f.bar(np.arange(len(terms)) + (j - len(TERMS) / 2 + 0.5) * width, [x[t] for x in terms], width, label=t)
    short = ("SFT", "RM\nscore", f"RM +\n{BONUS}/token", "+ bonus\n- penalty", f"+ bonus,\n/ n^{ALPHA}")
    labels = [f"{n}\ngold {x['gold']:+.2f}\nsent. {x['sentiment']:+.2f}" for n, x in zip(short, terms)]
    f.set_xticks(range(len(terms)), labels, fontsize=8)
    f.set(title="(f) the gold's penalty terms on fresh samples", ylabel="penalty (mean per response)")
    f.legend(fontsize=8, ncol=2, loc="upper right")
    # C. the lr = 0 check: table, log-ratio histograms, temperature curve
    ck = r["check"]
    g.axis("off")
    g.grid(False)
    cols = ("ratio min", "ratio max", "approx KL", "clipfrac", "rows hit")
    rows = [[f"{x['ratio_min']:.3g}", f"{x['ratio_max']:.3g}", f"{x['approx_kl']:.2g}", f"{x['clipfrac']:.1%}",
             f"{x['rows_changed']:.0%}"] for x in ck["stats"].values()]
    tab = g.table(cellText=rows, rowLabels=list(ck["stats"]), colLabels=cols, loc="center", cellLoc="center")
    tab.auto_set_font_size(False)
    tab.set_fontsize(9)
    tab.scale(0.82, 1.9)
    g.set_title("(g) lr = 0: one rollout, its log-probs recomputed")
    g.text(0.5, 0.08, f"{ck['padded_rows']:.0%} of the responses have left padding in their prompt; "
           f"clip band eps = {ck['clip_eps']:g}", ha="center", fontsize=9, transform=g.transAxes)
    bins = np.linspace(-6, 6, 97)
    for k, (label, lr_) in enumerate(ck["log_ratio"].items()):
        if label.startswith("same"):
            continue
        h.hist(np.clip(lr_, bins[0], bins[-1]), bins=bins, histtype="step", lw=1.5, color=f"C{k}", label=label)
    eps = ck["clip_eps"]
    for x in (np.log(1 - eps), np.log(1 + eps)):
        h.axvline(x, color="k", ls=":", lw=1)
    h.set_yscale("log")
    h.set(title="(h) log r = logp - logp_old of each bug (dotted: clip band)", xlabel="log ratio (clipped to [-6, 6])",
          ylabel="tokens (log)")
    h.legend(fontsize=8)
    ts = [x["t"] for x in ck["temps"]]
    i.plot(ts, [x["approx_kl"] for x in ck["temps"]], "C0-o", label="approx KL (k3, per token)")
    i.plot(ts, [x["outside_band"] for x in ck["temps"]], "C3-s", label=f"tokens with |r - 1| > {eps:g}")
    i.axvline(1.0, color="k", ls="--", lw=1)
    i.set(title="(i) the temperature bug: training at another temperature", xlabel="T_train / T_sample",
          ylabel="measured at lr = 0 (should be 0)")
    i.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
