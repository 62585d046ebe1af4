r"""Lesson 14 - rlhf_ppo: one RLHF PPO iteration walked by hand through rlhf/ppo.py, then the full run.

Pipeline step: stage 3 of RLHF (SFT -> reward model -> RL optimisation) with the four models: the actor and
the critic train, the reference (a frozen SFT copy) and the reward model only run forward.

Paper: PPO (Schulman et al. 2017, arXiv:1707.06347) eqs. (7), (9), (11)-(12) on the KL-shaped reward of
InstructGPT (Ouyang et al. 2022, arXiv:2203.02155) eq. (2), with the adaptive coefficient of Ziegler et al.
2019 (arXiv:1909.08593, sec. 2.2):

$$
\text{objective}(\phi) = \mathbb{E}_{(x, y) \sim \pi_\phi}\left[r_\theta(x, y) - \beta \log \frac{\pi_\phi(y \mid x)}{\pi^{SFT}(y \mid x)}\right]
$$

Part 1 walks iteration 0 through `minippo/rlhf/ppo.py` (open it beside this lesson), step by step, counting
which of the four models runs in each step (prefill / decode = sampling with the KV cache, forward, backward)
and printing the shape and one row of each of the seven per-token fields:

    1. sample   responses ~ pi_old(.|prompt), KV cache                   ppo.sample (in ppo.rollout)
    2. score    logp_old (actor), logp_ref (reference), V (critic), score (RM) at the last token
    3. rewards  r_t = -beta (logp_t - logp_ref_t); + score on the last valid token   InstructGPT eq. (2)
    4. A_t      GAE with gamma = 1, lam = 0.95, whitened; returns = A + V               PPO eqs. (11)-(12)
    5. update   K epochs x minibatches of L^CLIP + c1 L^VF (- c2 S)                  PPO eqs. (7), (9)
    6. beta     beta *= 1 + clip(KL / target - 1, +-0.2) * B / horizon              Ziegler et al. 2019

The walk calls the same functions in the same order as the trainer (`PPOTrainer.step`), so its numbers ARE
iteration 0 of the run in part 2 (the lesson checks that its record equals the run's).

Part 2 trains with the main job's defaults (`minippo rlhf`) on the cached SFT policy and reward model, then
judges the SFT and the PPO policy on the same held-out prompts with fresh samples: the reward model's score
(the proxy PPO maximised), the gold score (the simulated human that labelled the preference pairs, never seen
by PPO), and the KL to the reference.

Part 3 turns off two defaults of this run that the PPO paper does not have (lesson 17's base run, 10 iterations
x 32 responses, 2 PPO seeds): advantage whitening (Q22) and the gradient-norm clip (Q23); then multiplies the
reward model's scores by 10 and turns whitening off again, the case whitening is said to protect against (a
large reward scale setting the step size). Each difference is judged against the seed noise.

The figure: (a)-(f) the run's curves (RM score, gold score, KL against the controller's target with beta,
per-token entropy, policy / value clip fractions, response length); (g) gold scores of the fresh samples
before and after PPO; (h) RM score against gold score for both policies (the proxy moves much further than
the gold: over-optimisation starts here, lesson 19); (i) samples before and after; part 3: (j) gold of each
variant (dots: seeds), (k) approx KL per update and the share of steps the gradient clip scaled down, (l) the
GAE advantages before whitening (|mean| and std, log scale).

Exercises:
1. Set `kl_ref_controller="fixed"` and `kl_ref_coef=0.05`: how far does the KL run, and what happens to
   the gold score and to the words the policy uses?
2. Set `update_epochs=1` or `8`: how do the clip fraction and the approx KL per update change, and the
   count of actor backward passes in part 1?
3. Read the samples: which word does the PPO policy overuse, and does the gold function reward it as
   much as the reward model does?

Questions: Q39, Q31, Q28, Q19, Q22, Q23.
"""
from __future__ import annotations

import textwrap
import time

import numpy as np

from lessons._common import (Verdict, any_of, by_key, comparison, diff_text, identity, lesson_main, pyplot, save,
                             seed_compare, time_line)
