"""The bench's TinyGPT step in PyTorch eager mode, for the side-by-side timing of ``minippo bench --only gpt``.

Used only when torch is installed (it is not a dependency): the same architecture as
:class:`minippo.nn.gpt.TinyGPT` (pre-LN blocks, tanh GELU, causal attention, LM head tied to ``wte``),
built from a TinyGPT's parameter dict so that both compute the same loss from the same weights, and one
step = forward, mean cross-entropy, ``backward`` (autograd), as ``TinyGPT.lm_loss_and_grads`` does.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F


class TorchGPT:
    """The TinyGPT of ``params`` (GPT-2 names, float32) as torch tensors with ``requires_grad``."""

    def __init__(self, params: dict[str, np.ndarray], n_layer: int, n_head: int):
        self.p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
        self.n_layer, self.n_head = n_layer, n_head

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        p, H = self.p, self.n_head
        B, T = idx.shape
        x = p["wte"][idx] + p["wpe"][:T]                                      # (B, T, C)
        C = x.shape[-1]
        for i in range(self.n_layer):
            q = f"h.{i}."
            h = F.layer_norm(x, (C,), p[q + "ln_1.w"], p[q + "ln_1.b"], 1e-5)
            qkv = h @ p[q + "attn.c_attn.w"] + p[q + "attn.c_attn.b"]           # (B, T, 3C)
            qh, kh, vh = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
            att = (qh @ kh.transpose(-1, -2)) / math.sqrt(C // H)                # (B, H, T, T)
            att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
            y = (att @ vh).transpose(1, 2).reshape(B, T, C)
            x = x + y @ p[q + "attn.c_proj.w"] + p[q + "attn.c_proj.b"]
            h = F.layer_norm(x, (C,), p[q + "ln_2.w"], p[q + "ln_2.b"], 1e-5)
            h = F.gelu(h @ p[q + "mlp.c_fc.w"] + p[q + "mlp.c_fc.b"], approximate="tanh")
            x = x + h @ p[q + "mlp.c_proj.w"] + p[q + "mlp.c_proj.b"]
        x = F.layer_norm(x, (C,), p["ln_f.w"], p["ln_f.b"], 1e-5)
        logits = x @ p["wte"].T                                               # (B, T, V)
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))

    def step(self, idx: torch.Tensor, targets: torch.Tensor) -> float:
        """Forward, loss and backward (gradients of every parameter); returns the loss."""
        for t in self.p.values():
            t.grad = None
        loss = self.loss(idx, targets)
        loss.backward()
        return float(loss.detach())


def make_torch_step(params: dict[str, np.ndarray], n_layer: int, n_head: int, idx: np.ndarray, targets: np.ndarray,
               threads: int):
    """``(step, loss)``: a function running one torch step on ``threads`` threads, and its loss."""
    torch.set_num_threads(threads)
    model = TorchGPT(params, n_layer, n_head)
    ti, tt = torch.from_numpy(idx), torch.from_numpy(targets)
    return (lambda: model.step(ti, tt)), model.step(ti, tt)
