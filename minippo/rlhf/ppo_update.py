"""One PPO iteration, second half: K epochs of minibatch steps on the loss of PPO paper eq. (9).

Legend: B minibatch (responses), Tn response tokens, V vocab, n = valid tokens of the minibatch.

Per minibatch (all means are token-level masked means over the minibatch's valid tokens)::

    logits, values = model(prompt ++ response)                        response columns only (response.py)
    logp     = log_softmax(logits / T)[response]                      same temperature as the rollout
    ratio    = exp(logp - logp_old)
    L_pi     = -mean(min(ratio A, clip(ratio, 1-eps, 1+eps) A))       L^CLIP, eq. (7), as a loss
    L_V      = 0.5 mean(max((V - R)^2, (V_clip - R)^2))               value loss (clipped: ``value_clip``)
    S        = mean(H[pi(.|s_t)])                                     entropy bonus
    loss     = L_pi + c1 L_V - c2 S                                   eq. (9), signs for minimisation
             + ptx_coef * L_LM(corpus)                                PPO-ptx (InstructGPT eq. (2))
             + kl_loss_coef * mean(k3(pi, pi_ref))                    KL as a loss (GRPO-style), optional

then one global gradient-norm clip over actor and critic together and one AdamW step each.

Control flow (seed 003 sec. 12-13): a minibatch whose mean ratio exceeds ``ratio_threshold`` is skipped
(no step); when a minibatch's approx KL (k3 of pi_old vs pi, measured before its step) exceeds
``target_kl`` the update stops there, that minibatch included (Spinning Up's early stop), and
``early_stop_epoch`` records the epoch. A non-finite loss or gradient norm raises ``ValueError``
naming the metric and the iteration before anything is changed.
"""
from __future__ import annotations

import math

import numpy as np

from minippo.nn.optim import clip_grad_norm
from minippo.rl.group_advantages import grpo_kl_loss
from minippo.rl.distributions import entropy_backward, entropy_from_logits, logprobs_backward, logprobs_from_logits
from minippo.rl.masked import masked_mean
from minippo.rl.policy_loss import clipped_policy_loss
from minippo.rl.value_loss import clipped_value_loss, value_loss
from minippo.rlhf.response import backward_response, forward_response
from minippo.rlhf.rollout import minibatches


def check_finite(values: dict, iteration: int, where: str = "") -> None:
    """The NaN guard: ``ValueError`` naming the first non-finite metric and the iteration."""
    for name, v in values.items():
        if not math.isfinite(v):
            raise ValueError(f"`{name}` is {v} at iteration {iteration}{where}: training stopped (the last good "
                             f"checkpoint is kept; lower `lr`, check the rewards)")


