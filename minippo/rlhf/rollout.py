"""The experience buffer of RLHF-PPO: the per-token 7-tuple (Q25), as padded (B, Tn) arrays.

Legend: B batch (responses), Tp prompt columns (left-padded), Tn response columns (right-padded).

Classic PPO stores ``(s, a, r, s', done)``; a language model's PPO stores, for every response token
(Q25): observation, action, log_prob, value, reward, advantage, return. Here one row b
is one response, one column j one of its tokens::

    field        here                    meaning
    observation  prompt ++ response[:j]  the context ids (``observation(b, j)``): the state s_j
    action       response[b, j]          the token chosen in s_j
    log_prob     logp[b, j]              log pi_old(a_j|s_j), stored at rollout time (the ratio's
                                         denominator; never recomputed during the update)
    value        values[b, j]            V(s_j) of the critic at rollout time
    reward       rewards[b, j]           -beta kl_j, plus the score on the last valid token
    advantage    adv[b, j]               GAE A_j (whitened over the batch)
    return       returns[b, j]           A_j + V(s_j): the critic's target

plus ``response_mask`` (1 on response tokens including the EOS, 0 on padding), ``prompt_mask``, and
``attn_mask = prompt_mask ++ response_mask`` (the mask the model reads). Observations are not copied
per token: ``sequences[b, :Tp + j]`` is the context, with left padding in front (masked out).
Every per-token array is 0 on padding, so nothing stored there can enter a sum.

:meth:`Rollout.to_table` prints one row token by token (lesson 09); :func:`epoch_minibatches` gives
the index arrays of a seeded shuffle over sequences (whole responses stay together) for every
epoch of an update, :func:`minibatches` those of one epoch. Rows of one prompt are contiguous (the
critic-free estimators of :mod:`minippo.rlhf.grpo` rely on it).
"""
from __future__ import annotations

import io
import random
from dataclasses import dataclass, field, fields, replace

import numpy as np

from minippo.checks import check_range
from minippo.io import atomic_write_bytes

PER_TOKEN = ("logp", "logp_ref", "values", "rewards", "kl", "non_score_reward", "adv", "returns",
             "gen_logp")
PER_ROW = ("rm_scores", "scores", "ended")


