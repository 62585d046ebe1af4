"""PPO with the knobs the lessons turn and ``minippo ppo`` exposes: canonical PPO plus each option
below.

Legend: B batch (responses), n samples per prompt, Tn response columns, V vocab.

:mod:`minippo.rlhf.ppo` is the algorithm of Ziegler et al. and InstructGPT and only that. The
lessons measure what happens when one of its choices is changed, and practitioners meet the same
options in TRL and OpenRLHF; each is a field of :class:`KnobsConfig` (a
:class:`~minippo.rlhf.ppo_config.PPOConfig` with more fields) whose default is canonical PPO's
choice, so ``KnobsConfig()`` runs exactly what ``PPOConfig()`` runs. Grouped by the step they change
(and the lesson that measures them):

    optimiser     adam_betas, adam_eps, weight_decay, warmup_iterations, critic_lr
    1. sample     samples_per_prompt (n responses per prompt), top_k, top_p (15: a biased KL)
    2. score      length_penalty, length_bonus, length_norm_alpha (16: length hacking), score_clip
    3. rewards    reward_shaping "uniform" (13), kl_ref_estimator k2 / k3 (15, 22), whiten_rewards
    the critic    critic "shared" (18) or "none" (12), shared_stop_gradient (18), value_norm,
                  value_clip off, critic_bias_init "keep" (16)
    5. update     clip_eps_high, loss_agg, ratio_level, the KL loss (22: as in
                  :mod:`minippo.rlhf.grpo`, whose actor loss this file calls), PPO-ptx (18:
                  InstructGPT eq. (2)), kl_old_action "adapt_lr" (15: the KL-adapted learning
                  rate, Q45), ratio_threshold (TRL)

:func:`knobs_iteration` reads like :func:`minippo.rlhf.ppo.ppo_iteration` with the options in place,
and calls the canonical pieces for the rest. The critic-free advantage estimators are
:mod:`minippo.rlhf.grpo`'s, not options here.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from minippo.checks import (check_choice, check_finite_values, check_float_array, check_mask,
                            check_range)
from minippo.nn.optim import lr_at
from minippo.rl.gae import gae
from minippo.rl.kl import KL_KINDS, kl_estimate
from minippo.rl.kl_control import KL_LR_MAX, KL_LR_MIN, kl_adaptive_lr
from minippo.rl.loss_variants import aggregated_clipped_value_loss, aggregated_value_loss
from minippo.rl.losses import logprobs_from_logits
from minippo.rl.masked import LOSS_AGGS, masked_whiten
from minippo.rlhf.critic import ValueNorm, init_bias_to_mean_score
from minippo.rlhf.data.batches import lm_batch
from minippo.rlhf.generate import generate
from minippo.rlhf.grpo import RATIO_LEVELS, actor_loss
from minippo.rlhf.ppo import (PPOState, Rollout, backward_response, epoch_minibatches,
                              forward_response, optimizer_step, per_token_rewards,
                              response_logprobs)
from minippo.rlhf.ppo_config import ADAM, PPOConfig, check_config
from minippo.rlhf.reward_model import has_eos, last_token_index, sequence_scores

SHAPINGS = ("kl_final", "uniform")
CRITICS = ("separate", "shared", "none")
CRITIC_BIAS_INITS = ("mean_score", "keep")
KL_OLD_ACTIONS = ("early_stop", "adapt_lr")


@dataclass
class KnobsConfig(PPOConfig):
    """Canonical PPO's fields (:class:`~minippo.rlhf.ppo_config.PPOConfig`) and the knobs of the
    module docstring; every default is canonical PPO's choice."""

    # ---- optimiser --------------------------------------------------------------------------
    adam_betas: tuple = ADAM["betas"]
    """Adam's (beta1, beta2), each in [0, 1)."""
    adam_eps: float = ADAM["eps"]
    """Adam's epsilon, > 0 (1e-8 as in PyTorch; 1e-5 in CleanRL)."""
    weight_decay: float = ADAM["weight_decay"]
    """AdamW decoupled weight decay, >= 0 (0 in TRL's PPO)."""
    warmup_iterations: int = 0
    """Iterations of linear lr warm-up (``lr * (it + 1) / warmup_iterations``) before
    ``lr_schedule`` takes over, for actor and critic; 0 = none; in [0, iterations)."""
    critic_lr: float | None = None
    """Adam learning rate of a separate critic; None = ``lr``; >= 0."""

    # ---- 1. sampling ------------------------------------------------------------------------
    samples_per_prompt: int = 1
    """Responses per prompt (rows of one prompt contiguous); must divide ``batch_size``; >= 1."""
    top_k: int = 0
    """Sample among the k most probable tokens only (0 = off); >= 0. Not off biases the KL (lesson
    15)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1] (1 = off)."""

    # ---- 2-3. score and rewards -------------------------------------------------------------
    length_penalty: float = 0.0
    """Subtracted from the score per response token (EOS included): a fix for length hacking; >= 0.
    """
    length_bonus: float = 0.0
    """Added to the score per response token: a deliberately length-biased reward, lesson 16's
    ablation of length hacking (a real run leaves it 0); >= 0."""
    length_norm_alpha: float = 0.0
    """Divide the score (after the length terms, before the missing-EOS penalty) by n_tokens **
    alpha (0.5: the division by length^0.5 of lesson 16); 0 = off; >= 0."""
    score_clip: float | None = None
    """Clip the final score to [-score_clip, score_clip] (None = off); > 0."""
    reward_shaping: str = "kl_final"
    """``"kl_final"``: the score on the last valid token (canonical); ``"uniform"``: score / n on
    every valid token (Q35, lesson 13)."""
    kl_ref_estimator: str = "k1"
    """Per-token KL in the reward: ``"k1"`` logp - logp_ref (canonical), ``"k2"``, ``"k3"``. With k1
    (on-policy) the reward's policy gradient is exactly -beta grad KL(pi || pi_ref); with k2 or k3
    it is not (lesson 22; :mod:`minippo.rl.kl`)."""
    whiten_rewards: bool = False
    """Whiten the per-token rewards over the batch's valid tokens, keeping their mean (TRL)."""

    # ---- the critic -------------------------------------------------------------------------
    critic: str = "separate"
    """``"separate"`` TinyGPT critic (canonical), ``"shared"`` value head on the actor's trunk,
    ``"none"`` (values 0: GAE on the rewards alone)."""
    critic_bias_init: str = "mean_score"
    """``"mean_score"``: at the first rollout shift the value head bias so the mean value over valid
    tokens equals the mean score (canonical, Q48); ``"keep"``: leave it."""
    shared_stop_gradient: bool = True
    """Shared critic only: the value loss does not flow into the actor's trunk (Q59)."""
    value_norm: bool = False
    """Normalise the critic's targets with running mean/std of the returns (PopArt; Q46)."""
    value_clip: bool = True
    """Clip the new values around the rollout's (canonical); False: the plain squared error."""

    # ---- 5. the update ----------------------------------------------------------------------
    clip_eps_high: float | None = None
    """eps_high of DAPO's asymmetric band (:class:`minippo.rlhf.grpo.GRPOConfig`); None =
    ``clip_eps``."""
    loss_agg: str = "token-mean"
    """The aggregation of the policy, value, entropy and KL terms
    (:class:`minippo.rlhf.grpo.GRPOConfig`)."""
    ratio_level: str = "token"
    """``"token"`` (PPO) or ``"sequence"`` (GSPO; :class:`minippo.rlhf.grpo.GRPOConfig`)."""
    kl_ref_loss_coef: float = 0.0
    """Weight of a KL(pi || pi_ref) LOSS term besides the KL in the reward; >= 0, 0 disables it."""
    kl_ref_loss_estimator: str = "k3"
    """Its per-token estimator (``"k1"``, ``"k2"``, ``"k3"``; :mod:`minippo.rl.kl`)."""
    ptx_coef: float = 0.0
    """PPO-ptx: weight of the language-model loss on corpus text added to every minibatch loss
    (InstructGPT eq. (2)'s gamma); >= 0, 0 disables it."""
    ptx_batch_size: int = 16
    """Corpus sentences per minibatch for PPO-ptx; >= 1."""
    kl_old_action: str = "early_stop"
    """What ``kl_old_target`` does (Q43, Q45). ``"early_stop"`` (canonical). ``"adapt_lr"``: every
    minibatch is kept and the actor's learning rate follows the KL instead, rsl_rl's rule
    (:func:`minippo.rl.kl_control.kl_adaptive_lr`): lr / 1.5 when the approx KL exceeds 2 x target,
    lr x 1.5 below target / 2, within [1e-5, 1e-2], set before that minibatch's step from the
    update's second step on (before it pi is pi_old and the KL is rounding) and carried to the next
    iteration. It replaces the schedule: needs ``lr_schedule="constant"``, no warm-up and ``lr`` in
    [1e-5, 1e-2]. Lesson 15."""
    ratio_threshold: float | None = None
    """Skip a minibatch whose mean ratio exceeds this (TRL ``ratio_threshold``, 10 there); None
    disables; > 1."""

    def __post_init__(self):
        super().__post_init__()
        check_config(self, ints={"warmup_iterations": 0, "samples_per_prompt": 1, "top_k": 0,
                                 "ptx_batch_size": 1},
                     positive=("adam_eps",),
                     nonneg=("weight_decay", "length_penalty", "length_bonus", "length_norm_alpha",
                             "kl_ref_loss_coef", "ptx_coef"),
                     optional_positive=("score_clip", "clip_eps_high"),
                     bools=("whiten_rewards", "shared_stop_gradient", "value_norm", "value_clip"),
                     choices={"reward_shaping": SHAPINGS, "kl_ref_estimator": KL_KINDS,
                              "critic": CRITICS,
                              "critic_bias_init": CRITIC_BIAS_INITS, "loss_agg": LOSS_AGGS,
                              "ratio_level": RATIO_LEVELS, "kl_ref_loss_estimator": KL_KINDS,
                              "kl_old_action": KL_OLD_ACTIONS})
        check_range("top_p", self.top_p, 0, 1, lo_open=True)
        check_range("warmup_iterations", self.warmup_iterations, 0, self.iterations, integer=True,
                    hi_open=True)
        if self.critic_lr is not None:
            check_range("critic_lr", self.critic_lr, 0, None)
        if self.ratio_threshold is not None:
            check_range("ratio_threshold", self.ratio_threshold, 1, None, lo_open=True)
        if not (isinstance(self.adam_betas, (tuple, list)) and len(self.adam_betas) == 2):
            raise ValueError(f"`adam_betas` must be a pair (beta1, beta2), got {self.adam_betas!r}")
        self.adam_betas = tuple(self.adam_betas)
        for i, b in enumerate(self.adam_betas):
            check_range(f"adam_betas[{i}]", b, 0, 1, hi_open=True)
        if self.kl_old_action == "adapt_lr":
            # the KL-adapted rate replaces the schedule: it starts at lr and moves within the rule's
            # bounds
            if self.kl_old_target is None:
                raise ValueError("`kl_old_target` must be set when `kl_old_action` is 'adapt_lr' "
                                 "(the KL the "
                                 "rate aims at)")
            if self.lr_schedule != "constant" or self.warmup_iterations:
                raise ValueError(f"`lr_schedule` must be 'constant' and `warmup_iterations` 0 when "
                                 f"`kl_old_action` is 'adapt_lr' (the KL sets the rate), got "
                                 f"{self.lr_schedule!r} and {self.warmup_iterations}")
            check_range("lr", self.lr, KL_LR_MIN, KL_LR_MAX)


