r"""Lesson 18 - ptx_and_critic: PPO-ptx and the alignment tax; where the critic lives (separate, shared, stop-gradient).

Pipeline step: stage 3 of RLHF, two design choices of the PPO update: what else goes into the loss (language
modelling on corpus text, PPO-ptx, with its own coefficient) and which network computes $V(s_t)$: a critic of
its own, or a value head on the actor's trunk (saves memory; without stop-gradient the value loss also trains
the trunk the policy uses).

Paper: PPO-ptx, InstructGPT (Ouyang et al. 2022, arXiv:2203.02155) eq. (2):

$$
\text{objective}(\phi) = \mathbb{E}_{(x, y) \sim D_{\pi_\phi^{RL}}}\left[r_\theta(x, y) - \beta \log \frac{\pi_\phi^{RL}(y \mid x)}{\pi^{SFT}(y \mid x)}\right]
+ \gamma\, \mathbb{E}_{x \sim D_{pretrain}}\left[\log \pi_\phi^{RL}(x)\right]
$$

The first term is what PPO maximises (the KL-shaped reward, coefficient $\beta$); the second, with its own
coefficient $\gamma$ (0 for plain "PPO"), keeps the policy a good language model. Our loss per minibatch is
PPO eq. (9) ($L^{CLIP} + c_1 L^{VF} - c_2 S$, signs for minimisation) plus `ptx_coef` ($\gamma$) times the SFT
cross-entropy on 16 sentences of the SFT corpus (`ptx_batch_size`). The ALIGNMENT TAX is measured as the
policy's cross-entropy on the SFT run's HELD-OUT sentences (never trained on by SFT nor by PPO-ptx;
`Study.lm_loss`) minus the SFT model's: nats per token lost.

The critic arrangements (`KnobsConfig.critic`; `minippo.rlhf.critic`):

* separate, RM init (the default): its own TinyGPT, initialised from the reward model (InstructGPT sec. 3.5);
* separate, SFT init: its own TinyGPT from the SFT trunk with a zero head (the control: same start as a
  shared head, but its own trunk);
* shared + stop-gradient: $V = w \cdot h_L(s_t) + b$ on the ACTOR's last hidden state; the value loss trains
  only $(w, b)$ (`TinyGPT.backward(scalar_into_trunk=False)`);
* shared, no stop-gradient: the value loss also flows into the actor's trunk (weighted by $c_1$ = vf_coef).

The figure (the committed one comes from --full: 60 iterations x 64 responses, 3 PPO seeds, PPO-ptx
coefficients 0, 0.1, 0.3, 1, 3 and a KL-matched control; the default runs 16 iterations x 32
responses, 2 seeds, coefficients 0, 0.3, 1): (a) the alignment tax and (b) the gold score of fresh samples
against ptx_coef, one dot per seed; (c) the tax and (d) the gold score against the KL to the reference,
every run of the lesson (runs without PPO-ptx in grey: they show what KL alone buys); (e) explained variance
and (f) value loss of the critics over iterations; (g) gold and KL of each critic arrangement; (h) memory of
the models with each arrangement, LLaMA-7B in mixed precision.

Exercises:
1. InstructGPT mixes far more pretraining text than RL text. Raise `ptx_batch_size` to 64 at
   `ptx_coef = 0.3`: does the tax fall further, and what happens to the gold score?
2. Give the shared critic its own learning rate: the head trains with the actor's lr. Why can a separate
   critic have `critic_lr` but a shared one not, in this trainer?
3. A LoRA adapter for the critic is another proposal. Which rows of panel (h) would it change?

Questions: Q58, Q59, Q49.
"""
from __future__ import annotations

import time

import numpy as np

from lessons._common import Verdict, any_of, by_key, comparison, lesson_main, measurement, pyplot, save
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.studies.critic_probes import trunk_gradient_split
from minippo.studies.memory import FP32, GB, MIXED, ModelShape, four_models, static_bytes, total_bytes
from minippo.studies.study import Study, final
from minippo.studies.sweep_stats import compare, pooled_seed_std, seed_curves

