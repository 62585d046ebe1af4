"""Exercise ``off_policy_weights``: truncated and masked importance weights, per token or per response.

Legend: B batch (responses), T tokens.

The student writes ``off_policy_weights(logp_train, logp_sampler, mask, mode, level, cap) -> weights``:
the weights of ``minippo.rl.off_policy.off_policy_weights`` for the modes "tis" and "mis" at both levels
(without its statistics). Checked against the library on every mode and level, the direction of the ratio,
the product (not the mean) over a response, a ratio exactly at the cap (mis keeps it), padding, and a response
whose ratio overflows.
"""
from __future__ import annotations

import numpy as np

from minippo.exercises.grading import Case, as_arrays, call, close, fmt, max_err
from minippo.rl.off_policy import off_policy_weights as reference

NAME = "off_policy_weights"
FUNCTION = "off_policy_weights"
SUMMARY = "truncated (TIS) and masked (MIS) importance weights of a sampler's tokens, per token or per response"
LESSON = "lessons/l24_off_policy.py"
REFERENCE = "minippo.rl.off_policy.off_policy_weights (modes 'tis', 'mis')"

_HEADER = '''"""minippo exercise `off_policy_weights`: when the sampler is not the trainer (lesson 24).

An inference engine (bf16 logits, top-p, weights a few updates old) drew the tokens with probability mu; the
trainer's policy gives them pi_train. Importance weights make the gradient of the trainer's loss (nearly)
the on-policy one: each token's term of the PPO loss is multiplied by its weight.

Write the body of `off_policy_weights` below, then run the project's checks on it:

    minippo exercise check off_policy_weights          (add --dir D when this file is not in ./exercises)
"""
import numpy as np


'''

_SIGNATURE = '''def off_policy_weights(logp_train, logp_sampler, mask, mode, level, cap):
    """Per-token importance weights, 0 on padding.

        rho_t = exp(logp_train_t - logp_sampler_t)                       level "token"
        rho_b = exp(sum over the VALID tokens t of row b of (logp_train_t - logp_sampler_t))
                                                                         level "sequence": on every valid token of b
        mode "tis": w = min(rho, cap)          truncated importance sampling
        mode "mis": w = rho if rho <= cap else 0     masked importance sampling

    Parameters
    ----------
    logp_train : (B, T) float64, log pi_train of the sampled tokens (the trainer's recompute).
    logp_sampler : (B, T) float64, log mu of the same tokens (what the sampler drew them with).
    mask : (B, T) 0/1 float64, 1 on valid tokens, rows right-padded; padded entries of the log-probs hold junk.
    mode : "tis" or "mis". level : "token" or "sequence". cap : C > 0.

    Returns
    -------
    weights : (B, T) float64, finite, >= 0, 0 on padding.

    A response's summed log-ratio can be large (hundreds of nats): exp of it overflows to inf. Your weights
    must still be finite (min(inf, C) = C is fine; inf * 0 is not).
    """
'''

_TODO = '''    raise NotImplementedError("off_policy_weights: write the body (the docstring has the formula)")
'''

