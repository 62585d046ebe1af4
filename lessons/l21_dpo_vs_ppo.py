"""Lesson 21 - dpo_vs_ppo: RLHF is not only PPO. DPO on the same preference pairs, and the reward-KL frontier
of the DPO paper's Figure 2 (left) measured against PPO and against PPO on the true reward.

Pipeline step: stage 3 without reinforcement learning. PPO needs the reward model trained on the pairs, a
critic and samples from the policy; DPO (Rafailov et al. 2023, arXiv:2305.18290) trains the policy on the
pairs themselves, with two models (policy and frozen reference) and no sampling (minippo/rlhf/dpo.py, one
step read top to bottom; ``minippo dpo``, ``minippo rlhf --method dpo``).

The equations (Rafailov et al., with the equation numbers of the arXiv version):

    max_pi E[r(x, y)] - beta KL(pi || pi_ref)                               eq. (3), what PPO-RLHF optimises
    pi*(y|x) = pi_ref(y|x) exp(r(x, y) / beta) / Z(x)                       eq. (4), its optimum
    r(x, y) = beta log pi*(y|x) / pi_ref(y|x) + beta log Z(x)               eq. (5), the reward as a policy ratio
    L_DPO = -E[ log sigmoid(beta log pi(y_w|x)/pi_ref(y_w|x) - beta log pi(y_l|x)/pi_ref(y_l|x)) ]    eq. (7)

IPO (Azar et al. 2023, arXiv:2310.12036v2, eq. (17)) replaces -log sigmoid(beta h) by (h - 1/(2 beta))^2 and
conservative DPO trusts each label with probability 1 - eps (minippo/rl/dpo.py; exercise 3).

The experiment (the paper's IMDb setup in miniature: SFT samples, pairs labelled by a known "human"). Three
methods, each swept over its KL knob, several seeds; every checkpoint judged alike on fixed prompts (fresh
samples, the same sampling seed): the gold score (the simulated human) against the EXACT KL(pi || pi_ref)
per response (each position's KL enumerated over the vocabulary, summed over the response):

- DPO on the reward-model stage's own pairs and split, a sweep of beta;
- PPO against that reward model (the main job's PPO, the controller's horizon shortened to 256 responses so
  that beta reaches each target within the run), a sweep of the adaptive controller's KL target;
- PPO against the gold score itself ("PPO-GT": the paper's upper reference for RL; a gold "reward model"
  normalised like the RM, minippo.studies.dpo_frontier.GoldRewardModel; its critic starts from the SFT trunk,
  as there is no reward network to copy).

A method's frontier at KL x is the best gold any of its checkpoints reached at a KL of at most x (the Pareto
front of its checkpoints, linear between them); two methods are compared at 8 KL values up to the largest KL
both reached in every seed, and the seed spread is the range of the per-seed frontiers. At each matched KL the
lesson says which method is above the other beyond 2 standard errors of the seed noise (pooled over the two
methods), and whether the paper's finding (DPO's
frontier dominates PPO's, even PPO-GT's) holds at this scale. It also measures what DPO's implicit reward
beta log(pi / pi_ref) learned compared with the reward model (held-out accuracy, within-prompt correlation
with gold) and DPO's known failure: the log-probabilities of the chosen AND the rejected responses both
falling (only their difference is pushed up; the probability that leaves both must go to other responses,
of other pairs or in none).

The figure (the committed one comes from ``--full``: beta in {0.03, 0.1, 0.3, 1}, KL targets in {1, 2, 4, 8}
nats, 3 seeds per setting, PPO 40 iterations x 64 responses, DPO 300 steps x 8 prompts (~224 pairs), 128
evaluation prompts; 36 runs): (a) gold against
exact KL for every checkpoint (dots) and each method's frontier (mean over seeds, band = seed range); (b) the
implicit reward of DPO beside the reward model: accuracy on the held-out pairs (against the labels and the
gold order) and within-prompt correlation with gold; (c) the change of log pi(y_w) and log pi(y_l) of pairs
DPO trained on, along training; (d) DPO's frontier against each PPO's at matched KL, in numbers, and the
verdicts.

Exercises:
1. Give PPO (RM) the SFT-trunk critic too (``critic_init="sft"`` in ``PPO_BASE``), as PPO-GT has: does its
   frontier move, and is the order of PPO (RM) and PPO-GT at matched KL the same?
2. Train DPO for 3 epochs (``dpo_steps``): follow ``rewards/accuracies`` (training pairs) and
   ``eval_rewards/accuracies`` (held-out) of the trainer's records. Where on the frontier is the longest run?
3. ``loss_type="ipo"`` and ``label_smoothing=0.1`` (conservative DPO): both stop pushing h beyond a finite
   margin. Do their checkpoints reach less KL for the same gold? Does the chosen log-prob still fall?
4. The reward model and DPO saw the same pairs. Which one orders the held-out pairs better, and which one
   turns that ordering into more gold per nat of KL? What does this say about "the LM is secretly a reward model"?

Questions: Q62.
"""
from __future__ import annotations

