r"""Lesson 20 - grpo_rloo: critic-free advantages (GRPO, RLOO, REINFORCE) against PPO with GAE, on one token budget.

Pipeline step: stage 3 of RLHF with the advantage step swapped. PPO turns one sequence score into per-token
advantages with a learned critic $V(s_t)$ and GAE (PPO paper eqs. (11)-(12)); the critic is the fourth of the
four models (actor, critic, reference, reward model). The methods here drop it and take the baseline from
OTHER SAMPLES of the same prompt, several responses per prompt: three models instead of four. RLHF is the
paradigm and PPO one optimiser of it: here the same SFT policy, reward model and KL-regularised objective are
optimised four ways, and lesson 19's best-of-n uses no gradient at all.

Papers: the estimators (`minippo.rl.group_advantages`, chosen by `GRPOConfig.advantage_estimator` in
`minippo.rlhf.grpo`), for G prompts
with n responses each and sequence scores s (the RM score, minus $\beta$ KL when the KL is in the reward):

    GRPO       A_i = (s_i - mean_g s) / std_g s            DeepSeekMath (Shao et al. 2024, arXiv:2402.03300)
                                                           sec. 4.1.2, outcome supervision
    RLOO       A_i = s_i - 1/(n-1) sum_{j != i} s_j        Ahmadian et al. 2024 (arXiv:2402.14740), the
                                                           leave-one-out estimator of Kool et al. 2019
    REINFORCE  A_i = s_i - mean of the batch               Williams 1992, constant baseline
    PPO        A_t = GAE(r_t + V(s_{t+1}) - V(s_t))        PPO eqs. (11)-(12), critic initialised from the RM

GRPO's objective, DeepSeekMath eq. (3), is the clipped surrogate averaged over the group plus a KL LOSS,
$-\beta\, D_{KL}[\pi_\theta \| \pi_{ref}]$ per token, with the estimator of eq. (4),

$$
D_{KL}[\pi_\theta \| \pi_{ref}] = \frac{\pi_{ref}(o_{i,t} \mid q, o_{i,<t})}{\pi_\theta(o_{i,t} \mid q, o_{i,<t})} - \log \frac{\pi_{ref}(o_{i,t} \mid q, o_{i,<t})}{\pi_\theta(o_{i,t} \mid q, o_{i,<t})} - 1
$$

(k3: unbiased, never negative); so GRPO runs here with `kl_ref_loss_coef = 0.04` (the paper's $\beta$) and NO
KL in the reward (`kl_ref_coef = 0`). RLOO and REINFORCE keep the KL in the reward like PPO
($r = \text{score} - \beta \text{KL}$, the adaptive $\beta$ of Ziegler et al. 2019). All four use the same
trainer: the same clipped surrogate (PPO eq. (7)), 4 epochs of minibatches, the same prompts distribution and
learning rate. (Ahmadian et al. take one on-policy step without clipping; here only the advantage differs.)
Our choices: each response's advantage goes to all of its tokens, losses are token-level means (DAPO's
aggregation, instead of eq. (3)'s $1/|o_i|$; Dr. GRPO's constant is `loss_agg="seq-mean-token-sum-norm"`), and
the critic-free advantages are NOT whitened again over the batch (`minippo.rlhf.grpo`'s docstring): GRPO's are normalised per group already, RLOO's and REINFORCE's keep
the score's units as in the papers and in TRL.

Same budget: every iteration samples the same number of responses (PPO 64 prompts x 1, the group methods 16
prompts x 4), for the same number of iterations; the lesson reports the generated tokens actually used
(lengths differ by method).

The figure (the committed one comes from --full: 60 iterations, 3 PPO seeds, and GRPO with beta 0.2 as a
fifth method: 3 times the default's iterations and 1.5 times its seeds; the default runs 20 iterations and 2
seeds): (a) gold score against KL to the reference of fresh samples, one point per method and seed, SFT at the
origin; (b) gold score of the training rollouts and (c) their KL over iterations (mean over seeds); (d) measured
CPU time per iteration, rollout and update (wall as dots); (e) memory of the models for LLaMA-7B: four models
against three; (f) how much of the score's spread each baseline removes on the last rollout of the group
methods.

Exercises:
1. Set `samples_per_prompt = 8` (8 prompts x 8): does the leave-one-out baseline get better or worse
   than the batch mean? Read `between_prompts` in panel (f) first.
2. Run `advantage_estimator="dr_grpo"` (no division by the group std, Liu et al. 2025) with GRPO's KL
   loss: does GRPO's gap to RLOO come from the std divide or from the KL being a loss instead of a reward?
3. Whiten GRPO's advantages over the batch as PPO does: in `grpo_iteration`
   (`minippo/rlhf/grpo.py`), pass `ro.adv` through `minippo.rl.masked.masked_whiten(ro.adv,
   ro.response_mask)` and compare: which responses gain and which lose from the token-weighted
   re-centring?

Questions: Q61, Q62, Q38, Q31.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import (Verdict, all_of, by_key, comparison, diff_text, identity, lesson_main, measurement,
                             pyplot, save, seed_compare)
from minippo.studies.baselines import BASELINES, compare_baselines
from minippo.rl.masked import masked_mean
from minippo.rlhf.grpo import GRPOConfig
from minippo.studies.memory import FP32, GB, MIXED, ModelShape, four_models, static_bytes, total_bytes
from minippo.studies.study import Study, final
from minippo.studies.sweep_stats import compare, pooled_seed_std

GROUP = 4                   # responses per prompt of the group methods (4-8 is common; DeepSeekMath samples 64)
GRPO_BETA = 0.04            # DeepSeekMath's beta of the KL loss
BIG_B, BIG_T = 4, 2048      # the 7B extrapolation's batch (lesson 12)
METHODS = {                 # name -> config (PPOConfig by default; GRPOConfig) overrides on top of the study's base
    "PPO (GAE + critic)": dict(),
    "GRPO": dict(config=GRPOConfig, advantage_estimator="grpo", samples_per_prompt=GROUP, kl_ref_controller="fixed",
                 kl_ref_coef=0.0, kl_ref_loss_coef=GRPO_BETA),
    "RLOO": dict(config=GRPOConfig, advantage_estimator="rloo", samples_per_prompt=GROUP),
    "REINFORCE (batch mean)": dict(config=GRPOConfig, advantage_estimator="reinforce", samples_per_prompt=GROUP),
}
FULL_EXTRA = {"GRPO (beta 0.2)": {**METHODS["GRPO"], "kl_ref_loss_coef": 0.2}}
CRITIC_FREE = ("GRPO", "RLOO", "REINFORCE (batch mean)", "GRPO (beta 0.2)")
COLORS = {"PPO (GAE + critic)": "tab:blue", "GRPO": "tab:red", "RLOO": "tab:green",
          "REINFORCE (batch mean)": "tab:purple", "GRPO (beta 0.2)": "tab:orange"}
MARKERS = {"PPO (GAE + critic)": "o", "GRPO": "s", "RLOO": "^", "REINFORCE (batch mean)": "D", "GRPO (beta 0.2)": "v"}


def sizes(quick: bool, full: bool) -> dict:
    """Run lengths: quick (smoke test), default (classroom size), full (the committed figure)."""
    if quick:
        return dict(iterations=4, batch_size=16, minibatch_size=8, seeds=(0, 1))
    if full:
        return dict(iterations=60, batch_size=64, minibatch_size=16, seeds=(0, 1, 2))
    return dict(iterations=20, batch_size=64, minibatch_size=16, seeds=(0, 1))


def _measure(run: dict) -> dict:
    """What the lesson keeps of a finished run besides its records: tokens, and its last rollout's advantages."""
    cfg, ro = run["config"], run["trainer"].last_rollout
    out = {"tokens": int(sum(r["response/length"] * cfg.batch_size for r in run["records"])),
           "adv_token_mean": masked_mean(ro.adv, ro.response_mask)}
    if getattr(cfg, "samples_per_prompt", 1) > 1:                       # PPOConfig: one response per prompt
        out["baselines"] = compare_baselines(ro.sequence_returns, cfg.samples_per_prompt)
    return out


