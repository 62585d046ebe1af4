"""The ``minippo ppo`` command: stage 3 from an SFT folder and a reward-model folder; every PPOConfig field
is a flag (``--update-epochs 4``, ``--kl-old-target none``); the renamed fields' old flags still work for
one release and print what they are called now."""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields
from pathlib import Path

from minippo.checks import UsageError
from minippo.io import read_metrics
from minippo.rlhf.ppo_config import RENAMED, PPOConfig, field_docs
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
    overrides = {}
    for old, new in (renamed or {}).items():
        text = getattr(args, "deprecated_" + old)
        if text is not None:
            print(f"{flag(old)} is deprecated: it is now {flag(new)}", file=sys.stderr)
            if getattr(args, new) is not None:
                raise UsageError(f"{flag(old)} and {flag(new)} name the same field: give {flag(new)} only")
            setattr(args, new, text)
    for f in fields(type(base)):
        text = getattr(args, f.name)
        if text is not None:
            try:
                overrides[f.name] = parse_value(text, getattr(base, f.name))
            except ValueError as exc:
                raise UsageError(f"{flag(f.name)} {text}: {exc}") from None
    return base.replace(**overrides)     # a value out of range: a ValueError naming the field (the flag)


def add_run_arguments(parser, stage: str, cls) -> None:
    """The flags every trainer's command shares: ``--out``, ``--resume``, ``--quick`` (``cls.quick()``) and
    ``--no-progress`` (the config flags follow: :func:`add_config_flags`)."""
    parser.add_argument("--out", default=None, help=f"run folder (default: runs/{stage}-<timestamp>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint (the "
                        "default: a folder holding a checkpoint made with the same flags is resumed, one made with "
                        "other flags is refused)")
    parser.add_argument("--quick", action="store_true", help=f"tiny config for CI ({cls.__name__}.quick())")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_arguments(parser) -> None:
    parser.add_argument("--sft", required=True, help="SFT run folder (from `minippo sft`) or its model/ folder")
    parser.add_argument("--rm", required=True, help="reward-model run folder (from `minippo rm`) or its model/ folder")
    add_run_arguments(parser, "ppo", PPOConfig)
    add_config_flags(parser, PPOConfig, RENAMED)


def cli_main(args) -> int:
    cfg = config_from_args(args, PPOConfig.quick() if args.quick else PPOConfig(), RENAMED)
    out = Path(args.out) if args.out else Path("runs") / time.strftime("ppo-%Y%m%d-%H%M%S")
    print(f"PPO from {args.sft} (policy, reference) and {args.rm} (reward model, critic) -> {out}")
    trainer = run_ppo(cfg, args.sft, args.rm, out, resume=True, progress=not args.no_progress)
    hist = read_metrics(out / "metrics.jsonl")
    first, last = hist[0], hist[-1]
    for key in ("objective/scores", "gold/score", "objective/kl", "response/length", "kl_coef"):
        print(f"{key:<24s} first iteration {first[key]:+8.3f}   last iteration {last[key]:+8.3f}")
    print(f"{trainer.iteration} iterations; metrics in {out / 'metrics.jsonl'}, policy in {out / 'policy'}")
    return 0
