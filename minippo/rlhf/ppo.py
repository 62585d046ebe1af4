"""One RLHF PPO iteration, read top to bottom: PPO paper Algorithm 1 with a language model as the policy.

Legend: B batch (responses), Tp prompt columns (left-padded), Tn response columns (right-padded),
T = Tp + Tn, V vocab, n valid response tokens of a (mini)batch.

    prompts   B / samples_per_prompt prompts, each repeated samples_per_prompt times
    1. sample   responses ~ pi_old(.|prompt) with the KV cache                      collect_experience
    2. score    logp_old (actor), logp_ref (reference), V(s_t) (critic), score (RM)
    3. rewards  r_t = -beta kl_t on every token, + the score on the last one        InstructGPT eq. (2)
    4. A_t      GAE(gamma, lam) on those rewards, whitened (or GRPO / RLOO / REINFORCE)   PPO eqs. (11)-(12)
    5. update   K epochs x minibatches of  L^CLIP + c1 L^VF - c2 S  (+ PPO-ptx, + KL loss)   ppo_update, eq. (9)
                gradients by hand into actor and critic, one global norm clip, AdamW
    6. beta     the KL controller reads objective/kl                              Ziegler et al. 2019 sec. 2.2

The four models: the actor pi_theta (trained), the critic V_phi (trained; ``cfg.critic`` says which
network, :mod:`minippo.rlhf.critic`), the reference pi_ref (the frozen SFT copy) and the reward model
(frozen). One temperature: sampling, logp_old, logp_ref, the update's logp and the entropy all use
``cfg.temperature``, so with lr = 0 the ratio is 1 and the KL compares the same two distributions.

logp_old is recomputed with one full forward pass after sampling (as TRL does), with the function the update
uses (:func:`forward_response`), not taken from the KV-cache sampler. With lr = 0 the parameters stay
bitwise unchanged and a recompute of the whole batch with the same shapes is bitwise ``logp`` on any
machine; the update's minibatches hold fewer rows, though, and a BLAS kernel may sum a product of b*T rows
in another order than one of B*T rows (OpenBLAS's Haswell and Zen kernels do), so the first minibatch's
ratio is 1 to float32 rounding (~1e-6 measured; lesson 16) and bitwise 1 only with some kernels; clipfrac is
exactly 0 everywhere.

Position alignment, written once (:func:`forward_response`): the logits and the value at column p belong
to the token at column p + 1, so response token j (column Tp + j) is scored at column Tp + j - 1::

    column       Tp-2   Tp-1 | Tp    Tp+1   Tp+2
    token        p      p    | r0    r1     EOS      (then padding)
    read at             ^      ^     ^               logits / value for r0, r1, EOS

This file has no timers, files or checkpoints: :class:`minippo.rlhf.run.trainer.PPOTrainer` calls
:func:`collect_experience` and :func:`ppo_update`, times them, saves checkpoints and writes the metrics
(their names and definitions: :mod:`minippo.rlhf.metrics`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minippo.checks import check_choice, check_finite_values, check_float_array, check_mask, check_range
from minippo.nn.gpt import TinyGPT
from minippo.nn.optim import AdamW, clip_grad_norm, global_norm, lr_at
from minippo.rl.gae import gae
from minippo.rl.group_advantages import batch_mean_advantages, grpo_advantages, rloo_advantages
from minippo.rl.kl import kl_estimate, kl_ref_loss
from minippo.rl.kl_control import kl_adaptive_lr
from minippo.rl.loss_variants import aggregated_policy_loss, sequence_policy_loss
from minippo.rl.losses import (clipped_policy_loss, clipped_value_loss, entropy_backward, entropy_from_logits,
                               kl_exact_from_logits, logprobs_backward, logprobs_from_logits, value_loss)
from minippo.rl.masked import aggregation_denominator, explained_variance, masked_aggregate, masked_mean, masked_whiten
from minippo.rlhf.critic import ValueNorm, init_bias_to_mean_score
from minippo.rlhf.data.batches import lm_batch
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.data.gold import gold_scores
from minippo.rlhf.generate import encode_prompts, generate
from minippo.rlhf.metrics import rollout_metrics, update_metrics
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.reward_model import has_eos, last_token_index, sequence_scores
from minippo.rlhf.rollout import Rollout, minibatches

SHAPINGS = ("kl_final", "uniform")      # cfg.reward_shaping: where the sequence score lands


@dataclass
class PPOState:
    """Everything one iteration reads and changes (``PPOTrainer`` builds, saves and restores it)."""

    actor: TinyGPT                  # pi_theta, trained; starts as a copy of the SFT policy
    ref: TinyGPT                    # pi_ref, the frozen SFT policy
    critic: TinyGPT | None          # V_phi when cfg.critic == "separate"; "shared" uses the actor's scalar head
    reward_model: object            # RewardModel, frozen: .score(sequences, attn_mask) -> (B,)
    tokenizer: object
    opt_actor: AdamW
    opt_critic: AdamW | None        # over critic.params (None unless the critic is separate)
    kl_ctl: object                  # beta's controller: .value, .update(kl, n_steps)
    value_norm: ValueNorm           # the identity unless cfg.value_norm
    rng: np.random.Generator        # prompts, sampling, minibatch shuffles, PPO-ptx batches
    iteration: int = 0
    ptx_sequences: list | None = None   # corpus sentences <bos> ids <eos> for PPO-ptx
    kl_old_lr: float | None = None      # the actor's lr as the KL set it (cfg.kl_old_action "adapt_lr"), None before

    def value_head(self, cfg: PPOConfig) -> dict | None:
        """The parameters holding ``scalar_head.w|b`` of the critic (None without a critic)."""
        return {"separate": getattr(self.critic, "params", None), "shared": self.actor.params}.get(cfg.critic)


def ppo_iteration(state: PPOState, cfg: PPOConfig) -> tuple[Rollout, dict]:
    """One iteration of PPO paper Algorithm 1: steps 1-4 then 5-6 of the module docstring; returns the
    rollout and its metrics."""
    rollout, record = collect_experience(state, cfg)
    record.update(ppo_update(state, rollout, cfg))
    return rollout, record


# ----------------------------------------------------------------------------------------------
# steps 1-4: sample, score with the four models, per-token rewards, advantages
# ----------------------------------------------------------------------------------------------

def forward_response(model, sequences, attn_mask, prompt_len: int, *, scalar: bool = False):
    """``(logits (B, Tn, V), values (B, Tn) or None, cache)`` of ``model`` at the columns that predict the
    response tokens (Tp - 1 .. T - 2, see the module docstring); the last token is never an input."""
    logits, values, cache = model.forward(sequences[:, :-1], attn_mask[:, :-1], scalar=scalar)   # (B, T-1, V)
    cols = slice(prompt_len - 1, None)
    return logits[:, cols], (values[:, cols] if scalar else None), (cache, prompt_len, logits.shape)


def response_logprobs(model, sequences, attn_mask, response, prompt_len: int, temperature: float = 1.0):
    """(B, Tn) ``log_softmax(logits / temperature)`` of ``model`` at the response tokens (padding columns hold
    meaningless finite numbers: multiply by the response mask)."""
    logits, _, _ = forward_response(model, sequences, attn_mask, prompt_len)
    return logprobs_from_logits(logits, response, temperature)[0]


def backward_response(model, cache, dlogits=None, dvalues=None, *, scalar_into_trunk: bool = True) -> dict:
    """Parameter gradients from d loss / d logits (B, Tn, V) and / or d loss / d values (B, Tn) given at the
    response columns: zeros go to the prompt columns, then ``TinyGPT.backward``."""
    model_cache, prompt_len, (B, Tm1, V) = cache
    cols = slice(prompt_len - 1, None)
    full_dlogits = full_dvalues = None
    if dlogits is not None:
        full_dlogits = np.zeros((B, Tm1, V), dtype=dlogits.dtype)        # (B, T-1, V)
        full_dlogits[:, cols] = dlogits
    if dvalues is not None:
        full_dvalues = np.zeros((B, Tm1), dtype=dvalues.dtype)           # (B, T-1)
        full_dvalues[:, cols] = dvalues
    return model.backward(model_cache, dlogits=full_dlogits, dscalar=full_dvalues,
                          scalar_into_trunk=scalar_into_trunk)


def collect_experience(state: PPOState, cfg: PPOConfig, prompts: list[str] | None = None) -> tuple[Rollout, dict]:
    """Steps 1-4 on ``prompts`` (default: ``cfg.num_prompts`` drawn with ``state.rng``): a filled
    :class:`Rollout` (logp, logp_ref, values, scores, rewards, adv, returns) and the rollout's metrics."""
    if prompts is None:
        prompts = sample_prompts(cfg.num_prompts, seed=state.rng)
    ro, logits, ref_logits = sample_and_score(state, cfg, prompts)                 # steps 1-2
    if state.iteration == 0 and cfg.critic_bias_init == "mean_score" and cfg.critic != "none":
        # start the critic at the mean score: shift its head's bias, and the stored values with it
        delta = init_bias_to_mean_score(state.value_head(cfg), state.value_norm, ro.values, ro.scores,
                                        ro.response_mask)
        ro.values = (ro.values + delta) * ro.response_mask
    kl_coef = state.kl_ctl.value
    compute_rewards(ro, cfg, kl_coef)                                              # step 3
    ro.adv, ro.returns = advantages(ro, cfg)                                       # step 4
    state.value_norm.update(ro.returns, ro.response_mask, state.value_head(cfg))
    record = rollout_metrics(ro, gold_scores(state.tokenizer.decode_batch(ro.sequences)))
    record["val/explained_variance"] = explained_variance(ro.values, ro.returns, ro.response_mask)
    record["kl_coef"] = kl_coef
    if cfg.log_exact_kl:
        per_token = kl_exact_from_logits(logits, ref_logits, cfg.temperature)                      # (B, Tn)
        record["objective/kl_exact"] = float(np.mean((per_token * ro.response_mask).sum(axis=1)))
    return ro, record


