"""TinyGPT: a GPT-2 style decoder with hand-written backprop, a scalar head, and a KV cache.

Legend: B batch, T tokens, N real tokens (B T without padding), C channels (n_embd), V vocab,
H heads, L layers (n_layer), hs = C / H.

The network (GPT-2, Radford et al. 2019; pre-LayerNorm blocks as in nanoGPT / llm.c)::

    pos    = max(cumsum(attn_mask) - 1, 0)          position ids skip the padding
    x      = wte[idx] + wpe[pos]                    (N, C) the N real tokens only
    for each of the L blocks:
        x  = x + attn(ln_1(x))                      causal, padded keys masked (attention.py)
        x  = x + mlp(ln_2(x))                       mlp(h) = gelu(h W_fc + b) W_proj + b
    x      = ln_f(x)
    logits = x @ wte.T                              (B, T, V) LM head tied to the token embedding
    scalar = x @ scalar_head.w + scalar_head.b      (B, T)    values (critic) or scores (the RM)

Padding: ``attn_mask`` (B, T) is 1 on real tokens, 0 on padding (left padding of prompts, right
padding of responses, or both). Because positions count only real tokens and padded keys are never
attended to, a real token's logits do not depend on how much padding precedes it.

Padding-free rows: only attention mixes positions, so every other layer runs on the N real tokens
alone, an (N, C) array (``RealTokens`` in attention.py); attention and the outputs put them back on
the (B, T) grid. Padded positions get logits and scalars 0, numbers that mean nothing; callers mask
them out of every loss. Without padding N = B T and nothing is gathered.

Every gradient is written by hand; ``backward`` mirrors ``forward`` line by line in reverse, and the
two fan-outs (the tied ``wte``, and ``x`` feeding both heads) are summed in one visible place each.

The layers are the NumPy ones of layers.py / attention.py; with the switch of ``minippo.kernels`` on
(the default) the elementwise ones run as their numba twins in nn/_kernels.py.

Speed (``minippo bench --only gpt kvcache``): float32, 2-D matrix products, those kernels, freed
activation memory kept for the next step (``minippo.malloc``). The callers that decode set one BLAS
thread around it (``minippo.blas``: the trainers' iterations, ``generate_text``, the benchmark).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from minippo.checks import (check_choice, check_fields, check_float_array, check_int_array,
                            check_mask, check_range)
from minippo.malloc import keep_freed_memory
from minippo.nn.attention import (LN_EPS, RealTokens, attention_allowed, block_backward,
                                  block_forward)
from minippo.nn.layers import (embedding_backward, embedding_forward, layernorm_backward,
                               layernorm_forward, linear_backward, linear_forward,
                               softmax_cross_entropy_backward, softmax_cross_entropy_forward)


MAX_BLOCK_SIZE = 4096
"""Longest block_size: attention materialises (B, H, T, T) scores (64 MiB per head and row at
T = 4096)."""
MAX_PARAMS = 2 ** 28
"""Most parameters a TinyGPT may have (268M: 1 GiB in float32, 4 GiB with gradients and Adam's two
moments)."""


@dataclass
class GPTConfig:
    """Shape of a TinyGPT. Defaults are the ``minippo bench`` model."""

    vocab_size: int = 512
    """V: number of token ids (the tokenizer's vocabulary size), >= 1."""
    block_size: int = 64
    """Longest sequence T the model accepts (rows of ``wpe``), in [1, MAX_BLOCK_SIZE = 4096]."""
    n_layer: int = 4
    """L: number of transformer blocks, >= 1 (1-12 here)."""
    n_head: int = 4
    """H: attention heads per block; must divide ``n_embd``."""
    n_embd: int = 128
    """C: width of the residual stream, >= 1 (16-256 here)."""
    dtype: str = "float32"
    """``"float32"`` (fast, the default) or ``"float64"`` (gradient checks)."""
    init_std: float = 0.02
    """Standard deviation of the GPT-2 normal initialisation, in (0, 1] (0.02 in GPT-2; weights of
    std 1e30 overflow float32 in the first matrix product)."""

    def __post_init__(self):
        for name in ("vocab_size", "n_layer", "n_head", "n_embd"):
            check_range(name, getattr(self, name), 1, None, integer=True)
        check_range("block_size", self.block_size, 1, MAX_BLOCK_SIZE, integer=True)
        if self.n_embd % self.n_head:
            raise ValueError(f"`n_embd` (={self.n_embd}) must be divisible by `n_head` "
                             f"(={self.n_head})")
        check_choice("dtype", self.dtype, ("float32", "float64"))
        check_range("init_std", self.init_std, 0, 1, lo_open=True)
        n = self.num_params()
        if n > MAX_PARAMS:
            raise ValueError(f"`vocab_size`, `n_embd` and `n_layer` give {n:,} parameters, more "
                             f"than a TinyGPT may have ({MAX_PARAMS:,}: parameters, gradients and "
                             f"Adam moments must fit in memory)")

    def num_params(self) -> int:
        """The parameter count of a TinyGPT of this shape (``TinyGPT.num_params()``)."""
        return sum(math.prod(shape) for shape in param_shapes(self).values())

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        """The config of ``to_dict``; an unknown or missing field is a ``ValueError`` naming it (a
        stored config holds every field: none is filled with its default)."""
        d = check_fields(cls, d, "gpt_config")
        missing = [k for k in cls.__dataclass_fields__ if k not in d]
        if missing:
            raise ValueError(f"`gpt_config` misses the field(s) {missing}")
        return cls(**d)


def param_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name (GPT-2 names, CONTRIBUTING.md) and shape, in a fixed order."""
    V, T, C = cfg.vocab_size, cfg.block_size, cfg.n_embd
    shapes = {"wte": (V, C), "wpe": (T, C)}
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        shapes.update({
            p + "ln_1.w": (C,), p + "ln_1.b": (C,),
            p + "attn.c_attn.w": (C, 3 * C), p + "attn.c_attn.b": (3 * C,),
            p + "attn.c_proj.w": (C, C), p + "attn.c_proj.b": (C,),
            p + "ln_2.w": (C,), p + "ln_2.b": (C,),
            p + "mlp.c_fc.w": (C, 4 * C), p + "mlp.c_fc.b": (4 * C,),
            p + "mlp.c_proj.w": (4 * C, C), p + "mlp.c_proj.b": (C,),
        })
    shapes.update({"ln_f.w": (C,), "ln_f.b": (C,), "scalar_head.w": (C, 1), "scalar_head.b": (1,)})
    return shapes


def init_params(cfg: GPTConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """GPT-2 initialisation: weights ~ N(0, init_std), the residual projections (``c_proj``)
    scaled by 1/sqrt(2 L), biases 0, LayerNorm gain 1 / bias 0, scalar head 0 (so a new critic
    predicts 0).

    Drawn in float64 in a fixed order and then cast, so float32 and float64 models of one seed hold
    the same numbers up to rounding.
    """
    params = {}
    for name, shape in param_shapes(cfg).items():
        if name.startswith("scalar_head") or name.endswith(".b"):
            p = np.zeros(shape)
        elif name.endswith("ln_1.w") or name.endswith("ln_2.w") or name == "ln_f.w":
            p = np.ones(shape)
        else:
            std = cfg.init_std
            if name.endswith("c_proj.w"):
                std = cfg.init_std / np.sqrt(2 * cfg.n_layer)
            p = rng.normal(0.0, std, size=shape)
        params[name] = p.astype(cfg.dtype)
    return params


@dataclass
class KVCache:
    """Keys and values of every layer for the tokens seen so far, preallocated to ``block_size``.

    k[l], v[l] : (B, H, block_size, hs), valid in ``[:, :, :t]``
    key_mask   : (B, block_size) 0/1, the attn_mask of the tokens seen so far (valid in ``[:, :t]``)
    n_real     : (B,) number of real tokens so far (the next real token's position id)
    t          : number of positions filled
    """
    k: list
    v: list
    key_mask: np.ndarray
    n_real: np.ndarray
    t: int = 0

    def take(self, rows) -> "KVCache":
        """A cache of the given rows only (copied), e.g. without the sequences that finished."""
        return KVCache([k[rows] for k in self.k], [v[rows] for v in self.v], self.key_mask[rows],
                       self.n_real[rows], self.t)


class GPTCache(NamedTuple):
    """What :meth:`TinyGPT.backward` needs from :meth:`TinyGPT.forward`: the caches of the two
    embeddings, of the L blocks and of ln_f, ``x`` = ln_f's output (N, C) that the heads read,
    the caches of the LM head and the scalar head (None when not computed), and where the N real
    tokens sit on the (B, T) grid."""
    tokens: RealTokens
    tok: tuple
    pos: tuple
    blocks: list
    ln_f: tuple
    x: np.ndarray
    head: tuple | None
    scalar: tuple | None


class TinyGPT:
    """A GPT-2 style decoder whose parameters live in the plain dict ``self.params``.

    ``params`` is read afresh at every call, so an optimiser updating the arrays in place (or a
    caller replacing entries) is seen by the next forward pass.

    Parameters
    ----------
    cfg : GPTConfig
    seed : int, seeds ``np.random.default_rng`` for the initialisation (default 0)
    rng : np.random.Generator to draw the initialisation from instead of ``seed``
    """

    def __init__(self, cfg: GPTConfig, seed: int | None = None, *,
                 rng: np.random.Generator | None = None):
        if not isinstance(cfg, GPTConfig):
            raise ValueError(f"`cfg` must be a GPTConfig, got {type(cfg).__name__}")
        if rng is not None and seed is not None:
            raise ValueError("pass either `seed` or `rng`, not both")
        if rng is None:
            check_range("seed", 0 if seed is None else seed, 0, None, integer=True)
            rng = np.random.default_rng(0 if seed is None else seed)
        elif not isinstance(rng, np.random.Generator):
            raise ValueError(f"`rng` must be a np.random.Generator, got {type(rng).__name__}")
        self.cfg = cfg
        self.params: dict[str, np.ndarray] = init_params(cfg, rng)
        keep_freed_memory()            # reuse freed activation memory across steps (malloc.py)

    @classmethod
    def from_params(cls, cfg: GPTConfig, params: dict[str, np.ndarray]) -> "TinyGPT":
        """A model using the given arrays (cast to ``cfg.dtype`` if needed; names and shapes
        checked)."""
        model = cls.__new__(cls)
        model.cfg = cfg
        keep_freed_memory()
        missing = set(param_shapes(cfg)) ^ set(params)
        if missing:
            raise ValueError(f"`params` must have exactly the keys of param_shapes(cfg); "
                             f"differing: {sorted(missing)}")
        model.params = {k: np.asarray(params[k]).astype(cfg.dtype, copy=False)
                        for k in param_shapes(cfg)}
        model.check_params()
        return model

    def copy(self) -> "TinyGPT":
        """A deep copy (same cfg, new arrays): e.g. the frozen reference model of RLHF."""
        return TinyGPT.from_params(self.cfg, {k: v.copy() for k, v in self.params.items()})

    def num_params(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    # ------------------------------------------------------------------------------------------
    # validation
    # ------------------------------------------------------------------------------------------

    def check_params(self) -> None:
        """Every parameter present, of the right shape and dtype, and finite (else ValueError
        naming it)."""
        shapes = param_shapes(self.cfg)
        missing = set(shapes) - set(self.params)
        if missing:
            raise ValueError(f"`params` is missing {sorted(missing)}")
        dtype = np.dtype(self.cfg.dtype)
        for name, shape in shapes.items():
            p = self.params[name]
            # the common case in two lines (this runs at every forward); else: the full check
            ok = isinstance(p, np.ndarray) and p.dtype == dtype and p.shape == shape
            if not (ok and np.isfinite(p).all()):
                # names what is wrong
                check_float_array(f"params[{name!r}]", p, shape=shape, dtype=dtype)

    # ------------------------------------------------------------------------------------------
    # forward / backward
    # ------------------------------------------------------------------------------------------

    def forward(self, idx, attn_mask=None, scalar: bool = False, logits: bool = True):
        """Logits (and optionally the scalar head) for every position.

        Parameters
        ----------
        idx : (B, T) int token ids in [0, V), T <= block_size
        attn_mask : (B, T) 0/1, 1 = real token; None = all real
        scalar : also compute the scalar head
        logits : False skips the LM head (a reward model or critic needs only the scalar)

        Returns
        -------
        logits : (B, T, V), or None when ``logits=False``
        scalar : (B, T) or None
        cache : GPTCache, for :meth:`backward`
        """
        self.check_params()
        idx = check_int_array("idx", idx, ndim=2, low=0, high=self.cfg.vocab_size)
        if idx.shape[1] > self.cfg.block_size:
            raise ValueError(f"`idx` has T={idx.shape[1]} tokens but the model's block_size is "
                             f"{self.cfg.block_size}")
        if idx.shape[1] == 0:
            raise ValueError("`idx` must have at least one token per row, got shape (B, 0)")
        p, cfg = self.params, self.cfg
        B, T = idx.shape
        rows = None                                            # every position is real
        if attn_mask is None:
            pos = np.broadcast_to(np.arange(T), (B, T))       # (B, T)
            allowed = np.tri(T, dtype=bool)[None]              # (1, T, T) causal only
        else:
            attn_mask = check_mask("attn_mask", attn_mask, shape=idx.shape, layout="any")
            # position ids count real tokens only: padding does not shift a real token's position
            pos = np.maximum(np.cumsum(attn_mask != 0, axis=1) - 1, 0)  # (B, T)
            allowed = attention_allowed(attn_mask)             # (B, T, T)
            if not attn_mask.all():
                rows = np.flatnonzero(attn_mask.reshape(-1))   # (N,) the real tokens
        tokens = RealTokens(rows, B, T)
        tok, c_tok = embedding_forward(tokens.gather(idx), p["wte"])   # (N, C)
        pe, c_pos = embedding_forward(tokens.gather(pos), p["wpe"])    # (N, C)
        x = tok + pe
        blocks = []
        for i in range(cfg.n_layer):
            x, c_block = block_forward(x, p, f"h.{i}.", cfg.n_head, allowed, tokens)
            blocks.append(c_block)
        x, c_lnf = layernorm_forward(x, p["ln_f.w"], p["ln_f.b"], LN_EPS)   # (N, C)
        lm_logits, c_head, values, c_scalar = None, None, None, None
        if logits:
            # logits = x @ wte.T    (the LM head is the token embedding, transposed)
            out, c_head = linear_forward(x, p["wte"].T, None)          # (N, V)
            lm_logits = tokens.scatter(out)                             # (B, T, V)
        if scalar:
            out, c_scalar = linear_forward(x, p["scalar_head.w"], p["scalar_head.b"])  # (N, 1)
            values = tokens.scatter(out[:, 0])                          # (B, T)
        return lm_logits, values, GPTCache(tokens, c_tok, c_pos, blocks, c_lnf, x, c_head,
                                           c_scalar)

    def backward(self, cache, dlogits=None, dscalar=None,
                 scalar_into_trunk: bool = True) -> dict[str, np.ndarray]:
        """Gradients of every parameter given d loss / d logits and/or d loss / d scalar.

        Parameters
        ----------
        cache : from :meth:`forward`
        dlogits : (B, T, V) or None
        dscalar : (B, T) or None (needs ``forward(..., scalar=True)``)
        scalar_into_trunk : False = stop-gradient: ``dscalar`` reaches only ``scalar_head.*`` (a
            critic head sharing the actor's trunk without pushing on it)

        Returns
        -------
        grads : the keys of ``params`` (zeros where a parameter got no gradient)
        """
        c_head, c_scalar, tokens = cache.head, cache.scalar, cache.tokens
        B, T = tokens.B, tokens.T
        cfg, p = self.cfg, self.params
        dt = np.dtype(cfg.dtype)
        grads = {k: None for k in param_shapes(cfg)}
        dx = np.zeros_like(cache.x)                             # (N, C) d loss / d ln_f(x)
        dwte_head = None
        if dlogits is not None:
            if c_head is None:
                raise ValueError("`dlogits` needs the logits: call forward(..., logits=True)")
            dlogits = check_float_array("dlogits", dlogits, shape=(B, T, cfg.vocab_size))
            dlogits = tokens.gather(dlogits.astype(dt, copy=False))   # (N, V) logits = scatter
            # logits = x @ wte.T  ->  dx = dlogits @ wte,  d(wte.T) = x.T @ dlogits
            dx_head, dwte_t, _ = linear_backward(dlogits, c_head)
            dx += dx_head
            dwte_head = dwte_t.T                                 # (V, C)
        if dscalar is not None:
            if c_scalar is None:
                raise ValueError("`dscalar` needs the scalar head: call forward(..., scalar=True)")
            dscalar = check_float_array("dscalar", dscalar, shape=(B, T)).astype(dt, copy=False)
            # scalar = x @ w + b
            dx_scalar, grads["scalar_head.w"], grads["scalar_head.b"] = linear_backward(
                tokens.gather(dscalar)[:, None], c_scalar)
            if scalar_into_trunk:
                dx += dx_scalar              # fan-out of x into the two heads: summed here
        # x = ln_f(x)
        dx, grads["ln_f.w"], grads["ln_f.b"] = layernorm_backward(dx, cache.ln_f)
        for i in reversed(range(cfg.n_layer)):
            dx = block_backward(dx, cache.blocks[i], f"h.{i}.", grads)
        # x = wte[idx] + wpe[pos]     (at the real tokens)
        dwte_emb = embedding_backward(dx, cache.tok)            # (V, C)
        grads["wpe"] = embedding_backward(dx, cache.pos)             # (T_block, C) rows >= T stay 0
        # wte is used twice (embedding and LM head): its gradient is the sum of both uses
        grads["wte"] = dwte_emb if dwte_head is None else dwte_emb + dwte_head
        for k, g in grads.items():
            if g is None:                        # e.g. the scalar head when dscalar is None
                grads[k] = np.zeros(p[k].shape, dtype=dt)
        return grads

    # ------------------------------------------------------------------------------------------
    # language-modelling loss
    # ------------------------------------------------------------------------------------------

    def _check_lm_targets(self, idx, targets, mask):
        """``targets`` and ``mask`` of an LM loss, like ``idx`` (which :meth:`forward` checked)."""
        targets = check_int_array("targets", targets, shape=np.shape(idx), low=0,
                                  high=self.cfg.vocab_size)
        mask = check_mask("mask", mask, shape=np.shape(idx), layout="any")
        return targets, mask

    def lm_loss(self, idx, targets, mask, attn_mask=None) -> float:
        """Mean cross-entropy of ``targets`` over the ``mask == 1`` tokens (forward only)."""
        logits, _, _ = self.forward(idx, attn_mask)
        targets, mask = self._check_lm_targets(idx, targets, mask)
        loss, _ = softmax_cross_entropy_forward(logits, targets, mask)
        return loss

    def lm_loss_and_grads(self, idx, targets, mask, attn_mask=None):
        """``(loss, grads)``: the mean cross-entropy over ``mask == 1`` tokens and its gradients.

        Parameters
        ----------
        idx : (B, T) int input tokens
        targets : (B, T) int next tokens to predict
        mask : (B, T) 0/1, which targets count (at least one 1)
        attn_mask : (B, T) 0/1 real tokens, or None

        Returns
        -------
        loss : float
        grads : every key of ``params`` (the scalar head's are zeros)
        """
        logits, _, cache = self.forward(idx, attn_mask)
        targets, mask = self._check_lm_targets(idx, targets, mask)
        loss, c_ce = softmax_cross_entropy_forward(logits, targets, mask)
        dlogits = softmax_cross_entropy_backward(1.0, c_ce)
        return loss, self.backward(cache, dlogits=dlogits)

    # ------------------------------------------------------------------------------------------
    # generation with a KV cache
    # ------------------------------------------------------------------------------------------

    def prefill(self, idx, attn_mask=None):
        """Run the prompt once and keep every layer's keys and values.

        Parameters
        ----------
        idx : (B, T) prompts, normally left-padded so that the last column is real
        attn_mask : (B, T) 0/1 or None

        Returns
        -------
        logits_last : (B, V) the logits at the last position (``forward``'s ``logits[:, -1]``)
        kv : KVCache for :meth:`decode_step`
        """
        _, _, cache = self.forward(idx, attn_mask, logits=False)   # checks idx, attn_mask, params
        cfg, p = self.cfg, self.params
        B, T = cache.tokens.B, cache.tokens.T
        H, hs = cfg.n_head, cfg.n_embd // cfg.n_head
        kv = KVCache(k=[], v=[], key_mask=np.zeros((B, cfg.block_size), dtype=np.int8),
                     n_real=np.zeros(B, dtype=np.int64), t=T)
        for c_block in cache.blocks:                               # each layer's BlockCache
            kbuf = np.zeros((B, H, cfg.block_size, hs), dtype=cfg.dtype)
            vbuf = np.zeros_like(kbuf)
            kbuf[:, :, :T], vbuf[:, :, :T] = c_block.attn.k, c_block.attn.v   # (B,H,T,hs)
            kv.k.append(kbuf)
            kv.v.append(vbuf)
        am = np.ones((B, T), dtype=np.int8)
        if attn_mask is not None:
            am = (np.asarray(attn_mask) != 0).astype(np.int8)
        kv.key_mask[:, :T] = am
        kv.n_real[:] = am.sum(axis=1)
        logits_last = cache.tokens.scatter(cache.x)[:, -1] @ p["wte"].T   # (B, V)
        return logits_last, kv

    def decode_step(self, kv: KVCache, tokens, attn_mask=None) -> np.ndarray:
        """Append one token per row to ``kv`` and return its logits (B, V).

        For a real token, equal (up to rounding) to the logits of a full :meth:`forward` over the
        whole sequence at that position. ``attn_mask`` (B,) 0/1 marks the new token as real
        (default) or padding (e.g. after a row's EOS): a padded token's logits are computed but
        read by nothing (a full forward leaves 0 there). Parameters are checked at :meth:`prefill`,
        not at every step.
        """
        if not isinstance(kv, KVCache):
            raise ValueError(f"`kv` must be the KVCache returned by prefill, got "
                             f"{type(kv).__name__}")
        cfg, p = self.cfg, self.params
        B = kv.key_mask.shape[0]
        tokens = check_int_array("tokens", tokens, shape=(B,), low=0, high=cfg.vocab_size)
        m = np.ones(B, dtype=np.int8)                               # (B,) the new token is real
        if attn_mask is not None:
            if np.shape(attn_mask) != (B,):
                raise ValueError(f"`attn_mask` must have shape ({B},), got {np.shape(attn_mask)}")
            m = check_mask("attn_mask", np.asarray(attn_mask)[None], layout="any")[0]
            m = (m != 0).astype(np.int8)
        t = kv.t
        if t >= cfg.block_size:
            raise ValueError(f"`kv` already holds {t} positions = block_size; cannot decode "
                             "another token")
        # the same position rule as forward: max(cumsum(attn_mask) - 1, 0)
        kv.key_mask[:, t] = m
        kv.n_real += m
        pos = np.maximum(kv.n_real - 1, 0)                          # (B,)
        x = p["wte"][tokens] + p["wpe"][pos]                        # (B, C): one row per sequence
        grid = RealTokens(None, B, 1)                               # every new token has a row
        # the new token sees the real keys so far and itself (j <= t is the slice)
        allowed = kv.key_mask[:, None, :t + 1] != 0                 # (B, 1, t + 1)
        allowed[..., t] = True
        for i in range(cfg.n_layer):
            x, _ = block_forward(x, p, f"h.{i}.", cfg.n_head, allowed, grid, (kv.k[i], kv.v[i], t))
        kv.t = t + 1
        x, _ = layernorm_forward(x, p["ln_f.w"], p["ln_f.b"], LN_EPS)   # (B, C)
        return x @ p["wte"].T                                    # (B, V)
