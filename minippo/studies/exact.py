"""The exact-gradient lab: a sequence space small enough to enumerate, and every estimator measured on it.

Legend: N responses in the space, n sampled responses (a batch), T = L positions, V vocab, S states.

Practitioners argue about gradient estimators they can only sample at scale (k1 in the reward or k3
in the loss, GRPO's 1/|o|, clip-higher, GSPO's sequence ratio). Here the vocabulary has V tokens
(the last is EOS) and a response at most L tokens, so every response can be listed: with V = 3, L = 6
there are 127 of them. The policy is TABULAR and autoregressive: one row of logits ``theta[s]`` (V,)
for every state s = a prefix of non-EOS tokens shorter than L (S = 63), and

    log pi(y) = sum_t log softmax(theta[s_t])[y_t]          s_t = y_<t; a response ends at EOS or at L

Then the objective J = sum_y pi(y) R(y), its gradient grad J = sum_y pi(y) R(y) grad log pi(y), the
KL(pi || pi_ref) = sum_y pi(y) log(pi(y) / pi_ref(y)) and its gradient
sum_y pi(y) log(pi(y) / pi_ref(y)) grad log pi(y) are finite sums, in float64, through the same
hand-written backprop as the Monte Carlo estimates (:func:`backprop`: ``minippo.rl.losses.logprobs_backward``
then an ``np.add.at`` into the table).

Every Monte Carlo estimate runs the library's formulas on a sampled batch: log-probs by
``logprobs_from_logits``, rewards by ``minippo.rlhf.ppo_knobs.shaped_rewards`` (the trainer's, with k2 / k3), returns by ``gae``,
advantages by ``grpo_advantages`` (:mod:`minippo.studies.exact_updates`), the loss and dlogp by ``aggregated_policy_loss`` / ``kl_ref_loss``: the
formula a student reads is the code that runs. Its EXPECTATION is often a finite sum too: an estimator
that is a sum of per-response terms has ``E[g] = sum_y pi_sample(y) g(y)``, which the same functions
compute on all N responses with each response's advantage (or dlogp) weighted by N pi_sample(y) (the
clip only looks at the sign of A, which a positive weight keeps). Bias (against the exact gradient)
and variance (over repeated batches) are then measured, not argued. The update variants (the three loss
aggregations, the clip band, the token / sequence / whole-response ratio) and the training loops built on
them are in :mod:`minippo.studies.exact_updates`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minippo.checks import check_choice, check_range
from minippo.rl.gae import gae
from minippo.rl.kl import kl_ref_loss
from minippo.rl.loss_variants import aggregated_policy_loss
from minippo.rl.losses import logprobs_backward, logprobs_from_logits
from minippo.rlhf.ppo_knobs import shaped_rewards

KL_ESTIMATORS = ("reward k1", "reward k2", "reward k3", "loss k1", "loss k2", "loss k3")
RIGHT = 0                # the right answer whose length is tracked (exact_updates.exact_metrics); the wrong one V - 2


# ----------------------------------------------------------------------------------------------
# the space: every response, its tokens, its states
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SequenceSpace:
    """Every response over V tokens (token V - 1 is EOS) of length 1 .. L, right-padded to L.

    ``tokens`` (N, L) int (0 on padding), ``mask`` (N, L) float64, ``states`` (N, L) int: the index of
    the prefix y_<t (0 on padding), ``lengths`` (N,) int, ``n_states`` S. Responses are the prefixes
    p of length < L followed by EOS, then the prefixes of length L (truncated, no EOS)."""

    V: int
    L: int
    tokens: np.ndarray
    mask: np.ndarray
    states: np.ndarray
    lengths: np.ndarray
    n_states: int

    @classmethod
    def build(cls, V: int = 3, L: int = 6) -> "SequenceSpace":
        check_range("V", V, 2, None, integer=True)
        check_range("L", L, 1, None, integer=True)
        eos = V - 1
        prefixes = [()]                                   # states, breadth first: () is state 0
        for p in prefixes:
            if len(p) < L - 1:
                prefixes.extend(p + (a,) for a in range(eos))
        index = {p: i for i, p in enumerate(prefixes)}
        full = [p + (a,) for p in prefixes if len(p) == L - 1 for a in range(eos)]
        responses = [p + (eos,) for p in prefixes] + full
        N = len(responses)
        tokens, states = np.zeros((N, L), np.int64), np.zeros((N, L), np.int64)
        for i, y in enumerate(responses):
            tokens[i, :len(y)] = y
            states[i, :len(y)] = [index[y[:t]] for t in range(len(y))]
        lengths = np.array([len(y) for y in responses])
        mask = (np.arange(L)[None, :] < lengths[:, None]).astype(np.float64)
        return cls(V, L, tokens, mask, states, lengths, len(prefixes))

    @property
    def N(self) -> int:
        return self.tokens.shape[0]


def random_policy(space: SequenceSpace, rng: np.random.Generator, scale: float = 1.0, eos_bias: float = 0.0):
    """(S, V) logits ~ Normal(0, scale), plus ``eos_bias`` on the EOS column (shorter responses if > 0)."""
    theta = scale * rng.standard_normal((space.n_states, space.V))
    theta[:, -1] += eos_bias
    return theta


def right_wrong_reward(space: SequenceSpace, right=(RIGHT,)) -> np.ndarray:
    """(N,) 1 for a response whose first token is one of the ``right`` answers, else 0: correctness is
    decided at once, the rest of the response (its length) is free; an empty response (EOS first) is
    wrong. The wrong answer of :func:`exact_metrics` is token V - 2 (not in ``right``)."""
    if space.V - 2 in right or any(not 0 <= a < space.V - 1 for a in right):
        raise ValueError(f"`right` must be non-EOS tokens other than the wrong answer {space.V - 2}, got {right}")
    return np.isin(space.tokens[:, 0], right).astype(np.float64) * (space.lengths > 1)


def length_reward(space: SequenceSpace) -> np.ndarray:
    """(N,) |y| / L: a reward that likes long responses."""
    return space.lengths / space.L


# ----------------------------------------------------------------------------------------------
# exact quantities by enumeration, and the one backprop from dlogp to the table
# ----------------------------------------------------------------------------------------------

def token_logprobs(space: SequenceSpace, theta, rows=None):
    """``(logp (n, L), cache)``: log pi(y_t | y_<t) of the responses ``rows`` (all when None); padding is junk."""
    rows = np.arange(space.N) if rows is None else rows
    return logprobs_from_logits(theta[space.states[rows]], space.tokens[rows])     # (n, L, V) -> (n, L)


def backprop(space: SequenceSpace, theta, dlogp, rows=None) -> np.ndarray:
    """d loss / d theta (S, V) from d loss / d logp (n, L) of the responses ``rows``: the chain rule
    through log softmax (``logprobs_backward``), then each position's gradient added to its state's row."""
    rows = np.arange(space.N) if rows is None else rows
    _, cache = token_logprobs(space, theta, rows)
    dlogits = logprobs_backward(dlogp * space.mask[rows], cache)                  # (n, L, V)
    grad = np.zeros_like(theta)
    np.add.at(grad, space.states[rows], dlogits)                                  # repeated states accumulate
    return grad


def sequence_logprobs(space: SequenceSpace, theta) -> np.ndarray:
    """(N,) log pi(y) = sum_t log pi(y_t | y_<t)."""
    return (token_logprobs(space, theta)[0] * space.mask).sum(axis=1)


def probabilities(space: SequenceSpace, theta) -> np.ndarray:
    """(N,) pi(y); they sum to 1."""
    return np.exp(sequence_logprobs(space, theta))


def expectation_gradient(space: SequenceSpace, theta, f) -> np.ndarray:
    """grad_theta sum_y pi(y) f(y) for a FIXED f (N,): sum_y pi(y) f(y) grad log pi(y) (score function)."""
    w = probabilities(space, theta) * f                                           # (N,)
    return backprop(space, theta, np.broadcast_to(w[:, None], space.mask.shape))


def objective(space: SequenceSpace, theta, reward) -> float:
    """J = E_pi[R]."""
    return float(probabilities(space, theta) @ reward)


def objective_gradient(space: SequenceSpace, theta, reward) -> np.ndarray:
    """grad J = sum_y pi(y) R(y) grad log pi(y)."""
    return expectation_gradient(space, theta, reward)


def kl(space: SequenceSpace, theta, theta_ref) -> float:
    """KL(pi || pi_ref) over whole responses."""
    logp, logp_ref = sequence_logprobs(space, theta), sequence_logprobs(space, theta_ref)
    return float(np.exp(logp) @ (logp - logp_ref))


def kl_gradient(space: SequenceSpace, theta, theta_ref) -> np.ndarray:
    """grad KL(pi || pi_ref) = sum_y pi(y) log(pi(y)/pi_ref(y)) grad log pi(y) (+ sum_y grad pi(y) = 0)."""
    return expectation_gradient(space, theta, sequence_logprobs(space, theta) - sequence_logprobs(space, theta_ref))


def visit_probabilities(space: SequenceSpace, theta) -> np.ndarray:
    """(S,) P(a response passes through state s) = sum of pi(y) over the responses y with a token at s."""
    w = probabilities(space, theta)[:, None] * space.mask                         # (N, L)
    out = np.zeros(space.n_states)
    np.add.at(out, space.states, w)
    return out


def per_state_kl_gradient(space: SequenceSpace, theta, theta_ref, direction="forward") -> np.ndarray:
    """(S, V) ``sum_s P(s) grad_theta KL_s`` with the visit probabilities P(s) held fixed: the PARTIAL gradient
    a per-token KL loss can see (:mod:`minippo.rl.kl`). ``direction`` "forward": KL(pi_s || ref_s), gradient
    pi_s (log pi_s - log ref_s - KL_s) in row s; "reverse": KL(ref_s || pi_s), gradient pi_s - ref_s."""
    check_choice("direction", direction, ("forward", "reverse"))
    P = visit_probabilities(space, theta)[:, None]                                # (S, 1)
    logq = theta - theta.max(axis=1, keepdims=True)
    logq = logq - np.log(np.exp(logq).sum(axis=1, keepdims=True))                 # (S, V) log pi_s
    logq_ref = theta_ref - theta_ref.max(axis=1, keepdims=True)
    logq_ref = logq_ref - np.log(np.exp(logq_ref).sum(axis=1, keepdims=True))     # (S, V) log ref_s
    pi, ref = np.exp(logq), np.exp(logq_ref)
    if direction == "reverse":
        return P * (pi - ref)
    kl_s = (pi * (logq - logq_ref)).sum(axis=1, keepdims=True)                    # (S, 1)
    return P * pi * (logq - logq_ref - kl_s)


def entropy(space: SequenceSpace, theta) -> float:
    """H(pi) = -sum_y pi(y) log pi(y), nats per response."""
    logp = sequence_logprobs(space, theta)
    return float(-np.exp(logp) @ logp)


def answer_length(space: SequenceSpace, theta, first: int) -> float:
    """E[|y| | y_0 = first]: it depends only on the states after ``first`` (tabular), so the exact
    grad J of :func:`right_wrong_reward` (which moves the first token only) leaves it unchanged."""
    p, sel = probabilities(space, theta), space.tokens[:, 0] == first
    return float(p[sel] @ space.lengths[sel] / p[sel].sum())


def answer_length_gradient(space: SequenceSpace, theta, first: int) -> np.ndarray:
    """grad E[|y| | y_0 = first] = sum_{y_0 = first} pi(y) (|y| - E[|y| | .]) grad log pi(y) / P(y_0 = first)."""
    p, sel = probabilities(space, theta), space.tokens[:, 0] == first
    mean = p[sel] @ space.lengths[sel] / p[sel].sum()
    return expectation_gradient(space, theta, np.where(sel, (space.lengths - mean) / p[sel].sum(), 0.0))


def per_response_gradients(space, theta, dlogp) -> np.ndarray:
    """(N, S, V): response y's own d loss / d theta from its row of ``dlogp`` (N, L)."""
    _, cache = token_logprobs(space, theta)
    dlogits = logprobs_backward(dlogp * space.mask, cache)                        # (N, L, V)
    out = np.zeros((space.N,) + theta.shape)
    rows = np.broadcast_to(np.arange(space.N)[:, None], space.states.shape)
    np.add.at(out, (rows, space.states), dlogits)
    return out


