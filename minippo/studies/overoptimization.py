"""Reward-model over-optimisation (Gao, Schulman & Hilton 2022, arXiv:2210.10760): the tools of lesson 19.

Legend: P points (checkpoints or values of n), S samples, B batch.

The setup of Gao et al. in miniature: the gold score (:mod:`minippo.rlhf.data.gold`, the simulated human)
labels preference pairs; proxy reward models of different quality are trained on them; a policy is
optimised against a proxy, by RL (PPO with weak KL control) or by best-of-n (:mod:`.best_of_n`), and
both scores are followed as the policy moves away from the initial one, measured by
d = sqrt(KL(pi || pi_init)) in nats per response. The proxy keeps rising; the gold rises, peaks, falls.

This module holds the reusable pieces:

- :func:`rm_variants`: weaker reward models trained on nested subsets of the main job's own preference
  pairs (``RMConfig.n_train``) or with smaller trunks (``init="fresh"``), cached on disk beside the
  study's stages (``<study folder>/rm_variants/rm-<hash of its RMConfig>``) so that reruns load them;
- :class:`KLCheckpoints`: a ``callback(trainer, rollout, record)`` for ``Study.run`` that judges the actor
  every few iterations on the study's fixed prompts (gold, the run's own proxy, exact KL to the
  reference); the first point is the initial policy itself (d = 0);
- :func:`fit_gold_curve`: least-squares fits of Gao et al.'s functional forms of the gold gain
  R(d) = gold(d) - gold(0)::

      best-of-n  R_bon(d) = d (alpha - beta d)          peak at d* = alpha / (2 beta)
      RL         R_RL(d)  = d (alpha - beta log d)      peak at d* = exp(alpha / beta - 1)

  both linear in (alpha, beta), so one ``lstsq`` each;
- what the policy learned to exploit (broken words, repeats, adjective chains, no period, ...) is
  read with :func:`minippo.rlhf.data.gold.gold_profile`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from minippo.checks import check_choice, check_float_array, check_range
from minippo.io import has_checkpoint
from minippo.rlhf.data.preferences import PreferencePairs
from minippo.rlhf.reward_model import RewardModel
from minippo.rlhf.rm_train import RMConfig, train_reward_model

FORMS = ("bon", "rl")


# ----------------------------------------------------------------------------------------------
# weaker proxies, trained once on the main job's pairs and cached
# ----------------------------------------------------------------------------------------------

def rm_variants(study, variants: dict[str, dict], cache_dir=None, *, log=lambda *a: None) -> dict:
    """Reward models trained like the study's one but with ``RMConfig`` overrides, on the SAME pairs.

    Parameters
    ----------
    study : :class:`minippo.studies.study.Study` (its ``folder`` holds ``sft/`` and ``rm/`` with ``pairs.npz``)
    variants : name -> RMConfig overrides, e.g. ``{"100 prompts": {"n_train": 100}, "all": {}}``; empty
        overrides mean the study's own reward model (not retrained)
    cache_dir : where trained variants are kept (default ``study.folder / "rm_variants"``); a variant
        lives in ``rm-<hash of its RMConfig>/`` (the name is only a label) and is loaded when present
    log : called with one line per variant

    Returns
    -------
    name -> ``{"model": RewardModel, "config": RMConfig, "summary": {heldout_accuracy,
    heldout_gold_accuracy, pearson, n_train (pairs), ...}, "n_params": int, "cached": bool}``
    """

    if not isinstance(variants, dict) or not variants:
        raise ValueError("`variants` must be a non-empty dict name -> RMConfig overrides")
    folder = Path(study.folder)
    cache = Path(cache_dir) if cache_dir is not None else folder / "rm_variants"
    base = json.loads((folder / "rm" / "config.json").read_text())
    pairs, out = None, {}
    for name, overrides in variants.items():
        if not isinstance(overrides, dict):
            raise ValueError(f"`variants[{name!r}]` must be a dict of RMConfig overrides, "
                             f"got {type(overrides).__name__}")
        cfg = RMConfig.from_dict({**base, **overrides})
        if not overrides:                                   # the study's own reward model
            target, cached = folder / "rm", True
        else:
            key = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
            target = cache / f"rm-{key}"
            cached = has_checkpoint(target / "model")
            if not cached:
                if pairs is None:
                    pairs = PreferencePairs.load(folder / "rm" / "pairs.npz")
                # train into a private folder, then rename: a concurrent run never sees half a model
                tmp = cache / f".rm-{key}.tmp{os.getpid()}"
                train_reward_model(cfg, folder / "sft", tmp, progress=False, pairs=pairs)
                try:
                    os.rename(tmp, target)
                except OSError:                             # another process finished first: keep theirs
                    shutil.rmtree(tmp, ignore_errors=True)
        model, state = RewardModel.load(target / "model")
        summary = dict(state.get("rm_summary", {}))
        out[name] = {"model": model, "config": cfg, "summary": summary, "n_params": model.model.num_params(),
                     "cached": cached, "folder": str(target)}
        log(f"  RM {name:<14s} {'loaded' if cached else 'trained'}: {summary.get('n_train', 0):6d} training pairs, "
            f"held-out accuracy {summary.get('heldout_accuracy', float('nan')):.3f}, "
            f"score-gold Pearson {summary.get('pearson', float('nan')):.3f}")
    return out


# ----------------------------------------------------------------------------------------------
# following an RL run: (sqrt KL, proxy, gold) at checkpoints
# ----------------------------------------------------------------------------------------------

class KLCheckpoints:
    """``callback(trainer, rollout, record)`` judging the actor every ``every`` iterations (and after the
    last one) with ``study.evaluate(actor, reward_model=reward_model)``: the same prompts and the same
    sampling seed at every checkpoint (common random numbers: the differences between points are the
    policy's, not the sampler's).

    ``points`` is a list of dicts: ``iteration`` (iterations done; 0 = the initial policy), ``kl``
    (exact KL to the reference, nats per response, mean over prompts), ``sqrt_kl``, ``kl_k1``, ``rm``
    and ``gold`` (means), ``rm_sem`` and ``gold_sem`` (standard errors over prompts), ``length``,
    ``ended_frac``, and ``eval`` (the whole :func:`evaluate_policy` dict: texts, per-sample scores).
    """

    def __init__(self, study, reward_model=None, every: int = 1, sample_seed: int = 2):
        check_range("every", every, 1, None, integer=True)
        self.study, self.reward_model, self.every, self.sample_seed = study, reward_model, int(every), sample_seed
        self.points = [self._point(0, study.sft)]

    def _point(self, iteration: int, policy) -> dict:
        ev = self.study.evaluate(policy, reward_model=self.reward_model, sample_seed=self.sample_seed)
        n = len(ev["gold"])
        sem = (lambda x: float(np.std(x, ddof=1) / np.sqrt(n))) if n > 1 else (lambda x: 0.0)
        kl = max(ev["kl_exact_mean"], 0.0)
        return {"iteration": iteration, "kl": kl, "sqrt_kl": float(np.sqrt(kl)), "kl_k1": ev["kl_mean"],
                "rm": ev["rm_mean"], "gold": ev["gold_mean"], "rm_sem": sem(ev["rm"]), "gold_sem": sem(ev["gold"]),
                "length": ev["length_mean"], "ended_frac": ev["ended_frac"], "eval": ev}

    def __call__(self, trainer, rollout, record) -> None:
        done = int(record["iteration"]) + 1
        if done % self.every == 0 or done == trainer.cfg.iterations:
            self.points.append(self._point(done, trainer.actor))

    def curve(self, key: str) -> np.ndarray:
        """(P,) the value of ``key`` at every checkpoint, in order."""
        return np.array([p[key] for p in self.points], dtype=np.float64)


def gold_peak(points: list[dict]) -> int:
    """Index of the point with the highest mean gold score (the first one on ties)."""
    if not points:
        raise ValueError("`points` must hold at least one point")
    return int(np.argmax([p["gold"] for p in points]))


# ----------------------------------------------------------------------------------------------
# Gao et al.'s functional forms
# ----------------------------------------------------------------------------------------------

def _features(d: np.ndarray, form: str) -> np.ndarray:
    """(P, 2) columns multiplying (alpha, beta): [d, -d^2] (bon) or [d, -d log d] (rl; 0 at d = 0)."""
    if form == "bon":
        return np.stack([d, -d * d], axis=1)
    safe = np.where(d > 0, d, 1.0)
    return np.stack([d, -np.where(d > 0, d * np.log(safe), 0.0)], axis=1)


def fit_gold_curve(d, gain, form: str) -> dict:
    """Least-squares fit of Gao et al.'s R(d) to measured gold gains (no intercept: R(0) = 0).

    Parameters
    ----------
    d : (P,) sqrt(KL) of each point, >= 0
    gain : (P,) gold(d) - gold(0) at each point
    form : ``"bon"``: R = d (alpha - beta d); ``"rl"``: R = d (alpha - beta log d)

    Returns
    -------
    dict ``alpha``, ``beta``, ``d_peak`` (argmax of the fitted R; inf when beta <= 0: no turn-over),
    ``gain_peak`` (R at d_peak), ``rmse`` (of the fit), ``form``.
    """
    check_choice("form", form, FORMS)
    d = check_float_array("d", np.asarray(d, dtype=np.float64), ndim=1)
    gain = check_float_array("gain", np.asarray(gain, dtype=np.float64), shape=d.shape)
    if np.any(d < 0):
        raise ValueError("`d` must be >= 0 (it is a square root of a KL)")
    X = _features(d, form)                                                      # (P, 2)
    if np.linalg.matrix_rank(X) < 2:
        raise ValueError("`d` must hold at least two distinct values > 0 to fit two coefficients")
    (alpha, beta), *_ = np.linalg.lstsq(X, gain, rcond=None)
    if beta <= 0:
        d_peak = float("inf")
    elif form == "bon":
        d_peak = alpha / (2 * beta)                        # dR/dd = alpha - 2 beta d = 0
    else:
        d_peak = float(np.exp(alpha / beta - 1.0))         # dR/dd = alpha - beta log d - beta = 0
    d_peak = max(float(d_peak), 0.0)
    out = {"alpha": float(alpha), "beta": float(beta), "d_peak": d_peak, "form": form,
           "rmse": float(np.sqrt(np.mean((X @ np.array([alpha, beta]) - gain) ** 2)))}
    out["gain_peak"] = float(predict_gold_gain(out, d_peak)[0]) if np.isfinite(d_peak) else float("inf")
    return out


def predict_gold_gain(fit: dict, d) -> np.ndarray:
    """R(d) of a :func:`fit_gold_curve` result at ``d`` (array or scalar, >= 0)."""
    d = np.atleast_1d(np.asarray(d, dtype=np.float64))
    return _features(d, fit["form"]) @ np.array([fit["alpha"], fit["beta"]])
