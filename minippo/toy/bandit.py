"""Token bandits: the smallest RL problems with a language model's shape (lessons 01-06).

Legend: S contexts ("prompts"), V vocab (tokens = actions), D features, N samples in a batch.

A token bandit has S contexts drawn from mu(s), a vocabulary of V tokens and a reward
R(s, a) for answering context s with token a, observed with Gaussian noise. One episode is one
token: a language model writes a one-token response and a reward model scores it. The policy
is a linear softmax, "a language model whose network is one matrix":

    logits(s) = x_s @ W            x_s (D,) fixed features of context s, W (D, V) the parameters
    pi(a|s)   = softmax(logits(s))[a]

With ``features=None`` the features are the identity (D = S): the policy is *tabular*, W[s]
are the logits of context s. With D < S contexts share parameters, as in a real network: a
step taken for one context moves the others (why a large step can hurt, lesson 03).

Everything a lesson compares against is exact here: the expected reward
J(W) = sum_s mu(s) sum_a pi(a|s) R(s, a) and its gradient, the state values
V(s) = sum_a pi(a|s) R(s, a), the entropy, the KL between two policies. The log-probabilities
and entropies are those of :mod:`minippo.rl.losses` (the same code the transformer
uses); this module only adds the chain rule through ``logits = x_s @ W``.

The second half is a tiny PPO loop on a bandit (:func:`ppo_train`), used by the lessons to
compare objectives (L^PG, L^CLIP, L^KLPEN) and the entropy bonus on a task that runs in seconds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minippo.checks import check_choice, check_float_array, check_int_array, check_range
from minippo.nn.optim import AdamW
from minippo.rl.kl import kl_estimate
from minippo.rl.kl_control import FixedKLController, PPOPaperKLController
from minippo.rl.losses import (clipped_policy_loss, entropy_backward, entropy_from_logits, kl_exact_from_logits,
                               log_softmax, logprobs_backward, logprobs_from_logits, value_loss)
from minippo.rl.masked import explained_variance, masked_mean, masked_whiten, token_inputs
from minippo.rl.penalty import ppo_penalty_loss


class TokenBandit:
    """A contextual bandit over tokens with a linear softmax policy ``pi(.|s) = softmax(x_s @ W)``.

    Parameters
    ----------
    rewards : (S, V) mean reward R(s, a).
    features : (S, D) context features x_s, or None for the identity (tabular policy, D = S).
    state_probs : (S,) context distribution mu(s), or None for uniform.
    noise_std : standard deviation of the Gaussian noise added to each observed reward, >= 0.
    """

    def __init__(self, rewards, *, features=None, state_probs=None, noise_std: float = 0.0):
        self.rewards = check_float_array("rewards", rewards, ndim=2).astype(np.float64)   # (S, V)
        S, V = self.rewards.shape
        if S < 1 or V < 2:
            raise ValueError(f"`rewards` must have shape (S >= 1, V >= 2), got {self.rewards.shape}")
        if features is None:
            features = np.eye(S)
        self.features = check_float_array("features", features, ndim=2).astype(np.float64)  # (S, D)
        if self.features.shape[0] != S:
            raise ValueError(f"`features` must have {S} rows (one per context), got shape {self.features.shape}")
        if state_probs is None:
            state_probs = np.full(S, 1.0 / S)
        mu = check_float_array("state_probs", state_probs, shape=(S,)).astype(np.float64)
        if (mu < 0).any() or abs(mu.sum() - 1.0) > 1e-9:
            raise ValueError(f"`state_probs` must be non-negative and sum to 1, got sum {mu.sum()!r}")
        self.state_probs = mu
        check_range("noise_std", noise_std, 0, None)
        self.noise_std = float(noise_std)

    @classmethod
    def random(cls, n_states: int, vocab: int, rng: np.random.Generator, *, n_features: int | None = None,
               noise_std: float = 1.0) -> "TokenBandit":
        """Rewards R(s, a) ~ N(0, 1); features N(0, 1/D) when ``n_features`` is given, else tabular."""
        check_range("n_states", n_states, 1, None, integer=True)
        check_range("vocab", vocab, 2, None, integer=True)
        rewards = rng.standard_normal((n_states, vocab))                        # (S, V)
        features = None
        if n_features is not None:
            check_range("n_features", n_features, 1, None, integer=True)
            features = rng.standard_normal((n_states, n_features)) / np.sqrt(n_features)   # (S, D)
        return cls(rewards, features=features, noise_std=noise_std)

    # ---- sizes and parameters ------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        return self.rewards.shape[0]

    @property
    def vocab(self) -> int:
        return self.rewards.shape[1]

    @property
    def n_features(self) -> int:
        return self.features.shape[1]

    def init_params(self, rng: np.random.Generator | None = None, scale: float = 0.0) -> np.ndarray:
        """W (D, V): zeros (the uniform policy) or N(0, scale^2) entries drawn from ``rng``."""
        if scale == 0.0:
            return np.zeros((self.n_features, self.vocab))
        if rng is None:
            raise ValueError("`rng` is required when `scale` > 0")
        return scale * rng.standard_normal((self.n_features, self.vocab))

    def fitted_params(self, scale: float = 1.0) -> np.ndarray:
        """A decent starting policy, like an SFT model: ``W = scale * argmin_W ||X W - R||^2``.

        The logits are ``scale`` times the best linear fit of the rewards from the features
        (with tabular features: ``scale * R`` exactly), so better tokens are already likelier.
        """
        check_range("scale", scale, 0, None)
        return scale * np.linalg.lstsq(self.features, self.rewards, rcond=None)[0]     # (D, V)

    def _check_W(self, W, name="W") -> np.ndarray:
        return check_float_array(name, W, shape=(self.n_features, self.vocab))

    def _check_states(self, states) -> np.ndarray:
        return check_int_array("states", states, ndim=1, low=0, high=self.n_states)

    # ---- the policy ------------------------------------------------------------------------------
    def logits(self, W, states=None) -> np.ndarray:
        """``x_s @ W`` for every context (S, V), or for the batch's ``states`` (N, V)."""
        W = self._check_W(W)
        x = self.features if states is None else self.features[self._check_states(states)]
        return x @ W

    def probs(self, W) -> np.ndarray:
        """pi(a|s) for every context, (S, V)."""
        return np.exp(log_softmax(self.logits(W)))

    def sample_actions(self, W, states, rng: np.random.Generator) -> np.ndarray:
        """One token a ~ pi(.|s) per state, by inversion of the cumulative distribution: (N,) int."""
        p = np.exp(log_softmax(self.logits(W, states)))                       # (N, V)
        u = rng.random(len(states))                                             # (N,) uniform [0, 1)
        actions = (np.cumsum(p, axis=1) <= u[:, None]).sum(axis=1)              # first a with cdf > u
        return np.minimum(actions, self.vocab - 1)       # cdf[-1] may round to just below u

    def sample(self, W, n: int, rng: np.random.Generator):
        """A batch of n one-token episodes: ``(states, actions, rewards)``, each (n,).

        s ~ mu, a ~ pi(.|s), reward = R(s, a) + noise_std * N(0, 1).
        """
        check_range("n", n, 1, None, integer=True)
        states = rng.choice(self.n_states, size=n, p=self.state_probs)
        actions = self.sample_actions(W, states, rng)
        rewards = self.rewards[states, actions] + self.noise_std * rng.standard_normal(n)
        return states, actions, rewards

    def logp(self, W, states, actions):
        """``(logp, cache)``: log pi(a_i|s_i) (N,) and what :meth:`logp_backward` needs."""
        states = self._check_states(states)
        logp, cache = logprobs_from_logits(self.logits(W, states), actions)   # (N,)
        return logp, (cache, states)

    def logp_backward(self, dlogp, cache) -> np.ndarray:
        """dL/dW (D, V) from dL/dlogp (N,): the distributions' backward, then ``logits = x_s @ W``."""
        dist_cache, states = cache
        dlogits = logprobs_backward(dlogp, dist_cache)                        # (N, V)
        return self.features[states].T @ dlogits                              # (D, V)

    def entropy(self, W, states):
        """``(ent, cache)``: the entropy H(pi(.|s_i)) of each sample's context (N,)."""
        states = self._check_states(states)
        ent, cache = entropy_from_logits(self.logits(W, states))
        return ent, (cache, states)

    def entropy_backward(self, dent, cache) -> np.ndarray:
        """dL/dW (D, V) from dL/dH (N,)."""
        dist_cache, states = cache
        return self.features[states].T @ entropy_backward(dent, dist_cache)    # (D, V)

    # ---- exact quantities --------------------------------------------------------------------
    def state_values(self, W) -> np.ndarray:
        """V^pi(s) = sum_a pi(a|s) R(s, a), (S,): what a perfect critic predicts."""
        return np.sum(self.probs(W) * self.rewards, axis=1)

    def expected_reward(self, W) -> float:
        """J(W) = sum_s mu(s) V^pi(s)."""
        return float(self.state_probs @ self.state_values(W))

    def expected_reward_grad(self, W) -> np.ndarray:
        """dJ/dW (D, V), exact: the policy gradient theorem with the true advantages,
        ``dJ/dlogits(s, a) = mu(s) pi(a|s) (R(s, a) - V(s))``."""
        p = self.probs(W)                                                     # (S, V)
        dlogits = self.state_probs[:, None] * p * (self.rewards - self.state_values(W)[:, None])
        return self.features.T @ dlogits                                      # (D, V)

    def optimal_reward(self) -> float:
        """J of the best deterministic policy, sum_s mu(s) max_a R(s, a) (reachable when tabular)."""
        return float(self.state_probs @ self.rewards.max(axis=1))

    def mean_entropy(self, W) -> float:
        """sum_s mu(s) H(pi(.|s))."""
        ent, _ = entropy_from_logits(self.logits(W))
        return float(self.state_probs @ ent)

    def _kl_weights(self, states) -> np.ndarray:
        """mu(s), or the empirical frequency of each context in ``states`` (S,)."""
        if states is None:
            return self.state_probs
        return np.bincount(self._check_states(states), minlength=self.n_states) / len(states)

    def kl(self, W_old, W_new, states=None) -> float:
        """Exact E_s[KL(pi_old(.|s) || pi_new(.|s))], the KL of PPO eq. (8) and TRPO's constraint.

        E_s is over mu, or over the contexts of a batch (``states``), as the papers' E_t.
        """
        W_old, W_new = self._check_W(W_old, "W_old"), self._check_W(W_new, "W_new")
        kl_s = kl_exact_from_logits(self.logits(W_old), self.logits(W_new))   # (S,)
        return float(self._kl_weights(states) @ kl_s)

    def kl_grad(self, W_old, W_new, states=None) -> np.ndarray:
        """d kl(W_old, W_new) / d W_new (D, V): ``sum_s w(s) x_s (pi_new(.|s) - pi_old(.|s))``."""
        w = self._kl_weights(states)
        dlogits = w[:, None] * (self.probs(W_new) - self.probs(W_old))        # (S, V)
        return self.features.T @ dlogits


