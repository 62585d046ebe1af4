"""Exercise ``token_rewards``: a response's score as per-token rewards with the KL penalty.

Legend: B batch (responses), T response tokens (right-padded).

The student writes ``per_token_rewards(scores, logp, logp_ref, mask, kl_coef) -> rewards``: the rewards
of :func:`minippo.rlhf.ppo.per_token_rewards` (canonical PPO: the k1 KL, the score on the last token):
``-kl_coef * (logp - logp_ref)`` on every valid token plus the score on the last valid token (the EOS
when there is one), 0 on padding (Ziegler et al. 2019 eq. (2); InstructGPT eq. (2)).
"""
from __future__ import annotations

import numpy as np

from minippo.exercises.grading import Case, as_arrays, call, close, fmt, max_err
from minippo.rlhf.ppo import per_token_rewards as library_per_token_rewards

NAME = "token_rewards"
FUNCTION = "per_token_rewards"
SUMMARY = "a response's score as per-token rewards: -beta kl_t, + the score on the last token"
LESSON = "lessons/l13_reward_shaping.py"
REFERENCE = "minippo.rlhf.ppo.per_token_rewards"

_HEADER = '''"""minippo exercise `token_rewards`: from one reward-model score per response to one reward per token.

The reward model reads a whole response and returns ONE number; PPO needs a reward r_t for every
token it sampled. Ziegler et al. 2019 (arXiv:1909.08593, eq. (2)) and InstructGPT (arXiv:2203.02155,
eq. (2)) reward R = score - beta log(pi(y|x) / pi_ref(y|x)); written token by token, the log-ratio is a
sum of per-token terms kl_t = logp_t - logp_ref_t, and the score lands on the last token.

Write the body of `per_token_rewards` below, then run the project's checks on it:

    minippo exercise check token_rewards          (add --dir D when this file is not in ./exercises)
"""
import numpy as np


'''

_SIGNATURE = '''def per_token_rewards(scores, logp, logp_ref, mask, kl_coef):
    """Per-token rewards: the KL penalty on every valid token, the score on the last valid one.

        kl_t = logp_t - logp_ref_t                        (the k1 estimate, per token)
        r_t  = -kl_coef * kl_t                            on every valid token
        r_T += score                                      on the LAST valid token T of the row

    For the response [t0, t1, EOS, PAD, PAD] (mask [1, 1, 1, 0, 0]) with beta = kl_coef:

        position   0           1           2                  3    4
        reward     -b kl_0     -b kl_1     -b kl_2 + score    0    0

    Parameters
    ----------
    scores : (B,) float64, the reward model's score of each response.
    logp : (B, T) float64, log pi_old(a_t|s_t) of the sampled response tokens.
    logp_ref : (B, T) float64, log pi_ref(a_t|s_t) of the same tokens (the frozen SFT model).
    mask : (B, T) 0/1, right-padded, at least one valid token per row (padded entries of logp and
        logp_ref may hold any finite numbers).
    kl_coef : float >= 0, beta.

    Returns
    -------
    rewards : (B, T) float64, exactly 0 on padding.
    """
'''

_TODO = '''    raise NotImplementedError("per_token_rewards: write the body (the docstring has the formula)")
'''

