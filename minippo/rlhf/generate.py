"""Sampling text from TinyGPT with a KV cache: the "rollout" half of RLHF.

Legend: B batch (prompts), Tp prompt tokens (left-padded), Tn new tokens (response), V vocab.

One call turns a batch of prompts into responses::

    logits, kv = model.prefill(prompt_ids, prompt_mask)        run every prompt once, keep K and V
    for t in 0 .. max_new_tokens - 1:
        q_t      = sampling_distribution(logits, T, top_k, top_p)   what we sample from
        token_t  ~ q_t                                              inverse CDF, one uniform a row
        logp_t   = log_softmax(logits / T)[token_t]                 what PPO calls logp_old
        if every row has produced <eos>: stop
        logits   = model.decode_step(kv, token_t)                   one new position per row

**Which log-prob is returned.** ``logp`` is always the log-probability of the sampled token under
the *full*, temperature-scaled softmax ``log_softmax(logits / temperature)`` -- the distribution
pi_theta that the PPO trainer recomputes with a forward pass (one temperature everywhere,
CONTRIBUTING.md). With ``top_k > 0`` or ``top_p < 1`` the token is *sampled* from the truncated,
renormalised distribution q, but ``logp`` is still log pi, not log q. The difference matters: the
samples do not come from pi, so per-token KL estimates such as ``logp - logp_ref`` no longer average
to KL(pi || pi_ref) and can even be negative on average (lesson 15 shows this). The default
``top_k = 0, top_p = 1`` samples from pi itself, and then ``logp`` is exactly the log-prob of the
sampling distribution.

**A mismatched sampler** (lesson 24). ``logits_precision`` rounds the logits the sampler draws from,
the way an inference engine that computes them in half precision would: "float16" (IEEE half, round
to nearest even), "bfloat16" (8 significant bits: the float32 bit pattern rounded to its top 16
bits, to nearest even, as ``torch.Tensor.to(torch.bfloat16)`` does) or "bfloat16-truncate" (those 16
low bits dropped: rounding toward zero); float64 logits are rounded to float32 first
(:func:`round_logits`). Only the LM head's output is rounded, not every activation as in a real bf16
engine: a lower bound on its mismatch. ``logp`` stays the trainer's log pi from the unrounded
logits, and ``logp_sampler`` is log q(token), the log-probability the token was actually drawn with
(rounded, tempered, truncated by top-k / top-p): the sampler's log-probs of
``minippo.rl.off_policy_weights``. With the defaults (no rounding, no truncation) ``logp_sampler``
is ``logp`` and every other output is bitwise what it was without the option.

**Padding.** Prompts are left-padded (``prompt_mask`` 1 on real tokens, every row's last column
real), responses right-padded: after a row samples ``eos_id`` it is *ended*; it keeps feeding
``pad_id`` marked as padding (``attn_mask`` 0) to the cache, and its later outputs are ignored,
until a quarter of the cache's rows have ended: then the ended rows leave the cache
(``KVCache.take``) and cost nothing more (the RM's pair sampling decodes ~2x faster).
``response_mask`` is 1 on response tokens including the EOS and 0 on padding, so a row's valid
tokens are contiguous from position 0 (the conventions of CONTRIBUTING.md).

**Equality with a full forward pass** (tested in float64 to 1e-9): ``logp`` equals
``log_softmax(model.forward(sequences, attn_mask)[0] / T)`` gathered at the response tokens
(position ``Tp - 1 + t`` predicts response token ``t``), because the cache computes the same
numbers as the causal forward pass, one position at a time.

**Sampling** uses one uniform number per row and step from the caller's ``rng``
(``np.random.Generator``): the same seed gives the same samples.

**One BLAS thread.** Decoding multiplies (B, C) by (C, 3C) matrices, where OpenBLAS's threads cost
more than they save (~7x slower on a busy 2-core machine, measured). :func:`generate` does not set
the thread count itself: its callers run it inside ``minippo.blas.single_blas_thread()`` (the
trainers' iterations, :func:`generate_text`, the evaluations and studies), where the forward passes
of the same rollout run too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minippo import kernels
from minippo._lazy import LazyModule
from minippo.blas import single_blas_thread
from minippo.checks import check_choice, check_int_array, check_mask, check_range, check_same_shape
from minippo.rl.losses import log_softmax

_kernels = LazyModule("minippo.rlhf._kernels")   # numba: loaded at the first sampled token
MIN_ROWS = 16
"""Generation drops finished rows from the KV cache, but keeps at least this many: on the SkylakeX
kernel (``minippo.blas``) a product of fewer rows takes OpenBLAS's small-matrix path, whose rounding
differs, so the remaining rows' logits would change in their last bits."""


