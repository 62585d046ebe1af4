"""The ``minippo ppo`` command: stage 3 from an SFT folder and a reward-model folder; every PPOConfig field
is a flag (``--update-epochs 4``, ``--kl-old-target none``: :mod:`minippo.flags`, grouped by PPOConfig's
sections); the renamed fields' old flags still work for one release and print what they are called now."""
from __future__ import annotations

import time
from pathlib import Path

from minippo.flags import add_config_flags, config_from_args
from minippo.io import read_metrics
from minippo.rlhf.checkpoint import resolve_model_dir
from minippo.rlhf.ppo_config import RENAMED, PPOConfig
from minippo.rlhf.run.trainer import run_ppo


def add_run_arguments(parser, stage: str, cls) -> None:
    """The flags every trainer's command shares: ``--out``, ``--resume``, ``--quick`` (``cls.quick()``) and
    ``--no-progress`` (the config flags follow: :func:`minippo.flags.add_config_flags`)."""
    parser.add_argument("--out", default=None, metavar="DIR", help=f"run folder (default: runs/{stage}-<timestamp>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint (the "
                        "default: a folder holding a checkpoint made with the same flags is resumed, one made with "
                        "other flags is refused)")
    parser.add_argument("--quick", action="store_true", help=f"tiny config for CI ({cls.__name__}.quick())")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_arguments(parser) -> None:
    parser.add_argument("--sft", required=True, metavar="DIR",
                        help="SFT run folder (from `minippo sft`) or its model/ folder")
    parser.add_argument("--rm", required=True, metavar="DIR",
                        help="reward-model run folder (from `minippo rm`) or its model/ folder")
    add_run_arguments(parser, "ppo", PPOConfig)
    add_config_flags(parser, PPOConfig, renamed=RENAMED)


def cli_main(args) -> int:
    cfg = config_from_args(args, PPOConfig.quick() if args.quick else PPOConfig(), RENAMED)
    resolve_model_dir(args.sft), resolve_model_dir(args.rm)         # a wrong path: one line, before the banner
    out = Path(args.out) if args.out else Path("runs") / time.strftime("ppo-%Y%m%d-%H%M%S")
    print(f"PPO from {args.sft} (policy, reference) and {args.rm} (reward model, critic) -> {out}")
    trainer = run_ppo(cfg, args.sft, args.rm, out, resume=True, progress=not args.no_progress)
    hist = read_metrics(out / "metrics.jsonl")
    first, last = hist[0], hist[-1]
    for key in ("objective/scores", "gold/score", "objective/kl", "response/length", "kl_coef"):
        print(f"{key:<24s} first iteration {first[key]:+8.3f}   last iteration {last[key]:+8.3f}")
    print(f"{trainer.iteration} iterations; metrics in {out / 'metrics.jsonl'}, policy in {out / 'policy'}")
    return 0
