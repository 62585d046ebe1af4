"""The ``minippo`` command (also ``python -m minippo``).

Each sub-command lives in the module that implements it; that module defines

    add_arguments(parser: argparse.ArgumentParser) -> None
    cli_main(args: argparse.Namespace) -> int | None

and is imported only when its sub-command runs, so ``minippo --help`` stays fast.

Errors are handled here, once for every command (the commands just raise):

- a command line argparse cannot read (a missing or unknown flag, a value of the wrong type: ``--iterations abc``)
  prints one line, ``minippo CMD: error: --iterations: expected an integer (N), got 'abc'``, exit status 2, no usage
  dump (:class:`Parser`); ``minippo CMD --help`` shows the flags, the common ones first, the others grouped;
- a ``ValueError`` or ``OSError`` the user can cause prints one line on stderr, ``minippo CMD: error: ...``,
  naming the flag when the message names one the user gave (``--gamma 1.5: `gamma` must be in [0, 1]``);
  exit status 2 when the command line itself is wrong (a flag's value out of range, a path flag pointing at
  nothing, at a file, or at a folder holding something else; also :class:`minippo.checks.UsageError`), 1 when
  the run found a problem (a corrupt file, a locked folder, a read-only folder, a full disk, a NaN stop, a stored
  stage made with another config);
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
    "rlhf": ("minippo.rlhf.run.rlhf_cli", "the main job: corpus -> tokenizer -> SFT -> reward model -> PPO"),
    "sft": ("minippo.rlhf.sft", "stage 1: train the tiny GPT on the synthetic corpus (supervised fine-tuning)"),
    "rm": ("minippo.rlhf.rm_train", "stage 2: label preference pairs and train the Bradley-Terry reward model"),
    "ppo": ("minippo.rlhf.run.ppo_cli", "stage 3: PPO with actor, critic, reference and reward model"),
    "grpo": ("minippo.rlhf.run.grpo_cli", "stage 3 without a critic: GRPO / Dr. GRPO / RLOO / REINFORCE"),
    "dpo": ("minippo.rlhf.run.dpo_cli", "stage 3 without RL: DPO / IPO on the reward model's preference pairs"),
    "rlvr": ("minippo.rlvr.run", "RL with a verifiable reward: SFT on sums, then RL against the checker; pass@k"),
    "export": ("minippo.rlhf.run.hf", "write a model folder as a Hugging Face GPT-2 folder (transformers loads it)"),
    "import-hf": ("minippo.rlhf.run.hf_import", "read a Hugging Face GPT-2 folder into a model folder"),
    "classic": ("minippo.classic.run", "classic PPO on CartPole (s, a, r, s', done)"),
    "bench": ("minippo.bench", "measure kernels and models side by side and print ratios"),
    "exercise": ("minippo.exercises.cli", "the classroom exercises: list, start NAME, check NAME, solution NAME"),
}


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line naming the flag (``--seed: expected an integer (N), got
    'x'``) and exit status 2, without the usage dump: ``--help`` shows the flags. Subparsers are of this class
    too. The lessons' command lines use it as well."""

    def format_usage(self) -> str:
        return self._short_usage() + "\n"

    def format_help(self) -> str:
        usage, self.usage = self.usage, self.usage or self._short_usage()[len("usage: "):]
        try:
            return super().format_help()
        finally:
            self.usage = usage

    def _short_usage(self) -> str:
        """``usage: PROG POSITIONALS --required VALUE [flags]``: what must be given; ``--help`` lists the rest."""
        if self.usage:
            return f"usage: {self.usage}"
        parts = [a.metavar or a.dest for a in self._actions if not a.option_strings]
        parts += [f"{a.option_strings[0]} {a.metavar or a.dest.upper()}" for a in self._actions
                  if a.option_strings and a.required]
        return "usage: " + " ".join([self.prog, *parts, "[flags]"])

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, and an empty text given to a flag or positional that takes any text (``--out ''``,
        ``--sft ''``) is refused: it is no path (it would silently mean the default, or the current folder)."""
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            if isinstance(action, argparse._StoreAction) and action.type is None and action.default != "" \
                    and getattr(namespace, action.dest, None) == "":
                name = " ".join(filter(None, (*action.option_strings[:1], action.metavar or action.dest.upper())))
                self.error(f"{name}: expected a value, got ''")
        return namespace, extras

    def error(self, message: str):
        message = re.sub(r"^argument ([^:]+): ", r"\1: ", message)
        if message.startswith("unrecognized arguments"):
            message += f" ({self.prog} --help lists the flags)"
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="minippo", description="minippo: PPO for language-model RLHF in NumPy, from scratch.",
        epilog="--debug (or MINIPPO_DEBUG=1) shows the traceback of an error instead of its one-line message.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text, add_help=False)
    return parser


def given_flags(sub: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace) -> dict[str, tuple]:
    """dest -> (flag as typed, its value as typed: ``--beta 0`` stays "0", not 0.0) for the options present on
    the command line (a switch's value is True)."""
    typed = {}
    for i, a in enumerate(argv):
        if a.startswith("-"):
            opt, eq, text = a.partition("=")
            typed[opt] = text if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    out = {}
    for action in sub._actions:
        for opt in action.option_strings:
            if opt in typed and action.dest != "help":
                value = getattr(args, action.dest, None)
                out[action.dest] = (opt, value if isinstance(value, bool) or action.nargs == 0 else typed[opt])
    return out


def _is_number(text: str) -> bool:
    """A flag's value that is a number is no path (``--steps 2`` is not "2" in "[0, 2)")."""
    try:
        float(text)
    except ValueError:
        return False
    return True


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
        if isinstance(value, str) and value and not _is_number(value) and not line.startswith("--") and \
                re.search(r"(?<![\w./-])" + re.escape(value) + r"(?![\w.-])", line):
            usage = isinstance(exc, (FileNotFoundError, FileExistsError, NotADirectoryError, UsageError))
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
        try:
            build_parser().parse_args(argv)  # prints "invalid choice" in one line
        except SystemExit as exc:
            return int(exc.code or 0)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    prog = f"minippo {name}"
    sub = Parser(prog=prog, description=COMMANDS[name][1])
    module.add_arguments(sub)
    if "--debug" not in sub._option_string_actions:      # a command's own --debug (exercise) stays its own
        sub.add_argument("--debug", action="store_true", help="show the traceback of an error")
    try:
        args = sub.parse_args(argv[1:])
    except SystemExit as exc:         # --help (0), or a command line argparse cannot read (2; one line printed)
        return int(exc.code or 0)
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
