"""Lesson 23 - verifiable_rewards: GRPO's home ground, RL against a checker, with pass@k and dynamic sampling.

Pipeline step: stage 3 with a rule in the reward model's place. The task is ``minippo rlvr``'s
(``minippo/rlvr/``): two-digit sums ``23+58=``, an SFT model imitating a teacher who forgets each carry half
of the time, and a verifier that scores an answer 1 when it is the right sum ended by EOS, 0 otherwise.
From one SFT model (cached, as ``minippo rlvr`` builds it) four optimisers train on one budget of sampled
answers per iteration: GRPO (DeepSeekMath, Shao et al. 2024, arXiv:2402.03300, sec. 4.1.2), Dr. GRPO (Liu et
al. 2025, arXiv:2503.20783), RLOO (Ahmadian et al. 2024, arXiv:2402.14740), each in groups of 8 answers per
problem and without a critic, and PPO with its critic (``minippo.rlvr.trainer``), two RL seeds each.

(a) "The GRPO loss is 0 but the model learns." On-policy the ratio is exactly 1, so GRPO's loss
    (eq. (3), each answer's tokens averaged by 1/|o_i|, then the answers) is
        L = -1/B sum_i A_i,      A_i = (R_i - mean_g R) / std_g R,
    and the advantages of each group sum to 0: L = 0 up to float32 rounding, on every batch. Its gradient,
        grad L = -1/B sum_i A_i (1/|o_i|) sum_t grad log pi(o_i,t),
    weighs each answer's score function by its own A_i and is not 0. Measured: the loss of every rollout's
    whole batch at the policy that sampled it, its gradient norm, and pass@1; with Dr. GRPO's constant
    normaliser (sum over tokens / L_max) the on-policy loss is -1/B sum_i (|o_i| / L_max) A_i: not 0.
(b) pass@k = 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, arXiv:2107.03374, eq. (1)) from n = 64 answers per
    held-out problem, k in 1, 4, 16, 64, before and after RL. Yue et al. 2025 (arXiv:2504.13837) report that
    RL with verifiable rewards raises pass@1 and LOWERS pass@k at large k: it narrows what the model samples
    to the answers it already found. Judged with the seed noise, method by method.
(c) DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476): a group whose 8 answers are all right or all
    wrong has advantages exactly 0 (no gradient); dynamic sampling drops it and samples more problems until
    the batch is full (``GRPOConfig.dynamic_sampling``, at most 3 extra rounds). Measured: the share of such
    groups over training, the samples drawn, and pass@1 per sample drawn.
(d) Dr. GRPO's length bias: GRPO's 1/|o_i| gives a wrong (A < 0) long answer less push per token than a short
    one, which the paper reports lengthens wrong answers; lesson 22 measured it exactly on a toy. Here:
    the mean length of the wrong answers after GRPO and after Dr. GRPO.
(e) ``--full`` only: DAPO's soft overlong punishment (Yu et al. 2025, eq. (13); ``GRPOConfig.overlong_max_len``)
    adds R_length(|o|) to each answer's 0/1 before the group advantages: 0 up to L_max - L_cache tokens, then
    down to -1 at L_max, -1 beyond. GRPO with and without it, the same seeds, the same evaluation samples:
    mean answer length and pass@1, at two budgets. DAPO's placement, L_max = 6 (the longest answer) and
    L_cache = 2, punishes answers of 5 and 6 tokens, longer than any right one (3 or 4 tokens: a 2- or 3-digit
    sum and EOS); a tight budget, L_max = 5, punishes 4-token answers by 0.5, the right answer to every sum of
    100 or more among them.

Every verdict is computed from the numbers printed beside it: an identity (a) holds on every seed and every
iteration; a comparison holds when the difference in the claimed direction is at least 2 standard errors of
the seed noise (pooled over methods), fails at 2 s.e. the other way, else is not shown at this size.

The figure (the committed one comes from --full, seed 0; its panels are the default run's, (e) is printed
only): (a) GRPO's on-policy loss and gradient norm over iterations beside the
rollouts' pass rate; (b) pass@k against k, SFT and each method; (c) the share of zero-variance groups drawn
and trained on, with and without dynamic sampling; (d) the wrong answers' length.

Exercises:
1. Run (a) with ``loss_agg="token-mean"`` (DAPO's): is the on-policy loss still 0? Which sum would have to
   vanish?
2. Give the group methods ``samples_per_prompt=4``: how does the share of zero-variance groups change, and
   why does a larger group see fewer of them?
3. Lower the teacher's ``carry_slip`` to 0.2 (a better SFT model): do more groups come out all right, and
   what does dynamic sampling then cost in samples?

Questions: Q66, Q67, Q68, Q69, Q70, Q72, Q61, Q38, Q31.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (Verdict, all_of, by_key, comparison, identity, lesson_main, measurement,
                             pyplot, save, seed_compare, time_line)
from minippo.rlvr.evaluate import KS
from minippo.rlvr.task import TaskSFTConfig
from minippo.rlvr.trainer import rlvr_grpo_config, rlvr_ppo_config
from minippo.studies import verifiable
from minippo.studies.sweep_stats import pooled_seed_std

#: the methods, each ``(rlvr method, config overrides)``; the group methods in groups of 8 (rlvr_grpo_config)
METHODS = {"GRPO": ("grpo", {}), "Dr. GRPO": ("dr_grpo", {}), "RLOO": ("rloo", {}), "PPO": ("ppo", {}),
           "GRPO + dynamic sampling": ("grpo", {"dynamic_sampling": True})}
BUDGET = ("GRPO", "Dr. GRPO", "RLOO", "PPO")            # (b): the four optimisers on one budget
COLORS = {"GRPO": "tab:red", "Dr. GRPO": "tab:orange", "RLOO": "tab:green", "PPO": "tab:blue",
          "GRPO + dynamic sampling": "tab:purple", "SFT": "black"}
EPS32 = float(np.finfo(np.float32).eps)
GRAD_FLOOR = 0.01          # (a): a gradient norm above this is "not 0" (the measured ones are O(1))
#: (e): budget -> (its name, L_max below the longest answer (max_new_tokens = 6), L_cache)
OVERLONG = {"dapo": ("DAPO's budget", 0, 2), "tight": ("a tight budget", 1, 2)}


def sizes(quick: bool) -> dict:
    """quick: the smoke test's; default: the lesson's (the SFT model is cached after the first run)."""
    if quick:
        return dict(iterations=4, batch_size=32, minibatch_size=16, n_eval=16, n_samples=64, rl_seeds=2)
    return dict(iterations=30, batch_size=64, minibatch_size=32, n_eval=128, n_samples=64, rl_seeds=2)


def config(name: str, rl_seed: int, sz: dict):
    method, overrides = METHODS[name]
    common = dict(iterations=sz["iterations"], batch_size=sz["batch_size"], minibatch_size=sz["minibatch_size"],
                  seed=rl_seed, checkpoint_every=sz["iterations"])
    if method == "ppo":
        return rlvr_ppo_config(**common)
    return rlvr_grpo_config(method, **common, **overrides)


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick)
    sft_cfg = TaskSFTConfig.quick(seed=seed) if quick else TaskSFTConfig(seed=seed)
    sft = verifiable.task_sft(sft_cfg, quick)
    c_sft = time.process_time()
    probe = config("GRPO", seed, sz)
    ev = dict(max_new_tokens=probe.max_new_tokens, temperature=probe.temperature)

    def evaluate(policy, *stream):
        out = verifiable.evaluate(sft, policy, sz["n_eval"], sz["n_samples"], seed=[seed, 23, *stream], **ev)
        out.pop("samples")
        return out

    rl_seeds = [seed + i for i in range(sz["rl_seeds"])]
    runs = {}
    for m, name in enumerate(METHODS):
        runs[name] = []
        for rl_seed in rl_seeds:
            cfg = config(name, rl_seed, sz)
            res = verifiable.train(sft, cfg, measure_loss=METHODS[name][0] in ("grpo", "dr_grpo"))
            recs = res["records"]
            runs[name].append({
                "eval": evaluate(res["policy"], rl_seed, m + 1), "cpu": res["cpu"],
                "pass_rate": [r["rlvr/pass_rate"] for r in recs],
                "zero_drawn": [r.get("dapo/zero_variance_share") for r in recs],
                "zero_trained": res["batch_zero_share"],
                "extra": [r.get("dapo/extra_samples", 0) for r in recs],
                "drawn": sum(cfg.batch_size + r.get("dapo/extra_samples", 0) for r in recs),
                "loss": [x["loss"] for x in res["on_policy"]], "grad_norm": [x["grad_norm"] for x in res["on_policy"]],
                "max_rounds": getattr(cfg, "dynamic_max_rounds", 0)})
    r = {"sizes": sz, "quick": quick, "full": full, "seed": seed, "rl_seeds": rl_seeds,
         "sft": evaluate(sft["model"], 0, 0), "runs": runs, "group_size": probe.samples_per_prompt}
    if full:          # (e): GRPO with DAPO's overlong punishment; the seeds and evaluation samples of runs["GRPO"]
        r["overlong"] = {}
        for budget, (name, below, cache_len) in OVERLONG.items():
            max_len = probe.max_new_tokens - below
            xs = r["overlong"][budget] = {"name": name, "max_len": max_len, "cache_len": cache_len, "runs": []}
            for rl_seed in rl_seeds:
                cfg = config("GRPO", rl_seed, sz).replace(overlong_max_len=max_len, overlong_cache_len=cache_len)
                res = verifiable.train(sft, cfg)
                xs["runs"].append({"eval": evaluate(res["policy"], rl_seed, 1), "cpu": res["cpu"],
                                   "penalty": [x["dapo/overlong_penalty"] for x in res["records"]],
                                   "share": [x["dapo/overlong_share"] for x in res["records"]]})
    r["time"] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "cpu_sft": c_sft - c0}
    return r


def per_seed(r: dict, name: str, key: str) -> list[float]:
    """A number of each seed's evaluation after RL (``pass@16``, ``length_wrong``...)."""
    return [float(x["eval"][key]) for x in r["runs"][name]]