import textwrap
import time

import numpy as np

from lessons._common import (FAILS, HOLDS, NOT_SHOWN, Verdict, all_of, by_key, comparison, lesson_main, measured,
                             pyplot, save)
from minippo.blas import single_blas_thread
from minippo.rlhf.data.batches import batch_indices
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.data.preferences import sample_policy
from minippo.rlhf.dpo import SEED_BATCHES, evaluate_pairs
from minippo.rlhf.dpo_config import DPOConfig
from minippo.rlhf.rm_train import load_pairs
from minippo.rlhf.run.dpo_trainer import DPOTrainer
from minippo.studies.dpo_frontier import (DPOCheckpoints, GoldRewardModel, front_at, implicit_reward_report,
                                          logp_shift, matched_comparisons, method_fronts)
from minippo.studies.overoptimization import KLCheckpoints
from minippo.studies.study import Study

METHODS = ("DPO", "PPO (reward model)", "PPO-GT (gold reward)")
COLORS = {"DPO": "tab:blue", "PPO (reward model)": "tab:orange", "PPO-GT (gold reward)": "tab:green"}
SHORT = {"DPO": "DPO", "PPO (reward model)": "PPO (RM)", "PPO-GT (gold reward)": "PPO-GT"}
SIZES = {
    "quick": dict(seeds=2, betas=(0.1, 0.5), targets=(2.0, 6.0), dpo_steps=16, dpo_every=4, batch_prompts=4,
                  iterations=6, batch_size=16, minibatch_size=8, ppo_every=2, n_eval=16, shift_prompts=4),
    "default": dict(seeds=2, betas=(0.1,), targets=(4.0,), dpo_steps=80, dpo_every=20, batch_prompts=8,
                    iterations=16, batch_size=32, minibatch_size=8, ppo_every=4, n_eval=64, shift_prompts=8),
    "full": dict(seeds=3, betas=(0.03, 0.1, 0.3, 1.0), targets=(1.0, 2.0, 4.0, 8.0), dpo_steps=300, dpo_every=30,
                 batch_prompts=8, iterations=40, batch_size=64, minibatch_size=16, ppo_every=4, n_eval=128,
                 shift_prompts=16),
}
DPO_LR = 2e-4                     # DPO's peak lr (linear decay); 5e-4 drifts to KL 10+ within 100 steps here
# PPO: the main job's (RM-initialised critic, adaptive KL controller) with a horizon of 256 responses, so that
# beta can reach each target within the run (the main job's 1000 barely moves beta in 40 iterations)
PPO_BASE = dict(kl_ref_horizon=256.0)
GT_BASE = dict(kl_ref_horizon=256.0, critic_init="sft")   # the gold has no network to initialise a critic from
SEED_GOLD_NORM = 21               # the SFT samples that normalise the gold reward model


def gold_reward_model(study, n: int) -> GoldRewardModel:
    """The gold score normalised to mean 0, std 1 on ``n`` fresh SFT samples (as the reward model is)."""
    g = GoldRewardModel(study.tokenizer)
    rng = np.random.default_rng([study.seed, SEED_GOLD_NORM])
    with single_blas_thread():
        s = sample_policy(study.sft, study.tokenizer, sample_prompts(n, seed=rng), rng=rng,
                          max_new_tokens=study.config().max_new_tokens)
    g.normalize(s.sequences, s.mask)
    return g