_SOLUTION_BODY = '''    B, T = logp.shape
    kl = (logp - logp_ref) * mask                                  # (B, T) k1, 0 on padding
    rewards = -kl_coef * kl                                        # the KL penalty on every valid token
    last = mask.sum(axis=1).astype(int) - 1                        # (B,) the last valid token of each row
    rewards[np.arange(B), last] += scores                          # the score on it (the EOS, not the pad)
    return rewards
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY


def reference(scores, logp, logp_ref, mask, kl_coef):
    return library_per_token_rewards(scores, logp, logp_ref, mask, kl_coef)[0]


def _student(fn, scores, logp, logp_ref, mask, kl_coef):
    return as_arrays(call(fn, scores, logp, logp_ref, mask, kl_coef), ("rewards",), (logp.shape,))[0]


def _hint(got, scores, logp, logp_ref, mask, kl_coef) -> str:
    """What the student's rewards look like, when they are wrong."""
    pad = mask == 0
    kl_part = -kl_coef * (logp - logp_ref) * mask
    at_end = kl_part.copy()
    at_end[:, -1] += scores
    if close(got, at_end):
        return "the score goes on the last VALID token of each row (the EOS), not on position T - 1 (padding)"
    at_first = kl_part.copy()
    at_first[:, 0] += scores
    if close(got, at_first):
        return "the score goes on the LAST valid token of each row, not the first"
    if np.any(got[pad] != 0):
        return "padding gets no reward: the KL term and the score only go on valid tokens (mask == 1)"
    score_only = reference(scores, logp, logp_ref, mask, 0.0)
    if kl_coef and close(got, score_only - kl_part):
        return "the KL term is a penalty: r_t = -kl_coef * (logp - logp_ref), with a minus sign"
    if close(got, kl_part + scores[:, None] * mask):
        return "the score is added once per response, on its last valid token, not on every token"
    return "r_t = -kl_coef * (logp_t - logp_ref_t) on valid tokens, plus the score on each row's last valid token"


def ragged(seed: int, B: int, T: int, garbage: bool = True):
    """A right-padded (B, T) batch, lengths in [1, T] (one row full); the padding holds random numbers."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, size=B)
    lengths[-1] = T
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    logp, logp_ref = rng.uniform(-4, -0.1, size=(B, T)), rng.uniform(-4, -0.1, size=(B, T))
    if not garbage:
        logp, logp_ref = logp * mask, logp_ref * mask
    return rng.standard_normal(B), logp, logp_ref, mask


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    # the docstring's example: [t0, t1, EOS, PAD, PAD], score 1.5, beta 0.1
    ex = (np.array([1.5]), np.array([[-1.0, -2.0, -0.5, -3.0, -3.0]]), np.array([[-1.5, -1.0, -0.7, -0.2, -0.1]]),
          np.array([[1.0, 1.0, 1.0, 0.0, 0.0]]), 0.1)
    ex_want = reference(*ex)
    cases = []

    def compare(args, want):
        def run(fn):
            got = _student(fn, *args)
            ok = close(got, want) and bool(np.all(got[args[3] == 0] == 0))     # exactly 0 on padding
            return f"rewards {fmt(got) if got.size <= 5 else max_err(got, want)}", ok, _hint(got, *args)
        return run

    cases.append(Case("t0 t1 EOS PAD PAD: score on the EOS", f"rewards {fmt(ex_want)}", compare(ex, ex_want)))
    full = (np.array([2.0, -1.0]), np.array([[-1.0, -1.2], [-0.3, -0.9]]), np.array([[-1.1, -1.0], [-0.3, -1.4]]),
            np.ones((2, 2)), 0.2)
    cases.append(Case("full rows: score on position T - 1", f"rewards {fmt(reference(*full))}",
                      compare(full, reference(*full))))
    one = (np.array([0.7, -0.4]), np.array([[-1.0, -5.0], [-2.0, -0.5]]), np.array([[-0.5, -0.1], [-2.5, -3.0]]),
           np.array([[1.0, 0.0], [1.0, 0.0]]), 0.5)
    cases.append(Case("one-token rows", f"rewards {fmt(reference(*one))}", compare(one, reference(*one))))
    zero_beta = ragged(1, 4, 6)[:4] + (0.0,)
    cases.append(Case("kl_coef = 0: the score only", "rewards as the library",
                      compare(zero_beta, reference(*zero_beta))))
    for seed, (B, T), beta in ((2, (6, 8), 0.05), (3, (16, 24), 0.3)):
        args = ragged(seed, B, T) + (beta,)
        cases.append(Case(f"random batch {B}x{T}, beta={beta:g} vs the library (padding holds other numbers)",
                          "rewards as the library", compare(args, reference(*args))))
    return cases