def sample_and_score(state: PPOState, cfg: PPOConfig, prompts: list[str]):
    """Steps 1-2: sample ``cfg.samples_per_prompt`` responses per prompt, then the four models' forward passes.
    Returns ``(rollout, logits, ref_logits)``: the rollout without rewards, the actor's and the reference's
    logits at the response columns (B, Tn, V)."""
    # 1. sample: each prompt samples_per_prompt times, with the actor's KV cache
    n = cfg.samples_per_prompt
    prompt_ids, prompt_mask = encode_prompts(state.tokenizer, [p for p in prompts for _ in range(n)])   # (B, Tp)
    gen = generate(state.actor, prompt_ids, prompt_mask, max_new_tokens=cfg.max_new_tokens, rng=state.rng,
                   temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                   eos_id=state.tokenizer.eos_id, pad_id=state.tokenizer.pad_id)
    seqs, attn, Tp, mask = gen.sequences, gen.attn_mask, gen.prompt_len, gen.response_mask
    # 2. score. logp_old: one full forward pass of the actor (what the update recomputes), not the sampler's
    logits, head, _ = forward_response(state.actor, seqs, attn, Tp, scalar=cfg.critic == "shared")  # (B, Tn, V)
    logp, _ = logprobs_from_logits(logits, gen.response, cfg.temperature)                          # (B, Tn)
    ref_logits, _, _ = forward_response(state.ref, seqs, attn, Tp)
    logp_ref, _ = logprobs_from_logits(ref_logits, gen.response, cfg.temperature)                  # (B, Tn)
    if cfg.critic == "separate":
        _, head, _ = forward_response(state.critic, seqs, attn, Tp, scalar=True)                    # (B, Tn)
    values = (state.value_norm.denormalise(head) if cfg.critic != "none"
              else np.zeros(mask.shape, dtype=np.float64))                                          # V(s_t)
    rm_scores = state.reward_model.score(seqs, attn)                                                # (B,)
    ended = has_eos(gen.response, mask, state.tokenizer.eos_id)                                     # (B,)
    scores = sequence_scores(rm_scores, ended, gen.lengths, missing_eos_penalty=cfg.missing_eos_penalty,
                             length_penalty=cfg.length_penalty, length_bonus=cfg.length_bonus,
                             length_norm_alpha=cfg.length_norm_alpha, score_clip=cfg.score_clip)   # (B,)
    check_finite_values({"objective/scores": float(np.sum(scores)), "val/values_avg": float(np.sum(values))},
                        f"at iteration {state.iteration} (rollout)")
    ro = Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response=gen.response, response_mask=mask,
                 prompt_index=np.repeat(np.arange(len(prompts)), n), logp=logp, logp_ref=logp_ref,
                 values=values, rm_scores=rm_scores, scores=scores, ended=ended, gen_logp=gen.logp)
    return ro, logits, ref_logits