def sample(space: SequenceSpace, theta, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) rows of responses drawn from pi (the same law as sampling token by token)."""
    p = probabilities(space, theta)
    return rng.choice(space.N, size=n, p=p / p.sum())


# ----------------------------------------------------------------------------------------------
# the KL estimators as gradients: in the reward (policy gradient of -beta k) or in the loss
# ----------------------------------------------------------------------------------------------

def batch_logprobs(space, rows, theta, theta_old, theta_ref):
    """``(logp, logp_old, logp_ref, mask)`` (n, L) of the responses ``rows`` under three tables."""
    lp = lambda th: token_logprobs(space, th, rows)[0]                            # noqa: E731
    return lp(theta), lp(theta_old), lp(theta_ref), space.mask[rows]


def policy_gradient(space, rows, theta, theta_old, theta_ref, scores, beta, kind="k1", clip_eps=0.2,
                    weights=None) -> np.ndarray:
    """The PPO estimate of grad (J - beta E[sum_t k_t]) from the responses ``rows`` sampled by theta_old.

    Rewards as our trainer makes them (``shaped_rewards``: -beta k_t with k from logp_old, the score
    on the last token), returns to go by ``gae`` with values 0 and lambda = 1, minus a leave-one-out
    baseline of the other responses' returns, into ``aggregated_policy_loss`` (token ratio, the sum over a
    response's tokens averaged over responses). With ``weights`` (n,) the baseline is dropped and row
    i's advantage is multiplied by weights[i]: with weights N pi_old(y) over all N responses this is
    the exact expectation of the estimator WITHOUT baseline (equal to it with one on-policy)."""
    logp, logp_old, logp_ref, mask = batch_logprobs(space, rows, theta, theta_old, theta_ref)
    rewards, _, _ = shaped_rewards(scores, logp_old, logp_ref, mask, beta, kl_kind=kind)
    returns, _ = gae(rewards, np.zeros_like(rewards), mask, gamma=1.0, lam=1.0)    # (n, L) returns to go
    if weights is None:
        total = returns[:, 0]
        baseline = (total.sum() - total) / (len(rows) - 1)                         # leave-one-out: unbiased
        adv = (returns - baseline[:, None]) * mask
    else:
        adv = returns * weights[:, None]
    _, dlogp, _ = aggregated_policy_loss(logp, logp_old, adv, mask, clip_eps, loss_agg="seq-mean-token-sum-norm",
                                         norm_len=1)
    return -backprop(space, theta, dlogp, rows)                                   # ascent direction of the objective


def kl_loss_gradient(space, rows, theta, theta_old, theta_ref, kind, weights=None) -> np.ndarray:
    """grad of ``kl_ref_loss`` (the response's sum of k_t, averaged over responses) on ``rows``;
    ``weights`` multiply each row's dlogp (N pi_old(y) over all rows: the exact expectation)."""
    logp, _, logp_ref, mask = batch_logprobs(space, rows, theta, theta_old, theta_ref)
    _, dlogp, _ = kl_ref_loss(logp, logp_ref, mask, 1.0, kind, loss_agg="seq-mean-token-sum-norm", norm_len=1)
    if weights is not None:
        dlogp = dlogp * weights[:, None]
    return backprop(space, theta, dlogp, rows)


def kl_gradient_estimate(space, estimator, rows, theta, theta_old, theta_ref, clip_eps=0.2, weights=None):
    """One estimate of grad KL(pi || pi_ref) by ``estimator`` (:data:`KL_ESTIMATORS`): "reward k" is the
    negated policy gradient of the reward -k (beta 1, no score), "loss k" the gradient of the loss k."""
    check_choice("estimator", estimator, KL_ESTIMATORS)
    where, kind = estimator.split()
    if where == "reward":
        zero = np.zeros(len(rows))
        return -policy_gradient(space, rows, theta, theta_old, theta_ref, zero, 1.0, kind, clip_eps, weights)
    return kl_loss_gradient(space, rows, theta, theta_old, theta_ref, kind, weights)


def expected_kl_gradient_estimate(space, estimator, theta, theta_old, theta_ref, clip_eps=0.2):
    """The exact expectation of :func:`kl_gradient_estimate` under sampling from theta_old, or None
    where it is not a finite sum (a reward estimator off-policy: its clip depends on each batch's baseline)."""
    on_policy = np.array_equal(theta, theta_old)
    if estimator.startswith("reward") and not on_policy:
        return None
    rows = np.arange(space.N)
    weights = space.N * probabilities(space, theta_old)                          # (N,) N pi_old(y)
    return kl_gradient_estimate(space, estimator, rows, theta, theta_old, theta_ref, clip_eps, weights)


def moments(estimate, sampler, n_batches: int, rng: np.random.Generator) -> dict:
    """Mean, standard error and spread of ``estimate(rows)`` over ``n_batches`` batches ``sampler(rng)``.

    Returns ``mean`` and ``se`` (arrays like one estimate: se = std / sqrt(M), M = ``n_batches``),
    ``spread`` = sqrt(E ||g - E g||^2), the size of one batch's noise, and ``cov_fro`` = sqrt(tr C^2) of
    the mean's covariance C = Cov[g] / M (from the M x M Gram matrix of the centred estimates), which
    :func:`bias_z` needs."""
    check_range("n_batches", n_batches, 2, None, integer=True)
    g = np.stack([estimate(sampler(rng)) for _ in range(n_batches)])              # (M, S, V)
    mean = g.mean(axis=0)
    var = g.var(axis=0, ddof=1)
    centred = (g - mean).reshape(n_batches, -1)                                   # (M, P)
    gram = centred @ centred.T                                                    # (M, M)
    cov_fro = float(np.sqrt((gram ** 2).sum())) / ((n_batches - 1) * n_batches)   # ||Cov[g]||_F / M
    return {"mean": mean, "se": np.sqrt(var / n_batches), "spread": float(np.sqrt(var.sum())),
            "cov_fro": cov_fro, "n_batches": n_batches}


def bias_z(mc: dict, target) -> float:
    """How many standard deviations the squared error of a Monte Carlo mean lies above its expectation if the
    estimator's expectation WERE ``target``: ``(||mean - target||^2 - tr C) / sqrt(2 tr C^2)``.

    Under that hypothesis E||mean - target||^2 = tr C = sum(se^2) exactly (whatever the correlations) and,
    for a Gaussian mean, Var = 2 tr C^2; so z stays within a few units when the mean converges to
    ``target`` and grows like M when it does not (a bias b gives ||b||^2 / sqrt(2 tr C^2)). Both traces are
    measured from the batches (:func:`moments`): the test's tolerance follows from the measured noise."""
    err = float(((mc["mean"] - target) ** 2).sum())
    return (err - float((mc["se"] ** 2).sum())) / (np.sqrt(2.0) * mc["cov_fro"])