CRITICS = {  # name -> PPOConfig overrides; the first is the default config (= the "ptx 0" run)
    "separate, RM init": {},
    "separate, SFT init": dict(critic_init="sft"),
    "shared + stop-gradient": dict(critic="shared", shared_stop_gradient=True),
    "shared, no stop-gradient": dict(critic="shared", shared_stop_gradient=False),
}
CRITIC_COLORS = dict(zip(CRITICS, ("tab:blue", "tab:cyan", "tab:orange", "tab:red")))
KL_CONTROL = "ptx 0, KL target 1"      # --full: PPO without ptx held to a low KL (is ptx just a KL penalty?)
BIG_B, BIG_T = 4, 2048                 # the 7B extrapolation's batch (lesson 12)


def sizes(quick: bool, full: bool) -> dict:
    """Run lengths: quick (smoke test), default (classroom size), full (the committed figure)."""
    if quick:
        return dict(iterations=4, batch_size=16, minibatch_size=8, seeds=(0, 1), ptx=(0.0, 1.0))
    if full:
        return dict(iterations=60, batch_size=64, minibatch_size=16, seeds=(0, 1, 2), ptx=(0.0, 0.1, 0.3, 1.0, 3.0))
    return dict(iterations=16, batch_size=32, minibatch_size=8, seeds=(0, 1), ptx=(0.0, 0.3, 1.0))


def ptx_name(coef: float) -> str:
    return f"ptx {coef:g}"


def memory(study: Study, minibatch: int) -> dict:
    """Bytes per model and in total for each arrangement: ours (fp32) and LLaMA-7B (mixed precision)."""
    ours, big = ModelShape.from_gpt_config(study.sft.cfg), ModelShape.llama_7b(BIG_T)
    out = {}
    for c in ("separate", "shared", "none"):
        tiny = four_models(ours, FP32, minibatch, study.sft.cfg.block_size, critic=c)
        seven = four_models(big, MIXED, BIG_B, BIG_T, critic=c)
        out[c] = {"ours_total": total_bytes(tiny), "7b_total": total_bytes(seven), "7b_static": static_bytes(seven),
                  "7b_rows": {r.name: r.total for r in seven}}
    return out


def _measure(study: Study, run: dict) -> dict:
    """The held-out LM loss of a trained policy; for a shared critic, the value loss's share of the trunk's
    gradient on the last rollout (:func:`minippo.studies.critic_probes.trunk_gradient_split`)."""
    tr = run["trainer"]
    out = {"lm_loss": study.lm_loss(tr.actor)}
    if tr.cfg.critic == "shared":
        out["split"] = trunk_gradient_split(tr.state, tr.last_rollout, tr.cfg)
    return out


def run(quick: bool = False, seed: int = 0, full: bool = False) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    sz = sizes(quick, full)
    study = Study(quick=quick, seed=seed)
    base = dict(config=KnobsConfig, iterations=sz["iterations"], batch_size=sz["batch_size"],
                minibatch_size=sz["minibatch_size"])
    variants = {ptx_name(c): ({"ptx_coef": c} if c else {}) for c in sz["ptx"]}
    variants.update({k: v for k, v in CRITICS.items() if v})
    if full:
        variants[KL_CONTROL] = dict(kl_ref_target=1.0)
    sweep = study.sweep(variants, seeds=sz["seeds"], base=base, extra=lambda r: _measure(study, r))
    sft_lm = study.lm_loss(study.sft)
    runs = {}
    for name, v in sweep.items():
        runs[name] = {"gold": [e["gold_mean"] for e in v["eval"]], "kl": [e["kl_mean"] for e in v["eval"]],
                      "lm_loss": [x["lm_loss"] for x in v["extra"]], "tax": [x["lm_loss"] - sft_lm for x in v["extra"]],
                      "split": [x["split"] for x in v["extra"] if "split" in x],
                      "ptx_loss": [final(recs, "loss/ptx_avg") for recs in v["records"]],
                      "ev": [final(recs, "val/explained_variance") for recs in v["records"]],
                      "value_loss": [final(recs, "loss/value_avg") for recs in v["records"]],
                      "cpu_per_it": [t["cpu"] / sz["iterations"] for t in v["time"]],
                      "curves": {k: seed_curves(v, k) for k in ("val/explained_variance", "loss/value_avg")}}
    critics = {name: runs[ptx_name(0.0) if not ov else name] for name, ov in CRITICS.items()}
    return {"sizes": sz, "quick": quick, "full": full, "reference": study.reference, "sft_lm_loss": sft_lm,
            "runs": runs, "ptx": {c: runs[ptx_name(c)] for c in sz["ptx"]}, "critics": critics,
            "memory": memory(study, sz["minibatch_size"]),
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}


