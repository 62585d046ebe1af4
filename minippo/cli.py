"""The ``minippo`` command (also ``python -m minippo``).

Each sub-command lives in the module that implements it; that module defines

    add_arguments(parser: argparse.ArgumentParser) -> None
    cli_main(args: argparse.Namespace) -> int | None

and is imported only when its sub-command runs, so ``minippo --help`` stays fast.

Errors are handled here, once for every command (the commands just raise):

- a ``ValueError`` or ``OSError`` the user can cause prints one line on stderr, ``minippo CMD: error: ...``,
  naming the flag when the message names one the user gave (``--gamma 1.5: `gamma` must be in [0, 1]``);
  exit status 2 when the command line itself is wrong (a flag's value out of range, a path flag pointing at
  nothing or at a file; also :class:`minippo.checks.UsageError`), 1 when the run found a problem (a corrupt file, a locked
  folder, a read-only folder, a full disk, a NaN stop, a stored stage made with another config);
- Ctrl-C prints one line: what was interrupted, which checkpoint is kept, how to resume (set by the running
  stage, :func:`minippo.runs.stage`); exit status 130;
- a :class:`minippo.io.RunWarning` prints as one ``minippo CMD: warning: ...`` line; numpy's RuntimeWarnings
  (overflow in a product on the way to a NaN stop) are shown with ``--debug`` only: the stop names the metric;
- ``--debug`` (anywhere on the command line) or ``MINIPPO_DEBUG=1`` shows the full traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import warnings

from minippo.checks import UsageError
from minippo.io import RunWarning

# name -> (module, one-line help). The order is the order of the pipeline.
COMMANDS: dict[str, tuple[str, str]] = {
    "rlhf": ("minippo.rlhf.run.pipeline", "the main job: corpus -> tokenizer -> SFT -> reward model -> PPO"),
    "sft": ("minippo.rlhf.sft", "stage 1: train the tiny GPT on the synthetic corpus (supervised fine-tuning)"),
    "rm": ("minippo.rlhf.rm_train", "stage 2: label preference pairs and train the Bradley-Terry reward model"),
    "ppo": ("minippo.rlhf.run.ppo_cli", "stage 3: PPO with actor, critic, reference and reward model"),
    "dpo": ("minippo.rlhf.run.dpo_cli", "stage 3 without RL: DPO / IPO on the reward model's preference pairs"),
    "rlvr": ("minippo.rlvr.run", "RL with a verifiable reward: SFT on sums, then RL against the checker; pass@k"),
    "export": ("minippo.rlhf.run.hf", "write a model folder as a Hugging Face GPT-2 folder (transformers loads it)"),
    "import-hf": ("minippo.rlhf.run.hf_import", "read a Hugging Face GPT-2 folder into a model folder"),
    "classic": ("minippo.classic.run", "classic PPO on CartPole (s, a, r, s', done)"),
    "bench": ("minippo.bench", "measure kernels and models side by side and print ratios"),
    "exercise": ("minippo.exercises.cli", "the classroom exercises: list, start NAME, check NAME, solution NAME"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minippo", description="minippo: PPO for language-model RLHF in NumPy, from scratch.",
        epilog="--debug (or MINIPPO_DEBUG=1) shows the traceback of an error instead of its one-line message.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text, add_help=False)
    return parser


def given_flags(sub: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace) -> dict[str, tuple]:
    """dest -> (flag as typed, its value) for the options present on the command line."""
    typed = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    out = {}
    for action in sub._actions:
        for opt in action.option_strings:
            if opt in typed and action.dest != "help":
                out[action.dest] = (opt, getattr(args, action.dest, None))
    return out


def describe_error(exc: BaseException, flags: dict[str, tuple]) -> tuple[str, int]:
    """``(one line, exit status)`` for an error a user caused (see the module docstring)."""
    text = str(exc) or type(exc).__name__
    lines = text.splitlines()
    line = lines[0] + (f" ({len(lines) - 1} more lines with --debug)" if len(lines) > 1 else "")
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        line = f"{exc.filename}: {exc.strerror}"                  # "[Errno 13] ...: 'p'" -> "p: Permission denied"
    named = [d for d in re.findall(r"`([A-Za-z_][\w.]*)`", line) if d in flags]
    if named and isinstance(exc, ValueError):
        opt, value = flags[named[0]]
        shown = f"{opt} {value}" if value is not None and not isinstance(value, bool) else opt
        return (line if line.startswith(opt) else f"{shown}: {line}"), 2
    for dest, (opt, value) in flags.items():
        # a path flag's value in the message, as a path (not inside another word): name the flag too
        if isinstance(value, str) and value and not line.startswith("--") and \
                re.search(r"(?<![\w./-])" + re.escape(value) + r"(?![\w.-])", line):
            usage = isinstance(exc, (FileNotFoundError, NotADirectoryError, UsageError))
            return f"{opt}: {line}", 2 if usage else 1
    return line, 2 if isinstance(exc, UsageError) else 1


def _show_run_warning(prog: str):
    """``warnings.showwarning`` printing a RunWarning as one line (others as Python prints them)."""
    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RunWarning):
            print(f"{prog}: warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)
    return show


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("MINIPPO_DEBUG", "") not in ("", "0")
    if argv and argv[0] == "--debug":
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        build_parser().print_help()
        return 0
    name = argv[0]
    if name not in COMMANDS:
        build_parser().parse_args(argv)  # prints "invalid choice" and exits with 2
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    prog = f"minippo {name}"
    sub = argparse.ArgumentParser(prog=prog, description=COMMANDS[name][1])
    module.add_arguments(sub)
    if "--debug" not in sub._option_string_actions:      # a command's own --debug (exercise) stays its own
        sub.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args = sub.parse_args(argv[1:])
    with warnings.catch_warnings():
        warnings.showwarning = _show_run_warning(prog)
        if not debug:      # numpy's "overflow encountered in matmul": the NaN guard names what went non-finite
            warnings.filterwarnings("ignore", category=RuntimeWarning)
        try:
            rc = module.cli_main(args)
        except KeyboardInterrupt as exc:
            if debug:
                raise
            print(f"{prog}: {getattr(exc, 'minippo_message', 'interrupted before anything was written')}",
                  file=sys.stderr)
            return 130
        except (ValueError, OSError) as exc:
            if debug:
                raise
            line, status = describe_error(exc, given_flags(sub, argv[1:], args))
            print(f"{prog}: error: {line}", file=sys.stderr)
            return status
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