# ==============================================================================================
# REINFORCE (the policy gradient of PPO eqs. (1)-(2))
# ==============================================================================================

def pg_loss(logp, adv, mask=None):
    """The policy-gradient loss ``L = -E_t[log pi(a_t|s_t) A_t]`` (L^PG, PPO paper eq. (2)).

    Its gradient is minus the estimator g_hat of eq. (1): ``dL/dlogp = -A_t / n``.
    Returns ``(loss, dlogp, stats)`` like :func:`minippo.rl.losses.clipped_policy_loss`.
    """
    (logp, adv), mask = token_inputs(mask, logp=logp, adv=adv)
    n = int((mask == 1).sum())
    loss = -masked_mean(logp * adv, mask)
    return loss, (-adv * mask / max(n, 1)).astype(logp.dtype), {"n_tokens": n}


def reinforce_gradient(bandit: TokenBandit, W, states, actions, rewards, baseline=None) -> np.ndarray:
    """The REINFORCE estimate (Williams 1992) of dJ/dW from one batch, as an ascent direction.

    ``g_hat = mean_i (R_i - b_i) grad_W log pi(a_i|s_i)``  (PPO paper eq. (1) with A_t = R_t - b).
    ``baseline`` b: None (no baseline), a scalar, or (N,) per sample (e.g. V(s_i)). A baseline
    that does not depend on a_i leaves the estimate unbiased and can shrink its variance.
    """
    rewards = check_float_array("rewards", rewards, ndim=1)
    adv = rewards - (0.0 if baseline is None else np.asarray(baseline, dtype=np.float64))   # (N,)
    logp, cache = bandit.logp(W, states, actions)
    _, dlogp, _ = pg_loss(logp, adv)
    return -bandit.logp_backward(dlogp, cache)