def per_token_rewards(scores, logp, logp_ref, mask, kl_coef: float, *, kl_kind: str = "k1",
                      shaping: str = "kl_final"):
    """Per-token rewards, "kl_final" shaping: Ziegler et al. 2019 (arXiv:1909.08593) eq. (2) and InstructGPT
    eq. (2), R = score - beta log(pi / pi_ref), written token by token (a response's log-ratio is the sum of
    its per-token kl_t)::

        kl_t = logp_t - logp_ref_t                  (k1; k2 or k3 with kl_kind)
        r_t  = -kl_coef * kl_t                      on every valid token
        r_T += score                                on the LAST valid token T (the EOS if there is one)

    For the response ``[t0, t1, EOS, PAD, PAD]`` (mask ``[1, 1, 1, 0, 0]``)::

        position   0           1           2                 3    4
        token      t0          t1          EOS               PAD  PAD
        reward     -b kl_0     -b kl_1     -b kl_2 + score   0    0

    "uniform" shaping spreads the score instead: ``r_t = -kl_coef * kl_t + score / n`` on each of the ``n``
    valid tokens (lesson 13 compares the two). Padding never receives a reward.

    Parameters
    ----------
    scores : (B,) sequence scores (:func:`sequence_scores`)
    logp : (B, Tn) log pi_old(a_t|s_t) of the sampled tokens (at the sampling temperature)
    logp_ref : (B, Tn) log pi_ref(a_t|s_t) of the same tokens (same temperature)
    mask : (B, Tn) 0/1 response mask, right-padded, at least one valid token per row
    kl_coef : beta >= 0
    kl_kind : "k1" (default), "k2" or "k3" (:func:`minippo.rl.kl.kl_estimate`)
    shaping : "kl_final" (score on the last valid token) or "uniform" (score / n on every valid token)

    Returns
    -------
    rewards : (B, Tn) float64, 0 on padding
    kl : (B, Tn) float64 per-token KL estimate, 0 on padding
    non_score_reward : (B, Tn) float64, ``-kl_coef * kl``, 0 on padding
    """
    logp = check_float_array("logp", logp, ndim=2)
    logp_ref = check_float_array("logp_ref", logp_ref, shape=logp.shape)
    mask = check_mask("mask", mask, shape=logp.shape, layout="right")
    B = logp.shape[0]
    scores = check_float_array("scores", scores, shape=(B,))
    check_range("kl_coef", kl_coef, 0, None)
    check_choice("shaping", shaping, SHAPINGS)
    m = (mask != 0).astype(np.float64)                                   # (B, Tn)
    kl = kl_estimate(logp.astype(np.float64), logp_ref.astype(np.float64), kl_kind, mask=m) * m
    non_score_reward = -kl_coef * kl                                     # (B, Tn), 0 on padding
    rewards = non_score_reward.copy()
    if shaping == "kl_final":
        # the score lands on the last valid token: the EOS when there is one, never the padding after it
        last = last_token_index(mask)                                    # (B,)
        rewards[np.arange(B), last] += scores
    else:
        # uniform: score / n on each of the n valid tokens of the row
        n = m.sum(axis=1)                                                # (B,)
        if (n == 0).any():
            raise ValueError(f"`mask` row {int(np.argmax(n == 0))} has no valid token: nothing to reward")
        rewards += (scores / n)[:, None] * m
    return rewards, kl, non_score_reward


