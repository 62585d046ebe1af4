r"""Lesson 09 - text_as_mdp: text generation as an MDP, and one rollout printed as the per-token 7-tuple.

Pipeline step: the bridge from classic PPO (lesson 08, CartPole's (s, a, r, s', done)) to RLHF: what a
"state", an "action" and a "reward" are when the environment is a sentence being written. Generation is an
MDP:

    state       s_t = prompt + the tokens generated so far         (the observation, a variable-length context)
    action      a_t = the next token, one of V                      (V = 512 here, 32k-128k for real LLMs)
    transition  s_{t+1} = s_t + [a_t]                               (append: deterministic, no simulator)
    reward      at the end of the sequence (the reward model's score), plus a KL penalty per token

The experience is stored per TOKEN as a 7-tuple (observation, action, log_prob, value, reward, advantage,
return), right-padded with an attention mask.

Paper: the sequence score becomes per-token rewards (Ziegler et al. 2019, arXiv:1909.08593, eq. (2);
InstructGPT, Ouyang et al. 2022, arXiv:2203.02155, eq. (2)), with the score $s$ on the last valid token
$n - 1$:

$$
r_t = -\beta \left(\log \pi_{old}(a_t \mid s_t) - \log \pi_{ref}(a_t \mid s_t)\right) + [t = n - 1]\; s
$$

Advantages are GAE (PPO paper, arXiv:1707.06347, eqs. (11)-(12), $\gamma = 1$, $\lambda = 0.95$), returns
= advantages + values; advantages are then whitened over the batch.

What the lesson does: it takes the cached SFT policy and reward model of the main job, runs a few PPO
iterations (so the policy has moved and $kl_t$ is not 0), then prints the rollout of the last one (sampled
by the actor the updates before it moved) token by token with `Rollout.to_table` (padding rows included) and checks the bookkeeping: the score sits on the
EOS, the rewards of a response sum to score $- \beta \sum_t kl_t$, the return at the EOS equals its reward
(the episode ends: V after it is 0), padding holds zeros.

The old policy is not the reference model: two different frozen models. $\pi_{old}$ is the actor as it was
when it sampled this batch. It is frozen only for this iteration's K epochs, and its log_prob is the
denominator of the ratio $r_t = \exp(\log\pi - \log\pi_{old})$. $\pi_{ref}$ is the SFT copy, frozen for the
whole run, and appears only in the KL penalty $kl_t = \log\pi_{old}(a_t \mid s_t) - \log\pi_{ref}(a_t \mid s_t)$.
They coincide only at iteration 0. The lesson measures how far apart they are after its PPO iterations.

The figure: (a) the printed row as curves over its tokens: log_prob, value, reward, (whitened) advantage and
return, with the padded positions shaded; (b) the whole batch's layout: left-padded prompts, right-padded
responses, the column where each score lands, and the response mask.

Exercises:
1. Build `lesson_config` from `KnobsConfig` (PPO with the lessons' knobs) with
   `reward_shaping="uniform"`: how do the reward and advantage columns of the table change? Which tokens now get credit for the score (lesson 13 compares the two)?
2. Find a row without EOS (`ended` False): where does its score land, and how big is the
   missing-EOS penalty in its reward?
3. Why is `log_prob` stored in the buffer instead of recomputed during the update? Set lr = 0 and
   check the ratio of the first minibatch (`trainer.first_minibatch`).
4. Replace `logp_old` by `logp_ref` in the ratio (a common confusion, Q26). At iteration 0
   nothing changes. Later, what does the clip then bound? The step from the SFT model, not the step of
   this update.

Questions: Q24, Q25, Q26, Q27, Q17, Q18, Q4.
"""
from __future__ import annotations

import textwrap

import numpy as np

from lessons._common import Verdict, by_key, identity, lesson_main, measurement, pyplot, save
from minippo.rlhf.ppo_config import PPOConfig
from minippo.studies.study import Study


def lesson_config(quick: bool, seed: int) -> PPOConfig:
    """A short PPO run: enough iterations for the policy to leave the reference."""
    return PPOConfig(iterations=6 if quick else 12, batch_size=16, minibatch_size=8, seed=seed, max_new_tokens=24,
                     kl_ref_coef=0.1, kl_ref_controller="fixed", lr=3e-4)


