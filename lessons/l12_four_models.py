"""Lesson 12 - four_models: actor, critic, reference, reward model: what trains, what is frozen, what it costs.

Legend: B batch (sequences), T tokens, C channels, V vocab, H heads, L layers, K PPO epochs,
M minibatches per epoch.

Pipeline step: the cast of stage 3 of RLHF. The actor (policy, trained) and the critic (value, trained) are
updated; the reference (frozen SFT copy, for the KL penalty) and the reward model (frozen, one score per
response) only run forward. Batch 4 x length 2048 x vocabulary 32k distributions take gigabytes, so the
buffer keeps the log_prob of the taken token only. A critic sharing the actor's trunk saves memory; GRPO /
RLOO (lesson 20) drop the critic altogether: three models instead of four.

Paper: no equation; the memory model follows mixed-precision training as in ZeRO (Rajbhandari et al. 2020):
16 bytes per trained parameter (fp16 weights and gradients, an fp32 master copy and two fp32 Adam moments),
2 per frozen one.

What the lesson does:
1. Runs one real `PPOTrainer.step` with each critic arrangement ("separate", "shared", "none") on our
   default sizes (untrained weights: the lesson counts, it does not learn), counts every model call with
   `minippo.studies.memory.PassCounter` and checks the count against `passes_per_iteration` (the formula
   from the trainer's code), and checks which parameters moved.
2. Measures the bytes of real TinyGPT arrays (weights, gradients, AdamW moments, the forward cache, logits,
   KV cache) and the tracemalloc peak of one update minibatch, against the formulas.
3. Runs the same step with each KL controller (`kl_ref_controller` "fixed", "adaptive", "ppo_paper"), counts
   and times every model call and the controller's update (Q34): does an adaptive coefficient cost a pass?
4. Extrapolates to LLaMA-7B (L 32, C 4096, V 32000, F 11008, T 2048, B 4) in mixed precision and sweeps the
   model size from ours to 13B.

The figure: (a) memory per model at our sizes (measured); (b) the same for 7B; (c) 7B totals: PPO with a
separate critic, with a shared-trunk critic, and critic-free (GRPO / RLOO), with and without gradient
checkpointing, against an 80 GB GPU; (d) what the (B, T, V) arrays and the buffer cost at B = 4, T = 2048,
V = 32000 (log scale); (e) passes per iteration counted on the real trainer; (f) resident weights +
optimizer state from tiny to 13B; (g) the passes of one step with each KL controller; (h) the controller's
update against the reference model's forward pass and the whole step (log scale).

Exercises:
1. Set `critic_init="sft"` or `critic="shared", shared_stop_gradient=False`: which passes change?
   Which memory? (`passes_per_iteration` and `four_models` answer before you run it.)
2. Double `update_epochs`: what grows, the rollout or the update? And with `kl_old_target` early stops?
3. With gradient checkpointing, which term dominates the 7B actor now? At which T does the
   attention-probability term (H T per token, quadratic) overtake the rest of a block (8C + 4F)?

Questions: Q31, Q33, Q34, Q32.
"""
from __future__ import annotations

import time
import tracemalloc

import numpy as np

from lessons._common import Verdict, all_of, by_key, identity, lesson_main, measurement, pyplot, save
from minippo.nn.gpt import TinyGPT
from minippo.rlhf.data.corpus import generate_corpus
from minippo.studies.memory import (FP32, GB, MIXED, VOCAB_ARRAYS_TRAIN, ModelShape, PassCounter, activation_bytes,
                                 buffer_bytes, four_models, kv_cache_bytes, logits_bytes, measure_tinygpt,
                                 param_count, passes_per_iteration, static_bytes, total_bytes)
from minippo.rlhf.ppo_config import KL_CONTROLLERS, PPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig, minibatch_loss_and_grads
from minippo.rlhf.reward_model import RewardModel
from minippo.rlhf.sft import SFTConfig
from minippo.rlhf.data.tokenizer import Tokenizer
from minippo.rlhf.run.trainer import PPOTrainer, make_kl_controller