@dataclass
class Generation:
    """The output of :func:`generate` (all arrays have B rows).

    Attributes
    ----------
    response : (B, Tn) int64, the sampled tokens, ``pad_id`` after a row's EOS
    response_mask : (B, Tn) int64 0/1, 1 on response tokens including the EOS
    logp : (B, Tn) float (the model's dtype), log pi(token) under ``log_softmax(logits / T)``
        (the full softmax even with top-k / top-p), 0 on padding
    sequences : (B, Tp + Tn) int64, ``prompt_ids ++ response``
    attn_mask : (B, Tp + Tn) int64, ``prompt_mask ++ response_mask``
    ended : (B,) bool, the row produced an EOS
    prompt_len : Tp, the column where the response starts in ``sequences``
    logp_sampler : (B, Tn) like ``logp``, log q(token) under the distribution actually sampled
        from (rounded logits, top-k / top-p; module docstring), 0 on padding; ``logp`` itself when
        q is pi
    """

    response: np.ndarray
    response_mask: np.ndarray
    logp: np.ndarray
    sequences: np.ndarray
    attn_mask: np.ndarray
    ended: np.ndarray
    prompt_len: int
    logp_sampler: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        """(B,) number of response tokens per row, the EOS included."""
        return self.response_mask.sum(axis=1)


def join_generations(parts, pad_id: int) -> Generation:
    """One :class:`Generation` of the rows ``rows`` of each ``(gen, rows)`` of ``parts``, in order:
    the prompts left-padded and the responses right-padded to the longest real prompt and response
    kept (a column no kept row uses goes). What dynamic sampling (:mod:`minippo.rlhf.grpo`) builds
    its batch with from several rounds of sampling; a row's real tokens, and so its logits, do not
    change."""
    picked = [(g, np.asarray(rows, dtype=np.int64)) for g, rows in parts]
    # the longest real prompt and the longest response kept
    Tp = max(int(g.attn_mask[r, :g.prompt_len].sum(axis=1).max()) for g, r in picked)
    Tn = max(int(g.response_mask[r].sum(axis=1).max()) for g, r in picked)

    def fit(a, width, fill, left):          # (b, w) -> (b, width): pad or drop unused columns
        w = a.shape[1]
        if w >= width:
            return a[:, w - width:] if left else a[:, :width]
        pad = ((0, 0), (width - w, 0) if left else (0, width - w))
        return np.pad(a, pad, constant_values=fill)

    def join(get, width, fill, left):
        return np.concatenate([fit(get(g)[r], width, fill, left) for g, r in picked])

    prompt_ids = join(lambda g: g.sequences[:, :g.prompt_len], Tp, pad_id, True)           # (B, Tp)
    prompt_mask = join(lambda g: g.attn_mask[:, :g.prompt_len], Tp, 0, True)               # (B, Tp)
    response = join(lambda g: g.response, Tn, pad_id, False)                               # (B, Tn)
    response_mask = join(lambda g: g.response_mask, Tn, 0, False)                          # (B, Tn)
    return Generation(response=response, response_mask=response_mask,
                      logp=join(lambda g: g.logp, Tn, 0, False),
                      logp_sampler=join(lambda g: g.logp_sampler, Tn, 0, False),
                      sequences=np.concatenate([prompt_ids, response], axis=1),
                      attn_mask=np.concatenate([prompt_mask, response_mask], axis=1),
                      ended=np.concatenate([g.ended[r] for g, r in picked]), prompt_len=Tp)


