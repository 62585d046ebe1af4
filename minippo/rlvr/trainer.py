"""RL against the verifier with the canonical PPO or the critic-free family: the RLHF trainer, with problems for
prompts and the verifier in the reward model's place.

Legend: B batch (responses), Tn response tokens.

Nothing of PPO is rewritten here. :class:`RLVRTrainer` is :class:`minippo.rlhf.run.trainer.PPOTrainer` (the
four models' state, checkpoints, resume, the NaN guard, ``metrics.jsonl``) with two things changed:

- the prompts an iteration draws (``cfg.batch_size`` answers' worth: ``batch_size // samples_per_prompt``
  problems for the group estimators; with the state's generator, so a resumed run draws
  the same ones) are the task's training problems, never a held-out one (:meth:`RLVRTrainer.prompt_pool`);
- the reward model is the :class:`~minippo.rlvr.verifier.Verifier`: its 0/1 ``score`` is the sequence score
  that the iteration puts on the last token (InstructGPT eq. (2)'s ``r_t = -beta kl_t``, plus the score at the
  end); with PPO, GAE with the critic spreads it over the answer's tokens (the group estimators: below).

The iteration itself is the one its config configures, called by the trainer as for ``minippo rlhf``: with a
:class:`~minippo.rlhf.ppo_config.PPOConfig` (:func:`rlvr_ppo_config`) :func:`minippo.rlhf.ppo.ppo_iteration`,
whose critic is a separate TinyGPT started from the SFT trunk (``critic_init="sft"``: there is no reward model
whose network it could copy); with a :class:`~minippo.rlhf.grpo.GRPOConfig` (:func:`rlvr_grpo_config`)
:func:`minippo.rlhf.grpo.grpo_iteration`, no critic: each problem is sampled ``samples_per_prompt`` times and
an answer's advantage is its 0/1 against the others of its group. :func:`verifier_metrics` adds what the
verifier saw.

Metrics added to the PPO glossary's (:mod:`minippo.rlhf.metrics`): ``rlvr/pass_rate`` (share of right answers in
the rollout: the rollout's pass@1), ``rlvr/formed`` (share of well-formed answers), ``rlvr/length_right`` and
``rlvr/length_wrong`` (mean response tokens of the right and of the other answers; null when there is none).
``gold/score``, the review corpus's simulated human, is not computed for arithmetic and is dropped.
"""
from __future__ import annotations

from minippo.checks import check_choice
from minippo.rlhf.grpo import GROUP_ESTIMATORS, GRPOConfig
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.run.trainer import PPOTrainer, iteration_record
from minippo.rlvr.task import Problems
from minippo.rlvr.verifier import Verifier

#: the metrics this trainer adds to a PPO record, each defined in one line (the module docstring says more)
GLOSSARY = {
    "rlvr/pass_rate": "share of the rollout's responses the verifier scores 1 (the rollout's pass@1)",
    "rlvr/formed": "share of the rollout's responses that are well formed (digits only, ended by EOS)",
    "rlvr/length_right": "mean response tokens (EOS included) of the right responses (null: none)",
    "rlvr/length_wrong": "mean response tokens (EOS included) of the other responses (null: none)",
}


def rlvr_ppo_config(quick: bool = False, **overrides) -> PPOConfig:
    """The PPO config of ``minippo rlvr``: the canonical PPO, sized for 0/1 rewards on short answers.

    Departures from ``minippo rlhf``'s, each for this task: 128 responses per iteration in minibatches of 32
    (a 0/1 reward is a noisy signal; in exploratory runs 64 per iteration gained half as much pass@1 per
    iteration), a constant lr of 3e-4 (5e-4 and 1e-3 lowered pass@1 there), answers of at most 6 tokens, a small
    fixed KL penalty (0.05: no KL target to reach, and a rule cannot be hacked like a reward model), no
    missing-EOS penalty (the verifier already gives an unfinished answer 0), the critic from the SFT trunk."""
    base = dict(iterations=100, batch_size=128, minibatch_size=32, max_new_tokens=6, lr=3e-4,
                lr_schedule="constant", kl_ref_controller="fixed", kl_ref_coef=0.05, missing_eos_penalty=0.0,
                critic_init="sft", checkpoint_every=20)
    if quick:
        base.update(iterations=30, checkpoint_every=10)
    return PPOConfig(**{**base, **overrides})


#: how each group estimator aggregates its tokens (:func:`rlvr_grpo_config`): the loss of its paper
LOSS_AGG = {"grpo": "seq-mean-token-mean", "dr_grpo": "seq-mean-token-sum-norm", "rloo": "seq-mean-token-sum-norm"}