CRITICS = ("separate", "shared", "none")
SETUP_NAMES = {"separate": "PPO, separate critic (4 models)", "shared": "PPO, shared-trunk critic",
               "none": "GRPO / RLOO, no critic (3 models)"}
PARTS = ("weights", "grads", "optimizer", "activations", "logits")
PART_LABELS = {"weights": "weights", "grads": "gradients", "optimizer": "Adam m, v (+ fp32 master)",
               "activations": "activations (fwd+bwd caches)", "logits": "(B, T, V) arrays"}
PART_COLORS = {"weights": "tab:blue", "grads": "tab:orange", "optimizer": "tab:red", "activations": "tab:green",
               "logits": "tab:purple"}
CONTROLLER_REPEATS = 1000                 # Q34: timed updates of each KL controller
BIG_B, BIG_T = 4, 2048                     # Q33: a batch of 4 x 2048 tokens, vocabulary 32k
SIZES = {  # name -> shape, for the sweep from tiny to 13B (gpt2 shapes: Radford et al. 2019)
    "GPT-2 124M": ModelShape(12, 768, 12, 50257, 1024),
    "GPT-2 1.5B": ModelShape(48, 1600, 25, 50257, 1024),
    "LLaMA-7B": ModelShape.llama_7b(),
    "LLaMA-13B": ModelShape(40, 5120, 40, 32000, 2048, family="llama", d_ff=13824),
}


def tiny_models(quick: bool, seed: int):
    """A tokenizer and untrained SFT / reward models at our default sizes (SFTConfig's TinyGPT)."""
    tok = Tokenizer.train(generate_corpus(1000 if quick else 3000, seed=seed), SFTConfig().vocab_size)
    gcfg = SFTConfig().gpt_config(tok.vocab_size)
    sft = TinyGPT(gcfg, rng=np.random.default_rng([seed, 1]))
    return tok, gcfg, sft, RewardModel.fresh(gcfg, np.random.default_rng([seed, 2]))


def count_passes(cfg: PPOConfig, tok, sft, rm, *, peak: bool = True) -> dict:
    """One real trainer step with ``cfg``: the counted (and timed) calls, the formula's, which parameters moved,
    the KL controller's update (calls, seconds), the step's wall and CPU time, and (separate critic, ``peak``) the
    tracemalloc peak of one update minibatch."""
    trainer = PPOTrainer(cfg, sft, rm, tok)
    s = trainer.state
    models = {"actor": s.actor, "critic": s.critic, "reference": s.ref, "reward": rm.model}
    before = {n: {k: v.copy() for k, v in m.params.items()} for n, m in models.items() if m is not None}
    with PassCounter(models, methods={"kl controller": (s.kl_ctl, "update")}) as pc:
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.step()
        step_time = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    head = ("scalar_head.w", "scalar_head.b") if cfg.critic == "shared" else ()   # the shared critic's own
    moved = {n: max(float(np.max(np.abs(models[n].params[k] - v))) for k, v in p.items() if k not in head)
             for n, p in before.items()}
    if head:
        moved["critic"] = max(float(np.max(np.abs(trainer.actor.params[k] - before["actor"][k]))) for k in head)
    ro = trainer.last_rollout
    # one controller update is ~10 us: a single call timed inside the step is at the mercy of the scheduler, so
    # the median of many updates of a fresh controller with this step's KL is reported beside it
    kl, ctl, times = float(ro.kl.sum(axis=1).mean()), make_kl_controller(cfg), []      # objective/kl
    for _ in range(CONTROLLER_REPEATS):
        t0 = time.perf_counter()
        ctl.update(kl, n_steps=cfg.batch_size)
        times.append(time.perf_counter() - t0)
    out = {"counted": pc.counts, "formula": passes_per_iteration(cfg, ro.response.shape[1] - 1), "moved": moved,
           "seconds": pc.seconds, "controller": {**pc.method_calls["kl controller"], "median_s": float(np.median(times))},
           "step_time": step_time, "beta": s.kl_ctl.value,
           "optimizers": {"actor": s.opt_actor is not None, "critic": s.opt_critic is not None},
           "T_rollout": ro.sequences.shape[1], "buffer_nbytes": sum(a.nbytes for a in vars(ro).values()
                                                                    if isinstance(a, np.ndarray))}
    if cfg.critic == "separate" and peak:
        mb = ro.take(np.arange(cfg.minibatch_size))
        tracemalloc.start()                     # counts NumPy's allocations made from here on
        try:
            minibatch_loss_and_grads(s, mb, cfg)
            out["update_peak"] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        shape, (B, T) = ModelShape.from_gpt_config(sft.cfg), (mb.sequences.shape[0], mb.sequences.shape[1] - 1)
        # what one minibatch adds: actor + critic caches (row-wise layers on the N real tokens only),
        # the actor's (B, T, V) arrays, both models' gradients
        N = int(np.count_nonzero(mb.attn_mask[:, :-1]))
        out["update_estimate"] = (2 * activation_bytes(shape, B, T, n_real=N) + 2 * 4 * param_count(shape)
                                  + logits_bytes(B, T, shape.vocab_size, 4, VOCAB_ARRAYS_TRAIN))
        out["update_BT"] = (B, T)
        out["update_N"] = N
    return out