def run_dpo(study, train, heldout, beta: float, seed: int, size: dict, shift_pairs) -> dict:
    """One DPO run judged every ``dpo_every`` steps: the frontier points and the log-prob shift of
    ``shift_pairs`` (pairs of the first training batches) at each of them."""
    cfg = DPOConfig(steps=size["dpo_steps"], beta=beta, lr=DPO_LR, seed=seed, batch_prompts=size["batch_prompts"],
                    warmup_steps=min(10, size["dpo_steps"] // 4), eval_every=0,     # judged by the callback below
                    max_new_tokens=study.config().max_new_tokens)
    trainer = DPOTrainer(cfg, study.sft, study.tokenizer, train, heldout)
    shifts = [{"step": 0, "chosen": 0.0, "rejected": 0.0, "chosen_fell": 0.0, "both_fell": 0.0, "margin": 0.0}]
    cb = DPOCheckpoints(study, study.reward_model, every=size["dpo_every"])

    def callback(tr, record):
        n = len(cb.points)
        cb(tr, record)
        if len(cb.points) > n:           # a checkpoint was judged: measure the shift there too
            ev = evaluate_pairs(tr.policy, tr.state.ref, shift_pairs, cfg)
            shifts.append({"step": int(record["step"]) + 1, **logp_shift(ev, shift_pairs)})

    trainer.train(callback=callback)
    return {"points": cb.points, "shifts": shifts, "trainer": trainer, "config": cfg}


def run_ppo(study, reward_model, target: float, seed: int, size: dict, base: dict) -> dict:
    """One PPO run against ``reward_model`` with the adaptive KL target ``target``, judged every ``ppo_every``
    iterations (the RM column of the evaluation is the trained reward model's score in both cases)."""
    cfg = study.config(seed=seed, kl_ref_target=target, iterations=size["iterations"], batch_size=size["batch_size"],
                       minibatch_size=size["minibatch_size"], **base)
    cb = KLCheckpoints(study, study.reward_model, every=size["ppo_every"])
    res = study.run(cfg, reward_model=reward_model, callback=cb)
    # what the adaptive controller read (objective/kl of each rollout): below 0.8 x target its error is clipped
    return {"points": cb.points, "config": cfg, "kl_read_max": max(rec["objective/kl"] for rec in res["records"])}


PAIRS = ((METHODS[0], METHODS[1]), (METHODS[0], METHODS[2]), (METHODS[2], METHODS[1]))


def strip(runs: dict) -> dict:
    """The runs without their trainers (the results stay small and picklable)."""
    return {m: {name: [{k: v for k, v in r.items() if k != "trainer"} for r in per_seed]
                for name, per_seed in settings.items()} for m, settings in runs.items()}


def kl_decimals(kl) -> int:
    """Decimals that print every value of the matched KL grid differently (at least 2)."""
    step = float(np.min(np.diff(kl))) if len(kl) > 1 else 1.0
    return max(2, int(np.ceil(-np.log10(step))) + 1) if step > 0 else 2


def point_word(v: Verdict) -> str:
    """One matched KL point's comparison (a above b?) in a word: the course's rule on the seed noise."""
    return {HOLDS: "above", FAILS: "below", NOT_SHOWN: "within 2 s.e."}[v.outcome]


def frontier_parts(r: dict, a: str, b: str) -> list[Verdict]:
    """'a above b' at each matched KL: the difference of the seeds' means with the seed noise pooled over the two
    methods at that KL (:func:`minippo.studies.dpo_frontier.compare_at`)."""
    c = r["compare"][(a, b)]
    dec = kl_decimals(c["kl"])
    return [comparison(f"KL {x:.{dec}f}", "", {"diff": p["diff"], "se": p["se"]}, expect=+1,
                       labels=(SHORT[b], SHORT[a]), quantity="gold", values=(p["mean_b"], p["mean_a"]))
            for x, p in zip(c["kl"], c["cmp"]) if p["reached"]]


def frontier_verdict(r: dict, a: str, b: str) -> Verdict:
    """'a's frontier is above b's at every matched KL': all_of :func:`frontier_parts`."""
    c = r["compare"][(a, b)]
    dec = kl_decimals(c["kl"])
    parts = frontier_parts(r, a, b)
    words = [point_word(v) for v in parts]
    because = (f"{SHORT[a]} above {SHORT[b]} at {words.count('above')}, below at {words.count('below')}, within 2 s.e. "
               f"of the seed noise at {words.count('within 2 s.e.')} of {len(parts)} matched KL values "
               f"({c['kl'][0]:.{dec}f}-{c['kl'][-1]:.{dec}f} nats)")
    return all_of(f"frontier[{SHORT[a]} > {SHORT[b]}]", f"{SHORT[a]}'s frontier is above {SHORT[b]}'s at every "
                  "matched KL.", parts, because=because)


def identical_settings(r: dict) -> list[tuple[str, str, str]]:
    """(method, setting, setting) pairs of PPO runs whose checkpoints are identical in every seed."""
    out = []
    for m in METHODS[1:]:
        names = list(r["runs"][m])
        for i, x in enumerate(names):
            for y in names[i + 1:]:
                if all([(p["kl"], p["gold"]) for p in rx["points"]] == [(p["kl"], p["gold"]) for p in ry["points"]]
                       for rx, ry in zip(r["runs"][m][x], r["runs"][m][y])):
                    out.append((m, x, y))
    return out


def verdicts(r: dict) -> list[Verdict]:
    """The DPO paper's finding, each pair of frontiers, DPO's implicit reward and its known failure."""
    fr = {pair: frontier_verdict(r, *pair) for pair in PAIRS}
    out = [all_of("paper_finding", "The DPO paper's finding (Rafailov et al., Figure 2 left): DPO's frontier "
                  "dominates PPO's, even PPO on the true reward.", [fr[PAIRS[0]], fr[PAIRS[1]]])]
    out += list(fr.values())
    imp, d = r["implicit"], r["data"]
    rm = next(iter(imp.values()))["rm"]
    best = max(imp, key=lambda n: imp[n]["dpo"]["accuracy"])
    p, q, n = imp[best]["dpo"]["accuracy"], rm["accuracy"], d["heldout_pairs"]
    out.append(comparison("dpo_orders_better", f"DPO's implicit reward (the best beta, {best}) orders the held-out "
                          "pairs better than the reward model trained on the same pairs ('your language model is "
                          "secretly a reward model').",
                          {"diff": p - q, "se": float(np.sqrt(p * (1 - p) / n + q * (1 - q) / n))}, expect=+1,
                          labels=("reward model", f"DPO {best}"), quantity="held-out accuracy",
                          noise=f"binomial ({n} pairs)", values=(q, p)))
    parts = []
    for name, per_seed in r["runs"]["DPO"].items():
        sh = per_seed[0]["shifts"][-1]
        parts.append(measured(name, "", sh["chosen"] < 0 and sh["rejected"] < 0,
                              "holds when the mean change of log pi(y_w) and of log pi(y_l) are both < 0",
                              {"chosen": sh["chosen"], "rejected": sh["rejected"]},
                              f"chosen {sh['chosen']:+.2f}, rejected {sh['rejected']:+.2f}"))
    out.append(all_of("both_fall", "DPO's known failure: the log-probs of the chosen and of the rejected responses "
                      f"of trained-on pairs both fall (seed {r['seeds'][0]}, every beta).", parts))
    return out


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed, per checkpoint or under
    pairs of names: per method (``DPO``, ``PPO (RM)``, ``PPO-GT``) the gold and exact KL of the last checkpoint
    and its best gold (means over settings and seeds) and its frontier at half and at all of the largest KL the
    three reached in every seed (``reach_kl``); per pair of methods how many matched KL values put the first
    above, below or within 2 s.e. of the second; DPO's implicit reward and the reward model as orderers of the
    held-out pairs; and the change of the chosen and rejected log-probs at the end of training (seed 0)."""
    reach = min(f[2] for m in METHODS for f in r["fronts"][m])
    methods = {}
    for m in METHODS:
        last = [run_["points"][-1] for per_seed in r["runs"][m].values() for run_ in per_seed]
        best = [max(run_["points"], key=lambda p: p["gold"]) for per_seed in r["runs"][m].values() for run_ in per_seed]
        methods[SHORT[m]] = {"end_gold": float(np.mean([p["gold"] for p in last])),
                             "end_kl": float(np.mean([p["kl"] for p in last])),
                             "best_gold": float(np.mean([p["gold"] for p in best])),
                             "best_kl": float(np.mean([p["kl"] for p in best])),
                             **{f"front_at_{w}": float(np.mean([front_at(f, [x])[0] for f in r["fronts"][m]]))
                                for w, x in (("half_reach", reach / 2), ("reach", reach))}}
    pairs = {}
    for a, b in PAIRS:
        words = [point_word(v) for v in frontier_parts(r, a, b)]
        pairs[f"{SHORT[a]} vs {SHORT[b]}"] = {"above": words.count("above"), "below": words.count("below"),
                                              "within": words.count("within 2 s.e."), "n": len(words),
                                              "kl_max": float(r["compare"][(a, b)]["kl"][-1])}
    imp = r["implicit"]
    best = max(imp, key=lambda n: imp[n]["dpo"]["accuracy"])
    shifts = {name: {k: float(per_seed[0]["shifts"][-1][k]) for k in ("chosen", "rejected", "chosen_fell", "both_fell")}
              for name, per_seed in r["runs"]["DPO"].items()}
    return {"reach_kl": float(reach), "methods": methods, "pairs": pairs,
            "implicit_best": {"beta": best, "accuracy": float(imp[best]["dpo"]["accuracy"]),
                              "rm_accuracy": float(next(iter(imp.values()))["rm"]["accuracy"])},
            "shift_end": shifts}


def _fmt(vals) -> str:
    """``+0.31 [+0.29, +0.33]``: the mean over seeds and the seed range (``n/a`` where a seed did not get there)."""
    vals = np.asarray(vals, dtype=np.float64)
    if not np.isfinite(vals).all():
        return f"{'n/a':>21s}"
    return f"{vals.mean():+.3f} [{vals.min():+.2f},{vals.max():+.2f}]"


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    size = SIZES["quick" if quick else "full" if full else "default"]
    study = Study(quick=quick, seed=0, n_eval=size["n_eval"])      # the shared SFT and reward model (stage seed 0)
    train, heldout, rm_cfg = load_pairs(study.folder / "rm")         # the pairs (and split) the RM trained on
    seeds = [seed + k for k in range(size["seeds"])]
    # the pairs of the first two DPO batches of seed 0: pairs DPO has certainly trained on
    first = np.concatenate([batch_indices(train.n_groups, size["batch_prompts"], s, seed=(seeds[0], SEED_BATCHES))
                            for s in range(2)])[:size["shift_prompts"]]
    shift_pairs = train.select_groups(first)
    gold_rm = gold_reward_model(study, 4 * size["n_eval"])

    runs = {m: {} for m in METHODS}
    for beta in size["betas"]:
        runs["DPO"][f"beta {beta:g}"] = [run_dpo(study, train, heldout, beta, s, size, shift_pairs) for s in seeds]
    for target in size["targets"]:
        runs["PPO (reward model)"][f"KL target {target:g}"] = [
            run_ppo(study, study.reward_model, target, s, size, PPO_BASE) for s in seeds]
        runs["PPO-GT (gold reward)"][f"KL target {target:g}"] = [
            run_ppo(study, gold_rm, target, s, size, GT_BASE) for s in seeds]

    # every method's frontier per seed, and each pair of methods at matched KL values (within both's reach)
    fronts = method_fronts(runs, len(seeds))

    # DPO's implicit reward as a reward model (the first seed's runs, every beta), on the held-out pairs
    implicit = {name: implicit_reward_report(r[0]["trainer"].policy, r[0]["trainer"].state.ref, study.reward_model,
                                             heldout, r[0]["config"]) for name, r in runs["DPO"].items()}
    return {"size": size, "quick": quick, "full": full, "seeds": seeds, "runs": strip(runs), "fronts": fronts,
            "compare": matched_comparisons(fronts, PAIRS),
            "implicit": {n: {"dpo": {k: v for k, v in rep["dpo"].items() if k != "eval"}, "rm": rep["rm"],
                             "shift_heldout": logp_shift(rep["dpo"]["eval"], heldout)} for n, rep in implicit.items()},
            "data": {"train_pairs": len(train), "train_prompts": train.n_groups, "heldout_pairs": len(heldout),
                     "heldout_prompts": heldout.n_groups, "label_temperature": rm_cfg.label_temperature,
                     "shift_pairs": len(shift_pairs)},
            "sft": runs["DPO"][f"beta {size['betas'][0]:g}"][0]["points"][0]["eval"],   # checkpoint 0 of every run
            "gold_gain": gold_rm.gain,
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}


# ----------------------------------------------------------------------------------------------
# the narrative: every verdict from the numbers in ``r``
# ----------------------------------------------------------------------------------------------

def narrative(r: dict) -> str:
    d, S = r["data"], len(r["seeds"])
    L = [f"Data: {d['train_pairs']} training pairs from {d['train_prompts']} prompts and {d['heldout_pairs']} "
         f"held-out pairs ({d['heldout_prompts']} prompts): the reward-model stage's own pairs and split (labels by "
         f"the simulated human, tau = {d['label_temperature']:g}). The SFT policy: gold {r['sft']['gold_mean']:+.3f} on "
         f"{len(r['sft']['gold'])} evaluation prompts (KL 0).",
         f"\nRuns ({S} seeds each, seeds {r['seeds']}); every checkpoint judged by the gold score and the exact KL of "
         f"fresh samples; per seed: the last checkpoint, then the best gold and its KL:"]
    for m in METHODS:
        for name, per_seed in r["runs"][m].items():
            parts = []
            for run_ in per_seed:
                pts = run_["points"]
                best = max(pts, key=lambda p: p["gold"])
                parts.append(f"KL {pts[-1]['kl']:5.2f} gold {pts[-1]['gold']:+.3f} (best {best['gold']:+.3f} at "
                             f"KL {best['kl']:.2f})")
            L.append(f"  {SHORT[m]:<8s} {name:<14s} " + " | ".join(parts))
    L.append("\nFrontiers at matched KL, two methods at a time (gold: mean over seeds [seed range]; KL values up to the "
             "largest KL both methods reached in every seed):")
    V = by_key(verdicts(r))
    for (p, q), c in r["compare"].items():
        dec = kl_decimals(c["kl"])
        fv = V[f"frontier[{SHORT[p]} > {SHORT[q]}]"]
        L.append(f"  {SHORT[p]} vs {SHORT[q]} (KL up to {c['kl'][-1]:.{dec}f} nats):")
        L.append(f"    {'KL (nats)':>9s}  {SHORT[p]:>21s}  {SHORT[q]:>21s}   {SHORT[p]} vs {SHORT[q]}, 2 s.e. of the seeds")
        words = [point_word(v) for v in frontier_parts(r, p, q)]
        for g, x in enumerate(c["kl"]):
            L.append(f"    {x:9.{dec}f}  {_fmt(c['a'][:, g]):>21s}  {_fmt(c['b'][:, g]):>21s}   {words[g]}")
        L.append(fv.render("    "))
    for m, x, y in identical_settings(r):
        k_read = max(run_["kl_read_max"] for s_ in (x, y) for run_ in r["runs"][m][s_])
        lo_t = min(r["runs"][m][s_][0]["config"].kl_ref_target for s_ in (x, y))
        L.append(f"  ({SHORT[m]}: '{x}' and '{y}' give identical runs (run separately): the adaptive controller's error "
                 f"clip(KL / target - 1, -0.2, 0.2) is -0.2 for both targets while the KL it reads stays below 0.8 x "
                 f"{lo_t:g} nats (here at most {k_read:.2f}), so beta follows the same path"
                 + (")" if k_read < 0.8 * lo_t else "; yet the KL it read passed that bound: look for a bug)"))
    L.append(V["paper_finding"].render())
    reach = min(f[2] for m in METHODS for f in r["fronts"][m])       # the largest KL all three reached, every seed
    for x in (reach / 2, reach):
        L.append(f"  at KL {x:.2f} nats (all three methods): " + ", ".join(
            f"{SHORT[m]} {_fmt([front_at(f, [x])[0] for f in r['fronts'][m]]).strip()}" for m in METHODS))
    imp = r["implicit"]
    first = next(iter(imp.values()))
    L.append(f"\nDPO's implicit reward beta log(pi/pi_ref) as a reward model, on the {d['heldout_pairs']} held-out "
             f"pairs (seed {r['seeds'][0]}, end of training); within-prompt Pearson = correlation with gold after "
             f"subtracting each prompt's mean (the beta log Z(x) term DPO cannot see):")
    rows = [("reward model", first["rm"])] + [(f"DPO {name}", x["dpo"]) for name, x in imp.items()]
    for name, x in rows:
        L.append(f"  {name:<14s} accuracy vs labels {x['accuracy']:.3f}, vs the gold order {x['gold_accuracy']:.3f}; "
                 f"Pearson with gold {x['pearson']:+.3f} within prompts ({x['pearson_raw']:+.3f} raw)")
    L.append(V["dpo_orders_better"].render("  "))
    L.append("\nDPO's known failure, chosen and rejected log-probs both falling: change of log pi(y) from pi_ref "
             "(nats per response) at the end of training")
    for name, per_seed in r["runs"]["DPO"].items():
        s = per_seed[0]["shifts"][-1]
        h = imp[name]["shift_heldout"]
        word = ("both fell" if s["chosen"] < 0 and s["rejected"] < 0 else
                "the chosen rose" if s["chosen"] > 0 else "only the chosen fell")
        L.append(f"  {name:<10s} {d['shift_pairs']} trained-on pairs: chosen {s['chosen']:+.2f}, rejected "
                 f"{s['rejected']:+.2f} ({word}; chosen less likely than under pi_ref in {100 * s['chosen_fell']:.0f} %, "
                 f"both in {100 * s['both_fell']:.0f} % of pairs); held-out pairs: chosen {h['chosen']:+.2f}, "
                 f"rejected {h['rejected']:+.2f}")
    L.append(V["both_fall"].render("  "))
    fell = [n for n, per_seed in r["runs"]["DPO"].items()
            if per_seed[0]["shifts"][-1]["chosen"] < 0 and per_seed[0]["shifts"][-1]["rejected"] < 0]
    if fell:
        L.append(f"  ({', '.join(fell)}) The loss only pushes the margin h up: the probability that leaves both "
                 f"responses of a trained pair has to go to other responses (of other pairs, or in none).")
    t = r["time"]
    L.append(f"\nTime: {t['wall']:.1f} s wall, {t['cpu']:.1f} s CPU."
             + ("" if r["full"] or r["quick"] else " The committed figure comes from --full (4 settings x 3 "
                "seeds per method, PPO 40 iterations x 64, DPO 300 steps)."))
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


# ----------------------------------------------------------------------------------------------
# the figure
# ----------------------------------------------------------------------------------------------

def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(16, 12.5), gridspec_kw={"width_ratios": [1.35, 1]})
    a, b, c, t = axes[0, 0], axes[0, 1], axes[1, 0], axes[1, 1]
    S = len(r["seeds"])
    xmax = 1.25 * max(cmp["kl"][-1] for cmp in r["compare"].values())
    hidden = []
    for m in METHODS:
        col = COLORS[m]
        settings = r["runs"][m]
        pts = [p for per_seed in settings.values() for run_ in per_seed for p in run_["points"][1:]]
        shown = [p for p in pts if p["kl"] <= xmax]
        hidden += [(m, p) for p in pts if p["kl"] > xmax]
        a.scatter([p["kl"] for p in shown], [p["gold"] for p in shown], s=10, color=col, alpha=0.35, lw=0)
        reach = min(f[2] for f in r["fronts"][m])
        xs = np.linspace(0.0, min(reach, xmax), 80)
        curves = np.array([front_at(f, xs) for f in r["fronts"][m]])            # (S, 80)
        label = f"{m}: {', '.join(settings)}"
        a.plot(xs, curves.mean(axis=0), color=col, lw=2.2, label=textwrap.shorten(label, 80))
        a.fill_between(xs, curves.min(axis=0), curves.max(axis=0), color=col, alpha=0.2, lw=0)
    a.plot([0], [r["sft"]["gold_mean"]], "k*", ms=14, label="SFT policy (the reference)")
    a.set_xlim(-0.02 * xmax, xmax)
    a.set_xlabel("KL(pi || pi_ref) per response, exact (nats)")
    a.set_ylabel(f"gold score (simulated human), mean of {len(r['sft']['gold'])} fresh samples")
    title = (f"(a) gold vs KL: every checkpoint (dots) and each method's frontier, the best gold at KL <= x\n"
             f"(line: mean over {S} seeds, band: seed range)")
    if hidden:
        worst = min(hidden, key=lambda mp: mp[1]["gold"])
        title += (f"; {len(hidden)} checkpoints beyond {xmax:.1f} nats not shown "
                  f"(down to gold {worst[1]['gold']:+.2f} at {max(p['kl'] for _, p in hidden):.0f} nats)")
    a.set_title(title, fontsize=10.5)
    a.legend(loc="lower right", fontsize=8.5)

    imp = r["implicit"]
    first = next(iter(imp.values()))
    rows = [("reward model", first["rm"])] + [(f"DPO {n}", x["dpo"]) for n, x in imp.items()]
    keys = (("accuracy", "accuracy vs labels"), ("gold_accuracy", "accuracy vs gold order"),
            ("pearson", "Pearson with gold\n(within prompts)"))
    width = 0.8 / len(rows)
    x = np.arange(len(keys))
    for i, (name, vals) in enumerate(rows):
        bars = b.bar(x + (i - (len(rows) - 1) / 2) * width, [vals[k] for k, _ in keys], width, label=name,
                     color="0.45" if i == 0 else None)
        b.bar_label(bars, fmt="%.2f", fontsize=7.5, padding=1)
    b.set_xticks(x, [lab for _, lab in keys])
    b.set_ylim(0, 1.12)
    b.set_ylabel("on the held-out pairs")
    b.set_title("(b) DPO's implicit reward beta log(pi/pi_ref) vs the reward model\n(same pairs, held-out prompts; "
                f"seed {r['seeds'][0]}, end of training)")
    b.legend(loc="upper right", fontsize=8, ncol=len(rows))

    for k, (name, per_seed) in enumerate(r["runs"]["DPO"].items()):
        sh = per_seed[0]["shifts"]
        steps = [s["step"] for s in sh]
        col = f"C{k}"
        c.plot(steps, [s["chosen"] for s in sh], "-o", color=col, ms=3, label=f"{name}: chosen y_w")
        c.plot(steps, [s["rejected"] for s in sh], "--s", color=col, ms=3, label=f"{name}: rejected y_l")
    c.axhline(0, color="black", lw=0.8)
    c.set_xlabel("DPO step")
    c.set_ylabel("log pi(y|x) - log pi_ref(y|x)  (nats per response)")
    V = by_key(verdicts(r))
    last = {name: per_seed[0]["shifts"][-1] for name, per_seed in r["runs"]["DPO"].items()}
    what = ("chosen and rejected both fall" if V["both_fall"].holds else
            "; ".join(f"{n}: chosen {'rose' if s['chosen'] > 0 else 'fell'} ({s['chosen']:+.2f}), rejected "
                      f"{'rose' if s['rejected'] > 0 else 'fell'} ({s['rejected']:+.2f})" for n, s in last.items()))
    c.set_title(f"(c) DPO's known failure (both fall)? Here: {what}\n({r['data']['shift_pairs']} pairs of the "
                f"first batches, seed {r['seeds'][0]})", fontsize=10)
    c.legend(fontsize=8, loc="lower left", ncol=2)

    t.axis("off")
    t.grid(False)
    lines = ["(d) the frontiers at matched KL, mean [seed range]"]
    for (p, q), cmp in r["compare"].items():
        if p != METHODS[0]:
            continue
        dec = kl_decimals(cmp["kl"])
        words = [point_word(v) for v in frontier_parts(r, p, q)]
        lines += ["", f"{'KL':>6s} {SHORT[p]:>19s} {SHORT[q]:>19s}"]
        for g, kl in enumerate(cmp["kl"]):
            lines.append(f"{kl:6.{dec}f} {_fmt(cmp['a'][:, g]):>19s} {_fmt(cmp['b'][:, g]):>19s}  {words[g]}")
    lines.append("")
    for pair in PAIRS:
        v = V[f"frontier[{SHORT[pair[0]]} > {SHORT[pair[1]]}]"]
        lines += textwrap.wrap(f"{v.claim} {v.outcome.upper()}: {v.because}.", 74)
    lines.append("")
    lines += textwrap.wrap(f"DPO paper, Figure 2 (left): {V['paper_finding'].outcome.upper()} (rule: 2 s.e. of the "
                           "seed noise at every matched KL).", 74)
    t.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=8.8, transform=t.transAxes)
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
