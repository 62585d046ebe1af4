"""Direct preference losses: DPO, IPO and conservative DPO, arrays in, arrays out.

Legend: N preference pairs, B rows (responses), T tokens.

RLHF with a reward model maximises ``E[r(x, y)] - beta KL(pi || pi_ref)`` (eq. (3) of Rafailov et al.
2023, arXiv:2305.18290). Its optimum is ``pi*(y|x) = pi_ref(y|x) exp(r(x, y) / beta) / Z(x)`` (eq. (4)),
so a reward is a log-ratio of policies, ``r(x, y) = beta log pi*(y|x) / pi_ref(y|x) + beta log Z(x)``
(eq. (5)); in the Bradley-Terry likelihood of a pair the ``log Z(x)`` cancels, and fitting the reward
model becomes fitting the policy. With, for a pair (chosen y_w, rejected y_l) of one prompt x,

    lc, lr   = log pi_theta(y_w|x), log pi_theta(y_l|x)     sequence log-probs: sums over response tokens
    rc, rr   = log pi_ref(y_w|x),   log pi_ref(y_l|x)       the same under the frozen reference
    h        = (lc - rc) - (lr - rr)                        how much more than pi_ref the policy prefers y_w

the three losses (means over the N pairs) are::

    "sigmoid"  L = -mean[ log sigmoid(beta h) ]                               DPO, eq. (7) of Rafailov et al.
    + label_smoothing = eps:
               L = -mean[ (1 - eps) log sigmoid(beta h) + eps log sigmoid(-beta h) ]
                                                      conservative DPO (Mitchell 2023, "A note on DPO with noisy
                                                      preferences & relationship to IPO", eq. (3)): the label is
                                                      trusted with probability 1 - eps
    "ipo"      L = mean[ (h - 1 / (2 beta))^2 ]      IPO, eq. (17) of Azar et al. 2023 (arXiv:2310.12036v2), beta = tau

and their gradients, written by hand (``sigma(-z) = 1 - sigma(z)``)::

    sigmoid:  dL/dh_i = beta (-(1 - eps) sigma(-beta h_i) + eps sigma(beta h_i)) / N
    ipo:      dL/dh_i = 2 (h_i - 1 / (2 beta)) / N
    dL/dlc_i = dL/dh_i,   dL/dlr_i = -dL/dh_i          (the reference log-probs are constants)

DPO's gradient weighs each pair by ``sigma(-beta h)``: how wrong the implicit reward model orders it (the
unnumbered gradient of section 4 of Rafailov et al.). It never stops pushing h up, only more softly, so on
a separable training set h -> inf; IPO's squared loss stops at h = 1 / (2 beta) and conservative DPO at
h = log((1 - eps) / eps) / beta. DPO's implicit reward of a response is ``beta (logp - ref_logp)``
(``stats``): the log Z(x) term is the same for every response to one prompt, so it orders a prompt's
responses like the reward model it stands for. Nothing in the loss keeps ``lc`` from falling: only the
DIFFERENCE h is pushed, and chosen and rejected log-probs falling together is a known DPO behaviour
(lesson 21 measures it).

Sequence log-probs come from the per-token log-probs of :func:`minippo.rl.losses.logprobs_from_logits`
(``log_softmax(logits / T)[token]``) by a masked sum over the response tokens,
:func:`sequence_logprobs`, whose backward :func:`sequence_logprobs_backward` hands
``dL/dlogp_t = dL/dseq`` to every response token and exactly 0 to padding and prompt tokens. TRL
divides by the response length for IPO (``average=True``); the loss itself does not care which.

All computations run in float64; gradients come back in the inputs' common dtype. Inputs are validated
(``ValueError`` naming the argument): 1-D (N,) finite float arrays of one shape, N >= 1, beta > 0.
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_choice, check_float_array, check_mask, check_range, check_same_shape
from minippo.rl.masked import masked_sum

LOSS_TYPES = ("sigmoid", "ipo")


def log_sigmoid(x) -> np.ndarray:
    """``log sigmoid(x) = -log(1 + exp(-x)) = -logaddexp(0, -x)``: finite for every finite x (no overflow of
    exp(-x) for x << 0, no log(0) for x >> 0)."""
    return -np.logaddexp(0.0, -np.asarray(x))


# ----------------------------------------------------------------------------------------------
# sequence log-probs from the per-token ones
# ----------------------------------------------------------------------------------------------

def sequence_logprobs(logp, mask, *, average: bool = False):
    """``log pi(y|x) = sum_t mask_t logp_t`` per row (or the mean over the row's valid tokens).

    Parameters
    ----------
    logp : (B, T) float32/float64 per-token log-probs of the taken tokens (padding may hold anything finite)
    mask : (B, T) 0/1, 1 on the response tokens to count. Any layout: in a ``prompt ++ response`` row the
        response tokens sit after the prompt (padding follows them)
    average : divide by the number of valid tokens of the row (TRL's IPO); every row then needs one

    Returns
    -------
    seq : (B,) float64
    cache : for :func:`sequence_logprobs_backward`
    """
    logp = check_float_array("logp", logp, ndim=2)
    mask = check_mask("mask", mask, shape=logp.shape, layout="any")
    m = (np.asarray(mask) != 0).astype(np.float64)                   # (B, T)
    n = m.sum(axis=1)                                                # (B,) valid tokens per row
    if average and (n == 0).any():
        raise ValueError(f"`mask` row {int(np.argmax(n == 0))} has no valid token: its mean log-prob is undefined")
    seq = masked_sum(logp, m, axis=1)                                # (B,) accumulated in float64
    if average:
        seq = seq / n
    return seq, (m, n if average else None, logp.dtype)


def sequence_logprobs_backward(dseq, cache) -> np.ndarray:
    """dL/dlogp (B, T) from dL/dseq (B,): ``dseq[:, None] * mask`` (``/ n`` with ``average``); exactly 0 on
    every token the mask leaves out."""
    m, n, dtype = cache
    dseq = check_float_array("dseq", dseq, shape=(m.shape[0],)).astype(np.float64)
    if n is not None:
        dseq = dseq / n                                              # seq = sum / n
    return (dseq[:, None] * m).astype(dtype)                         # seq = sum_t m_t logp_t


# ----------------------------------------------------------------------------------------------
# the loss
# ----------------------------------------------------------------------------------------------

def dpo_loss(logp_chosen, logp_rejected, ref_logp_chosen, ref_logp_rejected, beta, *, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0):
    """DPO (eq. (7) of Rafailov et al. 2023), conservative DPO (``label_smoothing``) or IPO (``loss_type="ipo"``)
    on N preference pairs; the formulas are in the module docstring.

    Parameters
    ----------
    logp_chosen, logp_rejected : (N,) sequence log-probs log pi_theta(y_w|x), log pi_theta(y_l|x)
    ref_logp_chosen, ref_logp_rejected : (N,) the same under the frozen reference pi_ref
    beta : > 0, the KL coefficient of eq. (3) (DPO: the scale of the implicit reward; IPO: tau, the
        target margin is h = 1 / (2 beta))
    loss_type : "sigmoid" (DPO) or "ipo"
    label_smoothing : eps in [0, 0.5), the probability that a label is flipped (sigmoid only)

    Returns
    -------
    loss : float, the mean over pairs
    dlogp_chosen, dlogp_rejected : (N,) dL/dlc, dL/dlr in the inputs' dtype
    stats : ``rewards_chosen``, ``rewards_rejected`` (N,) float64 implicit rewards beta (logp - ref_logp);
        ``margins`` (N,) their difference beta h; ``accuracy`` (float) the fraction of pairs with
        rewards_chosen > rewards_rejected (strictly, as TRL); ``h`` (N,) the log-ratio difference
    """
    names = ("logp_chosen", "logp_rejected", "ref_logp_chosen", "ref_logp_rejected")
    arrays = [check_float_array(k, v, ndim=1) for k, v in zip(names, (logp_chosen, logp_rejected, ref_logp_chosen,
                                                                       ref_logp_rejected))]
    check_same_shape(**dict(zip(names, arrays)))
    if arrays[0].size == 0:
        raise ValueError("`logp_chosen` must hold at least one pair, got shape (0,)")
    check_range("beta", beta, 0, None, lo_open=True)                 # a finite number > 0
    check_choice("loss_type", loss_type, LOSS_TYPES)
    check_range("label_smoothing", label_smoothing, 0, 0.5, hi_open=True)
    if loss_type == "ipo" and label_smoothing != 0:
        raise ValueError("`label_smoothing` applies to loss_type='sigmoid' only (IPO has no label noise term)")
    dtype = np.result_type(*arrays)
    lc, lr, rc, rr = (a.astype(np.float64) for a in arrays)          # (N,) each
    N = lc.size
    h = (lc - rc) - (lr - rr)                                        # (N,) policy vs reference log-ratio margin
    if loss_type == "sigmoid":
        eps, z = float(label_smoothing), beta * h
        losses = -(1.0 - eps) * log_sigmoid(z) - eps * log_sigmoid(-z)                     # (N,)
        # d/dz -log sigmoid(z) = -sigma(-z); d/dz -log sigmoid(-z) = sigma(z)
        dh = beta * (-(1.0 - eps) * np.exp(log_sigmoid(-z)) + eps * np.exp(log_sigmoid(z))) / N
    else:
        target = 1.0 / (2.0 * beta)
        losses = (h - target) ** 2                                                          # (N,)
        dh = 2.0 * (h - target) / N
    rewards_chosen, rewards_rejected = beta * (lc - rc), beta * (lr - rr)                  # (N,) implicit rewards
    stats = {"rewards_chosen": rewards_chosen, "rewards_rejected": rewards_rejected,
             "margins": rewards_chosen - rewards_rejected, "h": h,
             "accuracy": float(np.mean(rewards_chosen > rewards_rejected))}
    # h = (lc - rc) - (lr - rr):  dh/dlc = 1, dh/dlr = -1
    return float(np.mean(losses)), dh.astype(dtype), (-dh).astype(dtype), stats