from minippo.blas import single_blas_thread
from minippo.rlhf import ppo
from minippo.rlhf.generate import TRUNCATED_MARK, show_sample
from minippo.rl.masked import masked_mean
from minippo.rlhf.metrics import without_timing
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.run.plots import draw_curves
from minippo.rlhf.run.trainer import iteration_record
from minippo.studies.memory import PassCounter
from minippo.studies.study import Study
from minippo.studies.pitfalls import scaled_reward_model
from minippo.studies.sweep_stats import compare_interaction, compare_paired, pooled_seed_std, seed_values

SUMMARY = ("gold_mean", "gold_std", "rm_mean", "kl_mean", "kl_exact_mean", "length_mean", "ended_frac")
FIELDS = ("action", "log_prob", "value", "reward", "advantage", "return")     # + the observation, 7 in all


def lesson_config(quick: bool, seed: int) -> PPOConfig:
    """The main job's PPO defaults (quick: the CI config, 10 iterations)."""
    if quick:
        return PPOConfig.quick(seed=seed, iterations=10)
    return PPOConfig(seed=seed)


def walk_one_iteration(trainer) -> dict:
    """Iteration 0 through rlhf/ppo.py's ``ppo_iteration``, called once as ``PPOTrainer.step`` calls it, with
    the passes each model makes counted before and after its update starts; returns the counts, the rollout's
    per-token fields and the record."""
    s, cfg = trainer.state, trainer.cfg
    models = {"actor": s.actor, "critic": s.critic, "reference": s.ref, "reward model": s.reward_model.model}
    beta_before = s.kl_ctl.value
    with single_blas_thread():
        with PassCounter(models, split=(ppo, "ppo_update")) as pc:     # steps 1-4 | steps 5-6
            ro, update = ppo.ppo_iteration(s, cfg)
        record = iteration_record(s, cfg, ro, update)
    record.update({"iteration": 0, "episode": cfg.batch_size})          # what PPOTrainer.step adds, timing aside
    row = int(np.argmax(ro.lengths < ro.response.shape[1])) if (ro.lengths < ro.response.shape[1]).any() else 0
    n = int(ro.lengths[row])
    fields = {"action": ro.response, "log_prob": ro.logp, "value": ro.values, "reward": ro.rewards,
              "advantage": ro.adv, "return": ro.returns}
    return {"rollout_calls": pc.before, "update_calls": pc.after, "record": record,
            "beta": (beta_before, s.kl_ctl.value), "row": row, "n": n, "Tp": ro.prompt_len,
            "shapes": {"observation": ro.sequences.shape, **{k: v.shape for k, v in fields.items()}},
            "rows": {k: v[row].copy() for k, v in fields.items()}, "mask": ro.response_mask[row].copy(),
            "observation": s.tokenizer.pieces([int(i) for i in ro.observation(row, n - 1)]),
            "text": s.tokenizer.decode(ro.sequences[row].tolist()), "score": float(ro.scores[row]),
            "steps": cfg.update_epochs * cfg.num_minibatches, "B": ro.batch_size, "Tn": ro.response.shape[1]}


# part 3 (Q22, Q23): two defaults of the run that the PPO paper does not have, each turned off; with the reward
# model's scores multiplied by RM_SCALE, whitening on and off again (what whitening is said to protect against)
RM_SCALE = 10.0
ABLATIONS = {"defaults": {}, "no whitening": {"whiten_advantages": False}, "no grad clip": {"max_grad_norm": None}}
SCALED = {f"RM x {RM_SCALE:g}": {}, f"RM x {RM_SCALE:g}, no whitening": {"whiten_advantages": False}}


def ablation_sizes(quick: bool) -> dict:
    """Part 3's runs: lesson 17's base run (lr 5e-4, linear decay), two PPO seeds (the seed noise)."""
    if quick:
        return dict(iterations=2, batch_size=16, minibatch_size=4, lr=5e-4, seeds=(0, 1))
    return dict(iterations=10, batch_size=32, minibatch_size=8, lr=5e-4, seeds=(0, 1))