def memory(study: Study, minibatch: int) -> dict:
    """Bytes of the four models (separate critic) and of the three (no critic): ours in fp32, LLaMA-7B mixed."""
    ours, big = ModelShape.from_gpt_config(study.sft.cfg), ModelShape.llama_7b(BIG_T)
    out = {}
    for c in ("separate", "none"):
        tiny = four_models(ours, FP32, minibatch, study.sft.cfg.block_size, critic=c)
        seven = four_models(big, MIXED, BIG_B, BIG_T, critic=c)
        out[c] = {"models": len(seven), "ours_total": total_bytes(tiny), "ours_static": static_bytes(tiny),
                  "7b_total": total_bytes(seven), "7b_static": static_bytes(seven),
                  "7b_rows": {r.name: r.total for r in seven}}
    return out


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick, full)
    study = Study(quick=quick, seed=seed)
    base = dict(iterations=sz["iterations"], batch_size=sz["batch_size"], minibatch_size=sz["minibatch_size"])
    methods = {**METHODS, **(FULL_EXTRA if full else {})}
    sweep = study.sweep(methods, seeds=sz["seeds"], base=base, extra=_measure)
    summary = {}
    for name, v in sweep.items():
        cfg = study.config(**base, **methods[name])
        # per-iteration times over iterations 1.. (iteration 0 also pays one-off costs: caches, kernels)
        per_it = lambda key: [float(np.mean([r[key] for r in recs[1:] or recs])) for recs in v["records"]]  # noqa: E731
        summary[name] = {
            "prompts": cfg.num_prompts, "samples_per_prompt": getattr(cfg, "samples_per_prompt", 1),
            "gold": [e["gold_mean"] for e in v["eval"]], "kl": [e["kl_mean"] for e in v["eval"]],
            "kl_exact": [e["kl_exact_mean"] for e in v["eval"]], "length": [e["length_mean"] for e in v["eval"]],
            "train_gold_final": [final(recs, "gold/score") for recs in v["records"]],
            "tokens": [x["tokens"] for x in v["extra"]],
            "wall_per_it": per_it("time/iteration"), "cpu_rollout_per_it": per_it("time/cpu_rollout"),
            "cpu_update_per_it": per_it("time/cpu_update"),
            "cpu_per_it": list(np.add(per_it("time/cpu_rollout"), per_it("time/cpu_update"))),
            "cpu_total": [t["cpu"] for t in v["time"]],
            "adv_token_mean": [x["adv_token_mean"] for x in v["extra"]],
        }
    groups = [x["baselines"] for name in sweep for x in sweep[name]["extra"] if "baselines" in x]
    baselines = {k: float(np.mean([g[k]["relative"] for g in groups])) for k in BASELINES}
    baselines["between_prompts"] = float(np.mean([g["between_prompts"] for g in groups]))
    return {"sizes": sz, "quick": quick, "full": full, "reference": study.reference, "methods": list(methods),
            "records": {k: v["records"] for k, v in sweep.items()}, "summary": summary, "baselines": baselines,
            "memory": memory(study, sz["minibatch_size"]),
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}


