"""The reward model: a TinyGPT trunk with a scalar head, trained with the Bradley-Terry loss.

Legend: B batch (sequences), N pairs, T tokens, C channels (n_embd), V vocab, L layers.

RLHF stage 2 (InstructGPT sec. 3.5, eq. (1); Q29): one of the four models
of PPO for language models. It reads ``prompt ++ response`` and returns ONE number per sequence::

    scalar = TinyGPT(sequences, attn_mask).scalar_head             (B, T) a number at every position
    r      = scalar[b, last_token_index(attn_mask)[b]]             (B,)   at the last real token

The last real token is the EOS when the response ended (never the padding after it); a response
without EOS is read at its last sampled token (the PPO trainer subtracts a penalty for those). The
PPO trainer adds this score on the same token of its per-token rewards (``last_token_index``).

**Bradley-Terry loss** (InstructGPT eq. (1), Ouyang et al. 2022, arXiv:2203.02155; Bradley & Terry
1952): the model says P(y_w preferred over y_l) = sigmoid(r(x, y_w) - r(x, y_l)) and is trained to
maximise the likelihood of the labels of N pairs::

    loss = -1/N sum_i log sigmoid(r_chosen_i - r_rejected_i)
         =  1/N sum_i softplus(-(r_chosen_i - r_rejected_i))            (stable form, logaddexp)
    d loss / d r_chosen_i   = -sigmoid(-(r_chosen_i - r_rejected_i)) / N
    d loss / d r_rejected_i = +sigmoid(-(r_chosen_i - r_rejected_i)) / N

As in InstructGPT, the K responses of a prompt are scored once and all their K (K - 1) / 2 pairs
enter the loss (eq. (1)'s 1 / C(K, 2) is this mean when every prompt has all its pairs); a response
in several pairs sums their gradients. ``d loss / d scalar`` is d loss / d r at the last-token
position of each row, 0 elsewhere, which ``TinyGPT.backward(dscalar=...)`` carries into the trunk.
The loss only sees differences, so a constant added to every score changes nothing (the head bias
gets zero gradient).

**Normalisation** (OpenAI's lm-human-preferences, Ziegler et al. 2019, arXiv:1909.08593): after
training, a gain and a bias are set so that the scores of fresh samples of the reference (SFT)
policy have mean 0 and standard deviation 1: ``score = gain * raw_score + bias``, gain = 1 / std,
bias = -mean / std. PPO then sees rewards on a known scale whatever the RM training did (reward
normalisation, Q30, done once with fixed constants rather than per batch).

The reward model starts from the SFT weights (its trunk already reads the language) with a fresh
scalar head ~ N(0, std 1 / sqrt(C + 1)) as in lm-human-preferences; ``init="fresh"`` builds a new,
possibly smaller, TinyGPT instead (weaker reward models for lesson 19).

Training the model (the stage ``minippo rm``: preference data, minibatches, normalisation, report)
is :mod:`minippo.rlhf.rm_train`.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import UsageError, check_float_array, check_int_array, check_mask, check_range
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rlhf.checkpoint import load_model, save_model
from minippo.rlhf.data.preferences import log_sigmoid

STATE_KEY = "reward_model"          # the entry of the checkpoint's state holding gain, bias, config


# ----------------------------------------------------------------------------------------------
# where the score is read, and the Bradley-Terry loss
# ----------------------------------------------------------------------------------------------

def last_token_index(attn_mask) -> np.ndarray:
    """(B,) int64 column of the last real token of each row (works for any padding layout).

    ``[1, 1, 1, 0, 0] -> 2`` (the EOS of a right-padded response), ``[1, 1, 1] -> 2``,
    ``[0, 0, 1, 1, 0] -> 3``. A row without any real token is a ``ValueError``.
    """
    mask = check_mask("attn_mask", attn_mask, layout="any") != 0     # (B, T) bool
    empty = ~mask.any(axis=1)
    if empty.any():
        raise ValueError(f"`attn_mask` row {int(np.argmax(empty))} has no real token: nothing to "
                         "score")
    T = mask.shape[1]
    return (T - 1 - np.argmax(mask[:, ::-1], axis=1)).astype(np.int64)


def length_chunks(attn_mask, max_rows: int) -> list[tuple[np.ndarray, int]]:
    """Rows grouped by length to cut padding: ``[(rows, T), ...]`` with at most ``max_rows`` rows
    per chunk and ``T`` = 1 + the chunk's largest last-token index (columns after it are all
    padding)."""
    check_range("max_rows", max_rows, 1, None, integer=True)
    ends = last_token_index(attn_mask) + 1                             # (B,)
    order = np.argsort(ends, kind="stable")
    return [(rows, int(ends[rows].max())) for rows in
            (order[i:i + max_rows] for i in range(0, order.size, max_rows))]


def bradley_terry_forward(r_chosen, r_rejected):
    """Bradley-Terry loss ``-mean log sigmoid(r_chosen - r_rejected)`` (InstructGPT eq. (1), K = 2).

    Parameters
    ----------
    r_chosen, r_rejected : (N,) scores of the preferred (y_w) and the other (y_l) response

    Returns
    -------
    loss : float
    cache : for :func:`bradley_terry_backward`
    """
    r_chosen = check_float_array("r_chosen", r_chosen, ndim=1)
    r_rejected = check_float_array("r_rejected", r_rejected, shape=r_chosen.shape)
    if r_chosen.size == 0:
        raise ValueError("`r_chosen` must hold at least one pair, got shape (0,)")
    margin = r_chosen.astype(np.float64) - r_rejected             # (N,) r_w - r_l
    loss = float(-log_sigmoid(margin).mean())
    return loss, (margin, r_chosen.dtype)


def bradley_terry_backward(dloss: float, cache):
    """``(dr_chosen, dr_rejected)``, each (N,): the gradient of :func:`bradley_terry_forward`
    (InstructGPT eq. (1)).

    loss = mean softplus(-margin)  ->  d loss / d margin = -sigmoid(-margin) / N, and
    margin = r_chosen - r_rejected sends it with + to r_chosen and - to r_rejected.
    """
    margin, dtype = cache
    dmargin = -dloss * np.exp(log_sigmoid(-margin)) / margin.size   # (N,) -sigmoid(-margin) / N
    return dmargin.astype(dtype), (-dmargin).astype(dtype)


# ----------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------

class RewardModel:
    """A TinyGPT whose scalar head, read at the last real token, is the score; plus gain and bias.

    Parameters
    ----------
    model : TinyGPT, the trunk and ``scalar_head.w|b`` (trained); ``model.params`` are the
        parameters
    gain, bias : the normalisation ``score = gain * raw_score + bias`` (1 and 0 until
    :meth:`normalize`)
    """

    def __init__(self, model: TinyGPT, gain: float = 1.0, bias: float = 0.0):
        if not isinstance(model, TinyGPT):
            raise ValueError(f"`model` must be a TinyGPT, got {type(model).__name__}")
        check_range("gain", gain, 0, None, lo_open=True)
        check_range("bias", bias)
        self.model, self.gain, self.bias = model, float(gain), float(bias)

    @classmethod
    def from_sft(cls, sft_model: TinyGPT, rng: np.random.Generator,
                 n_layer: int | None = None) -> "RewardModel":
        """Copy the SFT weights (optionally only the first ``n_layer`` blocks) and draw a new head.

        The head ``scalar_head.w`` ~ N(0, std 1 / sqrt(C + 1)) and ``scalar_head.b`` = 0, as
        lm-human-preferences initialises its reward head; the LM head (tied ``wte``) is kept but
        unused.
        """
        if not isinstance(sft_model, TinyGPT):
            raise ValueError(f"`sft_model` must be a TinyGPT, got {type(sft_model).__name__}")
        cfg = sft_model.cfg
        n_layer = cfg.n_layer if n_layer is None else n_layer
        check_range("n_layer", n_layer, 1, cfg.n_layer, integer=True)
        new_cfg = GPTConfig(**{**cfg.to_dict(), "n_layer": int(n_layer)})
        keep = [k for k in sft_model.params
                if not k.startswith("h.") or int(k.split(".")[1]) < n_layer]
        model = TinyGPT.from_params(new_cfg, {k: sft_model.params[k].copy() for k in keep})
        C = cfg.n_embd
        model.params["scalar_head.w"][...] = rng.normal(0.0, 1.0 / np.sqrt(C + 1), size=(C, 1))
        model.params["scalar_head.b"][...] = 0.0
        return cls(model)

    @classmethod
    def fresh(cls, cfg: GPTConfig, rng: np.random.Generator) -> "RewardModel":
        """A randomly initialised TinyGPT of shape ``cfg`` (GPT-2 init) with the same head init."""
        model = TinyGPT(cfg, rng=rng)
        std = 1.0 / np.sqrt(cfg.n_embd + 1)
        model.params["scalar_head.w"][...] = rng.normal(0.0, std, size=(cfg.n_embd, 1))
        return cls(model)

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.model.params

    # -- scores -----------------------------------------------------------------------------
    def forward(self, sequences, attn_mask):
        """Raw scores ``(B,)`` (model dtype) at the last real token and the cache for
        :meth:`backward`."""
        last = last_token_index(attn_mask)                             # (B,)
        _, scalar, cache = self.model.forward(sequences, attn_mask, scalar=True, logits=False)
        return scalar[np.arange(len(last)), last], (cache, last, scalar.shape)

    def backward(self, cache, draw) -> dict[str, np.ndarray]:
        """Parameter gradients given ``draw`` (B,) = d loss / d raw score: placed on the last token.
        """
        c_model, last, shape = cache
        draw = check_float_array("draw", draw, shape=(shape[0],))
        dscalar = np.zeros(shape, dtype=self.model.cfg.dtype)       # (B, T) zero off the last token
        dscalar[np.arange(shape[0]), last] = draw
        return self.model.backward(c_model, dscalar=dscalar)

    def score(self, sequences, attn_mask, batch_size: int = 256) -> np.ndarray:
        """(B,) float64 normalised scores ``gain * r(x, y) + bias`` (what PPO uses as the reward),
        ``batch_size`` rows of similar length at a time."""
        sequences = check_int_array("sequences", sequences, ndim=2)
        attn_mask = check_mask("attn_mask", attn_mask, shape=sequences.shape, layout="any")
        check_range("batch_size", batch_size, 1, None, integer=True)
        raw = np.empty(sequences.shape[0], dtype=np.float64)              # (B,) r(x, y)
        for rows, T in length_chunks(attn_mask, batch_size):
            raw[rows] = self.forward(sequences[rows, :T], attn_mask[rows, :T])[0]
        return self.gain * raw + self.bias

    def raw_score(self, sequences, attn_mask, batch_size: int = 256) -> np.ndarray:
        """(B,) float64 unnormalised scores r(x, y): :meth:`score` of this network with gain 1 and
        bias 0."""
        return RewardModel(self.model).score(sequences, attn_mask, batch_size)

    def normalize(self, sequences, attn_mask) -> tuple[float, float]:
        """Set gain and bias so that the scores of these reference-policy samples have mean 0, std
        1.

        gain = 1 / std(raw), bias = -mean(raw) / std(raw) (population std); returns
        ``(gain, bias)``.
        """
        raw = self.raw_score(sequences, attn_mask)
        std = float(raw.std())
        if raw.size < 2 or not std > 0:
            raise ValueError("`sequences` must hold at least two samples with different raw scores "
                             "to normalise")
        self.gain, self.bias = 1.0 / std, -float(raw.mean()) / std
        return self.gain, self.bias

    # -- the Bradley-Terry step ---------------------------------------------------------------
    def pairs_loss_and_grads(self, sequences, attn_mask, chosen_idx, rejected_idx,
                             chunk_rows: int = 16):
        """Bradley-Terry loss of the pairs ``(chosen_idx[i], rejected_idx[i])`` of rows of
        ``sequences``, the accuracy (fraction with r_chosen > r_rejected), and the gradients of
        every parameter.

        Every row is scored ONCE, however many pairs it is in (InstructGPT scores the K responses of
        a prompt once for all its K (K - 1) / 2 comparisons), in chunks of ``chunk_rows`` rows of
        similar length (less padding); the gradients of the chunks are summed.

        Returns ``(loss, accuracy, grads)``.
        """
        sequences = check_int_array("sequences", sequences, ndim=2)
        attn_mask = check_mask("attn_mask", attn_mask, shape=sequences.shape, layout="any")
        M = sequences.shape[0]
        chosen_idx = check_int_array("chosen_idx", chosen_idx, ndim=1, low=0, high=M)
        rejected_idx = check_int_array("rejected_idx", rejected_idx, shape=chosen_idx.shape,
                                       low=0, high=M)
        r = np.empty(M, dtype=self.model.cfg.dtype)                     # (M,) raw scores
        caches = []
        for rows, T in length_chunks(attn_mask, chunk_rows):
            r[rows], cache = self.forward(sequences[rows, :T], attn_mask[rows, :T])
            caches.append((rows, cache))
        loss, c_bt = bradley_terry_forward(r[chosen_idx], r[rejected_idx])
        dr_chosen, dr_rejected = bradley_terry_backward(1.0, c_bt)
        # a row in several pairs collects the gradient of each of them: the fan-out is summed here
        dr = np.zeros(M, dtype=r.dtype)                                  # (M,) d loss / d r
        np.add.at(dr, chosen_idx, dr_chosen)
        np.add.at(dr, rejected_idx, dr_rejected)
        grads = None
        # the chunks' gradients add up
        for rows, cache in caches:
            g = self.backward(cache, dr[rows])
            if grads is None:
                grads = g
            else:
                for k in grads:
                    grads[k] += g[k]
        return loss, float(np.mean(r[chosen_idx] > r[rejected_idx])), grads

    # -- folding, saving, loading -------------------------------------------------------------
    def normalized_model(self) -> TinyGPT:
        """A copy of the TinyGPT whose scalar head outputs the NORMALISED score at every position:
        w' = gain * w, b' = gain * b + bias (e.g. to initialise PPO's critic from the reward model).
        """
        model = self.model.copy()
        model.params["scalar_head.w"] *= self.gain
        model.params["scalar_head.b"][...] = self.gain * model.params["scalar_head.b"] + self.bias
        return model

    def save(self, directory, *, tokenizer=None, extra_state: dict | None = None):
        """Write the weights, gain and bias (under ``state["reward_model"]``) with ``save_model``.
        """
        extra = dict(extra_state or {})
        extra[STATE_KEY] = {**extra.get(STATE_KEY, {}), "gain": self.gain, "bias": self.bias}
        return save_model(directory, self.model, tokenizer=tokenizer, extra_state=extra)

    @classmethod
    def load(cls, directory) -> tuple["RewardModel", dict]:
        """``(reward_model, state)`` from a folder written by :meth:`save` (``state`` as
        ``load_model``'s)."""
        model, state = load_model(directory)
        if STATE_KEY not in state:
            raise UsageError(f"{directory} holds a model but no reward model (no {STATE_KEY!r} "
                             "entry in state.json)")
        return cls(model, gain=state[STATE_KEY]["gain"], bias=state[STATE_KEY]["bias"]), state


# ----------------------------------------------------------------------------------------------
# the score PPO rewards a response with: the RM score and the sequence-level terms
# ----------------------------------------------------------------------------------------------

def has_eos(response, response_mask, eos_id: int) -> np.ndarray:
    """(B,) bool: the response contains ``eos_id`` among its valid tokens (the response only).

    Parameters
    ----------
    response : (B, Tn) int token ids, right-padded
    response_mask : (B, Tn) 0/1, 1 on response tokens (EOS included)
    eos_id : the end-of-sequence id
    """
    response = check_int_array("response", response, ndim=2)
    response_mask = check_mask("response_mask", response_mask, shape=response.shape, layout="right")
    check_range("eos_id", eos_id, 0, None, integer=True)
    return ((response == eos_id) & (response_mask != 0)).any(axis=1)


def sequence_scores(rm_scores, ended, lengths, *, missing_eos_penalty: float = 0.0,
                    length_penalty: float = 0.0,
                    length_bonus: float = 0.0, length_norm_alpha: float = 0.0,
                    score_clip: float | None = None) -> np.ndarray:
    """The score each response is rewarded with::

        score = rm_score - length_penalty * n_tokens + length_bonus * n_tokens
        score = score / n_tokens ** length_norm_alpha                    (0 = off)
        score = score - missing_eos_penalty * [no EOS among the response's valid tokens]
        score = clip(score, -score_clip, score_clip)                     (None = off)

    A response that hit ``max_new_tokens`` without EOS is not a finished sentence: without the
    penalty the policy can learn to ramble into the length limit (TRL ``missing_eos_penalty``).
    ``length_penalty`` counters length hacking; ``length_bonus`` simulates a reward model that likes
    long answers (lesson 16); dividing by n^alpha cancels a length bias that grows like n^alpha and
    no other (lesson 16 measures it).

    Parameters
    ----------
    rm_scores : (B,) the reward model's (normalised) scores
    ended : (B,) bool, the response produced an EOS (see :func:`has_eos`)
    lengths : (B,) int, response tokens (EOS included)
    missing_eos_penalty, length_penalty, length_bonus : >= 0
    length_norm_alpha : >= 0, divide the (length-shaped) RM score by ``max(n_tokens, 1) ** alpha``
    score_clip : > 0 or None

    Returns
    -------
    scores : (B,) float64
    """
    rm_scores = check_float_array("rm_scores", rm_scores, ndim=1)
    ended = np.asarray(ended)
    if ended.dtype != np.bool_ or ended.shape != rm_scores.shape:
        raise ValueError(f"`ended` must be a bool array of shape {rm_scores.shape}, got "
                         f"{ended.dtype} {ended.shape}")
    lengths = check_int_array("lengths", lengths, shape=rm_scores.shape, low=0)
    for name, v in (("missing_eos_penalty", missing_eos_penalty),
                    ("length_penalty", length_penalty), ("length_bonus", length_bonus),
                    ("length_norm_alpha", length_norm_alpha)):
        check_range(name, v, 0, None)
    scores = rm_scores.astype(np.float64)
    # the next three lines are the linear length terms, the division by n^alpha and the missing-EOS
    # penalty
    scores = scores + (length_bonus - length_penalty) * lengths
    if length_norm_alpha:
        scores = scores / np.maximum(lengths, 1) ** length_norm_alpha
    scores = scores - missing_eos_penalty * (~ended)
    if score_clip is not None:
        check_range("score_clip", score_clip, 0, None, lo_open=True)
        scores = np.clip(scores, -score_clip, score_clip)
    return scores
