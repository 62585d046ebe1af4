"""One DPO step, read top to bottom: the preference pairs train the policy directly, with no reward model,
no critic and no sampling (Rafailov et al. 2023, arXiv:2305.18290).

Legend: P prompts in a batch, R their response rows, N their labelled pairs, T tokens, V vocab.

    batch     P training prompts with their R responses and all N pairs          pair_batch
              (the pairs and split of the reward-model stage: the same data, the same batches)
    1. logp   log pi_theta(y|x) of every row: one forward, the per-token            response_logprobs
              log-probs, a masked sum over the response tokens
    2. ref    log pi_ref(y|x) of the same rows with the frozen reference (forward only)
    3. loss   lc, lr, rc, rr of the N pairs -> dpo_loss: DPO eq. (7), IPO or        dpo_loss_and_grads
              conservative DPO (cfg.loss_type, cfg.label_smoothing)
    4. back   dL/dlc, dL/dlr summed onto the rows (a response sits in up to K - 1 pairs), then
              d seq / d logp_t -> d logp_t / d logits -> TinyGPT.backward
    5. step   one global-norm clip, AdamW                                         dpo_step

Two models instead of PPO's four: the policy pi_theta (trained, a copy of the SFT model) and the reference
pi_ref (the frozen SFT model). Each response is scored once per step however many pairs it is in.

Rows are ``prompt ++ response`` right-padded (:class:`minippo.rlhf.data.preferences.PreferencePairs`); the
logits at column c belong to the token at column c + 1, so the response tokens (columns prompt_len ..
n - 1 of a row with n real tokens, EOS included) are scored at columns prompt_len - 1 .. n - 2::

    column     0    1    2  |  3    4    5     6 ...
    token      p    p    p  |  r0   r1   EOS   pad
    mask       1    1    1     1    1    1     0      response mask: 0 0 0 1 1 1 0
    read at              ^     ^    ^                 logits at column c score token c + 1

The metrics (TRL's DPO names, defined in :data:`minippo.rlhf.metrics.DPO_GLOSSARY`) are computed here;
timing, evaluation on fresh samples, checkpoints and the run folder are
:class:`minippo.rlhf.run.dpo_trainer.DPOTrainer`'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minippo.checks import check_finite_values
from minippo.nn.gpt import TinyGPT
from minippo.nn.optim import AdamW, clip_grad_norm, lr_at
from minippo.rl.dpo import dpo_loss, sequence_logprobs, sequence_logprobs_backward
from minippo.rl.losses import logprobs_backward, logprobs_from_logits
from minippo.rlhf.data.batches import batch_indices, steps_per_epoch
from minippo.rlhf.data.preferences import PreferencePairs
from minippo.rlhf.dpo_config import DPOConfig

SEED_BATCHES = 1        # the batch order: batch_indices(..., seed=(cfg.seed, SEED_BATCHES))


@dataclass
class DPOState:
    """Everything one step reads and changes (``DPOTrainer`` builds, saves and restores it)."""

    policy: TinyGPT                 # pi_theta, trained; starts as a copy of the SFT policy
    ref: TinyGPT                    # pi_ref, the frozen SFT policy
    tokenizer: object
    opt: AdamW                      # over policy.params
    train: PreferencePairs          # the reward-model stage's training pairs ...
    heldout: PreferencePairs        # ... and its held-out pairs (never trained on)
    step: int = 0


def dpo_step(state: DPOState, cfg: DPOConfig) -> dict:
    """One optimizer step (steps 1-5 of the module docstring); returns its metrics. A non-finite log-prob,
    loss or gradient norm raises ``ValueError`` naming the metric (nothing is applied)."""
    it = state.step
    mb = pair_batch(state.train, cfg.batch_prompts, it, cfg.seed)
    loss, record, grads = dpo_loss_and_grads(state.policy, state.ref, mb, cfg)       # steps 1-4
    # 5. one global norm clip, then AdamW at this step's learning rate
    lr = lr_at(it, cfg.steps, cfg.lr, warmup_steps=cfg.warmup_steps, schedule=cfg.lr_schedule)
    norm = clip_grad_norm(grads, cfg.max_grad_norm)
    check_finite_values({"grad_norm": norm}, f"at step {it}")
    state.opt.step(grads, lr=lr)
    state.step = it + 1
    record.update({"grad_norm": norm, "lr": lr, "step": it, "epoch": (it + 1) / steps_per_epoch(
        state.train.n_groups, cfg.batch_prompts), "pairs": len(mb)})
    return record


def pair_batch(pairs: PreferencePairs, batch_prompts: int, step: int, seed: int) -> PreferencePairs:
    """The prompts of batch ``step`` (a seeded order, new every epoch: a pure function of its arguments, so a
    resumed run draws the same batches) with all their responses and pairs, trimmed to their longest row."""
    groups = batch_indices(pairs.n_groups, batch_prompts, step, seed=(seed, SEED_BATCHES))
    return trim_columns(pairs.select_groups(groups))


def trim_columns(pairs: PreferencePairs) -> PreferencePairs:
    """The same pairs without the padding columns that no row of them uses."""
    T = int(pairs.mask.sum(axis=1).max())
    return PreferencePairs(sequences=pairs.sequences[:, :T], mask=pairs.mask[:, :T], prompt_len=pairs.prompt_len,
                           gold=pairs.gold, group=pairs.group, chosen_idx=pairs.chosen_idx,
                           rejected_idx=pairs.rejected_idx, prob_chosen=pairs.prob_chosen)


# ----------------------------------------------------------------------------------------------
# steps 1-4: sequence log-probs of policy and reference, the loss, the backward pass
# ----------------------------------------------------------------------------------------------

def response_mask(pairs: PreferencePairs) -> np.ndarray:
    """(R, T) 1 on each row's response tokens (columns >= prompt_len that are real, EOS included), else 0."""
    cols = np.arange(pairs.mask.shape[1])[None, :]                               # (1, T)
    return ((cols >= pairs.prompt_len[:, None]) & (pairs.mask != 0)).astype(np.int64)