def rlvr_grpo_config(estimator: str = "grpo", quick: bool = False, **overrides) -> GRPOConfig:
    """The critic-free config of ``minippo rlvr --method grpo | dr_grpo | rloo``, on PPO's budget.

    The same budget as :func:`rlvr_ppo_config`: 128 answers per iteration (16 problems x a group of 8), minibatches
    of 32, 4 epochs, the same iterations, answers of at most 6 tokens, no missing-EOS penalty; a constant lr of
    1e-4, not PPO's 3e-4 (GRPO at 3e-4 ends with a lower pass@1 on seeds 0 and 1: README, "Verifiable rewards",
    measured by ``python -m lessons results rlvr``, keys ``grpo_high_lr.*``; the rollouts' pass rate swings at 3e-4).
    Each estimator with its paper's loss: GRPO's 1/|o| per answer (``seq-mean-token-mean``), Dr. GRPO's constant
    (``seq-mean-token-sum-norm``, Liu et al. 2025) and RLOO's too (its REINFORCE gradient is that of an answer's
    summed log-probability). No KL penalty in the reward (``kl_ref_coef`` 0): a reward of 0/1 plus a KL term is
    never exactly equal within a group, and GRPO's division by the group's std would blow the KL differences of an
    all-right group up to advantages of +-1; the KL to the reference is GRPO's loss term instead (k3, 0.04:
    DeepSeekMath, Shao et al. 2024, eq. (4))."""
    check_choice("estimator", estimator, GROUP_ESTIMATORS)
    base = dict(iterations=100, batch_size=128, samples_per_prompt=8, minibatch_size=32, max_new_tokens=6,
                lr=1e-4, lr_schedule="constant", advantage_estimator=estimator, loss_agg=LOSS_AGG[estimator],
                kl_ref_controller="fixed", kl_ref_coef=0.0, kl_ref_loss_coef=0.04, missing_eos_penalty=0.0,
                checkpoint_every=20)
    if quick:
        base.update(iterations=30, checkpoint_every=10)
    return GRPOConfig(**{**base, **overrides})


def verifier_metrics(verifier: Verifier, ro) -> dict:
    """The verifier's metrics of one rollout (module docstring): pass rate, well-formed share, and the mean
    length of the right and of the other responses."""
    right, formed = verifier.check(ro.sequences, ro.attn_mask)                                # (B,) each
    return {"rlvr/pass_rate": float(right.mean()), "rlvr/formed": float(formed.mean()),
            "rlvr/length_right": float(ro.lengths[right].mean()) if right.any() else None,
            "rlvr/length_wrong": float(ro.lengths[~right].mean()) if (~right).any() else None}


class RLVRTrainer(PPOTrainer):
    """PPO or the critic-free family against the verifier on the arithmetic task (module docstring).

    Parameters
    ----------
    cfg : PPOConfig (:func:`rlvr_ppo_config`; ``critic_init`` must be "sft" or "random") or GRPOConfig
        (:func:`rlvr_grpo_config`)
    sft_model : TinyGPT, the SFT policy (the actor starts as a copy, the reference is a frozen copy)
    tokenizer : :class:`minippo.rlvr.tokenizer.CharTokenizer`
    problems : :class:`minippo.rlvr.task.Problems`, the task's split (prompts come from its training side)
    out_dir, resume, inputs : as :class:`~minippo.rlhf.run.trainer.PPOTrainer` (``inputs``: ``{"sft": ...}``,
        the SFT model's identity, recorded with every checkpoint and the policy)
    """

    def __init__(self, cfg: PPOConfig, sft_model, tokenizer, problems: Problems, *, out_dir=None,
                 resume: bool = False, inputs: dict | None = None):
        if not isinstance(cfg, (PPOConfig, GRPOConfig)):
            raise ValueError(f"`cfg` must be a PPOConfig or a GRPOConfig, got {type(cfg).__name__}")
        if isinstance(cfg, PPOConfig) and cfg.critic_init == "reward_model":
            raise ValueError("`critic_init` must be 'sft' or 'random' against a verifier (it has no network to "
                             "start the critic from), got 'reward_model'")
        self.problems = problems            # before PPOTrainer's checks, which read prompt_pool()
        super().__init__(cfg, sft_model, Verifier(tokenizer), tokenizer, out_dir=out_dir, resume=resume,
                         inputs=inputs)

    def prompt_pool(self) -> list[str]:
        """The prompts of the task's training problems (never a held-out one): what an iteration draws."""
        return self.problems.train_prompts()

    def record(self, rollout, update: dict, old_actor=None) -> dict:
        """The PPO metrics without ``gold/score`` (the review corpus's simulated human: meaningless on sums),
        with the verifier's."""
        record = iteration_record(self.state, self.cfg, rollout, update, old_actor, gold=False)
        record.update(verifier_metrics(self.state.reward_model, rollout))
        return record
