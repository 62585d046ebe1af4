"""minippo.rlvr: RL with verifiable rewards, on a task whose answers a rule can check (``minippo rlvr``).

    task.py        the problems (``23+58=``), the held-out split, the teacher who forgets carries, SFT batches
    tokenizer.py   one token per digit or sign (CharTokenizer)
    verifier.py    1 for the right sum, 0 otherwise; a Verifier with the reward model's score() interface
    evaluate.py    pass@k from n samples per held-out problem (minippo.rl.pass_k), answer lengths
    trainer.py     RLVRTrainer: the RLHF PPO trainer with problems for prompts and the verifier for reward
    run.py         the ``minippo rlvr`` command: SFT -> RL -> pass@k before and after

Imports point one way: rlvr uses rlhf (the SFT loop, generation, the canonical PPO and its trainer), rl and nn.
"""
