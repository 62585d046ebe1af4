"""Autograd-free neural-network pieces: every layer is a forward/backward pair written by hand.

Modules (read them in this order)::

    layers.py     linear, tanh, embedding, LayerNorm, GELU, masked softmax, softmax cross-entropy:
                  the NumPy reference of every layer (``out, cache = f_forward(...)``,
                  ``dx, *dparams = f_backward(dout, cache)``)
    attention.py  causal multi-head self-attention with a padding mask, and its KV-cache step
    gpt.py        GPTConfig, TinyGPT (GPT-2 pre-LN decoder, tied LM head, scalar head, KV cache)
    fused.py      numba versions of the elementwise layers that TinyGPT runs (parity-tested)
    mlp.py        the tanh MLP of classic control
    optim.py      AdamW, global-norm clipping, learning-rate schedules, on parameter dicts
    gradcheck.py  central-difference gradient checks with a per-tensor table

``GPTConfig`` and ``TinyGPT`` are importable from here and from ``minippo`` (lazily: importing
``minippo.nn.optim`` does not load numba).
"""
from __future__ import annotations

from minippo._lazy import lazy_exports

_LAZY = {"GPTConfig": "minippo.nn.gpt", "TinyGPT": "minippo.nn.gpt", "KVCache": "minippo.nn.gpt"}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, globals())