def run(quick: bool = False, seed: int = 0) -> dict:
    tok, gcfg, sft, rm = tiny_models(quick, seed)
    base = (KnobsConfig.quick(batch_size=16, minibatch_size=8, update_epochs=2, max_new_tokens=8, seed=seed) if quick
            else KnobsConfig(seed=seed))
    passes = {c: count_passes(base.replace(critic=c), tok, sft, rm) for c in CRITICS}
    # Q34: the same step with each KL controller (separate critic; the base config's controller is reused)
    controllers = {k: passes["separate"] if k == base.kl_ref_controller else
                   count_passes(base.replace(kl_ref_controller=k), tok, sft, rm, peak=False) for k in KL_CONTROLLERS}
    # our sizes: a minibatch of full-length sequences, every array measured
    shape = ModelShape.from_gpt_config(gcfg)
    B, T = base.minibatch_size, gcfg.block_size
    tiny = {c: four_models(shape, FP32, B, T, critic=c) for c in CRITICS}
    measured = measure_tinygpt(gcfg, B, T, seed=seed)
    # LLaMA-7B in mixed precision at that batch (Q33)
    big = ModelShape.llama_7b(BIG_T)
    seven = {(c, ck): four_models(big, MIXED, BIG_B, BIG_T, critic=c, checkpointing=ck)
             for c in CRITICS for ck in (False, True)}
    pitfall = {  # Q33: what the buffer costs, bytes at B = 4, T = 2048, V = 32000
        "buffer, log_prob scalars": buffer_bytes(BIG_B, BIG_T, big.vocab_size),
        "buffer, full distributions": buffer_bytes(BIG_B, BIG_T, big.vocab_size, full_distributions=True),
        "one (B, T, V) fp32 array": logits_bytes(BIG_B, BIG_T, big.vocab_size, 4),
        f"update's {VOCAB_ARRAYS_TRAIN} (B, T, V) arrays": logits_bytes(BIG_B, BIG_T, big.vocab_size, 4,
                                                                       VOCAB_ARRAYS_TRAIN),
        "KV cache (generation, fp16)": kv_cache_bytes(big, BIG_B, BIG_T, 2),
        "actor activations, checkpointed": activation_bytes(big, BIG_B, BIG_T, 2, mode="checkpointed"),
        "actor activations, full": activation_bytes(big, BIG_B, BIG_T, 2),
    }
    sweep = {"tiny (ours)": shape, **SIZES}
    scaling = {name: {"params": param_count(s, ("lm",) if s.family == "llama" else ("lm", "scalar")),
                      **{c: static_bytes(four_models(s, MIXED, 1, 1, critic=c)) for c in CRITICS}}
               for name, s in sweep.items()}
    return {"quick": quick, "seed": seed, "gpt_config": gcfg, "ppo": base, "passes": passes,
            "controllers": controllers, "tiny": tiny,
            "tiny_BT": (B, T), "measured": measured, "tiny_kv": kv_cache_bytes(shape, base.batch_size,
                                                                             gcfg.block_size, 4),
            "seven": seven, "pitfall": pitfall, "scaling": scaling}