def _raw_advantages(trainer, rollout, record) -> None:
    """Callback of part 3: the GAE advantages before whitening (returns - values), mean and std over valid tokens."""
    m = rollout.response_mask
    raw = (rollout.returns - rollout.values) * m                                  # (B, Tn) A_t as GAE gave it
    mean = masked_mean(raw, m)
    record.update({"probe/adv_raw_mean": mean, "probe/adv_raw_std": masked_mean((raw - mean) ** 2 * m, m) ** 0.5})


def ablate(study, quick: bool) -> dict:
    """Part 3: the variants of :data:`ABLATIONS` with the cached reward model and of :data:`SCALED` with its scores
    multiplied by :data:`RM_SCALE`, several PPO seeds each."""
    az = ablation_sizes(quick)
    base = {k: az[k] for k in ("iterations", "batch_size", "minibatch_size", "lr")}
    out = study.sweep(ABLATIONS, az["seeds"], base=base, callback=_raw_advantages)
    out.update(study.sweep(SCALED, az["seeds"], base=base, callback=_raw_advantages,
                           reward_model=scaled_reward_model(study.reward_model, RM_SCALE)))
    return out


def run(quick: bool = False, seed: int = 0) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    study = Study(quick=quick, seed=seed)          # the cached SFT policy and reward model, held-out prompts
    cfg = lesson_config(quick, seed)
    trainer = study.trainer(cfg)
    walk = walk_one_iteration(trainer)             # part 1: iteration 0, by hand
    records = [walk["record"]] + trainer.train()   # part 2: the remaining iterations, by the trainer
    before, after = study.reference, study.evaluate(trainer.actor)
    # the walk is iteration 0 of this very run: the same record as a run the trainer does alone
    alone = without_timing(study.trainer(cfg).step())
    ablations = ablate(study, quick)               # part 3
    return {"records": records, "config": cfg, "prompts": study.prompts, "walk": walk, "quick": quick,
            "ablations": ablations, "ablation_sizes": ablation_sizes(quick),
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0},
            "walk_equals_trainer": without_timing(records[0]) == alone,
            "before": before, "after": after, "summary": {"SFT": {k: before[k] for k in SUMMARY},
                                                          "PPO": {k: after[k] for k in SUMMARY}},
            "gold_gain_in_sft_std": (after["gold_mean"] - before["gold_mean"]) / max(before["gold_std"], 1e-12)}


def _calls(counts: dict) -> str:
    """``actor prefill 1, decode 23, forward 1`` for the models that ran (rows in brackets)."""
    parts = []
    for name, c in counts.items():
        did = [f"{k} {c[k]}" + (f" ({c[k + '_rows']} rows)" if k + "_rows" in c and c[k] else "")
               for k in ("prefill", "decode", "forward", "backward") if c[k]]
        parts.append(f"{name}: " + (", ".join(did) if did else "nothing"))
    return "; ".join(parts)


def frozen_once(rc: dict, uc: dict) -> bool:
    """The reference and the reward model ran exactly one forward pass each in the rollout and nothing else."""
    return all(rc[n]["forward"] == 1 and not any(rc[n][k] for k in ("prefill", "decode", "backward"))
               and not any(uc[n][k] for k in ("prefill", "decode", "forward", "backward"))
               for n in ("reference", "reward model"))


def proxy_vs_gold(r: dict) -> dict:
    """Per prompt, the RM score's move minus the gold score's, each in units of its SFT standard deviation (the
    same prompts before and after), paired over the prompts."""
    b, a = r["before"], r["after"]
    gold = (a["gold"] - b["gold"]) / max(float(np.std(b["gold"])), 1e-12)
    rm = (a["rm"] - b["rm"]) / max(float(np.std(b["rm"])), 1e-12)
    return compare_paired(gold, rm)


RUN_KEYS = ("policy/approxkl_avg", "policy/clipfrac_avg", "policy/grad_norm_avg", "policy/grad_clip_frac",
            "probe/adv_raw_mean", "probe/adv_raw_std")


