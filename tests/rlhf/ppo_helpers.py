"""A tiny RLHF world for the PPO tests: a small tokenizer, a random TinyGPT as SFT policy, a reward model.

Imported by tests/rlhf/test_rollout.py, test_trainer.py (pytest puts this folder on sys.path).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rlhf.data.corpus import generate_corpus
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.rlhf.reward_model import RewardModel
from minippo.rlhf.data.tokenizer import Tokenizer


@lru_cache(maxsize=None)
def tokenizer() -> Tokenizer:
    return Tokenizer.train(generate_corpus(300, seed=0), vocab_size=128)


def world(dtype: str = "float32", seed: int = 0, block_size: int = 40, n_layer: int = 1, n_embd: int = 16):
    """``(sft_model, reward_model, tokenizer)``: random weights, shapes small enough for a fast test."""
    tok = tokenizer()
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=block_size, n_layer=n_layer, n_head=2, n_embd=n_embd,
                    dtype=dtype)
    sft = TinyGPT(cfg, seed=seed)
    rm = RewardModel.from_sft(sft, np.random.default_rng(seed + 1))
    rm.gain, rm.bias = 10.0, 0.0          # random heads give tiny scores: spread them to O(1)
    return sft, rm, tok


def tiny_config(**kw) -> PPOConfig:
    """A config that runs an iteration of the tiny world in a few milliseconds: canonical PPO's PPOConfig, or
    the KnobsConfig when a knob is given."""
    base = dict(iterations=4, batch_size=8, minibatch_size=4, max_new_tokens=8, update_epochs=2, checkpoint_every=1)
    cls = PPOConfig if set(kw) <= set(PPOConfig.__dataclass_fields__) else KnobsConfig
    return cls(**{**base, **kw})


def state_of(cfg: PPOConfig, sft, rm, tok, seed: int = 0):
    """A fresh :class:`minippo.rlhf.ppo.PPOState` for ``cfg`` (the one PPOTrainer builds), its rng seeded."""
    import numpy as np
    from minippo.rlhf.run.trainer import PPOTrainer

    state = PPOTrainer(cfg, sft, rm, tok).state
    state.rng = np.random.default_rng(seed)
    return state
