"""One PPO iteration, first half: rollout (generate + score + old/ref log-probs + values) and rewards.

Legend: B batch (responses), Tp prompt columns, Tn response columns, V vocab.

The four models of seed 001 meet here::

    actor  pi_theta   generates the responses (KV cache), gives logp_old       (trained later)
    ref    pi_ref     the frozen SFT model: logp_ref for the KL penalty          (frozen)
    critic V_phi      V(s_t) for every response token                            (trained later)
    RM     r_psi      one score per response, read at its last valid token       (frozen)

:func:`collect_rollout` fills a :class:`~minippo.rlhf.rollout.Rollout` with everything the update
needs; :func:`compute_rewards` turns the scores into per-token rewards (:mod:`minippo.rlhf.rewards`);
``minippo.rlhf.advantages.compute_advantages`` and ``minippo.rlhf.ppo_update.ppo_update`` follow.

**One temperature.** The responses are sampled from softmax(logits / T); the old log-probs, the
reference log-probs, the new log-probs of the update and the entropy all use the same T, so that the
ratio at the first minibatch is 1 (to rounding, below) and the KL compares the same two distributions
(DESIGN.md).

**logp_old is recomputed** with one full forward pass after sampling (as TRL does) instead of reusing
the sampler's numbers: the update computes the new log-probs with that same forward function
(``forward_response``, the same temperature), not with the KV-cache sampler's incremental one. With
lr = 0 the parameters are bitwise unchanged, and recomputing the whole batch's log-probs with the same
shapes gives bitwise ``logp`` on any machine (determinism; lesson 16's "same forward"). The update's
minibatches hold fewer rows, though: a BLAS kernel may sum a product of b*T rows in another order than
one of B*T rows (OpenBLAS's Haswell / Zen kernels do; SkylakeX, Sandybridge do not), so the first
minibatch's ratio is 1 to float32 rounding (|log r| below
``minippo.rlhf.pitfalls.logp_rounding_tolerance``, ~1e-6 measured) and bitwise 1 only with some kernels;
clipfrac is exactly 0 on every machine. The sampler's log-probs are kept in ``rollout.gen_logp``: they
agree with ``logp`` to rounding (tested).
"""
from __future__ import annotations

import numpy as np

from minippo.rl.distributions import logprobs_from_logits
from minippo.rl.kl import kl_exact_from_logits
from minippo.rl.masked import masked_mean
from minippo.rlhf.generate import encode_prompts, generate
from minippo.rlhf.gold import gold_scores
from minippo.rlhf.response import forward_response
from minippo.rlhf.rewards import has_eos, per_token_rewards, sequence_scores, whiten_rewards
from minippo.rlhf.rollout import Rollout


