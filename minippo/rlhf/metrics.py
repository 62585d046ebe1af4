"""The metric glossaries of RLHF-PPO and DPO: every name written to ``metrics.jsonl``, defined in one line.

Names follow TRL's namespaces (``objective/``, ``policy/``, ``loss/``, ``val/``) plus our own
(``gold/score``, ``policy/approxkl_max``, ...). Conventions: "per response" quantities are summed over
the response's valid tokens (EOS included, padding never) and averaged over the batch; "per token"
quantities are masked means over all valid tokens of the batch; ``policy/*``, ``loss/*`` and
``val/clipfrac_avg``, ``val/ratio`` are averaged over the minibatches that were computed in the update.
KL and entropies are in nats, at the sampling temperature. The README's glossary table is :data:`GLOSSARY`
(``tests/test_readme.py`` checks that they agree).
"""
from __future__ import annotations

import numpy as np

from minippo.rl.masked import masked_mean

GLOSSARY: dict[str, str] = {
    "objective/kl": "mean over responses of sum_t kl_t, the run's estimate of KL(pi_old || pi_ref) per response: k1, logp_t - logp_ref_t, unless the knob kl_ref_estimator says k2 or k3 (what the adaptive controller targets)",
    "objective/kl_exact": "mean over responses of sum_t KL(pi_old(.|s_t) || pi_ref(.|s_t)) computed exactly from the full distributions (only with log_exact_kl)",
    "objective/entropy": "mean over responses of sum_t -logp_t: a one-sample estimate of the policy's entropy per response",
    "objective/non_score_reward": "mean over responses of sum_t -kl_ref_coef * kl_t: the KL-penalty part of the return",
    "objective/rlhf_reward": "mean over responses of score + non_score_reward: the return PPO maximises",
    "objective/scores": "mean score per response: RM score minus the missing-EOS penalty (and length terms)",
    "objective/rm_scores": "mean raw reward-model score per response (normalised RM, before penalties)",
    "gold/score": "mean gold score (the simulated human, never seen by the policy) of the rollout's texts",
    "policy/approxkl_avg": "mean over minibatches of approx KL = mean_t((r_t - 1) - log r_t) (k3 of KL(pi_old || pi))",
    "policy/approxkl_max": "largest approx KL of any minibatch of the update",
    "policy/clipfrac_avg": "mean over minibatches of the fraction of valid tokens whose clipped branch is active (zero gradient)",
    "policy/entropy_avg": "mean over minibatches of the per-token entropy H[pi(.|s_t)] of the current policy (full distribution)",
    "policy/grad_norm_avg": "mean global gradient norm (actor + critic) before clipping, over the applied steps",
    "policy/grad_clip_frac": "fraction of the applied steps whose gradient norm exceeded max_grad_norm and was scaled down to it (0 when max_grad_norm is None)",
    "policy/skipped_minibatches": "minibatches skipped because their mean ratio exceeded ratio_threshold",
    "policy/steps": "AdamW steps taken in this iteration's update",
    "loss/policy_avg": "mean over minibatches of the clipped surrogate loss -L^CLIP (PPO eq. (7)), aggregated by loss_agg",
    "loss/value_avg": "mean over minibatches of the value loss 0.5 mean_t max((V - R)^2, (V_clip - R)^2) (unclipped without value_clip; "
                     "mean_t: loss_agg)",
    "loss/ptx_avg": "mean over minibatches of the corpus language-model loss of PPO-ptx (0 when ptx_coef = 0)",
    "loss/kl_avg": "mean over minibatches of the KL loss term: the per-token kl_ref_loss_estimator (k3 by default) of the KL to pi_ref, aggregated by loss_agg (0 when kl_ref_loss_coef = 0)",
    "val/clipfrac_avg": "mean over minibatches of the fraction of valid tokens where the clipped value error is the larger one",
    "val/explained_variance": "1 - Var[R - V] / Var[R] over the rollout's valid tokens (critic quality; 1 perfect, <= 0 useless)",
    "val/ratio": "mean over minibatches of the mean ratio r_t = exp(logp - logp_old) (1 with lr = 0, to float32 rounding: lesson 16)",
    "val/num_eos_tokens": "number of responses in the batch that produced an EOS",
    "val/values_avg": "mean critic value V(s_t) over the rollout's valid tokens",
    "response/length": "mean number of response tokens (EOS included)",
    "kl_coef": "beta (kl_ref_coef) used for this iteration's rewards (the controller updates it after the iteration)",
    "lr": "actor learning rate used in this iteration (with kl_old_action adapt_lr: the rate after the update's last KL adjustment, where the next iteration starts)",
    "lr_max": "largest actor learning rate of this iteration's applied steps (above lr only with kl_old_action adapt_lr, whose rule raises the rate while the KL is below target / 2; 0 when no step was applied)",
    "episode": "responses generated so far, this iteration's included",
    "iteration": "0-based index of the iteration",
    "early_stop_epoch": "0-based epoch in which target-KL early stopping ended the update, or null",
    "time/rollout": "seconds spent on generation, scoring, rewards and advantages",
    "time/update": "seconds spent on the PPO epochs",
    "time/iteration": "seconds for the whole iteration (rollout + update; logging and checkpointing excluded)",
    "time/cpu_rollout": "CPU seconds of this process during the rollout (all its threads; steadier than wall time on a shared machine)",
    "time/cpu_update": "CPU seconds of this process during the PPO epochs",
}

