"""minippo.toy: the token bandit and the trust-region policies of lessons 01-06.

A token bandit is the smallest RL problem with a language model's shape: a context ("prompt"),
one token as the action, a reward for it. Everything is exact here (J, its gradient, the KL between
two policies), so lessons 01-06 can show the policy gradient, the ratio, TRPO and the clipped
objective against the truth. These models use the formulas of :mod:`minippo.rl` and AdamW from
:mod:`minippo.nn`; the library never imports them.

    bandit.py        TokenBandit (linear-softmax policy), REINFORCE, a tiny PPO loop (ppo_train)
    trust_region.py  L^CPI, the natural gradient and TRPO's line search on a bandit (lesson 03)
"""