def minibatch_loss_and_grads(actor, critic, mb, cfg, ptx_batch=None):
    """Loss terms, statistics and gradients of one minibatch (nothing is updated).

    Parameters
    ----------
    actor : TinyGPT; critic : Critic; mb : Rollout with ``adv`` and ``returns``; cfg : PPOConfig
    ptx_batch : ``(idx, targets, mask, attn_mask)`` of corpus text for PPO-ptx, or None

    Returns
    -------
    terms : dict of floats (``loss/policy``, ``loss/value``, ``loss/entropy``, ``loss/ptx``, ``loss/kl``,
        ``loss/total``)
    stats : dict (``approx_kl``, ``clipfrac``, ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``vf_clipfrac``,
        ``entropy``)
    grads_actor : dict like ``actor.params``; grads_critic : dict like the critic's own params (or {})
    """
    seqs, attn, Tp, mask = mb.sequences, mb.attn_mask, mb.prompt_len, mb.response_mask
    shared = critic.kind == "shared"
    logits, head, cache = forward_response(actor, seqs, attn, Tp, scalar=shared)         # (B, Tn, V)
    # the policy: new log-probs at the rollout's temperature, the clipped surrogate and the entropy
    logp, c_logp = logprobs_from_logits(logits, mb.response, cfg.temperature)              # (B, Tn)
    pg_loss, dlogp, pstats = clipped_policy_loss(logp, mb.logp.astype(logp.dtype), mb.adv.astype(logp.dtype),
                                                 mask, cfg.clip_eps)
    ent, c_ent = entropy_from_logits(logits, cfg.temperature)                              # (B, Tn)
    ent_mean = masked_mean(ent, mask)
    terms = {"loss/policy": pg_loss, "loss/entropy": -ent_mean, "loss/kl": 0.0, "loss/ptx": 0.0, "loss/value": 0.0}
    if cfg.kl_loss_coef > 0:
        # GRPO's KL penalty as a loss: kl_loss_coef * mean(k3(pi, pi_ref)), gradient 1 - pi_ref / pi per token
        kl_term, dkl, kstats = grpo_kl_loss(logp, mb.logp_ref.astype(logp.dtype), mask, cfg.kl_loss_coef)
        terms["loss/kl"] = kstats["kl"]
        dlogp = dlogp + dkl
    dlogits = logprobs_backward(dlogp.astype(logits.dtype), c_logp)                        # (B, Tn, V)
    if cfg.ent_coef > 0:
        # the entropy bonus -c2 mean(H): d/dH = -c2 / n on each valid token
        dent = (-cfg.ent_coef * (mask != 0) / max(int(mask.sum()), 1)).astype(logits.dtype)    # (B, Tn)
        dlogits += entropy_backward(dent, c_ent)
    # the critic: (clipped) squared error in the head's (possibly normalised) units
    dhead, vf_clipfrac, grads_critic = None, 0.0, {}
    if critic.kind != "none":
        if critic.kind == "separate":
            h, c_cache = critic.head_outputs(seqs, attn, Tp)
        else:
            h = head
        h64 = h.astype(np.float64)
        returns, values_old = critic.normalise(mb.returns), critic.normalise(mb.values)
        if cfg.value_clip:
            vf_loss, dh, vstats = clipped_value_loss(h64, values_old, returns, mask, cfg.clip_eps_value)
        else:
            vf_loss, dh, vstats = value_loss(h64, returns, mask)
        terms["loss/value"], vf_clipfrac = vf_loss, vstats["vf_clipfrac"]
        dhead = (cfg.vf_coef * dh).astype(h.dtype)
        if critic.kind == "separate":
            grads_critic = backward_response(critic.model, c_cache, dvalues=dhead)
            dhead = None
    grads_actor = backward_response(actor, cache, dlogits=dlogits, dvalues=dhead,
                                    scalar_into_trunk=not critic.stop_gradient)
    if ptx_batch is not None and cfg.ptx_coef > 0:
        # PPO-ptx: the SFT language-model loss on corpus text, its gradient added with weight ptx_coef
        terms["loss/ptx"], g_ptx = actor.lm_loss_and_grads(*ptx_batch)
        for k, g in g_ptx.items():
            grads_actor[k] += g.dtype.type(cfg.ptx_coef) * g
    terms["loss/total"] = (terms["loss/policy"] + cfg.vf_coef * terms["loss/value"] - cfg.ent_coef * ent_mean
                           + cfg.ptx_coef * terms["loss/ptx"] + cfg.kl_loss_coef * terms["loss/kl"])
    stats = {"approx_kl": pstats["approx_kl"], "clipfrac": pstats["clipfrac"], "ratio_mean": pstats["ratio_mean"],
             "ratio_min": float(pstats["ratio_min"]), "ratio_max": float(pstats["ratio_max"]),
             "vf_clipfrac": vf_clipfrac, "entropy": ent_mean}
    return {k: float(v) for k, v in terms.items()}, stats, grads_actor, grads_critic


