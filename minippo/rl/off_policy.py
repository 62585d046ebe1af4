"""Off-policy corrections: when the sampler is not the trainer, arrays in, arrays out.

Legend: B batch (responses), T tokens; N flat tokens for 1-D inputs.

A rollout's tokens are drawn by a sampler mu (an inference engine rounding in bf16, top-p
truncation, a copy of the policy k updates stale), and the trainer computes its own pi_train of the
same tokens. The token ratio and its product over the valid tokens of row b,

    rho_t = pi_train(a_t|s_t) / mu(a_t|s_t) = exp(logp_train_t - logp_sampler_t)
    rho_b = prod_t rho_t = pi_train(y_b) / mu(y_b) = exp(sum_t (logp_train_t - logp_sampler_t))

give E_mu[rho_b f(y_b)] = E_pi[f(y_b)] exactly (importance sampling over whole responses, wherever
mu > 0 where pi_train > 0); the token ratio rho_t alone ignores that mu also chose the prefix s_t
(lower variance, biased). :func:`off_policy_weights` turns them into per-token weights w, 0 on
padding:

    mode       w, for rho = rho_t ("token") or rho_b on every token of row b ("sequence")
    "none"     1                                        no correction
    "is"       rho                                      importance sampling (ValueError if it
                                                        overflows)
    "tis"      min(rho, C)                              truncated IS: a bias for a bounded weight
    "mis"      rho where rho <= C, else 0               masked IS: the unit leaves the gradient
    "icepop"   rho where C_low <= rho <= C, else 0      two-sided mask (IcePop, e.g. [0.5, 5])

The sequence weight is computed from float64 sums; rho = +inf (a product beyond float64) truncates
to C or is masked, exactly as the rule says. Statistics are per unit (valid tokens, or rows with a
valid token): the share truncated (``truncated_frac``) or masked (``masked_frac``), Kish's effective
sample size ESS = (sum w)^2 / sum w^2 as a share of the units (``ess_frac``: 1 when every weight is
equal), and the mismatch itself: ``mismatch_kl`` = mean over valid tokens of (rho_t - 1) - log
rho_t, the k3 estimate of KL(mu || pi_train) from the sampler's tokens (Q41), and ``log_ratio_max``
= max |log rho_t|.

**The corrected loss.** The weights are constants (no gradient flows into them) multiplying each
token's term of L^CLIP (PPO eq. (7)):

    L = -(1/n) sum_t w_t min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t),
    r_t = exp(logp_t - logp_old_t)

Since w_t >= 0, ``w min(r A, clip(r) A) = min(r (w A), clip(r) (w A))``: this is L^CLIP with the
advantage w_t A_t, so :func:`corrected_policy_loss` is one call of ``clipped_policy_loss``, and
dL/dlogp_t = -w_t A_t r_t / n where the clip does not bind, 0 where it does. Another aggregation
than the token mean (GRPO's 1/|o_b|, Dr. GRPO's constant) is the same loss with w_t multiplied by n
/ d_bt. Where TRL, verl and OpenRLHF multiply the same per-token term: docs/to_trl.md, "Off-policy
corrections".

**Decoupled PPO** (AReaL, Fu et al. 2025, arXiv:2505.24298, its decoupled PPO objective as the
authors' repository draws it in ``blog/AReaL_v0_3.md``): three policies, the behaviour policy mu
that sampled, the proximal policy pi_prox (the trainer's copy at the start of the update, the centre
of the trust region) and the current pi_theta:

    J(theta) = E_{a_t ~ mu}[ sum_t (pi_prox / mu) min(u_t A_t, clip(u_t, 1 - eps, 1 + eps) A_t) ],
    u_t = pi_theta(a_t|s_t) / pi_prox(a_t|s_t)

:func:`decoupled_policy_loss` is the corrected loss with logp_old = logp_prox and w = pi_prox / mu
(mode "is"; the released code also truncates or masks it: ``mode``).
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_choice, check_float_array, check_range
from minippo.rl.losses import clipped_policy_loss
from minippo.rl.masked import token_inputs

MODES = ("none", "is", "tis", "mis", "icepop")
LEVELS = ("token", "sequence")
_NEEDS = {"none": (), "is": (), "tis": ("cap",), "mis": ("cap",), "icepop": ("cap", "cap_low")}


def _inputs(logp_train, logp_sampler, mask, mode, level, cap, cap_low):
    """The validated arrays of :func:`off_policy_weights` (ValueError naming the argument)."""
    check_choice("mode", mode, MODES)
    check_choice("level", level, LEVELS)
    for name, value in (("cap", cap), ("cap_low", cap_low)):
        if name in _NEEDS[mode]:
            check_range(name, value, 0, None, lo_open=True)
        elif value is not None:
            raise ValueError(f"`{name}` does not apply to mode {mode!r} (it takes "
                             f"{_NEEDS[mode] or 'no bound'}), got {value!r}")
    if mode == "icepop" and not cap_low < cap:
        raise ValueError(f"`cap_low` must be below `cap` for mode 'icepop', got {cap_low!r} >= "
                         f"{cap!r}")
    (logp_train, logp_sampler), mask = token_inputs(mask, logp_train=logp_train,
                                                    logp_sampler=logp_sampler)
    if level == "sequence" and logp_train.ndim != 2:
        raise ValueError(f"`level` 'sequence' needs 2-D (B, T) inputs, got shape "
                         f"{logp_train.shape}")
    return logp_train, logp_sampler, mask == 1


def off_policy_weights(logp_train, logp_sampler, mask=None, *, mode: str, level: str = "token",
                       cap: float | None = None, cap_low: float | None = None):
    """Per-token importance weights of a sampler's tokens (module docstring: the table of modes).

    Parameters
    ----------
    logp_train : (B, T) or (N,) log pi_train(a_t|s_t), the trainer's log-probs of the sampled
        tokens.
    logp_sampler : same shape, log mu(a_t|s_t), what the sampler drew them with.
    mask : 0/1 like ``logp_train`` or None (all valid); 2-D masks right-padded.
    mode : one of :data:`MODES`. level : "token" (rho_t) or "sequence" (rho_b on every token of
        row b; 2-D).
    cap : C > 0, for "tis", "mis", "icepop" only. cap_low : C_low in (0, C), for "icepop" only.

    Returns
    -------
    weights : like ``logp_train`` (its dtype), >= 0, 0 on padding.
    stats : ``n_units``, ``weight_mean``, ``weight_max``, ``truncated_frac``, ``masked_frac``,
        ``ess_frac`` (over units: valid tokens, or rows with one), ``mismatch_kl``,
        ``log_ratio_max`` (over valid tokens).
    """
    logp_train, logp_sampler, valid = _inputs(logp_train, logp_sampler, mask, mode, level, cap,
                                              cap_low)
    log_rho_t = np.where(valid, logp_train.astype(np.float64) - logp_sampler, 0.0)   # float64
    units = valid if level == "token" else valid[:, :1]              # a row's unit: column 0
    # log rho_t, or log rho_b of the row
    log_rho = log_rho_t if level == "token" else log_rho_t.sum(axis=1, keepdims=True)
    lo, hi = (cap_low or 0.0), (np.inf if cap is None else cap)
    with np.errstate(over="ignore"):
        rho = np.exp(log_rho)                # +inf beyond float64: truncated or masked below
        # the next two lines are the table of modes
        w = np.ones_like(rho) if mode == "none" else (
            np.minimum(rho, hi) if mode == "tis" else np.where((rho >= lo) & (rho <= hi), rho, 0.0))
        weights = np.where(valid, np.broadcast_to(w, valid.shape), 0.0).astype(logp_train.dtype)
    if not np.isfinite(weights).all():                            # only "is" can get here
        i = tuple(int(j) for j in np.argwhere(~np.isfinite(weights))[0])
        x = float(np.broadcast_to(log_rho, valid.shape)[i])
        raise ValueError(f"`logp_train` - `logp_sampler` gives the {level} weight exp({x:.6g}) at "
                         f"{i if len(i) > 1 else i[0]}, beyond {weights.dtype}'s range in mode "
                         "'is': truncate "
                         "('tis') or mask ('mis') instead")
    return weights, _weight_stats(rho[units], w[units], log_rho_t[valid], mode, lo, hi)


def _weight_stats(rho, w, log_rho_t, mode, lo, hi) -> dict:
    """The statistics of :func:`off_policy_weights` from the units' ratios and weights (n_units,)
    and the valid
    tokens' log-ratios."""
    n = rho.size
    with np.errstate(over="ignore", invalid="ignore"):
        k3 = np.expm1(log_rho_t) - log_rho_t             # (rho_t - 1) - log rho_t per valid token
    s = w / w.max() if n and w.max() > 0 else w      # ESS is scale-free: sum w^2 cannot overflow
    return {"n_units": int(n), "weight_mean": float(w.mean()) if n else 0.0,
            "weight_max": float(w.max()) if n else 0.0,
            "truncated_frac": float(np.mean(rho > hi)) if mode == "tis" and n else 0.0,
            "masked_frac": (float(np.mean((rho < lo) | (rho > hi)))
                            if mode in ("mis", "icepop") and n else 0.0),
            "ess_frac": float(s.sum() ** 2 / (n * (s ** 2).sum())) if n and s.max() > 0 else 0.0,
            "mismatch_kl": float(k3.mean()) if k3.size else 0.0,
            "log_ratio_max": float(np.abs(log_rho_t).max()) if k3.size else 0.0}