def noise(r: dict, key: str, names=BUDGET) -> float | None:
    """The seed noise of an evaluation number, pooled over ``names`` (None with one seed)."""
    return pooled_seed_std([per_seed(r, n, key) for n in names])[0] if len(r["rl_seeds"]) > 1 else None


def pass_k_identity(e: dict) -> tuple[bool, float]:
    """pass@1 is the mean share of right answers, and pass@k never falls with k: ``(ok, |pass@1 - c/n|)``."""
    gap = abs(e["pass@1"] - np.mean(e["per_problem_right"]) / e["n_samples"])
    ks = [e[f"pass@{k}"] for k in KS]
    return bool(gap < 1e-12 and all(b >= a for a, b in zip(ks, ks[1:]))), float(gap)


def mean_length(e: dict) -> float:
    """The mean tokens of every answer of an evaluation, from its right and wrong answers' means."""
    right = float(np.sum(e["per_problem_right"]))
    total = e["n_problems"] * e["n_samples"]
    parts = [(right, e["length_right"]), (total - right, e["length_wrong"])]
    return sum(n * m for n, m in parts if n) / total


def overlong_numbers(r: dict, budget: str) -> dict:
    """(e): per seed, GRPO without and with the overlong punishment at ``budget``: mean answer length and
    pass@1."""
    off, on = r["runs"]["GRPO"], r["overlong"][budget]["runs"]
    return {"length": ([mean_length(x["eval"]) for x in off], [mean_length(x["eval"]) for x in on]),
            "pass@1": ([x["eval"]["pass@1"] for x in off], [x["eval"]["pass@1"] for x in on])}


