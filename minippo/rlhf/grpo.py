"""The critic-free group family, one iteration read top to bottom: GRPO, Dr. GRPO, RLOO, REINFORCE.

Three models instead of PPO's four: no critic. Each prompt is sampled ``samples_per_prompt`` times
and each response gets ONE advantage from the returns of the other responses to its prompt, on all
its tokens:

    1. sample   B / n prompts, n responses each (rows of a prompt contiguous)       ppo.sample
                (``dynamic_sampling``, DAPO's: drop the groups whose scores are all equal
                and sample B / n more prompts, round after round, until the batch is full)
    2. score    logp_old (actor), logp_ref (reference), score (RM); V = 0           ppo.score
                (``overlong_max_len``: + DAPO's soft overlong punishment R_length, eq. (13))
    3. rewards  r_t = -beta kl_t, the score added on the last token; s = sum_t r_t
    4. A        GRPO       (s - mean_g s) / (std_g s + eps)    Shao et al. 2024 sec. 4.1.2
                Dr. GRPO   s - mean_g s                        Liu et al. 2025 (arXiv:2503.20783)
                RLOO       s - mean of the other n - 1         Ahmadian et al. 2024
                REINFORCE  s - mean of the batch               Williams 1992
    5. update   K epochs x minibatches of the clipped surrogate with the family's options, actor
                only: ``clip_eps_high`` (DAPO's clip-higher, arXiv:2503.14476), ``loss_agg``
                (token-mean, GRPO's 1/|o|, Dr. GRPO's constant), ``ratio_level`` (GSPO's sequence
                ratio, arXiv:2507.18071), ``kl_ref_loss_coef`` (the KL to pi_ref as a loss term,
                DeepSeekMath (Shao et al. 2024, arXiv:2402.03300) eq. (4))
    6. beta     the KL controller of the reward's penalty (fixed 0: GRPO's, its KL in the loss)

Legend: B batch (responses), n group size, Tn response columns, V vocab.

The advantages are not whitened again: GRPO's are normalised per group already, Dr. GRPO drops the
std on purpose, RLOO / REINFORCE keep the score's units (and whitening over tokens would shift a
group's zero-mean advantages by a length-weighted constant). The pieces are the canonical ones of
:mod:`minippo.rlhf.ppo` and the formulas of :mod:`minippo.rl` (kernels: as ``ppo.py``'s docstring
says). :func:`grpo_iteration` takes the same state as ``ppo_iteration`` (its critic None) and
returns the same.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from minippo.checks import check_finite_values, check_range
from minippo.nn.optim import lr_at
from minippo.rl.dapo import overlong_penalty, zero_variance_groups, zero_variance_share
from minippo.rl.group_advantages import batch_mean_advantages, grpo_advantages, rloo_advantages
from minippo.rl.kl import KL_KINDS, kl_ref_loss
from minippo.rl.loss_variants import aggregated_policy_loss, sequence_policy_loss
from minippo.rl.losses import (entropy_backward, entropy_from_logq, log_softmax,
                               logprobs_backward, logprobs_from_logq)
from minippo.rl.masked import LOSS_AGGS, aggregation_denominator, masked_aggregate, masked_mean
from minippo.rlhf.generate import join_generations
from minippo.rlhf.ppo import (PPOState, Rollout, backward_response, epoch_minibatches,
                              forward_response, optimizer_step, per_token_rewards, sample, score)
from minippo.rlhf.reward_model import has_eos, sequence_scores
from minippo.rlhf.ppo_config import KL_CONTROLLERS, LR_SCHEDULES, ConfigMethods, check_config

ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce")
#: the metrics an iteration of a group estimator adds to the record (``dynamic_sampling`` or not)
DAPO_GLOSSARY = {
    "dapo/zero_variance_share": "share of the prompt groups drawn whose scores are all equal "
                                "(no signal in the score; with dynamic sampling: of every "
                                "round's groups)",
    "dapo/extra_samples": "responses sampled beyond batch_size by dynamic sampling (0 without it)",
    "dapo/overlong_penalty": "mean of DAPO's soft overlong punishment R_length over the batch, in "
                             "[-1, 0] (logged with overlong_max_len set)",
    "dapo/overlong_share": "share of the batch's responses with R_length < 0 (overlong_max_len "
                           "set)",
}
RATIO_LEVELS = ("token", "sequence")
GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo")       # compare responses to one prompt: n >= 2


@dataclass
class GRPOConfig(ConfigMethods):
    """Hyperparameters of the critic-free family; a field of the same name as one of
    :class:`~minippo.rlhf.ppo_config.PPOConfig` means the same (its docstring there). Defaults:
    PPO's where they share a name (the KL penalty in the reward, adaptive), GRPO's advantages in
    groups of 4."""

    iterations: int = 60
    """Number of iterations (rollout + update); >= 1."""
    seed: int = 0
    """Seed of the one ``np.random.Generator`` (prompts, sampling, shuffles); >= 0."""
    checkpoint_every: int = 10
    """Save a checkpoint every this many iterations (and at the end); >= 1."""
    batch_size: int = 64
    """Responses sampled per iteration: ``batch_size // samples_per_prompt`` prompts; >= 1."""
    samples_per_prompt: int = 4
    """n, responses per prompt (TRL ``num_generations``); >= 2 for GRPO / Dr. GRPO / RLOO; divides
    ``batch_size``."""
    max_new_tokens: int = 24
    """Longest response in tokens (the EOS included); also Dr. GRPO's constant normaliser."""
    temperature: float = 1.0
    """Sampling temperature, > 0, applied to every distribution (one temperature everywhere)."""
    lr: float = 1e-4
    """Adam learning rate of the actor; >= 0."""
    lr_schedule: str = "linear"
    """``"constant"`` or ``"linear"`` (decay towards 0: lr / iterations at the last iteration)."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clip of the actor, > 0; None = no clipping."""
    update_epochs: int = 4
    """K, passes over each rollout batch (GRPO's mu); >= 1."""
    minibatch_size: int = 16
    """Responses per Adam step; must divide ``batch_size``."""
    advantage_estimator: str = "grpo"
    """``"grpo"``, ``"dr_grpo"`` (no division by the group's std), ``"rloo"`` (leave-one-out mean)
    or ``"reinforce"`` (the batch mean): the module docstring, :mod:`minippo.rl.group_advantages`.
    """
    clip_eps: float = 0.2
    """eps_low of the clip band [1 - clip_eps, 1 + clip_eps_high]; > 0."""
    clip_eps_high: float | None = None
    """eps_high of DAPO's asymmetric band (0.28 there: a rare token with A > 0 can grow more, which
    keeps entropy up); None = ``clip_eps``; > 0. Lesson 22."""
    ratio_level: str = "token"
    """``"token"``: r_t = pi / pi_old per token; ``"sequence"``: GSPO's (pi(y) / pi_old(y))^(1/|y|),
    clipped per response (:func:`minippo.rl.loss_variants.sequence_policy_loss`). Lesson 22."""
    loss_agg: str = "token-mean"
    """How the per-token terms become one loss (verl ``loss_agg_mode``, TRL ``loss_type``):
    ``"token-mean"`` (DAPO), ``"seq-mean-token-mean"`` (GRPO's 1/|o|) or
    ``"seq-mean-token-sum-norm"`` (Dr. GRPO's constant, ``max_new_tokens``):
    :func:`minippo.rl.masked.aggregation_denominator`. Lesson 22."""
    ent_coef: float = 0.0
    """c2, weight of the entropy bonus; >= 0."""
    kl_ref_loss_coef: float = 0.0
    """beta of the KL(pi || pi_ref) LOSS term (GRPO: 0.04 with ``kl_ref_coef`` 0); >= 0, 0 disables
    it."""
    kl_ref_loss_estimator: str = "k3"
    """Its per-token estimator, differentiated as it stands (:mod:`minippo.rl.kl`): ``"k3"`` (GRPO),
    ``"k2"`` or ``"k1"`` (zero gradient on-policy). Lesson 22."""
    missing_eos_penalty: float = 1.0
    """Subtracted from the score of a response without EOS; >= 0."""
    kl_ref_controller: str = "adaptive"
    """The controller of beta in the reward's penalty: ``"fixed"``, ``"adaptive"`` or
    ``"ppo_paper"``."""
    kl_ref_coef: float = 0.2
    """beta of the KL penalty in the reward (initial value); >= 0 (0 with ``"fixed"``: none,
    GRPO's)."""
    kl_ref_target: float = 4.0
    """Target of the adaptive controller, nats per response; > 0."""
    kl_ref_horizon: float = 1000.0
    """Adaptive controller horizon in responses; > 0."""
    kl_old_target: float | None = None
    """Approx KL(pi_old || pi) of a minibatch that stops the update; None disables."""
    dynamic_sampling: bool = False
    """DAPO's "Dynamic Sampling" (Yu et al. 2025, arXiv:2503.14476): drop every group whose
    n scores are all equal (no signal in the score; its advantages are all 0 when the KL is not in
    the reward, ``kl_ref_coef`` 0: :func:`minippo.rl.dapo.zero_variance_groups`)
    and sample ``batch_size // samples_per_prompt`` more prompts until the batch is full of groups
    that carry a signal; needs a group estimator. False: one round, as GRPO."""
    dynamic_max_rounds: int = 3
    """The cap on dynamic sampling: at most this many extra rounds of sampling per iteration (verl's
    cap: ``filter_groups.max_num_gen_batches``); >= 0. A batch still short at the cap is completed
    with dropped groups, the first drawn first (no signal in their scores)."""
    overlong_max_len: int | None = None
    """L_max of DAPO's soft overlong punishment R_length(|y|) (Yu et al. 2025, eq. (13)), added to
    each response's score before the advantages: 0 up to L_max - L_cache tokens, down to -1 at
    L_max, -1 beyond; >= 1 (DAPO: the longest response, ``max_new_tokens``); None = off.
    :func:`minippo.rl.dapo.overlong_penalty`."""
    overlong_cache_len: int = 0
    """L_cache, the soft zone before ``overlong_max_len``, in [0, overlong_max_len] (0: only -1
    beyond L_max); 0 when the punishment is off."""

    def __post_init__(self):
        check_config(self, ints={"iterations": 1, "seed": 0, "checkpoint_every": 1, "batch_size": 1,
                                 "samples_per_prompt": 1, "max_new_tokens": 1, "update_epochs": 1,
                                 "minibatch_size": 1, "dynamic_max_rounds": 0,
                                 "overlong_cache_len": 0},
                     positive=("temperature", "clip_eps", "kl_ref_target", "kl_ref_horizon"),
                     nonneg=("lr", "ent_coef", "kl_ref_loss_coef", "missing_eos_penalty",
                             "kl_ref_coef"),
                     bools=("dynamic_sampling",),
                     optional_positive=("max_grad_norm", "kl_old_target", "clip_eps_high"),
                     choices={"lr_schedule": LR_SCHEDULES, "advantage_estimator": ESTIMATORS,
                              "ratio_level": RATIO_LEVELS, "loss_agg": LOSS_AGGS,
                              "kl_ref_loss_estimator": KL_KINDS,
                              "kl_ref_controller": KL_CONTROLLERS})
        if self.advantage_estimator in GROUP_ESTIMATORS and self.samples_per_prompt < 2:
            raise ValueError(f"`samples_per_prompt` must be >= 2 for the group estimator "
                             f"{self.advantage_estimator!r} (it compares responses to the same "
                             "prompt)")
        if self.overlong_max_len is not None:
            check_range("overlong_max_len", self.overlong_max_len, 1, None, integer=True)
            check_range("overlong_cache_len", self.overlong_cache_len, 0, self.overlong_max_len)
        elif self.overlong_cache_len != 0:
            raise ValueError(f"`overlong_cache_len` must be 0 while `overlong_max_len` is None "
                             f"(the overlong punishment is off), got {self.overlong_cache_len}")
        if self.dynamic_sampling and self.advantage_estimator not in GROUP_ESTIMATORS:
            raise ValueError(f"`dynamic_sampling` needs a group estimator {GROUP_ESTIMATORS} (it "
                             f"drops whole prompt groups), got {self.advantage_estimator!r}")