# ==============================================================================================
# A tiny PPO loop on a token bandit
# ==============================================================================================

@dataclass
class BanditPPOConfig:
    """Hyperparameters of :func:`ppo_train` (the PPO paper's symbols in brackets)."""
    objective: str = "clip"
    """"clip" (L^CLIP, eq. (7)), "penalty" (L^KLPEN, eq. (8)) or "pg" (L^PG, eq. (2))."""
    batch_size: int = 256
    """one-token episodes per rollout (N), >= 1."""
    update_epochs: int = 4
    """passes over each rollout (K), >= 1; 3-10 in the paper."""
    minibatch_size: int = 64
    """samples per gradient step (M), 1..batch_size."""
    lr: float = 0.05
    """Adam step size on W and on the value table, > 0."""
    clip_eps: float = 0.2
    """epsilon of L^CLIP, > 0; 0.1-0.3."""
    kl_old_coef: float = 1.0
    """beta of L^KLPEN, the weight of KL(pi_old || pi) (its initial value with the adaptive rule), >= 0."""
    kl_old_target: float | None = 0.01
    """d_targ of the paper's adaptive-beta rule (sec. 4): the target KL(pi_old || pi) of one update, > 0;
    None keeps beta fixed."""
    vf_coef: float = 0.5
    """c1 of eq. (9), >= 0: weight of the value loss."""
    ent_coef: float = 0.0
    """c2 of eq. (9), >= 0: weight of the entropy bonus."""
    critic: str = "table"
    """baseline V(s) in A = R - V(s): "table" (a learned value per context), "exact" (V^pi) or "none"."""
    whiten_advantages: bool = True
    """whiten the advantages over the batch (mean 0, std 1)."""

    def __post_init__(self):
        check_choice("objective", self.objective, ("clip", "penalty", "pg"))
        check_choice("critic", self.critic, ("table", "exact", "none"))
        check_range("batch_size", self.batch_size, 1, None, integer=True)
        check_range("update_epochs", self.update_epochs, 1, None, integer=True)
        check_range("minibatch_size", self.minibatch_size, 1, self.batch_size, integer=True)
        check_range("lr", self.lr, 0, None, lo_open=True)
        check_range("clip_eps", self.clip_eps, 0, None, lo_open=True)
        check_range("kl_old_coef", self.kl_old_coef, 0, None)
        if self.kl_old_target is not None:
            check_range("kl_old_target", self.kl_old_target, 0, None, lo_open=True)
        check_range("vf_coef", self.vf_coef, 0, None)
        check_range("ent_coef", self.ent_coef, 0, None)


