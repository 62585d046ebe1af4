r"""Lesson 19 - overoptimization: the proxy (RM) keeps rising, the gold peaks and falls (Gao et al. 2022).

Pipeline step: stage 3 of RLHF pushed too far. Optimising a reward model too hard leads to reward hacking;
the reference model and its KL penalty are there to keep the actor close to the SFT model and limit it. This
lesson measures what happens without that brake.

Paper: the setup of Gao, Schulman & Hilton 2022 ("Scaling Laws for Reward Model Overoptimization",
arXiv:2210.10760, Fig. 1) in miniature: the gold score (`minippo.rlhf.data.gold`, the simulated human) labels
the preference pairs; proxy reward models are trained on 25, 100, 400 and all 1800 training prompts of the
main job's pairs (nested subsets, `RMConfig.n_train`; cached under the study's folder); the SFT policy is then
optimised against each proxy in two ways, and both scores are followed against
$d = \sqrt{\mathrm{KL}(\pi \| \pi_{init})}$ (nats per response):

- RL: PPO (eq. (9) of Schulman et al. 2017 with eq. (7)'s clipped surrogate) with NO KL penalty
  (`kl_ref_controller="fixed", kl_ref_coef=0`, as in Gao et al.'s main runs), a constant, higher learning
  rate, and checkpoints judged every 2 iterations on fixed held-out prompts (exact KL to the reference);
- best-of-n (`minippo.studies.best_of_n`): N candidates per prompt sampled once, the best by the proxy for
  n = 1, 2, 4, ..., N (the unbiased all-subsets estimator), at $\mathrm{KL}_{bon} = \log n - (n - 1)/n$.

Gao et al.'s functional forms are fitted to the gold gains $R(d) = gold(d) - gold(0)$
(`minippo.studies.overoptimization`):

$$
R_{bon}(d) = d\,(\alpha_{bon} - \beta_{bon}\, d), \qquad R_{RL}(d) = d\,(\alpha_{RL} - \beta_{RL} \log d)
$$

The figure (the committed one comes from --full: 3 PPO seeds per reward model averaged at each checkpoint, 40
iterations, 128 evaluation prompts, best-of-1024 on 64 prompts): (a) best-of-n, proxy (dashed) and gold
(solid) against $\sqrt{\mathrm{KL}_{bon}}$, one colour per reward model, the gold peak starred, best-of-n
against the gold itself (a perfect reward model) in black; (b) the same for PPO; (c) the gold at the peak and
at the end of the optimisation against the reward model's training pairs; (d) where the peak is; (e) the mean
gold penalty terms of the samples: what the policy learned to exploit; (f) samples from the gold peak and
from the collapse.

Exercises:
1. Put a KL penalty back (`kl_ref_coef=0.05` or the adaptive controller): does it move the gold-vs-sqrt(KL)
   curve up, or only stop the run earlier on the same curve (Gao et al. found the latter)?
2. A smaller reward model instead of less data: `{"init": "fresh", "n_layer": 1, "n_embd": 16, "n_head": 2}`
   in `RM_VARIANTS`. Is it the parameters or the pairs that decide how early the gold turns?
3. The KL of best-of-n is an upper bound when the policy repeats itself (Beirami et al. 2024). Count the
   distinct texts among the N candidates of a prompt: how many distinct responses does best-of-1024 choose
   from, and what does that say about the x-axis of panel (a)?

Questions: Q60, Q32.
"""
from __future__ import annotations

import textwrap
import time

import numpy as np

from lessons._common import (Verdict, all_of, any_of, by_key, comparison, identity, lesson_main,
                             measurement, pyplot, save, time_line)
from minippo.studies.best_of_n import sample_candidates, select_best
from minippo.rlhf.data.gold import gold_profile
from minippo.rlhf.generate import show_sample
from minippo.studies.overoptimization import (KLCheckpoints, fit_gold_curve, gold_peak,
                                           predict_gold_gain, rm_variants)
from minippo.studies.study import Study