def response_logprobs(model: TinyGPT, pairs: PreferencePairs, temperature: float = 1.0, average: bool = False,
                      name: str = "policy"):
    """``(seq (R,) float64, cache)``: log pi(y|x) of every row's response (the sum over its response tokens of
    ``log_softmax(logits / temperature)[token]``; the mean with ``average``), and what
    :func:`response_logprobs_backward` needs. A non-finite log-prob raises ``ValueError`` naming ``name``'s
    ``logps`` and where (the NaN guard)."""
    seqs, attn = pairs.sequences, pairs.mask
    logits, _, c_model = model.forward(seqs[:, :-1], attn[:, :-1])              # (R, T-1, V) column c -> token c+1
    logp, c_logp = logprobs_from_logits(logits, seqs[:, 1:], temperature)       # (R, T-1) every next token
    if not np.isfinite(logp).all():
        r, c = np.argwhere(~np.isfinite(logp))[0]
        raise ValueError(f"`logps` of the {name} is {logp[r, c]} at response row {r}, token column {c + 1}")
    seq, c_seq = sequence_logprobs(logp, response_mask(pairs)[:, 1:], average=average)   # (R,) response only
    return seq, (c_model, c_logp, c_seq)


def response_logprobs_backward(model: TinyGPT, dseq, cache) -> dict:
    """Parameter gradients from dL/dseq (R,): every response token gets dL/dlogp_t = dL/dseq (divided
    by the row's response length when the sequence log-prob was an average, ``logp_average``; 0
    elsewhere), then the log-softmax's and the model's backward."""
    c_model, c_logp, c_seq = cache
    dlogp = sequence_logprobs_backward(dseq, c_seq)                              # (R, T-1), 0 off the response
    dlogits = logprobs_backward(dlogp, c_logp)                                   # (R, T-1, V)
    return model.backward(c_model, dlogits=dlogits)