def actor_critic_loss(bandit: TokenBandit, params, mb, cfg: BanditPPOConfig, kl_coef: float = 0.0):
    """``loss = policy_loss + c1 value_loss - c2 entropy`` (PPO paper eq. (9), minimised) on a minibatch.

    ``params``: {"W": (D, V), "values": (S,)}; ``mb``: dict of (M,) arrays ``states``,
    ``actions``, ``logp_old``, ``adv``, ``returns``. Returns ``(loss, grads, stats)`` with
    grads keyed like ``params``; stats hold each term (``policy_loss``, ``value_loss``,
    ``entropy``) and the policy loss's own statistics (``clipfrac``, ``approx_kl``, ...).
    """
    states = mb["states"]
    logp, cache = bandit.logp(params["W"], states, mb["actions"])
    # policy term: the chosen surrogate, as a loss, and its gradient wrt logp
    if cfg.objective == "clip":
        pol, dlogp, stats = clipped_policy_loss(logp, mb["logp_old"], mb["adv"], None, cfg.clip_eps)
    elif cfg.objective == "penalty":
        pol, dlogp, stats = ppo_penalty_loss(logp, mb["logp_old"], mb["adv"], None, kl_coef)
    else:
        pol, dlogp, stats = pg_loss(logp, mb["adv"])
        stats["approx_kl"] = masked_mean(kl_estimate(mb["logp_old"], logp, kind="k3"), None)
    dW = bandit.logp_backward(dlogp, cache)
    # entropy term: -c2 * mean H, gradient through entropy_backward
    ent, ent_cache = bandit.entropy(params["W"], states)
    dW -= cfg.ent_coef * bandit.entropy_backward(np.full_like(ent, 1.0 / len(ent)), ent_cache)
    # value term: c1 * 0.5 mean (V(s) - R)^2 on the critic's table; np.add.at sums repeated contexts
    dvalues = np.zeros_like(params["values"])
    vloss = 0.0
    if cfg.critic == "table":
        vloss, dv, _ = value_loss(params["values"][states], mb["returns"])
        np.add.at(dvalues, states, cfg.vf_coef * dv)
    loss = pol + cfg.vf_coef * vloss - cfg.ent_coef * float(ent.mean())
    stats = dict(stats)
    stats.update(policy_loss=pol, value_loss=vloss, entropy=float(ent.mean()), loss=loss)
    return loss, {"W": dW, "values": dvalues}, stats