def _stack(ax, rows, scale, unit):
    """Stacked bars of :data:`PARTS` per model; returns the bar totals."""
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for part in PARTS:
        vals = np.array([getattr(r, part) for r in rows]) / scale
        ax.bar(x, vals, bottom=bottom, color=PART_COLORS[part], label=PART_LABELS[part], width=0.6)
        bottom += vals
    for xi, tot, r in zip(x, bottom, rows):
        ax.text(xi, tot, f"{tot:.3g} {unit}\n{'trained' if r.trained else 'frozen'}", ha="center", va="bottom",
                fontsize=8)
    ax.set_xticks(x, [r.name for r in rows])
    ax.set_ylim(0, bottom.max() * 1.22)
    ax.set_ylabel(unit)
    return bottom


def _fmt(nbytes: float) -> str:
    return f"{nbytes / GB:8.2f} GB" if nbytes >= 0.1 * GB else f"{nbytes / 1e6:8.3f} MB"


def _table(rows) -> list[str]:
    lines = [f"  {'model':<10s} {'params':>14s} " + " ".join(f"{p:>11s}" for p in PARTS) + f" {'total':>11s}"]
    for r in rows:
        lines.append(f"  {r.name:<10s} {r.params:>14,d} " + " ".join(_fmt(getattr(r, p)) for p in PARTS)
                     + f" {_fmt(r.total)}")
    return lines


