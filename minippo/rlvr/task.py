"""The task with a checkable answer: add two integers, ``23+58=`` -> ``81``; and its imperfect teacher.

Legend: B batch (sequences), T tokens.

**Problems.** ``a+b=`` with ``a, b`` uniform in ``[0, 10^digits)`` (``digits = 2``: 10,000 problems). A
fixed set of ``n_heldout`` distinct problems is held out (drawn from the seed): neither the SFT
demonstrations nor the RL prompts ever contain one, so pass@k on them measures addition, not memory.

**The teacher.** The SFT demonstrations are written by a simulated student who adds column by column,
right to left, and FORGETS each carry with probability ``carry_slip`` (``47+38=75`` instead of 85;
``58+63=21`` instead of 121)::

    column i:  t = a_i + b_i + carry;  digit_i = t mod 10;  carry = t div 10, then set to 0 with prob. carry_slip

With ``carry_slip = 0.5`` the teacher is right on 59 % of the problems (every problem without a carry, and
each carry kept with probability 1/2; tested against the exact expectation). SFT imitates its demonstrations,
slips included: maximum likelihood on the teacher's answers aims at the teacher's distribution, 59 % right
(the held-out pass@1 the default 600 steps reach, seed by seed, is in the README's ``minippo rlvr``
table). The verifier (:mod:`minippo.rlvr.verifier`) knows the sum; RL against it can do better than the
demonstrations it started from, which is the point of training on a checkable reward. (The alternatives
measured, a perfect teacher, reversing a word, sorting digits, 3-digit sums: the README's ``minippo rlvr``
section.)

**SFT batches.** Each demonstration is one sequence ``<bos> a+b=answer <eos>``; the loss counts the answer
and the EOS only (:func:`answer_batch`): the operands are uniform random digits, nothing to learn.

Randomness: an explicit ``np.random.Generator`` everywhere (the same seed, the same problems).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from minippo.checks import check_range
from minippo.rlhf.data.batches import lm_batch
from minippo.rlhf.lm_train import LMConfig

# purposes of the random streams derived from the task's seed: np.random.default_rng([seed, purpose])
SEED_HELDOUT, SEED_DEMOS = 11, 12


@dataclass(frozen=True)
class Problem:
    """One problem ``a+b=``; :attr:`answer` is the verifier's, not the teacher's."""

    a: int
    b: int

    @property
    def prompt(self) -> str:
        return f"{self.a}+{self.b}="

    @property
    def answer(self) -> str:
        return str(self.a + self.b)


def teacher_answer(a: int, b: int, carry_slip: float, rng: np.random.Generator) -> str:
    """The simulated student's sum of ``a + b``: column addition that forgets each carry with probability
    ``carry_slip`` (module docstring). ``carry_slip = 0`` is the right answer, ``str(a + b)``."""
    check_range("a", a, 0, None, integer=True)
    check_range("b", b, 0, None, integer=True)
    check_range("carry_slip", carry_slip, 0, 1)
    digits, carry = [], 0
    while a or b or carry:
        t = a % 10 + b % 10 + carry                 # this column, with the carry from the right
        digits.append(t % 10)
        carry = t // 10
        if carry and rng.random() < carry_slip:     # the slip: the carry is forgotten
            carry = 0
        a, b = a // 10, b // 10
    return "".join(str(d) for d in reversed(digits)) or "0"


@dataclass
class TaskSFTConfig(LMConfig):
    """The arithmetic task (problems, held-out split, teacher) and the SFT run on its demonstrations; the model
    and optimiser fields are :class:`minippo.rlhf.lm_train.LMConfig`'s, with defaults for this task."""

    digits: int = 2
    """Operands are integers in [0, 10^digits), in [1, 3] (2: 10,000 problems)."""
    carry_slip: float = 0.5
    """The teacher forgets each carry with this probability, in [0, 1] (0: a perfect teacher)."""
    n_train: int = 20_000
    """Demonstrations written by the teacher for SFT (problems drawn with replacement), >= 1."""
    n_heldout: int = 256
    """Problems held out of SFT and RL, for the evaluation; >= 1 and at most half of all problems."""
    block_size: int = 16
    steps: int = 600
    batch_size: int = 128
    lr: float = 5e-3
    eval_interval: int = 50

    def __post_init__(self):
        super().__post_init__()
        check_range("digits", self.digits, 1, 3, integer=True)
        check_range("carry_slip", self.carry_slip, 0, 1)
        check_range("n_train", self.n_train, 1, None, integer=True)
        check_range("n_heldout", self.n_heldout, 1, self.n_problems // 2, integer=True)
        longest = 1 + 2 * self.digits + 2 + (self.digits + 1) + 1      # <bos> a + b = answer <eos>
        if self.block_size < longest:
            raise ValueError(f"`block_size` ({self.block_size}) must be >= {longest}: the longest problem with "
                             f"its answer is <bos> + {2 * self.digits + 2} + {self.digits + 1} + <eos> tokens")

    @property
    def n_problems(self) -> int:
        """How many distinct problems there are: (10^digits)^2."""
        return (10 ** self.digits) ** 2

    @classmethod
    def quick(cls, **overrides) -> "TaskSFTConfig":
        """The CI size: 6,000 demonstrations, 450 steps (pass@1 0.32-0.42 on seeds 0-3: room for RL)."""
        base = dict(n_train=6000, steps=450, eval_interval=50, ckpt_interval=150, n_heldout=128)
        return cls(**{**base, **overrides})


class Problems:
    """The task's split: :attr:`heldout` (a fixed list) and draws from the other problems (:meth:`draw`)."""

    def __init__(self, cfg: TaskSFTConfig):
        self.cfg = cfg
        size = 10 ** cfg.digits
        pick = np.random.default_rng([cfg.seed, SEED_HELDOUT]).choice(cfg.n_problems, cfg.n_heldout,
                                                                       replace=False)
        self.heldout = [Problem(int(i) // size, int(i) % size) for i in pick]
        self._held = np.zeros(cfg.n_problems, dtype=bool)                # (a * size + b) -> held out
        self._held[pick] = True

    def draw(self, n: int, rng: np.random.Generator) -> list[Problem]:
        """``n`` problems drawn uniformly (with replacement) from those NOT held out."""
        check_range("n", n, 0, None, integer=True)
        size, out = 10 ** self.cfg.digits, []
        while len(out) < n:
            i = int(rng.integers(self.cfg.n_problems))
            if not self._held[i]:                                        # rejection: never a held-out one
                out.append(Problem(i // size, i % size))
        return out

    def train_prompts(self) -> list[str]:
        """The prompts of every problem NOT held out, in the order of their index."""
        size = 10 ** self.cfg.digits
        return [Problem(i // size, i % size).prompt for i in range(self.cfg.n_problems) if not self._held[i]]

    def longest_prompt(self) -> str:
        """The longest prompt any problem has (to check that prompt + response fit the model's block)."""
        big = 10 ** self.cfg.digits - 1
        return Problem(big, big).prompt

    def demonstrations(self) -> list[str]:
        """The teacher's ``n_train`` demonstrations ``"a+b=answer"`` (slips included), from the task's seed."""
        rng = np.random.default_rng([self.cfg.seed, SEED_DEMOS])
        return [p.prompt + teacher_answer(p.a, p.b, self.cfg.carry_slip, rng)
                for p in self.draw(self.cfg.n_train, rng)]


def answer_batch(seqs: list[np.ndarray], pad_id: int = 0, *, equals_id: int):
    """:func:`minippo.rlhf.data.batches.lm_batch` with the loss on the answer and the EOS only: ``mask`` is 0 on
    every target up to and including ``=`` (the prompt). Returns ``(idx, targets, mask, attn_mask)``, (B, T)."""
    idx, targets, mask, attn_mask = lm_batch(seqs, pad_id)                 # (B, T) each
    mask = mask.copy()                       # lm_batch's mask and attn_mask are views of one array
    for b, s in enumerate(seqs):
        where = np.flatnonzero(np.asarray(s) == equals_id)
        if where.size != 1:
            raise ValueError(f"`seqs[{b}]` must hold exactly one `=` token (id {equals_id}), found {where.size}")
        mask[b, :where[0]] = 0               # target t is token t + 1: the answer starts at target index '='
    return idx, targets, mask, attn_mask


def sft_batcher(tokenizer):
    """The ``make_batch`` of :func:`minippo.rlhf.lm_train.fit_lm` for this task: :func:`answer_batch`."""
    return partial(answer_batch, equals_id=tokenizer.id_of("="))
