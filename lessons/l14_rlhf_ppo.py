"""Lesson 14 - rlhf_ppo: the full RLHF run: RM and gold score, KL, entropy, clip fraction, length; samples before/after.

Pipeline step: stage 3 of RLHF (seed 003 sec. 15: SFT -> reward model -> RL optimisation), with the
four models of seed 001: the actor and the critic train, the reference (frozen SFT copy) and the reward
model only run forward. One iteration: sample with the KV cache, score, per-token rewards
-beta kl_t + score on the EOS, GAE, then K epochs of minibatches of PPO paper eq. (9) (L^CLIP of
eq. (7) plus c1 times the clipped value loss), with the KL coefficient beta adapted after each
iteration (Ziegler et al. 2019: beta *= 1 + clip(KL / target - 1, +-0.2) * B / horizon).

What the lesson does: it reuses the SFT policy and reward model of the main job (built once and
cached in ``runs/cache``), runs PPO with the main job's defaults (``minippo rlhf``), and then judges
the SFT and the PPO policy on the same held-out prompts with fresh samples: the reward model's score
(the proxy PPO maximised), the gold score (the simulated human that labelled the preference pairs,
never seen by PPO), and the KL to the reference.

The figure: (a)-(f) the run's curves (RM score, gold score, KL against the controller's target with
beta, per-token entropy, policy / value clip fractions, response length); (g) gold scores of the
fresh samples before and after PPO; (h) RM score against gold score for both policies (the proxy
moves much further than the gold: over-optimisation starts here, lesson 19); (i) samples before and
after for the same prompts.

Exercises:
1. Set ``kl_ref_controller="fixed"`` and ``kl_ref_coef=0.05``: how far does the KL run, and what happens to
   the gold score and to the words the policy uses (seed 001: "固定beta会导致KL散度失控")?
2. Set ``update_epochs=1`` or ``8``: how do the clip fraction and the approx KL per update change?
3. Read the samples: which word does the PPO policy overuse, and does the gold function reward it as
   much as the reward model does?
"""
from __future__ import annotations

import textwrap

import numpy as np

from lessons._common import lesson_args, pyplot, save, save_figure
from minippo.rlhf.run.plots import draw_curves
from minippo.rlhf.ppo_config import PPOConfig
from minippo.studies.study import Study

SUMMARY = ("gold_mean", "gold_std", "rm_mean", "kl_mean", "kl_exact_mean", "length_mean", "ended_frac")


def lesson_config(quick: bool, seed: int) -> PPOConfig:
    """The main job's PPO defaults (quick: the CI config, 10 iterations)."""
    if quick:
        return PPOConfig.quick(seed=seed, iterations=10)
    return PPOConfig(seed=seed)


def run(quick: bool = False, seed: int = 0) -> dict:
    study = Study(quick=quick, seed=seed)          # the cached SFT policy and reward model, held-out prompts
    cfg = lesson_config(quick, seed)
    trained = study.run(cfg)
    before, after = study.reference, study.evaluate(trained["trainer"].actor)
    records, prompts = trained["records"], study.prompts
    return {"records": records, "config": cfg, "prompts": prompts,
            "before": before, "after": after, "summary": {"SFT": {k: before[k] for k in SUMMARY},
                                                          "PPO": {k: after[k] for k in SUMMARY}},
            "gold_gain_in_sft_std": (after["gold_mean"] - before["gold_mean"]) / max(before["gold_std"], 1e-12)}


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(3, 3, figsize=(16, 13))
    cfg, before, after = r["config"], r["before"], r["after"]
    draw_curves(axes.ravel()[:6], r["records"], kl_ref_target=cfg.kl_ref_target if cfg.kl_ref_controller == "adaptive" else None,
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
    lines = ["(i) the same prompts, before -> after (gold)"]
    for i in range(4):
        lines.append(textwrap.shorten(f"SFT {before['gold'][i]:+.2f}: {before['texts'][i]}", 70))
        lines.append(textwrap.shorten(f"PPO {after['gold'][i]:+.2f}: {after['texts'][i]}", 70))
        lines.append("")
    t.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=8.5, transform=t.transAxes)
    fig.tight_layout()
    save(fig, path)


def main(argv=None) -> dict:
    args = lesson_args(__doc__, argv)
    r = run(quick=args.quick, seed=args.seed)
    cfg, recs = r["config"], r["records"]
    print(f"PPO: {cfg.iterations} iterations x {cfg.batch_size} responses, {cfg.update_epochs} epochs of "
          f"{cfg.num_minibatches} minibatches, lr {cfg.lr:g} ({cfg.lr_schedule}), clip_eps {cfg.clip_eps}, "
          f"adaptive KL target {cfg.kl_ref_target:g} nats/response (beta {cfg.kl_ref_coef:g} -> {recs[-1]['kl_coef']:.3f}).")
    for k in ("objective/scores", "gold/score", "objective/kl", "policy/entropy_avg", "policy/clipfrac_avg",
              "val/explained_variance", "response/length"):
        print(f"  {k:<24s} first iteration {recs[0][k]:+8.3f}   last iteration {recs[-1][k]:+8.3f}")
    s = r["summary"]
    print(f"\nFresh samples for {len(r['prompts'])} held-out prompts:")
    print(f"  {'policy':<6} {'gold mean':>9} {'gold std':>8} {'RM mean':>8} {'KL k1':>6} {'KL exact':>8} {'length':>6}")
    for name, x in s.items():
        print(f"  {name:<6} {x['gold_mean']:+9.3f} {x['gold_std']:8.3f} {x['rm_mean']:+8.3f} {x['kl_mean']:6.2f} "
              f"{x['kl_exact_mean']:8.2f} {x['length_mean']:6.1f}")
    print(f"The gold score rose by {r['gold_gain_in_sft_std']:.2f} standard deviations of the SFT samples, the RM "
          f"score by {s['PPO']['rm_mean'] - s['SFT']['rm_mean']:.2f}: the proxy moves further than what it stands for.")
    print("\nSamples, same prompt before -> after:")
    for i in range(6):
        print(f"  SFT gold {r['before']['gold'][i]:+.2f} RM {r['before']['rm'][i]:+.2f} | {r['before']['texts'][i]}")
        print(f"  PPO gold {r['after']['gold'][i]:+.2f} RM {r['after']['rm'][i]:+.2f} | {r['after']['texts'][i]}")
    save_figure(plot, r, __name__, args)
    return r


if __name__ == "__main__":
    main()