def narrative(r: dict) -> str:
    L = []
    cfg, g = r["ppo"], r["gpt_config"]
    L.append(f"One PPOTrainer.step per critic arrangement (batch {cfg.batch_size}, {cfg.update_epochs} epochs x "
             f"{cfg.num_minibatches} minibatches, max {cfg.max_new_tokens} new tokens); TinyGPT L={g.n_layer}, "
             f"C={g.n_embd}, V={g.vocab_size}.")
    for c in CRITICS:
        p = r["passes"][c]
        ok = "== formula" if p["counted"] == p["formula"] else "!= formula (see passes_per_iteration)"
        calls = "; ".join(f"{n}: {v['forward']} fwd/{v['backward']} bwd" for n, v in p["counted"].items())
        moved = ", ".join(f"{n} {'moved' if d > 0 else 'FROZEN'} ({d:.1e})" for n, d in p["moved"].items())
        L.append(f"  {SETUP_NAMES[c]:<36s} {calls}; actor generation 1 prefill + {p['counted']['actor']['decode']} "
                 f"decode steps [{ok}]\n  {'':<36s} max |change| after the step: {moved}")
    ps = r["passes"]["separate"]
    V = by_key(verdicts(r))
    L.append(f"Optimizers: actor {ps['optimizers']['actor']}, separate critic {ps['optimizers']['critic']}; the "
             "reference and the reward model have none.")
    L += [V["passes_formula"].render(), V["frozen"].render()]
    L += controller_lines(r)
    L.append(V["adaptive_beta_free"].render())
    m, (B, T) = r["measured"], r["tiny_BT"]
    L.append(f"\nOur sizes, fp32, minibatch B={B}, T={T} (real TinyGPT arrays: params {m['params']:,}, weights "
             f"{m['weights']:,} B, grads {m['grads']:,} B, Adam {m['adam']:,} B, cache {m['activations']:,} B):")
    L.append("\n".join(_table(r["tiny"]["separate"])))
    L.append(V["memory_formula"].render())
    rows = {x.name: x for x in r["tiny"]["separate"]}
    L.append(f"Frozen models are counted with a no-grad forward (one block's working set); TinyGPT has no such mode, "
             f"so in our code each frozen forward of the batch builds the training caches and drops them "
             f"({rows['actor'].activations / B * cfg.batch_size / 1e6:.0f} MB at B={cfg.batch_size}, T={T}).")
    (Bu, Tu) = ps["update_BT"]
    L.append(f"tracemalloc peak of one real update minibatch (B={Bu}, T={Tu}, {ps['update_N']} real tokens): "
             f"{ps['update_peak'] / 1e6:.1f} MB; "
             f"estimate (2 caches + {VOCAB_ARRAYS_TRAIN} (B,T,V) arrays + 2 gradient sets): "
             f"{ps['update_estimate'] / 1e6:.1f} MB. Rollout buffer of {cfg.batch_size} responses: "
             f"{ps['buffer_nbytes'] / 1e3:.0f} KB; KV cache for generation: {r['tiny_kv'] / 1e6:.2f} MB.")
    L.append(f"\nLLaMA-7B, mixed precision (16 bytes per trained parameter, 2 per frozen), B={BIG_B}, T={BIG_T}:")
    L.append("\n".join(_table(r["seven"][("separate", False)])))
    for c in CRITICS:
        s = r["seven"][(c, False)]
        L.append(f"  {SETUP_NAMES[c]:<36s} resident weights+grads+optimizer {static_bytes(s) / GB:6.1f} GB, "
                 f"everything at once {total_bytes(s) / GB:6.1f} GB "
                 f"({total_bytes(r['seven'][(c, True)]) / GB:6.1f} GB with gradient checkpointing)")
    sep, shared, none = (static_bytes(r["seven"][(c, False)]) for c in ("separate", "shared", "none"))
    if np.isclose(shared, none, rtol=1e-3):            # the shared critic adds only a value head
        L.append(f"Dropping the critic (GRPO / RLOO) or sharing the actor's trunk saves {(sep - none) / GB:.0f} GB of "
                 f"{sep / GB:.0f} GB resident state ({100 * (sep - none) / sep:.0f}%).")
    else:
        L.append(f"Dropping the critic (GRPO / RLOO) saves {(sep - none) / GB:.0f} GB of {sep / GB:.0f} GB resident "
                 f"state ({100 * (sep - none) / sep:.0f}%), sharing the actor's trunk {(sep - shared) / GB:.0f} GB.")
    pf = r["pitfall"]
    full, scalars = pf["buffer, full distributions"], pf["buffer, log_prob scalars"]
    L.append("Storing the full distributions in the rollout buffer instead of the log_prob of the sampled token (a "
             f"common mistake) costs {full / scalars:,.0f}x the bytes: " + "; ".join(f"{k} {_fmt(v).strip()}"
                                                                             for k, v in pf.items()) + ".")
    return "\n".join(L)


def controller_cost(r: dict) -> dict:
    """Q34 from the steps with each KL controller: are the model calls identical, and the controller's update time
    against the step (negligible: under 0.1% of the fastest step) and the reference model's forward pass (the pass
    the KL penalty needs whatever beta does)."""
    ctl = r["controllers"]
    same = all(c["counted"] == ctl["fixed"]["counted"] for c in ctl.values())
    update_s = {k: c["controller"]["median_s"] for k, c in ctl.items()}
    ref_s = min(c["seconds"]["reference"]["forward"] for c in ctl.values())
    step_s = min(c["step_time"]["wall"] for c in ctl.values())
    return {"same_calls": same, "update_s": update_s, "calls": {k: c["controller"]["calls"] for k, c in ctl.items()},
            "ref_forward_s": ref_s, "step_s": step_s, "negligible": max(update_s.values()) < 1e-3 * step_s}


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes in other units than run() keeps them: LLaMA-7B's
    memory per model (separate critic, no checkpointing) and resident state in GB, the (B, T, V) pitfalls in
    GB, and Q34's controller costs (us, ms, the share of the step in percent)."""
    sep = r["seven"][("separate", False)]
    q = controller_cost(r)
    return {"num_minibatches": r["ppo"].num_minibatches, "seven_gb": {x.name: x.total / GB for x in sep},
            "seven_static_gb": static_bytes(sep) / GB,
            "pitfall_gb": {k: v / GB for k, v in r["pitfall"].items()},
            "timing": {"controller_update_us": {k: v * 1e6 for k, v in q["update_s"].items()},
                       "reference_forward_ms": q["ref_forward_s"] * 1e3, "step_s": q["step_s"],
                       "controller_share_of_step_pct": 100 * max(q["update_s"].values()) / q["step_s"]}}


