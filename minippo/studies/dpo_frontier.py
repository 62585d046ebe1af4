"""DPO against PPO on the reward-KL frontier (Rafailov et al. 2023, arXiv:2305.18290, Figure 2 left): lesson 21.

Legend: P frontier points (checkpoints), S seeds, G common KL values, R response rows, N pairs.

The paper's experiment in miniature: the SFT policy, preference pairs of its samples labelled by a known
"human" (here :mod:`minippo.rlhf.data.gold`), and three ways to use them, each swept over its KL knob:

- DPO on the pairs (a sweep of beta);
- PPO against the reward model trained on the same pairs (a sweep of the adaptive controller's KL target);
- PPO against the gold score itself (:class:`GoldRewardModel`, the paper's "PPO-GT": no reward-model error).

Every checkpoint is judged alike (``Study.evaluate``: the same prompts, the same sampling seed): the mean
gold score of fresh samples against the EXACT KL(pi || pi_ref) per response (summed over the response's
positions, each position's KL enumerated over the vocabulary: ``kl_exact_from_logits``). This module holds:

- :class:`GoldRewardModel`: the gold score behind a reward model's ``.score(sequences, attn_mask)``,
  normalised like the reward model (mean 0, std 1 on SFT samples) so one KL target means the same for both;
- :class:`DPOCheckpoints`: the ``callback(trainer, record)`` of a DPO run that judges the policy every few
  steps (:class:`minippo.studies.overoptimization.KLCheckpoints` does it for PPO);
- :func:`pareto_front` and :func:`front_at`: a method's frontier, the best gold it reached at a KL of at most
  x (through the checkpoints no other checkpoint beats with less KL, linearly interpolated between them, flat
  after the last one up to the largest KL any checkpoint reached);
- :func:`compare_at`: two methods' frontiers at one KL value, seed by seed: the difference of their means
  with its seed noise, and whether their seed ranges overlap;
- :func:`implicit_reward_report`: DPO's implicit reward beta log(pi / pi_ref) as a reward model (held-out
  accuracy, correlation with gold) beside the trained reward model;
- :func:`logp_shift`: how the log-probabilities of chosen and rejected responses moved (DPO's known failure:
  both fall).
"""
from __future__ import annotations

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import check_float_array, check_range
from minippo.rlhf.data.gold import gold_scores
from minippo.rlhf.data.preferences import PreferencePairs, gold_order_accuracy, pairwise_accuracy, pearson
from minippo.rlhf.dpo import evaluate_pairs
from minippo.studies.overoptimization import KLCheckpoints
from minippo.studies.sweep_stats import pooled_seed_std, seed_compare


# ----------------------------------------------------------------------------------------------
# the gold score as a reward model (PPO-GT)
# ----------------------------------------------------------------------------------------------

class GoldRewardModel:
    """The simulated human behind the reward model's interface: ``score = gain * gold(text) + bias``.

    ``.score(sequences, attn_mask)`` decodes each row with ``tokenizer`` (special tokens and padding dropped,
    the same text ``gold/score`` judges) and scores it with :func:`minippo.rlhf.data.gold.gold_scores`.
    :meth:`normalize` sets gain and bias as :meth:`minippo.rlhf.reward_model.RewardModel.normalize` does (mean 0,
    std 1 on samples of the reference policy), so a KL target trades off the same units of reward.
    There is no network behind it: a PPO critic cannot start from it (``critic_init="reward_model"``).
    """

    def __init__(self, tokenizer, gain: float = 1.0, bias: float = 0.0):
        check_range("gain", gain, 0, None, lo_open=True)
        check_range("bias", bias)
        self.tokenizer, self.gain, self.bias = tokenizer, float(gain), float(bias)

    def raw_score(self, sequences, attn_mask=None) -> np.ndarray:
        """(B,) float64 gold scores of the decoded rows (``attn_mask`` is not needed: padding decodes to nothing)."""
        seqs = np.asarray(sequences)
        if seqs.ndim != 2:
            raise ValueError(f"`sequences` must be 2-D (B, T), got shape {seqs.shape}")
        return gold_scores(self.tokenizer.decode_batch(seqs))

    def score(self, sequences, attn_mask=None) -> np.ndarray:
        """(B,) the normalised gold score, what PPO-GT maximises."""
        return self.gain * self.raw_score(sequences, attn_mask) + self.bias

    def normalize(self, sequences, attn_mask=None) -> tuple[float, float]:
        """gain = 1 / std, bias = -mean / std of the raw scores of these (reference-policy) samples."""
        raw = self.raw_score(sequences, attn_mask)
        std = float(raw.std())
        if raw.size < 2 or not std > 0:
            raise ValueError("`sequences` must hold at least two samples with different gold scores to normalise")
        self.gain, self.bias = 1.0 / std, -float(raw.mean()) / std
        return self.gain, self.bias


