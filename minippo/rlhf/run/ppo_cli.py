"""The ``minippo ppo`` command: stage 3 from an SFT folder and a reward-model folder; every field of
PPOConfig and of the knobs (KnobsConfig) is a flag (``--update-epochs 4``, ``--kl-old-target none``:
:mod:`minippo.flags`, grouped by the config's sections). With no knob's flag the run is canonical PPO
(``PPOConfig``), with one it is PPO with the knobs; the corrected objective's flags (``--correction``,
``--logits-precision``, ``--stale-k``: :mod:`minippo.rlhf.run.correction_cli`) make canonical PPO's config a
``CorrectedConfig``; the renamed fields' old flags and
``--advantage-estimator`` (the critic-free family is ``minippo grpo`` now) still work for one release and
print what they are called now."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from minippo.checks import UsageError
from minippo.flags import add_config_flags, boolean, config_from_args, flag, given_fields
from minippo.io import read_metrics
from minippo.rlhf.checkpoint import resolve_model_dir
from minippo.rlhf.grpo import ESTIMATORS, GRPOConfig
from minippo.rlhf.ppo_config import RENAMED, PPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.rlhf.run.configs import RUN_OPTIONS, UNUSED_WITHOUT_CRITIC
from minippo.rlhf.run.correction_cli import add_correction_flags, with_correction
from minippo.rlhf.run.trainer import run_ppo


def add_run_arguments(parser, stage: str, cls) -> None:
    """The flags every trainer's command shares: ``--out``, ``--resume``, ``--quick`` (``cls.quick()``) and
    ``--no-progress`` (the config flags follow: :func:`minippo.flags.add_config_flags`)."""
    parser.add_argument("--out", default=None, metavar="DIR", help=f"run folder (default: runs/{stage}-<timestamp>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint (the "
                        "default: a folder holding a checkpoint made with the same flags is resumed, one made with "
                        "other flags is refused; --iterations / --steps and --checkpoint-every may differ)")
    parser.add_argument("--quick", action="store_true", help=f"tiny config for CI ({cls.__name__}.quick())")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_run_options(parser) -> None:
    """``--log-exact-kl`` and ``--dump-rollouts`` (true / false): options of the trainer, not of the config."""
    group = parser.add_argument_group("run options (defaults in brackets)")
    group.add_argument("--log-exact-kl", type=boolean, default=None, metavar="{true,false}", help="also log "
                       "objective/kl_exact: KL(pi || pi_ref) from the full distributions (two more forward passes "
                       "per iteration) [false]")
    group.add_argument("--dump-rollouts", type=boolean, default=None, metavar="{true,false}", help="write every "
                       "iteration's rollout buffer (per-token arrays) to rollouts/iter_NNNN.npz [false]")


def run_options(args) -> dict:
    """The run options given as flags: ``{"log_exact_kl": bool, ...}``."""
    return {name: getattr(args, name) for name in RUN_OPTIONS if getattr(args, name) is not None}


def ppo_config_from_args(args):
    """The config ``minippo ppo`` runs: canonical :class:`PPOConfig` unless a knob's flag is given
    (:class:`KnobsConfig`), or the deprecated ``--advantage-estimator`` of a critic-free estimator
    (:class:`GRPOConfig`, ``minippo grpo``); a correction flag makes canonical PPO's config a
    :class:`~minippo.rlhf.corrected.CorrectedConfig` (:mod:`minippo.rlhf.run.correction_cli`)."""
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
        extra = sorted(set(given_fields(args, KnobsConfig)) - set(given_fields(args, GRPOConfig))
                       - set(UNUSED_WITHOUT_CRITIC))
        if extra:
            raise UsageError(f"{flag(extra[0])}: not an option of the critic-free family (minippo grpo)")
        base = GRPOConfig.quick(advantage_estimator=estimator) if args.quick else GRPOConfig(
            advantage_estimator=estimator)
        cfg = config_from_args(args, base, {o: n for o, n in RENAMED.items() if n in GRPOConfig.__dataclass_fields__})
        return with_correction(args, cfg, f"--advantage-estimator {estimator}")
    knobs = set(given_fields(args, KnobsConfig)) - set(given_fields(args, PPOConfig))
    knobs |= {new for old, new in RENAMED.items() if getattr(args, "deprecated_" + old, None) is not None
              and new not in PPOConfig.__dataclass_fields__}
    cls = KnobsConfig if knobs else PPOConfig
    cfg = config_from_args(args, cls.quick() if args.quick else cls(), RENAMED)
    return with_correction(args, cfg, f"PPO with the knobs, {flag(sorted(knobs)[0])}" if knobs else "PPO")


def print_summary(out: Path, trainer) -> None:
    """The first and last iteration's main metrics of the run in ``out``."""
    hist = read_metrics(out / "metrics.jsonl")
    first, last = hist[0], hist[-1]
    for key in ("objective/scores", "gold/score", "objective/kl", "response/length", "kl_coef"):
        print(f"{key:<24s} first iteration {first[key]:+8.3f}   last iteration {last[key]:+8.3f}")
    print(f"{trainer.iteration} iterations; metrics in {out / 'metrics.jsonl'}, policy in {out / 'policy'}")


def add_stage_arguments(parser, stage: str, cls) -> None:
    """What ``minippo ppo`` and ``minippo grpo`` share: ``--sft``, ``--rm``, the run arguments and options."""
    parser.add_argument("--sft", required=True, metavar="DIR",
                        help="SFT run folder (from `minippo sft`) or its model/ folder")
    parser.add_argument("--rm", required=True, metavar="DIR",
                        help="reward-model run folder (from `minippo rm`) or its model/ folder")
    add_run_arguments(parser, stage, cls)
    add_run_options(parser)


def add_arguments(parser) -> None:
    add_stage_arguments(parser, "ppo", PPOConfig)
    add_config_flags(parser, KnobsConfig, renamed=RENAMED)
    add_correction_flags(parser)
    parser.add_argument("--advantage-estimator", default=None, metavar="NAME", help="deprecated: a critic-free "
                        "estimator (grpo, dr_grpo, rloo, reinforce) trains GRPOConfig as `minippo grpo` does; "
                        "gae is PPO's")


def run_stage(args, cfg, stage: str, banner: str) -> int:
    """Stage 3 from ``--sft`` and ``--rm`` with ``cfg`` into ``--out`` (default ``runs/<stage>-<timestamp>``),
    ``banner`` naming what trains; what ``minippo ppo`` and ``minippo grpo`` run, then the summary."""
    resolve_model_dir(args.sft), resolve_model_dir(args.rm)         # a wrong path: one line, before the banner
    out = Path(args.out) if args.out else Path("runs") / time.strftime(f"{stage}-%Y%m%d-%H%M%S")
    print(f"{banner} -> {out}")
    trainer = run_ppo(cfg, args.sft, args.rm, out, resume=True, progress=not args.no_progress, **run_options(args))
    print_summary(out, trainer)
    return 0


def cli_main(args) -> int:
    return run_stage(args, ppo_config_from_args(args), "ppo",
                     f"PPO from {args.sft} (policy, reference) and {args.rm} (reward model, critic)")
