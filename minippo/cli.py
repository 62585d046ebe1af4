"""The ``minippo`` command (also ``python -m minippo``).

Each sub-command lives in the module that implements it; that module defines

    add_arguments(parser: argparse.ArgumentParser) -> None
    cli_main(args: argparse.Namespace) -> int | None

and is imported only when its sub-command runs, so ``minippo --help`` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help). The order is the order of the pipeline.
COMMANDS: dict[str, tuple[str, str]] = {
    "rlhf": ("minippo.rlhf.run.pipeline", "the main job: corpus -> tokenizer -> SFT -> reward model -> PPO"),
    "sft": ("minippo.rlhf.sft", "stage 1: train the tiny GPT on the synthetic corpus (supervised fine-tuning)"),
    "rm": ("minippo.rlhf.rm_train", "stage 2: label preference pairs and train the Bradley-Terry reward model"),
    "ppo": ("minippo.rlhf.run.ppo_cli", "stage 3: PPO with actor, critic, reference and reward model"),
    "dpo": ("minippo.rlhf.run.dpo_cli", "stage 3 without RL: DPO / IPO on the reward model's preference pairs"),
    "export": ("minippo.rlhf.run.hf", "write a model folder as a Hugging Face GPT-2 folder (transformers loads it)"),
    "import-hf": ("minippo.rlhf.run.hf_import", "read a Hugging Face GPT-2 folder into a model folder"),
    "classic": ("minippo.classic.run", "classic PPO on CartPole (s, a, r, s', done)"),
    "bench": ("minippo.bench", "measure kernels and models side by side and print ratios"),
    "exercise": ("minippo.exercises.cli", "the classroom exercises: list, start NAME, check NAME, solution NAME"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minippo", description="minippo: PPO for language-model RLHF in NumPy, from scratch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        build_parser().print_help()
        return 0
    name = argv[0]
    if name not in COMMANDS:
        build_parser().parse_args(argv)  # prints "invalid choice" and exits with 2
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    sub = argparse.ArgumentParser(prog=f"minippo {name}", description=COMMANDS[name][1])
    module.add_arguments(sub)
    args = sub.parse_args(argv[1:])
    rc = module.cli_main(args)
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
