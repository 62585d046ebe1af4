"""minippo.studies: what only the lessons measure. The library (nn, rl, classic, rlhf) never imports it.

    study.py, sweep_stats.py  run PPO variants x seeds on the cached stages, judge them alike; seed noise
    probes.py                 per-token credit, update KL, KL probes under top-k (lessons 13, 15)
    pitfalls.py               the lr = 0 recompute done right and wrong, value error, length slope (16)
    critic_probes.py          how much of a shared trunk's gradient comes from the value loss (18)
    overoptimization.py       weaker reward models, KL checkpoints, Gao et al.'s fits (19)
    best_of_n.py              best-of-n sampling against a reward model and its KL (19)
    memory.py                 what the four models cost, from tiny to 7B (lesson 12)
    kl_moments.py             k1 / k2 / k3 bias and variance, negative KL under top-k (lesson 15)
    kl_control.py             each KL control's outcome and the KL of one update, with their seed noise (lesson 15)
    eps_by_task.py            epsilon on two tasks of different response length: the interaction (lesson 13)
    sequence_ratio.py         the sequence ratio prod r_t vs token clipping; 1.2^50 (lesson 13)
    baselines.py              which baseline removes most variance (lesson 20)
    dpo_frontier.py           DPO vs PPO vs PPO-GT on the gold-KL frontier; gold as a reward model (lesson 21)
    exact.py, exact_updates.py  a sequence space small enough to enumerate: exact gradients of the estimators (22)
    off_policy.py             off-policy corrections' exact bias and noise; the clip band at lr = 0 (lesson 24)
"""