def sampling_distribution(logits, temperature: float = 1.0, top_k: int = 0,
                          top_p: float = 1.0) -> np.ndarray:
    """The distribution q that :func:`generate` samples from: (B, V) probabilities, rows sum to 1.

    ``q = softmax(logits / temperature)``, then (if ``top_k > 0``) every token outside the k most
    probable gets probability 0, then (if ``top_p < 1``) only the smallest set of most probable
    tokens whose mass reaches ``top_p`` is kept (nucleus sampling, Holtzman et al. 2020,
    arXiv:1904.09751; at least one token always survives), and the survivors are renormalised.
    With the defaults q is the full softmax pi.
    """
    probs = np.exp(log_softmax(logits, temperature))                   # (B, V) pi
    B, V = probs.shape
    rows = np.arange(B)[:, None]
    if 0 < top_k < V:
        # keep exactly the k largest entries of each row (which of several tied entries: arbitrary)
        drop = np.argpartition(-probs, top_k - 1, axis=1)[:, top_k:]   # (B, V - k)
        probs[rows, drop] = 0.0
    if top_p < 1.0:
        order = np.argsort(-probs, axis=1, kind="stable")              # (B, V) most probable first
        sorted_p = probs[rows, order]
        sorted_p = sorted_p / sorted_p.sum(axis=1, keepdims=True)      # mass after the top-k cut
        mass_before = np.cumsum(sorted_p, axis=1) - sorted_p      # (B, V) mass of the better tokens
        sorted_p[mass_before >= top_p] = 0.0                 # the nucleus: smallest prefix >= top_p
        probs = np.empty_like(probs)
        probs[rows, order] = sorted_p
    return probs / probs.sum(axis=1, keepdims=True)


LOGIT_PRECISIONS = ("float16", "bfloat16", "bfloat16-truncate")


def round_logits(logits: np.ndarray, precision: str | None) -> np.ndarray:
    """``logits`` rounded to ``precision`` (:data:`LOGIT_PRECISIONS`, module docstring) and returned
    in their own dtype; None returns them unchanged. bfloat16 keeps the top 16 bits of the float32
    pattern: to nearest, ties to even (add 0x7FFF plus the lowest kept bit, then drop 16 bits), or
    truncated toward zero."""
    if precision is None:
        return logits
    x = np.asarray(logits, dtype=np.float32)                 # (B, V), float64 via float32
    if precision == "float16":
        return x.astype(np.float16).astype(logits.dtype)
    bits = x.view(np.uint32)
    if precision == "bfloat16":
        # round half to even
        bits = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (bits & np.uint32(0xFFFF0000)).view(np.float32).astype(logits.dtype)


def sample_from(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One token per row of ``probs`` (B, V) by inverse-CDF sampling with the uniforms ``u`` (B,) in
    (0, 1].

    For each row the first token whose cumulative probability reaches ``u * total`` (the CDF is
    accumulated left to right in float64), so a token of probability 0 is never chosen. With the
    switch of :mod:`minippo.kernels` on, the same scan runs compiled (``rlhf/_kernels.py``: NumPy's
    row-wise cumsum costs about a third of a decode step at B = 64, V = 512; the kernel stops at the
    sampled token).
    """
    if kernels.ON:                   # the same scan, compiled: rlhf/_kernels.py
        return _kernels.sample_from(probs, u)
    cdf = np.cumsum(probs, axis=1, dtype=np.float64)                   # (B, V)
    tokens = (cdf < (u * cdf[:, -1])[:, None]).sum(axis=1)  # (B,) first index with cdf >= u * total
    return np.minimum(tokens, probs.shape[1] - 1).astype(np.int64)


def _validate(model, prompt_ids, prompt_mask, max_new_tokens, rng, temperature, top_k, top_p,
              eos_id, pad_id, logits_precision=None):
    """Every argument of :func:`generate`, with a ValueError naming the bad one."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(model, "prefill") or not hasattr(model, "decode_step"):
        raise ValueError("`model` must be a TinyGPT (with cfg, prefill, decode_step), got "
                         f"{type(model).__name__}")
    V = cfg.vocab_size
    prompt_ids = check_int_array("prompt_ids", prompt_ids, ndim=2, low=0, high=V)
    prompt_mask = check_mask("prompt_mask", prompt_mask, layout="left")
    check_same_shape(prompt_ids=prompt_ids, prompt_mask=prompt_mask)
    B, Tp = prompt_ids.shape
    if B == 0 or Tp == 0:
        raise ValueError("`prompt_ids` must have at least one row and one column, got shape "
                         f"{prompt_ids.shape}")
    empty = np.flatnonzero(prompt_mask[:, -1] == 0)
    if empty.size:
        raise ValueError(f"`prompt_mask` row {int(empty[0])} has no real token: every prompt needs "
                         "at least "
                         "one (e.g. <bos>)")
    check_range("max_new_tokens", max_new_tokens, 1, None, integer=True)
    if Tp > cfg.block_size - max_new_tokens:
        raise ValueError(f"`prompt_ids` has Tp={Tp} columns but block_size - max_new_tokens = "
                         f"{cfg.block_size} - {max_new_tokens} = "
                         f"{cfg.block_size - max_new_tokens}: "
                         "prompt and response must fit in the model's block")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"`rng` must be a np.random.Generator, got {type(rng).__name__}")
    check_range("temperature", temperature, 0, None, lo_open=True)
    check_range("top_k", top_k, 0, None, integer=True)
    check_range("top_p", top_p, 0, 1, lo_open=True)
    check_range("eos_id", eos_id, 0, V, hi_open=True, integer=True)
    check_range("pad_id", pad_id, 0, V, hi_open=True, integer=True)
    if logits_precision is not None:
        check_choice("logits_precision", logits_precision, LOGIT_PRECISIONS)
    return prompt_ids.astype(np.int64, copy=False), (prompt_mask != 0).astype(np.int64)