# reward models: name -> RMConfig overrides (nested subsets of the main job's training prompts)
RM_VARIANTS = {"25 prompts": {"n_train": 25}, "100 prompts": {"n_train": 100}, "400 prompts": {"n_train": 400},
               "1800 prompts": {}}
QUICK_VARIANTS = {"50 prompts": {"n_train": 50}, "340 prompts": {}}
# the size of each version: PPO run, checkpoints, best-of-n
SIZES = {
    "quick": dict(iterations=6, batch_size=16, minibatch_size=8, every=2, seeds=(0,), n_eval=16,
                  bon_prompts=8, bon_n=16),
    "default": dict(iterations=30, batch_size=32, minibatch_size=8, every=2, seeds=(0,), n_eval=64,
                    bon_prompts=32, bon_n=256),
    "full": dict(iterations=40, batch_size=32, minibatch_size=8, every=2, seeds=(0, 1, 2), n_eval=128,
                 bon_prompts=64, bon_n=1024),
}
LR = 3e-4                       # constant: 3x the main job's peak, no decay, no KL penalty
PENALTY_TERMS = ("repeat", "overuse", "adj_chain", "word_order", "unknown", "run_on", "no_verb", "no_period",
                 "after_period", "short", "long")


def mean_points(runs: list[list[dict]]) -> list[dict]:
    """Average the checkpoints of several seeds index by index (same iterations): sqrt_kl, rm, gold, ...;
    the texts of the first seed are kept. The standard errors become the spread over seeds / sqrt(seeds)
    when there are several seeds."""
    out = []
    for pts in zip(*runs):
        p = dict(pts[0])
        for k in ("kl", "sqrt_kl", "rm", "gold", "length"):
            p[k] = float(np.mean([q[k] for q in pts]))
        if len(pts) > 1:
            for k in ("rm", "gold"):
                p[k + "_sem"] = float(np.std([q[k] for q in pts], ddof=1) / np.sqrt(len(pts)))
        out.append(p)
    return out


def rl_summary(points: list[dict]) -> dict:
    """Peak, end and the Gao fit of one RL curve."""
    d = np.array([p["sqrt_kl"] for p in points])
    gold = np.array([p["gold"] for p in points])
    k = gold_peak(points)
    return {"d": d, "gold": gold, "rm": np.array([p["rm"] for p in points]), "peak": k,
            "fit": fit_gold_curve(d, gold - gold[0], "rl"), "gold_sem": np.array([p["gold_sem"] for p in points]),
            "rm_sem": np.array([p["rm_sem"] for p in points])}


def bon_summary(r: dict) -> dict:
    """Peak, end and the Gao fit of one best-of-n curve."""
    k = int(np.argmax(r["gold"]))
    return {"d": r["sqrt_kl"], "gold": r["gold"], "rm": r["rm"], "peak": k, "ns": r["ns"],
            "fit": fit_gold_curve(r["sqrt_kl"], r["gold"] - r["gold"][0], "bon"), "gold_sem": r["gold_sem"],
            "rm_sem": r["rm_sem"]}