def collect_rollout(actor, critic, ref, reward_model, tokenizer, prompts: list[str], cfg, rng: np.random.Generator,
                    *, exact_kl: bool = False):
    """Sample ``cfg.samples_per_prompt`` responses for each prompt and record the experience.

    Parameters
    ----------
    actor, ref : TinyGPT (policy and frozen reference)
    critic : :class:`minippo.rlhf.critic.Critic`
    reward_model : :class:`minippo.rlhf.reward_model.RewardModel` (its normalised ``score``)
    tokenizer : the Tokenizer (``<bos> prompt`` encoding, eos and pad ids)
    prompts : list of str, one per prompt of the batch
    cfg : PPOConfig (sampling fields, ``samples_per_prompt``, the score terms)
    rng : np.random.Generator used by the sampler
    exact_kl : also return the exact per-response KL(pi || pi_ref) summed over valid tokens (B,)

    Returns
    -------
    rollout : Rollout with logp, logp_ref, values, rm_scores, scores, ended, gen_logp (rewards and
        advantages not yet computed)
    extras : dict with ``texts`` (decoded responses, prompt included) and ``kl_exact`` (B,) or None
    """
    n = cfg.samples_per_prompt
    prompt_ids, prompt_mask = encode_prompts(tokenizer, [p for p in prompts for _ in range(n)])   # (B, Tp)
    prompt_index = np.repeat(np.arange(len(prompts)), n)                                       # (B,)
    gen = generate(actor, prompt_ids, prompt_mask, max_new_tokens=cfg.max_new_tokens, rng=rng,
                   temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                   eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
    seqs, attn, Tp = gen.sequences, gen.attn_mask, gen.prompt_len
    # old policy (one full forward pass: what the update recomputes), with the shared value head if any
    logits, head, _ = forward_response(actor, seqs, attn, Tp, scalar=critic.kind == "shared")   # (B, Tn, V)
    logp, _ = logprobs_from_logits(logits, gen.response, cfg.temperature)                       # (B, Tn)
    ref_logits, _, _ = forward_response(ref, seqs, attn, Tp)
    logp_ref, _ = logprobs_from_logits(ref_logits, gen.response, cfg.temperature)
    values = critic.values(seqs, attn, Tp, head=head)                                           # (B, Tn)
    # the sequence score: RM at the last valid token, minus the missing-EOS penalty (+ length terms)
    rm_scores = reward_model.score(seqs, attn)                                                  # (B,)
    ended = has_eos(gen.response, gen.response_mask, tokenizer.eos_id)
    scores = sequence_scores(rm_scores, ended, gen.lengths, missing_eos_penalty=cfg.missing_eos_penalty,
                             length_penalty=cfg.length_penalty, length_bonus=cfg.length_bonus,
                             length_norm_alpha=cfg.length_norm_alpha, score_clip=cfg.score_clip)
    kl_exact = None
    if exact_kl:
        per_token = kl_exact_from_logits(logits, ref_logits, cfg.temperature)                   # (B, Tn)
        kl_exact = (per_token * gen.response_mask).sum(axis=1)
    rollout = Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response=gen.response,
                      response_mask=gen.response_mask, prompt_index=prompt_index, logp=logp, logp_ref=logp_ref,
                      values=values, rm_scores=rm_scores, scores=scores, ended=ended, gen_logp=gen.logp)
    return rollout, {"texts": tokenizer.decode_batch(seqs), "kl_exact": kl_exact}


def compute_rewards(rollout: Rollout, cfg, kl_coef: float) -> Rollout:
    """Fill ``rewards``, ``kl``, ``non_score_reward`` of ``rollout`` (in place; also returned).

    ``cfg.reward_shaping`` chooses where the score goes, ``cfg.kl_estimator`` the per-token KL, and
    ``cfg.whiten_rewards`` whitens the result (see :mod:`minippo.rlhf.rewards`).
    """
    rewards, kl, non_score = per_token_rewards(rollout.scores, rollout.logp, rollout.logp_ref, rollout.response_mask,
                                               kl_coef, kl_kind=cfg.kl_estimator, shaping=cfg.reward_shaping)
    if cfg.whiten_rewards:
        rewards = whiten_rewards(rewards, rollout.response_mask)
    rollout.rewards, rollout.kl, rollout.non_score_reward = rewards, kl, non_score
    return rollout


def rollout_metrics(rollout: Rollout, texts: list[str], kl_exact=None) -> dict:
    """The ``objective/*``, ``gold/score``, ``val/num_eos_tokens``, ``response/length`` metrics of one
    rollout (see ``minippo.rlhf.metrics.GLOSSARY``); sums run over valid tokens only."""
    m = rollout.response_mask
    kl_per_response = rollout.kl.sum(axis=1)                                 # (B,) padding is 0
    non_score = rollout.non_score_reward.sum(axis=1)                         # (B,)
    out = {
        "objective/kl": float(kl_per_response.mean()),
        "objective/entropy": float((-rollout.logp * m).sum(axis=1).mean()),
        "objective/non_score_reward": float(non_score.mean()),
        "objective/rlhf_reward": float((rollout.scores + non_score).mean()),
        "objective/scores": float(rollout.scores.mean()),
        "objective/rm_scores": float(rollout.rm_scores.mean()),
        "gold/score": float(gold_scores(texts).mean()),
        "val/num_eos_tokens": int(rollout.ended.sum()),
        "response/length": float(rollout.lengths.mean()),
        "val/values_avg": masked_mean(rollout.values, m),
    }
    if kl_exact is not None:
        out["objective/kl_exact"] = float(np.mean(kl_exact))
    return out
