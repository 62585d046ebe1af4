"""minippo.rlhf: language-model RLHF on a synthetic review corpus, SFT -> reward model -> PPO.

The folder reads as the pipeline (``minippo rlhf`` runs it all, :mod:`.run.pipeline`)::

    data/            the corpus, the simulated human (gold score), the tokenizer, preference pairs, LM batches
    sft.py           stage 1: supervised fine-tuning of the tiny GPT (``minippo sft``)
    reward_model.py  stage 2: the reward model (TinyGPT + scalar head at the last token), Bradley-Terry loss,
                     and the sequence score PPO rewards (RM score, missing-EOS and length terms)
    rm_train.py      stage 2: training and normalising it (``minippo rm``)
    generate.py      sampling with the KV cache (full-softmax log-probs, one temperature)
    ppo.py           stage 3: ONE canonical PPO iteration, top to bottom (rollout -> rewards -> GAE -> K epochs
                     x minibatches of eq. (9) -> KL controller), and at its end the experience buffer (Rollout: the
                     per-token 7-tuple, ``to_table``), the prompts and the minibatches; ppo_config.py its
                     25 hyperparameters
    grpo.py          stage 3 without a critic: ONE iteration of the group family (GRPO, Dr. GRPO, RLOO,
                     REINFORCE; clip-higher, GSPO's ratio, the KL as a loss), its GRPOConfig (``minippo grpo``)
    ppo_knobs.py     PPO with the knobs the lessons turn (KnobsConfig: shaping, PPO-ptx, shared critic,
                     value normalisation, the KL-adapted lr, ...): ``minippo ppo`` with a knob's flag
    dpo.py           stage 3 without RL: ONE DPO step on the reward model's preference pairs (``minippo dpo``);
                     dpo_config.py its hyperparameters
    critic.py        which network is the critic, its initialisation, value normalisation
    metrics.py       the glossary of every logged metric and how an iteration's numbers are summarised
    checkpoint.py    a model folder (safetensors + JSON + tokenizer), saved atomically; load_model
    run/             the plumbing: PPOTrainer (timing, NaN guard, metrics, checkpoints, resume), the configs
                     old run folders stored, the commands, the main job's pipeline, evaluation, run figures

What only the lessons measure lives in :mod:`minippo.studies` (this package never imports it).
The names most used are re-exported lazily (importing this package imports nothing heavy).
"""
from __future__ import annotations

from minippo._lazy import lazy_exports

# public name -> submodule that defines it
_LAZY = {
    "PPOConfig": "minippo.rlhf.ppo_config",
    "PPOState": "minippo.rlhf.ppo",
    "ppo_iteration": "minippo.rlhf.ppo",
    "rollout": "minippo.rlhf.ppo",
    "ppo_update": "minippo.rlhf.ppo",
    "GRPOConfig": "minippo.rlhf.grpo",
    "grpo_iteration": "minippo.rlhf.grpo",
    "KnobsConfig": "minippo.rlhf.ppo_knobs",
    "knobs_iteration": "minippo.rlhf.ppo_knobs",
    "PPOTrainer": "minippo.rlhf.run.trainer",
    "run_ppo": "minippo.rlhf.run.trainer",
    "load_stages": "minippo.rlhf.run.trainer",
    "Rollout": "minippo.rlhf.ppo",
    "minibatches": "minippo.rlhf.ppo",
    "per_token_rewards": "minippo.rlhf.ppo",
    "sequence_scores": "minippo.rlhf.reward_model",
    "GLOSSARY": "minippo.rlhf.metrics",
    "evaluate_policy": "minippo.rlhf.run.evaluate",
    "run_pipeline": "minippo.rlhf.run.pipeline",
    "prepare_stages": "minippo.rlhf.run.pipeline",
    "RewardModel": "minippo.rlhf.reward_model",
    "RMConfig": "minippo.rlhf.rm_train",
    "train_reward_model": "minippo.rlhf.rm_train",
    "plot_run": "minippo.rlhf.run.plots",
    "DPOConfig": "minippo.rlhf.dpo_config",
    "DPOTrainer": "minippo.rlhf.run.dpo_trainer",
    "run_dpo": "minippo.rlhf.run.dpo_trainer",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, globals())
