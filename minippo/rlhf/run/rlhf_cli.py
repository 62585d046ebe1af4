"""``minippo rlhf``: the command line of the main job (:func:`minippo.rlhf.run.pipeline.run_pipeline`).

The few knobs a user changes are flags (:data:`STAGE3_KNOBS`, :data:`MODEL_KNOBS`): the length of stage 3, its
batch, its learning rate, the KL target or coefficient, the size of the model, ``--method``, and the corrected
objective's option group of the PPO stage (``--correction tis --correction-cap 2``,
:mod:`minippo.rlhf.run.correction_cli`). Every other field of the four configs keeps its default,
documented under the field in its dataclass (``minippo ppo --help`` and ``minippo dpo --help`` print
theirs with their defaults; ``minippo rlhf --print-config`` prints every field of the four), or comes
from a JSON file, ``--config FILE``, one object per stage, field names as in the dataclasses::

    {"sft": {"steps": 2000}, "rm": {"epochs": 2}, "ppo": {"clip_eps": 0.1, "kl_ref_controller": "fixed"}}

The flags are applied after the file. ``--print-config`` prints the configuration a run would use, every field of
every stage, as such a file, and stops.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from minippo.checks import UsageError
from minippo.flags import add_config_flags, flag, integer, replace_fields
from minippo.io import CorruptFileError, read_json
from minippo.rlhf.dpo_config import DPOConfig
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.rm_train import RMConfig
from minippo.rlhf.corrected import CORRECTION_FIELDS, CorrectedConfig
from minippo.rlhf.run.correction_cli import add_correction_flags, with_correction
from minippo.rlhf.run.pipeline import dpo_config, run_pipeline, stage_configs
from minippo.rlhf.sft import SFTConfig
from minippo.runs import ensure_folder

#: stage-3 method -> the fields of its config that are flags of ``minippo rlhf`` (``--lr`` sets either's)
STAGE3_KNOBS = {"ppo": ("iterations", "batch_size", "lr", "kl_ref_target", "kl_ref_coef"),
                "dpo": ("steps", "batch_prompts", "beta")}
#: the model's size: SFTConfig fields (the reward model and the critic start from the SFT model)
MODEL_KNOBS = ("n_layer", "n_embd")
CLASSES = {"sft": SFTConfig, "rm": RMConfig, "ppo": PPOConfig, "dpo": DPOConfig}


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, metavar="DIR", help="run folder (default: runs/<timestamp>); an "
                        "existing run's finished stages are reused when their stored config matches, else refused")
    parser.add_argument("--method", default="ppo", choices=("ppo", "dpo"), help="stage 3: PPO with the reward "
                        "model (default) or DPO on the reward model's preference pairs")
    parser.add_argument("--quick", action="store_true", help="the same pipeline at CI size (well under 90 s)")
    parser.add_argument("--seed", type=integer, default=0, metavar="N", help="seed of every stage (default 0)")
    parser.add_argument("--config", default=None, metavar="FILE", help="a JSON file of config fields, one object "
                        'per stage: {"sft": {...}, "rm": {...}, "ppo": {...}, "dpo": {...}} (the flags win)')
    parser.add_argument("--print-config", action="store_true", help="print the configuration this command would "
                        "run (every field, as a --config file) and stop")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_config_flags(parser, PPOConfig, only=STAGE3_KNOBS["ppo"], title="stage 3, PPO (the default --method): "
                     "PPOConfig fields")
    add_config_flags(parser, DPOConfig, only=STAGE3_KNOBS["dpo"], title="stage 3 with --method dpo: DPOConfig "
                     "fields (and --lr)")
    add_correction_flags(parser)
    add_config_flags(parser, SFTConfig, only=MODEL_KNOBS, title="the model's size: SFTConfig fields (the "
                     "reward model and the critic start from the SFT model)")
    parser.epilog = ("Every other field keeps its default (--print-config shows them all); set them "
                     "with --config FILE.")


def read_config_file(path, configs: dict) -> dict:
    """``configs`` (stage -> config) with the fields of the JSON file ``path`` replaced; a ``UsageError`` naming
    the file, the stage and the field for anything that is not a config of these stages."""
    path = Path(path)
    try:
        data = read_json(path)
    except CorruptFileError as exc:                          # not JSON: one line naming the file, exit 2
        raise UsageError(str(exc)) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a JSON object of stages ({', '.join(configs)}), got {type(data).__name__}")
    out = dict(configs)
    for name, fields in data.items():
        if name not in configs:
            raise UsageError(f"{path}: unknown stage {name!r}; this run's stages are {', '.join(configs)}")
        if not isinstance(fields, dict):
            raise UsageError(f"{path}: {name} must be an object of {type(configs[name]).__name__} fields")
        cls = type(configs[name])
        if cls is PPOConfig and set(fields) & set(CORRECTION_FIELDS):     # --print-config's, corrected
            cls = CorrectedConfig
        try:
            out[name] = cls.from_dict({**configs[name].to_dict(), **fields})
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{path}: {name}: {exc}") from None
    return out


def configs_from_args(args) -> dict:
    """stage -> config of the run ``args`` asks for: the defaults (``--quick``, ``--seed``), then ``--config``,
    then the knob flags given. A knob of the other method is refused, naming it."""
    sft, rm, ppo = stage_configs(args.quick, args.seed)
    configs = {"sft": sft, "rm": rm, args.method: ppo if args.method == "ppo" else dpo_config(args.quick, args.seed)}
    if args.config is not None:
        configs = read_config_file(args.config, configs)
    other = "dpo" if args.method == "ppo" else "ppo"
    wrong = [n for n in STAGE3_KNOBS[other] if n != "lr" and getattr(args, n) is not None]
    if wrong:
        raise UsageError(f"{flag(wrong[0])} sets {CLASSES[other].__name__}.{wrong[0]}, a knob of --method {other}; "
                         f"with --method {args.method} the stage-3 knobs are "
                         f"{', '.join(flag(n) for n in STAGE3_KNOBS[args.method])}")
    for stage, names in (("sft", MODEL_KNOBS), (args.method, STAGE3_KNOBS[args.method] + ("lr",))):
        given = {n: getattr(args, n) for n in dict.fromkeys(names) if getattr(args, n) is not None}
        configs[stage] = replace_fields(configs[stage], given)
    configs[args.method] = with_correction(args, configs[args.method], f"--method {args.method}")
    return configs


def cli_main(args) -> int:
    configs = configs_from_args(args)              # every mistake in the flags or the file, before anything runs
    if args.print_config:
        print(json.dumps({name: cfg.to_dict() for name, cfg in configs.items()}, indent=1))
        return 0
    out = Path(args.out) if args.out else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    ensure_folder(out)
    print(f"minippo rlhf -> {out}{' (quick)' if args.quick else ''}{' (DPO)' if args.method == 'dpo' else ''}")
    run_pipeline(out, quick=args.quick, seed=args.seed, progress=not args.no_progress, method=args.method,
                 sft_cfg=configs["sft"], rm_cfg=configs["rm"], ppo_cfg=configs.get("ppo"),
                 dpo_cfg=configs.get("dpo"))
    return 0