def whiten_rewards(rewards, mask) -> np.ndarray:
    """Rewards divided by their std over the valid tokens, mean kept (TRL ``whiten_rewards``); 0 on padding."""
    return masked_whiten(rewards, mask, shift_mean=False)


def compute_rewards(ro: Rollout, cfg: PPOConfig, kl_coef: float) -> Rollout:
    """Step 3, in place: ``ro.rewards`` = -beta kl_t on every valid token plus the score on the last one
    (or spread, ``cfg.reward_shaping``), whitened if ``cfg.whiten_rewards``; ``ro.kl``, ``ro.non_score_reward``."""
    ro.rewards, ro.kl, ro.non_score_reward = per_token_rewards(
        ro.scores, ro.logp, ro.logp_ref, ro.response_mask, kl_coef, kl_kind=cfg.kl_ref_estimator,
        shaping=cfg.reward_shaping)
    if cfg.whiten_rewards:
        ro.rewards = whiten_rewards(ro.rewards, ro.response_mask)
    return ro


def advantages(ro: Rollout, cfg: PPOConfig):
    """``(adv, returns)`` (B, Tn), 0 on padding, of ``cfg.advantage_estimator``.

    ``"gae"``: GAE-lambda on the per-token rewards and the critic's values (the value after a response's
    last token is 0), whitened over the batch's valid tokens when ``cfg.whiten_advantages``. The
    critic-free estimators give each response ONE advantage from the scores of the other responses to
    its prompt (rows of one prompt are contiguous), on all its tokens, and are NOT whitened again: GRPO's
    are normalised per group already, Dr. GRPO drops the std on purpose, RLOO / REINFORCE keep the
    score's units (and whitening over tokens would shift a group's zero-mean advantages by a
    length-weighted constant)."""
    mask = ro.response_mask
    if cfg.advantage_estimator == "gae":
        adv, returns = gae(ro.rewards, ro.values, mask, gamma=cfg.gamma, lam=cfg.lam)
        if cfg.whiten_advantages:
            adv = masked_whiten(adv, mask)
        return adv, returns
    s = ro.sequence_returns                                   # (B,) each response's whole return
    n = cfg.samples_per_prompt
    if cfg.advantage_estimator == "grpo":                     # (s - mean_g s) / (std_g s + eps)  Shao et al. 2024
        adv = grpo_advantages(s, n, mask)
    elif cfg.advantage_estimator == "dr_grpo":                # s - mean_g s                     Liu et al. 2025
        adv = grpo_advantages(s, n, mask, scale=False)
    elif cfg.advantage_estimator == "rloo":                   # s - mean of the other n - 1      Ahmadian et al. 2024
        adv = rloo_advantages(s, n, mask)
    else:                                                     # "reinforce": s - mean of the batch
        adv = batch_mean_advantages(s, mask)
    adv = adv.astype(np.float64)
    return adv, (adv + ro.values) * mask


