r"""Lesson 11 - reward_model: Bradley-Terry on preference pairs; accuracy; score vs gold; normalisation.

Pipeline step: stage 2 of RLHF: the reward model, trained on human comparisons, frozen afterwards, one
scalar score per response; and the normalisation of its scores, so that PPO sees rewards on a known scale.

Paper: the reward-model loss of InstructGPT (Ouyang et al. 2022, arXiv:2203.02155) eq. (1), a Bradley-Terry
model of which response the human prefers, here as the mean over the N labelled pairs:

$$
\mathrm{loss}(\theta) = -\frac{1}{N} \sum_{(x, y_w, y_l)} \log \sigma\left(r_\theta(x, y_w) - r_\theta(x, y_l)\right)
$$

with the hand-written gradient of `minippo.rlhf.reward_model`. After training, a gain and a bias make the
scores of fresh SFT samples mean 0, std 1 (lm-human-preferences, Ziegler et al. 2019): PPO's rewards then
have a known scale.

The data: for each prompt, K = 8 samples of the SFT policy; every pair of them is labelled by the simulated
human (`minippo.rlhf.data.gold`) with $P(a \text{ preferred}) = \sigma((gold_a - gold_b) / \tau)$: a noisy
human, so even a perfect model cannot agree with every label. The model: the SFT TinyGPT with a new scalar
head read at the last real token (the EOS).

What the lesson does: it reuses the main job's cached SFT policy and preference pairs (built once under
runs/cache by `minippo.rlhf.run.pipeline.prepare_stages`), trains the reward model with the main job's
configuration, and judges it on held-out prompts and on fresh SFT samples that are in no pair.

The figure: (a) the Bradley-Terry loss, training minibatches and held-out pairs, against chance ($\ln 2$);
(b) accuracy: training minibatches, held-out vs the sampled labels, held-out vs the gold order, and the best
accuracy the noisy labels allow; (c) RM score against gold score on fresh samples with the Pearson and
Spearman correlations; (d) the score distribution on fresh reference samples before (raw) and after
normalisation; (e) held-out accuracy by gold gap $|gold_a - gold_b|$: where the RM (and the human) err; (f)
calibration: the Bradley-Terry probability $\sigma(r_w - r_l)$ against how often the human agreed.

Exercises:
1. `RMConfig(label_temperature=0.3)` or `0`: how do the best possible accuracy (the dashed line in
   (b)) and the held-out accuracy move? Which of the two accuracies in (b) is the one PPO cares about?
2. `responses_per_prompt=2` (independent pairs) with `n_prompts=8000` samples the same number of
   responses: compare the accuracy and the training time with K = 8 (why does scoring each response once
   for K - 1 comparisons help?).
3. `n_train=200` or `init="fresh", n_layer=1, n_embd=32, n_head=2`: a weaker reward model. Keep it
   for lesson 19, where PPO over-optimises it.
4. The head bias `scalar_head.b` gets exactly zero gradient (test_reward_model checks it). Why, and what
   sets the offset of the scores in the end?
5. Implement it: `minippo exercise start bradley_terry`, then `minippo exercise check bradley_terry`.

Questions: Q29, Q30, Q28.
"""
from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

import numpy as np

from lessons._common import Verdict, by_key, identity, measurement, lesson_main, pyplot, save
from minippo.rlhf.run.pipeline import prepare_stages, stage_configs
from minippo.rlhf.data.preferences import PreferencePairs, sigmoid
from minippo.rlhf.rm_train import train_reward_model

GAP_BINS = (0.0, 0.1, 0.25, 0.5, 1.0, np.inf)           # |gold_a - gold_b| bins of panel (e)


def by_gap(heldout: PreferencePairs, r_chosen, r_rejected) -> dict:
    """Held-out accuracies in bins of the gold gap: RM vs labels, RM vs gold order, labels vs gold order."""
    gap = np.abs(heldout.gold_chosen - heldout.gold_rejected)
    gold_c_higher = heldout.gold_chosen > heldout.gold_rejected
    rm_c_higher = r_chosen > r_rejected
    out = {"n": [], "rm_vs_labels": [], "rm_vs_gold": [], "labels_vs_gold": []}
    for lo, hi in zip(GAP_BINS[:-1], GAP_BINS[1:]):
        sel = (gap >= lo) & (gap < hi) & (gap > 0)
        out["n"].append(int(sel.sum()))
        out["rm_vs_labels"].append(float(rm_c_higher[sel].mean()))
        out["rm_vs_gold"].append(float((rm_c_higher == gold_c_higher)[sel].mean()))
        out["labels_vs_gold"].append(float(gold_c_higher[sel].mean()))
    return out