def run(quick: bool = False, seed: int = 0, full: bool = False, log=lambda *a: None) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    size = SIZES["quick" if quick else "full" if full else "default"]
    study = Study(quick=quick, seed=0, n_eval=size["n_eval"])       # stage seed 0 (the shared caches)
    rms = rm_variants(study, QUICK_VARIANTS if quick else RM_VARIANTS, log=log)

    # best-of-n: one set of candidates, judged by every reward model (and by the gold itself)
    cands = sample_candidates(study.sft, study.tokenizer, study.prompts[:size["bon_prompts"]], size["bon_n"],
                              np.random.default_rng([seed, 19]), max_new_tokens=study.config().max_new_tokens)
    bon = {name: select_best(cands, v["model"]) for name, v in rms.items()}
    for b in bon.values():          # did the best of all N candidates end with an EOS? (one per prompt)
        best = b["selected"][:, list(b["ns"]).index(size["bon_n"])]                      # (P,)
        b["selected_ended"] = cands.ended[np.arange(len(best)), best]
    bon_gold = select_best(cands, "gold")
    log(f"  best-of-n: {size['bon_prompts']} prompts x {size['bon_n']} candidates")

    # RL: PPO without a KL penalty against every reward model, checkpoints judged on fixed prompts
    rl = {}
    for name, v in rms.items():
        runs = []
        for s in size["seeds"]:
            cfg = study.config(seed=seed + s, kl_ref_controller="fixed", kl_ref_coef=0.0, lr=LR, lr_schedule="constant",
                               iterations=size["iterations"], batch_size=size["batch_size"],
                               minibatch_size=size["minibatch_size"])
            cb = KLCheckpoints(study, v["model"], every=size["every"])
            study.run(cfg, reward_model=v["model"], callback=cb)
            runs.append(cb.points)
        rl[name] = mean_points(runs)
        log(f"  PPO against the RM on {name}: {len(runs)} seed(s), gold {rl[name][0]['gold']:+.2f} -> "
            f"peak {max(p['gold'] for p in rl[name]):+.2f} -> {rl[name][-1]['gold']:+.2f}")

    summary = {name: {"pairs": v["summary"].get("n_train", 0), "accuracy": v["summary"].get("heldout_accuracy"),
                      "pearson": v["summary"].get("pearson"), "n_params": v["n_params"],
                      "bon": bon_summary(bon[name]), "rl": rl_summary(rl[name])} for name, v in rms.items()}
    # what was exploited: SFT, and the strongest RM's RL peak and end; the weakest RM's best-of-N
    strong, weak = list(rms)[-1], list(rms)[0]
    pts = rl[strong]
    k = summary[strong]["rl"]["peak"]
    profiles = {"SFT": gold_profile(pts[0]["eval"]["texts"]),
                f"PPO peak ({strong})": gold_profile(pts[k]["eval"]["texts"]),
                f"PPO end ({strong})": gold_profile(pts[-1]["eval"]["texts"]),
                f"PPO end ({weak})": gold_profile(rl[weak][-1]["eval"]["texts"]),
                f"best-of-{size['bon_n']} ({weak})": gold_profile(bon[weak]["selected_texts"][size["bon_n"]])}
    return {"size": size, "quick": quick, "full": full, "rms": {n: {k: v[k] for k in ("summary", "n_params", "config")}
                                                               for n, v in rms.items()},
            "bon": bon, "bon_gold": bon_gold, "rl": rl, "summary": summary, "profiles": profiles,
            "strong": strong, "weak": weak, "candidates_prompts": cands.prompts,
            "time": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}


# ----------------------------------------------------------------------------------------------
# the narrative
# ----------------------------------------------------------------------------------------------