def overlong_verdicts(r: dict) -> list[Verdict]:
    """(e)'s two claims at each budget, each within the seed noise pooled over the two arms."""
    out = []
    for budget in r["overlong"]:
        nums, name = overlong_numbers(r, budget), r["overlong"][budget]["name"]
        for key, claim, number, quantity, expect, words in (
                ("shorter", "shortens GRPO's answers", "length", "mean answer length (tokens)", -1,
                 ("longer", "shorter")),
                ("pass1", "raises GRPO's pass@1", "pass@1", "pass@1", +1, ("higher", "lower"))):
            a, b = nums[number]
            noise_ab = pooled_seed_std([a, b])[0] if len(r["rl_seeds"]) > 1 else None
            out.append(comparison(f"overlong_{key}_{budget}", f"DAPO's soft overlong punishment ({name}) {claim}.",
                                  seed_compare(a, b, noise_ab), expect=expect,
                                  labels=("GRPO", "GRPO + overlong punishment"), quantity=quantity,
                                  values=(float(np.mean(a)), float(np.mean(b))), words=words))
    return out


def gain_per_1k(r: dict, name: str) -> list[float]:
    """pass@1 gained over the SFT model per 1000 answers sampled in training, each seed."""
    return [(x["eval"]["pass@1"] - r["sft"]["pass@1"]) / x["drawn"] * 1000 for x in r["runs"][name]]


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r``."""
    sz, sft, runs, n = r["sizes"], r["sft"], r["runs"], r["group_size"]
    grpo = runs["GRPO"] + runs["GRPO + dynamic sampling"]
    losses = [abs(v) for x in grpo for v in x["loss"]]
    tol = sz["batch_size"] * EPS32 * np.sqrt(n - 1)          # B terms of |A| <= sqrt(n - 1), float32 rounding
    grads = [g for x in grpo for g, z in zip(x["grad_norm"], x["zero_trained"]) if z < 1.0]
    dr = [abs(v) for x in runs["Dr. GRPO"] for v in x["loss"]]
    evals = [sft] + [x["eval"] for v in runs.values() for x in v]
    dyn = runs["GRPO + dynamic sampling"]
    unfilled = [(z, e) for x in dyn for z, e in zip(x["zero_trained"], x["extra"])
                if e < x["max_rounds"] * sz["batch_size"]]
    out = [
        identity("grpo_loss_zero", "On-policy, GRPO's loss of a whole batch is 0 (each group's advantages sum to 0, "
                 "1/|o_i| cancels the token sum).", max(losses) <= tol,
                 f"holds when |L| <= B eps32 sqrt(n - 1) = {tol:.2g} on every iteration of every GRPO run and seed",
                 {"max |L|": max(losses), "tolerance": tol, "batches": len(losses)}),
        measurement("grpo_grad_not_zero", "... while the gradient of that same loss is not 0.",
                    min(grads), GRAD_FLOOR, ">", "smallest gradient norm (batches with a signal)"),
        measurement("dr_grpo_loss_not_zero", "Dr. GRPO's on-policy loss (|o_i| / L_max weights) is not 0: the "
                    "identity is GRPO's 1/|o_i|.", float(np.mean(dr)), 100 * tol, ">", "mean |L| of Dr. GRPO"),
        identity("pass_k_consistent", "pass@1 is the mean share of right answers and pass@k never falls with k "
                 "(Chen et al. eq. (1)).", all(pass_k_identity(e)[0] for e in evals),
                 "holds when |pass@1 - mean c/n| < 1e-12 and pass@1 <= pass@4 <= pass@16 <= pass@64 in every "
                 "evaluation", {"evaluations": len(evals), "max gap": max(pass_k_identity(e)[1] for e in evals)}),
        identity("dynamic_batches_full", "With dynamic sampling every batch trained on holds only groups with a "
                 "signal, unless the cap on extra rounds was reached.", all(z == 0.0 for z, _ in unfilled),
                 "holds when the zero-variance share of the trained batch is exactly 0 on every iteration that "
                 "stopped before the cap", {"iterations below the cap": len(unfilled)}),
    ]
    up = {name: comparison(f"pass1_up_{name}", f"{name} raises pass@1 above the SFT model's.",
                           seed_compare([sft["pass@1"]], per_seed(r, name, "pass@1"), noise(r, "pass@1")),
                           expect=+1, labels=("SFT", name), quantity="pass@1",
                           values=(sft["pass@1"], float(np.mean(per_seed(r, name, "pass@1")))))
          for name in BUDGET}
    out.append(all_of("rl_raises_pass1", "Every optimiser raises pass@1 against the verifier.", up.values()))
    k = max(KS)
    down = [comparison(f"narrow_{name}", name, seed_compare([sft[f"pass@{k}"]], per_seed(r, name, f"pass@{k}"),
                                                            noise(r, f"pass@{k}")),
                       expect=-1, labels=("SFT", name), quantity=f"pass@{k}",
                       values=(sft[f"pass@{k}"], float(np.mean(per_seed(r, name, f"pass@{k}")))))
            for name in BUDGET]
    out.append(all_of("rl_narrows_pass_k", f"RL narrows pass@k at large k: pass@{k} after RL is below the SFT "
                      "model's (Yue et al. 2025), for every optimiser.", down))
    noise_dyn = pooled_seed_std([gain_per_1k(r, m) for m in ("GRPO", "GRPO + dynamic sampling")])[0] \
        if len(r["rl_seeds"]) > 1 else None
    a, b = gain_per_1k(r, "GRPO"), gain_per_1k(r, "GRPO + dynamic sampling")
    out.append(comparison("dynamic_per_sample", "Dynamic sampling gains more pass@1 per answer sampled than plain "
                          "GRPO (its extra samples pay for themselves).", seed_compare(a, b, noise_dyn), expect=+1,
                          labels=("GRPO", "dynamic sampling"), quantity="pass@1 gain per 1000 samples",
                          values=(float(np.mean(a)), float(np.mean(b)))))
    lw = {m: per_seed(r, m, "length_wrong") for m in ("GRPO", "Dr. GRPO")}
    out.append(comparison("grpo_longer_wrong", "GRPO's 1/|o| leaves wrong answers longer than Dr. GRPO's constant "
                          "(Liu et al. 2025).", seed_compare(lw["Dr. GRPO"], lw["GRPO"], noise(r, "length_wrong")),
                          expect=+1, labels=("Dr. GRPO", "GRPO"), quantity="wrong-answer length (tokens)",
                          values=(float(np.mean(lw["Dr. GRPO"])), float(np.mean(lw["GRPO"]))),
                          words=("longer", "shorter")))
    return out + (overlong_verdicts(r) if "overlong" in r else [])


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed: each optimiser's
    pass@1 and pass@64 after RL (mean over the RL seeds), their smallest and largest over the four on one
    budget, and the pass@1 gained per 1000 answers sampled (each RL seed)."""
    k = max(KS)
    after = {name: float(np.mean(per_seed(r, name, "pass@1"))) for name in r["runs"]}
    drop = {name: r["sft"][f"pass@{k}"] - float(np.mean(per_seed(r, name, f"pass@{k}"))) for name in BUDGET}
    return {"pass1_after": after, "pass1_after_min": min(after[n] for n in BUDGET),
            "pass1_after_max": max(after[n] for n in BUDGET),
            f"pass{k}_drop": drop, f"pass{k}_drop_min": min(drop.values()), f"pass{k}_drop_max": max(drop.values()),
            "gain_per_1k": {name: gain_per_1k(r, name) for name in ("GRPO", "GRPO + dynamic sampling")}}