def _curve(records: list[list[dict]], key: str) -> np.ndarray:
    """(seeds, iterations) array of a record key."""
    return np.array([[r[key] for r in recs] for recs in records], dtype=float)


def _ms(x) -> str:
    return f"{np.mean(x):+.3f} +- {np.std(x):.3f}" if len(x) > 1 else f"{np.mean(x):+.3f}"


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed: each method's gold and
    KL (mean over the seeds), its CPU seconds per iteration as a share of PPO's, and the memory of LLaMA-7B with
    and without a critic in GB."""
    S, ppo = r["summary"], "PPO (GAE + critic)"
    cpu_ppo = float(np.mean(S[ppo]["cpu_per_it"]))
    return {"method_mean": {n: {"gold": float(np.mean(S[n]["gold"])), "kl": float(np.mean(S[n]["kl"])),
                                "cpu_share_of_ppo": float(np.mean(S[n]["cpu_per_it"])) / cpu_ppo}
                            for n in r["methods"]},
            "memory_7b_gb": {k: r["memory"][k]["7b_total"] / GB for k in ("separate", "none")}}


def narrative(r: dict) -> str:
    L = []
    sz, S, ref = r["sizes"], r["summary"], r["reference"]
    ppo = "PPO (GAE + critic)"
    L.append(f"{sz['iterations']} iterations x {sz['batch_size']} responses per method, PPO seeds {list(sz['seeds'])}; "
             f"group size {GROUP}; GRPO: KL as a loss (beta {GRPO_BETA}), no KL in the reward.")
    L.append(f"SFT: gold {ref['gold_mean']:+.3f} (std {ref['gold_std']:.3f} over {len(ref['gold'])} prompts)\n")
    L.append(f"  {'method':<24s} {'prompts x n':>11s} {'tokens':>7s} {'gold (fresh)':>16s} {'KL k1':>6s} {'KL max':>6s} "
             f"{'KL exact':>8s} {'wall s/it':>9s} {'CPU s/it':>8s}")
    for name in r["methods"]:
        s = S[name]
        L.append(f"  {name:<24s} {s['prompts']:>5d} x {s['samples_per_prompt']:<3d} {np.mean(s['tokens']):7.0f} "
                 f"{_ms(s['gold']):>16s} {np.mean(s['kl']):6.2f} {np.max(s['kl']):6.2f} {np.mean(s['kl_exact']):8.2f} "
                 f"{np.mean(s['wall_per_it']):9.3f} {np.mean(s['cpu_per_it']):8.3f}")
    L.append("")
    for n in r["methods"]:
        if n == ppo:
            continue
        if len(sz["seeds"]) > 1:
            noise = pooled_seed_std([S[m]["gold"] for m in r["methods"]])[0]
            c = compare(S[ppo]["gold"], S[n]["gold"], noise)
            verdict = (f"{c['diff']:+.3f} +- {c['se']:.3f}: " +
                       (("above" if c["diff"] > 0 else "below") + " PPO beyond the seed noise" if c["clear"]
                        else "within the seed noise"))
        else:
            verdict = f"{np.mean(S[n]['gold']) - np.mean(S[ppo]['gold']):+.3f}, one seed: no noise estimate"
        L.append(f"  {n}: gold vs PPO {verdict}; KL {np.mean(S[n]['kl']):.2f} vs {np.mean(S[ppo]['kl']):.2f}; "
                 f"CPU per iteration {np.mean(S[n]['cpu_per_it']) / np.mean(S[ppo]['cpu_per_it']):.0%} of PPO's")
    mem = r["memory"]
    L.append(f"\nMemory: PPO keeps {mem['separate']['models']} models, the critic-free methods "
             f"{mem['none']['models']}. Ours (fp32, minibatch {sz['minibatch_size']}): "
             f"{mem['separate']['ours_total'] / 1e6:.1f} MB -> {mem['none']['ours_total'] / 1e6:.1f} MB; LLaMA-7B "
             f"(mixed precision, batch {BIG_B} x {BIG_T}): {mem['separate']['7b_total'] / GB:.0f} GB -> "
             f"{mem['none']['7b_total'] / GB:.0f} GB (weights + gradients + Adam: {mem['separate']['7b_static'] / GB:.0f} "
             f"-> {mem['none']['7b_static'] / GB:.0f} GB).")
    bl = r["baselines"]
    factor = (GROUP / (GROUP - 1)) ** 2
    V = by_key(verdicts(r))
    L.append("\nBaselines on the group methods' last rollouts, mean (s - b)^2 / Var(s): "
             + ", ".join(f"{k} {bl[k]:.2f}" for k in BASELINES)
             + f". The prompt explains {bl['between_prompts']:.0%} of the score's variance; leave-one-out's residual is "
             f"{bl['leave-one-out'] / max(bl['group mean'], 1e-12):.2f} times the group mean's ((n/(n-1))^2 = "
             f"{factor:.2f}, the price of being unbiased).")
    L += [V["group_mean_removes_prompt_share"].render("  "), V["loo_residual_factor"].render("  ")]
    g = S["GRPO"]["adv_token_mean"]
    L.append(f"Whitening: GRPO's advantages average 0 per response but {np.mean(g):+.3f} per token (long responses "
             f"count more); re-whitening them over tokens (the old default) would have shifted every advantage by that "
             f"much / std. They are used as the paper defines them.")
    multi = len(sz["seeds"]) > 1
    free = [n for n in CRITIC_FREE if n in S]
    cpu_noise = pooled_seed_std([S[m]["cpu_per_it"] for m in r["methods"]])[0] if multi else None
    cpu = seed_compare(S[ppo]["cpu_per_it"], [np.mean([S[n]["cpu_per_it"][i] for n in free])
                                              for i in range(len(sz["seeds"]))], cpu_noise)
    upd = {n: np.mean(S[n]["cpu_update_per_it"]) for n in r["methods"]}
    saved_bytes = 1 - mem["none"]["7b_total"] / mem["separate"]["7b_total"]
    L.append("\nWhat holds at this scale:")
    L.append(f"  - Critic-free = three models instead of four: {saved_bytes:.0%} of the 7B setup's bytes saved; CPU "
             f"seconds per iteration, critic-free minus PPO: {diff_text(cpu, '+.3f')} "
             f"({cpu['diff'] / np.mean(S[ppo]['cpu_per_it']):+.0%}; the update alone {upd[ppo]:.3f} -> "
             f"{np.mean([upd[n] for n in free]):.3f} s).")
    L += [V["critic_free_saves_memory"].render("  "), V["critic_free_saves_cpu"].render("  ")]
    L.append(f"  - A common claim: fewer samples per prompt mean more variance. The group baseline removes "
             f"{bl['between_prompts']:.0%} of Var(s) beyond the batch mean here, the part that depends on the prompt; "
             f"with n = {GROUP} the unbiased leave-one-out residual is {bl['leave-one-out']:.2f} against the batch "
             f"mean's {bl['batch mean']:.2f}.")
    L.append(V["loo_worse_than_batch_mean"].render("  "))
    golds = {n: float(np.mean(S[n]["gold"])) for n in r["methods"]}
    L.append(f"  - A common misconception: RLHF is PPO. It is not: the same RLHF stages, SFT -> reward model -> "
             f"maximise the RM score under a KL leash, run here with {len(golds)} optimisers. From "
             f"{ref['gold_mean']:+.2f} they reach between {min(golds.values()):+.2f} ({min(golds, key=golds.get)}) and "
             f"{max(golds.values()):+.2f} ({max(golds, key=golds.get)}). PPO is one optimiser of the RLHF objective, "
             "not the paradigm (lesson 19's best-of-n optimises it with no gradient at all).")
    L.append(V["every_optimiser_lifts_gold"].render("  "))
    L.append(f"\nLesson run time: wall {r['time']['wall']:.1f} s, CPU {r['time']['cpu']:.1f} s.")
    return "\n".join(L)


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (seed noise pooled over the methods)."""
    sz, S, ref, bl, mem = r["sizes"], r["summary"], r["reference"], r["baselines"], r["memory"]
    ppo = "PPO (GAE + critic)"
    multi = len(sz["seeds"]) > 1
    free = [n for n in CRITIC_FREE if n in S]
    factor = (GROUP / (GROUP - 1)) ** 2
    cpu_noise = pooled_seed_std([S[m]["cpu_per_it"] for m in r["methods"]])[0] if multi else None
    cpu_free = [np.mean([S[n]["cpu_per_it"][i] for n in free]) for i in range(len(sz["seeds"]))]
    noise = pooled_seed_std([S[m]["gold"] for m in r["methods"]])[0] if multi else None
    return [
        identity("group_mean_removes_prompt_share", "The group mean removes, beyond the batch mean, exactly the share "
                 "of the score's variance that the prompt explains.",
                 bool(np.isclose(bl["batch mean"] - bl["group mean"], bl["between_prompts"], atol=0.005)),
                 "holds when residual(batch mean) - residual(group mean) equals the between-prompt share to 0.005 "
                 "(the groups' sample variances against the population split)",
                 {"batch - group": bl["batch mean"] - bl["group mean"], "between prompts": bl["between_prompts"]}),
        identity("loo_residual_factor", f"Leave-one-out's residual is (n/(n-1))^2 = {factor:.2f} times the group "
                 "mean's: the price of being unbiased.", bool(np.isclose(bl["leave-one-out"], factor * bl["group mean"],
                                                                           rtol=0.01)),
                 "holds when residual(leave-one-out) = (n/(n-1))^2 residual(group mean) to 1% (exact per group; the "
                 "residuals are averaged over groups)", {"ratio": bl["leave-one-out"] / max(bl["group mean"], 1e-12),
                                                         "(n/(n-1))^2": factor}),
        measurement("critic_free_saves_memory", "Critic-free = three models instead of four: it saves memory "
                    "(LLaMA-7B, mixed precision).", 1 - mem["none"]["7b_total"] / mem["separate"]["7b_total"], 0.0, ">",
                    "share of the 7B setup's bytes saved", fmt=".0%"),
        comparison("critic_free_saves_cpu", "Critic-free methods take less CPU time per iteration than PPO.",
                   seed_compare(S[ppo]["cpu_per_it"], cpu_free, cpu_noise), expect=-1,
                   labels=("PPO", "critic-free (mean)"), quantity="CPU s per iteration",
                   values=(float(np.mean(S[ppo]["cpu_per_it"])), float(np.mean(cpu_free)))),
        measurement("loo_worse_than_batch_mean", f"With n = {GROUP} samples per prompt the unbiased leave-one-out "
                    "baseline leaves more of Var(s) than the plain batch mean (few samples: noisy baselines).",
                    bl["leave-one-out"] - bl["batch mean"], 0.0, ">", "residual(LOO) - residual(batch mean)",
                    fmt="+.2f"),
        all_of("every_optimiser_lifts_gold", f"Every one of the {len(r['methods'])} optimisers of the RLHF objective "
               "lifts the gold above the SFT policy.",
               [comparison(n, n, seed_compare([ref["gold_mean"]], S[n]["gold"], noise), expect=+1,
                           labels=("SFT", n), quantity="gold", values=(ref["gold_mean"], float(np.mean(S[n]["gold"]))))
                for n in r["methods"]]),
    ]


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(17, 10))
    (a, b, c), (d, e, f) = axes
    ref, S = r["reference"], r["summary"]
    # (a) gold vs KL of fresh samples, one point per method and seed
    a.scatter([0.0], [ref["gold_mean"]], marker="*", s=220, color="black", zorder=5, label="SFT (reference)")
    for name in r["methods"]:
        s = S[name]
        a.scatter(s["kl"], s["gold"], s=60, marker=MARKERS[name], color=COLORS[name], alpha=0.85,
                  label=f"{name}: {s['prompts']} x {s['samples_per_prompt']}, {np.mean(s['tokens']) / 1e3:.0f}k tokens")
    a.set_xlabel("KL to the reference, k1 per response (nats)")
    a.set_ylabel("gold score of fresh samples (mean)")
    a.set_title("(a) gold vs KL, one point per PPO seed")
    a.legend(loc="lower right", fontsize=8)
    # (b), (c) training curves, mean over seeds with the min-max band
    for ax, key, title in ((b, "gold/score", "(b) gold score of the rollouts"),
                           (c, "objective/kl", "(c) KL of the rollouts (k1, nats / response)")):
        for name in r["methods"]:
            y = _curve(r["records"][name], key)
            x = np.arange(y.shape[1])
            ax.plot(x, y.mean(0), color=COLORS[name], lw=1.8, label=name)
            ax.fill_between(x, y.min(0), y.max(0), color=COLORS[name], alpha=0.15)
        ax.set_xlabel("iteration (same number of responses per iteration)")
        ax.set_title(title)
    b.axhline(ref["gold_mean"], color="grey", ls="--", lw=1, label="SFT")
    b.legend(loc="lower right", fontsize=8)
    b.set_ylabel("gold score")
    c.set_ylabel("KL (nats / response)")
    # (d) measured time per iteration
    names = r["methods"]
    x = np.arange(len(names))
    roll = [np.mean(S[n]["cpu_rollout_per_it"]) for n in names]
    upd = [np.mean(S[n]["cpu_update_per_it"]) for n in names]
    d.bar(x, roll, color="tab:cyan", label="rollout (generate, score; ref / critic forward)")
    d.bar(x, upd, bottom=roll, color="tab:gray", label="update (K epochs of minibatches)")
    d.plot(x, [np.mean(S[n]["wall_per_it"]) for n in names], "ko", label="wall seconds (shared machine)")
    d.set_xticks(x, [n.replace(" (", "\n(") for n in names], fontsize=8)
    d.set_ylabel("CPU seconds per iteration")
    d.set_title("(d) time per iteration, measured")
    d.legend(loc="upper right", fontsize=8)
    # (e) memory of LLaMA-7B's models: four against three
    mem = r["memory"]
    bottom = np.zeros(2)
    for role, color in (("actor", "tab:blue"), ("critic", "tab:orange"), ("reference", "tab:green"),
                        ("reward", "tab:purple")):
        h = np.array([mem[cr]["7b_rows"].get(role, 0) / GB for cr in ("separate", "none")])
        e.bar([0, 1], h, bottom=bottom, color=color, label=role)
        bottom += h
    for i, cr in enumerate(("separate", "none")):
        e.text(i, bottom[i], f"{bottom[i]:.0f} GB\n(ours {mem[cr]['ours_total'] / 1e6:.0f} MB)", ha="center",
               va="bottom", fontsize=9)
    e.set_xticks([0, 1], ["PPO: 4 models", "critic-free: 3 models"])
    e.set_ylim(0, bottom.max() * 1.2)
    e.set_ylabel(f"GB, LLaMA-7B mixed precision, batch {BIG_B} x {BIG_T}")
    e.set_title("(e) memory: the critic is a whole trained model")
    e.legend(loc="upper right", fontsize=8)
    # (f) the baselines on the group methods' last rollouts
    bl = r["baselines"]
    f.bar(np.arange(len(BASELINES)), [bl[k] for k in BASELINES], color=["grey", "tab:purple", "tab:red", "tab:green"])
    top = 1.4 * max(bl[k] for k in BASELINES if k != "none")          # "none" (no baseline) can be far larger
    for i, k in enumerate(BASELINES):
        f.text(i, min(bl[k], top * 0.93), f"{bl[k]:.2f}", ha="center", va="bottom", fontsize=9)
    f.set_ylim(0, top)
    f.axhline(1.0, color="k", lw=0.8)
    f.set_xticks(np.arange(len(BASELINES)), [k.replace(" ", "\n") for k in BASELINES])
    f.set_ylabel("mean (s - b)^2 / Var(s)")
    f.set_title(f"(f) baselines on the group rollouts: prompts explain {bl['between_prompts']:.0%} of Var(s)")
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