#: the metrics of a DPO run (``minippo dpo``, :mod:`minippo.rlhf.dpo`): TRL's DPOTrainer names plus our own.
#: "Implicit reward" = beta (log pi(y|x) - log pi_ref(y|x)), log-probs summed over the response tokens
#: (averaged with logp_average); per-step values are means over the step's training pairs.
DPO_GLOSSARY: dict[str, str] = {
    "loss": "DPO loss of the step's pairs: -mean log sigmoid(beta h) (DPO eq. (7); IPO / conservative DPO with loss_type / label_smoothing), h = (log pi - log pi_ref)(y_w) - (log pi - log pi_ref)(y_l)",
    "rewards/chosen": "mean implicit reward beta (log pi - log pi_ref) of the chosen responses y_w (< 0: their probability fell below the reference's)",
    "rewards/rejected": "mean implicit reward of the rejected responses y_l",
    "rewards/margins": "mean of rewards/chosen - rewards/rejected per pair (= beta h)",
    "rewards/accuracies": "fraction of pairs whose chosen implicit reward is strictly above the rejected one",
    "logps/chosen": "mean log pi(y_w|x) of the chosen responses (nats per response)",
    "logps/rejected": "mean log pi(y_l|x) of the rejected responses (both falling at once: DPO's known failure, lesson 21)",
    "grad_norm": "global gradient norm before clipping",
    "lr": "learning rate of this step",
    "step": "0-based index of the optimizer step",
    "epoch": "passes over the training prompts done after this step",
    "pairs": "preference pairs in this step's batch (all the pairs of batch_prompts prompts)",
    "eval_loss": "the loss on all held-out pairs (the reward-model stage's held-out prompts), at evaluation steps",
    "eval_rewards/chosen": "rewards/chosen on the held-out pairs",
    "eval_rewards/rejected": "rewards/rejected on the held-out pairs",
    "eval_rewards/margins": "rewards/margins on the held-out pairs",
    "eval_rewards/accuracies": "rewards/accuracies on the held-out pairs: the implicit reward model's held-out accuracy",
    "eval_logps/chosen": "logps/chosen on the held-out pairs",
    "eval_logps/rejected": "logps/rejected on the held-out pairs",
    "gold/score": "mean gold score (the simulated human) of fresh samples for n_eval fixed prompts, at evaluation steps",
    "objective/kl": "mean over those samples of sum_t (logp_t - logp_ref_t): the k1 estimate of KL(pi || pi_ref) per response",
    "objective/kl_exact": "mean over those samples of sum_t KL(pi(.|s_t) || pi_ref(.|s_t)), exact from the full distributions",
    "response/length": "mean number of response tokens of those samples (EOS included)",
    "time/step": "seconds for the optimizer step (evaluation excluded)",
    "time/eval": "seconds for the evaluation (0 when there was none)",
}

