"""The critic of RLHF-PPO: V(s_t) for every response token, in three arrangements.

Legend: B batch (responses), Tn response tokens.

Seed 001 lists the four models; the critic is the one whose form varies most between implementations:

* ``"separate"`` (default): its own TinyGPT, trained beside the actor. Initialised from the reward
  model (Ziegler et al. 2019 initialise the value function from the reward model: it already reads
  responses the way the score does), from the SFT trunk, or at random (``PPOConfig.critic_init``).
* ``"shared"``: the scalar head of the actor's own TinyGPT (one forward pass gives logits and values).
  With ``stop_gradient`` the value loss trains only the head and never pushes on the shared trunk
  (``TinyGPT.backward(scalar_into_trunk=False)``; seed 001: "Critic的梯度不反向传播到共享层").
* ``"none"``: no critic (values are 0), for critic-free advantage estimators (GRPO, RLOO): three models.

Value normalisation (optional, seed 000's "value normalization"): the head predicts
``h = (V - mu) / sigma`` where mu, sigma are running statistics of the returns; the value is
``V = sigma h + mu`` and the loss compares h with the normalised targets. When the statistics move,
the head's weight and bias are rescaled so that every V stays exactly the same ("preserving
outputs", PopArt, van Hasselt et al. 2016, arXiv:1602.07714).
"""
from __future__ import annotations

import math

import numpy as np

from minippo.checks import check_choice, check_float_array
from minippo.rl.masked import masked_mean
from minippo.rlhf.response import forward_response


class RunningMoments:
    """Running mean and variance of a stream of batches (Chan et al.'s parallel update), in float64."""

    def __init__(self, mean: float = 0.0, var: float = 1.0, count: float = 0.0):
        self.mean, self.var, self.count = float(mean), float(var), float(count)

    @property
    def std(self) -> float:
        return math.sqrt(max(self.var, 1e-8))

    def update(self, x) -> None:
        """Merge the batch ``x`` (1-D, the valid entries) into the statistics."""
        x = np.asarray(x, dtype=np.float64).ravel()
        if x.size == 0:
            return
        b_mean, b_var, n = float(x.mean()), float(x.var()), float(x.size)
        if self.count == 0:
            self.mean, self.var, self.count = b_mean, b_var, n
            return
        total = self.count + n
        delta = b_mean - self.mean
        # the next two lines merge two (mean, M2) summaries
        m2 = self.var * self.count + b_var * n + delta * delta * self.count * n / total
        self.mean, self.var, self.count = self.mean + delta * n / total, m2 / total, total

    def state_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": self.count}


class Critic:
    """V(s_t) at the response tokens; see the module docstring.

    Parameters
    ----------
    kind : "separate", "shared" or "none"
    model : the TinyGPT whose scalar head gives the values (the critic's own, or the actor for
        "shared"; None for "none")
    stop_gradient : "shared" only, the value loss does not reach the actor's trunk
    value_norm : keep running statistics of the returns and predict normalised values
    """

    def __init__(self, kind: str, model=None, *, stop_gradient: bool = True, value_norm: bool = False):
        check_choice("kind", kind, ("separate", "shared", "none"))
        if (model is None) != (kind == "none"):
            raise ValueError(f"`model` must be {'None' if kind == 'none' else 'a TinyGPT'} for a {kind!r} critic")
        self.kind, self.model, self.stop_gradient = kind, model, bool(stop_gradient)
        self.moments = RunningMoments() if value_norm else None

    # ---- normalisation ------------------------------------------------------------------------
    @property
    def mu_sigma(self) -> tuple[float, float]:
        return (0.0, 1.0) if self.moments is None or self.moments.count == 0 else (self.moments.mean, self.moments.std)

    def normalise(self, x):
        """(x - mu) / sigma: values or returns into the units the head predicts."""
        mu, sigma = self.mu_sigma
        return (x - mu) / sigma

    def update_moments(self, returns, mask) -> None:
        """Merge this batch's returns into the statistics and rescale the head to keep V unchanged."""
        if self.moments is None or self.kind == "none":
            return
        mu, sigma = self.mu_sigma
        self.moments.update(np.asarray(returns)[np.asarray(mask) != 0])
        new_mu, new_sigma = self.mu_sigma
        # V = sigma (x w + b) + mu = new_sigma (x w' + b') + new_mu  ->  the next two lines (PopArt)
        p = self.model.params
        p["scalar_head.w"] *= p["scalar_head.w"].dtype.type(sigma / new_sigma)
        p["scalar_head.b"][...] = (sigma * p["scalar_head.b"] + mu - new_mu) / new_sigma

    # ---- values -------------------------------------------------------------------------------
    def head_outputs(self, sequences, attn_mask, prompt_len):
        """``(h, cache)``: the raw scalar head (B, Tn) at the response columns and the backward cache."""
        _, h, cache = forward_response(self.model, sequences, attn_mask, prompt_len, scalar=True)
        return h, cache

    def values(self, sequences, attn_mask, prompt_len, *, head=None) -> np.ndarray:
        """V(s_t) (B, Tn) in return units, 0-free (callers mask). ``head`` reuses a computed (B, Tn) head
        output (the shared critic gets it from the actor's forward pass)."""
        B, T = np.shape(sequences)
        if self.kind == "none":
            return np.zeros((B, T - prompt_len), dtype=np.float64)
        h = self.head_outputs(sequences, attn_mask, prompt_len)[0] if head is None else head
        mu, sigma = self.mu_sigma
        return h.astype(np.float64) * sigma + mu

    def shift_values(self, delta: float) -> None:
        """Add ``delta`` to every value V (moves the head bias by delta / sigma)."""
        if self.kind == "none":
            return
        check_float_array("delta", np.asarray([delta], dtype=np.float64))
        b = self.model.params["scalar_head.b"]
        b += b.dtype.type(delta / self.mu_sigma[1])

    def trainable(self) -> dict:
        """The parameters the critic owns (a separate critic's; empty when shared with the actor or none)."""
        return self.model.params if self.kind == "separate" else {}

    def state_dict(self) -> dict:
        return {"kind": self.kind, "moments": None if self.moments is None else self.moments.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("moments") is not None and self.moments is not None:
            self.moments = RunningMoments(**state["moments"])


def init_bias_to_mean_score(critic: Critic, values, scores, mask) -> float:
    """Shift the critic so that its mean value over the valid tokens equals the mean score (seed 001:
    "用Reward Model的初始奖励均值初始化Critic输出层偏置"); returns the shift added to every value."""
    if critic.kind == "none":
        return 0.0
    delta = float(np.mean(scores)) - masked_mean(np.asarray(values, dtype=np.float64), mask)
    critic.shift_values(delta)
    return delta
