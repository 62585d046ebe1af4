"""The ``minippo grpo`` command: the critic-free family (:mod:`minippo.rlhf.grpo`: GRPO, Dr. GRPO, RLOO,
REINFORCE; DAPO's clip-higher, GSPO's sequence ratio, the KL as a loss) from an SFT folder and a reward-model
folder; every GRPOConfig field is a flag (``--advantage-estimator rloo``, ``--samples-per-prompt 8``)."""
from __future__ import annotations

from minippo.flags import add_config_flags, config_from_args
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.ppo_config import RENAMED
from minippo.rlhf.run.ppo_cli import add_stage_arguments, run_stage

#: the old names of GRPOConfig's own fields
GRPO_RENAMED = {old: new for old, new in RENAMED.items() if new in GRPOConfig.__dataclass_fields__}


def add_arguments(parser) -> None:
    add_stage_arguments(parser, "grpo", GRPOConfig)
    add_config_flags(parser, GRPOConfig, renamed=GRPO_RENAMED)


def cli_main(args) -> int:
    cfg = config_from_args(args, GRPOConfig.quick() if args.quick else GRPOConfig(), GRPO_RENAMED)
    return run_stage(args, cfg, "grpo",
                     f"{cfg.advantage_estimator} from {args.sft} (policy, reference) and {args.rm} (reward model)")