def grpo_iteration(state: PPOState, cfg: GRPOConfig) -> tuple[Rollout, dict]:
    """Steps 1-6 of the module docstring on ``state`` (a :class:`~minippo.rlhf.ppo.PPOState` without
    critic); returns the rollout and the update as :func:`minippo.rlhf.ppo.ppo_iteration` does."""
    # 1-2. num_prompts prompts, samples_per_prompt responses each (contiguous rows), scored; no
    # critic: V = 0
    gen, dapo = (dynamic_sample(state, cfg) if cfg.dynamic_sampling else
                 (sample(state, cfg, *state.prompts.draw(cfg.num_prompts, state.rng,
                                                         repeat=cfg.samples_per_prompt)), {}))
    ro = score(state, cfg, gen, np.zeros(gen.response_mask.shape, dtype=np.float64))
    ro.scores, overlong = overlong_shaped(ro.scores, ro.lengths, cfg)       # DAPO eq. (13), if on
    if not dapo and cfg.advantage_estimator in GROUP_ESTIMATORS:     # one round: the batch's share
        dapo = {"dapo/zero_variance_share": zero_variance_share(ro.scores, cfg.samples_per_prompt),
                "dapo/extra_samples": 0}
    # 3. per-token rewards as PPO's; each response's return s is their sum
    beta = state.kl_ctl.value
    ro.rewards, ro.kl, ro.non_score_reward = per_token_rewards(ro.scores, ro.logp, ro.logp_ref,
                                                               ro.response_mask, beta)
    # 4. one advantage per response from its group (or the batch), on each of its tokens
    ro.adv = group_advantages(ro.sequence_returns, ro.response_mask, cfg).astype(np.float64)
    ro.returns = (ro.adv + ro.values) * ro.response_mask
    # 5. update the actor (the clock reading: the run layer's time/rollout and time/update)
    clock = (time.perf_counter(), time.process_time())
    update = grpo_update(state, ro, cfg)
    # 6. beta of the reward's penalty, from this rollout's KL per response
    state.kl_ctl.update(float(ro.kl.sum(axis=1).mean()), n_steps=cfg.batch_size)
    state.iteration += 1
    return ro, {**update, "kl_coef": beta, "clock_update": clock, **dapo, **overlong}