def calibration(r_chosen, r_rejected, n_bins: int = 10) -> dict:
    """Predicted P(a > b) = sigmoid(r_a - r_b) for a random orientation of each pair, binned, against
    the fraction of the bin's pairs where the human chose a."""
    rng = np.random.default_rng(0)
    flip = rng.random(r_chosen.size) < 0.5                  # present half of the pairs as (rejected, chosen)
    p = sigmoid(np.where(flip, r_rejected - r_chosen, r_chosen - r_rejected))
    a_chosen = ~flip
    edges = np.linspace(0, 1, n_bins + 1)
    which = np.clip(np.digitize(p, edges) - 1, 0, n_bins - 1)
    pred = [float(p[which == b].mean()) if (which == b).any() else np.nan for b in range(n_bins)]
    freq = [float(a_chosen[which == b].mean()) if (which == b).any() else np.nan for b in range(n_bins)]
    return {"predicted": np.array(pred), "observed": np.array(freq), "count": np.bincount(which, minlength=n_bins)}


def run(quick: bool = False, seed: int = 0) -> dict:
    folder = prepare_stages(quick=quick, seed=seed, log=lambda *a: None)       # cached SFT + pairs
    _, rm_cfg, _ = stage_configs(quick, seed)
    pairs = PreferencePairs.load(folder / "rm" / "pairs.npz")
    with tempfile.TemporaryDirectory() as tmp:
        r = train_reward_model(rm_cfg, folder / "sft", Path(tmp) / "rm", progress=False, pairs=pairs)
    ev, held, tok = r["heldout_eval"], r["heldout"], r["tokenizer"]
    r["by_gap"] = by_gap(held, ev["r_chosen"], ev["r_rejected"])
    r["calibration"] = calibration(ev["r_chosen"], ev["r_rejected"])
    r["train_accuracy_last"] = float(np.mean([h["rm/accuracy"] for h in r["history"][-20:]]))
    # example held-out pairs: a clear one, one labelled against gold, and the RM's worst mistake vs gold
    gap = held.gold_chosen - held.gold_rejected
    margin = ev["r_chosen"] - ev["r_rejected"]
    picks = {"a clear pair": int(np.argmax(np.where(margin > 0, np.abs(gap), -np.inf))),
             "the label went against gold": int(np.argmin(np.abs(held.prob_chosen - 0.2))),
             "the RM's worst ordering": int(np.argmax(np.where(np.sign(margin) != np.sign(gap), np.abs(gap), -np.inf)))}
    r["examples"] = [{"kind": kind, "chosen": tok.decode(held.chosen[i]), "rejected": tok.decode(held.rejected[i]),
                      "gold_chosen": float(held.gold_chosen[i]), "gold_rejected": float(held.gold_rejected[i]),
                      "rm_chosen": float(r["model"].gain * ev["r_chosen"][i] + r["model"].bias),
                      "rm_rejected": float(r["model"].gain * ev["r_rejected"][i] + r["model"].bias),
                      "prob_chosen": float(held.prob_chosen[i])} for kind, i in picks.items()]
    return r


def _smooth(x, k: int) -> np.ndarray:
    """Moving average over k steps (the minibatch curves are noisy)."""
    k = max(1, min(k, len(x)))
    return np.convolve(x, np.ones(k) / k, mode="valid")


