"""Autograd-free neural-network pieces: every layer is a forward/backward pair written by hand.

Modules (read them in this order)::

    layers.py     linear, tanh, embedding, LayerNorm, GELU, masked softmax, softmax cross-entropy:
                  every layer written in NumPy (``out, cache = f_forward(...)``,
                  ``dx, *dparams = f_backward(dout, cache)``)
    attention.py  causal multi-head self-attention with a padding mask, and its KV-cache step
    gpt.py        GPTConfig, TinyGPT (GPT-2 pre-LN decoder, tied LM head, scalar head, KV cache)
    mlp.py        the tanh MLP of classic control
    optim.py      AdamW, global-norm clipping, learning-rate schedules, on parameter dicts
    gradcheck.py  central-difference gradient checks with a per-tensor table
    _kernels.py   numba twins of the elementwise layers (parity-tested); not needed to read the rest

What runs is what you read: TinyGPT calls the layers of ``layers.py`` and ``attention.py``. While the
switch of :mod:`minippo.kernels` is on (the default) the elementwise layers hand their work to
``_kernels.py`` in their first line; ``MINIPPO_KERNELS=0`` runs the NumPy bodies everywhere.

``GPTConfig`` and ``TinyGPT`` are importable from here and from ``minippo`` (lazily). Importing
``minippo.nn`` or any of its modules does not load numba: ``_kernels.py`` is imported at the first
kernel call.
"""
from __future__ import annotations

from minippo._lazy import lazy_exports

_LAZY = {"GPTConfig": "minippo.nn.gpt", "TinyGPT": "minippo.nn.gpt", "KVCache": "minippo.nn.gpt"}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, globals())