def overlong_shaped(scores, lengths, cfg: GRPOConfig):
    """``(scores + R_length, metrics)``: DAPO's soft overlong punishment (eq. (13),
    :func:`minippo.rl.dapo.overlong_penalty`) of each response's length (B,) added to its score
    (B,), the sequence reward the advantages are computed from, as verl's DAPO reward manager adds
    it (``verl/workers/reward_manager/dapo.py``, ``reward += overlong_reward``); the metrics
    ``dapo/overlong_penalty`` (mean R_length) and ``dapo/overlong_share`` (share of responses with
    R_length < 0). ``(scores, {})`` when ``cfg.overlong_max_len`` is None."""
    if cfg.overlong_max_len is None:
        return scores, {}
    penalty = overlong_penalty(lengths, cfg.overlong_max_len, cfg.overlong_cache_len)   # (B,)
    return scores + penalty, {"dapo/overlong_penalty": float(penalty.mean()),
                              "dapo/overlong_share": float(np.mean(penalty < 0))}


def dynamic_sample(state: PPOState, cfg: GRPOConfig):
    """Step 1 with DAPO's dynamic sampling: rounds of ``num_prompts`` groups, each group's scores
    (the reward model's, less the missing-EOS penalty, plus the overlong punishment when on: what
    the advantages are computed from) tested by
    :func:`~minippo.rl.dapo.zero_variance_groups`; the groups with a signal are kept in the order
    drawn until ``num_prompts`` of them, or ``cfg.dynamic_max_rounds`` extra rounds. Returns the
    batch's :class:`~minippo.rlhf.generate.Generation` and the metrics ``dapo/zero_variance_share``
    (of every group drawn) and ``dapo/extra_samples`` (responses drawn beyond ``batch_size``)."""
    n, G = cfg.samples_per_prompt, cfg.num_prompts
    kept, dropped, zero_seen, rounds = [], [], 0, 0
    while len(kept) < G and rounds <= cfg.dynamic_max_rounds:
        gen = sample(state, cfg, *state.prompts.draw(G, state.rng, repeat=n))
        rm = state.reward_model.score(gen.sequences, gen.attn_mask)                     # (B,)
        ended = has_eos(gen.response, gen.response_mask, state.tokenizer.eos_id)        # (B,)
        scores = sequence_scores(rm, ended, gen.lengths,
                                 missing_eos_penalty=cfg.missing_eos_penalty)           # (B,)
        scores, _ = overlong_shaped(scores, gen.lengths, cfg)      # what the advantages see
        zero = zero_variance_groups(scores, n)                                          # (G,)
        for g in range(G):                                     # group g is rows g*n .. g*n + n - 1
            (dropped if zero[g] else kept).append((gen, np.arange(g * n, (g + 1) * n)))
        zero_seen, rounds = zero_seen + int(zero.sum()), rounds + 1
    batch = (kept + dropped)[:G]              # at the cap: completed with dropped groups, in order
    return join_generations(batch, state.tokenizer.pad_id), {
        "dapo/zero_variance_share": zero_seen / (rounds * G),
        "dapo/extra_samples": (rounds - 1) * cfg.batch_size}


