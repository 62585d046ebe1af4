"""The ``minippo ppo`` command: stage 3 from an SFT folder and a reward-model folder; every field of
PPOConfig and of the knobs (KnobsConfig) is a flag (``--update-epochs 4``, ``--kl-old-target none``). With
no knob's flag the run is canonical PPO (``PPOConfig``), with one it is PPO with the knobs; the renamed
fields' old flags and ``--advantage-estimator`` (the critic-free family is ``minippo grpo`` now) still work
for one release and print what they are called now."""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields
from pathlib import Path

from minippo.checks import UsageError
from minippo.io import read_metrics
from minippo.rlhf.grpo import ESTIMATORS, GRPOConfig
from minippo.rlhf.ppo_config import RENAMED, PPOConfig, field_docs
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.rlhf.run.configs import RUN_OPTIONS, UNUSED_WITHOUT_CRITIC
from minippo.rlhf.run.trainer import run_ppo


def parse_value(text: str, default):
    """A CLI string as the type of the field's default ("none" -> None for optional fields)."""
    if text.lower() == "none":
        return None
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(default, tuple):
        return tuple(float(x) for x in text.split(","))
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float) or default is None:
        return float(text)
    return text


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_flags(parser, cls=PPOConfig, renamed: dict | None = None) -> None:
    """One ``--field-name X`` flag per dataclass field (defaults in brackets), plus the old spellings of
    ``renamed`` fields as hidden aliases (``args.<old>``)."""

    docs = field_docs(cls)
    group = parser.add_argument_group(f"{cls.__name__} fields (defaults in brackets)")
    for f in fields(cls):
        default = cls.__dataclass_fields__[f.name].default
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        group.add_argument(flag(f.name), default=None, metavar="X",
                           help=f"{docs.get(f.name, '')} [{shown}]".replace("%", "%%"))
    for old in renamed or {}:
        group.add_argument(flag(old), dest="deprecated_" + old, default=None, help=argparse.SUPPRESS)


def config_from_args(args, base, renamed: dict | None = None):
    """``base`` with the fields given as flags replaced; an old flag prints its new name on stderr."""
    apply_renamed(args, renamed)
    overrides = {}
    for f in fields(type(base)):
        text = getattr(args, f.name)
        if text is not None:
            try:
                overrides[f.name] = parse_value(text, getattr(base, f.name))
            except ValueError as exc:
                raise UsageError(f"{flag(f.name)} {text}: {exc}") from None
    return base.replace(**overrides)     # a value out of range: a ValueError naming the field (the flag)


def apply_renamed(args, renamed: dict | None) -> None:
    """Move the value of every old flag of ``renamed`` given to its new field, printing the new name on stderr."""
    for old, new in (renamed or {}).items():
        text = getattr(args, "deprecated_" + old)
        if text is not None:
            print(f"{flag(old)} is deprecated: it is now {flag(new)}", file=sys.stderr)
            if getattr(args, new, None) is not None:
                raise UsageError(f"{flag(old)} and {flag(new)} name the same field: give {flag(new)} only")
            setattr(args, new, text)
            setattr(args, "deprecated_" + old, None)


def add_run_arguments(parser, stage: str, cls) -> None:
    """The flags every trainer's command shares: ``--out``, ``--resume``, ``--quick`` (``cls.quick()``) and
    ``--no-progress`` (the config flags follow: :func:`add_config_flags`)."""
    parser.add_argument("--out", default=None, help=f"run folder (default: runs/{stage}-<timestamp>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint (the "
                        "default: a folder holding a checkpoint made with the same flags is resumed, one made with "
                        "other flags is refused)")
    parser.add_argument("--quick", action="store_true", help=f"tiny config for CI ({cls.__name__}.quick())")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_run_options(parser) -> None:
    """``--log-exact-kl X`` and ``--dump-rollouts X`` (true / false): options of the trainer, not of the config."""
    group = parser.add_argument_group("run options (defaults in brackets)")
    group.add_argument("--log-exact-kl", default=None, metavar="X", help="also log objective/kl_exact: KL(pi || "
                       "pi_ref) from the full distributions (two more forward passes per iteration) [False]")
    group.add_argument("--dump-rollouts", default=None, metavar="X", help="write every iteration's rollout buffer "
                       "(per-token arrays) to rollouts/iter_NNNN.npz [False]")


