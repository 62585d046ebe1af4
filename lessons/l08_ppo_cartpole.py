r"""Lesson 08 - ppo_cartpole: the whole classic PPO loop on CartPole, and how to read its monitoring dashboard.

Pipeline step: rollout + GAE -> multi-epoch minibatches -> KL monitoring / early stop, run for real with
(s, a, r, s', done) transitions before the course moves to language models. The loop is CleanRL's `ppo.py`,
one function read top to bottom (`train_ppo` in `minippo/classic/ppo.py`, with the formulas of
`minippo/rl/gae.py` and `minippo/rl/losses.py` and the MLPs of `minippo/nn/mlp.py`): N = 4 CartPole copies,
T = 128 steps per rollout, GAE ($\gamma$ 0.99, $\lambda$ 0.95) with truncated episodes bootstrapped by
$V(s_T)$, 4 epochs of 4 minibatches, whitened advantages, $L^{CLIP}$ with clipped value loss and entropy
bonus, global grad-norm clipping, learning rate annealed to 0, optional target-KL early stop
(`kl_old_target`). The rollout is used for its epochs and then discarded: PPO is on-policy.

Paper: Schulman et al. 2017 (arXiv:1707.06347), Algorithm 1 (N actors x T steps, advantages, K epochs of
minibatches, then $\theta_{old} \leftarrow \theta$), the clipped surrogate of eq. (7) and the combined loss of
eq. (9):

$$
L^{CLIP+VF+S}_t(\theta) = \hat{\mathbb{E}}_t\left[L^{CLIP}_t(\theta) - c_1 L^{VF}_t(\theta) + c_2\, S[\pi_\theta](s_t)\right]
$$

The metrics to watch: episode return, policy loss, value loss, entropy, approx KL, clip fraction, explained
variance, gradient norm. A clip fraction that stays high means the updates are too violent; an entropy that
drops fast means the policy became deterministic too early.

The figure: two runs with the same seed, the project's defaults and the same with `kl_old_target` = 0.005
(small enough that the early stop fires visibly), drawn as the dashboard (`minippo.classic.dashboard`): one
panel per metric against environment steps; x marks the updates whose epochs target-KL cut short.

Exercises:
1. Treat truncation as termination: in `rollout_advantages` (`minippo/classic/ppo.py`) pass
   `terminated | truncated` as `terminated` to `gae_classic`. Where do the value loss and
   explained variance change once episodes reach the 500-step limit, and why?
2. `minippo classic --lr 2.5e-4` is CleanRL's learning rate: compare the steps to reach 475 with
   the default 1e-3 (`minippo bench --only cartpole` prints both for seeds 0-2).
3. `--update-epochs 10 --lr 3e-3`: watch the clip fraction and approx KL rise; add
   `--kl-old-target 0.01` and count the early stops.
4. `--ent-coef 0` vs `--ent-coef 0.05`: how does the entropy panel change, and the return?

Questions: Q19, Q20, Q21, Q43, Q4, Q10.
"""
from __future__ import annotations

import numpy as np

from lessons._common import Verdict, by_key, lesson_main, measured, measurement, pyplot
from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.dashboard import plot_dashboard
from minippo.classic.ppo import actor_logits, init_agent, last_mean, steps_to_reach, train_ppo
from minippo.rl.losses import entropy_from_logits

KL_OLD_TARGET = 0.005


def _metric(hist, key) -> np.ndarray:
    return np.array([np.nan if h[key] is None else h[key] for h in hist], dtype=float)