# ----------------------------------------------------------------------------------------------
# following a DPO run: (exact KL, gold) at checkpoints
# ----------------------------------------------------------------------------------------------

class DPOCheckpoints(KLCheckpoints):
    """``callback(trainer, record)`` for :meth:`minippo.rlhf.run.dpo_trainer.DPOTrainer.train`: the policy judged
    every ``every`` steps (and after the last) on the study's prompts, exactly as ``KLCheckpoints`` judges a PPO
    actor (``points``: iteration = steps done, kl = exact KL per response, gold, rm, ...; point 0 = the SFT
    policy)."""

    def __call__(self, trainer, record) -> None:
        done = int(record["step"]) + 1
        if done % self.every == 0 or done == trainer.cfg.steps:
            self.points.append(self._point(done, trainer.policy))


# ----------------------------------------------------------------------------------------------
# frontiers: the best gold at each KL, and two methods compared at one KL
# ----------------------------------------------------------------------------------------------

def pareto_front(kl, gold) -> tuple[np.ndarray, np.ndarray, float]:
    """The non-dominated points of a method: those with a higher gold than every point of smaller or equal KL.

    Parameters
    ----------
    kl, gold : (P,) exact KL (nats per response, >= 0) and mean gold score of every checkpoint

    Returns
    -------
    (kl_front, gold_front, kl_max) : (F,) sorted by KL, gold strictly increasing along it; and the largest KL of
        any checkpoint (how far the method went, whatever its gold there)
    """
    kl = check_float_array("kl", np.asarray(kl, dtype=np.float64), ndim=1)
    gold = check_float_array("gold", np.asarray(gold, dtype=np.float64), shape=kl.shape)
    if kl.size == 0:
        raise ValueError("`kl` must hold at least one point")
    order = np.lexsort((-gold, kl))                     # by KL, the best gold first among equal KLs
    keep, best = [], -np.inf
    for i in order:
        if gold[i] > best:
            keep.append(i)
            best = gold[i]
    keep = np.array(keep)
    return kl[keep], gold[keep], float(kl.max())


def front_at(front: tuple, kl_values) -> np.ndarray:
    """(G,) the frontier at ``kl_values``: linear between its points, flat after the last one (the best gold
    reached at a KL of at most x), NaN beyond the largest KL any checkpoint reached or below the first point (a
    method is never credited with a KL it did not reach)."""
    kf, gf, kl_max = front
    x = np.atleast_1d(np.asarray(kl_values, dtype=np.float64))
    out = np.interp(x, kf, gf)                          # np.interp is flat beyond the last point
    out[(x > kl_max) | (x < kf[0])] = np.nan
    return out


