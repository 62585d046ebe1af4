"""minippo.rlhf: language-model RLHF on a synthetic review corpus, SFT -> reward model -> PPO.

The modules, in the order of the pipeline (``minippo rlhf`` runs them all, :mod:`.pipeline`)::

    corpus.py, gold.py        the sentences the model learns from; the simulated human (gold score)
    tokenizer.py, data.py     BPE tokenizer, <pad>/<bos>/<eos>; LM batches
    sft.py                    stage 1: supervised fine-tuning (``minippo sft``)
    generate.py               sampling with the KV cache (full-softmax log-probs, one temperature)
    checkpoint.py             a model folder (safetensors + JSON + tokenizer), saved atomically
    preferences.py            pairs of SFT samples labelled by the simulated human
    reward_model.py           the reward model: TinyGPT + scalar head at the last token, Bradley-Terry loss
    rm_train.py               stage 2: training and normalising it (``minippo rm``)
    ppo_config.py             stage 3's hyperparameters, one documented dataclass
    response.py               logits / values at the response columns (column p predicts token p + 1)
    critic.py                 the critic: separate TinyGPT, value head on the actor, or none
    ppo_step.py               rollout (generate + score + logp_old, logp_ref, values) and rewards
    rewards.py                sequence score -> per-token rewards (KL penalty, score on the last token)
    rollout.py                the experience buffer: seed 000's per-token 7-tuple, minibatches, to_table
    advantages.py             GAE and the critic-free estimators (GRPO, RLOO, REINFORCE), by name
    ppo_update.py             K epochs x minibatches of PPO paper eq. (9), clipping, early stop, NaN guard
    trainer.py                the four models, one iteration, checkpoints / resume (``minippo ppo``)
    metrics.py                the glossary of every logged metric
    evaluate.py, plots.py     judging a policy (gold, RM, KL); run figures
    pipeline.py               the main job ``minippo rlhf``; the cached SFT / RM stages lessons share
    memory.py                 what the four models cost (lesson 12)

The studies of lessons 13-20 run PPO variants on the cached stages and measure them::

    study.py, sweep_stats.py  run variants x seeds, judge them alike; per-seed values and seed noise
    probes.py                 per-token credit, update KL, KL probes under top-k (lessons 13, 15)
    pitfalls.py               lr = 0 recomputes done right and wrong, their float32 rounding tolerance and
                              verdict, value error, length slope (16)
    critic_probes.py          how much of a shared trunk's gradient comes from the value loss (18)
    overoptimization.py       weaker reward models, KL checkpoints, Gao et al.'s fits (19)
    best_of_n.py              best-of-n sampling against a reward model and its KL (19)

The names most used are re-exported lazily (importing this package imports nothing heavy).
"""
from __future__ import annotations

from minippo._lazy import lazy_exports

# public name -> submodule that defines it
_LAZY = {
    "PPOConfig": "minippo.rlhf.ppo_config",
    "PPOTrainer": "minippo.rlhf.trainer",
    "run_ppo": "minippo.rlhf.trainer",
    "load_stages": "minippo.rlhf.trainer",
    "Rollout": "minippo.rlhf.rollout",
    "minibatches": "minippo.rlhf.rollout",
    "collect_rollout": "minippo.rlhf.ppo_step",
    "compute_rewards": "minippo.rlhf.ppo_step",
    "compute_advantages": "minippo.rlhf.advantages",
    "register_advantage_estimator": "minippo.rlhf.advantages",
    "ppo_update": "minippo.rlhf.ppo_update",
    "per_token_rewards": "minippo.rlhf.rewards",
    "sequence_scores": "minippo.rlhf.rewards",
    "Critic": "minippo.rlhf.critic",
    "GLOSSARY": "minippo.rlhf.metrics",
    "evaluate_policy": "minippo.rlhf.evaluate",
    "run_pipeline": "minippo.rlhf.pipeline",
    "prepare_stages": "minippo.rlhf.pipeline",
    "Study": "minippo.rlhf.study",
    "RewardModel": "minippo.rlhf.reward_model",
    "RMConfig": "minippo.rlhf.rm_train",
    "train_reward_model": "minippo.rlhf.rm_train",
    "best_of_n": "minippo.rlhf.best_of_n",
    "plot_run": "minippo.rlhf.plots",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, globals())