def group_advantages(returns, mask, cfg: GRPOConfig):
    """(B, Tn) advantages of ``cfg.advantage_estimator`` from the responses' returns (B,), 0 on
    padding."""
    n = cfg.samples_per_prompt
    if cfg.advantage_estimator == "grpo":
        return grpo_advantages(returns, n, mask)
    if cfg.advantage_estimator == "dr_grpo":
        return grpo_advantages(returns, n, mask, scale=False)
    if cfg.advantage_estimator == "rloo":
        return rloo_advantages(returns, n, mask)
    return batch_mean_advantages(returns, mask)


def grpo_update(state: PPOState, ro: Rollout, cfg: GRPOConfig) -> dict:
    """Step 5: ``cfg.update_epochs`` passes over ``ro`` in shuffled minibatches, one AdamW step of
    the actor each; a minibatch whose approx KL exceeds ``cfg.kl_old_target`` stops the update (not
    applied)."""
    where = f"at iteration {state.iteration}"
    lr = lr_at(state.iteration, cfg.iterations, cfg.lr, schedule=cfg.lr_schedule)
    history, early_stop = [], None
    for epoch, idx in epoch_minibatches(ro.batch_size, cfg.minibatch_size, cfg.update_epochs,
                                        state.rng):
        mb = ro.take(idx)
        terms, stats, dlogits, _, cache = actor_loss(state, mb, cfg)
        terms["loss/total"] = terms["loss/policy"] - cfg.ent_coef * stats["entropy_agg"] \
            + cfg.kl_ref_loss_coef * terms["loss/kl"]
        check_finite_values(terms, f"{where}, epoch {epoch}")
        history.append({**terms, **stats, "grad_norm": None})
        if cfg.kl_old_target is not None and stats["approx_kl"] > cfg.kl_old_target:
            early_stop = epoch                     # this minibatch is not applied, nor any after it
            break
        g_actor = backward_response(state.actor, cache, dlogits=dlogits)
        where_epoch = f"{where}, epoch {epoch}"
        history[-1]["grad_norm"] = optimizer_step(state, g_actor, {}, lr, lr, cfg.max_grad_norm,
                                                  where_epoch)
    return {"history": history, "early_stop_epoch": early_stop, "lr": lr}