@dataclass
class Rollout:
    """One iteration's experience (B responses); see the module docstring for the fields.

    ``rewards``, ``kl``, ``non_score_reward`` are filled by the reward step, ``adv`` and ``returns``
    by the advantage step (None before). ``gen_logp`` are the log-probs returned by the KV-cache
    sampler, kept to check them against ``logp`` (the same numbers from one full forward pass).
    """

    prompt_ids: np.ndarray          # (B, Tp) int64, left-padded
    prompt_mask: np.ndarray         # (B, Tp) 0/1
    response: np.ndarray            # (B, Tn) int64, right-padded (pad after EOS)
    response_mask: np.ndarray       # (B, Tn) 0/1, 1 on response tokens incl. EOS
    logp: np.ndarray                # (B, Tn) log pi_old(a_t|s_t)
    logp_ref: np.ndarray            # (B, Tn) log pi_ref(a_t|s_t)
    values: np.ndarray              # (B, Tn) V(s_t)
    rm_scores: np.ndarray           # (B,) reward-model score (normalised)
    scores: np.ndarray              # (B,) score after the missing-EOS / length terms
    ended: np.ndarray               # (B,) bool, an EOS was produced
    gen_logp: np.ndarray | None = None
    rewards: np.ndarray | None = None
    kl: np.ndarray | None = None
    non_score_reward: np.ndarray | None = None
    adv: np.ndarray | None = None
    returns: np.ndarray | None = None
    # what the models read, set from the fields above when the rollout is built (as in Generation)
    sequences: np.ndarray = field(init=False, repr=False)   # (B, T) prompt_ids ++ response
    attn_mask: np.ndarray = field(init=False, repr=False)   # (B, T) prompt_mask ++ response_mask
    batch_size: int = field(init=False)     # B
    prompt_len: int = field(init=False)     # Tp: the column of ``sequences`` where responses start

    def __post_init__(self):
        m = self.response_mask != 0
        for name in PER_TOKEN:                    # padding holds exactly 0 in every per-token array
            a = getattr(self, name)
            if a is not None:
                setattr(self, name, np.where(m, a, 0).astype(a.dtype, copy=False))
        self.sequences = np.concatenate([self.prompt_ids, self.response], axis=1)
        self.attn_mask = np.concatenate([self.prompt_mask, self.response_mask], axis=1)
        self.batch_size, self.prompt_len = self.prompt_ids.shape

    # ---- derived arrays -----------------------------------------------------------------------
    @property
    def lengths(self) -> np.ndarray:
        """(B,) response tokens per row (EOS included)."""
        return self.response_mask.sum(axis=1)

    @property
    def sequence_returns(self) -> np.ndarray:
        """(B,) each response's whole return: its score plus its summed KL penalty (after the reward
        step); what the critic-free estimators compare within a prompt's group."""
        if self.non_score_reward is None:
            raise ValueError("`rollout` has no rewards yet: run the reward step first")
        return self.scores + self.non_score_reward.sum(axis=1)

    def observation(self, row: int, j: int) -> np.ndarray:
        """The context ids of token j of ``row`` (the state s_j): real prompt tokens + response[:j].
        """
        check_range("row", row, 0, self.batch_size - 1, integer=True)
        check_range("j", j, 0, self.response.shape[1] - 1, integer=True)
        ctx = self.sequences[row, :self.prompt_len + j]
        keep = self.attn_mask[row, :self.prompt_len + j] != 0
        return ctx[keep]

    def take(self, idx) -> "Rollout":
        """The sub-batch of rows ``idx`` (a minibatch); arrays are copies, None stays None."""
        idx = np.asarray(idx)
        arrays = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return replace(self, **{k: (None if a is None else a[idx]) for k, a in arrays.items()})

    def arrays(self) -> dict[str, np.ndarray]:
        """Every stored array by name (None fields and the derived ``sequences``, ``attn_mask`` left
        out)."""
        arrays = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return {k: a for k, a in arrays.items() if a is not None}

    def save_npz(self, path) -> None:
        """Write :meth:`arrays` to an ``.npz`` file (atomically): the per-token dump of the studies.
        """
        buf = io.BytesIO()
        np.savez(buf, **self.arrays())
        atomic_write_bytes(path, buf.getvalue())

    # ---- printing -----------------------------------------------------------------------------
    def to_table(self, tokenizer, row: int = 0, *, context: int = 3) -> str:
        """Row ``row`` printed token by token as the per-token 7-tuple, padding and masks included.

        ``context`` is how many of the observation's last tokens are shown. Columns: j (response
        index), col (column in ``sequences``), observation (its length and last pieces), action (id
        and piece), mask, log_prob, value, reward, advantage, return. A column not computed yet
        prints "-".
        """
        check_range("row", row, 0, self.batch_size - 1, integer=True)
        pieces = lambda ids: " ".join(tokenizer.pieces([int(i) for i in ids]))   # noqa: E731
        Tp = self.prompt_len
        lines = [f"prompt (left-padded, Tp={Tp}): {pieces(self.prompt_ids[row])}",
                 f"prompt_mask: {' '.join(str(int(v)) for v in self.prompt_mask[row])}",
                 f"response (right-padded, Tn={self.response.shape[1]}), "
                 f"score={self.scores[row]:+.3f} "
                 f"(rm {self.rm_scores[row]:+.3f}, eos {'yes' if self.ended[row] else 'NO'})",
                 f"{'j':>3} {'col':>4}  {'observation (len: ... last tokens)':<40} {'action':<18} "
                 f"{'mask':>4} "
                 f"{'log_prob':>9} {'value':>8} {'reward':>8} {'advantage':>9} {'return':>8}"]

        def num(name, j, width):
            a = getattr(self, name)
            # + 0.0: no "-0.000"
            return f"{'-':>{width}}" if a is None else f"{float(a[row, j]) + 0.0:>{width}.3f}"

        for j in range(self.response.shape[1]):
            valid = self.response_mask[row, j] != 0
            obs = self.observation(row, j)
            shown = ("... " if len(obs) > context else "") + pieces(obs[-context:])
            obs_txt = f"{len(obs):>2}: {shown}" if valid else "(padding)"
            action = f"{int(self.response[row, j]):>4} {pieces([self.response[row, j]])}"
            lines.append(f"{j:>3} {Tp + j:>4}  {obs_txt[:40]:<40} {action[:18]:<18} "
                         f"{int(valid):>4} "
                         f"{num('logp', j, 9)} {num('values', j, 8)} {num('rewards', j, 8)} "
                         f"{num('adv', j, 9)} {num('returns', j, 8)}")
        return "\n".join(lines)