def _cmp(a, b, noise: float, multi: bool) -> dict:
    """``b - a`` with its standard error (pooled seed noise, :mod:`minippo.studies.sweep_stats`) and a text;
    ``clear`` is None with a single seed (no noise estimate)."""
    if not multi:
        d = float(np.mean(b) - np.mean(a))
        return {"diff": d, "clear": None, "text": f"{d:+.3f} (one seed: no noise estimate)"}
    c = compare(a, b, noise)
    return {**c, "text": f"{c['diff']:+.3f} +- {c['se']:.3f} ({'beyond' if c['clear'] else 'within'} the seed noise)"}


def _per_kl(v: dict) -> str:
    """Tax per nat of KL (blank when the run hardly moved: the ratio is then noise)."""
    kl = np.mean(v["kl"])
    return f"{np.mean(v['tax']) / kl:.4f}" if kl > 0.1 else "-"


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps per seed: each PPO-ptx
    coefficient's and each critic's mean over the seeds, the value loss's share of the trunk's gradient
    without stop-gradient, and LLaMA-7B's memory per critic arrangement in GB."""
    def means(v: dict) -> dict:
        return {k: float(np.mean(v[k])) for k in ("gold", "kl", "lm_loss", "tax", "ev", "value_loss") if k in v}

    nosg = r["critics"]["shared, no stop-gradient"]
    return {"ptx_mean": {f"{k:g}": means(v) for k, v in r["ptx"].items()},
            "critic_mean": {name: means(v) for name, v in r["critics"].items()},
            "no_stop_gradient_share": float(np.mean([x["share"] for x in nosg["split"]])),
            "memory_7b_gb": {k: m["7b_total"] / GB for k, m in r["memory"].items()}}