def corrected_policy_loss(logp, logp_old, adv, weights, mask=None, clip_eps: float = 0.2):
    """L^CLIP with each token's term multiplied by a constant weight: ``-(1/n) sum_t w_t min(r_t
    A_t, clip(r_t) A_t)`` (module docstring), one call of
    :func:`minippo.rl.losses.clipped_policy_loss` with the
    advantage w_t A_t.

    Parameters
    ----------
    logp, logp_old, adv : (B, T) or (N,) as in ``clipped_policy_loss``.
    weights : same shape, >= 0 (e.g. :func:`off_policy_weights`), constants: no gradient reaches
        them.
    mask : 0/1 or None. clip_eps : eps > 0.

    Returns ``(loss, dlogp, stats)`` of ``clipped_policy_loss``: dlogp = -w_t A_t r_t / n where the
    clip does not bind, 0 where it does, where w_t = 0 and on padding (a token with w_t = 0 counts as
    A = 0 in ``clip_cases``).
    """
    weights = check_float_array("weights", weights, shape=np.shape(logp))
    if (weights < 0).any():
        raise ValueError(f"`weights` must be >= 0 (importance weights), got "
                         f"{float(weights.min())!r}")
    return clipped_policy_loss(logp, logp_old, weights * np.asarray(adv), mask, clip_eps)