def compare_at(a, b) -> dict:
    """Two methods' frontier values at one KL, one value per seed each (S_a,), (S_b,): the means, the seed
    ranges, whether the ranges overlap, and ``diff`` = mean(a) - mean(b) with its standard error from the seed
    noise pooled over the two (:func:`minippo.studies.sweep_stats.compare`; ``se`` None when neither has two
    seeds), for a verdict by :mod:`minippo.studies.verdicts`. NaN seeds (KL not reached) are left out; with none
    left ``reached`` is False and the numbers are NaN."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return {"reached": False, "mean_a": float("nan"), "mean_b": float("nan"), "diff": float("nan"), "se": None}
    c = seed_compare(b, a, pooled_seed_std([a, b])[0] if max(a.size, b.size) > 1 else None)
    return {"reached": True, "mean_a": float(a.mean()), "mean_b": float(b.mean()), "diff": c["diff"], "se": c["se"],
            "overlap": bool(a.min() <= b.max() and b.min() <= a.max()),
            "range_a": (float(a.min()), float(a.max())), "range_b": (float(b.min()), float(b.max()))}


def method_fronts(runs: dict, n_seeds: int) -> dict:
    """Per method and seed, the :func:`pareto_front` of every checkpoint of every setting of that method.

    ``runs``: method -> setting -> a list over seeds of ``{"points": [{"kl", "gold", ...}, ...]}`` (the points
    of :class:`KLCheckpoints` / :class:`DPOCheckpoints`). Returns method -> list over seeds of fronts."""
    check_range("n_seeds", n_seeds, 1, None, integer=True)
    out = {}
    for method, settings in runs.items():
        out[method] = []
        for k in range(n_seeds):
            pts = [p for per_seed in settings.values() for p in per_seed[k]["points"]]
            out[method].append(pareto_front([p["kl"] for p in pts], [p["gold"] for p in pts]))
    return out


def matched_comparisons(fronts: dict, pairs, n_kl: int = 8) -> dict:
    """Each pair (a, b) of methods at ``n_kl`` KL values up to the largest KL both reached in every seed:
    ``{(a, b): {"kl": (G,), "a": (S, G), "b": (S, G), "cmp": [compare_at at each KL value]}}``."""
    check_range("n_kl", n_kl, 1, None, integer=True)
    out = {}
    for a, b in pairs:
        reach = min(f[2] for m in (a, b) for f in fronts[m])                   # largest KL both reached, every seed
        grid = np.linspace(reach / n_kl, reach, n_kl)                          # (G,)
        va = np.array([front_at(f, grid) for f in fronts[a]])                  # (S, G)
        vb = np.array([front_at(f, grid) for f in fronts[b]])
        out[(a, b)] = {"kl": grid, "a": va, "b": vb, "cmp": [compare_at(va[:, g], vb[:, g]) for g in range(n_kl)]}
    return out


# ----------------------------------------------------------------------------------------------
# DPO's implicit reward as a reward model; where DPO moved the probability
# ----------------------------------------------------------------------------------------------

def centered_by_prompt(x, group) -> np.ndarray:
    """(R,) ``x`` minus the mean of its prompt's responses: the part of a reward that compares responses to
    one prompt (DPO's implicit reward is only defined up to beta log Z(x), a constant per prompt)."""
    x = np.asarray(x, dtype=np.float64)
    group = np.asarray(group)
    sums = np.bincount(group, weights=x)
    counts = np.bincount(group)
    return x - (sums / np.maximum(counts, 1))[group]


def implicit_reward_report(policy, ref, reward_model, pairs: PreferencePairs, cfg) -> dict:
    """DPO's implicit reward r = beta (log pi(y|x) - log pi_ref(y|x)) and the reward model's raw score on the
    same responses: accuracy against the labels and against the gold order of the pairs, and the Pearson
    correlation with the gold score of each response after subtracting each prompt's mean (the within-prompt
    comparison both rewards are trained for; ``pearson_raw``: without centring).

    Returns ``{"dpo": {...}, "rm": {...}}`` with ``accuracy``, ``gold_accuracy``, ``pearson``, ``pearson_raw``,
    and ``dpo`` also ``eval``: :func:`minippo.rlhf.dpo.evaluate_pairs` of the pairs."""
    with single_blas_thread():
        ev = evaluate_pairs(policy, ref, pairs, cfg)
        rm_raw = reward_model.raw_score(pairs.sequences, pairs.mask)                   # (R,)
    out = {}
    for name, r in (("dpo", ev["implicit_reward"]), ("rm", rm_raw)):
        rc, rr = r[pairs.chosen_idx], r[pairs.rejected_idx]
        out[name] = {"accuracy": pairwise_accuracy(rc, rr),
                     "gold_accuracy": gold_order_accuracy(rc, rr, pairs.gold_chosen, pairs.gold_rejected),
                     "pearson": pearson(centered_by_prompt(r, pairs.group),
                                        centered_by_prompt(pairs.gold, pairs.group)),
                     "pearson_raw": pearson(r, pairs.gold)}
    out["dpo"]["eval"] = ev
    return out


def logp_shift(ev: dict, pairs: PreferencePairs) -> dict:
    """How DPO moved the sequence log-probs of the pairs' responses, from an :func:`evaluate_pairs` result:
    mean change log pi - log pi_ref (nats per response) of the chosen and of the rejected responses, the
    fraction of chosen responses that became LESS likely than under the reference, and of pairs where both
    fell (DPO's known failure: only the difference h is pushed up)."""
    d = ev["logp"] - ev["ref_logp"]                                       # (R,) nats
    dc, dr = d[pairs.chosen_idx], d[pairs.rejected_idx]                   # (N,)
    return {"chosen": float(dc.mean()), "rejected": float(dr.mean()), "chosen_fell": float(np.mean(dc < 0)),
            "both_fell": float(np.mean((dc < 0) & (dr < 0))), "margin": float(np.mean(dc - dr))}