@dataclass
class KnobsState(PPOState):
    """:class:`~minippo.rlhf.ppo.PPOState` and what the knobs keep between iterations."""

    value_norm: ValueNorm | None = None     # the identity unless cfg.value_norm
    ptx_sequences: list | None = None       # corpus sentences <bos> ids <eos> for PPO-ptx
    # the actor's lr as the KL set it ("adapt_lr"), None before
    kl_old_lr: float | None = None

    def __post_init__(self):
        if self.value_norm is None:
            self.value_norm = ValueNorm(False)


def value_head(state: KnobsState, cfg: KnobsConfig) -> dict | None:
    """The parameters holding ``scalar_head.w|b`` of the critic (None without a critic)."""
    return {"separate": getattr(state.critic, "params", None),
            "shared": state.actor.params}.get(cfg.critic)


def knobs_iteration(state: KnobsState, cfg: KnobsConfig) -> tuple[Rollout, dict]:
    """:func:`minippo.rlhf.ppo.ppo_iteration` with the knobs of ``cfg``; returns what it returns
    (and the update's ``skipped`` minibatches and ``lr_max``)."""
    # 1-2. num_prompts prompts, samples_per_prompt responses each, scored with the knobs' critic
    prompt_ids, prompt_mask = state.prompts.draw(cfg.num_prompts, state.rng,
                                                 repeat=cfg.samples_per_prompt)
    ro = knobs_rollout(state, cfg, prompt_ids, prompt_mask)
    mask = ro.response_mask
    if state.iteration == 0 and cfg.critic_bias_init == "mean_score" and cfg.critic != "none":
        delta = init_bias_to_mean_score(value_head(state, cfg), ro.values, ro.scores, mask,
                                        state.value_norm.mu_sigma[1])
        ro.values = (ro.values + delta) * mask
    # 3. rewards: the estimator and shaping of cfg, whitened (mean kept) if asked
    beta = state.kl_ctl.value
    ro.rewards, ro.kl, ro.non_score_reward = shaped_rewards(
        ro.scores, ro.logp, ro.logp_ref, mask, beta, kl_kind=cfg.kl_ref_estimator,
        shaping=cfg.reward_shaping)
    if cfg.whiten_rewards:
        ro.rewards = masked_whiten(ro.rewards, mask, shift_mean=False)
    # 4. GAE, whitened; the value normalisation's statistics move with the returns
    ro.adv, ro.returns = gae(ro.rewards, ro.values, mask, gamma=cfg.gamma, lam=cfg.lam)
    if cfg.whiten_advantages:
        ro.adv = masked_whiten(ro.adv, mask)
    state.value_norm.update(ro.returns, mask, value_head(state, cfg))
    # 5. update (the clock reading: the run layer's time/rollout and time/update)
    clock = (time.perf_counter(), time.process_time())
    update = knobs_update(state, ro, cfg)
    # 6. beta
    state.kl_ctl.update(float(ro.kl.sum(axis=1).mean()), n_steps=cfg.batch_size)
    state.iteration += 1
    return ro, {**update, "kl_coef": beta, "clock_update": clock}


