"""The ``minippo classic`` command: the run plumbing around :func:`minippo.classic.ppo.train_ppo`.

Flags (one per :class:`~minippo.classic.config.PPOConfig` field, plus the deprecated spellings of
:data:`~minippo.classic.config.DEPRECATED_NAMES`), the progress bar, the metrics file
(``--out/metrics.jsonl``), the periodic checkpoint of the weights (``--out/agent``, every
``--save-every`` updates, so that a run stopped by a NaN/inf keeps its last good weights), the
dashboard (``--out/dashboard.png``) and the printed summary. The training loop itself writes no file
and parses no flag: it is :mod:`minippo.classic.ppo`, and all this reaches it through its ``callback``.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import MISSING, fields
from pathlib import Path

from minippo.checks import UsageError, check_range
from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.config import DEPRECATED_NAMES, PPOConfig, deprecated_value, field_docs
from minippo.flags import field_flag, first_sentence, integer, shown_default
from minippo.classic.dashboard import plot_dashboard
from minippo.classic.ppo import last_mean, steps_to_reach, train_ppo
from minippo.io import MetricsWriter, has_checkpoint, save_checkpoint
from minippo.progress import progress_bar
from minippo.runs import Stage, run_lock


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``minippo classic``: run options, then one flag per :class:`PPOConfig` field."""
    parser.add_argument("--total-timesteps", type=integer, metavar="N", default=200_000,
                        help="environment steps over all envs (default 200000)")
    parser.add_argument("--seed", type=integer, metavar="N", default=0, help="seed of envs, weights, sampling, "
                        "shuffling")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="folder for metrics.jsonl, dashboard.png and the weights (agent/)")
    parser.add_argument("--save-every", type=integer, metavar="N", default=10,
                        help="with --out: save the weights every N updates, so a failed run keeps its last "
                             "good weights (default 10)")
    parser.add_argument("--gymnasium", action="store_true",
                        help='train on gymnasium.make("CartPole-v1") (needs gymnasium installed) '
                             "instead of minippo's own CartPole")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    group = parser.add_argument_group("hyperparameters (PPOConfig)")
    docs = field_docs(PPOConfig)
    for f in fields(PPOConfig):
        default = f.default if f.default is not MISSING else None
        doc = first_sentence(docs.get(f.name, "")).replace("``", "")
        help_text = f"{doc} [{shown_default(default)}]".replace("%", "%%")
        _add_field_flag(group, f.name, default, help_text)
    old = parser.add_argument_group("deprecated spellings (one release; each prints the new one)")
    for name, new in DEPRECATED_NAMES.items():
        _add_field_flag(old, name, None, f"deprecated: use {_flag(new)}", bool_flag=name != "target_kl")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_field_flag(group, name: str, default, help_text: str, bool_flag: bool | None = None) -> None:
    """One flag per field: ``--x/--no-x`` for booleans, a choice for ``lr_schedule``, else typed; ``default`` tells
    which, the flag's value is None when it is not given (the field keeps PPOConfig's default)."""
    if bool_flag or isinstance(default, bool):
        group.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                           help=help_text)
    else:                    # typed, with a metavar saying what the value is (minippo.flags: N, FLOAT, {a,b})
        spec = field_flag(PPOConfig, "kl_old_target" if name == "target_kl" else name)
        group.add_argument(_flag(name), dest=name, type=spec["type"], metavar=spec["metavar"], default=None,
                           help=help_text)


def _hyperparameters(args: argparse.Namespace) -> dict:
    """The PPOConfig fields from the flags; a deprecated flag that was given sets its new field and
    prints one line naming the new flag (the CLI's DeprecationWarning)."""
    hyper = {f.name: getattr(args, f.name) for f in fields(PPOConfig) if getattr(args, f.name) is not None}
    for old, new in DEPRECATED_NAMES.items():
        value = getattr(args, old)
        if value is None:
            continue
        if new in hyper:                       # both spellings given: neither silently wins
            raise UsageError(f"{_flag(old)} and {_flag(new)} name the same field: give {_flag(new)} only")
        hyper[new] = deprecated_value(old, value)
        if old == "target_kl":
            given, use = f"{_flag(old)} {value}", f"{_flag(new)} {value}"
        else:                                                   # --x / --no-x
            given = _flag(old if value else "no_" + old)
            use = f"{_flag(new)} {hyper[new]}" if old == "anneal_lr" else _flag(new if value else "no_" + new)
        print(f"minippo classic: {given} is deprecated, use {use} (the old spelling goes in the next release)",
              file=sys.stderr)
    return hyper


