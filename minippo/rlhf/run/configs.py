"""The configs of stage 3 as run folders store them: which class a stored dict is, and what a resume
compares.

Three configs run stage 3, one per algorithm file: :class:`~minippo.rlhf.ppo_config.PPOConfig`
(canonical PPO, :mod:`minippo.rlhf.ppo`), :class:`~minippo.rlhf.ppo_knobs.KnobsConfig` (PPO with the
knobs, :mod:`minippo.rlhf.ppo_knobs`) and :class:`~minippo.rlhf.grpo.GRPOConfig` (the critic-free
family, :mod:`minippo.rlhf.grpo`). A run folder stores ``cfg.to_dict()``; :func:`config_from_dict`
reads it back as its class, and also reads the one 57-field PPOConfig that run folders written
before issue 25 hold:

* ``log_exact_kl`` and ``dump_rollouts`` are trainer options now
  (:class:`~minippo.rlhf.run.trainer.PPOTrainer`): dropped (they never changed a result);
* ``ratio_threshold`` was 10 by default (TRL's) and is a knob now (default None: canonical PPO skips
  no minibatch), so an old run keeps it as a knob: ``KnobsConfig(ratio_threshold=10.0)``. It did
  skip minibatches at large learning rates (lessons 13-17 in quick mode), so it is not dropped; a
  request for canonical PPO on such a folder is refused, naming ``ratio_threshold``
  (``minippo ppo --ratio-threshold 10`` resumes it);
* ``advantage_estimator`` "gae": a :class:`KnobsConfig` of the old fields, or the :class:`PPOConfig`
  it equals when every knob is at canonical PPO's value; a critic-free estimator: a
  :class:`GRPOConfig`, its unused critic fields dropped; an old field the new class cannot express
  (a critic with a group estimator, a knob GRPO does not have) is a one-line ``ValueError`` naming
  it.

:func:`comparable` is what a resume or a stage reuse compares: canonical PPO as the KnobsConfig of
its values with the corrected objective's fields (:class:`~minippo.rlhf.corrected.CorrectedConfig`),
so a ``minippo ppo`` run with every knob and correction at its default resumes a canonical run
and the other way round.
"""
from __future__ import annotations

from dataclasses import fields

from minippo.rlhf.corrected import CORRECTION_FIELDS, CorrectedConfig
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.ppo_config import PPOConfig, renamed_fields
from minippo.rlhf.ppo_knobs import KnobsConfig

#: fields of the old one PPOConfig that are trainer options now (they never changed a result)
RUN_OPTIONS = ("log_exact_kl", "dump_rollouts")
#: fields of the old config that a critic-free run never read (no critic, no GAE)
UNUSED_WITHOUT_CRITIC = ("critic", "gamma", "lam", "whiten_advantages", "vf_coef", "value_clip",
                         "clip_eps_value",
                         "critic_init", "critic_bias_init", "shared_stop_gradient", "value_norm",
                         "critic_lr",
                         "ptx_batch_size")


def names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


def config_from_dict(d: dict):
    """The config a run folder stored (``cfg.to_dict()``, or the old 57-field dict: module
    docstring) as the object of its class; a ``ValueError`` naming the field it cannot read."""
    if not isinstance(d, dict):
        raise ValueError(f"`ppo_config` must be a dict of config fields, got {type(d).__name__}")
    d = renamed_fields(d)
    for cls in (PPOConfig, GRPOConfig, KnobsConfig, CorrectedConfig):
        if set(d) <= names(cls):
            return cls.from_dict(d)
    return _from_one_config(d)


def _from_one_config(d: dict):
    """The 57-field PPOConfig of a run folder written before issue 25 (module docstring)."""
    d = {k: v for k, v in d.items() if k not in RUN_OPTIONS}
    estimator = d.pop("advantage_estimator", "gae")
    if estimator == "gae":
        return simplest(KnobsConfig.from_dict(d))
    if d.get("critic", "none") != "none":
        raise ValueError(f"`critic` is {d['critic']!r} with the critic-free estimator "
                         f"{estimator!r}: the critic-free "
                         "family (GRPOConfig) trains no critic; start this run again with `minippo "
                         "grpo`")
    knob_defaults = KnobsConfig().to_dict()
    for k, v in d.items():
        read = k in names(GRPOConfig) or k in UNUSED_WITHOUT_CRITIC   # kept, or never read before
        if not read and v != knob_defaults.get(k, v):
            # (an old group run's ratio_threshold 10, the old default, is refused too: GRPOConfig
            # has none)
            raise ValueError(f"`{k}` is {v!r}: the critic-free family (GRPOConfig) has no such "
                             "option; start this "
                             "run again with `minippo grpo`")
    return GRPOConfig.from_dict({**{k: v for k, v in d.items() if k in names(GRPOConfig)},
                                 "advantage_estimator": estimator})


def simplest(cfg: KnobsConfig):
    """``cfg`` as a :class:`PPOConfig` when every knob is at canonical PPO's value, else ``cfg``."""
    defaults, values = KnobsConfig().to_dict(), cfg.to_dict()
    if all(values[k] == defaults[k] for k in names(KnobsConfig) - names(PPOConfig)):
        return PPOConfig.from_dict({k: values[k] for k in names(PPOConfig)})
    return cfg


def comparable(cfg) -> dict:
    """The dict a resume or a stage reuse compares: ``cfg.to_dict()``; for canonical PPO, the knobs
    and the corrected objective, the KnobsConfig of the PPO fields plus the correction's fields
    (:data:`~minippo.rlhf.corrected.CORRECTION_FIELDS`, at their defaults when ``cfg`` has none),
    so a run with every knob or correction field at its default resumes a canonical run and the
    other way round, and a run made with another correction is refused naming those fields."""
    if isinstance(cfg, GRPOConfig):
        return cfg.to_dict()
    d = cfg.to_dict()
    ppo = {k: v for k, v in d.items() if k not in CORRECTION_FIELDS}
    knobs = ppo if isinstance(cfg, KnobsConfig) else KnobsConfig.from_dict(ppo).to_dict()
    defaults = CorrectedConfig().to_dict()
    return {**knobs, **{k: d.get(k, defaults[k]) for k in CORRECTION_FIELDS}}
