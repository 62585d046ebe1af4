"""The ``minippo grpo`` command: the critic-free family (:mod:`minippo.rlhf.grpo`: GRPO, Dr. GRPO, RLOO,
REINFORCE; DAPO's clip-higher, GSPO's sequence ratio, the KL as a loss) from an SFT folder and a reward-model
folder; every GRPOConfig field is a flag (``--advantage-estimator rloo``, ``--samples-per-prompt 8``)."""
from __future__ import annotations

import time
from pathlib import Path

from minippo.flags import add_config_flags, config_from_args
from minippo.rlhf.checkpoint import resolve_model_dir
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.ppo_config import RENAMED
from minippo.rlhf.run.ppo_cli import add_stage_arguments, print_summary, run_options
from minippo.rlhf.run.trainer import run_ppo

#: the old names of GRPOConfig's own fields
GRPO_RENAMED = {old: new for old, new in RENAMED.items() if new in GRPOConfig.__dataclass_fields__}


def add_arguments(parser) -> None:
    add_stage_arguments(parser, "grpo", GRPOConfig)
    add_config_flags(parser, GRPOConfig, renamed=GRPO_RENAMED)


def cli_main(args) -> int:
    cfg = config_from_args(args, GRPOConfig.quick() if args.quick else GRPOConfig(), GRPO_RENAMED)
    resolve_model_dir(args.sft), resolve_model_dir(args.rm)         # a wrong path: one line, before the banner
    out = Path(args.out) if args.out else Path("runs") / time.strftime("grpo-%Y%m%d-%H%M%S")
    print(f"{cfg.advantage_estimator} from {args.sft} (policy, reference) and {args.rm} (reward model) -> {out}")
    trainer = run_ppo(cfg, args.sft, args.rm, out, resume=True, progress=not args.no_progress, **run_options(args))
    print_summary(out, trainer)
    return 0