@dataclass
class PromptTable:
    """The prompts of the run, tokenized once (a dataset, as TRL's loaders hand it over):
    ``<bos> prompt`` of every prompt, left-padded to the longest, ``ids`` and ``mask`` (P, Tp)
    int64."""

    ids: np.ndarray
    mask: np.ndarray

    @classmethod
    def encode(cls, tokenizer, prompts) -> "PromptTable":
        """The table of ``prompts`` (strings) by ``tokenizer`` (``<bos>`` first, ``<pad>`` on the
        left)."""
        return cls(*tokenizer.pad_left(tokenizer.encode_batch(list(prompts), add_bos=True)))

    def draw(self, n: int, rng: np.random.Generator, repeat: int = 1):
        """``(prompt_ids, prompt_mask)`` (n * repeat, Tp): ``n`` prompts drawn uniformly with
        replacement, each repeated ``repeat`` times (rows of one prompt contiguous), left-padded to
        the longest drawn. One integer of ``rng`` seeds the draw, as
        :func:`minippo.rlhf.data.corpus.sample_prompts` draws (the same prompts for the same
        generator)."""
        check_range("n", n, 1, None, integer=True)
        r = random.Random(int(rng.integers(0, 2**63 - 1)))
        rows = np.repeat([r.randrange(len(self.ids)) for _ in range(n)], repeat)   # (n * repeat,)
        ids, mask = self.ids[rows], self.mask[rows]
        start = int(np.argmax(mask.any(axis=0)))               # the columns no drawn prompt uses go
        return ids[:, start:], mask[:, start:]


def epoch_minibatches(batch_size: int, minibatch_size: int, epochs: int, rng: np.random.Generator):
    """Yield ``(epoch, idx)`` for ``epochs`` passes over the ``batch_size`` rows: each epoch a
    seeded permutation cut into index arrays of ``minibatch_size`` (which must divide
    ``batch_size``; whole responses stay together), drawn when the epoch starts (a consumer that
    breaks out early draws no further shuffle)."""
    check_range("epochs", epochs, 1, None, integer=True)
    check_range("batch_size", batch_size, 1, None, integer=True)
    check_range("minibatch_size", minibatch_size, 1, batch_size, integer=True)
    if batch_size % minibatch_size:
        raise ValueError(f"`minibatch_size` ({minibatch_size}) must divide `batch_size` "
                         f"({batch_size})")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"`rng` must be a np.random.Generator, got {type(rng).__name__}")
    for epoch in range(epochs):
        order = rng.permutation(batch_size)                            # (B,)
        for start in range(0, batch_size, minibatch_size):
            yield epoch, order[start:start + minibatch_size]


def minibatches(batch_size: int, minibatch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch's minibatches of :func:`epoch_minibatches`: a list of index arrays."""
    return [idx for _, idx in epoch_minibatches(batch_size, minibatch_size, 1, rng)]