def dpo_loss_and_grads(policy: TinyGPT, ref: TinyGPT, mb: PreferencePairs, cfg: DPOConfig):
    """Steps 1-4 on the pairs ``mb``: ``(loss, metrics, grads)`` (nothing is updated)."""
    kw = dict(temperature=cfg.temperature, average=cfg.logp_average)
    # 1-2. every response once, under the policy and under the frozen reference
    seq, cache = response_logprobs(policy, mb, **kw)                             # (R,)
    ref_seq, _ = response_logprobs(ref, mb, name="reference", **kw)              # (R,)
    ci, ri = mb.chosen_idx, mb.rejected_idx                                      # (N,) rows of y_w and y_l
    # 3. the loss of the N pairs
    loss, dlc, dlr, stats = dpo_loss(seq[ci], seq[ri], ref_seq[ci], ref_seq[ri], cfg.beta,
                                     loss_type=cfg.loss_type, label_smoothing=cfg.label_smoothing)
    check_finite_values({"loss": loss})
    # 4. a row in several pairs receives the sum of its pairs' gradients
    dseq = np.zeros(seq.shape, dtype=np.float64)                                 # (R,)
    np.add.at(dseq, ci, dlc)
    np.add.at(dseq, ri, dlr)
    grads = response_logprobs_backward(policy, dseq, cache)
    return loss, pair_metrics(loss, seq[ci], seq[ri], stats), grads


def pair_metrics(loss: float, logp_chosen, logp_rejected, stats: dict, prefix: str = "") -> dict:
    """TRL's DPO metrics of N pairs (``prefix="eval_"`` for the held-out pairs): means over the pairs."""
    return {f"{prefix}loss": float(loss),
            f"{prefix}rewards/chosen": float(np.mean(stats["rewards_chosen"])),
            f"{prefix}rewards/rejected": float(np.mean(stats["rewards_rejected"])),
            f"{prefix}rewards/margins": float(np.mean(stats["margins"])),
            f"{prefix}rewards/accuracies": stats["accuracy"],
            f"{prefix}logps/chosen": float(np.mean(logp_chosen)),
            f"{prefix}logps/rejected": float(np.mean(logp_rejected))}


def evaluate_pairs(policy: TinyGPT, ref: TinyGPT, pairs: PreferencePairs, cfg: DPOConfig, *,
                   chunk_prompts: int = 16) -> dict:
    """The DPO loss and metrics on ``pairs`` (forward only, ``chunk_prompts`` prompts at a time), prefixed
    ``eval_``, plus ``implicit_reward`` (R,): each response's beta (log pi - log pi_ref), the reward DPO
    learned (for comparing with the reward model and the gold score)."""
    kw = dict(temperature=cfg.temperature, average=cfg.logp_average)
    seq, ref_seq = np.empty(len(pairs.group)), np.empty(len(pairs.group))
    groups = np.unique(pairs.group)
    for start in range(0, groups.size, chunk_prompts):
        rows = np.flatnonzero(np.isin(pairs.group, groups[start:start + chunk_prompts]))   # contiguous
        part = trim_columns(pairs.select_groups(groups[start:start + chunk_prompts]))
        seq[rows] = response_logprobs(policy, part, **kw)[0]
        ref_seq[rows] = response_logprobs(ref, part, name="reference", **kw)[0]
    ci, ri = pairs.chosen_idx, pairs.rejected_idx
    loss, _, _, stats = dpo_loss(seq[ci], seq[ri], ref_seq[ci], ref_seq[ri], cfg.beta, loss_type=cfg.loss_type,
                                 label_smoothing=cfg.label_smoothing)
    return {**pair_metrics(loss, seq[ci], seq[ri], stats, prefix="eval_"),
            "implicit_reward": cfg.beta * (seq - ref_seq), "logp": seq, "ref_logp": ref_seq}
