r"""Lesson 04 - the clipped objective: PPO paper Figure 1, the six clip cases and where the gradient is exactly zero.

Pipeline step: the clipped objective, the loss every PPO update minimises, token by token. Once the clipped
term is selected it is a constant in $\theta$, so that token gets no update: a good action ($A > 0$) whose
ratio is above $1 + \epsilon$ and a bad action ($A < 0$) whose ratio is below $1 - \epsilon$.
PPO limits both "raise a good action too much" and "lower a bad action too much", and nothing else.

Paper: Schulman et al. 2017 (arXiv:1707.06347), with $r_t = \exp(\log\pi_\theta - \log\pi_{\theta_{old}})$,
eq. (7):

$$
L^{CLIP}(\theta) = \hat{\mathbb{E}}_t\left[\min\left(r_t(\theta) \hat A_t,\ \mathrm{clip}(r_t(\theta), 1 - \epsilon, 1 + \epsilon)\, \hat A_t\right)\right]
$$

and its Figure 1 (one term of $L^{CLIP}$ as a function of $r$, for $A > 0$ and $A < 0$, $\epsilon = 0.2$).
Everything is computed by `minippo.rl.losses.clipped_policy_loss` (its numba kernel, the default) and checked
against the same function's NumPy formula (`kernels.use_kernels(False)`); the loss is $-L^{CLIP}$.

The figure: top row, Figure 1 of the paper redrawn: one token's objective $\min(rA, \mathrm{clip}(r)A)$
against $r$, with the unclipped $rA$ dashed, the band $[1 - \epsilon, 1 + \epsilon]$ shaded, the flat
(clipped, zero-gradient) parts drawn thick red, the six case numbers written in their regions, and arrows
showing where gradient ascent pushes $r$ (no arrow: no push). Bottom row: the gradient of the objective with
respect to $r$: $A$ on the unclipped branch ($-\partial L / \partial \log\pi = A r$, divided by $r$), exactly 0
on the clipped one. The band is closed: at $r = 1 \pm \epsilon$ both terms are equal and the library returns
the unclipped gradient (the dot at the edge of the band).

Exercises:
1. Set eps = 0.1 and 0.3 (`run` takes `clip_eps`): which cases change for r = 1.15? What does
   a smaller eps do to the fraction of tokens with zero gradient in the batch experiment?
2. Cases 1 and 6 are NOT clipped although r is outside the band: explain with the min() why PPO
   lets a good action whose probability has fallen (A > 0, r < 1 - eps) be pushed back up.
3. CleanRL logs clipfrac = mean(|r - 1| > eps), minippo (like TRL) the fraction in cases 3 and 4.
   Compute both on the batch of this lesson: which one tells you how many tokens get no gradient?
4. Implement it: `minippo exercise start clip`, then `minippo exercise check clip`.

Questions: Q9, Q10.
"""
from __future__ import annotations

import math

import numpy as np

from lessons._common import Verdict, by_key, identity, lesson_main, pyplot, save
from minippo import kernels
from minippo.rl.losses import CLIP_CASES, CLIPPED_CASES, clip_cases, clipped_policy_loss

# one representative token per case: (A, r); the paper's six cases, then case 7 (A = 0, no signal)
CASE_POINTS = [(1.0, 0.6), (1.0, 1.0), (1.0, 1.4), (-1.0, 0.6), (-1.0, 1.0), (-1.0, 1.4), (0.0, 1.4)]


def log_of(r: float) -> float:
    """A log-ratio d whose exp is exactly the double ``r`` (np.exp and libm agree): log(r) rounds,
    and at the band's edge one ulp decides between the two sides."""
    d = float(np.log(r))
    up = down = d
    for _ in range(100):                     # walk outwards from log(r), one ulp at a time
        for cand in (up, down):
            if np.exp(cand) == r and math.exp(cand) == r:
                return cand
        up, down = math.nextafter(up, math.inf), math.nextafter(down, -math.inf)
    return d


def one_token(fn, A, r, clip_eps):
    """Objective, dL/dlogp and case code of a single token with advantage A and ratio r."""
    logp_old = np.array([0.0])
    logp = logp_old + log_of(r)
    loss, dlogp, stats = fn(logp, logp_old, np.array([A]), None, clip_eps=clip_eps)
    return -loss, float(dlogp[0]), int(clip_cases(np.exp(logp - logp_old), np.array([A]), None, clip_eps)[0])


