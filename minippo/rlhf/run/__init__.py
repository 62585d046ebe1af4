"""The run plumbing of the RLHF pipeline, apart from the algorithm (minippo.rlhf.ppo is one iteration).

    trainer.py      PPOTrainer: builds the four models, runs iterations, times them, NaN guard,
                    checkpoints and resume, the metrics file (``minippo ppo``'s engine)
    ppo_cli.py      the ``minippo ppo`` command (every PPOConfig field a flag)
    dpo_trainer.py  DPOTrainer: policy and frozen reference on the reward model's pairs, evaluation, NaN guard,
                    checkpoints and resume (``minippo dpo``'s engine); dpo_cli.py the command
    pipeline.py     the main job ``minippo rlhf``: SFT -> reward model -> PPO (or DPO) -> evaluation,
                    cached stages; rlhf_cli.py its command line (the main knobs, ``--config FILE``)
    evaluate.py     judging a policy on fixed prompts: gold, RM, KL; samples.md and its proxy-gold marks
    plots.py        the run's curves (<run>/figures/ppo_curves.png, dpo_curves.png)
"""