def summarize(res: dict) -> dict:
    """The numbers the narrative reads off one run's history (first / last quarter of the updates)."""
    hist = res["history"]
    q = max(1, len(hist) // 4)
    first, last = slice(0, q), slice(len(hist) - q, len(hist))
    m = {k: _metric(hist, k) for k in ("losses/entropy", "losses/clipfrac", "losses/approx_kl",
                                        "losses/explained_variance", "losses/value_loss", "losses/policy_loss",
                                        "losses/grad_norm", "losses/grad_norm_actor", "losses/grad_norm_critic")}
    stops = [h["early_stop_epoch"] for h in hist if h["early_stop_epoch"] is not None]
    epochs_cfg = res["config"]["update_epochs"]
    return {
        "steps_to_475": steps_to_reach(res, 475.0),
        "last20": last_mean(res),
        "episodes": len(res["episode_returns"]),
        "wall_time": res["wall_time"],
        "entropy_start": float(m["losses/entropy"][0]),
        "entropy_end": float(np.mean(m["losses/entropy"][last])),
        "clipfrac_first": float(np.mean(m["losses/clipfrac"][first])),
        "clipfrac_last": float(np.mean(m["losses/clipfrac"][last])),
        "kl_median_first": float(np.median(m["losses/approx_kl"][first])),
        "kl_median_last": float(np.median(m["losses/approx_kl"][last])),
        "kl_max": float(np.max(m["losses/approx_kl"])),
        "ev_max": float(np.nanmax(m["losses/explained_variance"])),
        "ev_last": float(np.mean(m["losses/explained_variance"][last])),
        "value_loss_first": float(np.median(m["losses/value_loss"][first])),
        "value_loss_last": float(np.median(m["losses/value_loss"][last])),
        "policy_loss_abs_median": float(np.median(np.abs(m["losses/policy_loss"]))),
        "grad_norm_first": float(np.median(m["losses/grad_norm"][first])),
        "grad_norm_actor_first": float(np.median(m["losses/grad_norm_actor"][first])),
        "grad_norm_critic_first": float(np.median(m["losses/grad_norm_critic"][first])),
        "grad_norm_last": float(np.median(m["losses/grad_norm"][last])),
        "clipped_share_first": float(np.mean(m["losses/grad_norm"][first] > res["config"]["max_grad_norm"])),
        "early_stops": len(stops),
        "epochs_skipped": int(sum(epochs_cfg - (s + 1) for s in stops)),
        "updates": len(hist),
    }


def run(quick: bool = False, seed: int = 0) -> dict:
    total = 8192 if quick else 200_000
    runs = {
        "defaults": train_ppo(CartPoleEnv, total, seed),
        f"kl_old_target = {KL_OLD_TARGET:g}": train_ppo(CartPoleEnv, total, seed, kl_old_target=KL_OLD_TARGET),
    }
    # the first policy itself: the run's initial weights (init_agent is the first use of the run's generator) on
    # 1024 observations drawn like CartPole's reset state, U(-0.05, 0.05)^4
    params = init_agent(4, 2, np.random.default_rng(seed), runs["defaults"]["config"]["hidden_size"])
    obs = np.random.default_rng([seed, 8]).uniform(-0.05, 0.05, size=(1024, 4))
    ent, _ = entropy_from_logits(actor_logits(params, obs)[0])
    return {"total_timesteps": total, "seed": seed, "runs": runs,
            "summary": {k: summarize(v) for k, v in runs.items()},
            "initial_entropy_gap": float(np.abs(ent - np.log(2)).max())}


def _fmt_steps(s) -> str:
    return "475 not reached" if s is None else f"475 reached after {s} steps"


def narrative(r: dict) -> str:
    L = []
    d, k = r["summary"]["defaults"], r["summary"][f"kl_old_target = {KL_OLD_TARGET:g}"]
    V = by_key(verdicts(r))
    L.append(f"Classic PPO (CleanRL's loop, lr 1e-3) on minippo's CartPole-v1, {r['total_timesteps']} env steps, "
             f"seed {r['seed']}:")
    for name, s in r["summary"].items():
        L.append(f"  {name:<16s}: mean of the last 20 returns {s['last20']:.1f}; "
                 f"{_fmt_steps(s['steps_to_475'])}; {s['episodes']} episodes; {s['wall_time']:.1f} s")
    L.append("How to read the panels (numbers from the 'defaults' run; 'first/last quarter' = of the updates):")
    L.append("- return: dots are single episodes, the line the mean of the last 20. 500 is the time limit "
             "(truncation), 475 the goal; CleanRL reports 490 +/- 6 after 500k steps.")
    L.append(f"- policy loss: the clipped surrogate of the last minibatch, |median| {d['policy_loss_abs_median']:.4f}. "
             f"Whitened advantages have mean 0 and the ratio starts at 1, so it hovers around 0: it is not a "
             f"learning curve, read progress from the return.")
    reached = bool(np.max(r["runs"]["defaults"]["episode_returns"], initial=0.0) >= 500)
    L.append(f"- value loss: median {d['value_loss_first']:.3g} in the first quarter, {d['value_loss_last']:.3g} in the "
             f"last: it {'fell' if d['value_loss_last'] < d['value_loss_first'] else 'rose'}, and "
             + ("episodes reached the 500-step limit." if reached else "no episode reached the 500-step limit yet.")
             + " It jumps when the policy changes what returns look like and collapses once every episode is "
             "truncated at 500 and bootstrapped (the targets are then almost constant).")
    L.append(f"- entropy: {d['entropy_start']:.3f} nats in the first update (log 2 = {np.log(2):.3f}), "
             f"{d['entropy_end']:.3f} in the last quarter: it "
             + ("declined" if d["entropy_end"] < d["entropy_start"] else "did not decline")
             + ". A slow decline is the policy becoming confident; a crash towards 0 early on would mean it became "
             "deterministic before it had found a good behaviour, and exploration stops.")
    L.append(V["uniform_start"].render("  "))
    L.append(f"- approx KL (k3, last minibatch vs the rollout policy): median {d['kl_median_first']:.2g} in the first "
             f"quarter, {d['kl_median_last']:.2g} in the last ("
             + ("lower, as the learning rate anneals to 0" if d["kl_median_last"] < d["kl_median_first"] else
                "not lower, although the learning rate anneals to 0")
             + f"), max {d['kl_max']:.3f}. It measures how far one update moved the policy; a sudden climb is the "
             "first sign of a too-large step.")
    L.append(f"- clip fraction: {d['clipfrac_first']:.4f} in the first quarter, {d['clipfrac_last']:.4f} in the last. "
             f"It counts samples whose ratio left [1 - eps, 1 + eps] on the side the advantage pushes (their gradient "
             f"is 0). A clip fraction that stays high means the updates are too violent (lr, epochs); near 0 the "
             f"clip is idle: the steps are already small.")
    L.append(f"- explained variance: up to {d['ev_max']:.2f}, {d['ev_last']:.2f} on average in the last quarter. "
             "1 - Var[R - V] / Var[R] needs Var[R] > 0: when the returns barely vary it says little, so read it next "
             "to the value loss; during learning, near 0 or negative means V predicts no better than a constant.")
    L.append(f"- grad norm (before clipping to {r['runs']['defaults']['config']['max_grad_norm']}): median "
             f"{d['grad_norm_first']:.2f} in the first quarter, of which the actor's {d['grad_norm_actor_first']:.2f} and "
             f"the critic's {d['grad_norm_critic_first']:.2f}; {d['clipped_share_first']:.0%} of those updates were "
             f"clipped; {d['grad_norm_last']:.2f} in the last quarter. Spikes far above the usual level are "
             f"the ones the clipping is there to tame.")
    L.append(V["critic_dominates"].render("  "))
    L.append(f"- epochs run per update: with kl_old_target = {KL_OLD_TARGET:g}, {k['early_stops']} of {k['updates']} "
             f"updates stopped early ({k['epochs_skipped']} epochs skipped); the x marks in the KL panel are those "
             f"updates, their KL above the dashed target. That run: {_fmt_steps(k['steps_to_475'])} "
             f"(defaults: {_fmt_steps(d['steps_to_475'])}).")
    L.append(V["solves"].render())
    return "\n".join(L)


UNIFORM_TOL = 0.01      # nats from log 2: the first policy counts as uniform


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims on the 'defaults' run, each judged from the numbers of ``r`` (one seed: no comparison)."""
    d = r["summary"]["defaults"]
    steps = d["steps_to_475"]
    return [
        measurement("uniform_start", "The 0.01-gain output layer makes the first policy uniform (entropy log 2).",
                    r["initial_entropy_gap"], UNIFORM_TOL, "<", "max |H - log 2| of the initial policy (nats)",
                    because=f"max |H - log 2| = {r['initial_entropy_gap']:.2g} nats over 1024 reset states, before any "
                    f"update ({d['entropy_start']:.3f} nats in the first update's last minibatch)"),
        measurement("critic_dominates", "Early on the critic's regression on returns of up to ~1 / (1 - gamma) = 100 "
                    "dominates the global gradient norm (more than 3x the actor's).",
                    d["grad_norm_critic_first"] / d["grad_norm_actor_first"], 3.0, ">",
                    "critic / actor gradient norm (first quarter, median)", fmt=".1f"),
        measured("solves", f"PPO solves CartPole within {r['total_timesteps']} steps: the mean of the last 20 returns "
                 "reaches 475.", steps is not None, "holds when the mean of the last 20 episode returns reaches 475",
                 {"steps to 475": steps, "mean of the last 20 returns": d["last20"]},
                 _fmt_steps(steps) + f"; mean of the last 20 returns {d['last20']:.1f}"),
    ]


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    pyplot()                                        # the course's figure style for the dashboard
    plot_dashboard(results["runs"], path, title=(
        f"Lesson 08: PPO on CartPole-v1, {results['total_timesteps'] // 1000}k steps, seed {results['seed']} "
        f"- the monitoring dashboard (Q21)"))


if __name__ == "__main__":
    main()