def curves(A, r_grid, clip_eps):
    """Objective and d(objective)/dr along ``r_grid`` for one token (library kernel)."""
    obj, grad_r = np.empty_like(r_grid), np.empty_like(r_grid)
    for i, r in enumerate(r_grid):
        o, dlogp, _ = one_token(clipped_policy_loss, A, r, clip_eps)
        obj[i] = o
        grad_r[i] = -dlogp / r          # dObj/dr = -dL/dlogp * dlogp/dr, and dlogp/dr = 1/r
    return obj, grad_r


def run(quick: bool = False, seed: int = 0, clip_eps: float = 0.2) -> dict:
    # (1) the six cases, one token each, kernel and reference side by side
    cases = []
    for A, r in CASE_POINTS:
        obj_k, d_k, code = one_token(clipped_policy_loss, A, r, clip_eps)
        with kernels.use_kernels(False):                        # the NumPy formula
            obj_r, d_r, code_r = one_token(clipped_policy_loss, A, r, clip_eps)
        assert code == code_r
        cases.append({"code": code, "A": A, "r": r, "objective": obj_k, "objective_ref": obj_r,
                      "dlogp": d_k, "dlogp_ref": d_r, "analytic": 0.0 if code in CLIPPED_CASES or A == 0 else -A * r,
                      "clipped": code in CLIPPED_CASES, "description": CLIP_CASES[code]})
    # (2) the edges of the band: r = 1 +/- eps exactly (both terms equal; unclipped gradient)
    edges = []
    for A, r in ((1.0, 1 + clip_eps), (-1.0, 1 - clip_eps)):
        o, d, code = one_token(clipped_policy_loss, A, r, clip_eps)
        edges.append({"A": A, "r": r, "objective": o, "dlogp": d, "code": code})
    # (3) Figure 1: the curves
    r_grid = np.linspace(0.0 + 1e-3, 2.0, 121 if quick else 801)
    obj_pos, grad_pos = curves(1.0, r_grid, clip_eps)
    obj_neg, grad_neg = curves(-1.0, r_grid, clip_eps)
    # (4) a batch of tokens after a few updates: which fraction gets no gradient at all?
    rng = np.random.default_rng(seed)
    B, T = (8, 32) if quick else (64, 128)
    logp_old = rng.uniform(-5.0, -0.05, size=(B, T))
    logp = logp_old + 0.25 * rng.standard_normal((B, T))       # a policy that has moved a bit
    adv = rng.standard_normal((B, T))
    mask = (np.arange(T)[None, :] < rng.integers(T // 4, T + 1, size=B)[:, None]).astype(float)
    loss, dlogp, stats = clipped_policy_loss(logp, logp_old, adv, mask, clip_eps=clip_eps)
    with kernels.use_kernels(False):                            # the NumPy formula
        loss_ref, dlogp_ref, _ = clipped_policy_loss(logp, logp_old, adv, mask, clip_eps=clip_eps)
    valid = mask == 1
    ratio = np.exp(logp - logp_old)[valid]
    # the identity of the lesson, on every token of the batch and on both paths: dL/dlogp is exactly 0.0 where
    # the clipped branch is selected, and -A r / n (n valid tokens) everywhere else
    case = clip_cases(np.exp(logp - logp_old), adv, mask, clip_eps)                      # (B, T) codes 1-7
    grads = [dlogp, dlogp_ref]
    clipped = valid & np.isin(case, CLIPPED_CASES)
    plain = -adv * np.exp(logp - logp_old) / stats["n_tokens"]                           # (B, T) -A r / n
    clipped_max = max(float(np.abs(g[clipped]).max(initial=0.0)) for g in grads)
    unclipped_err = max(float((np.abs(g - plain)[valid & ~clipped]).max(initial=0.0) / np.abs(plain[valid]).max())
                        for g in grads)
    case_counts = {c: int((case[valid] == c).sum()) for c in range(1, 8)}
    return {
        "clip_eps": clip_eps, "cases": cases, "edges": edges,
        "r_grid": r_grid, "obj_pos": obj_pos, "grad_pos": grad_pos, "obj_neg": obj_neg, "grad_neg": grad_neg,
        "batch": {"B": B, "T": T, "n_tokens": stats["n_tokens"], "loss": loss, "loss_ref": loss_ref,
                  "max_grad_diff": float(np.abs(dlogp - dlogp_ref).max()),
                  "clipfrac": stats["clipfrac"], "zero_grad_frac": float((dlogp[valid] == 0).mean()),
                  "cleanrl_clipfrac": float((np.abs(ratio - 1) > clip_eps).mean()),
                  "approx_kl": stats["approx_kl"], "case_counts": case_counts,
                  "n_clipped": int(clipped.sum()),
                  "clipped_max_abs_grad": clipped_max, "unclipped_rel_err": unclipped_err},
    }


def _panel_objective(ax, r_grid, obj, A, eps, case_labels):
    plain = r_grid * A
    ax.axvspan(1 - eps, 1 + eps, color="0.9", label=f"band [1-eps, 1+eps], eps = {eps:g}")
    ax.plot(r_grid, plain, "--", color="0.5", lw=1, label="unclipped r A")
    ax.plot(r_grid, obj, color="tab:blue", lw=2, label="L^CLIP = min(rA, clip(r)A)")
    flat = (r_grid > 1 + eps) if A > 0 else (r_grid < 1 - eps)
    ax.plot(r_grid[flat], obj[flat], color="tab:red", lw=4, alpha=0.8, label="clipped: constant, gradient 0")
    ax.plot([1], [A], "o", color="tab:red", ms=6)
    ax.plot([], [], color="tab:green", marker=">", lw=2, label="gradient ascent pushes r this way")
    # arrows: the direction gradient ascent moves r (length ~ |dObj/dr|), none where the gradient is 0
    for r0 in (0.35, 0.6, 1.0, 1.4, 1.7):
        if (A > 0 and r0 > 1 + eps) or (A < 0 and r0 < 1 - eps):
            continue
        y0 = np.interp(r0, r_grid, obj)
        ax.annotate("", xy=(r0 + 0.2 * np.sign(A), y0 + 0.2 * abs(A)), xytext=(r0, y0),
                    arrowprops=dict(arrowstyle="-|>", color="tab:green", lw=2, mutation_scale=14))
    r_mid = (1 + eps + 2.0) / 2 if A > 0 else (1 - eps) / 2                   # middle of the flat part
    ax.annotate("no push (gradient 0)", (r_mid, np.interp(r_mid, r_grid, obj)), textcoords="offset points",
                xytext=(0, -16), ha="center", fontsize=9, color="tab:red")
    for x, text in case_labels:
        ax.text(x, 0.93, text, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=9,
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="0.7"))
    ax.set_xlabel("probability ratio r = exp(logp - logp_old)")
    ax.set_xlim(0, 2)


def narrative(r: dict) -> str:
    L = []
    eps = r["clip_eps"]
    L.append(f"L^CLIP = min(r A, clip(r, 1-eps, 1+eps) A), eps = {eps:g}; one token per case (n = 1, so dL/dlogp = -A r "
             f"or 0). Kernel and NumPy reference side by side:")
    c1 = r["cases"][0]
    L.append(f"Signs: L^CLIP is the objective PPO maximises; the library returns the loss L = -L^CLIP, which gradient "
             f"descent minimises, and its gradient dL/dlogp. On an unclipped token d(r A)/dlogp = r A (dr/dlogp = r), so "
             f"in case {c1['code']} L^CLIP = {c1['objective']:+.1f} and dL/dlogp = {c1['dlogp']:+.1f}: opposite signs, the "
             f"same update (descent on L moves logp by -dL/dlogp = {-c1['dlogp']:+.1f}, as ascent on L^CLIP would).")
    L.append(f"{'case':<45s} {'A':>5s} {'r':>5s} {'L^CLIP':>8s} {'(ref)':>8s} {'dL/dlogp':>9s} {'(ref)':>9s} "
             f"{'-A r or 0':>9s}  zero grad?")
    for c in r["cases"]:
        if c["code"] not in range(1, 7):
            L.append("  (not one of the paper's six: A = 0 carries no signal, gradient 0 whatever r; clipfrac does "
                     "not count it)")
        L.append(f"{c['code']} {c['description']:<43s} {c['A']:+5.1f} {c['r']:5.2f} {c['objective']:8.4f} "
                 f"{c['objective_ref']:8.4f} {c['dlogp']:9.4f} {c['dlogp_ref']:9.4f} {c['analytic']:9.4f}  "
                 f"{'YES (exactly 0.0)' if c['dlogp'] == 0.0 else 'no'}")
    V = by_key(verdicts(r))
    for e in r["edges"]:
        L.append(f"edge r = {e['r']:.2f}, A = {e['A']:+.0f}: both terms equal ({e['objective']:.3f}); the token is case "
                 f"{e['code']} and gets the gradient {e['dlogp']:.3f}.")
    L.append(V["band_closed"].render())
    b = r["batch"]
    cc = b["case_counts"]
    L.append(f"A {b['B']}x{b['T']} batch ({b['n_tokens']} valid tokens) after the policy moved (|log r| ~ 0.25): "
             f"loss {b['loss']:.5f} (reference {b['loss_ref']:.5f}, max |dlogp diff| {b['max_grad_diff']:.1e}); "
             f"approx_kl {b['approx_kl']:.4f}.")
    L.append("tokens per case (codes of the table above): " + ", ".join(f"{k}: {v}" for k, v in cc.items()))
    L.append(f"clipfrac (cases 3+4) = {b['clipfrac']:.3f}; the fraction of tokens whose gradient is exactly 0 is "
             f"{b['zero_grad_frac']:.3f}; CleanRL's |r - 1| > eps would report {b['cleanrl_clipfrac']:.3f}.")
    L += [V["clipfrac_is_zero_grad"].render(), V["cleanrl_counts_1_and_6"].render()]
    L.append("A common claim, the lesson's identity:")
    L.append(V["clip_constant"].render())
    return "\n".join(L)


UNCLIPPED_RTOL = 1e-12      # -A r / n in float64, by the kernel and by the formula: a few ulps apart at most


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (all identities: they hold on every seed)."""
    b, eps = r["batch"], r["clip_eps"]
    cases = {c["code"]: c for c in r["cases"]}
    table_zero = max(abs(cases[k][g]) for k in CLIPPED_CASES for g in ("dlogp", "dlogp_ref"))
    table_err = max(abs(c[g] - c["analytic"]) / max(abs(c["A"] * c["r"]), 1e-300)
                    for k, c in cases.items() if k not in CLIPPED_CASES and c["A"] != 0 for g in ("dlogp", "dlogp_ref"))
    zero_max = max(table_zero, b["clipped_max_abs_grad"])
    err = max(table_err, b["unclipped_rel_err"])
    frozen = sorted(k for k, c in cases.items() if c["dlogp"] == 0.0)
    other = ", ".join(str(k) for k in sorted(cases) if k not in CLIPPED_CASES and k in range(1, 7))
    out = [identity(
        "clip_constant", "Once the clipped term is selected it is a constant, so that token does not update the actor.",
        zero_max == 0.0 and err <= UNCLIPPED_RTOL,
        f"holds when dL/dlogp is exactly 0.0 on every clipped token (cases 3 and 4: the table's and the batch's, "
        f"kernel and NumPy) and -A r / n (to {UNCLIPPED_RTOL:g} relative) on every other token",
        {"max |dL/dlogp| clipped": zero_max, "max rel. error vs -A r/n": err, "clipped tokens in the batch": b["n_clipped"]},
        f"zero gradient in the table: cases {', '.join(map(str, frozen))}. Cases 3 and 4 (a good action pushed above "
        f"1 + eps, a bad one below 1 - eps) by the clip, and the {b['n_clipped']} clipped tokens of the batch too; "
        f"cases {other} keep the ordinary gradient -A r. Case 7 (A = 0) has gradient 0 for another reason: -A r = 0 "
        f"whatever r, the token carries no signal. The claim is 'clipped => no update', not 'no update => clipped'.")]
    edge_ok = [e["code"] not in CLIPPED_CASES and abs(e["dlogp"] + e["A"] * e["r"]) <= UNCLIPPED_RTOL * abs(e["r"])
               for e in r["edges"]]
    out.append(identity(
        "band_closed", "At r = 1 +/- eps exactly the band is closed: the token counts as inside and gets the "
        "unclipped gradient -A r.", all(edge_ok),
        f"holds when the tokens at r = {1 + eps:g} (A = +1) and r = {1 - eps:g} (A = -1) are unclipped cases with "
        f"dL/dlogp = -A r (to {UNCLIPPED_RTOL:g} relative)",
        {f"dL/dlogp at r = {e['r']:g}": e["dlogp"] for e in r["edges"]},
        ", ".join(f"r = {e['r']:g}: case {e['code']}, gradient {e['dlogp']:.3f}" for e in r["edges"])))
    zero_adv = b["case_counts"][7]
    out.append(identity(
        "clipfrac_is_zero_grad", "clipfrac (cases 3 and 4) is the fraction of tokens that get no gradient.",
        b["clipfrac"] == b["zero_grad_frac"],
        "holds when clipfrac equals the fraction of valid tokens with dL/dlogp exactly 0.0 (true whenever no token "
        "has A = 0: those get 0 too, outside clipfrac)",
        {"clipfrac": b["clipfrac"], "zero-gradient fraction": b["zero_grad_frac"], "tokens with A = 0": zero_adv}))
    outside = sum(b["case_counts"][c] for c in (1, 3, 4, 6)) / b["n_tokens"]
    out.append(identity(
        "cleanrl_counts_1_and_6", "CleanRL's clipfrac, mean(|r - 1| > eps), also counts cases 1 and 6: outside the "
        "band but still pushed back, with a gradient.", bool(np.isclose(b["cleanrl_clipfrac"], outside, rtol=0, atol=1e-15)),
        "holds when mean(|r - 1| > eps) equals the share of cases 1, 3, 4 and 6",
        {"CleanRL clipfrac": b["cleanrl_clipfrac"], "share of cases 1, 3, 4, 6": outside, "clipfrac": b["clipfrac"]}))
    return out


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    eps = results["clip_eps"]
    r = results["r_grid"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.6), sharex=True, gridspec_kw={"hspace": 0.28})
    labels_pos = [(0.4, "case 1\nunclipped"), (1.0, "case 2"), (1.6, "case 3\nCLIPPED")]
    labels_neg = [(0.4, "case 4\nCLIPPED"), (1.0, "case 5"), (1.6, "case 6\nunclipped")]
    for col, (A, obj, grad, labels) in enumerate(((1.0, results["obj_pos"], results["grad_pos"], labels_pos),
                                                  (-1.0, results["obj_neg"], results["grad_neg"], labels_neg))):
        ax = axes[0, col]
        _panel_objective(ax, r, obj, A, eps, labels)
        ax.set_ylim(-2.3, 0.3) if A < 0 else ax.set_ylim(-0.1, 2.4)
        ax.set_title(f"({'ab'[col]}) one token's L^CLIP, A = {A:+g} (PPO paper Fig. 1)")
        ax.set_ylabel("L^CLIP of one token (maximised; units of A)")
        ax.legend(loc="lower right" if A > 0 else "lower left", fontsize=8)
        ax.tick_params(labelbottom=True)
        ax.set_xlabel("")
        ax = axes[1, col]
        ax.axvspan(1 - eps, 1 + eps, color="0.9")
        zero = grad == 0
        ax.plot(r, np.where(zero, np.nan, grad), color="tab:blue", lw=2,
                label=f"slope of the objective in ({'ab'[col]}), from the library's gradient")
        ax.plot(r, np.where(zero, grad, np.nan), color="tab:red", lw=4, alpha=0.8, label="exactly 0 (clipped branch)")
        edge = 1 + eps if A > 0 else 1 - eps
        e = results["edges"][col]
        ax.plot([edge], [-e["dlogp"] / e["r"]], "o", color="k", ms=6, label=f"r = {edge:g} exactly: unclipped gradient")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_ylim(-1.5, 1.5)
        ax.set_xlabel("probability ratio r = exp(logp - logp_old)")
        ax.set_ylabel("slope dL^CLIP/dr (units of A)")
        ax.set_title(f"({'cd'[col]}) slope of ({'ab'[col]}), A = {A:+g}:\nA where unclipped, 0 where clipped")
        ax.legend(loc="lower left" if A > 0 else "upper right", fontsize=8)
    b = results["batch"]
    same = "=" if b["clipfrac"] == b["zero_grad_frac"] else "differs from the"
    fig.suptitle(f"PPO-Clip, eps = {eps:g}. In a {b['B']}x{b['T']} batch after a policy move: "
                 f"clipfrac = {b['clipfrac']:.3f} {same} fraction of tokens with gradient exactly 0 "
                 f"({b['zero_grad_frac']:.3f})", fontsize=11)
    save(fig, path)


if __name__ == "__main__":
    main()