def knobs_rollout(state: KnobsState, cfg: KnobsConfig, prompt_ids, prompt_mask) -> Rollout:
    """Steps 1-2 on the prompts (B, Tp) with ``top_k`` / ``top_p``, the critic of ``cfg.critic``
    (values in return units) and the length terms of
    :func:`minippo.rlhf.reward_model.sequence_scores`."""
    gen = generate(state.actor, prompt_ids, prompt_mask, max_new_tokens=cfg.max_new_tokens,
                   rng=state.rng,
                   temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                   eos_id=state.tokenizer.eos_id, pad_id=state.tokenizer.pad_id)
    seqs, attn, Tp, mask = gen.sequences, gen.attn_mask, gen.prompt_len, gen.response_mask
    # (B, Tn, V)
    logits, head, _ = forward_response(state.actor, seqs, attn, Tp, scalar=cfg.critic == "shared")
    logp, _ = logprobs_from_logits(logits, gen.response, cfg.temperature)                  # (B, Tn)
    logp_ref = response_logprobs(state.ref, seqs, attn, gen.response, Tp, cfg.temperature)
    if cfg.critic == "separate":
        _, head, _ = forward_response(state.critic, seqs, attn, Tp, scalar=True, logits=False)
    values = (state.value_norm.denormalise(head) if cfg.critic != "none"
              else np.zeros(mask.shape, dtype=np.float64))                                  # V(s_t)
    rm_scores = state.reward_model.score(seqs, attn)                                          # (B,)
    ended = has_eos(gen.response, mask, state.tokenizer.eos_id)                               # (B,)
    scores = sequence_scores(rm_scores, ended, gen.lengths,
                             missing_eos_penalty=cfg.missing_eos_penalty,
                             length_penalty=cfg.length_penalty, length_bonus=cfg.length_bonus,
                             # (B,)
                             length_norm_alpha=cfg.length_norm_alpha, score_clip=cfg.score_clip)
    check_finite_values({"objective/scores": float(np.sum(scores)),
                         "val/values_avg": float(np.sum(values))},
                        f"at iteration {state.iteration} (rollout)")
    return Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response=gen.response,
                   response_mask=mask,
                   logp=logp, logp_ref=logp_ref, values=values, rm_scores=rm_scores, scores=scores,
                   ended=ended, gen_logp=gen.logp)