def actor_loss(state: PPOState, mb: Rollout, cfg, *, scalar: bool = False):
    """The actor's part of one minibatch with the family's options (module docstring, step 5), also
    used by :mod:`minippo.rlhf.ppo_knobs`::

        L_pi  = -agg(min(r A, clip(r, 1-eps, 1+eps_high) A))   r per token, or GSPO's s_b
        S     = agg(H[pi(.|s_t)])                               the entropy bonus (weight c2)
        L_KL  = agg(k(pi, pi_ref))                              weight kl_ref_loss_coef

    ``agg`` is ``cfg.loss_agg`` for every term. Returns ``(terms, stats, dlogits, head, cache)``:
    the loss terms, the statistics (``entropy`` per token whatever ``agg``, ``entropy_agg`` the
    aggregated one), d(L_pi - c2 S + beta L_KL) / d logits (B, Tn, V), the actor's scalar head
    (``scalar``) and its cache."""
    mask = mb.response_mask
    agg = dict(loss_agg=cfg.loss_agg, norm_len=cfg.max_new_tokens)
    logits, head, cache = forward_response(state.actor, mb.sequences, mb.attn_mask, mb.prompt_len,
                                           scalar=scalar)
    logq = log_softmax(logits, cfg.temperature)        # (B, Tn, V) log pi(.|s_t), for both terms
    probs = np.exp(logq)                               # (B, Tn, V) pi(.|s_t)
    logp, c_logp = logprobs_from_logq(logq, probs, mb.response, cfg.temperature)           # (B, Tn)
    policy_loss = sequence_policy_loss if cfg.ratio_level == "sequence" else aggregated_policy_loss
    pg_loss, dlogp, pstats = policy_loss(logp, mb.logp.astype(logp.dtype),
                                         mb.adv.astype(logp.dtype), mask,
                                         cfg.clip_eps, cfg.clip_eps_high, **agg)
    ent, c_ent = entropy_from_logq(logq, probs, cfg.temperature)                           # (B, Tn)
    ent_agg = masked_aggregate(ent, mask, **agg)
    terms = {"loss/policy": pg_loss, "loss/entropy": -ent_agg, "loss/kl": 0.0}
    if cfg.kl_ref_loss_coef > 0:
        # KL(pi || pi_ref) as a loss: kl_ref_loss_coef * agg(k) (what each estimator's gradient
        # estimates: minippo.rl.kl); k3's gradient per token is 1 - pi_ref / pi
        _, dkl, kstats = kl_ref_loss(logp, mb.logp_ref.astype(logp.dtype), mask,
                                     cfg.kl_ref_loss_coef,
                                     cfg.kl_ref_loss_estimator, **agg)
        terms["loss/kl"] = kstats["kl"]
        dlogp = dlogp + dkl
    dlogits = logprobs_backward(dlogp.astype(logits.dtype), c_logp)                     # (B, Tn, V)
    if cfg.ent_coef > 0:
        # -c2 agg(H): d/dH = -c2 / d on each valid token (d = n for token-mean)
        dent = -cfg.ent_coef * (mask != 0) / aggregation_denominator(mask, **agg)
        dlogits += entropy_backward(dent.astype(logits.dtype), c_ent)
    stats = {k: pstats[k] for k in ("approx_kl", "clipfrac", "ratio_mean", "ratio_min",
                                    "ratio_max")}
    stats.update(entropy=masked_mean(ent, mask), entropy_agg=ent_agg)
    return {k: float(v) for k, v in terms.items()}, stats, dlogits, head, cache