def narrative(r: dict) -> str:
    s, N = r["summary"], r["size"]["bon_n"]
    lines = ["Reward models (proxies), all normalised to mean 0, std 1 on SFT samples:"]
    for name, x in s.items():
        lines.append(f"  {name:<13s} {x['pairs']:6d} training pairs, {x['n_params']:,} parameters, held-out accuracy "
                     f"{x['accuracy']:.3f}, score-gold Pearson {x['pearson']:.3f}")
    for method, title in (("bon", f"Best-of-n, n = 1 .. {N}"), ("rl", "PPO without KL penalty")):
        lines.append(f"\n{title}: gold at d = 0 -> at the peak (where) -> at the end; proxy at the peak -> at the end; "
                     "Gao fit's peak d*")
        for name, x in s.items():
            m = x[method]
            k = m["peak"]
            where = f"n={m['ns'][k]}, d={m['d'][k]:.2f}" if method == "bon" else f"d={m['d'][k]:.2f}"
            lines.append(f"  RM {name:<13s} gold {m['gold'][0]:+.2f} -> {m['gold'][k]:+.2f} ({where}) -> "
                         f"{m['gold'][-1]:+.2f} (d={m['d'][-1]:.2f});  proxy {m['rm'][k]:+.2f} -> {m['rm'][-1]:+.2f};  "
                         f"fit d* {m['fit']['d_peak']:.2f}")
    g = r["bon_gold"]
    V = by_key(verdicts(r))
    lines.append(f"  best-of-n against the gold itself: {g['gold'][0]:+.2f} -> {g['gold'][-1]:+.2f} at n = {N}.")
    lines.append(V["bon_gold_monotone"].render("  "))
    lines += ["", "Which claims hold here:"] + claims(r)
    kl_end = max(x["rl"]["d"][-1] for x in s.values()) ** 2
    strong, prof = r["strong"], r["profiles"]
    names = list(s)
    rl_peaks = [_point(s[n]["rl"], s[n]["rl"]["peak"]) for n in names]
    lines += ["", "Reading the numbers:",
              f"- Without a KL penalty nothing holds PPO near the reference (beta = 0): the KL reaches {kl_end:.0f} "
              "nats per response.",
              "- Best-of-n only re-ranks SFT samples, the distribution every RM was trained on.",
              V["bon_follows_accuracy"].render("  "),
              f"- PPO against the RM on {strong}: the gold penalty per sample {prof['SFT']['penalty']:.2f} (SFT) -> "
              f"{prof[f'PPO end ({strong})']['penalty']:.2f} (end).",
              V["ppo_drifts_to_penalised"].render("  "),
              "- PPO's peak heights, RM by RM: " + ", ".join(f"{g:+.2f}+-{e:.2f}" for g, e in rl_peaks)
              + " (prompts with one seed, seeds with --full)."]
    lines.append("\nWhat the policy learned to exploit (mean gold penalty per sample):")
    for lab, p in r["profiles"].items():
        top = sorted(((p[k], k) for k in PENALTY_TERMS), reverse=True)[:3]
        lines.append(f"  {lab:<28s} gold {p['gold']:+.2f} sentiment {p['sentiment']:+.2f} penalty {p['penalty']:.2f}: "
                     + ", ".join(f"{k} {v:.2f} (fires on {100 * p['frac_' + k]:.0f} %)" for v, k in top if v > 0))
    pts, k = r["rl"][strong], r["summary"][strong]["rl"]["peak"]
    lines.append(f"\nSamples, RM on {strong}: SFT / PPO at the gold peak / PPO at the end  [gold, RM]")
    for i in range(3):
        for lab, p in (("SFT ", pts[0]), ("peak", pts[k]), ("end ", pts[-1])):
            lines.append(f"  {lab} [{p['eval']['gold'][i]:+.2f}, {p['eval']['rm'][i]:+.2f}] "
                         f"{show_sample(p['eval']['texts'][i], p['eval']['ended'][i])}")
    lines.append(time_line(r))
    return "\n".join(lines)


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps in curves: per reward model and
    method (``bon``, ``rl``) the gold at d = 0, at its peak and at the end, the proxy at the gold's peak and at
    the end, sqrt(KL) there; the largest KL PPO reached; best-of-n against the gold itself."""
    s = r["summary"]

    def points(m: dict) -> dict:
        k = m["peak"]
        return {"gold_start": float(m["gold"][0]), "gold_peak": float(m["gold"][k]), "gold_end": float(m["gold"][-1]),
                "rm_peak": float(m["rm"][k]), "rm_end": float(m["rm"][-1]), "d_peak": float(m["d"][k]),
                "d_end": float(m["d"][-1])}

    out = {name: {method: points(x[method]) for method in ("bon", "rl")} for name, x in s.items()}
    g = r["bon_gold"]["gold"]
    return {"curves": out, "rl_kl_end_max": max(float(x["rl"]["d"][-1]) ** 2 for x in s.values()),
            "bon_gold_self": {"start": float(g[0]), "end": float(g[-1])}}


def _point(m: dict, k: int) -> tuple[float, float]:
    """(gold, its standard error) of a curve at checkpoint ``k``."""
    return float(m["gold"][k]), float(m["gold_sem"][k])


def _diff(a: tuple, b: tuple) -> dict:
    """b - a of two (value, s.e.) points, the s.e. of the difference as if independent (conservative: the points
    share their prompts)."""
    return {"diff": b[0] - a[0], "se": float(np.hypot(a[1], b[1]))}


def _cmp(a: tuple, b: tuple, key: str, expect: int, labels: tuple, quantity: str) -> Verdict:
    """b vs a, two (value, s.e.) points (:func:`_diff`), as a comparison part."""
    return comparison(key, key, _diff(a, b), expect=expect, labels=labels, quantity=quantity, fmt="+.2f",
                      noise="prompt-sampling", values=(a[0], b[0]))


def _curve_label(n: str, m: str) -> str:
    return f"{'best-of-n' if m == 'bon' else 'PPO'}, RM on {n}"


def verdicts(r: dict) -> list[Verdict]:
    """Common claims and Gao et al.'s, each checked on the measured numbers with their standard errors (sampling
    noise over the evaluation prompts; the points share their prompts, so the s.e. of a difference taken as if
    independent is conservative)."""
    s = r["summary"]
    curves = [(n, m, s[n][m]) for n in s for m in ("bon", "rl")]
    rising = []
    for n, m, x in curves:
        pt = lambda k: (float(x["rm"][k]), float(x["rm_sem"][k]))          # noqa: E731
        rising.append(_cmp(pt(0), pt(-1), f"{_curve_label(n, m)}: start -> end", +1, ("start", "end"), "proxy"))
        if x["peak"] < len(x["rm"]) - 1:
            rising.append(_cmp(pt(x["peak"]), pt(-1), f"{_curve_label(n, m)}: gold peak -> end", +1,
                               ("at the gold peak", "end"), "proxy"))
    out = [all_of("proxy_keeps_rising", "The proxy (the RM's own score) keeps rising past the gold peak, for every RM "
                  "and both methods (end above start, and above its value at the gold peak).", rising)]
    falls = [all_of(_curve_label(n, m), "", [
        _cmp(_point(x, 0), _point(x, x["peak"]), "rises", +1, ("start", "gold peak"), "gold"),
        _cmp(_point(x, x["peak"]), _point(x, -1), "falls", -1, ("gold peak", "end"), "gold")]) for n, m, x in curves]
    out.append(any_of("gold_rises_and_falls", "A common claim: over-optimising the reward model is reward hacking: the "
                      "gold rises, peaks and falls (in at least one curve; the peak is the best checkpoint, so this "
                      "rule can hold or be not shown, never refute the claim).", falls))
    names = list(s)
    for method, title in (("bon", "best-of-n"), ("rl", "PPO")):
        peaks = [_point(s[n][method], s[n][method]["peak"]) for n in names]
        ends = [_point(s[n][method], -1) for n in names]
        out.append(all_of(f"more_data_higher_peak[{method}]", f"{title}: a higher gold peak with more RM data (Gao et "
                          "al.), RM after RM in order of training pairs.",
                          [_cmp(a, b, f"{na} -> {nb}", +1, (na, nb), "gold peak")
                           for (a, na), (b, nb) in zip(zip(peaks, names), zip(peaks[1:], names[1:]))]))
        out.append(all_of(f"more_data_shallower_fall[{method}]", f"{title}: a shallower fall with more RM data: a "
                          "higher gold at the end, RM after RM.",
                          [_cmp(a, b, f"{na} -> {nb}", +1, (na, nb), "gold at the end")
                           for (a, na), (b, nb) in zip(zip(ends, names), zip(ends[1:], names[1:]))]))
    strong = r["strong"]
    b, p = s[strong]["bon"], s[strong]["rl"]
    d_b = b["d"][-1]
    at = (float(np.interp(d_b, p["d"], p["gold"])), float(np.interp(d_b, p["d"], p["gold_sem"])))
    out.append(comparison("bon_beats_ppo_at_kl", f"At the same KL, best-of-n beats PPO (Gao et al.: RL spends much "
                          f"more KL for the same gold): RM on {strong}, at d = {d_b:.2f}, best-of-{r['size']['bon_n']} "
                          "against PPO interpolated.", _diff(at, _point(b, -1)), expect=+1,
                          labels=("PPO", f"best-of-{r['size']['bon_n']}"), quantity="gold", fmt="+.2f",
                          noise="prompt-sampling", values=(at[0], float(b["gold"][-1]))))
    g = r["bon_gold"]
    out.append(identity("bon_gold_monotone", "Best-of-n against the gold itself never falls as n grows (the best of "
                        "more candidates cannot be worse: no proxy, no over-optimisation).",
                        bool(np.all(np.diff(g["gold"]) >= 0)), "holds when the gold of best-of-n is non-decreasing "
                        "in n", {"gold at n = 1": float(g["gold"][0]), f"gold at n = {r['size']['bon_n']}": float(g["gold"][-1])}))
    by_acc = sorted(names, key=lambda n: s[n]["accuracy"])        # each peak judged within its noise
    bon_peak = {n: _point(s[n]["bon"], s[n]["bon"]["peak"]) for n in names}
    out.append(all_of("bon_follows_accuracy", "Best-of-n's gold peak follows the RM's held-out accuracy (the "
                      "better-ranked RM has the higher peak), RM after RM in order of accuracy.",
                      [_cmp(bon_peak[a], bon_peak[b], f"{a} -> {b}", +1, (a, b), "gold peak")
                       for a, b in zip(by_acc, by_acc[1:])]))
    prof = r["profiles"]
    out.append(measurement("ppo_drifts_to_penalised", f"PPO against the RM on {strong} drifts into text no preference "
                           "pair contained: the gold's penalty per sample rises from the SFT policy's.",
                           prof[f"PPO end ({strong})"]["penalty"] - prof["SFT"]["penalty"], 0.0, ">",
                           "penalty at the end - SFT penalty", fmt="+.2f"))
    return out


def claims(r: dict) -> list[str]:
    """The claims' verdicts with the numbers the lesson prints beside them."""
    V = by_key(verdicts(r))
    s = r["summary"]
    out = [V["proxy_keeps_rising"].render("  "), V["gold_rises_and_falls"].render("  ")]
    for method, title in (("bon", "best-of-n"), ("rl", "PPO")):
        peaks = [_point(s[n][method], s[n][method]["peak"]) for n in s]
        ends = [_point(s[n][method], -1) for n in s]
        d_peaks = [s[n][method]["d"][s[n][method]["peak"]] for n in s]
        out.append(f"- {title}, RMs in order of training pairs: gold peaks " + ", ".join(f"{p:+.2f}+-{e:.2f}"
                                                                                       for p, e in peaks)
                   + "; gold at the end " + ", ".join(f"{p:+.2f}+-{e:.2f}" for p, e in ends)
                   + "; the peak at d = " + ", ".join(f"{d:.2f}" for d in d_peaks) + ".")
        out += [V[f"more_data_higher_peak[{method}]"].render("  "), V[f"more_data_shallower_fall[{method}]"].render("  ")]
    out.append(V["bon_beats_ppo_at_kl"].render("  "))
    return out


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