# ----------------------------------------------------------------------------------------------
# steps 5-6: K epochs x minibatches of eq. (9), then the KL controller
# ----------------------------------------------------------------------------------------------

def minibatch_loss_and_grads(state: PPOState, mb: Rollout, cfg: PPOConfig, ptx_batch=None):
    """Loss terms, statistics and gradients of one minibatch (nothing is updated)::

        logp   = log_softmax(logits / T)[response]            the same temperature as the rollout
        L_pi   = -agg(min(r A, clip(r, 1-eps, 1+eps_high) A))  L^CLIP, eq. (7), as a loss; r = exp(logp - logp_old)
                                                               (or GSPO's sequence ratio, cfg.ratio_level)
        L_V    = 0.5 agg(max((V - R)^2, (V_clip - R)^2))       value loss (unclipped without cfg.value_clip)
        S      = agg(H[pi(.|s_t)])                             entropy bonus
        loss   = L_pi + c1 L_V - c2 S                          eq. (9), signs for minimisation
               + ptx_coef * L_LM(corpus)                       PPO-ptx, InstructGPT eq. (2)
               + kl_ref_loss_coef * agg(k(pi, pi_ref))         KL as a loss (GRPO: k = k3), optional

    ``agg`` is ``cfg.loss_agg`` (token-mean by default; GRPO's 1/|o| per response; Dr. GRPO's constant
    normaliser ``cfg.max_new_tokens``), the same for every term.

    Returns ``(terms, stats, grads_actor, grads_critic)``: loss terms (floats), ``approx_kl`` / ``clipfrac``
    / ratio statistics / ``vf_clipfrac`` / ``entropy``, and gradient dicts like the parameters."""
    seqs, attn, Tp, mask = mb.sequences, mb.attn_mask, mb.prompt_len, mb.response_mask
    agg = dict(loss_agg=cfg.loss_agg, norm_len=cfg.max_new_tokens)        # one aggregation for every term
    logits, head, cache = forward_response(state.actor, seqs, attn, Tp, scalar=cfg.critic == "shared")
    # the policy: new log-probs, the clipped surrogate (token or sequence ratio), the entropy bonus
    logp, c_logp = logprobs_from_logits(logits, mb.response, cfg.temperature)                  # (B, Tn)
    args = (logp, mb.logp.astype(logp.dtype), mb.adv.astype(logp.dtype), mask, cfg.clip_eps, cfg.clip_eps_high)
    if cfg.ratio_level == "sequence":
        pg_loss, dlogp, pstats = sequence_policy_loss(*args, **agg)
    elif cfg.loss_agg != "token-mean":
        pg_loss, dlogp, pstats = aggregated_policy_loss(*args, **agg)
    else:
        pg_loss, dlogp, pstats = clipped_policy_loss(*args)
    ent, c_ent = entropy_from_logits(logits, cfg.temperature)                                  # (B, Tn)
    ent_mean = masked_aggregate(ent, mask, **agg)
    terms = {"loss/policy": pg_loss, "loss/entropy": -ent_mean, "loss/kl": 0.0, "loss/ptx": 0.0, "loss/value": 0.0}
    if cfg.kl_ref_loss_coef > 0:
        # KL(pi || pi_ref) as a loss: kl_ref_loss_coef * agg(k) with k = k1, k2 or k3 (what each gradient
        # estimates: minippo.rl.kl); k3's gradient per token is 1 - pi_ref / pi
        _, dkl, kstats = kl_ref_loss(logp, mb.logp_ref.astype(logp.dtype), mask, cfg.kl_ref_loss_coef,
                                     cfg.kl_ref_loss_estimator, **agg)
        terms["loss/kl"] = kstats["kl"]
        dlogp = dlogp + dkl
    dlogits = logprobs_backward(dlogp.astype(logits.dtype), c_logp)                            # (B, Tn, V)
    if cfg.ent_coef > 0:
        # -c2 agg(H): d/dH = -c2 / d on each valid token (d = n for token-mean)
        dent = (-cfg.ent_coef * (mask != 0) / aggregation_denominator(mask, **agg)).astype(logits.dtype)
        dlogits += entropy_backward(dent, c_ent)
    # the critic: the (clipped) squared error, in the head's (possibly normalised) units
    dhead, vf_clipfrac, grads_critic = None, 0.0, {}
    if cfg.critic != "none":
        if cfg.critic == "separate":
            _, head, c_cache = forward_response(state.critic, seqs, attn, Tp, scalar=True)     # (B, Tn)
        h64 = head.astype(np.float64)
        returns, values_old = state.value_norm.normalise(mb.returns), state.value_norm.normalise(mb.values)
        if cfg.value_clip:
            vf_loss, dh, vstats = clipped_value_loss(h64, values_old, returns, mask, cfg.clip_eps_value, **agg)
        else:
            vf_loss, dh, vstats = value_loss(h64, returns, mask, **agg)
        terms["loss/value"], vf_clipfrac = vf_loss, vstats["vf_clipfrac"]
        dhead = (cfg.vf_coef * dh).astype(head.dtype)
        if cfg.critic == "separate":
            grads_critic = backward_response(state.critic, c_cache, dvalues=dhead)
            dhead = None
    # both heads' gradients into the actor's trunk in one backward pass (the value head's only if shared)
    grads_actor = backward_response(state.actor, cache, dlogits=dlogits, dvalues=dhead,
                                    scalar_into_trunk=not (cfg.critic == "shared" and cfg.shared_stop_gradient))
    if ptx_batch is not None:
        # PPO-ptx: the SFT language-model loss on corpus text, its gradient added with weight ptx_coef
        terms["loss/ptx"], g_ptx = state.actor.lm_loss_and_grads(*ptx_batch)
        for k, g in g_ptx.items():
            grads_actor[k] += g.dtype.type(cfg.ptx_coef) * g
    terms["loss/total"] = (terms["loss/policy"] + cfg.vf_coef * terms["loss/value"] - cfg.ent_coef * ent_mean
                           + cfg.ptx_coef * terms["loss/ptx"] + cfg.kl_ref_loss_coef * terms["loss/kl"])
    stats = {"approx_kl": pstats["approx_kl"], "clipfrac": pstats["clipfrac"], "ratio_mean": pstats["ratio_mean"],
             "ratio_min": pstats["ratio_min"], "ratio_max": pstats["ratio_max"], "vf_clipfrac": vf_clipfrac,
             "entropy": masked_mean(ent, mask)}      # per token whatever cfg.loss_agg: policy/entropy_avg's meaning
    return {k: float(v) for k, v in terms.items()}, stats, grads_actor, grads_critic