def ablation_table(r: dict) -> dict:
    """Part 3 per variant, per seed: evaluation gold and KL, run means of :data:`RUN_KEYS`; the seed noise pooled
    over the five variants (None with one seed)."""
    t = {}
    for name, v in r["ablations"].items():
        n = len(v["records"][0])
        t[name] = {**{k: seed_values(v, k) for k in ("gold_mean", "kl_exact_mean")},
                   **{k: seed_values(v, k, last=n) for k in RUN_KEYS}}
    noise = None
    if min(len(x["gold_mean"]) for x in t.values()) > 1:
        noise = {k: pooled_seed_std([x[k] for x in t.values()])[0]
                 for k in ("gold_mean", "kl_exact_mean", "policy/approxkl_avg", "policy/clipfrac_avg")}
    return {"table": t, "noise": noise}


def ablation_verdicts(r: dict) -> dict:
    """Part 3's comparisons, each b - a with the pooled seed noise (se None with one seed)."""
    q = ablation_table(r)
    t, noise = q["table"], q["noise"]
    cmp_ = lambda a, b, k: seed_compare(t[a][k], t[b][k], None if noise is None else noise[k])   # noqa: E731
    big, big_raw = SCALED
    out = {k: {"gold": cmp_("defaults", v, "gold_mean"), "approxkl": cmp_("defaults", v, "policy/approxkl_avg"),
               "clipfrac": cmp_("defaults", v, "policy/clipfrac_avg")} for k, v in
           (("whiten", "no whitening"), ("clip", "no grad clip"))}
    out["scaled_gold"] = cmp_(big, big_raw, "gold_mean")
    out["scaled_approxkl"] = cmp_(big, big_raw, "policy/approxkl_avg")
    out["interaction"] = (None if noise is None else compare_interaction(
        t["defaults"]["policy/approxkl_avg"], t["no whitening"]["policy/approxkl_avg"], t[big]["policy/approxkl_avg"],
        t[big_raw]["policy/approxkl_avg"], noise["policy/approxkl_avg"]))
    return out


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed or inside arrays: part
    3's table (each variant's mean over the seeds), its seed noise and its comparisons (difference +- se), and
    the minibatches per epoch of the config."""
    q = ablation_table(r)
    return {"num_minibatches": r["config"].num_minibatches,
            "ablation": {name: {k: float(np.mean(x)) for k, x in row.items()} for name, row in q["table"].items()},
            "ablation_noise": q["noise"], "ablation_compare": ablation_verdicts(r)}


def _narrative_ablations(r: dict) -> list[str]:
    """Part 3: advantage whitening (Q22) and gradient clipping (Q23), each off, against the seed noise."""
    q, v, az = ablation_table(r), ablation_verdicts(r), r["ablation_sizes"]
    t, noise = q["table"], q["noise"]
    big, big_raw = SCALED
    L = [f"\nPart 3: two defaults of this run that the PPO paper does not have, each turned off: {az['iterations']} "
         f"iterations x {az['batch_size']} responses, lr {az['lr']:g} (lesson 17's base run), PPO seeds "
         f"{list(az['seeds'])}; then the reward model's scores x {RM_SCALE:g}, whitening on and off"
         + (f"; seed noise of the gold pooled over the five variants {noise['gold_mean']:.3f}." if noise else "."),
         f"  {'variant':<24}{'gold':>8}{'KL':>6}{'approx KL':>10}{'clipfrac':>9}{'grad norm':>10}{'clipped':>8}"
         f"{'raw A mean':>11}{'raw A std':>10}"]
    for name, x in t.items():
        L.append(f"  {name:<24}{x['gold_mean'].mean():>+8.3f}{x['kl_exact_mean'].mean():>6.2f}"
                 f"{x['policy/approxkl_avg'].mean():>10.4f}{x['policy/clipfrac_avg'].mean():>9.3f}"
                 f"{x['policy/grad_norm_avg'].mean():>10.2f}{x['policy/grad_clip_frac'].mean():>8.0%}"
                 f"{x['probe/adv_raw_mean'].mean():>+11.3f}{x['probe/adv_raw_std'].mean():>10.3f}")
    L.append("  (KL: exact, to the reference, nats per response, held-out prompts; approx KL and clipfrac: per update, "
             "run mean; grad norm before clipping and the share of steps it clipped (max_grad_norm 1); raw A: the GAE "
             "advantages before whitening, over the valid tokens.)")
    w, c = v["whiten"], v["clip"]
    V = by_key(verdicts(r))
    L.append(f"  Q22. Whitening off: gold {diff_text(w['gold'], '+.2f')}, approx KL {diff_text(w['approxkl'], '+.4f')}. "
             f"The default run's raw advantages (before whitening) have mean "
             f"{t['defaults']['probe/adv_raw_mean'].mean():+.3f} and std "
             f"{t['defaults']['probe/adv_raw_std'].mean():.3f}: whitening rescales them by about "
             f"{1 / max(t['defaults']['probe/adv_raw_std'].mean(), 1e-12):.1f}x.")
    L.append(V["whitening_raises_gold"].render("  "))
    ia = v["interaction"]
    L.append(f"  With the scores x {RM_SCALE:g} the raw advantages' std is {t[big]['probe/adv_raw_std'].mean():.2f}; "
             f"whitening off there: gold {diff_text(v['scaled_gold'], '+.2f')}, approx KL "
             f"{diff_text(v['scaled_approxkl'], '+.4f')}. How much more turning whitening off moves the approx KL at x "
             f"{RM_SCALE:g} than at x 1: " + ("one seed: no noise estimate." if ia is None else diff_text(ia, '+.4f') + "."))
    L.append(V["scale_sets_step"].render("  "))
    if not V["scale_sets_step"].holds:
        L.append("  (Adam divides each parameter's step by the running RMS of its gradient: a uniform scale of the "
                 "advantages cancels in the step.)")
    L.append(f"  Q23. Gradient clipping off: the default run clipped {t['defaults']['policy/grad_clip_frac'].mean():.0%} "
             f"of its steps (mean grad norm {t['defaults']['policy/grad_norm_avg'].mean():.2f} vs max_grad_norm 1); "
             f"without it gold {diff_text(c['gold'], '+.2f')}, approx KL {diff_text(c['approxkl'], '+.4f')}.")
    L.append(V["grad_clip_matters"].render("  "))
    return L


def narrative(r: dict) -> str:
    cfg, w, recs = r["config"], r["walk"], r["records"]
    rc, uc = w["rollout_calls"], w["update_calls"]
    L = [f"Part 1: iteration 0 of rlhf/ppo.py, by hand ({w['B']} responses of up to {w['Tn']} tokens).",
         f"  steps 1-2 (sample, score) and 3-4 (rewards, GAE: no model runs): {_calls(rc)}",
         f"  steps 5-6 (update, beta): {_calls(uc)}",
         f"  -> the actor samples (prefill + decode), then runs forward {rc['actor']['forward']}x for logp_old and "
         f"forward + backward {uc['actor']['backward']}x in the update ({cfg.update_epochs} epochs x "
         f"{cfg.num_minibatches} minibatches = {w['steps']} steps); the reference and the reward model "
         + f"run forward {rc['reference']['forward']} and {rc['reward model']['forward']} times in the rollout.",
         by_key(verdicts(r))["frozen_once"].render("  ")]
    if "critic" in rc:
        L.append(f"  -> the critic (a separate TinyGPT) runs forward {rc['critic']['forward']}x in the rollout (the "
                 f"values V(s_t)) and forward + backward {uc['critic']['backward']}x in the update.")
    L.append(f"\n  The seven per-token fields, row {w['row']} ({w['n']} response tokens of {w['Tn']}; score "
             f"{w['score']:+.3f} on its last valid token): {w['text']!r}")
    n, Tn = w["n"], w["Tn"]
    cols = sorted({j for j in (0, 1, 2, n - 2, n - 1, n) if 0 <= j < Tn})     # the start, the end, the first pad
    L.append(f"  {'field':<12}{'shape':<14}columns j = {', '.join(map(str, cols))} of the row (j = {n - 1}: the last "
             f"valid token{', j = ' + str(n) + ': padding' if n < Tn else ''})")
    last = w["observation"][-4:]
    L.append(f"  {'observation':<12}{str(w['shapes']['observation']):<14}prompt ++ response[:j]: the context of "
             f"token j (Tp = {w['Tp']} columns of prompt); for the last token ... {' '.join(last)}")
    for k in FIELDS:
        vals = [w["rows"][k][j] for j in cols]
        shown = " ".join(f"{int(v):>6d}" if k == "action" else f"{float(v) + 0.0:+6.3f}" for v in vals)
        L.append(f"  {k:<12}{str(w['shapes'][k]):<14}{shown}")
    b0, b1 = w["beta"]
    L.append(f"  step 6: beta {b0:g} -> {b1:.4f} (objective/kl {w['record']['objective/kl']:.3f} nats/response, "
             f"target {cfg.kl_ref_target:g}).")
    L.append(by_key(verdicts(r))["walk_equals_trainer"].render("  "))
    L.append(f"\nPart 2: PPO, {cfg.iterations} iterations x {cfg.batch_size} responses, {cfg.update_epochs} epochs of "
             f"{cfg.num_minibatches} minibatches, lr {cfg.lr:g} ({cfg.lr_schedule}), clip_eps {cfg.clip_eps}, adaptive "
             f"KL target {cfg.kl_ref_target:g} nats/response (beta {cfg.kl_ref_coef:g} -> {recs[-1]['kl_coef']:.3f}).")
    for k in ("objective/scores", "gold/score", "objective/kl", "policy/entropy_avg", "policy/clipfrac_avg",
              "val/explained_variance", "response/length"):
        L.append(f"  {k:<24s} first iteration {recs[0][k]:+8.3f}   last iteration {recs[-1][k]:+8.3f}")
    s = r["summary"]
    L += [f"\nFresh samples for {len(r['prompts'])} held-out prompts:",
          f"  {'policy':<6} {'gold mean':>9} {'gold std':>8} {'RM mean':>8} {'KL k1':>6} {'KL exact':>8} {'length':>6}"]
    for name, x in s.items():
        L.append(f"  {name:<6} {x['gold_mean']:+9.3f} {x['gold_std']:8.3f} {x['rm_mean']:+8.3f} {x['kl_mean']:6.2f} "
                 f"{x['kl_exact_mean']:8.2f} {x['length_mean']:6.1f}")
    gold_gain, rm_gain = r["gold_gain_in_sft_std"], s["PPO"]["rm_mean"] - s["SFT"]["rm_mean"]
    rm_gain_std = rm_gain / max(1e-12, float(np.std(r["before"]["rm"])))
    c = proxy_vs_gold(r)
    L.append(f"The gold score moved by {gold_gain:+.2f} standard deviations of the SFT samples, the RM score by "
             f"{rm_gain_std:+.2f} of its own; RM minus gold, paired over the {len(r['prompts'])} prompts: "
             f"{diff_text(c, '+.2f', 'prompt')}.")
    L.append(by_key(verdicts(r))["proxy_moves_further"].render())
    T = r["config"].max_new_tokens
    L.append(f"\nSamples, same prompt before -> after ({int((~r['before']['ended']).sum())} SFT and "
             f"{int((~r['after']['ended']).sum())} PPO responses of {len(r['prompts'])} have no EOS within {T} tokens; "
             f"such a response is marked{TRUNCATED_MARK}):")
    for i in range(6):
        for name, ev in (("SFT", r["before"]), ("PPO", r["after"])):
            L.append(f"  {name} gold {ev['gold'][i]:+.2f} RM {ev['rm'][i]:+.2f} | "
                     f"{show_sample(ev['texts'][i], ev['ended'][i])}")
    L += _narrative_ablations(r)
    L.append(time_line(r))
    return "\n".join(L)


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (part 3: seed noise pooled over five variants)."""
    w = r["walk"]
    s = r["summary"]
    q, v = ablation_table(r), ablation_verdicts(r)
    t = q["table"]
    mean = lambda name, k: float(t[name][k].mean())          # noqa: E731
    big, big_raw = SCALED
    wh, cl = v["whiten"], v["clip"]
    return [
        identity("frozen_once", "The reference and the reward model run forward once each, in the rollout only, and "
                 "never backward.", frozen_once(w["rollout_calls"], w["update_calls"]),
                 "holds when their counted calls are exactly one forward pass each in the rollout and nothing else",
                 {"reference forward": w["rollout_calls"]["reference"]["forward"],
                  "reward model forward": w["rollout_calls"]["reward model"]["forward"]}),
        identity("walk_equals_trainer", "The walk by hand is rlhf/ppo.py's iteration: its record equals the first "
                 "record of a run the trainer does alone (same seed, same calls).", bool(r["walk_equals_trainer"]),
                 "holds when the two records are equal, key by key"),
        comparison("proxy_moves_further", "The proxy (RM score) moves further than the gold it stands for (each in "
                   "SFT standard deviations).", proxy_vs_gold(r), expect=+1, labels=("gold", "RM"),
                   quantity="move in SFT std", noise="prompt", fmt="+.2f",
                   values=(r["gold_gain_in_sft_std"],
                           (s["PPO"]["rm_mean"] - s["SFT"]["rm_mean"]) / max(1e-12, float(np.std(r["before"]["rm"]))))),
        comparison("whitening_raises_gold", "Q22: advantage whitening helps at this scale: the gold is higher with "
                   "whitening ON than OFF.", wh["gold"], expect=-1, labels=("whitening ON", "whitening OFF"),
                   quantity="gold", values=(mean("defaults", "gold_mean"), mean("no whitening", "gold_mean")),
                   fmt="+.2f"),
        comparison("scale_sets_step", f"Without whitening the reward model's scale sets the step size: turning "
                   f"whitening off raises the approx KL more with the scores x {RM_SCALE:g} than at x 1.",
                   v["interaction"] if v["interaction"] is not None else
                   {"diff": (mean(big_raw, "policy/approxkl_avg") - mean(big, "policy/approxkl_avg"))
                    - (mean("no whitening", "policy/approxkl_avg") - mean("defaults", "policy/approxkl_avg")),
                    "se": None},
                   expect=+1, labels=("x 1", f"x {RM_SCALE:g}"), quantity="approx KL change (whitening off - on)",
                   fmt="+.4f"),
        any_of("grad_clip_matters", "Q23: gradient clipping matters at this scale: without it the updates are larger "
               "or the gold lower.", [
                   comparison("update", "larger updates", cl["approxkl"], expect=+1,
                              labels=("clipping ON", "clipping OFF"), quantity="approx KL", fmt="+.4f",
                              values=(mean("defaults", "policy/approxkl_avg"), mean("no grad clip", "policy/approxkl_avg"))),
                   comparison("gold", "lower gold", cl["gold"], expect=-1, labels=("clipping ON", "clipping OFF"),
                              quantity="gold", fmt="+.2f",
                              values=(mean("defaults", "gold_mean"), mean("no grad clip", "gold_mean")))]),
    ]