def pick_row(ro) -> int:
    """A response that ended with EOS and is followed by padding (median length among those)."""
    ok = np.flatnonzero(ro.ended & (ro.lengths < ro.response.shape[1]))
    if ok.size == 0:
        ok = np.arange(ro.batch_size)
    return int(ok[np.argsort(ro.lengths[ok], kind="stable")[len(ok) // 2]])


def run(quick: bool = False, seed: int = 0) -> dict:
    study = Study(quick=quick, seed=seed)          # the cached SFT policy and reward model
    tok, cfg = study.tokenizer, lesson_config(quick, seed)
    trained = study.run(cfg)
    trainer, records = trained["trainer"], trained["records"]
    ro = trainer.last_rollout                       # the last iteration's experience (pre-update)
    texts = trainer.state.tokenizer.decode_batch(ro.sequences)
    row = pick_row(ro)
    n = int(ro.lengths[row])
    Tp = ro.prompt_len
    m = ro.response_mask[row] == 1
    # the MDP, step by step: state -> action -> next state (the first three transitions of the row)
    transitions = []
    for j in range(min(3, n)):
        state = tok.decode(ro.observation(row, j))
        transitions.append((state, tok.pieces([int(ro.response[row, j])])[0], tok.decode(ro.observation(row, j + 1))
                            if j + 1 < ro.response.shape[1] else ""))
    beta = records[-1]["kl_coef"]
    # pi_old (the actor that sampled) vs pi_ref (the frozen SFT copy) on the batch's valid tokens
    valid = ro.response_mask == 1
    old_vs_ref = {"mean_abs_diff": float(np.abs(ro.logp - ro.logp_ref)[valid].mean()),
                  "frac_differ": float((ro.logp != ro.logp_ref)[valid].mean()),
                  "kl_is_logp_minus_ref": bool(np.allclose(ro.kl[valid], (ro.logp - ro.logp_ref)[valid]))
                  if getattr(cfg, "kl_ref_estimator", "k1") == "k1" else None,     # PPOConfig: k1
                  "row_logp_ref": ro.logp_ref[row].copy()}
    checks = {
        "score_on_eos": bool(np.isclose(ro.rewards[row, n - 1], ro.scores[row] - beta * ro.kl[row, n - 1])),
        "rewards_sum": float(ro.rewards[row].sum()),
        "score_minus_kl": float(ro.scores[row] - beta * ro.kl[row].sum()),
        "return_at_eos": float(ro.returns[row, n - 1]),
        "reward_at_eos": float(ro.rewards[row, n - 1]),
        "padding_zero": bool(all((getattr(ro, k)[row, ~m] == 0).all()
                                 for k in ("logp", "values", "rewards", "adv", "returns"))),
    }
    # the responses without EOS: their score is the RM's minus the penalty, on their last sampled token
    no_eos = np.flatnonzero(~ro.ended)
    last = ro.lengths[no_eos] - 1
    checks["no_eos_penalised"] = (bool(np.allclose(ro.scores[no_eos], ro.rm_scores[no_eos] - cfg.missing_eos_penalty)
                                       and np.allclose(ro.rewards[no_eos, last],
                                                       ro.scores[no_eos] - beta * ro.kl[no_eos, last]))
                                  if no_eos.size else None)
    return {"table": ro.to_table(tok, row), "row": row, "n_tokens": n, "Tn": ro.response.shape[1], "Tp": Tp,
            "text": texts[row], "pieces": tok.pieces([int(t) for t in ro.response[row]]),
            "arrays": {k: getattr(ro, k)[row].copy() for k in ("logp", "values", "rewards", "adv", "returns", "kl")},
            "mask": ro.response_mask[row].copy(), "batch_attn_mask": ro.attn_mask.copy(),
            "batch_lengths": ro.lengths.copy(), "ended": ro.ended.copy(), "score": float(ro.scores[row]),
            "rm_score": float(ro.rm_scores[row]), "kl_coef": beta, "transitions": transitions, "checks": checks,
            "n_no_eos": int((~ro.ended).sum()), "batch_size": ro.batch_size, "iterations": cfg.iterations,
            "missing_eos_penalty": cfg.missing_eos_penalty, "old_vs_ref": old_vs_ref}


def derived(r: dict) -> dict:
    """What the narrative prints and docs/questions.md quotes that run() keeps inside arrays: the row's padding
    columns, its return and reward-to-go at the first token, and its three printed transitions as text."""
    ret, rew = r["arrays"]["returns"], r["arrays"]["rewards"]
    return {"n_padding": r["Tn"] - r["n_tokens"], "return_at_first": float(ret[0]),
            "reward_to_go_at_first": float(rew[:r["n_tokens"]].sum())}


def narrative(r: dict) -> str:
    L = ["Text generation as an MDP: state = prompt + tokens so far, action = next token, transition = append it, "
         "reward = the score at the end (plus -beta * kl_t per token)."]
    for k, (s, a, s2) in enumerate(r["transitions"]):
        L.append(f"  step {k}: state {s!r:<40} action {a!r:<12} -> next state {s2!r}")
    L.append(f"\nThe rollout of the last of {r['iterations']} PPO iterations, sampled after {r['iterations'] - 1} updates "
             f"({r['batch_size']} responses; "
             f"row {r['row']}, {r['n_tokens']} tokens then {r['Tn'] - r['n_tokens']} padding), as the per-token "
             f"7-tuple (observation, action, log_prob, value, reward, advantage, return; beta = {r['kl_coef']:g}):\n")
    L.append(r["table"])
    c = r["checks"]
    V = by_key(verdicts(r))
    L.append(f"\nThe score {r['score']:+.3f} (RM {r['rm_score']:+.3f}); the last token's reward "
             f"{c['reward_at_eos']:+.4f}. Rewards of the row sum to {c['rewards_sum']:+.4f}; score - beta * sum(kl) = "
             f"{c['score_minus_kl']:+.4f}. The return at the last token {c['return_at_eos']:+.4f}.")
    L += [V[k].render() for k in ("score_on_last", "rewards_sum", "return_at_last", "padding_zero")]
    if c["no_eos_penalised"] is None:
        L.append(f"All {r['batch_size']} responses have an EOS.")
    else:
        L.append(f"{r['n_no_eos']} of {r['batch_size']} responses have no EOS.")
        L.append(V["no_eos_penalised"].render())
    L.append("The advantage column is whitened over the batch's valid tokens; return - value is the raw GAE advantage.")
    o = r["old_vs_ref"]
    L.append(f"\nlog_prob is pi_old, the actor that sampled this batch, not the reference model (a common mix-up calls "
             f"the old policy 'the frozen reference model'). After {r['iterations'] - 1} updates the two differ on "
             f"{o['frac_differ']:.0%} of the batch's tokens, by {o['mean_abs_diff']:.3f} nats on average. The KL "
             "penalty is their difference, kl_t = log pi_old - log pi_ref (k1)"
             + (" (not k1 in this config)." if o["kl_is_logp_minus_ref"] is None else ".")
             + f" This row's log pi_ref: [{', '.join(f'{v:.3f}' for v in o['row_logp_ref'][:r['n_tokens']])}] "
             "(its log_prob column above).")
    L += [V[k].render() for k in ("old_is_not_ref", "kl_is_k1") if k in V]
    return "\n".join(L)


def verdicts(r: dict) -> list[Verdict]:
    """The bookkeeping of the 7-tuple: identities of the code (each checked on this rollout, to float32 rounding:
    ``np.isclose``, rtol 1e-5), and one measurement (pi_old has left pi_ref)."""
    c, o = r["checks"], r["old_vs_ref"]
    tol = "(np.isclose: float32 rounding)"
    out = [
        identity("score_on_last", "The sequence score sits on the last valid token's reward (the EOS, or the last "
                 "sampled token).", c["score_on_eos"], f"holds when reward[last] = score - beta kl[last] {tol}",
                 {"reward at the last token": c["reward_at_eos"], "score": r["score"]}),
        identity("rewards_sum", "A row's rewards sum to its score minus beta times its summed KL.",
                 bool(np.isclose(c["rewards_sum"], c["score_minus_kl"])), f"holds when sum_t reward_t = score - beta "
                 f"sum_t kl_t {tol}", {"sum of rewards": c["rewards_sum"], "score - beta sum kl": c["score_minus_kl"]}),
        identity("return_at_last", "The value after the last token is 0: the return at the last token equals its reward.",
                 bool(np.isclose(c["return_at_eos"], c["reward_at_eos"])), f"holds when return[last] = reward[last] {tol}",
                 {"return at the last token": c["return_at_eos"], "reward at the last token": c["reward_at_eos"]}),
        identity("padding_zero", "Padding holds zeros in every column (log_prob, value, reward, advantage, return).",
                 c["padding_zero"], "holds when every padded position of the row is exactly 0.0 in the five columns"),
    ]
    if c["no_eos_penalised"] is not None:
        out.append(identity("no_eos_penalised", "A response without EOS gets the RM score minus the missing-EOS penalty, "
                            "on its last sampled token.", c["no_eos_penalised"],
                            f"holds when every such response's score = RM score - {r['missing_eos_penalty']:g} and its "
                            f"last token's reward = score - beta kl {tol}", {"responses without EOS": r["n_no_eos"]}))
    out.append(measurement("old_is_not_ref", f"After {r['iterations'] - 1} PPO updates pi_old (the actor that sampled "
                           "the last iteration) is no longer the reference model: their log-probs differ.", o["frac_differ"], 0.0, ">",
                           "fraction of tokens where log pi_old != log pi_ref", fmt=".0%",
                           numbers={"mean |difference| (nats)": o["mean_abs_diff"]}))
    if o["kl_is_logp_minus_ref"] is not None:
        out.append(identity("kl_is_k1", "The KL penalty is kl_t = log pi_old - log pi_ref (k1), token by token.",
                            o["kl_is_logp_minus_ref"], f"holds when kl_t = logp_t - logp_ref_t on every valid token {tol}"))
    return out


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(r: dict, path) -> None:
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 5.2), gridspec_kw={"width_ratios": [1.5, 1]})
    Tn, n = r["Tn"], r["n_tokens"]
    j = np.arange(Tn)
    a = r["arrays"]
    ax.bar(j, a["logp"], color="tab:blue", alpha=0.35, label="log_prob (old policy)")
    ax.plot(j, a["values"], "o-", color="tab:orange", label="value V(s_t)")
    ax.plot(j, a["returns"], "s--", color="tab:red", label="return = GAE adv + V")
    ax.plot(j, a["adv"], "^-", color="tab:purple", label="advantage (whitened)")
    ax.stem(j, a["rewards"], linefmt="g-", markerfmt="gD", basefmt=" ", label="reward")
    ax.axvspan(n - 0.5, Tn - 0.5, color="grey", alpha=0.2, label="padding (mask 0)")
    where = "EOS" if r["ended"][r["row"]] else "last token"
    ax.annotate(f"score {r['score']:+.2f}\nlands on the {where}", (n - 1, a["rewards"][n - 1]), xytext=(40, -75),
                textcoords="offset points", arrowprops=dict(arrowstyle="->"))
    ax.set_xticks(j)
    ax.set_xticklabels([p if k < n else "pad" for k, p in enumerate(r["pieces"])], rotation=60, fontsize=8)
    ax.set_xlabel("response token j (its piece)")
    ax.set_ylabel("per token: log_prob in nats; the rest in reward units")
    shown = textwrap.shorten(r["text"], 60, placeholder=" ...")
    if not r["ended"][r["row"]]:                                   # stopped at max_new_tokens
        shown += " [no EOS]"
    ax.set_title(f"(a) one rollout as per-token 7-tuples: \"{shown}\"")
    # (b) the batch layout: 0 padding, 1 prompt, 2 response; x where the score lands
    am = r["batch_attn_mask"].astype(float)
    Tp = r["Tp"]
    layout = am.copy()
    layout[:, Tp:] *= 2
    bx.imshow(layout, aspect="auto", cmap="viridis", interpolation="nearest")
    bx.grid(False)
    bx.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    last = Tp + r["batch_lengths"] - 1
    rows = np.arange(len(last))
    bx.scatter(last, rows, marker="x", color="red", s=30, label="score on the last valid token")
    bx.axvline(Tp - 0.5, color="white", lw=2, ls="--")
    bx.scatter([Tp + n - 1], [r["row"]], facecolors="none", edgecolors="black", linewidths=1.5, s=160,
               label="row printed in (a)")
    bx.set_xlabel(f"column of prompt ++ response (prompt: 0..{Tp - 1}, left-padded; response: right-padded)")
    bx.set_ylabel("response in the batch")
    bx.set_title("(b) masks: purple padding, teal prompt, yellow response")
    bx.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=8, ncol=2, frameon=False)
    # (a)'s legend in a strip at the bottom of the figure, under (a): its rotated pieces vary in height
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    pos = ax.get_position()
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", bbox_to_anchor=(pos.x0 + pos.width / 2, 0.0),
               fontsize=8, ncol=6, frameon=False)
    save(fig, path)


if __name__ == "__main__":
    main()