def ppo_update(state: PPOState, ro: Rollout, cfg: PPOConfig) -> dict:
    """Steps 5-6: ``cfg.update_epochs`` passes over ``ro`` in minibatches, then beta's update; the metrics.

    Control flow. Early stop (``cfg.kl_old_target``): each minibatch's approx KL (k3 of pi_old vs the current pi,
    mean over its valid tokens) is measured in the forward pass of its own loss, i.e. before its step; when it
    exceeds the target, that minibatch is NOT applied, nor any after it (the rest of this epoch and every later
    epoch; actor and critic alike, they step together), and ``early_stop_epoch`` records the epoch. Two reference
    codes do it differently: Spinning Up's PPO (``spinup/algos/pytorch/ppo/ppo.py``) takes whole-batch policy
    steps and stops before the step whose KL (the k1 mean of logp_old - logp) exceeds 1.5 x ``target_kl``, then
    trains its value function regardless; CleanRL's ``ppo.py`` applies every minibatch of an epoch and checks
    after the epoch, on the approx KL (k3) of that epoch's last minibatch (measured before its step), so it
    skips only the remaining epochs. With ``cfg.kl_old_action == "adapt_lr"`` nothing is stopped: the same KL sets
    the actor's learning rate before that minibatch's step (:func:`minippo.rl.kl_control.kl_adaptive_lr`, rsl_rl's
    rule), and the rate is carried to the next iteration in ``state.kl_old_lr`` (Q45). The rule reads the KL only
    once a step of this update was taken: before that pi is pi_old and the approx KL is float rounding (exactly 0
    or ~1e-9, depending on the BLAS kernel: lesson 16), which would raise the rate by 1.5 on some machines and not
    on others. (rsl_rl's KL carries a +1e-5 inside its log, so there the first minibatch of every update raises
    the rate.) A minibatch whose mean ratio exceeds ``cfg.ratio_threshold`` is skipped (TRL) and the update goes
    on. A non-finite loss or gradient norm raises ``ValueError`` naming it (the NaN guard: nothing is applied after
    it)."""
    it = state.iteration
    schedule = dict(warmup_steps=cfg.warmup_iterations, schedule=cfg.lr_schedule)
    lr = lr_at(it, cfg.iterations, cfg.lr, **schedule)
    adapt_lr = cfg.kl_old_target is not None and cfg.kl_old_action == "adapt_lr"
    if adapt_lr and state.kl_old_lr is not None:
        lr = state.kl_old_lr                         # where the KL left it (the schedule is constant: PPOConfig)
    critic_lr = lr_at(it, cfg.iterations, cfg.lr if cfg.critic_lr is None else cfg.critic_lr, **schedule)
    history, early_stop, skipped, moved, lr_max = [], None, 0, False, 0.0
    for epoch in range(cfg.update_epochs):
        for idx in minibatches(ro.batch_size, cfg.minibatch_size, state.rng):
            ptx_batch = None
            if cfg.ptx_coef > 0:      # ptx_batch_size corpus sentences, drawn with the same rng
                pick = state.rng.integers(0, len(state.ptx_sequences), size=cfg.ptx_batch_size)
                ptx_batch = lm_batch([state.ptx_sequences[i] for i in pick], state.tokenizer.pad_id)
            terms, stats, g_actor, g_critic = minibatch_loss_and_grads(state, ro.take(idx), cfg, ptx_batch)
            check_finite_values(terms, f"at iteration {it}, epoch {epoch}")
            history.append({**terms, **stats, "grad_norm": None})
            if adapt_lr:
                if moved:                                # this minibatch's KL sets the rate of its own step
                    lr = kl_adaptive_lr(lr, stats["approx_kl"], cfg.kl_old_target)
            elif cfg.kl_old_target is not None and stats["approx_kl"] > cfg.kl_old_target:
                early_stop = epoch                       # this minibatch is not applied, nor any after it
                break
            if cfg.ratio_threshold is not None and stats["ratio_mean"] > cfg.ratio_threshold:
                skipped += 1                             # a minibatch whose policy has drifted too far
                continue
            # one global norm over actor and critic (clipped unless max_grad_norm is None), then an AdamW step for each
            grads = {**{"actor." + k: g for k, g in g_actor.items()}, **{"critic." + k: g for k, g in g_critic.items()}}
            norm = global_norm(grads) if cfg.max_grad_norm is None else clip_grad_norm(grads, cfg.max_grad_norm)
            check_finite_values({"policy/grad_norm": norm}, f"at iteration {it}, epoch {epoch}")
            history[-1]["grad_norm"] = norm
            state.opt_actor.step(g_actor, lr=lr)
            moved, lr_max = True, max(lr_max, lr)
            if state.opt_critic is not None:
                state.opt_critic.step(g_critic, lr=critic_lr)
        if early_stop is not None:
            break
    record = update_metrics(history, early_stop=early_stop, skipped=skipped, max_grad_norm=cfg.max_grad_norm)
    record["lr"], record["lr_max"] = lr, lr_max
    if adapt_lr:
        state.kl_old_lr = lr                         # the next iteration starts from here
    # 6. beta for the next iteration, from this rollout's KL per response (objective/kl)
    state.kl_ctl.update(float(ro.kl.sum(axis=1).mean()), n_steps=cfg.batch_size)
    state.iteration = it + 1
    return record