def shaped_rewards(scores, logp, logp_ref, mask, kl_coef: float, *, kl_kind: str = "k1",
                   shaping: str = "kl_final"):
    """:func:`minippo.rlhf.ppo.per_token_rewards` with another per-token KL estimate (``kl_kind``:
    k2, k3 of :func:`minippo.rl.kl.kl_estimate`) or the score spread over the tokens
    (``shaping="uniform"``: ``r_t = -kl_coef * kl_t + score / n`` on each of the ``n`` valid tokens;
    lesson 13). Same arguments and returns; k1 with "kl_final" IS ``per_token_rewards``."""
    check_choice("shaping", shaping, SHAPINGS)
    if kl_kind == "k1" and shaping == "kl_final":
        return per_token_rewards(scores, logp, logp_ref, mask, kl_coef)
    mask = check_mask("mask", mask, shape=np.shape(logp), layout="right")
    logp = check_float_array("logp", logp, ndim=2).astype(np.float64)
    logp_ref = check_float_array("logp_ref", logp_ref, shape=logp.shape).astype(np.float64)
    scores = check_float_array("scores", scores, shape=logp.shape[:1])
    check_range("kl_coef", kl_coef, 0, None)
    m = (mask != 0).astype(np.float64)                                   # (B, Tn)
    kl = kl_estimate(logp, logp_ref, kl_kind, mask=m) * m                # (B, Tn) k1, k2 or k3
    non_score_reward = -kl_coef * kl
    rewards = non_score_reward.copy()
    if shaping == "kl_final":
        rewards[np.arange(len(scores)), last_token_index(mask)] += scores
        return rewards, kl, non_score_reward
    n = m.sum(axis=1)                                                    # (B,) valid tokens per row
    if (n == 0).any():
        raise ValueError(f"`mask` row {int(np.argmax(n == 0))} has no valid token: nothing to "
                         "reward")
    rewards += (scores / n)[:, None] * m                         # uniform: score / n on every token
    return rewards, kl, non_score_reward