def _mean(x) -> str:
    return f"{np.mean(x):.3f}" + (f" +- {np.std(x):.3f}" if len(x) > 1 else "")


def narrative(r: dict) -> str:
    sz, sft, runs = r["sizes"], r["sft"], r["runs"]
    V = by_key(verdicts(r))
    L = [f"From one SFT model (seed {r['seed']}), {sz['iterations']} iterations x {sz['batch_size']} answers per "
         f"method, RL seeds {r['rl_seeds']}; the group methods in groups of {r['group_size']}. Evaluation: "
         f"{sz['n_eval']} held-out problems x {sz['n_samples']} fresh answers.\n",
         "(a) GRPO's on-policy loss of each whole batch, its gradient norm, and the rollouts' pass rate:"]
    g = runs["GRPO"][0]
    for i in sorted({0, 1, len(g["loss"]) // 2, len(g["loss"]) - 1}):
        L.append(f"    iteration {i:3d}: loss {g['loss'][i]:+.2e}   gradient norm {g['grad_norm'][i]:.3f}   "
                 f"pass rate {g['pass_rate'][i]:.3f}")
    d = runs["Dr. GRPO"][0]
    L.append(f"    Dr. GRPO, same measurement: mean |loss| {np.mean(np.abs(d['loss'])):.2e}, mean gradient norm "
             f"{np.mean(d['grad_norm']):.3f}")
    L += [V[k].render("  ") for k in ("grpo_loss_zero", "grpo_grad_not_zero", "dr_grpo_loss_not_zero")]
    L.append(f"\n(b) pass@k on held-out problems (mean +- std over seeds), answer lengths, CPU of the RL run:")
    L.append(f"    {'policy':<24s}" + "".join(f"{'pass@' + str(k):>16s}" for k in KS)
             + f"{'len wrong':>11s}{'CPU s':>7s}")
    L.append(f"    {'SFT':<24s}" + "".join(f"{sft[f'pass@{k}']:16.3f}" for k in KS) + f"{sft['length_wrong']:11.2f}")
    for name, xs in runs.items():
        L.append(f"    {name:<24s}" + "".join(f"{_mean(per_seed(r, name, f'pass@{k}')):>16s}" for k in KS)
                 + f"{np.mean(per_seed(r, name, 'length_wrong')):11.2f}{np.mean([x['cpu'] for x in xs]):7.1f}")
    L += [V[k].render("  ") for k in ("pass_k_consistent", "rl_raises_pass1", "rl_narrows_pass_k")]
    dyn, off = runs["GRPO + dynamic sampling"], runs["GRPO"]
    L.append("\n(c) Dynamic sampling: share of zero-variance groups among those drawn / in the batch trained on, "
             "samples drawn, pass@1 gain per 1000 samples:")
    for name, xs in (("GRPO", off), ("GRPO + dynamic sampling", dyn)):
        drawn = [np.mean([z for z in x["zero_drawn"] if z is not None]) for x in xs]
        L.append(f"    {name:<24s} drawn {_mean(drawn)}   trained {_mean([np.mean(x['zero_trained']) for x in xs])}"
                 f"   samples {np.mean([x['drawn'] for x in xs]):7.0f}   gain/1k {_mean(gain_per_1k(r, name))}")
    L += [V[k].render("  ") for k in ("dynamic_batches_full", "dynamic_per_sample")]
    lw = {m: per_seed(r, m, "length_wrong") for m in ("GRPO", "Dr. GRPO")}
    L.append(f"\n(d) Wrong answers' mean length: SFT {sft['length_wrong']:.3f}, GRPO {_mean(lw['GRPO'])}, Dr. GRPO "
             f"{_mean(lw['Dr. GRPO'])} tokens (answers here are 2-4 tokens; lesson 22 isolates the push exactly).")
    L.append(V["grpo_longer_wrong"].render("  "))
    if "overlong" in r:
        L.append("\n(e) DAPO's soft overlong punishment, GRPO's seeds, budget and evaluation samples:")
        V_e = by_key(overlong_verdicts(r))
        for budget, o in r["overlong"].items():
            nums = overlong_numbers(r, budget)
            L.append(f"    {o['name']}: L_max = {o['max_len']}, L_cache = {o['cache_len']} (answers of more than "
                     f"{o['max_len'] - o['cache_len']} tokens punished); in training mean R_length "
                     f"{np.mean([np.mean(x['penalty']) for x in o['runs']]):+.4f}, share of answers punished "
                     f"{np.mean([np.mean(x['share']) for x in o['runs']]):.4f}")
            for name, i in (("GRPO", 0), ("GRPO + overlong punishment", 1)):
                L.append(f"      {name:<28s} mean answer length {_mean(nums['length'][i])}   pass@1 "
                         f"{_mean(nums['pass@1'][i])}")
            L += [V_e[f"overlong_{k}_{budget}"].render("  ") for k in ("shorter", "pass1")]
    else:
        L.append("\n(e) DAPO's soft overlong punishment is measured with --full.")
    t = r["time"]
    L.append(time_line(r) + f" (the SFT model: {t['cpu_sft']:.1f} s of it; cached after the first run)")
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, ((a, b), (c, d)) = plt.subplots(2, 2, figsize=(14, 10))
    runs, sft = r["runs"], r["sft"]
    # (a) GRPO's on-policy loss and gradient norm, and the pass rate of its rollouts
    g = runs["GRPO"][0]
    x = np.arange(len(g["loss"]))
    a.plot(x, g["grad_norm"], color="tab:red", label="gradient norm of the on-policy loss")
    a.plot(x, np.abs(g["loss"]), color="black", ls=":", label="|loss| on-policy (float32 rounding)")
    a.set_yscale("log")
    a.set_xlabel("iteration")
    a.set_title("(a) GRPO: the loss is 0, the gradient is not")
    a2 = a.twinx()
    a2.plot(x, g["pass_rate"], color="tab:green", alpha=0.7, label="rollout pass rate")
    a2.set_ylabel("pass rate of the rollouts")
    a.legend(loc="center left", fontsize=8)
    a2.legend(loc="lower right", fontsize=8)
    # (b) pass@k against k
    b.plot(KS, [sft[f"pass@{k}"] for k in KS], "k*-", label="SFT")
    for name in runs:
        b.plot(KS, [np.mean(per_seed(r, name, f"pass@{k}")) for k in KS], "o-", color=COLORS[name], label=name)
    b.set_xscale("log", base=2)
    b.set_xticks(KS, [str(k) for k in KS])
    b.set_xlabel("k")
    b.set_ylabel("pass@k (held-out problems, mean over seeds)")
    b.set_title("(b) pass@k before and after RL")
    b.legend(fontsize=8)
    # (c) zero-variance groups over training
    for name, ls in (("GRPO", "-"), ("GRPO + dynamic sampling", "--")):
        xs = runs[name]
        c.plot(np.mean([x["zero_drawn"] for x in xs], axis=0), ls, color=COLORS[name], label=f"{name}: drawn")
        c.plot(np.mean([x["zero_trained"] for x in xs], axis=0), ls, color=COLORS[name], alpha=0.4,
               label=f"{name}: trained on")
    c.set_xlabel("iteration")
    c.set_ylabel("share of groups with all answers right or all wrong")
    c.set_title("(c) zero-variance groups, with and without dynamic sampling")
    c.legend(fontsize=8)
    # (d) wrong answers' length
    names = ["SFT"] + list(runs)
    vals = [sft["length_wrong"]] + [np.mean(per_seed(r, n, "length_wrong")) for n in runs]
    d.bar(np.arange(len(names)), vals, color=[COLORS[n] for n in names])
    d.set_xticks(np.arange(len(names)), [n.replace(" + ", "\n+ ") for n in names], fontsize=8)
    d.set_ylim(min(vals) * 0.9, max(vals) * 1.05)
    d.set_ylabel("mean tokens of a wrong answer (EOS included)")
    d.set_title("(d) wrong answers' length")
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