NORM_TOL = 1e-9      # the normalisation makes the fresh samples' mean 0 and std 1 up to float64 rounding


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r``."""
    g = r["by_gap"]
    acc, n = np.asarray(g["rm_vs_gold"], dtype=float), np.asarray(g["n"])
    ok = np.flatnonzero(n > 0)
    lo, hi = ok[0], ok[-1]                                   # the smallest and the largest gap bin with pairs
    se = float(np.hypot(*(np.sqrt(acc[i] * (1 - acc[i]) / n[i]) for i in (lo, hi))))
    fs = r["fresh_score"]
    return [
        identity("normalised", "After normalisation the reference samples' scores have mean 0 and std 1.",
                 abs(fs.mean()) <= NORM_TOL and abs(fs.std() - 1) <= NORM_TOL,
                 f"holds when |mean| and |std - 1| of the fresh samples' scores are <= {NORM_TOL:g}",
                 {"mean": float(fs.mean()), "std": float(fs.std())}),
        measurement("small_gaps_hardest", "The reward model's errors are on pairs with a small gold gap: it orders "
                    "pairs with a large gap more often right.", float(acc[hi] - acc[lo]), 0.0, ">",
                    f"accuracy (gap >= {GAP_BINS[hi]:g}) - accuracy (gap < {GAP_BINS[lo + 1]:g})", se=se,
                    noise="binomial pair-sampling", fmt="+.2f",
                    numbers={"pairs (small gap)": int(n[lo]), "pairs (large gap)": int(n[hi])}),
    ]


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps inside arrays or its config:
    the fresh samples' scores before (raw) and after normalisation, and the responses sampled per prompt."""
    return {"responses_per_prompt": r["config"].responses_per_prompt,
            "fresh_raw_mean": float(r["fresh_raw"].mean()), "fresh_raw_std": float(r["fresh_raw"].std()),
            "fresh_score_mean": float(r["fresh_score"].mean()), "fresh_score_std": float(r["fresh_score"].std())}