_SOLUTION_BODY = '''    valid = mask == 1
    log_rho = np.where(valid, logp_train - logp_sampler, 0.0)            # log rho_t, 0 on padding
    if level == "sequence":
        log_rho = log_rho.sum(axis=1, keepdims=True)                     # log rho_b: the product's log
    with np.errstate(over="ignore"):
        rho = np.exp(log_rho)                                            # inf where the product overflows
    w = np.minimum(rho, cap) if mode == "tis" else np.where(rho <= cap, rho, 0.0)
    return np.where(valid, np.broadcast_to(w, valid.shape), 0.0)
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY


def _batch():
    """(3, 6) log-probs with log-ratios of both signs, a right-padded mask, junk on the padding."""
    rng = np.random.default_rng(0)
    logp_sampler = rng.uniform(-3, -0.1, size=(3, 6))
    logp_train = logp_sampler + rng.normal(0, 0.5, size=(3, 6))
    mask = (np.arange(6)[None, :] < np.array([6, 3, 1])[:, None]).astype(np.float64)
    junk = rng.normal(0, 40, size=(3, 6))
    return np.where(mask == 1, logp_train, junk), np.where(mask == 1, logp_sampler, -junk), mask


def _student(fn, logp_train, logp_sampler, mask, mode, level, cap):
    return as_arrays(call(fn, logp_train, logp_sampler, mask, mode, level, cap), ("weights",), (mask.shape,))[0]


def _want(logp_train, logp_sampler, mask, mode, level, cap):
    return reference(logp_train, logp_sampler, mask, mode=mode, level=level, cap=cap)[0]


def _hint(w, lt, ls, mask, mode, level, cap) -> str:
    """What the student's weights look like, when they are wrong."""
    if close(w, _want(ls, lt, mask, mode, level, cap)):
        return "the ratio is upside down: rho = pi_train / mu = exp(logp_train - logp_sampler)"
    if level == "sequence":
        d = np.where(mask == 1, lt - ls, 0.0)
        gm = np.exp(d.sum(axis=1, keepdims=True) / np.maximum(mask.sum(axis=1, keepdims=True), 1))
        geo = np.where(mask == 1, np.minimum(gm, cap) if mode == "tis" else np.where(gm <= cap, gm, 0.0), 0.0)
        if close(w, geo):
            return ("that is the geometric MEAN of the ratios (GSPO's sequence ratio); the importance weight of a "
                    "response is their PRODUCT: exp of the SUM of the log-ratios")
        if close(w, _want(lt, ls, mask, mode, "token", cap)):
            return "those are per-token weights; level 'sequence' puts the row's product on each of its tokens"
    other = "mis" if mode == "tis" else "tis"
    if close(w, _want(lt, ls, mask, other, level, cap)):
        return (f"that is mode {other!r}: 'tis' truncates (min(rho, C)), 'mis' drops the unit (w = 0 where "
                "rho > C)")
    if np.any(w[mask == 0] != 0):
        return "padding must get weight 0 (and its junk log-probs must not enter a row's sum)"
    return f"mode {mode!r}, level {level!r}: see the docstring's formula"


def value_checks() -> list[Case]:
    lt, ls, mask = _batch()
    cap = 1.3
    out = []
    for mode in ("tis", "mis"):
        for level in ("token", "sequence"):
            want = _want(lt, ls, mask, mode, level, cap)

            def run(fn, mode=mode, level=level, want=want):
                w = _student(fn, lt, ls, mask, mode, level, cap)
                return f"weights {max_err(w, want)}", close(w, want), _hint(w, lt, ls, mask, mode, level, cap)

            out.append(Case(f"{mode}, {level} level, C = {cap} vs the library", "max|err| <= 1e-10", run))
    return out


def padding_check() -> list[Case]:
    lt, ls, mask = _batch()

    def run(fn):
        ok = True
        for mode in ("tis", "mis"):
            for level in ("token", "sequence"):
                w = _student(fn, lt, ls, mask, mode, level, 2.0)
                ok = ok and bool(np.all(w[mask == 0] == 0))
                # small junk on the padding (a sum that includes it moves, without reaching the cap)
                small_t, small_s = np.where(mask == 1, lt, 0.05), np.where(mask == 1, ls, -0.05)
                w2 = _student(fn, small_t, small_s, mask, mode, level, 2.0)
                ok = ok and close(w2, _want(small_t, small_s, mask, mode, level, 2.0))
        return f"padding weights {fmt(np.unique(w[mask == 0]))}", ok, (
            "padding gets 0 and its junk log-probs never enter a row's sum (use the mask before summing)")

    return [Case("padding: weight 0, its junk ignored", "0 on padding, for every mode and level", run)]


def overflow_check() -> list[Case]:
    mask = np.array([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    lt = np.array([[400.0, 400.0, 400.0, 0.0], [-0.1, 0.2, 0.0, 0.0]])
    ls = np.zeros_like(lt)

    def run(fn):
        tis = _student(fn, lt, ls, mask, "tis", "sequence", 2.0)
        mis = _student(fn, lt, ls, mask, "mis", "sequence", 2.0)
        ok = bool(np.all(np.isfinite(tis)) and np.all(np.isfinite(mis))) and close(
            tis, _want(lt, ls, mask, "tis", "sequence", 2.0)) and close(mis, _want(lt, ls, mask, "mis", "sequence", 2.0))
        return f"tis row 0 {fmt(tis[0])}, mis row 0 {fmt(mis[0])}", ok, (
            "exp(1200) is inf: min(inf, C) = C and inf > C masks to 0, but inf * 0 = nan; keep the mask out of "
            "a product with rho (np.where), and silence the overflow warning with np.errstate(over='ignore')")

    return [Case("a response whose ratio overflows (log rho = 1200)", "tis: C on its tokens, mis: 0; all finite",
                 run)]


def edge_check() -> list[Case]:
    """rho exactly at the cap: exp(0) = 1 = C, exact in float64 (the random batches never land on it)."""
    lt = np.array([[0.0, 0.3, -0.2], [0.1, -0.1, 0.0]])                 # row 1 sums to 0: its rho_b = 1
    ls, mask = np.zeros_like(lt), np.ones_like(lt)

    def run(fn):
        got = [_student(fn, lt, ls, mask, "mis", level, 1.0) for level in ("token", "sequence")]
        want = [_want(lt, ls, mask, "mis", level, 1.0) for level in ("token", "sequence")]
        ok = all(close(g, w) for g, w in zip(got, want))
        return f"token level row 0 {fmt(got[0][0])}, sequence level row 1 {fmt(got[1][1])}", ok, (
            "mis keeps a unit whose rho equals C: w = rho if rho <= C (the band is closed at C), not rho < C")

    return [Case("mis: rho equal to C = 1 is kept", "token row 0 [1, 0, 0.8187], sequence row 1 [1, 1, 1]", run)]


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    return value_checks() + edge_check() + padding_check() + overflow_check()
