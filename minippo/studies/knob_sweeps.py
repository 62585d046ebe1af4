"""The knobs lesson 17 moves at ``--full`` beyond its grid, and the per-run measures they need.

Legend: S seeds, I iterations, B responses, Tn response columns.

Each variant below changes one thing of a base run (``base``: iterations, batch_size, minibatch_size, lr):

    lr / 4, lr x 4          the learning rate (the knob PPO is said to be most sensitive to)
    c1 / 4, c1 x 4          vf_coef, the value-loss weight of PPO eq. (9)
    gamma 0.9               a discount < 1 (the main job: gamma = 1)
    P prompts x n           the batch as prompts x responses per prompt (KnobsConfig.samples_per_prompt),
                            minibatches of batch / 4 (4 Adam steps per epoch, as the base run)
    critic from SFT         critic_init="sft": a critic that does not start as the reward model
    whitened rewards        KnobsConfig.whiten_rewards (the per-token rewards whitened, mean kept)
    score only              no KL penalty (a fixed beta of 0): the terminal score is the only reward

:func:`advantage_record`, a ``Study.sweep`` callback, adds to every iteration's record the variance of the
raw GAE advantages (``returns - values``, before PPO whitens them) and the correlation of the first response
token's raw advantage with the response's score. :func:`oscillation` and :func:`iterations_to` read the
lambda runs' reward curves: how much the reward jumps from one iteration to the next, and how soon it gets
to a level.
"""
from __future__ import annotations

import hashlib

import numpy as np

from minippo.checks import check_range
from minippo.rl.masked import masked_var
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.studies.sweep_stats import seed_curves

LR_FACTOR = 4.0          # lr and c1 are moved by this factor down and up
GAMMA = 0.9              # the discount < 1 compared with gamma = 1
GROUP = 4                # responses per prompt of the "prompts x responses" variants


def extra_variants(base: dict, vf_coef: float) -> dict[str, dict]:
    """Name -> config overrides on top of ``base`` (``"base"`` has none); ``vf_coef`` is the base's c1."""
    lr, batch, f = base["lr"], base["batch_size"], LR_FACTOR
    return {
        "base": {},
        f"lr / {f:g}": {"lr": lr / f}, f"lr x {f:g}": {"lr": lr * f},
        f"c1 / {f:g}": {"vf_coef": vf_coef / f}, f"c1 x {f:g}": {"vf_coef": vf_coef * f},
        f"gamma {GAMMA:g}": {"gamma": GAMMA},
        f"{batch // GROUP} x {GROUP}": {"config": KnobsConfig, "samples_per_prompt": GROUP},
        f"{2 * batch // GROUP} x {GROUP}": {"config": KnobsConfig, "samples_per_prompt": GROUP,
                                            "batch_size": 2 * batch, "minibatch_size": 2 * batch // 4},
        "critic from SFT": {"critic_init": "sft"},
        "whitened rewards": {"config": KnobsConfig, "whiten_rewards": True},
        "score only": {"kl_ref_controller": "fixed", "kl_ref_coef": 0.0},
    }


def advantage_record(trainer, ro, record: dict) -> None:
    """``Study.sweep`` callback: ``adv/raw_var``, the variance over valid tokens of the GAE advantages before
    whitening (``returns - values``, (B, Tn)), and ``adv/first_score_corr``, the correlation over the batch of
    the first response token's raw advantage with the response's score (the score reaching token 1)."""
    mask = ro.response_mask
    raw = (ro.returns - ro.values) * mask
    record["adv/raw_var"] = masked_var(raw, mask)
    first, scores = raw[:, 0].astype(np.float64), np.asarray(ro.scores, dtype=np.float64)
    ok = first.std() > 0 and scores.std() > 0
    record["adv/first_score_corr"] = float(np.corrcoef(first, scores)[0, 1]) if ok else 0.0


def oscillation(curves) -> np.ndarray:
    """(S,) for (S, I) curves: the standard deviation (ddof 1) of the change from one iteration to the next,
    ``std_t(c[t+1] - c[t])``: how much the curve jumps; ``ValueError`` with fewer than 3 iterations."""
    c = np.asarray(curves, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] < 3:
        raise ValueError(f"`curves` must be (seeds, iterations >= 3), got shape {c.shape}")
    return np.diff(c, axis=1).std(axis=1, ddof=1)


def iterations_to(curves, level: float, window: int = 3) -> np.ndarray:
    """(S,) for (S, I) curves: the first iteration (1-based, at the window's end) at which the mean of the
    last ``window`` iterations reaches ``level``; ``I + 1`` when it never does (a censored count)."""
    c = np.asarray(curves, dtype=np.float64)
    check_range("window", window, 1, None, integer=True)
    if c.ndim != 2 or c.shape[1] < window:
        raise ValueError(f"`curves` must be (seeds, iterations >= window = {window}), got shape {c.shape}")
    smooth = np.stack([np.convolve(row, np.ones(window) / window, mode="valid") for row in c])
    hit = smooth >= level
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + window, c.shape[1] + 1).astype(np.float64)


