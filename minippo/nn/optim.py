"""Optimisation on parameter dicts: AdamW, global-norm gradient clipping, learning-rate schedules.

Parameters and gradients are ``dict[str, np.ndarray]`` with the same keys. The optimizer updates
the parameter arrays *in place*, so a model that reads its ``params`` dict afresh sees the update.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from minippo import kernels
from minippo._lazy import LazyModule
from minippo.checks import check_float_array, check_range

_kernels = LazyModule("minippo.nn._kernels")     # the compiled update, loaded at its first call


def default_no_decay(name: str, p: np.ndarray) -> bool:
    """GPT-2 / nanoGPT rule: no weight decay on biases, LayerNorm gains, or any 1-D tensor."""
    return p.ndim < 2


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2) and bias correction.

    For each parameter ``p`` with gradient ``g`` at step ``t`` (1-based)::

        m = beta1 m + (1 - beta1) g                 first moment
        v = beta2 v + (1 - beta2) g^2               second moment
        m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)      bias correction
        p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)  decoupled decay

    Parameters
    ----------
    params : name -> array, updated in place.
    lr : learning rate, >= 0 (0 is allowed: it is the "ratio must stay 1" check of RLHF).
    betas : (beta1, beta2) in [0, 1).
    eps : > 0.
    weight_decay : >= 0; applied only where ``no_decay(name, p)`` is False.
    """

    def __init__(self, params: Mapping[str, np.ndarray], lr: float = 3e-4, betas=(0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0,
                 no_decay: Callable[[str, np.ndarray], bool] = default_no_decay):
        check_range("lr", lr, 0, None)
        check_range("betas[0]", betas[0], 0, 1, hi_open=True)
        check_range("betas[1]", betas[1], 0, 1, hi_open=True)
        check_range("eps", eps, 0, None, lo_open=True)
        check_range("weight_decay", weight_decay, 0, None)
        self.params = params
        self.lr, self.betas = float(lr), tuple(betas)
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        self.decay = {k: (not no_decay(k, p)) for k, p in params.items()}
        self.m = {k: np.zeros_like(p) for k, p in params.items()}
        self.v = {k: np.zeros_like(p) for k, p in params.items()}
        self.t = 0

    def step(self, grads: Mapping[str, np.ndarray], lr: float | None = None) -> None:
        """One update with ``grads`` (only the keys present are updated; ``lr`` overrides the
        default)."""
        lr = self.lr if lr is None else float(lr)
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1.0 - b1 ** self.t, 1.0 - b2 ** self.t
        for k, g in grads.items():
            p, m, v = self.params[k], self.m[k], self.v[k]
            wd = self.weight_decay if self.decay[k] else 0.0
            if kernels.ON and g.dtype == p.dtype:     # the lines below: nn/_kernels.py
                _kernels.adamw_update(p, g, m, v, lr, b1, b2, c1, c2, self.eps, wd)
                continue
            # the next four lines are Adam's moments with bias correction
            m *= b1
            m += (1.0 - b1) * g
            v *= b2
            v += (1.0 - b2) * (g * g)
            update = (m / c1) / (np.sqrt(v / c2) + self.eps)
            if wd:
                update += wd * p                             # decoupled weight decay
            p -= (lr * update).astype(p.dtype, copy=False)

    def state_dict(self) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, scalars)``: moments under ``m.<name>`` / ``v.<name>`` and the step count."""
        arrays = {f"m.{k}": a for k, a in self.m.items()}
        arrays.update({f"v.{k}": a for k, a in self.v.items()})
        return arrays, {"t": self.t, "lr": self.lr}

    def check_state_dict(self, arrays: Mapping[str, np.ndarray], scalars: Mapping) -> None:
        """What :meth:`load_state_dict` checks, without assigning anything: exactly the keys
        ``m.<name>`` / ``v.<name>`` of the parameters, each of its parameter's shape and dtype
        (nothing is broadcast or cast: a moment of shape (1,) is refused), finite, ``v`` >= 0;
        ``scalars["t"]`` an integer >= 0 and ``scalars["lr"]`` a finite number >= 0. A
        ``ValueError`` names the entry."""
        want = {f"{s}.{k}" for k in self.m for s in "mv"}
        if set(arrays) != want:
            name = sorted(set(arrays) ^ want)[0]
            what = "missing" if name in want else "not a moment of these parameters"
            raise ValueError(f"`arrays[{name!r}]` is {what}")
        for k, p in self.params.items():
            for s in "mv":
                a = arrays[f"{s}.{k}"]
                check_float_array(f"arrays[{s + '.' + k!r}]", a, shape=p.shape, dtype=p.dtype)
                if s == "v" and (a < 0).any():
                    raise ValueError(f"`arrays[{s + '.' + k!r}]` must be >= 0 (a second moment), "
                                     f"found {a.min()!r}")
        if not isinstance(scalars, Mapping):
            raise ValueError(f"`scalars` must be a dict with 't' and 'lr', got "
                             f"{type(scalars).__name__}")
        check_range("scalars['t']", scalars.get("t"), 0, None, integer=True)
        check_range("scalars['lr']", scalars.get("lr"), 0, None)

    def load_state_dict(self, arrays: Mapping[str, np.ndarray], scalars: Mapping) -> None:
        """Restore what :meth:`state_dict` returned, in place, once :meth:`check_state_dict` passed
        (so a bad entry leaves the optimizer as it was)."""
        self.check_state_dict(arrays, scalars)
        for k in self.m:
            self.m[k][...] = arrays[f"m.{k}"]
            self.v[k][...] = arrays[f"v.{k}"]
        self.t = int(scalars["t"])
        self.lr = float(scalars["lr"])


def global_norm(grads: Mapping[str, np.ndarray]) -> float:
    """sqrt(sum over every tensor of sum(g^2)), accumulated in float64."""
    flat = (g.ravel().astype(np.float64) for g in grads.values())
    return math.sqrt(sum(float(np.dot(f, f)) for f in flat))


def clip_grad_norm(grads: Mapping[str, np.ndarray], max_norm: float) -> float:
    """Scale all gradients in place so that their global norm is at most ``max_norm``.

    Returns the norm *before* clipping (what is logged as the grad norm). A non-finite norm is
    returned unchanged and nothing is scaled: the caller's NaN guard decides what to do.
    """
    check_range("max_norm", max_norm, 0, None, lo_open=True)
    norm = global_norm(grads)
    if math.isfinite(norm) and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in grads.values():
            g *= scale
    return norm


def lr_at(step: int, total_steps: int, lr: float, *, warmup_steps: int = 0,
          schedule: str = "cosine", min_lr: float = 0.0) -> float:
    """Learning rate at ``step`` (0-based) of ``total_steps``: linear warm-up, then decay.

    Warm-up: ``lr * (step + 1) / warmup_steps`` for ``step < warmup_steps``. Then, with
    ``frac = (step - warmup_steps) / (total_steps - warmup_steps)`` going from 0 towards 1,
    ``schedule`` is ``"constant"``, ``"linear"`` (``lr + (min_lr - lr) frac``: CleanRL's
    annealing, whose last step ``total_steps - 1`` still has a small positive rate and which
    reaches ``min_lr`` at ``step == total_steps``) or ``"cosine"`` (half a cosine from ``lr`` to
    ``min_lr``, same ``frac``).
    Steps past ``total_steps`` stay at ``min_lr`` (``"constant"``: at ``lr``).
    """
    check_range("step", step, 0, None, integer=True)
    check_range("total_steps", total_steps, 1, None, integer=True)
    check_range("warmup_steps", warmup_steps, 0, None, integer=True)
    check_range("lr", lr, 0, None)
    check_range("min_lr", min_lr, 0, None)
    if schedule not in ("constant", "linear", "cosine"):        # the words of check_choice
        raise ValueError("`schedule` must be one of 'constant', 'linear', 'cosine'; got "
                         f"{schedule!r}")
    if warmup_steps and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    span = max(1, total_steps - warmup_steps)
    frac = min(1.0, (step - warmup_steps) / span)
    if schedule == "linear":
        return lr + (min_lr - lr) * frac
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * frac))       # "cosine"