def narrative(r: dict) -> str:
    L = []
    sz, ref, ptx, critics, runs = r["sizes"], r["reference"], r["ptx"], r["critics"], r["runs"]
    L.append(f"{sz['iterations']} iterations x {sz['batch_size']} responses per run, PPO seeds {list(sz['seeds'])}.")
    L.append(f"SFT: gold {ref['gold_mean']:+.3f}, held-out LM loss {r['sft_lm_loss']:.4f} nats/token.\n")
    L.append("PPO-ptx (separate critic, RM init):")
    L.append(f"  {'ptx_coef':>8s} {'gold':>7s} {'KL':>6s} {'LM loss':>8s} {'tax':>7s} {'tax/KL':>7s} {'ptx loss':>8s} "
             f"{'CPU s/it':>8s}")
    for k, v in ptx.items():
        L.append(f"  {k:8g} {np.mean(v['gold']):+7.3f} {np.mean(v['kl']):6.2f} {np.mean(v['lm_loss']):8.4f} "
                 f"{np.mean(v['tax']):+7.4f} {_per_kl(v):>7s} {np.mean(v['ptx_loss']):8.4f} "
                 f"{np.mean(v['cpu_per_it']):8.3f}")
    multi = len(sz["seeds"]) > 1
    noise = {k: pooled_seed_std([v[k] for v in runs.values()])[0] if multi else 0.0 for k in ("tax", "gold", "ev", "kl")}
    lo, hi = min(ptx), max(ptx)
    for k in sorted(ptx)[1:]:
        L.append(f"  ptx {k:g} vs 0: tax {_cmp(ptx[lo]['tax'], ptx[k]['tax'], noise['tax'], multi)['text']}, "
                 f"gold {_cmp(ptx[lo]['gold'], ptx[k]['gold'], noise['gold'], multi)['text']}")
    if KL_CONTROL in runs:
        v = runs[KL_CONTROL]
        L.append(f"  control, no ptx held to KL target 1: KL {np.mean(v['kl']):.2f}, tax {np.mean(v['tax']):+.4f} "
                 f"(per nat {_per_kl(v)}), gold {np.mean(v['gold']):+.3f}")
    no_ptx = [v for name, v in runs.items() if name not in [ptx_name(k) for k in ptx if k > 0]]
    per_kl_no_ptx = np.mean([t / k for v in no_ptx for t, k in zip(v["tax"], v["kl"]) if k > 0.1] or [np.nan])
    L.append(f"  tax per nat of KL: {per_kl_no_ptx:.4f} over the runs without PPO-ptx (every critic, seed"
             + (", and the KL-target-1 control" if KL_CONTROL in runs else "") + f"), {_per_kl(ptx[hi])} with ptx {hi:g}.")
    L.append("\nCritic arrangements (no ptx):")
    L.append(f"  {'critic':<26s} {'expl. var.':>10s} {'value loss':>10s} {'gold':>7s} {'KL':>6s} {'tax':>7s} "
             f"{'CPU s/it':>8s}")
    for name, v in critics.items():
        L.append(f"  {name:<26s} {np.mean(v['ev']):10.3f} {np.mean(v['value_loss']):10.4f} {np.mean(v['gold']):+7.3f} "
                 f"{np.mean(v['kl']):6.2f} {np.mean(v['tax']):+7.4f} {np.mean(v['cpu_per_it']):8.3f}")
    sg, nosg, sep = critics["shared + stop-gradient"], critics["shared, no stop-gradient"], critics["separate, RM init"]
    sg_ev, sg_gold = (_cmp(sg[k], nosg[k], noise[k], multi) for k in ("ev", "gold"))
    sep_ev, sep_gold = (_cmp(sep[k], sg[k], noise[k], multi) for k in ("ev", "gold"))
    L.append(f"  no stop-gradient vs stop-gradient: explained variance {sg_ev['text']}, gold {sg_gold['text']}, "
             f"tax {_cmp(sg['tax'], nosg['tax'], noise['tax'], multi)['text']}.")
    L.append(f"  shared (stop-gradient) vs separate RM-init: explained variance {sep_ev['text']}, "
             f"gold {sep_gold['text']}.")
    share = [x["share"] for x in nosg["split"]]
    L.append(f"  no stop-gradient: the value loss makes {np.mean(share):.0%} of the norm of the trunk's gradient on the "
             f"last rollout (head |w| {np.mean([x['head_w_norm'] for x in nosg['split']]):.2f}; dL/dh = w dL/dV, "
             f"so a head "
             f"that starts at 0 sends nothing into the trunk at first); tax per nat of KL {_per_kl(nosg)} vs "
             f"{_per_kl(sg)} with stop-gradient.")
    mem = r["memory"]
    L.append(f"\nMemory (LLaMA-7B, mixed precision, batch {BIG_B} x {BIG_T}): "
             f"separate critic {mem['separate']['7b_total'] / GB:.0f} GB, "
             f"shared trunk {mem['shared']['7b_total'] / GB:.0f} GB, no critic {mem['none']['7b_total'] / GB:.0f} GB "
             f"(ours in fp32: {mem['separate']['ours_total'] / 1e6:.1f}, {mem['shared']['ours_total'] / 1e6:.1f}, "
             f"{mem['none']['ours_total'] / 1e6:.1f} MB).")
    saved = 1 - mem["shared"]["7b_total"] / mem["separate"]["7b_total"]
    L.append("\nWhat holds at this scale:")
    coefs = sorted(k for k in ptx if k > 0)
    pull = _cmp(ptx[lo]["kl"], ptx[hi]["kl"], noise["kl"], multi)
    V = by_key(verdicts(r))
    L.append("  PPO-ptx (mixing pre-training text into the update) against the alignment tax: tax with ptx "
             + ", ".join(f"{k:g} {_cmp(ptx[lo]['tax'], ptx[k]['tax'], noise['tax'], multi)['text']}" for k in coefs)
             + f" nats/token vs none. Per nat of KL the tax is {per_kl_no_ptx:.3f} without PPO-ptx and "
             f"{_per_kl(ptx[hi])} at ptx {hi:g}. The corpus here IS the SFT data; KL to the SFT model "
             f"{np.mean(ptx[lo]['kl']):.2f} -> {np.mean(ptx[hi]['kl']):.2f} nats ({pull['text']}).")
    L += [V[k].render("  ") for k in ("ptx_counters_tax", "ptx_costs_gold", "ptx_pulls_to_sft")]
    if KL_CONTROL in runs:                          # the ptx run closest in KL to the control without ptx
        v = runs[KL_CONTROL]
        k = min(coefs, key=lambda c: abs(np.mean(ptx[c]["kl"]) - np.mean(v["kl"])))
        L.append(f"    At a similar KL, ptx {k:g} (KL {np.mean(ptx[k]['kl']):.2f}): tax {np.mean(ptx[k]['tax']):.3f}, gold "
                 f"{np.mean(ptx[k]['gold']):+.3f}; no ptx held to KL target 1 (KL {np.mean(v['kl']):.2f}): tax "
                 f"{np.mean(v['tax']):.3f}, gold {np.mean(v['gold']):+.3f}.")
    L.append(V["shared_saves_memory"].render("  "))
    L.append(f"  Stop-gradient: the tax per nat of KL is {_per_kl(nosg)} without and {_per_kl(sg)} with it, and the "
             f"value loss is {np.mean(share):.0%} of the trunk's gradient without it.")
    L.append(V["stop_gradient_protects"].render("  "))
    sft = critics["separate, SFT init"]
    L.append(f"  A value head on the language model (the usual design): explained variance {np.mean(sg['ev']):.2f} "
             f"(shared), {np.mean(sft['ev']):.2f} (own trunk from the SFT model), {np.mean(sep['ev']):.2f} "
             f"(own trunk from the reward model): an own trunk adds {_cmp(sg['ev'], sft['ev'], noise['ev'], multi)['text']}"
             f", the RM initialisation {_cmp(sft['ev'], sep['ev'], noise['ev'], multi)['text']}.")
    L += [V[k].render("  ") for k in ("own_trunk_explains_more", "rm_init_explains_more")]
    L.append(f"\nLesson run time: wall {r['time']['wall']:.1f} s, CPU {r['time']['cpu']:.1f} s.")
    return "\n".join(L)


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (seed noise pooled over every run)."""
    sz, ptx, critics, runs = r["sizes"], r["ptx"], r["critics"], r["runs"]
    multi = len(sz["seeds"]) > 1
    noise = {k: pooled_seed_std([v[k] for v in runs.values()])[0] if multi else 0.0 for k in ("tax", "gold", "ev", "kl")}
    c = lambda a, b, k: ({**compare(a[k], b[k], noise[k])} if multi else               # noqa: E731
                         {"diff": float(np.mean(b[k]) - np.mean(a[k])), "se": None})
    lo, hi = min(ptx), max(ptx)
    sg, nosg, sft, sep = (critics[k] for k in ("shared + stop-gradient", "shared, no stop-gradient",
                                                "separate, SFT init", "separate, RM init"))
    mem = r["memory"]
    saved = 1 - mem["shared"]["7b_total"] / mem["separate"]["7b_total"]
    m = lambda v, k: float(np.mean(v[k]))           # noqa: E731
    no, wi = ("no ptx", f"ptx {hi:g}")
    return [
        comparison("ptx_counters_tax", f"A common claim: PPO-ptx counters the alignment tax: a lower held-out LM loss "
                   f"increase with ptx_coef {hi:g} than without.", c(ptx[lo], ptx[hi], "tax"), expect=-1,
                   labels=(no, wi), quantity="tax (nats/token)", values=(m(ptx[lo], "tax"), m(ptx[hi], "tax")),
                   fmt="+.4f"),
        comparison("ptx_costs_gold", f"PPO-ptx costs reward: the gold is lower with ptx_coef {hi:g}.",
                   c(ptx[lo], ptx[hi], "gold"), expect=-1, labels=(no, wi), quantity="gold",
                   values=(m(ptx[lo], "gold"), m(ptx[hi], "gold"))),
        comparison("ptx_pulls_to_sft", f"PPO-ptx on the SFT data pulls the policy towards the SFT model: lower KL with "
                   f"ptx_coef {hi:g}.", c(ptx[lo], ptx[hi], "kl"), expect=-1, labels=(no, wi), quantity="KL",
                   values=(m(ptx[lo], "kl"), m(ptx[hi], "kl")), fmt="+.2f"),
        measurement("shared_saves_memory", "A common claim: sharing the actor's trunk with the critic saves memory "
                    "(LLaMA-7B, mixed precision).", saved, 0.0, ">", "share of the 7B setup's bytes saved", fmt=".0%"),
        any_of("stop_gradient_protects", "A common claim: a stop-gradient keeps a shared critic from disturbing the "
               "actor: without it, less gold or more alignment tax.", [
                   comparison("gold", "less gold", c(sg, nosg, "gold"), expect=-1,
                              labels=("stop-gradient", "no stop-gradient"), quantity="gold",
                              values=(m(sg, "gold"), m(nosg, "gold"))),
                   comparison("tax", "more tax", c(sg, nosg, "tax"), expect=+1,
                              labels=("stop-gradient", "no stop-gradient"), quantity="tax", fmt="+.4f",
                              values=(m(sg, "tax"), m(nosg, "tax")))]),
        comparison("own_trunk_explains_more", "A critic with its own trunk (from the SFT model) explains more of the "
                   "returns than a value head on the shared trunk.", c(sg, sft, "ev"), expect=+1,
                   labels=("shared", "own trunk (SFT init)"), quantity="explained variance",
                   values=(m(sg, "ev"), m(sft, "ev"))),
        comparison("rm_init_explains_more", "Initialising the critic's own trunk from the reward model explains more "
                   "of the returns than from the SFT model.", c(sft, sep, "ev"), expect=+1,
                   labels=("SFT init", "RM init"), quantity="explained variance", values=(m(sft, "ev"), m(sep, "ev"))),
    ]


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 4, figsize=(21, 9.5))
    (a, b, c, d), (e, f, g, h) = axes
    ref, ptx, critics = r["reference"], r["ptx"], r["critics"]
    coefs = sorted(ptx)
    xpos = {k: i for i, k in enumerate(coefs)}                  # ptx_coef on an even axis (0 cannot go on a log one)
    cmap = plt.get_cmap("viridis")
    pcolor = {k: cmap(0.85 * i / max(len(coefs) - 1, 1)) for i, k in enumerate(coefs)}
    # (a), (b): tax and gold against ptx_coef, one dot per seed and the mean
    for ax, key, ylabel, title in ((a, "tax", "held-out LM loss - SFT's (nats / token)",
                                    "(a) alignment tax vs ptx_coef"),
                                   (b, "gold", "gold score of fresh samples", "(b) gold score vs ptx_coef")):
        for k in coefs:
            ys = ptx[k][key]
            ax.scatter([xpos[k]] * len(ys), ys, color=pcolor[k], s=40, zorder=3)
        ax.plot([xpos[k] for k in coefs], [np.mean(ptx[k][key]) for k in coefs], color="k", lw=1.2,
                label="mean over seeds")
        ax.set_xticks([xpos[k] for k in coefs], [f"{k:g}" for k in coefs])
        ax.set_xlabel("ptx_coef (gamma of InstructGPT eq. (2))")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    a.axhline(0.0, color="grey", ls="--", lw=1, label="SFT (no tax)")
    b.axhline(ref["gold_mean"], color="grey", ls="--", lw=1, label="SFT")
    a.legend(loc="upper right", fontsize=8)
    b.legend(loc="center right", fontsize=8)
    # (c), (d): tax and gold against KL, every run of the lesson
    for ax, key, ylabel, title in ((c, "tax", "alignment tax (nats / token)", "(c) alignment tax vs KL, every run"),
                                   (d, "gold", "gold score of fresh samples", "(d) gold vs KL, every run")):
        for name, v in r["runs"].items():
            coef = next((k for k in coefs if name == ptx_name(k)), None)
            if coef is not None and coef > 0:
                ax.scatter(v["kl"], v[key], color=pcolor[coef], s=45, zorder=3, label=name)
            else:
                ax.scatter(v["kl"], v[key], color="grey", s=30, marker="x" if name == KL_CONTROL else "o",
                           label="no ptx, KL target 1 (control)" if name == KL_CONTROL else "no ptx (every critic)")
        handles, labels = ax.get_legend_handles_labels()
        seen = dict(zip(labels, handles))                        # one legend entry per label
        ax.legend(seen.values(), seen.keys(), loc="best", fontsize=8)
        ax.set_xlabel("KL to the reference, k1 per response (nats)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    # (e), (f): the critics' explained variance and value loss over iterations
    for ax, key, title in ((e, "val/explained_variance", "(e) critic: explained variance of the returns"),
                           (f, "loss/value_avg", "(f) critic: value loss")):
        for name, v in critics.items():
            y = v["curves"][key]
            x = np.arange(y.shape[1])
            ax.plot(x, y.mean(0), color=CRITIC_COLORS[name], lw=1.8, label=name)
            ax.fill_between(x, y.min(0), y.max(0), color=CRITIC_COLORS[name], alpha=0.15)
        ax.set_xlabel("iteration")
        ax.set_title(title)
        ax.legend(loc="best", fontsize=8)
    e.axhline(0.0, color="k", lw=0.8)
    e.set_ylabel("1 - Var[R - V] / Var[R]")
    f.set_ylabel("0.5 mean max((V - R)^2, (V_clip - R)^2)")
    # (g): gold of each arrangement (dots per seed), its KL in the tick labels
    names = list(critics)
    for i, name in enumerate(names):
        g.scatter([i] * len(critics[name]["gold"]), critics[name]["gold"], color=CRITIC_COLORS[name], s=45, zorder=3)
        g.plot([i - 0.25, i + 0.25], [np.mean(critics[name]["gold"])] * 2, color="k", lw=1.5)
    g.axhline(ref["gold_mean"], color="grey", ls="--", lw=1, label="SFT")
    g.set_xticks(range(len(names)), [n.replace(", ", ",\n").replace(" + ", " +\n")
                                     + f"\nKL {np.mean(critics[n]['kl']):.2f}" for n in names], fontsize=8)
    g.set_ylabel("gold score of fresh samples")
    g.set_title("(g) critic arrangements: gold (KL below)")
    g.legend(loc="lower left", fontsize=8)
    # (h): memory per model, LLaMA-7B
    mem = r["memory"]
    arr = ("separate", "shared", "none")
    bottom = np.zeros(len(arr))
    for role, color in (("actor", "tab:blue"), ("critic", "tab:orange"), ("reference", "tab:green"),
                        ("reward", "tab:purple")):
        hgt = np.array([mem[a_]["7b_rows"].get(role, 0) / GB for a_ in arr])
        h.bar(np.arange(len(arr)), hgt, bottom=bottom, color=color, label=role)
        bottom += hgt
    for i, a_ in enumerate(arr):
        h.text(i, bottom[i], f"{bottom[i]:.0f} GB\n(ours {mem[a_]['ours_total'] / 1e6:.0f} MB)", ha="center",
               va="bottom", fontsize=8.5)
    h.set_xticks(range(len(arr)), ["separate\ncritic", "shared trunk\n(value head)", "no critic\n(lesson 20)"])
    h.set_ylim(0, bottom.max() * 1.22)
    h.set_ylabel(f"GB, LLaMA-7B mixed precision, batch {BIG_B} x {BIG_T}")
    h.set_title("(h) memory of the models")
    h.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
