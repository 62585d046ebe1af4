"""The data of the RLHF pipeline: what the model reads and who judges it. Nothing is downloaded.

    corpus.py       the synthetic review corpus (sentences, prompts) the tiny GPT learns from
    gold.py         the simulated human: a documented gold score of any text (never seen by PPO)
    tokenizer.py    the BPE tokenizer trained locally, <pad>/<bos>/<eos>, left/right padding
    preferences.py  pairs of SFT samples labelled by the simulated human (the reward model's data)
    batches.py      language-model batches (inputs, targets, masks) of encoded sentences
"""