def generate(model, prompt_ids, prompt_mask, *, max_new_tokens: int, rng: np.random.Generator,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, eos_id: int,
             pad_id: int = 0, logits_precision: str | None = None) -> Generation:
    """Sample a response for every prompt, with a KV cache.

    Parameters
    ----------
    model : TinyGPT (float32 or float64)
    prompt_ids : (B, Tp) int token ids, left-padded
    prompt_mask : (B, Tp) 0/1, 1 on real prompt tokens (left layout: each row's last column is real)
    max_new_tokens : int >= 1; Tp + max_new_tokens must be <= block_size
    rng : np.random.Generator (one uniform per row per step)
    temperature : > 0, the logits are divided by it (1 = the model's own distribution)
    top_k : >= 0, sample only among the k most probable tokens (0 = off)
    top_p : in (0, 1], nucleus sampling (1 = off)
    eos_id : the token that ends a response
    pad_id : written after a row's EOS
    logits_precision : None (off), or a mismatched sampler's rounding of the logits
        (:data:`LOGIT_PRECISIONS`)

    Returns
    -------
    Generation : response, response_mask, logp (full-softmax log-probs, see the module docstring),
        sequences, attn_mask, ended, prompt_len, logp_sampler. ``Tn`` is the number of tokens
        actually sampled: the loop stops as soon as every row has ended, else after
        ``max_new_tokens``.
    """
    prompt_ids, prompt_mask = _validate(model, prompt_ids, prompt_mask, max_new_tokens, rng,
                                        temperature, top_k, top_p, eos_id, pad_id, logits_precision)
    B, Tp = prompt_ids.shape
    dtype = np.dtype(model.cfg.dtype)
    response = np.full((B, max_new_tokens), pad_id, dtype=np.int64)    # (B, Tn_max)
    response_mask = np.zeros((B, max_new_tokens), dtype=np.int64)      # (B, Tn_max)
    logp = np.zeros((B, max_new_tokens), dtype=dtype)                  # (B, Tn_max)
    logp_sampler = np.zeros((B, max_new_tokens), dtype=dtype)          # (B, Tn_max) log q(token)
    mismatched = logits_precision is not None or top_k or top_p < 1    # q is not pi
    ended = np.zeros(B, dtype=bool)
    logits, kv = model.prefill(prompt_ids, prompt_mask)       # (B, V) at the last prompt column
    rows = np.arange(B)                  # the rows in the cache and in logits (finished ones leave)
    n_new = 0
    for t in range(max_new_tokens):
        # the next four lines sample token_t from q and record log pi(token_t) (full softmax)
        logp_all = log_softmax(logits, temperature)                    # (n, V) log pi, n rows
        q = (sampling_distribution(round_logits(logits, logits_precision), temperature, top_k,
                                   top_p)
             if mismatched else np.exp(logp_all))          # (n, V) q: what the sampler draws from
        u = 1.0 - rng.random(B)                                        # (B,) in (0, 1], one per row
        token = sample_from(q, u[rows])                                # (n,)
        alive = ~ended[rows]                                           # (n,) rows still writing
        write = rows[alive]
        response[write, t] = token[alive]
        response_mask[write, t] = 1
        logp[write, t] = logp_all[alive, token[alive]]
        logp_sampler[write, t] = np.log(q[alive, token[alive]]) if mismatched else logp[write, t]
        ended[write] |= token[alive] == eos_id
        n_new = t + 1
        if ended.all() or t == max_new_tokens - 1:
            break
        # a finished row needs no more work: when a quarter of the cache's rows have finished,
        # drop them (down to MIN_ROWS: fewer rows would round differently)
        alive = ~ended[rows]
        if MIN_ROWS <= alive.sum() <= 0.75 * rows.size:
            kv, rows, token = kv.take(alive), rows[alive], token[alive]
        # finished rows still in the cache feed pad as padding (attn_mask 0); outputs ignored
        feed = np.where(ended[rows], pad_id, token)                    # (n,)
        logits = model.decode_step(kv, feed, (~ended[rows]).astype(np.int8))
    response, response_mask, logp = response[:, :n_new], response_mask[:, :n_new], logp[:, :n_new]
    return Generation(
        response=response, response_mask=response_mask, logp=logp,
        logp_sampler=logp_sampler[:, :n_new],
        sequences=np.concatenate([prompt_ids, response], axis=1),      # (B, Tp + Tn)
        attn_mask=np.concatenate([prompt_mask, response_mask], axis=1),
        ended=ended, prompt_len=Tp)


