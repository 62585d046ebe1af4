"""One RLHF PPO iteration, read top to bottom: PPO paper Algorithm 1, a language model the policy.

The algorithm of Ziegler et al. 2019 (arXiv:1909.08593) and InstructGPT (arXiv:2203.02155) and only
that (other algorithms are files of their own: grpo.py, ppo_knobs.py, dpo.py):

    1. sample   responses ~ pi_old(.|prompt), the actor's KV cache                    sample
    2. score    V(s_t) (critic), logp_old (actor), logp_ref (reference), score (RM)    score
    3. rewards  r_t = -beta (logp_t - logp_ref_t), the score added on the last token
                                                                        InstructGPT eq. (2)
    4. A_t      GAE(gamma, lam) on those rewards, whitened                   PPO eqs. (11)-(12)
    5. update   K epochs x minibatches of -L^CLIP + c1 L^VF - c2 S, one AdamW step each; a
                minibatch whose approx KL to pi_old exceeds kl_old_target stops the update  eq. (9)
    6. beta     the KL controller (fixed or adaptive) reads objective/kl    Ziegler et al. sec. 2.2

Legend: B batch (responses), Tp prompt columns (left-padded), Tn response columns (right-padded),
T = Tp + Tn, V vocab.

The four models: the actor pi_theta and the critic V_phi (a separate TinyGPT) train; the reference
pi_ref (the frozen SFT copy) and the reward model only run forward. One temperature: sampling,
logp_old, logp_ref, the update's logp and the entropy all use ``cfg.temperature``.

**Compiled code.** With ``MINIPPO_KERNELS=1`` (the default) these run numba kernels: the token
draw inside ``generate`` (``rlhf/_kernels.py``), ``gae`` and ``clipped_policy_loss``
(``rl/_kernels.py``), inside every TinyGPT forward and backward LayerNorm, GELU, the masked softmax
and the embedding's backward, and AdamW's update in ``optimizer_step`` (``nn/_kernels.py``; the
cross-entropy kernel serves SFT's loss, which one PPO iteration does not compute).
``MINIPPO_KERNELS=0`` runs the NumPy formulas you read in their files instead, all of them
(:mod:`minippo.kernels`; the numbers agree to rounding); ``NUMBA_DISABLE_JIT=1`` keeps the kernels
but runs them as Python, for pdb.

Position alignment, written once (:func:`forward_response`): the logits and the value at column p
belong to the token at column p + 1, so response token j (column Tp + j) is read at column
Tp + j - 1::

    column       Tp-2   Tp-1 | Tp    Tp+1   Tp+2
    token        p      p    | r0    r1     EOS      (then padding)
    read at             ^      ^     ^               logits / value for r0, r1, EOS

logp_old is recomputed with one full forward pass after sampling (as TRL does), not taken from the
sampler: with lr = 0 the first ratio of the update is 1 (to float32 rounding across minibatch
shapes; lesson 16). No timers, files or metrics here: ``minippo.rlhf.run.trainer.PPOTrainer``
calls :func:`ppo_iteration` once per iteration and does those. The data the steps fill close the
file: the experience buffer :class:`Rollout` (the per-token 7-tuple, Q25), the run's prompts
(:class:`PromptTable`) and the minibatch shuffle (:func:`epoch_minibatches`).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, fields, replace

import numpy as np

from minippo.checks import check_finite_values, check_float_array, check_mask, check_range
from minippo.io import save_npz
from minippo.nn.gpt import TinyGPT
from minippo.nn.optim import AdamW, clip_grad_norm, global_norm, lr_at
from minippo.rl.gae import gae
from minippo.rl.losses import (clipped_policy_loss, clipped_value_loss, entropy_backward,
                               entropy_from_logq, log_softmax, logprobs_backward,
                               logprobs_from_logits, logprobs_from_logq)
from minippo.rl.masked import masked_mean, masked_whiten
from minippo.rlhf.critic import init_bias_to_mean_score
from minippo.rlhf.generate import generate
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.reward_model import last_token_index


@dataclass
class PPOState:
    """Everything one iteration reads and changes (``PPOTrainer`` builds, saves and restores it)."""

    actor: TinyGPT                  # pi_theta, trained; starts as a copy of the SFT policy
    ref: TinyGPT                    # pi_ref, the frozen SFT policy
    critic: TinyGPT | None          # V_phi, trained (None in the critic-free family)
    reward_model: object            # RewardModel, frozen: .score(sequences, attn_mask) -> (B,)
    tokenizer: object
    opt_actor: AdamW
    opt_critic: AdamW | None        # over critic.params
    kl_ctl: object                  # beta's controller: .value, .update(kl, n_steps)
    rng: np.random.Generator        # prompts, sampling, minibatch shuffles
    iteration: int = 0
    prompts: PromptTable | None = None   # the run's prompts, tokenized once


def ppo_iteration(state: PPOState, cfg: PPOConfig) -> tuple[Rollout, dict]:
    """Steps 1-6 of the module docstring (PPO paper Algorithm 1). Returns the rollout (rewards and
    advantages filled) and the update: ``history`` (one dict of loss terms and statistics per
    minibatch), ``early_stop_epoch``, ``lr``, ``kl_coef`` (the beta of this iteration's rewards)."""
    # 1-2. batch_size prompts, one response each, scored by the four models
    ro = rollout(state, cfg, *state.prompts.draw(cfg.batch_size, state.rng))
    mask = ro.response_mask
    if state.iteration == 0:
        # start the critic at the mean score (Q48): its head's bias, and the stored values with it
        delta = init_bias_to_mean_score(state.critic.params, ro.values, ro.scores, mask)
        ro.values = (ro.values + delta) * mask
    # 3. per-token rewards: -beta kl_t on every token, the score added on the last one
    beta = state.kl_ctl.value
    ro.rewards, ro.kl, ro.non_score_reward = per_token_rewards(ro.scores, ro.logp, ro.logp_ref,
                                                               mask, beta)
    # 4. advantages: GAE-lambda (V = 0 after a response's last token), whitened over the batch
    ro.adv, ro.returns = gae(ro.rewards, ro.values, mask, gamma=cfg.gamma, lam=cfg.lam)
    if cfg.whiten_advantages:
        ro.adv = masked_whiten(ro.adv, mask)
    # 5. update (the clock reading: where the run layer splits time/rollout from time/update)
    clock = (time.perf_counter(), time.process_time())
    update = ppo_update(state, ro, cfg)
    # 6. beta for the next iteration, from this rollout's KL per response (objective/kl)
    state.kl_ctl.update(float(ro.kl.sum(axis=1).mean()), n_steps=cfg.batch_size)
    state.iteration += 1
    return ro, {**update, "kl_coef": beta, "clock_update": clock}


# --------------------------------------------------------------------------------------------
# steps 1-3: sample, score with the four models, per-token rewards
# --------------------------------------------------------------------------------------------

def rollout(state: PPOState, cfg: PPOConfig, prompt_ids, prompt_mask) -> Rollout:
    """Steps 1-2 on the prompts (B, Tp), left-padded: one response each from the actor (KV cache),
    then the forward passes of the critic (V), the actor (logp_old), the reference (logp_ref) and
    the reward model (the score)."""
    gen = sample(state, cfg, prompt_ids, prompt_mask)
    _, values, _ = forward_response(state.critic, gen.sequences, gen.attn_mask, gen.prompt_len,
                                    scalar=True, logits=False)                     # (B, Tn) V(s_t)
    return score(state, cfg, gen, values.astype(np.float64))


def sample(state: PPOState, cfg: PPOConfig, prompt_ids, prompt_mask):
    """Step 1: one response per prompt (B, Tp) from the actor with its KV cache (a
    :class:`minippo.rlhf.generate.Generation`)."""
    return generate(state.actor, prompt_ids, prompt_mask, max_new_tokens=cfg.max_new_tokens,
                    rng=state.rng, temperature=cfg.temperature, eos_id=state.tokenizer.eos_id,
                    pad_id=state.tokenizer.pad_id)


def score(state: PPOState, cfg: PPOConfig, gen, values) -> Rollout:
    """Step 2 on the responses of ``gen``, the critic's ``values`` (B, Tn) given: logp_old and
    logp_ref (one full forward pass each), the reward model's score less the missing-EOS penalty."""
    seqs, attn, Tp, mask = gen.sequences, gen.attn_mask, gen.prompt_len, gen.response_mask
    logp = response_logprobs(state.actor, seqs, attn, gen.response, Tp, cfg.temperature)
    logp_ref = response_logprobs(state.ref, seqs, attn, gen.response, Tp, cfg.temperature)
    rm_scores = check_float_array("rm_scores", state.reward_model.score(seqs, attn),
                                  shape=seqs.shape[:1])                             # (B,)
    # a response cut at max_new_tokens without its EOS is not a finished answer: penalised
    scores = rm_scores - cfg.missing_eos_penalty * ~gen.ended                       # (B,)
    check_finite_values({"objective/scores": float(np.sum(scores)),
                         "val/values_avg": float(np.sum(values))},
                        f"at iteration {state.iteration} (rollout)")
    return Rollout(prompt_ids=seqs[:, :Tp].copy(), prompt_mask=attn[:, :Tp].copy(),
                   response=gen.response, response_mask=mask, logp=logp, logp_ref=logp_ref,
                   values=values, rm_scores=rm_scores, scores=scores, ended=gen.ended,
                   gen_logp=gen.logp)


def forward_response(model, sequences, attn_mask, prompt_len: int, *, scalar: bool = False,
                     logits: bool = True):
    """``(logits (B, Tn, V) or None, values (B, Tn) or None, cache)`` of ``model`` at the columns
    that predict the response tokens (Tp - 1 .. T - 2: the module docstring); the last token is
    never an input. ``scalar``: the values head; ``logits=False``: no LM head (a critic)."""
    lm_logits, values, cache = model.forward(sequences[:, :-1], attn_mask[:, :-1], scalar=scalar,
                                             logits=logits)
    cols = slice(prompt_len - 1, None)
    response_logits = lm_logits[:, cols] if logits else None                  # (B, Tn, V)
    response_values = values[:, cols] if scalar else None                     # (B, Tn)
    return response_logits, response_values, (cache, prompt_len, sequences[:, :-1].shape)


def response_logprobs(model, sequences, attn_mask, response, prompt_len: int,
                      temperature: float = 1.0):
    """(B, Tn) ``log_softmax(logits / temperature)`` of ``model`` at the response tokens (padding
    columns hold meaningless finite numbers: multiply by the response mask)."""
    logits, _, _ = forward_response(model, sequences, attn_mask, prompt_len)
    return logprobs_from_logits(logits, response, temperature)[0]


def backward_response(model, cache, dlogits=None, dvalues=None, *,
                      scalar_into_trunk: bool = True) -> dict:
    """Parameter gradients from d loss / d logits (B, Tn, V) and / or d loss / d values (B, Tn) at
    the response columns: zeros go to the prompt columns, then ``TinyGPT.backward``."""
    model_cache, prompt_len, (B, Tm1) = cache
    cols = slice(prompt_len - 1, None)
    full_dlogits = full_dvalues = None
    if dlogits is not None:
        full_dlogits = np.zeros((B, Tm1, dlogits.shape[-1]), dtype=dlogits.dtype)   # (B, T-1, V)
        full_dlogits[:, cols] = dlogits
    if dvalues is not None:
        full_dvalues = np.zeros((B, Tm1), dtype=dvalues.dtype)           # (B, T-1)
        full_dvalues[:, cols] = dvalues
    return model.backward(model_cache, dlogits=full_dlogits, dscalar=full_dvalues,
                          scalar_into_trunk=scalar_into_trunk)


def per_token_rewards(scores, logp, logp_ref, mask, kl_coef: float):
    """Per-token rewards: Ziegler et al. 2019 eq. (2) and InstructGPT eq. (2),
    R = score - beta log(pi / pi_ref), written token by token (a response's log-ratio is the sum of
    its per-token kl_t)::

        kl_t = logp_t - logp_ref_t               (k1)
        r_t  = -kl_coef * kl_t                   on every valid token
        r_T += score                             on the LAST valid token T (the EOS if there is one)

    For the response ``[t0, t1, EOS, PAD, PAD]`` (mask ``[1, 1, 1, 0, 0]``)::

        position   0           1           2                 3    4
        reward     -b kl_0     -b kl_1     -b kl_2 + score   0    0

    Parameters: ``scores`` (B,) sequence scores; ``logp``, ``logp_ref`` (B, Tn) log pi_old and log
    pi_ref of the sampled tokens (one temperature); ``mask`` (B, Tn) 0/1, right-padded; ``kl_coef``
    beta >= 0. Returns ``rewards``, ``kl``, ``non_score_reward`` (-beta kl): (B, Tn) float64, 0 on
    padding.
    """
    mask = check_mask("mask", mask, shape=np.shape(logp), layout="right")
    logp = check_float_array("logp", logp, ndim=2).astype(np.float64)
    logp_ref = check_float_array("logp_ref", logp_ref, shape=logp.shape).astype(np.float64)
    scores = check_float_array("scores", scores, shape=logp.shape[:1])
    check_range("kl_coef", kl_coef, 0, None)
    kl = np.where(mask != 0, logp - logp_ref, 0.0)                      # (B, Tn) k1, 0 on padding
    non_score_reward = -kl_coef * kl                                     # (B, Tn)
    rewards = non_score_reward.copy()
    # the score lands on the last valid token: the EOS when there is one, never the padding after it
    rewards[np.arange(len(scores)), last_token_index(mask)] += scores
    return rewards, kl, non_score_reward


# --------------------------------------------------------------------------------------------
# step 5: K epochs x minibatches of eq. (9)
# --------------------------------------------------------------------------------------------

def ppo_update(state: PPOState, ro: Rollout, cfg: PPOConfig) -> dict:
    """Step 5: ``cfg.update_epochs`` passes over ``ro`` in shuffled minibatches of whole responses.
    Each minibatch's approx KL (k3 of pi_old vs the current pi) is measured in its own forward pass,
    before its step: above ``cfg.kl_old_target`` that minibatch is not applied, nor any after it
    (``early_stop_epoch``). A non-finite loss or gradient norm raises ``ValueError`` naming it
    (nothing is applied after it)."""
    where = f"at iteration {state.iteration}"
    lr = lr_at(state.iteration, cfg.iterations, cfg.lr, schedule=cfg.lr_schedule)
    history, early_stop = [], None
    for epoch, idx in epoch_minibatches(ro.batch_size, cfg.minibatch_size, cfg.update_epochs,
                                        state.rng):
        terms, stats, g_actor, g_critic = minibatch_loss_and_grads(state, ro.take(idx), cfg)
        check_finite_values(terms, f"{where}, epoch {epoch}")
        history.append({**terms, **stats, "grad_norm": None})
        if cfg.kl_old_target is not None and stats["approx_kl"] > cfg.kl_old_target:
            early_stop = epoch                   # this minibatch is not applied, nor any after it
            break
        history[-1]["grad_norm"] = optimizer_step(state, g_actor, g_critic, lr, lr,
                                                  cfg.max_grad_norm, f"{where}, epoch {epoch}")
    return {"history": history, "early_stop_epoch": early_stop, "lr": lr}


def minibatch_loss_and_grads(state: PPOState, mb: Rollout, cfg: PPOConfig):
    """Loss terms, statistics and gradients of one minibatch (nothing is updated)::

        logp  = log_softmax(logits / T)[response]             the rollout's temperature
        L_pi  = -mean_t min(r A, clip(r, 1-eps, 1+eps) A)     L^CLIP, eq. (7), as a loss
        L_V   = 0.5 mean_t max((V - R)^2, (V_clip - R)^2)     clipped around the rollout's V
        S     = mean_t H[pi(.|s_t)]                           the entropy bonus
        loss  = L_pi + c1 L_V - c2 S                          eq. (9), signs for minimisation

    with r = exp(logp - logp_old). Returns ``(terms, stats, grads_actor, grads_critic)``: the loss
    terms (floats), ``approx_kl`` / ``clipfrac`` / the ratio's mean, min and max / ``vf_clipfrac``
    / ``entropy``, and gradient dicts like the parameters."""
    seqs, attn, Tp, mask = mb.sequences, mb.attn_mask, mb.prompt_len, mb.response_mask
    # the actor: L^CLIP and the entropy bonus, their gradient d loss / d logits
    logits, _, cache = forward_response(state.actor, seqs, attn, Tp)               # (B, Tn, V)
    logq = log_softmax(logits, cfg.temperature)        # (B, Tn, V) log pi(.|s_t), for both terms
    probs = np.exp(logq)                               # (B, Tn, V) pi(.|s_t)
    logp, c_logp = logprobs_from_logq(logq, probs, mb.response, cfg.temperature)    # (B, Tn)
    pg_loss, dlogp, pstats = clipped_policy_loss(logp, mb.logp.astype(logp.dtype),
                                                 mb.adv.astype(logp.dtype), mask, cfg.clip_eps)
    ent, c_ent = entropy_from_logq(logq, probs, cfg.temperature)                    # (B, Tn)
    ent_mean = masked_mean(ent, mask)
    dlogits = logprobs_backward(dlogp.astype(logits.dtype), c_logp)                 # (B, Tn, V)
    if cfg.ent_coef > 0:
        dent = -cfg.ent_coef * (mask != 0) / max(int((mask != 0).sum()), 1)   # d(-c2 mean H)/dH_t
        dlogits += entropy_backward(dent.astype(logits.dtype), c_ent)
    grads_actor = backward_response(state.actor, cache, dlogits=dlogits)
    # the critic: the clipped squared error of its values against the returns
    _, values, c_cache = forward_response(state.critic, seqs, attn, Tp, scalar=True,
                                          logits=False)                             # (B, Tn)
    vf_loss, dvalues, vstats = clipped_value_loss(values.astype(np.float64), mb.values,
                                                  mb.returns, mask, cfg.clip_eps_value)
    grads_critic = backward_response(state.critic, c_cache,
                                     dvalues=(cfg.vf_coef * dvalues).astype(values.dtype))
    terms = {"loss/policy": pg_loss, "loss/value": vf_loss, "loss/entropy": -ent_mean,
             "loss/total": pg_loss + cfg.vf_coef * vf_loss - cfg.ent_coef * ent_mean}
    stats = {k: pstats[k] for k in ("approx_kl", "clipfrac", "ratio_mean", "ratio_min",
                                    "ratio_max")}
    stats.update(vf_clipfrac=vstats["vf_clipfrac"], entropy=ent_mean)
    return {k: float(v) for k, v in terms.items()}, stats, grads_actor, grads_critic


def optimizer_step(state: PPOState, g_actor: dict, g_critic: dict, lr: float, critic_lr: float,
                   max_grad_norm: float | None, where: str) -> float:
    """One global gradient norm over actor and critic, clipped to ``max_grad_norm`` (None: not
    clipped), then one AdamW step of each; returns the norm before clipping (the NaN guard: a
    ``ValueError`` naming ``policy/grad_norm`` when it is not finite)."""
    grads = {**{"actor." + k: g for k, g in g_actor.items()},
             **{"critic." + k: g for k, g in g_critic.items()}}
    norm = global_norm(grads) if max_grad_norm is None else clip_grad_norm(grads, max_grad_norm)
    check_finite_values({"policy/grad_norm": norm}, where)
    state.opt_actor.step(g_actor, lr=lr)
    if state.opt_critic is not None:
        state.opt_critic.step(g_critic, lr=critic_lr)
    return norm


# --------------------------------------------------------------------------------------------
# the experience buffer: the per-token 7-tuple (Q25), the prompts, the minibatches
# --------------------------------------------------------------------------------------------

PER_TOKEN = ("logp", "logp_ref", "values", "rewards", "kl", "non_score_reward", "adv", "returns",
             "gen_logp")


@dataclass
class Rollout:
    """One iteration's experience, B responses: the per-token 7-tuple (Q25), padded (B, Tn) arrays.

    Classic PPO stores ``(s, a, r, s', done)``; a language model's PPO stores, for every response
    token: observation, action, log_prob, value, reward, advantage, return. Row b is one response,
    column j one of its tokens::

        field        here                    meaning
        observation  prompt ++ response[:j]  the context ids (``observation(b, j)``): the state s_j
        action       response[b, j]          the token chosen in s_j
        log_prob     logp[b, j]              log pi_old(a_j|s_j), stored at rollout time (the
                                             ratio's denominator; never recomputed in the update)
        value        values[b, j]            V(s_j) of the critic at rollout time
        reward       rewards[b, j]           -beta kl_j, plus the score on the last valid token
        advantage    adv[b, j]               GAE A_j (whitened over the batch)
        return       returns[b, j]           A_j before whitening + V(s_j): the critic's target

    plus ``response_mask`` (1 on response tokens including the EOS, 0 on padding) and
    ``prompt_mask``. Observations are not copied per token: ``sequences[b, :Tp + j]`` is the
    context, with left padding in front (masked out by ``attn_mask``). Every per-token array is 0 on
    padding, so nothing stored there can enter a sum. ``rewards``, ``kl``, ``non_score_reward`` are
    filled by step 3, ``adv`` and ``returns`` by step 4 (None before). ``gen_logp``: the sampler's
    log-probs, kept to check them against ``logp`` (the same numbers from one full forward pass).
    :meth:`to_table` prints one row token by token (lesson 09). Rows of one prompt are contiguous
    (the critic-free estimators of :mod:`minippo.rlhf.grpo` rely on it).
    """

    prompt_ids: np.ndarray          # (B, Tp) int64, left-padded
    prompt_mask: np.ndarray         # (B, Tp) 0/1
    response: np.ndarray            # (B, Tn) int64, right-padded (pad after EOS)
    response_mask: np.ndarray       # (B, Tn) 0/1, 1 on response tokens incl. EOS
    logp: np.ndarray                # (B, Tn) log pi_old(a_t|s_t)
    logp_ref: np.ndarray            # (B, Tn) log pi_ref(a_t|s_t)
    values: np.ndarray              # (B, Tn) V(s_t)
    rm_scores: np.ndarray           # (B,) reward-model score (normalised)
    scores: np.ndarray              # (B,) score after the missing-EOS / length terms
    ended: np.ndarray               # (B,) bool, an EOS was produced
    gen_logp: np.ndarray | None = None
    rewards: np.ndarray | None = None
    kl: np.ndarray | None = None
    non_score_reward: np.ndarray | None = None
    adv: np.ndarray | None = None
    returns: np.ndarray | None = None
    # what the models read, set from the fields above when the rollout is built (as in Generation)
    sequences: np.ndarray = field(init=False, repr=False)   # (B, T) prompt_ids ++ response
    attn_mask: np.ndarray = field(init=False, repr=False)   # (B, T) prompt_mask ++ response_mask
    batch_size: int = field(init=False)     # B
    prompt_len: int = field(init=False)     # Tp: the column of ``sequences`` where responses start

    def __post_init__(self):
        m = self.response_mask != 0
        for name in PER_TOKEN:                    # padding holds exactly 0 in every per-token array
            a = getattr(self, name)
            if a is not None:
                setattr(self, name, np.where(m, a, 0).astype(a.dtype, copy=False))
        self.sequences = np.concatenate([self.prompt_ids, self.response], axis=1)
        self.attn_mask = np.concatenate([self.prompt_mask, self.response_mask], axis=1)
        self.batch_size, self.prompt_len = self.prompt_ids.shape

    # ---- derived arrays -----------------------------------------------------------------------
    @property
    def lengths(self) -> np.ndarray:
        """(B,) response tokens per row (EOS included)."""
        return self.response_mask.sum(axis=1)

    @property
    def sequence_returns(self) -> np.ndarray:
        """(B,) each response's whole return: its score plus its summed KL penalty (after the reward
        step); what the critic-free estimators compare within a prompt's group."""
        if self.non_score_reward is None:
            raise ValueError("`rollout` has no rewards yet: run the reward step first")
        return self.scores + self.non_score_reward.sum(axis=1)

    def observation(self, row: int, j: int) -> np.ndarray:
        """The context ids of token j of ``row`` (the state s_j): real prompt tokens + response[:j].
        """
        check_range("row", row, 0, self.batch_size - 1, integer=True)
        check_range("j", j, 0, self.response.shape[1] - 1, integer=True)
        ctx = self.sequences[row, :self.prompt_len + j]
        keep = self.attn_mask[row, :self.prompt_len + j] != 0
        return ctx[keep]

    def take(self, idx) -> "Rollout":
        """The sub-batch of rows ``idx`` (a minibatch); arrays are copies, None stays None."""
        idx = np.asarray(idx)
        arrays = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return replace(self, **{k: (None if a is None else a[idx]) for k, a in arrays.items()})

    def arrays(self) -> dict[str, np.ndarray]:
        """Every stored array by name (None fields and the derived ``sequences``, ``attn_mask`` left
        out)."""
        arrays = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return {k: a for k, a in arrays.items() if a is not None}

    def save_npz(self, path) -> None:
        """Write :meth:`arrays` to an ``.npz`` file (atomically): the per-token dump of the studies.
        """
        save_npz(path, self.arrays())

    # ---- printing -----------------------------------------------------------------------------
    def to_table(self, tokenizer, row: int = 0, *, context: int = 3) -> str:
        """Row ``row`` printed token by token as the per-token 7-tuple, padding and masks included.

        ``context`` is how many of the observation's last tokens are shown. Columns: j (response
        index), col (column in ``sequences``), observation (its length and last pieces), action (id
        and piece), mask, log_prob, value, reward, advantage, return. A column not computed yet
        prints "-".
        """
        check_range("row", row, 0, self.batch_size - 1, integer=True)
        pieces = lambda ids: " ".join(tokenizer.pieces([int(i) for i in ids]))   # noqa: E731
        Tp = self.prompt_len
        lines = [f"prompt (left-padded, Tp={Tp}): {pieces(self.prompt_ids[row])}",
                 f"prompt_mask: {' '.join(str(int(v)) for v in self.prompt_mask[row])}",
                 f"response (right-padded, Tn={self.response.shape[1]}), "
                 f"score={self.scores[row]:+.3f} "
                 f"(rm {self.rm_scores[row]:+.3f}, eos {'yes' if self.ended[row] else 'NO'})",
                 f"{'j':>3} {'col':>4}  {'observation (len: ... last tokens)':<40} {'action':<18} "
                 f"{'mask':>4} "
                 f"{'log_prob':>9} {'value':>8} {'reward':>8} {'advantage':>9} {'return':>8}"]

        def num(name, j, width):
            a = getattr(self, name)
            # + 0.0: no "-0.000"
            return f"{'-':>{width}}" if a is None else f"{float(a[row, j]) + 0.0:>{width}.3f}"

        for j in range(self.response.shape[1]):
            valid = self.response_mask[row, j] != 0
            obs = self.observation(row, j)
            shown = ("... " if len(obs) > context else "") + pieces(obs[-context:])
            obs_txt = f"{len(obs):>2}: {shown}" if valid else "(padding)"
            action = f"{int(self.response[row, j]):>4} {pieces([self.response[row, j]])}"
            lines.append(f"{j:>3} {Tp + j:>4}  {obs_txt[:40]:<40} {action[:18]:<18} "
                         f"{int(valid):>4} "
                         f"{num('logp', j, 9)} {num('values', j, 8)} {num('rewards', j, 8)} "
                         f"{num('adv', j, 9)} {num('returns', j, 8)}")
        return "\n".join(lines)


@dataclass
class PromptTable:
    """The prompts of the run, tokenized once (a dataset, as TRL's loaders hand it over):
    ``<bos> prompt`` of every prompt, left-padded to the longest, ``ids`` and ``mask`` (P, Tp)
    int64."""

    ids: np.ndarray
    mask: np.ndarray

    @classmethod
    def encode(cls, tokenizer, prompts) -> "PromptTable":
        """The table of ``prompts`` (strings) by ``tokenizer`` (``<bos>`` first, ``<pad>`` on the
        left)."""
        return cls(*tokenizer.pad_left(tokenizer.encode_batch(list(prompts), add_bos=True)))

    def draw(self, n: int, rng: np.random.Generator, repeat: int = 1):
        """``(prompt_ids, prompt_mask)`` (n * repeat, Tp): ``n`` prompts drawn uniformly with
        replacement, each repeated ``repeat`` times (rows of one prompt contiguous), left-padded to
        the longest drawn. One integer of ``rng`` seeds the draw, as
        :func:`minippo.rlhf.data.corpus.sample_prompts` draws (the same prompts for the same
        generator)."""
        check_range("n", n, 1, None, integer=True)
        r = random.Random(int(rng.integers(0, 2**63 - 1)))
        rows = np.repeat([r.randrange(len(self.ids)) for _ in range(n)], repeat)   # (n * repeat,)
        ids, mask = self.ids[rows], self.mask[rows]
        start = int(np.argmax(mask.any(axis=0)))               # the columns no drawn prompt uses go
        return ids[:, start:], mask[:, start:]


def epoch_minibatches(batch_size: int, minibatch_size: int, epochs: int, rng: np.random.Generator):
    """Yield ``(epoch, idx)`` for ``epochs`` passes over the ``batch_size`` rows: each epoch a
    seeded permutation cut into index arrays of ``minibatch_size`` (which must divide
    ``batch_size``; whole responses stay together), drawn when the epoch starts (a consumer that
    breaks out early draws no further shuffle)."""
    check_range("epochs", epochs, 1, None, integer=True)
    check_range("batch_size", batch_size, 1, None, integer=True)
    check_range("minibatch_size", minibatch_size, 1, batch_size, integer=True)
    if batch_size % minibatch_size:
        raise ValueError(f"`minibatch_size` ({minibatch_size}) must divide `batch_size` "
                         f"({batch_size})")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"`rng` must be a np.random.Generator, got {type(rng).__name__}")
    for epoch in range(epochs):
        order = rng.permutation(batch_size)                            # (B,)
        for start in range(0, batch_size, minibatch_size):
            yield epoch, order[start:start + minibatch_size]


def minibatches(batch_size: int, minibatch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch's minibatches of :func:`epoch_minibatches`: a list of index arrays."""
    return [idx for _, idx in epoch_minibatches(batch_size, minibatch_size, 1, rng)]