def cli_main(args: argparse.Namespace) -> int:
    """Train, show a progress bar, write metrics/dashboard/weights to ``--out``, print a summary."""
    try:                       # a value out of range: one line naming the flag, exit 2 (minippo.cli)
        cfg = PPOConfig(**_hyperparameters(args))
        check_range("total_timesteps", args.total_timesteps, cfg.batch_size, None, integer=True)
        check_range("save_every", args.save_every, 1, None, integer=True)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.gymnasium:
        try:
            import gymnasium  # lazy: optional, not a dependency (the parity runs only)
        except ImportError:
            raise UsageError("--gymnasium needs `pip install gymnasium`") from None
        make_env = lambda: gymnasium.make("CartPole-v1")                      # noqa: E731
        env_name = f"gymnasium {gymnasium.__version__} CartPole-v1"
    else:
        make_env, env_name = CartPoleEnv, "minippo CartPole-v1"
    out = Path(args.out) if args.out else None
    # Ctrl-C: one line saying what is on disk (minippo.runs); a classic run has no resume
    again = "metrics.jsonl holds the updates done; a classic run does not resume: a new run needs another --out"
    st = Stage("the classic PPO run", out, None if out is None else out / "agent", resume=again, restart=again)
    # one writer per folder, which must hold no earlier results (minippo.runs)
    with run_lock(out, check=lambda: check_no_results(out)) if out else contextlib.nullcontext(), st.running():
        return _train_and_report(args, cfg, make_env, env_name, out, st)


#: what a run writes into --out (a classic run has no resume: a second run would replace the first's records)
OUTPUTS = ("metrics.jsonl", "agent", "dashboard.png")


def check_no_results(out: Path) -> None:
    """``--out`` must hold no earlier run's results (:data:`OUTPUTS`) and be no model folder: ``FileExistsError``
    naming them, before anything is written."""
    found = [name for name in OUTPUTS if (out / name).exists()]
    if found or has_checkpoint(out):
        what = ", ".join(found) if found else "a model (weights.safetensors + state.json)"
        raise FileExistsError(f"{out} already holds {what}: use another --out, or delete them; nothing was "
                              "overwritten")


def _train_and_report(args, cfg: PPOConfig, make_env, env_name: str, out: Path | None, st: Stage) -> int:
    """The run itself: progress, metrics, the periodic weights, the summary and the dashboard; ``st.saved`` names
    the weights on disk (the Ctrl-C line)."""
    writer = MetricsWriter(out / "metrics.jsonl") if out else None
    bar = progress_bar(total=args.total_timesteps // cfg.batch_size, unit="update", disable=args.no_progress,
                       desc=f"PPO on {env_name}, seed {args.seed}")

    saved = {}                                          # the last checkpoint written: update, global_step

    def save_agent(params: dict, record: dict) -> None:
        saved.update(update=record["update"], global_step=record["global_step"])
        save_checkpoint(out / "agent", params, {"config": cfg.to_dict(), "seed": args.seed, "env": env_name,
                                                **saved})
        st.saved = f"update {saved['update']}, step {saved['global_step']}"

    def callback(record: dict, params: dict) -> None:
        if writer is not None:
            writer.write(record)
            if (record["update"] + 1) % args.save_every == 0:
                save_agent(params, record)
        bar.update(1)
        last20 = record["charts/mean_return_last20"]
        bar.set_postfix(step=str(record["global_step"]), ret20="-" if last20 is None else f"{last20:.0f}",
                        kl=f"{record['losses/approx_kl']:.4f}", sps=f"{record['sps']:.0f}")

    try:
        result = train_ppo(make_env, args.total_timesteps, args.seed, callback=callback, **cfg.to_dict())
    except ValueError as exc:                          # a NaN/inf: the checkpoint on disk is the last good one
        bar.close()
        kept = (f"; the last good weights (update {saved['update']}, step {saved['global_step']}) are in "
                f"{out / 'agent'}" if saved else "; no weights were saved yet")
        print(f"minippo classic: error: {exc}{kept}", file=sys.stderr)
        return 1
    bar.close()
    reached = steps_to_reach(result)
    print(f"env: {env_name}; {len(result['episode_returns'])} episodes in {args.total_timesteps} steps, "
          f"{result['wall_time']:.1f} s ({args.total_timesteps / result['wall_time']:.0f} steps/s)")
    print(f"mean return of the last 20 episodes: {last_mean(result):.1f}; steps to reach 475: "
          f"{reached if reached is not None else 'not reached'}")
    if out is not None:
        save_agent(result["params"], result["history"][-1])
        png = plot_dashboard({f"seed {args.seed}": result}, out / "dashboard.png",
                             title=f"PPO on {env_name} (seed {args.seed})")
        print(f"wrote {out / 'metrics.jsonl'}, {png}, {out / 'agent'}")
    return 0