def controller_lines(r: dict) -> list[str]:
    """The narrative of Q34: what an adaptive KL coefficient costs, counted and timed."""
    ctl, q = r["controllers"], controller_cost(r)
    a = ctl["adaptive"]["counted"]
    L = ["\nQ34, the same step with each KL controller (separate critic): "
         + "; ".join(f"{k} {ctl[k]['controller']['calls']} update, beta {r['ppo'].kl_ref_coef:g} -> {ctl[k]['beta']:.4g}"
                     for k in KL_CONTROLLERS) + ".",
         "  forward passes per model, fixed / adaptive / ppo_paper: "
         + "; ".join(f"{n} " + " / ".join(str(ctl[k]["counted"][n]["forward"]) for k in KL_CONTROLLERS) for n in a)
         + ". The adaptive controllers read objective/kl, which the rewards needed anyway.",
         f"  time of one controller update (median of {CONTROLLER_REPEATS}): "
         + " / ".join(f"{q['update_s'][k] * 1e6:.1f} us" for k in KL_CONTROLLERS)
         + f", against {q['ref_forward_s'] * 1e3:.1f} ms for the reference model's one forward pass of the batch "
         f"(needed by the KL penalty whatever beta does) and {q['step_s']:.2f} s for the whole step (wall, the "
         f"fastest of the three): {100 * max(q['update_s'].values()) / q['step_s']:.2g}% of the step, one scalar "
         "update per iteration."]
    return L


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (counts and bytes: identities of the code)."""
    q, m = controller_cost(r), r["measured"]
    actor = {x.name: x for x in r["tiny"]["separate"]}["actor"]
    formula = (actor.params, actor.weights, actor.grads, actor.optimizer, actor.activations)
    real = (m["params"], m["weights"], m["grads"], m["adam"], m["activations"])
    moved = max(p["moved"][n] for p in r["passes"].values() for n in ("reference", "reward"))
    share = max(q["update_s"].values()) / q["step_s"]
    return [
        identity("passes_formula", "Each critic arrangement runs exactly the passes its formula counts "
                 "(passes_per_iteration).", all(p["counted"] == p["formula"] for p in r["passes"].values()),
                 "holds when the counted forward / backward / prefill / decode calls of every model equal the formula's, "
                 f"in each of the {len(r['passes'])} arrangements"),
        identity("frozen", "The reference and the reward model stay frozen: only the actor and the critic are updated.",
                 moved == 0.0, "holds when the largest |change| of any reference or reward-model weight after the step is "
                 "exactly 0.0, in every arrangement", {"largest |change|": moved}),
        identity("memory_formula", "The memory formulas' actor row is exactly the bytes of the real TinyGPT arrays.",
                 formula == real, "holds when params, weights, grads, Adam moments and the cache equal the measured "
                 "arrays' sizes", {"formula params": actor.params, "real params": m["params"]}),
        all_of("adaptive_beta_free", "Q34: an adaptive beta costs no extra computation.", [
            identity("same_calls", "the same model calls", q["same_calls"], "holds when the model calls of the step "
                     "are identical in every kind (forward, backward, prefill, decode, rows) for fixed, adaptive and "
                     "ppo_paper"),
            measurement("negligible", "negligible time", share, 1e-3, "<", "controller update / step time", fmt=".2g")]),
    ]


def _plot_controllers(results: dict, g, h) -> None:
    """(g) the model calls of one step with each KL controller; (h) the controller's update against the passes."""
    ctl, q = results["controllers"], controller_cost(results)
    Bb = results["ppo"].batch_size
    names = list(ctl["fixed"]["counted"])
    x, width = np.arange(len(names)), 0.8 / (2 * len(KL_CONTROLLERS))
    for k, (name, col) in enumerate(zip(KL_CONTROLLERS, ("tab:gray", "tab:blue", "tab:green"))):
        c = ctl[name]["counted"]
        for j, (kind, hatch) in enumerate((("forward", None), ("backward", "//"))):
            pos = x - 0.4 + (2 * k + j + 0.5) * width
            g.bar(pos, [c[n][kind + "_rows"] / Bb for n in names], width, color=col, hatch=hatch, edgecolor="k",
                  lw=0.5, label=f"{name}: {kind}")
    g.set_xticks(x, names)
    g.set_ylabel("passes over the batch per iteration")
    g.set_title("(g) Q34: one step with each KL controller (beta fixed / adaptive / ppo_paper)\n"
                + ("the same passes for all three" if q["same_calls"] else "the passes DIFFER"))
    g.legend(fontsize=8, ncol=3, loc="upper right")
    g.set_ylim(0, max(c["counted"][n]["forward_rows"] / Bb for c in ctl.values() for n in names) * 1.35)
    labels = [f"controller update\n({name})" for name in KL_CONTROLLERS] + [
        "reference forward\n(the batch, once)", "whole step\n(wall)"]
    secs = [q["update_s"][name] for name in KL_CONTROLLERS] + [q["ref_forward_s"], q["step_s"]]
    h.barh(range(len(secs)), secs, color=["tab:gray", "tab:blue", "tab:green", "tab:orange", "tab:red"])
    for i, v in enumerate(secs):
        h.text(v * 1.3, i, f"{v * 1e6:.1f} us" if v < 1e-3 else f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s",
               va="center", fontsize=8)
    h.set_yticks(range(len(secs)), labels, fontsize=8)
    h.invert_yaxis()
    h.set_xscale("log")
    h.set_xlim(min(secs) / 3, max(secs) * 30)
    h.set_xlabel("seconds (log scale; controller: median of many updates)")
    h.set_title("(h) what the adaptive coefficient costs: one scalar update per iteration")


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    fig = plt.figure(figsize=(18, 16))
    gs = fig.add_gridspec(3, 6, hspace=0.42, wspace=0.9)
    axes = np.array([[fig.add_subplot(gs[i, 2 * j:2 * j + 2]) for j in range(3)] for i in range(2)])
    B, T = results["tiny_BT"]
    g = results["gpt_config"]

    ax = axes[0, 0]
    _stack(ax, results["tiny"]["separate"], 1e6, "MB")
    ax.set_title(f"(a) our sizes: L={g.n_layer}, C={g.n_embd}, V={g.vocab_size}, fp32\n"
                 f"minibatch B={B}, T={T}; measured = formula")
    ax.legend(fontsize=8, loc="upper right")

    ax = axes[0, 1]
    _stack(ax, results["seven"][("separate", False)], GB, "GB")
    ax.set_title(f"(b) LLaMA-7B, mixed precision (colors as in (a))\nB={BIG_B}, T={BIG_T}, no gradient checkpointing")

    ax = axes[0, 2]
    x = np.arange(len(CRITICS))
    for k, (ck, hatch) in enumerate(((False, None), (True, "//"))):
        tot = [total_bytes(results["seven"][(c, ck)]) / GB for c in CRITICS]
        stat = [static_bytes(results["seven"][(c, ck)]) / GB for c in CRITICS]
        xs = x + (k - 0.5) * 0.38
        ax.bar(xs, stat, width=0.36, color="0.55", hatch=hatch, edgecolor="k",
               label="weights + grads + optimizer" if k == 0 else None)
        ax.bar(xs, np.subtract(tot, stat), bottom=stat, width=0.36, color="tab:green", hatch=hatch, edgecolor="k",
               label=("activations + (B,T,V) arrays" if k == 0 else "hatched: gradient checkpointing"))
        for xi, t in zip(xs, tot):
            ax.text(xi, t, f"{t:.0f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(80, color="k", ls="--", lw=1, label="one 80 GB GPU")
    ax.set_xticks(x, [SETUP_NAMES[c].replace(", ", ",\n") for c in CRITICS], fontsize=8)
    ax.set_ylabel("GB, all models resident")
    rows = {x.name: x for x in results["seven"][("separate", False)]}
    share = rows["critic"].total / rows["actor"].total
    ax.set_title(f"(c) LLaMA-7B totals per setup\nthe critic costs {share:.0%} of the actor")
    ax.legend(fontsize=8, loc="upper right")

    ax = axes[1, 0]
    items = list(results["pitfall"].items())
    vals = [v for _, v in items]
    colors = ["tab:green", "tab:red", "tab:purple", "tab:purple", "tab:gray", "tab:olive", "tab:olive"]
    ax.barh(range(len(items)), vals, color=colors)
    for i, v in enumerate(vals):
        ax.text(v * 1.3, i, f"{v / 1e6:,.1f} MB" if v < GB else f"{v / GB:.2f} GB", va="center", fontsize=8)
    ax.set_yticks(range(len(items)), [k for k, _ in items], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(1e5, 1e12)
    ax.set_xlabel("bytes (log scale)")
    ax.set_title(f"(d) the rollout buffer at 7B (Q33): B={BIG_B}, T={BIG_T}, V=32000\n"
                 "store log_prob scalars, not distributions")

    ax = axes[1, 1]
    p = results["passes"]["separate"]
    cnt, form = p["counted"], p["formula"]
    Bb = results["ppo"].batch_size
    names = list(cnt)
    x = np.arange(len(names))
    fw = [cnt[n]["forward_rows"] / Bb for n in names]
    bw = [cnt[n]["backward_rows"] / Bb for n in names]
    ax.bar(x - 0.18, fw, width=0.34, color="tab:blue", label="forward passes (full passes over the batch)")
    ax.bar(x + 0.18, bw, width=0.34, color="tab:red", label="backward passes")
    ax.plot(x - 0.18, [form[n]["forward_rows"] / Bb for n in names], "k_", ms=22, mew=2,
            label="predicted by the formula passes_per_iteration()")
    ax.plot(x + 0.18, [form[n]["backward_rows"] / Bb for n in names], "k_", ms=22, mew=2)
    a = cnt["actor"]
    ax.text(0, max(fw) * 1.08, f"+ generation:\n1 prefill\n+ {a['decode']} decode steps", ha="center", fontsize=8)
    ax.set_xticks(x, names)
    ax.set_ylim(0, max(fw) * 1.5)
    cfg = results["ppo"]
    ax.set_ylabel("passes over the batch per iteration")
    ax.set_title(f"(e) passes in one real PPOTrainer step (separate critic)\n"
                 f"B={Bb}, K={cfg.update_epochs} epochs x M={cfg.num_minibatches} minibatches")
    ax.legend(fontsize=8, loc="upper right")

    ax = axes[1, 2]
    sc = results["scaling"]
    params = [sc[n]["params"] for n in sc]
    for c, style in zip(CRITICS, ("o-", "s--", "^-")):
        ax.plot(params, [sc[n][c] / GB for n in sc], style, label=SETUP_NAMES[c])
    offsets = [(8, -3), (-8, 3), (-8, -12), (-8, 3), (-8, 3)]       # label placement, points: tiny .. 13B
    for (n, pp), off in zip(zip(sc, params), offsets):
        ax.annotate(n, (pp, sc[n]["separate"] / GB), textcoords="offset points", xytext=off, fontsize=8,
                    ha="left" if off[0] > 0 else "right")
    ax.axhline(80, color="k", ls="--", lw=1, label="one 80 GB GPU")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("actor parameters (log scale)")
    ax.set_ylabel("GB resident: weights + grads + optimizer")
    ax.set_title("(f) from tiny to 13B, all models of each setup\n(mixed precision: 16 B per trained parameter)")
    ax.legend(fontsize=8, loc="lower right")
    _plot_controllers(results, fig.add_subplot(gs[2, 0:3]), fig.add_subplot(gs[2, 3:6]))
    save(fig, path)


if __name__ == "__main__":
    main()