ABLATION_COLORS = ("tab:blue", "tab:orange", "tab:red", "tab:purple", "tab:brown")


def _plot_ablations(r: dict, j, k, l) -> None:
    """Part 3: (j) gold, (k) approx KL per update and the share of steps clipped, (l) the raw advantages' scale."""
    t = ablation_table(r)["table"]
    names = list(t)
    x = np.arange(len(names))
    short = [n.replace(", ", ",\n").replace("no ", "no\n") for n in names]
    for ax, key, ylabel in ((j, "gold_mean", "gold score, held-out prompts"),
                            (k, "policy/approxkl_avg", "approx KL per update (run mean)")):
        for i, (name, col) in enumerate(zip(names, ABLATION_COLORS)):
            vals = t[name][key]
            ax.plot(np.full(len(vals), i) + np.linspace(-0.08, 0.08, len(vals)), vals, "o", color=col, alpha=0.7)
            ax.plot([i - 0.25, i + 0.25], [vals.mean()] * 2, color=col, lw=2.5)
        ax.set_xticks(x, short, fontsize=8)
        ax.set_ylabel(ylabel)
    j.axhline(r["before"]["gold_mean"], color="grey", ls="--", lw=1, label="SFT policy")
    j.legend(loc="lower left", fontsize=8)
    az = r["ablation_sizes"]
    j.set_title(f"(j) Q22 / Q23: whitening, gradient clipping off\n{az['iterations']} iterations x "
                f"{az['batch_size']}, {len(az['seeds'])} seeds (dots), mean (bar)")
    twin = k.twinx()
    twin.plot(x + 0.32, [t[n]["policy/grad_clip_frac"].mean() for n in names], "k^", ms=7,
              label="steps clipped (right axis, beside each variant)")
    twin.set_ylim(-0.06, 1.08)                                       # markers at 0 and 1 whole
    twin.set_ylabel("share of steps with grad norm > max_grad_norm")
    twin.grid(False)
    twin.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8)     # below: the points fill the corners
    k.set_title("(k) the update's size, and how often the clip bound")
    for i, (name, col) in enumerate(zip(names, ABLATION_COLORS)):
        l.bar(i - 0.2, abs(t[name]["probe/adv_raw_mean"].mean()), 0.4, color=col, alpha=0.5, hatch="//",
              label="|mean|" if i == 0 else None)
        l.bar(i + 0.2, t[name]["probe/adv_raw_std"].mean(), 0.4, color=col, label="std" if i == 0 else None)
    l.set_yscale("log")
    l.set_xticks(x, short, fontsize=8)
    l.set_ylabel("GAE advantage before whitening (log)")
    widen = t[next(iter(SCALED))]["probe/adv_raw_std"].mean() / t["defaults"]["probe/adv_raw_std"].mean()
    l.set_title(f"(l) the raw advantages: the RM x {RM_SCALE:g} makes their std {widen:.1f}x")
    l.legend(loc="upper left", fontsize=8)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(4, 3, figsize=(16, 17.5))
    cfg, before, after = r["config"], r["before"], r["after"]
    draw_curves(axes.ravel()[:6], r["records"],
                kl_ref_target=cfg.kl_ref_target if cfg.kl_ref_controller == "adaptive" else None,
                reference={"gold/score": before["gold_mean"]})
    for ax, letter in zip(axes.ravel()[:6], "abcdef"):
        ax.set_title(f"({letter}) {ax.get_title()}")
    g, h, t = axes[2]
    bins = np.linspace(min(before["gold"].min(), after["gold"].min()), 1.0, 25)
    g.hist(before["gold"], bins=bins, alpha=0.6, label=f"SFT, mean {before['gold_mean']:+.2f}")
    g.hist(after["gold"], bins=bins, alpha=0.6, label=f"PPO, mean {after['gold_mean']:+.2f}")
    g.set_xlabel("gold score of a fresh sample")
    g.set_ylabel("samples")
    g.set_title(f"(g) gold before / after PPO, {len(r['prompts'])} prompts")
    g.legend(loc="upper left")
    h.scatter(before["gold"], before["rm"], s=12, alpha=0.6, label="SFT")
    h.scatter(after["gold"], after["rm"], s=12, alpha=0.6, label="PPO")
    h.set_xlabel("gold score (simulated human)")
    h.set_ylabel("reward-model score (proxy)")
    h.set_title("(h) the proxy vs the gold, same prompts")
    h.legend(loc="upper left")
    t.axis("off")
    t.grid(False)
    lines = ["(i) the same prompts, before -> after (gold score)"]
    for i in range(4):
        for name, ev in (("SFT", before), ("PPO", after)):
            end = "" if ev["ended"][i] else " [no EOS]"              # stopped at max_new_tokens
            lines.append(textwrap.shorten(f"{name} {ev['gold'][i]:+.2f}: {ev['texts'][i]}", 70 - len(end),
                                          placeholder=" ...") + end)
        lines.append("")
    t.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=8.5, transform=t.transAxes)
    _plot_ablations(r, *axes[3])
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
