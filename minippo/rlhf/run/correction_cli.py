"""The corrected objective as one option group of the commands that train canonical PPO
(``minippo rlvr``, ``minippo rlhf``, ``minippo ppo``)::

    --logits-precision bfloat16 --stale-k 2 \
    --correction tis --correction-level token --correction-cap 2

The flags are the fields :class:`~minippo.rlhf.corrected.CorrectedConfig` adds to canonical PPO's
config (:data:`~minippo.rlhf.corrected.CORRECTION_FIELDS`), built by :mod:`minippo.flags` (typed,
validated by the class). Any of them given makes the run's config a ``CorrectedConfig`` of the same
PPO fields, which the run folder stores; with ``--correction none`` and no mismatch it computes
canonical PPO's bits. A config of another algorithm (the knobs, the critic-free family, DPO) does
not take them: a one-line :class:`~minippo.checks.UsageError`, exit status 2.
"""
from __future__ import annotations

from minippo.checks import UsageError
from minippo.flags import add_config_flags, flag, replace_fields
from minippo.rlhf.corrected import CORRECTION_FIELDS, CorrectedConfig
from minippo.rlhf.ppo_config import PPOConfig

TITLE = ("the sampler's mismatch and its correction, canonical PPO only (CorrectedConfig fields; "
         "TRL vllm_importance_sampling_*, verl rollout_corr: docs/to_trl.md)")


def add_correction_flags(parser) -> None:
    """``--logits-precision``, ``--stale-k``, ``--correction``, ``--correction-level``,
    ``--correction-cap``, ``--correction-cap-low``, in one group."""
    add_config_flags(parser, CorrectedConfig, only=CORRECTION_FIELDS, title=TITLE)


def given_correction(args) -> dict:
    """Field -> value of the correction flags given (none given: {})."""
    return {n: getattr(args, n) for n in CORRECTION_FIELDS if getattr(args, n, None) is not None}


def with_correction(args, cfg, run: str):
    """``cfg`` made a :class:`CorrectedConfig` with the correction flags given (``cfg`` itself when
    none is given); ``run`` names what ``cfg`` trains (``--method grpo``) in the refusal when it is
    not canonical PPO's config (or already a CorrectedConfig)."""
    given = given_correction(args)
    if not given:
        return cfg
    if not (type(cfg) is PPOConfig or isinstance(cfg, CorrectedConfig)):
        raise UsageError(f"{flag(next(iter(given)))}: the off-policy correction is an option of "
                         f"canonical PPO (CorrectedConfig); {run} ({type(cfg).__name__}) does not "
                         "take it")
    return replace_fields(CorrectedConfig.from_dict(cfg.to_dict()), given)