def decoupled_policy_loss(logp, logp_prox, logp_behav, adv, mask=None, clip_eps: float = 0.2, *,
                          mode: str = "is", level: str = "token", cap: float | None = None,
                          cap_low: float | None = None):
    """Decoupled PPO (AReaL, arXiv:2505.24298; module docstring): the ratio u_t = pi_theta /
    pi_prox in the
    clip, each token weighted by pi_prox / mu (``off_policy_weights(logp_prox, logp_behav, ...)``).

    Parameters
    ----------
    logp : (B, T) or (N,) log pi_theta, the policy being trained.
    logp_prox : same shape, log pi_prox: the trainer's log-probs at the start of the update (the
        trust region's centre). logp_behav : same shape, log mu: the behaviour policy (the
        sampler) that drew the tokens.
    adv, mask, clip_eps : as in ``clipped_policy_loss``. mode, level, cap, cap_low : of the weights.

    Returns ``(loss, dlogp, stats)``; ``stats["off_policy"]`` holds the weights' statistics.
    """
    weights, wstats = off_policy_weights(logp_prox, logp_behav, mask, mode=mode, level=level,
                                         cap=cap, cap_low=cap_low)
    loss, dlogp, stats = corrected_policy_loss(logp, logp_prox, adv, weights, mask, clip_eps)
    return loss, dlogp, {**stats, "off_policy": wstats}
