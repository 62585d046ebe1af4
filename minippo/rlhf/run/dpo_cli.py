"""The ``minippo dpo`` command: DPO from an SFT folder on the preference pairs of a reward-model folder (the
same pairs and the same train / held-out split the reward model was trained on); every DPOConfig field is a
flag (``--beta 0.05``, ``--loss-type ipo``)."""
from __future__ import annotations

import time
from pathlib import Path

from minippo.flags import add_config_flags, config_from_args
from minippo.io import read_metrics
from minippo.rlhf.checkpoint import resolve_model_dir
from minippo.rlhf.dpo_config import DPOConfig
from minippo.rlhf.rm_train import pairs_folder
from minippo.rlhf.run.dpo_trainer import run_dpo
from minippo.rlhf.run.ppo_cli import add_run_arguments

SHOWN = ("loss", "rewards/accuracies", "rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected")
SHOWN_EVAL = ("eval_rewards/accuracies", "gold/score", "objective/kl_exact", "response/length")


def add_arguments(parser) -> None:
    parser.add_argument("--sft", required=True, metavar="DIR",
                        help="SFT run folder (from `minippo sft`) or its model/ folder")
    parser.add_argument("--pairs", required=True, metavar="DIR", help="reward-model run folder (from `minippo rm`) "
                        "whose pairs.npz and train / held-out split DPO trains on")
    add_run_arguments(parser, "dpo", DPOConfig)
    add_config_flags(parser, DPOConfig)


def cli_main(args) -> int:
    cfg = config_from_args(args, DPOConfig.quick() if args.quick else DPOConfig())
    resolve_model_dir(args.sft), pairs_folder(args.pairs)           # a wrong path: one line, before the banner
    out = Path(args.out) if args.out else Path("runs") / time.strftime("dpo-%Y%m%d-%H%M%S")
    print(f"DPO from {args.sft} (policy, reference) on the pairs of {args.pairs} -> {out}")
    trainer = run_dpo(cfg, args.sft, args.pairs, out, resume=True, progress=not args.no_progress)
    hist = read_metrics(out / "metrics.jsonl")
    first, last = hist[0], hist[-1]
    for key in SHOWN:
        print(f"{key:<24s} first step {first[key]:+9.3f}   last step {last[key]:+9.3f}")
    evals = [r for r in hist if "gold/score" in r]
    for key in SHOWN_EVAL if evals else ():           # none with --eval-every 0
        print(f"{key:<24s} first evaluation {evals[0][key]:+9.3f}   last {evals[-1][key]:+9.3f}")
    info = trainer.data_info
    print(f"{trainer.step_count} steps on {info['train_pairs']} training pairs ({info['train_prompts']} prompts; "
          f"{info['heldout_pairs']} held-out pairs); metrics in {out / 'metrics.jsonl'}, policy in {out / 'policy'}")
    return 0