def ppo_update(actor, critic, opt_actor, opt_critic, rollout, cfg, rng: np.random.Generator, *, lr: float,
               critic_lr: float, iteration: int = 0, ptx_sampler=None) -> dict:
    """``cfg.ppo_epochs`` passes of minibatch steps over ``rollout`` (with ``adv`` and ``returns``).

    Parameters
    ----------
    actor : TinyGPT; critic : Critic; opt_actor / opt_critic : AdamW over ``actor.params`` /
        ``critic.trainable()`` (opt_critic None when the critic owns no parameters)
    rollout : Rollout; cfg : PPOConfig; rng : shuffles the minibatches (and draws PPO-ptx batches)
    lr, critic_lr : this iteration's learning rates
    iteration : named in the NaN guard's message
    ptx_sampler : callable ``rng -> (idx, targets, mask, attn_mask)`` for PPO-ptx, or None

    Returns
    -------
    metrics : ``policy/*``, ``loss/*``, ``val/clipfrac_avg``, ``val/ratio``, ``early_stop_epoch``,
        ``policy/skipped_minibatches``, ``policy/grad_norm_avg``, ``policy/steps``, and ``first_minibatch``:
        ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``approx_kl``, ``clipfrac`` of the first minibatch, measured
        before its step (the lr = 0 check: ``minippo.rlhf.pitfalls.lr_zero_verdict``)
    """
    hist = {k: [] for k in ("approx_kl", "clipfrac", "ratio_mean", "vf_clipfrac", "entropy", "loss/policy",
                            "loss/value", "loss/ptx", "loss/kl", "grad_norm")}
    early_stop, skipped, steps, first = None, 0, 0, None
    for epoch in range(cfg.ppo_epochs):
        for idx in minibatches(rollout.batch_size, cfg.minibatch_size, rng):
            ptx_batch = ptx_sampler(rng) if (ptx_sampler is not None and cfg.ptx_coef > 0) else None
            try:
                terms, stats, g_actor, g_critic = minibatch_loss_and_grads(actor, critic, rollout.take(idx), cfg,
                                                                           ptx_batch)
            except ValueError as exc:          # e.g. non-finite log-probs: say where it happened
                raise ValueError(f"{exc} (iteration {iteration}, epoch {epoch}): training stopped, the last good "
                                 f"checkpoint is kept") from exc
            check_finite(terms, iteration)
            if first is None:
                first = {k: stats[k] for k in ("ratio_mean", "ratio_min", "ratio_max", "approx_kl", "clipfrac")}
            for k in hist:
                if k in stats:
                    hist[k].append(stats[k])
                elif k in terms:
                    hist[k].append(terms[k])
            if cfg.target_kl is not None and stats["approx_kl"] > cfg.target_kl:
                early_stop = epoch                       # this minibatch is not applied, nor any after it
                break
            if cfg.ratio_threshold is not None and stats["ratio_mean"] > cfg.ratio_threshold:
                skipped += 1                             # a minibatch whose policy has drifted too far
                continue
            # one global norm over actor and critic, then an AdamW step for each
            norm = clip_grad_norm({**{"actor." + k: g for k, g in g_actor.items()},
                                   **{"critic." + k: g for k, g in g_critic.items()}}, cfg.max_grad_norm)
            check_finite({"policy/grad_norm": norm}, iteration)
            hist["grad_norm"].append(norm)
            opt_actor.step(g_actor, lr=lr)
            if opt_critic is not None:
                opt_critic.step(g_critic, lr=critic_lr)
            steps += 1
        if early_stop is not None:
            break
    mean = lambda k: float(np.mean(hist[k])) if hist[k] else 0.0   # noqa: E731
    return {
        "policy/approxkl_avg": mean("approx_kl"),
        "policy/approxkl_max": float(np.max(hist["approx_kl"])) if hist["approx_kl"] else 0.0,
        "policy/clipfrac_avg": mean("clipfrac"),
        "policy/entropy_avg": mean("entropy"),
        "loss/policy_avg": mean("loss/policy"),
        "loss/value_avg": mean("loss/value"),
        "loss/ptx_avg": mean("loss/ptx"),
        "loss/kl_avg": mean("loss/kl"),
        "val/clipfrac_avg": mean("vf_clipfrac"),
        "val/ratio": mean("ratio_mean"),
        "policy/grad_norm_avg": mean("grad_norm"),
        "policy/skipped_minibatches": skipped,
        "policy/steps": steps,
        "early_stop_epoch": early_stop,
        "first_minibatch": first,
    }