def knobs_update(state: KnobsState, ro: Rollout, cfg: KnobsConfig) -> dict:
    """Step 5 of :func:`minippo.rlhf.ppo.ppo_update` with warm-up, the critic's own lr, PPO-ptx
    batches (drawn with the state's rng), ``ratio_threshold`` (the minibatch is skipped, the update
    goes on) and ``kl_old_action="adapt_lr"`` (no stop: the KL of each minibatch after the update's
    first step sets the rate of its own step, carried to the next iteration in ``state.kl_old_lr``).
    """
    it, where = state.iteration, f"at iteration {state.iteration}"
    schedule = dict(warmup_steps=cfg.warmup_iterations, schedule=cfg.lr_schedule)
    lr = lr_at(it, cfg.iterations, cfg.lr, **schedule)
    adapt_lr = cfg.kl_old_target is not None and cfg.kl_old_action == "adapt_lr"
    if adapt_lr and state.kl_old_lr is not None:
        lr = state.kl_old_lr                       # where the KL left it (the schedule is constant)
    critic_lr = lr_at(it, cfg.iterations, cfg.lr if cfg.critic_lr is None else cfg.critic_lr,
                      **schedule)
    history, early_stop, skipped, moved, lr_max = [], None, 0, False, 0.0
    for epoch, idx in epoch_minibatches(ro.batch_size, cfg.minibatch_size, cfg.update_epochs,
                                        state.rng):
        ptx_batch = None
        if cfg.ptx_coef > 0:      # ptx_batch_size corpus sentences, drawn with the same rng
            pick = state.rng.integers(0, len(state.ptx_sequences), size=cfg.ptx_batch_size)
            ptx_batch = lm_batch([state.ptx_sequences[i] for i in pick], state.tokenizer.pad_id)
        mb = ro.take(idx)
        terms, stats, g_actor, g_critic = minibatch_loss_and_grads(state, mb, cfg, ptx_batch)
        check_finite_values(terms, f"{where}, epoch {epoch}")
        history.append({**terms, **stats, "grad_norm": None})
        if adapt_lr:
            # this minibatch's KL sets the rate of its own step
            if moved:
                lr = kl_adaptive_lr(lr, stats["approx_kl"], cfg.kl_old_target)
        elif cfg.kl_old_target is not None and stats["approx_kl"] > cfg.kl_old_target:
            early_stop = epoch                     # this minibatch is not applied, nor any after it
            break
        if cfg.ratio_threshold is not None and stats["ratio_mean"] > cfg.ratio_threshold:
            skipped += 1                             # a minibatch whose policy has drifted too far
            continue
        where_epoch = f"{where}, epoch {epoch}"
        history[-1]["grad_norm"] = optimizer_step(state, g_actor, g_critic, lr, critic_lr,
                                                  cfg.max_grad_norm, where_epoch)
        moved, lr_max = True, max(lr_max, lr)
    if adapt_lr:
        state.kl_old_lr = lr                         # the next iteration starts from here
    return {"history": history, "early_stop_epoch": early_stop, "lr": lr, "lr_max": lr_max,
            "skipped": skipped}