def ppo_update(bandit: TokenBandit, params, optimizer: AdamW, batch, cfg: BanditPPOConfig,
               rng: np.random.Generator, kl_coef: float = 0.0) -> dict:
    """K epochs of shuffled minibatch steps of :func:`actor_critic_loss` on one rollout.

    Updates ``params`` in place through ``optimizer``; returns the stats averaged over steps.
    """
    n = len(batch["states"])
    sums: dict[str, float] = {}
    n_steps = 0
    for _ in range(cfg.update_epochs):
        order = rng.permutation(n)
        for start in range(0, n, cfg.minibatch_size):
            idx = order[start:start + cfg.minibatch_size]
            mb = {k: v[idx] for k, v in batch.items()}
            _, grads, stats = actor_critic_loss(bandit, params, mb, cfg, kl_coef)
            optimizer.step(grads)
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + float(v)
            n_steps += 1
    return {k: v / n_steps for k, v in sums.items()}


def ppo_train(bandit: TokenBandit, cfg: BanditPPOConfig, n_iters: int, rng: np.random.Generator,
              W0=None) -> dict:
    """Run ``n_iters`` PPO iterations (rollout -> advantages -> K epochs) on a token bandit.

    A one-token episode has no future: GAE (PPO eqs. (11)-(12)) reduces to A = delta = R - V(s),
    and the value target is R. With ``objective="penalty"`` and a ``kl_old_target``, beta follows
    the paper's adaptive rule (:class:`~minippo.rl.kl_control.PPOPaperKLController`) using the exact
    KL of each update over the batch's contexts.

    Returns a dict of (n_iters,) arrays: ``reward`` (exact J after the update), ``entropy``
    (exact, mu-weighted), ``kl`` (exact KL(pi_old || pi_new) over the batch's contexts),
    ``kl_coef`` (the beta used in the update), ``approx_kl``, ``clipfrac`` (clip only),
    ``value_loss``, ``explained_variance`` (of the rollout's values), ``explained_variance_exact``
    (that of the exact V^pi(s) on the same batch: the ceiling of any per-context critic),
    ``p_best`` (mean probability of each context's best token), and ``W`` (the final parameters).
    """
    check_range("n_iters", n_iters, 1, None, integer=True)
    W = bandit.init_params() if W0 is None else np.array(bandit._check_W(W0, "W0"), dtype=np.float64)
    params = {"W": W, "values": np.zeros(bandit.n_states)}
    optimizer = AdamW(params, lr=cfg.lr, weight_decay=0.0)
    if cfg.objective == "penalty" and cfg.kl_old_target is not None:
        controller = PPOPaperKLController(cfg.kl_old_coef, cfg.kl_old_target)
    else:
        controller = FixedKLController(cfg.kl_old_coef)
    best = bandit.rewards.argmax(axis=1)                                       # (S,)
    keys = ("reward", "entropy", "kl", "kl_coef", "approx_kl", "clipfrac", "value_loss",
            "explained_variance", "explained_variance_exact", "p_best")
    hist = {k: np.zeros(n_iters) for k in keys}
    for it in range(n_iters):
        # rollout with the current (= old) policy; logp_old is frozen from here on
        states, actions, rewards = bandit.sample(W, cfg.batch_size, rng)
        logp_old, _ = bandit.logp(W, states, actions)
        if cfg.critic == "table":
            values = params["values"][states].copy()
        elif cfg.critic == "exact":
            values = bandit.state_values(W)[states]
        else:
            values = np.zeros_like(rewards)
        adv = rewards - values                                                 # delta = R - V(s)
        returns = rewards                                                      # = adv + values
        if cfg.whiten_advantages:
            adv = masked_whiten(adv, None)
        batch = {"states": states, "actions": actions, "logp_old": logp_old, "adv": adv,
                 "returns": returns}
        W_old = W.copy()
        beta = controller.value
        stats = ppo_update(bandit, params, optimizer, batch, cfg, rng, kl_coef=beta)
        kl = bandit.kl(W_old, W, states)
        controller.update(kl)
        hist["reward"][it] = bandit.expected_reward(W)
        hist["entropy"][it] = bandit.mean_entropy(W)
        hist["kl"][it] = kl
        hist["kl_coef"][it] = beta
        hist["approx_kl"][it] = stats.get("approx_kl", 0.0)
        hist["clipfrac"][it] = stats.get("clipfrac", 0.0)
        hist["value_loss"][it] = stats["value_loss"]
        hist["explained_variance"][it] = explained_variance(values, returns, None)
        hist["explained_variance_exact"][it] = explained_variance(bandit.state_values(W_old)[states], returns, None)
        hist["p_best"][it] = float(bandit.state_probs @ bandit.probs(W)[np.arange(bandit.n_states), best])
    hist["W"] = W
    return hist