# ----------------------------------------------------------------------------------------------
# text in, text out
# ----------------------------------------------------------------------------------------------

def encode_prompts(tokenizer, prompts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``<bos> prompt`` for each prompt, left-padded: ``(prompt_ids, prompt_mask)``, each (B, Tp)
    int64.

    An empty prompt is just ``<bos>``: the model then writes a whole sentence from scratch.
    """
    return tokenizer.pad_left(tokenizer.encode_batch(list(prompts), add_bos=True))


def generate_text(model, tokenizer, prompts: list[str], *, rng: np.random.Generator,
                  max_new_tokens: int | None = None, **sampling) -> tuple[list[str], Generation]:
    """Complete each prompt: ``(texts, generation)``, ``texts[b]`` = prompt + response as a string.

    ``max_new_tokens`` defaults to what fits in the block; ``sampling`` are :func:`generate`'s
    ``temperature``, ``top_k``, ``top_p``. The text stops before the EOS (a row that never produced
    one is shown as far as it got).
    """
    ids, mask = encode_prompts(tokenizer, prompts)
    if max_new_tokens is None:
        max_new_tokens = model.cfg.block_size - ids.shape[1]
    with single_blas_thread():      # (B, C) x (C, 3C) products: threads cost more than they save
        gen = generate(model, ids, mask, max_new_tokens=max_new_tokens, rng=rng,
                       eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id, **sampling)
    return tokenizer.decode_batch(gen.sequences), gen


def check_response_fits(max_new_tokens: int, tokenizer, prompts, block_size: int,
                        name: str = "max_new_tokens") -> None:
    """``ValueError`` naming ``name`` when ``<bos>`` + the longest of ``prompts`` +
    ``max_new_tokens`` exceeds ``block_size``: a run checks it before it writes anything, instead of
    failing at its first rollout."""
    check_range(name, max_new_tokens, 1, None, integer=True)
    longest = max(len(ids) for ids in tokenizer.encode_batch(list(prompts), add_bos=True))
    if longest + max_new_tokens > block_size:
        raise ValueError(f"`{name}` = {max_new_tokens} does not fit: the longest prompt is "
                         f"{longest} tokens "
                         f"(<bos> included) and the model's block_size is {block_size}, so at most "
                         f"{block_size - longest} new tokens")


TRUNCATED_MARK = " [cut: max_new_tokens reached, no EOS]"
"""What :func:`show_sample` appends to a response that never produced its EOS."""


def show_sample(text: str, ended: bool) -> str:
    """``text`` as a sample is shown to a reader: marked with :data:`TRUNCATED_MARK` when the
    response hit ``max_new_tokens`` without an EOS (it was cut, e.g. mid-word, and is scored as it
    stands)."""
    return text if ended else text + TRUNCATED_MARK