def minibatch_loss_and_grads(state: KnobsState, mb: Rollout, cfg: KnobsConfig, ptx_batch=None):
    """:func:`minippo.rlhf.ppo.minibatch_loss_and_grads` with the knobs: the actor's terms of
    :func:`minippo.rlhf.grpo.actor_loss` (band, ratio, aggregation, KL loss), the critic of
    ``cfg.critic`` (its loss in the head's normalised units, clipped or not, aggregated like the
    rest) and PPO-ptx::

        loss = L_pi + c1 L_V - c2 S + ptx_coef * L_LM(corpus) + kl_ref_loss_coef * L_KL

    (PPO-ptx: InstructGPT eq. (2)'s gamma E_{x ~ D_pretrain}[log pi(x)] as a loss.) Returns
    ``(terms, stats, grads_actor, grads_critic)`` as the canonical function does."""
    seqs, attn, Tp, mask = mb.sequences, mb.attn_mask, mb.prompt_len, mb.response_mask
    agg = dict(loss_agg=cfg.loss_agg, norm_len=cfg.max_new_tokens)
    terms, stats, dlogits, head, cache = actor_loss(state, mb, cfg, scalar=cfg.critic == "shared")
    terms.update({"loss/ptx": 0.0, "loss/value": 0.0})
    # the critic: the (clipped) squared error, in the head's (possibly normalised) units
    dhead, vf_clipfrac, grads_critic = None, 0.0, {}
    if cfg.critic != "none":
        if cfg.critic == "separate":
            # (B, Tn)
            _, head, c_cache = forward_response(state.critic, seqs, attn, Tp, scalar=True,
                                                logits=False)
        h64 = head.astype(np.float64)
        vn = state.value_norm                                   # the identity unless cfg.value_norm
        returns, values_old = vn.normalise(mb.returns), vn.normalise(mb.values)
        if cfg.value_clip:
            vf_loss, dh, vstats = aggregated_clipped_value_loss(h64, values_old, returns, mask,
                                                                cfg.clip_eps_value, **agg)
        else:
            vf_loss, dh, vstats = aggregated_value_loss(h64, returns, mask, **agg)
        terms["loss/value"], vf_clipfrac = float(vf_loss), vstats["vf_clipfrac"]
        dhead = (cfg.vf_coef * dh).astype(head.dtype)
        if cfg.critic == "separate":
            grads_critic = backward_response(state.critic, c_cache, dvalues=dhead)
            dhead = None
    # both heads' gradients into the actor's trunk in one backward pass (the value head's only if
    # shared)
    stop = cfg.critic == "shared" and cfg.shared_stop_gradient    # the value loss only in the head
    grads_actor = backward_response(state.actor, cache, dlogits=dlogits, dvalues=dhead,
                                    scalar_into_trunk=not stop)
    if ptx_batch is not None:
        # PPO-ptx: the SFT language-model loss on corpus text, its gradient added with weight
        # ptx_coef
        ptx_loss, g_ptx = state.actor.lm_loss_and_grads(*ptx_batch)
        terms["loss/ptx"] = float(ptx_loss)
        for k, g in g_ptx.items():
            grads_actor[k] += g.dtype.type(cfg.ptx_coef) * g
    terms["loss/total"] = (terms["loss/policy"] + cfg.vf_coef * terms["loss/value"]
                           - cfg.ent_coef * stats["entropy_agg"] + cfg.ptx_coef * terms["loss/ptx"]
                           + cfg.kl_ref_loss_coef * terms["loss/kl"])
    stats = {**stats, "vf_clipfrac": vf_clipfrac}
    return terms, stats, grads_actor, grads_critic