def params_digest(model) -> str:
    """sha256 of a model's parameter arrays (names sorted): equal digests = bitwise-equal parameters."""
    h = hashlib.sha256()
    for name in sorted(model.params):
        h.update(name.encode())
        h.update(np.ascontiguousarray(model.params[name]).tobytes())
    return h.hexdigest()


EVAL_KEYS = ("gold_mean", "kl_mean", "length_mean")       # the held-out evaluation of the final policy


def run_extras(study, base: dict, seeds) -> dict:
    """Train :func:`extra_variants` of ``base`` for ``seeds`` with :func:`advantage_record` and summarise each
    variant per seed: the evaluation (:data:`EVAL_KEYS`), ``adv_var_first`` (log of the raw advantages'
    variance at iteration 1), ``adv_var`` (its log averaged over the run's iterations), ``ev_first`` (the
    critic's explained variance at iteration 1), ``ev`` (averaged over the run), ``first_corr`` (the first
    token's correlation with the score, averaged over the run) and ``cpu`` (s per seed). ``rm_unchanged``: the reward model's parameters are
    bitwise the same before and after every run (nothing differentiates the reward)."""
    rm_before = params_digest(study.reward_model)
    variants = extra_variants(base, study.config().vf_coef)
    sweep = study.sweep(variants, seeds=seeds, base=base, callback=advantage_record)
    table = {}
    for name, v in sweep.items():
        log_var = np.log(seed_curves(v, "adv/raw_var"))                          # (S, I)
        row = {k: np.array([float(e[k]) for e in v["eval"]]) for k in EVAL_KEYS}
        row.update(adv_var_first=log_var[:, 0], adv_var=log_var.mean(axis=1),
                   ev_first=seed_curves(v, "val/explained_variance")[:, 0],
                   ev=seed_curves(v, "val/explained_variance").mean(axis=1),
                   first_corr=seed_curves(v, "adv/first_score_corr").mean(axis=1),
                   cpu=float(np.mean([t["cpu"] for t in v["time"]])))
        table[name] = row
    return {"table": table, "rm_unchanged": params_digest(study.reward_model) == rm_before,
            "vf_coef": study.config().vf_coef}


def lambda_dynamics(curves: dict[str, np.ndarray], base: str) -> dict:
    """Oscillation and speed of the reward curves (label -> (S, I) per-iteration mean score of the batch) of a
    lambda sweep. ``level``: half-way from the first iteration's mean over all curves to the mean of the
    ``base`` curves' last quarter; ``curves`` as given; per label and seed: ``osc`` (:func:`oscillation`) and ``speed``
    (:func:`iterations_to` that level)."""
    start = float(np.mean([c[:, 0].mean() for c in curves.values()]))
    b = curves[base]
    end = float(b[:, -max(1, b.shape[1] // 4):].mean())
    level = start + 0.5 * (end - start)
    return {"level": level, "start": start, "end": end, "curves": curves,
            "osc": {k: oscillation(c) for k, c in curves.items()},
            "speed": {k: iterations_to(c, level) for k, c in curves.items()}}
