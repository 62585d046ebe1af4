"""PPO when the sampler is not the trainer, corrected: one iteration read top to bottom.

Legend: B batch (responses), Tp prompt columns, Tn response columns.

Canonical PPO (:mod:`minippo.rlhf.ppo`) samples with the actor itself. Large systems sample with
another engine: logits computed in bf16, or weights k updates stale (asynchronous RL). The rollout's
tokens then come from a behaviour policy mu, and the trainer's recomputed logp_old (pi_old, the
actor at the start of the update) is not log mu. This file is canonical PPO with that mismatch
made on purpose and the correction of TRL / verl applied:

    1. sample   responses ~ mu: the actor k updates stale (``stale_k``), its logits rounded
                (``logits_precision``); ``Generation.logp_sampler`` = log mu(token)
    2. score    as ppo.score: V, logp_old = log pi_old (one full forward pass of the actor),
                logp_ref, the score
    3-4.        rewards and GAE advantages, as ppo_iteration
    w.          w_t = off_policy_weights(logp_old, logp_sampler, mode, level, cap): pi_old / mu,
                none / truncated / masked, per token or per response (minippo.rl.off_policy)
    5. update   ppo_update on the advantages w_t A_t: since w_t >= 0 is a constant,
                w min(r A, clip(r) A) = min(r (w A), clip(r) (w A)), so each minibatch's L^CLIP
                is the corrected loss -(1/n) sum_t w_t min(r_t A_t, clip(r_t) A_t)
    6. beta     as ppo_iteration

The ratio r = pi_theta / pi_old in the clip and the weight pi_old / mu is AReaL's decoupled PPO
(Fu et al. 2025, arXiv:2505.24298; ``minippo.rl.off_policy.decoupled_policy_loss``), pi_old its
proximal policy; TRL's ``vllm_importance_sampling_correction`` multiplies the same per-token loss
by the same truncated or masked pi_old / mu (docs/to_trl.md, "Off-policy corrections").
With ``correction="none"`` and no mismatch (``stale_k=0``, ``logits_precision=None``) the
iteration computes bitwise what :func:`minippo.rlhf.ppo.ppo_iteration` computes (w = 1.0
exactly; tested).

The stale versions live in the state (:class:`CorrectedState`); they are not checkpointed, so a
run with ``stale_k > 0`` cannot resume (a ``ValueError`` says so).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, fields

import numpy as np

from minippo.checks import check_choice, check_range
from minippo.rl.gae import gae
from minippo.rl.masked import masked_whiten
from minippo.rl.off_policy import LEVELS, MODES, off_policy_weights
from minippo.rlhf.critic import init_bias_to_mean_score
from minippo.rlhf.generate import LOGIT_PRECISIONS, generate
from minippo.rlhf.ppo import (PPOState, Rollout, forward_response, per_token_rewards, ppo_update,
                              score)
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.stale import StalePolicy


@dataclass
class CorrectedConfig(PPOConfig):
    """Canonical PPO's fields (:class:`~minippo.rlhf.ppo_config.PPOConfig`), the sampler's mismatch
    and its correction. The defaults are canonical PPO: no mismatch, no correction."""

    # ---- the sampler (the mismatch) ----------------------------------------------------------
    logits_precision: str | None = None
    """None, or the rounding of the sampler's logits (``generate``'s ``LOGIT_PRECISIONS``:
    ``"float16"``, ``"bfloat16"``, ``"bfloat16-truncate"``), the way a half-precision engine
    computes them."""
    stale_k: int = 0
    """k >= 0: the sampler is the actor k updates earlier (asynchronous RL); 0 = the actor."""

    # ---- the correction ----------------------------------------------------------------------
    correction: str = "none"
    """The weight of each token's L^CLIP term from rho = pi_old / mu (``off_policy_weights``'s
    mode): ``"none"`` (w = 1), ``"is"``, ``"tis"`` (min(rho, C)), ``"mis"`` (rho where
    rho <= C, else 0), ``"icepop"`` (rho where C_low <= rho <= C)."""
    correction_level: str = "token"
    """``"token"`` (rho_t) or ``"sequence"`` (the product over the response, on each token)."""
    correction_cap: float | None = None
    """C > 0 for "tis", "mis", "icepop" (TRL's ``vllm_importance_sampling_cap``, 2 typical);
    None otherwise."""
    correction_cap_low: float | None = None
    """C_low in (0, C) for "icepop" only; None otherwise."""

    def __post_init__(self):
        super().__post_init__()
        if self.logits_precision is not None:
            check_choice("logits_precision", self.logits_precision, LOGIT_PRECISIONS)
        check_range("stale_k", self.stale_k, 0, None, integer=True)
        check_choice("correction", self.correction, MODES)
        check_choice("correction_level", self.correction_level, LEVELS)
        # the bounds each mode takes: off_policy_weights names a wrong or missing one (`cap`,
        # `cap_low`), here by the field's name
        try:
            off_policy_weights(np.zeros(1), np.zeros(1), mode=self.correction, level="token",
                               cap=self.correction_cap, cap_low=self.correction_cap_low)
        except ValueError as exc:
            raise ValueError(re.sub(r"`(cap|cap_low)`", r"`correction_\1`", str(exc))) from None


#: the fields CorrectedConfig adds to PPOConfig: one option group of the commands (``--correction``)
CORRECTION_FIELDS = tuple(f.name for f in fields(CorrectedConfig)
                          if f.name not in PPOConfig.__dataclass_fields__)
#: the metrics a corrected iteration adds to the record (from ``off_policy_weights``'s stats)
OFF_POLICY_GLOSSARY = {
    "off_policy/truncated_frac": "share of the weights' units (tokens, or responses at "
                                 "sequence level) whose pi_old / mu exceeded the cap and was "
                                 "truncated (tis)",
    "off_policy/masked_frac": "share of the units whose weight was masked to 0 (mis, icepop)",
    "off_policy/ess_frac": "effective sample size of the weights over their number, "
                           "(sum w)^2 / (n sum w^2), in (0, 1]",
    "off_policy/weight_mean": "mean weight w over the units (1 without correction)",
    "off_policy/mismatch_kl": "k3 estimate of KL(mu || pi_old) per valid token: how far the "
                              "sampler is from the trainer",
    "off_policy/lag": "updates the sampler is behind the actor (stale_k once reached; 0 without)",
}


@dataclass
class CorrectedState(PPOState):
    """The PPO state and the actor's last ``stale_k + 1`` versions (the sampler is the oldest)."""

    versions: StalePolicy | None = None


@dataclass
class CorrectedRollout(Rollout):
    """The PPO rollout and log mu(token) of the sampler that drew it (B, Tn), 0 on padding."""

    logp_sampler: np.ndarray | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.logp_sampler is not None:
            self.logp_sampler = np.where(self.response_mask != 0, self.logp_sampler, 0)


def corrected_iteration(state: CorrectedState, cfg: CorrectedConfig):
    """Steps 1-6 of the module docstring. Returns the rollout (with ``logp_sampler`` and the
    weighted advantages) and the update as ``ppo_iteration`` does, plus ``off_policy``: the
    weights' statistics (``off_policy_weights``) and ``lag``, the sampler's staleness, of which
    the metrics of :data:`OFF_POLICY_GLOSSARY` are copies."""
    # 1-2. batch_size prompts, one response each from the sampler mu, scored as PPO scores
    ro = sampled_rollout(state, cfg, sampler(state, cfg),
                         *state.prompts.draw(cfg.batch_size, state.rng))
    mask = ro.response_mask
    if state.iteration == 0:
        delta = init_bias_to_mean_score(state.critic.params, ro.values, ro.scores, mask)
        ro.values = (ro.values + delta) * mask
    # 3-4. per-token rewards and GAE advantages, as ppo_iteration
    beta = state.kl_ctl.value
    ro.rewards, ro.kl, ro.non_score_reward = per_token_rewards(ro.scores, ro.logp, ro.logp_ref,
                                                               mask, beta)
    ro.adv, ro.returns = gae(ro.rewards, ro.values, mask, gamma=cfg.gamma, lam=cfg.lam)
    if cfg.whiten_advantages:
        ro.adv = masked_whiten(ro.adv, mask)
    # w. the weights pi_old / mu, constants: the advantage of each token becomes w_t A_t
    w, wstats = off_policy_weights(ro.logp, ro.logp_sampler, mask, mode=cfg.correction,
                                   level=cfg.correction_level, cap=cfg.correction_cap,
                                   cap_low=cfg.correction_cap_low)
    ro.adv = w * ro.adv
    # 5. update: PPO's, on the weighted advantages
    clock = (time.perf_counter(), time.process_time())
    update = ppo_update(state, ro, cfg)
    # 6. beta for the next iteration; the new actor joins the versions the sampler comes from
    state.kl_ctl.update(float(ro.kl.sum(axis=1).mean()), n_steps=cfg.batch_size)
    state.iteration += 1
    lag = 0
    if cfg.stale_k:
        lag = state.versions.lag
        state.versions.push(state.actor)
    stats = {**wstats, "lag": lag}
    return ro, {**update, "kl_coef": beta, "clock_update": clock, "off_policy": stats,
                **{k: stats[k.split("/")[1]] for k in OFF_POLICY_GLOSSARY}}


def sampler(state: CorrectedState, cfg: CorrectedConfig):
    """The model that samples this iteration: the actor, or with ``cfg.stale_k`` = k > 0 the oldest
    of the state's versions (k updates behind once k updates have happened; the starting actor,
    version 0, pushed at iteration 0). A ``ValueError`` when a resumed run has lost them."""
    if not isinstance(state, CorrectedState):
        raise ValueError(f"`state` must be a CorrectedState, got {type(state).__name__}")
    if cfg.stale_k == 0:
        return state.actor
    if state.iteration == 0:                         # a fresh run: the starting actor is version 0
        state.versions = StalePolicy(cfg.stale_k)
        state.versions.push(state.actor)
    v = state.versions
    if v is None or v.k != cfg.stale_k or v.lag < min(state.iteration, cfg.stale_k):
        raise ValueError(f"`stale_k` = {cfg.stale_k}: the actor's versions of the last "
                         f"{cfg.stale_k} iterations are not in the state at iteration "
                         f"{state.iteration} (they are not checkpointed: a run with a stale "
                         "sampler cannot resume)")
    return v.sampler


def sampled_rollout(state: PPOState, cfg: CorrectedConfig, sampler, prompt_ids,
                    prompt_mask) -> CorrectedRollout:
    """Steps 1-2 as ``ppo.rollout``, the responses drawn by ``sampler`` (a TinyGPT) with the logits
    rounded to ``cfg.logits_precision``; the rollout keeps the sampler's log mu."""
    gen = generate(sampler, prompt_ids, prompt_mask, max_new_tokens=cfg.max_new_tokens,
                   rng=state.rng, temperature=cfg.temperature, eos_id=state.tokenizer.eos_id,
                   pad_id=state.tokenizer.pad_id, logits_precision=cfg.logits_precision)
    _, values, _ = forward_response(state.critic, gen.sequences, gen.attn_mask, gen.prompt_len,
                                    scalar=True, logits=False)                     # (B, Tn) V(s_t)
    ro = score(state, cfg, gen, values.astype(np.float64))
    return CorrectedRollout(**ro.arrays(), logp_sampler=gen.logp_sampler)