def narrative(r: dict) -> str:
    L = []
    c = r["config"]
    L.append(f"Preference data: {r['n_train_prompts']} training / {r['n_heldout_prompts']} held-out prompts x "
             f"K={c.responses_per_prompt} SFT samples -> {r['n_train']} / {r['n_heldout']} labelled pairs "
             f"(label temperature tau={c.label_temperature:g}).")
    L.append(f"The noisy human agrees with the gold order on {r['label_gold_agreement']:.1%} of the held-out pairs; "
             f"the best possible expected accuracy against the labels is {r['bayes_accuracy']:.3f}.")
    L.append(f"Reward model: {r['n_params']:,} parameters, {c.epochs} epochs of {c.batch_prompts} prompts per step, "
             f"lr {c.lr:g}, trained in {r['seconds_train']:.1f} s.")
    L.append(f"  held-out Bradley-Terry loss {r['heldout_loss']:.3f} (chance ln 2 = 0.693; at step 0: "
             f"{r['history'][0]['rm/heldout_loss']:.3f})")
    L.append(f"  held-out accuracy vs the sampled labels {r['heldout_accuracy']:.3f}   vs the gold order "
             f"{r['heldout_gold_accuracy']:.3f}   (last training minibatches {r['train_accuracy_last']:.3f})")
    g = r["by_gap"]
    L.append("  by gold gap: " + ", ".join(f"[{lo:g}, {hi:g}) {acc:.2f}" for lo, hi, acc in
                                            zip(GAP_BINS[:-1], GAP_BINS[1:], g["rm_vs_gold"])) + " (RM vs gold order)")
    L.append(f"On {len(r['fresh_score'])} fresh SFT samples (in no pair): RM score vs gold Pearson {r['pearson']:.3f}, "
             f"Spearman {r['spearman']:.3f}.")
    L.append(f"Normalisation: score = {r['gain']:.3f} * r {r['bias']:+.3f}; the fresh reference samples now have "
             f"mean {r['fresh_score'].mean():+.3f}, std {r['fresh_score'].std():.3f} (raw: mean "
             f"{r['fresh_raw'].mean():+.3f}, std {r['fresh_raw'].std():.3f}).")
    V = by_key(verdicts(r))
    L += [V["normalised"].render(), V["small_gaps_hardest"].render()]
    L.append("\nExample held-out pairs (chosen = the label; scores normalised):")
    for ex in r["examples"]:
        kind = ex["kind"]
        if kind == "the label went against gold" and not ex["gold_chosen"] < ex["gold_rejected"]:
            kind = "a pair labelled with probability near 0.2 (here the label agrees with gold)"
        if kind == "the RM's worst ordering" and not ((ex["rm_chosen"] - ex["rm_rejected"])
                                                      * (ex["gold_chosen"] - ex["gold_rejected"]) < 0):
            kind = "the RM's worst ordering: none, the RM orders every held-out pair as gold does"
        L.append(f"  {kind}: the human chose it with probability {ex['prob_chosen']:.3g}")
        for side in ("chosen", "rejected"):
            L.append(f"    {side:<8} gold {ex['gold_' + side]:+.2f}  RM {ex['rm_' + side]:+.2f} | "
                     + textwrap.shorten(ex[side], 110))
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(16, 9.5))
    (a, b, c), (d, e, f) = axes
    hist = r["history"]
    steps = np.array([h["step"] for h in hist[1:]])
    evals = [h for h in hist if "rm/heldout_loss" in h]
    k = max(1, len(steps) // 25)
    a.plot(steps[k - 1:], _smooth([h["rm/loss"] for h in hist[1:]], k), lw=1, alpha=0.8,
           label=f"training minibatches ({k}-step mean)")
    a.plot([h["step"] for h in evals], [h["rm/heldout_loss"] for h in evals], "o-", label="held-out pairs")
    a.axhline(np.log(2), color="gray", ls=":", label="chance, ln 2")
    a.set(xlabel="optimizer step", ylabel="Bradley-Terry loss",
          title="(a) -log sigmoid(r_w - r_l), InstructGPT eq. (1)")
    a.legend()
    b.plot(steps[k - 1:], _smooth([h["rm/accuracy"] for h in hist[1:]], k), lw=1, alpha=0.8,
           label="training minibatches")
    b.plot([h["step"] for h in evals], [h["rm/heldout_accuracy"] for h in evals], "o-", label="held-out, vs labels")
    b.plot([h["step"] for h in evals], [h["rm/heldout_gold_accuracy"] for h in evals], "s-",
           label="held-out, vs gold order")
    b.axhline(r["bayes_accuracy"], color="k", ls="--", lw=1,
              label=f"best possible vs labels ({r['bayes_accuracy']:.3f})")
    b.axhline(0.5, color="gray", ls=":")
    b.set(xlabel="optimizer step", ylabel="pairwise accuracy", ylim=(0.45, 1.0),
          title="(b) accuracy: fraction of pairs with r_chosen > r_rejected")
    b.legend(loc="lower right")
    fresh = r["fresh"]
    c.scatter(fresh.gold, r["fresh_score"], s=9, alpha=0.5)
    c.set(xlabel="gold score (simulated human)", ylabel="RM score (normalised)",
          title=f"(c) {len(fresh.gold)} fresh SFT samples: Pearson {r['pearson']:.2f}, Spearman {r['spearman']:.2f}")
    raw, score = r["fresh_raw"], r["fresh_score"]
    lo, hi = min(raw.min(), score.min()), max(raw.max(), score.max())
    bins = np.linspace(lo, hi, 40)
    d.hist(raw, bins=bins, alpha=0.6, label=f"raw r: mean {raw.mean():+.2f}, std {raw.std():.2f}")
    d.hist(score, bins=bins, alpha=0.6, label=f"gain r + bias: mean {score.mean():+.2f}, std {score.std():.2f}")
    d.set(xlabel="score of a fresh reference (SFT) sample", ylabel="samples",
          title=f"(d) normalisation: gain {r['gain']:.3f}, bias {r['bias']:+.3f}")
    d.legend(loc="upper left")
    g = r["by_gap"]
    x = np.arange(len(g["n"]))
    w = 0.27
    e.bar(x - w, g["rm_vs_gold"], w, label="RM agrees with gold order")
    e.bar(x, g["labels_vs_gold"], w, label="label agrees with gold order")
    e.bar(x + w, g["rm_vs_labels"], w, label="RM agrees with label")
    names = [f"{lo:g}-{hi:g}" if np.isfinite(hi) else f">{lo:g}" for lo, hi in zip(GAP_BINS[:-1], GAP_BINS[1:])]
    e.set_xticks(x, [f"{nm}\n(n={n})" for nm, n in zip(names, g["n"])])
    e.set(xlabel="|gold_w - gold_l| of the held-out pair", ylabel="fraction", ylim=(0.3, 1.22),
          yticks=np.arange(0.3, 1.01, 0.1), title="(e) where the errors are" + (
              ": small gold gaps" if by_key(verdicts(r))["small_gaps_hardest"].holds else ""))
    e.axhline(0.5, color="gray", ls=":")
    e.legend(loc="upper left", ncol=2, fontsize=8.5)
    cal = r["calibration"]
    ok = cal["count"] > 0
    f.plot([0, 1], [0, 1], color="gray", ls=":", label="perfect calibration")
    f.plot(cal["predicted"][ok], cal["observed"][ok], "o-", label="held-out pairs, 10 bins")
    f.set(xlabel="Bradley-Terry P(a > b) = sigmoid(r_a - r_b)", ylabel="fraction where the human chose a",
          title="(f) calibration of the preference probability")
    f.legend(loc="upper left")
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