def run_options(args) -> dict:
    """The run options given as flags: ``{"log_exact_kl": bool, ...}``."""
    out = {}
    for name in RUN_OPTIONS:
        text = getattr(args, name)
        if text is not None:
            try:
                out[name] = parse_value(text, False)
            except ValueError as exc:
                raise UsageError(f"{flag(name)} {text}: {exc}") from None
    return out


def given(args, cls) -> set[str]:
    """The fields of ``cls`` given as flags."""
    return {f.name for f in fields(cls) if getattr(args, f.name, None) is not None}


def ppo_config_from_args(args):
    """The config ``minippo ppo`` runs: canonical :class:`PPOConfig` unless a knob's flag is given
    (:class:`KnobsConfig`), or the deprecated ``--advantage-estimator`` of a critic-free estimator
    (:class:`GRPOConfig`, ``minippo grpo``)."""
    apply_renamed(args, RENAMED)
    estimator = args.advantage_estimator
    if estimator == "gae":
        print("--advantage-estimator is deprecated: GAE is PPO's estimator (drop the flag)", file=sys.stderr)
    elif estimator is not None:
        print(f"--advantage-estimator {estimator} is deprecated: the critic-free family is `minippo grpo` "
              f"(GRPOConfig) now", file=sys.stderr)
        if estimator not in ESTIMATORS:
            raise UsageError(f"--advantage-estimator {estimator}: expected one of gae, {', '.join(ESTIMATORS)}")
        if args.critic not in (None, "none"):
            raise UsageError(f"--critic {args.critic}: the critic-free family trains no critic (give --critic none "
                             "or nothing)")
        args.critic = None
        extra = sorted(given(args, KnobsConfig) - given(args, GRPOConfig) - set(UNUSED_WITHOUT_CRITIC))
        if extra:
            raise UsageError(f"{flag(extra[0])}: not an option of the critic-free family (minippo grpo)")
        base = GRPOConfig.quick(advantage_estimator=estimator) if args.quick else GRPOConfig(
            advantage_estimator=estimator)
        return config_from_args(args, base)
    cls = KnobsConfig if given(args, KnobsConfig) - given(args, PPOConfig) else PPOConfig
    return config_from_args(args, cls.quick() if args.quick else cls())


def print_summary(out: Path, trainer) -> None:
    """The first and last iteration's main metrics of the run in ``out``."""
    hist = read_metrics(out / "metrics.jsonl")
    first, last = hist[0], hist[-1]
    for key in ("objective/scores", "gold/score", "objective/kl", "response/length", "kl_coef"):
        print(f"{key:<24s} first iteration {first[key]:+8.3f}   last iteration {last[key]:+8.3f}")
    print(f"{trainer.iteration} iterations; metrics in {out / 'metrics.jsonl'}, policy in {out / 'policy'}")


def add_stage_arguments(parser, stage: str, cls) -> None:
    """What ``minippo ppo`` and ``minippo grpo`` share: ``--sft``, ``--rm``, the run arguments and options."""
    parser.add_argument("--sft", required=True, help="SFT run folder (from `minippo sft`) or its model/ folder")
    parser.add_argument("--rm", required=True, help="reward-model run folder (from `minippo rm`) or its model/ folder")
    add_run_arguments(parser, stage, cls)
    add_run_options(parser)


def add_arguments(parser) -> None:
    add_stage_arguments(parser, "ppo", PPOConfig)
    add_config_flags(parser, KnobsConfig, RENAMED)
    parser.add_argument("--advantage-estimator", default=None, metavar="X", help="deprecated: a critic-free "
                        "estimator (grpo, dr_grpo, rloo, reinforce) runs `minippo grpo`; gae is PPO's")


def cli_main(args) -> int:
    cfg = ppo_config_from_args(args)
    out = Path(args.out) if args.out else Path("runs") / time.strftime("ppo-%Y%m%d-%H%M%S")
    print(f"PPO from {args.sft} (policy, reference) and {args.rm} (reward model, critic) -> {out}")
    trainer = run_ppo(cfg, args.sft, args.rm, out, resume=True, progress=not args.no_progress, **run_options(args))
    print_summary(out, trainer)
    return 0