#: metrics that differ between two identical runs (wall-clock time): left out of equality checks
TIMING = tuple(k for k in {**GLOSSARY, **DPO_GLOSSARY} if k.startswith("time/"))


def without_timing(record: dict) -> dict:
    """``record`` without the wall-clock entries (for comparing runs)."""
    return {k: v for k, v in record.items() if k not in TIMING}


def rollout_metrics(ro, gold) -> dict:
    """The ``objective/*``, ``gold/score``, ``val/num_eos_tokens``, ``val/values_avg`` and ``response/length``
    metrics of one rollout with rewards (``gold``: (B,) gold scores of its texts, or None: no ``gold/score``);
    sums run over valid tokens."""
    m = ro.response_mask
    kl_per_response = ro.kl.sum(axis=1)                                 # (B,) padding is 0
    non_score = ro.non_score_reward.sum(axis=1)                         # (B,)
    record = {
        "objective/kl": float(kl_per_response.mean()),
        "objective/entropy": float((-ro.logp * m).sum(axis=1).mean()),
        "objective/non_score_reward": float(non_score.mean()),
        "objective/rlhf_reward": float((ro.scores + non_score).mean()),
        "objective/scores": float(ro.scores.mean()),
        "objective/rm_scores": float(ro.rm_scores.mean()),
        "val/num_eos_tokens": int(ro.ended.sum()),
        "response/length": float(ro.lengths.mean()),
        "val/values_avg": masked_mean(ro.values, m),
    }
    if gold is not None:
        record["gold/score"] = float(np.mean(gold))
    return record


def update_metrics(update: dict, max_grad_norm: float | None = None) -> dict:
    """The ``policy/*``, ``loss/*``, ``val/clipfrac_avg``, ``val/ratio``, ``lr``, ``lr_max`` and ``early_stop_epoch``
    metrics of one update (what ``ppo_iteration`` and its variants return): ``history`` holds one dict per
    minibatch whose loss was computed (``grad_norm`` None for those not applied; a loss term a variant does
    not have counts as 0), ``max_grad_norm`` the clip the steps were subject to (None: none); the corrected
    objective's ``off_policy/*`` (:data:`minippo.rlhf.corrected.OFF_POLICY_GLOSSARY`) pass through."""
    history = update["history"]

    def mean(key):
        vals = [h[key] for h in history if h.get(key) is not None]
        return float(np.mean(vals)) if vals else 0.0
    norms = [h["grad_norm"] for h in history if h["grad_norm"] is not None]
    clipped = 0.0 if max_grad_norm is None or not norms else float(np.mean([n > max_grad_norm for n in norms]))
    return {
        "policy/approxkl_avg": mean("approx_kl"),
        "policy/approxkl_max": float(np.max([h["approx_kl"] for h in history])) if history else 0.0,
        "policy/clipfrac_avg": mean("clipfrac"),
        "policy/entropy_avg": mean("entropy"),
        "loss/policy_avg": mean("loss/policy"),
        "loss/value_avg": mean("loss/value"),
        "loss/ptx_avg": mean("loss/ptx"),
        "loss/kl_avg": mean("loss/kl"),
        "val/clipfrac_avg": mean("vf_clipfrac"),
        "val/ratio": mean("ratio_mean"),
        "policy/grad_norm_avg": mean("grad_norm"),
        "policy/grad_clip_frac": clipped,
        "policy/skipped_minibatches": update.get("skipped", 0),
        "policy/steps": len(norms),
        "early_stop_epoch": update["early_stop_epoch"],
        "lr": update["lr"],
        "lr_max": update.get("lr_max", update["lr"] if norms else 0.0),
        **{k: v for k, v in update.items() if k.startswith("off_policy/")},
    }


def first_minibatch(update: dict) -> dict:
    """The ratio statistics of an update's first minibatch (before any step: the lr = 0 check, lesson 16)."""
    first = update["history"][0] if update["history"] else {}
    return {k: float(first[k]) for k in ("ratio_mean", "ratio_min", "ratio_max", "approx_kl", "clipfrac")} if first \
        else {}