# ----------------------------------------------------------------------------------------------
# the figure
# ----------------------------------------------------------------------------------------------

def _colors(names):
    import matplotlib
    cmap = matplotlib.colormaps["viridis"]
    return {n: cmap(0.85 * i / max(len(names) - 1, 1)) for i, n in enumerate(names)}


def _curves(ax, r, method: str, colors):
    for name, s in r["summary"].items():
        m = s[method]
        c = colors[name]
        ax.plot(m["d"], m["rm"], "--", color=c, lw=1.3)
        ax.errorbar(m["d"], m["gold"], yerr=m["gold_sem"], color=c, lw=1.8, marker=".", ms=4, capsize=0,
                    elinewidth=0.6, label=f"RM {name} ({s['pairs']} pairs, acc {s['accuracy']:.2f})")
        k = m["peak"]
        ax.plot(m["d"][k], m["gold"][k], "*", color=c, ms=15, mec="black", mew=0.8, zorder=5)
        dd = np.linspace(0, m["d"].max(), 100)
        ax.plot(dd, m["gold"][0] + predict_gold_gain(m["fit"], dd), ":", color=c, lw=1.0)
    ax.axhline(r["summary"][r["strong"]][method]["gold"][0], color="grey", lw=0.8)      # the SFT policy (d = 0)
    ax.set_xlabel("d = sqrt(KL(pi || pi_init))   (KL in nats per response)")
    ax.set_ylabel("score (gold solid, proxy RM dashed)")


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig = plt.figure(figsize=(18, 16))
    gs = fig.add_gridspec(3, 6, height_ratios=[1.2, 0.85, 0.55])
    a, b = fig.add_subplot(gs[0, :3]), fig.add_subplot(gs[0, 3:])
    c, c2, e = fig.add_subplot(gs[1, :2]), fig.add_subplot(gs[1, 2:4]), fig.add_subplot(gs[1, 4:])
    t = fig.add_subplot(gs[2, :])
    names = list(r["summary"])
    colors = _colors(names)
    N = r["size"]["bon_n"]

    _curves(a, r, "bon", colors)
    g = r["bon_gold"]
    a.plot(g["sqrt_kl"], g["gold"], "-", color="black", lw=1.5, marker=".", label="best-of-n against the gold itself")
    for k in (len(g["ns"]) // 2, len(g["ns"]) - 1):
        a.annotate(f"n={g['ns'][k]}", (g["sqrt_kl"][k], g["gold"][k]), textcoords="offset points", xytext=(-8, 8),
                   fontsize=8)
    a.set_title(f"(a) best-of-n, n = 1 .. {N} ({r['size']['bon_prompts']} prompts): "
                "KL_bon = log n - (n-1)/n\n(star: gold peak; dotted: Gao fit d(alpha - beta d))")
    a.legend(loc="upper left", fontsize=8)

    _curves(b, r, "rl", colors)
    b.axvspan(0, g["sqrt_kl"][-1], color="grey", alpha=0.12)
    b.text(g["sqrt_kl"][-1] / 2, 0.98, f"range of\nbest-of-{N}\nin (a)", transform=b.get_xaxis_transform(),
           ha="center", va="top", fontsize=8, color="0.3")
    seeds = len(r["size"]["seeds"])
    b.set_title(f"(b) PPO without KL penalty, lr {LR:g}, {r['size']['iterations']} iterations "
                f"({seeds} seed{'s' if seeds > 1 else ''})\n(star: gold peak; dotted: Gao fit d(alpha - beta log d))")
    from matplotlib.lines import Line2D
    b.legend(handles=[Line2D([], [], color="0.3", label="gold score (colours as in (a))"),
                      Line2D([], [], color="0.3", ls="--", label="proxy: the RM's own score")],
             loc="lower left", fontsize=8)

    pairs = np.array([s["pairs"] for s in r["summary"].values()], dtype=float)
    for method, mk in (("bon", "o"), ("rl", "s")):
        label = f"best-of-{N}" if method == "bon" else "PPO"
        peak = [s[method]["gold"][s[method]["peak"]] for s in r["summary"].values()]
        end = [s[method]["gold"][-1] for s in r["summary"].values()]
        c.plot(pairs, peak, "-" + mk, color="tab:green" if method == "bon" else "tab:purple",
               label=f"{label}: gold at the peak")
        c.plot(pairs, end, "--" + mk, mfc="none", color="tab:green" if method == "bon" else "tab:purple",
               label=f"{label}: gold at n = {N}" if method == "bon" else f"{label}: gold at the last checkpoint")
    c.axhline(r["summary"][r["strong"]]["rl"]["gold"][0], color="grey", lw=0.8, label="SFT policy")
    c.set_xscale("log")
    c.set_xlabel("reward-model training pairs (log scale)")
    c.set_ylabel("mean gold score")
    c.set_title("(c) gold at the peak and at the end vs RM data")
    c.legend(fontsize=8, loc="best")           # where the lines are not (they move with the seed)
    for method, col in (("bon", "tab:green"), ("rl", "tab:purple")):
        label = f"best-of-{N}" if method == "bon" else "PPO"
        c2.plot(pairs, [s[method]["d"][s[method]["peak"]] for s in r["summary"].values()], "-o", color=col,
                label=f"{label}: measured peak")
        c2.plot(pairs, [min(s[method]["fit"]["d_peak"], 20) for s in r["summary"].values()], ":x", color=col,
                label=f"{label}: peak of the Gao fit")
    c2.set_xscale("log")
    c2.set_xlabel("reward-model training pairs (log scale)")
    c2.set_ylabel("d = sqrt(KL) at the gold peak")
    c2.set_title("(d) where the gold peaks")
    lo, hi = c2.get_ylim()
    c2.set_ylim(lo, hi + 0.45 * (hi - lo))                 # room for the legend above the lines
    c2.legend(fontsize=8, loc="upper center", ncol=2)

    prof = r["profiles"]
    terms = [k for k in PENALTY_TERMS if max(p[k] for p in prof.values()) >= 0.02]
    width = 0.8 / len(prof)
    x = np.arange(len(terms))
    pcol = ["0.6", "tab:blue", "tab:red", "tab:orange", "tab:green"]
    for i, (lab, p) in enumerate(prof.items()):
        e.bar(x + (i - (len(prof) - 1) / 2) * width, [p[k] for k in terms], width,
              label=f"{lab}: gold {p['gold']:+.2f}, sentiment {p['sentiment']:+.2f}", color=pcol[i % len(pcol)])
    e.set_xticks(x, terms, rotation=20)
    e.set_ylabel("mean penalty per sample (gold units)")
    e.set_title("(e) what was exploited: mean gold penalty terms")
    e.legend(fontsize=8, loc="upper left")

    t.axis("off")
    t.grid(False)
    strong, weak = r["strong"], r["weak"]
    pts = r["rl"][strong]
    k = r["summary"][strong]["rl"]["peak"]
    rows = [f"(f) the same prompts: SFT -> PPO at the gold peak (d = {pts[k]['sqrt_kl']:.1f}) -> the end "
            f"(d = {pts[-1]['sqrt_kl']:.1f}), RM on {strong}; and the best of {N} by the RM on {weak}  [gold, RM]"]
    for i in range(3):
        for lab, p in (("SFT ", pts[0]), ("peak", pts[k]), ("end ", pts[-1])):
            ev = p["eval"]
            end = "" if ev["ended"][i] else " [no EOS]"             # stopped at max_new_tokens
            rows.append(textwrap.shorten(f"{lab} [{ev['gold'][i]:+.2f}, {ev['rm'][i]:+.2f}] {ev['texts'][i]}",
                                         150 - len(end), placeholder=" ...") + end)
        rows.append("")
    bw = r["bon"][weak]
    col = list(bw["ns"]).index(N)
    for i in range(2):
        j = int(bw["selected"][i, col])
        end = "" if bw["selected_ended"][i] else " [no EOS]"
        rows.append(textwrap.shorten(f"best-of-{N}, RM on {weak} [{r['bon'][weak]['proxy'][i, j]:+.2f} RM]: "
                                     f"{bw['selected_texts'][N][i]}", 150 - len(end), placeholder=" ...") + end)
    t.text(0.0, 1.0, "\n".join(rows), va="top", ha="left", family="monospace", fontsize=8.8, transform=t.transAxes)
    fig.tight_layout()
    save(fig, path)


if __name__ == "__main__":
    main()
