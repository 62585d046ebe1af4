"""``minippo rlvr``: SFT on the arithmetic task, then RL against the verifier, judged by pass@k on held-out problems.

    problems + the teacher -> SFT         minippo.rlvr.task, minippo.rlhf.lm_train.fit_lm   (stage 1, ``<out>/sft``)
    RL against the verifier               minippo.rlvr.trainer (--method ppo: the canonical  (stage 2,
                                          PPO with its critic; grpo, dr_grpo, rloo: the       ``<out>/<method>``)
                                          critic-free family of minippo.rlhf.grpo)
    pass@1, 4, 16, 64 before and after    minippo.rlvr.evaluate                             (``summary_<method>.json``,
    on the held-out problems                                                                 ``samples_<method>.md``)

Each method trains in its own stage folder from the one SFT stage: ``--method grpo`` and then ``--method ppo``
with the same ``--out`` share the SFT model and compare the two on the same held-out problems.

The run folder keeps the rules of ``minippo rlhf`` (README, "What a run folder guarantees";
:mod:`minippo.runs`): the folder is locked while the command writes it; a stage already there is reused, or
resumed from its checkpoint, only when its stored config equals the requested one (every field but the
checkpoint cadence; a PPO resume may also raise ``iterations``), otherwise the command refuses before
writing anything, naming the stage, the fields and how to start fresh; checkpoints are validated before
anything is assigned; Ctrl-C names what is kept. The evaluation runs again at every call (it writes only
``summary_<method>.json`` and ``samples_<method>.md``, which belong to this command's run).

``--quick`` runs the same stages at CI size; the default is the course's size (its CPU seconds: README,
"Verifiable rewards").

Two option groups change the RL stage's config (:func:`rl_config_from_args`), each for the methods it applies
to: the corrected objective (``--logits-precision bfloat16 --stale-k 2 --correction tis --correction-cap 2``:
:class:`~minippo.rlhf.corrected.CorrectedConfig`, ``--method ppo``) and DAPO's soft overlong punishment
(``--overlong-max-len 6 --overlong-cache-len 2``: GRPOConfig, ``--method grpo | dr_grpo | rloo``); a flag the
method does not take is a one-line error, exit status 2. The stage's stored config holds them, so the reuse rule
refuses a folder made with other options.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import check_choice
from minippo.checks import UsageError
from minippo.flags import add_config_flags, flag, integer, replace_fields
from minippo.io import atomic_write_text, has_checkpoint, read_metrics
from minippo.rlhf.checkpoint import load_model, save_model
from minippo.rlhf.lm_train import RESULT_NEUTRAL, check_lm_folder, fit_lm
from minippo.rlhf.corrected import CorrectedConfig
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.rm_train import stored_config
from minippo.rlhf.run.configs import comparable, config_from_dict
from minippo.rlhf.run.correction_cli import add_correction_flags, with_correction
from minippo.rlhf.run.pipeline import AGAIN, peak_rss_mb
from minippo.rlhf.run.trainer import RESUME_NEUTRAL
from minippo.runs import (check_run_folder, check_stage_config, check_stage_inputs, input_identity, run_lock, stage,
                          stages_kept)
from minippo.rlvr.evaluate import KS, evaluate_pass_at_k
from minippo.rlvr.task import Problems, TaskSFTConfig, sft_batcher
from minippo.rlvr.tokenizer import CharTokenizer
from minippo.rlvr.trainer import RLVRTrainer, rlvr_grpo_config, rlvr_ppo_config
from minippo.rlvr.verifier import Verifier, verify

#: --method, and how the command names each: the critic-free family (minippo.rlhf.grpo), the canonical PPO
METHODS = {"grpo": "GRPO", "dr_grpo": "Dr. GRPO", "rloo": "RLOO", "ppo": "PPO"}
#: the GRPOConfig fields of DAPO's soft overlong punishment: flags of ``minippo rlvr``
OVERLONG_FIELDS = ("overlong_max_len", "overlong_cache_len")
SEED_EVAL = 13              # the evaluation's samples: np.random.default_rng([seed, SEED_EVAL, 1 or 2])


def stage_configs(quick: bool = False, seed: int = 0, method: str = "ppo") -> tuple:
    """``(TaskSFTConfig, RL config, eval)`` of ``minippo rlvr --method method`` (``quick``: the CI size): the RL
    config is :func:`~minippo.rlvr.trainer.rlvr_ppo_config`'s for ``ppo``, else
    :func:`~minippo.rlvr.trainer.rlvr_grpo_config`'s with that estimator; ``eval`` holds ``n_eval`` (held-out
    problems judged) and ``n_samples`` (answers per problem, >= the largest k)."""
    check_choice("method", method, tuple(METHODS))
    rl = (rlvr_ppo_config(quick=quick, seed=seed) if method == "ppo" else
          rlvr_grpo_config(method, quick=quick, seed=seed))
    if quick:
        return TaskSFTConfig.quick(seed=seed), rl, {"n_eval": 64, "n_samples": 64}
    return TaskSFTConfig(seed=seed), rl, {"n_eval": 256, "n_samples": 64}


def check_method_config(method: str, rl_cfg) -> None:
    """``rl_cfg`` must configure ``method``: a PPOConfig for ``ppo``, a GRPOConfig of that
    ``advantage_estimator`` otherwise (a ``ValueError`` naming both)."""
    if method == "ppo":
        ok = isinstance(rl_cfg, PPOConfig)          # canonical, the knobs', or the corrected one
    else:
        ok = isinstance(rl_cfg, GRPOConfig) and rl_cfg.advantage_estimator == method
    if not ok:
        got = getattr(rl_cfg, "advantage_estimator", None)
        raise ValueError(f"`rl_cfg` must configure the method {method!r} (a PPOConfig for 'ppo', a GRPOConfig with "
                         f"that advantage_estimator otherwise), got a {type(rl_cfg).__name__}"
                         + (f" with advantage_estimator {got!r}" if got else ""))


# ----------------------------------------------------------------------------------------------
# stage 1: SFT on the teacher's demonstrations
# ----------------------------------------------------------------------------------------------

def train_task_sft(cfg: TaskSFTConfig, out_dir, *, resume: bool = True, progress: bool = True, log=print) -> dict:
    """SFT on the teacher's demonstrations into ``out_dir`` (``config.json``, ``metrics.jsonl``, ``checkpoint/``,
    ``model/``: :func:`minippo.rlhf.lm_train.fit_lm`); the held-out loss is that of the RIGHT answers of the
    held-out problems. ``resume``: continue from ``out_dir/checkpoint`` (its config must equal ``cfg``);
    without it a folder holding a checkpoint is refused. Returns ``{"model", "tokenizer", "history",
    "heldout_loss", "teacher_accuracy", "resumed_from"}``."""
    out_dir = Path(out_dir)
    tokenizer, problems = CharTokenizer(), Problems(cfg)
    demos = problems.demonstrations()
    train = [np.asarray(s, dtype=np.int64) for s in tokenizer.encode_batch(demos, add_bos=True, add_eos=True)]
    held = [np.asarray(s, dtype=np.int64) for s in
            tokenizer.encode_batch([p.prompt + p.answer for p in problems.heldout], add_bos=True, add_eos=True)]
    refuse = lambda: check_lm_folder(out_dir, cfg, resume=resume, what="an SFT run")  # noqa: E731
    with run_lock(out_dir, check=refuse), stage("SFT", out_dir, checkpoint=out_dir / "checkpoint") as st, \
            single_blas_thread():
        model, history, initial, start = fit_lm(cfg, out_dir, st, tokenizer, train, held,
                                                make_batch=sft_batcher(tokenizer), progress=progress, log=log)
        final = [r["eval/heldout_loss"] for r in history if "eval/heldout_loss" in r][-1]
        teacher = float(np.mean([verify(d[:d.index("=") + 1], d[d.index("=") + 1:]) for d in demos]))
        save_model(out_dir / "model", model, tokenizer=tokenizer, extra_state={
            "sft_config": cfg.to_dict(), "step": cfg.steps, "heldout_loss": final, "initial_loss": initial,
            "teacher_accuracy": teacher})
    return {"model": model, "tokenizer": tokenizer, "history": history, "heldout_loss": final,
            "teacher_accuracy": teacher, "resumed_from": start}


def load_task_sft(folder) -> tuple:
    """``(model, tokenizer, cfg, state)`` of a finished task SFT stage (its ``model/`` folder)."""
    model, state = load_model(Path(folder) / "model")
    if state["tokenizer"] is None:
        raise ValueError(f"{folder}/model has no tokenizer.json beside the model")
    return model, CharTokenizer.load(state["tokenizer"]), TaskSFTConfig.from_dict(state["sft_config"]), state


# ----------------------------------------------------------------------------------------------
# the whole command: reuse rule, stages, evaluation
# ----------------------------------------------------------------------------------------------

def check_reuse(out: Path, method: str, sft_cfg: TaskSFTConfig, rl_cfg) -> None:
    """Every stage already in ``out`` (finished, or with a checkpoint to resume) must have been made with the
    requested config, else :class:`minippo.runs.ConfigMismatch` naming the stage, the fields and how to start
    fresh; only the stored JSON is read (the weights are checked when loaded). The RL stage of ``method`` is
    ``out/<method>``; its stored config is read as its class and compared as a resume compares it
    (:func:`minippo.rlhf.run.configs.comparable`: a run with ``--correction none`` and no mismatch
    reuses a run without the flags; another correction is refused, naming the fields)."""
    stages = (("sft", "model", "sft_config", sft_cfg.to_dict(), RESULT_NEUTRAL),
              ("sft", "checkpoint", "sft_config", sft_cfg.to_dict(), RESULT_NEUTRAL),
              (method, "policy", "ppo_config", comparable(rl_cfg), ("checkpoint_every",)),
              (method, "checkpoint", "ppo_config", comparable(rl_cfg), RESUME_NEUTRAL))
    for name, sub, key, requested, ignore in stages:
        folder = out / name / sub
        if not has_checkpoint(folder):
            continue
        stored = stored_config(folder, key)
        if name == method:
            stored = comparable(config_from_dict(stored))
        check_stage_config(out, ("sft", method), name, folder, stored, requested, ignore=ignore)


def run_rlvr(out_dir, *, quick: bool = False, seed: int = 0, method: str = "ppo", progress: bool = True,
             log=print, sft_cfg: TaskSFTConfig | None = None, rl_cfg=None, eval_cfg: dict | None = None) -> dict:
    """Run (or reuse) both stages into ``out_dir`` and judge the SFT and RL policies on the held-out problems;
    returns the summary (also ``summary_<method>.json``). ``sft_cfg`` / ``rl_cfg`` / ``eval_cfg`` override the
    defaults of :func:`stage_configs` (``rl_cfg`` must configure ``method``: :func:`check_method_config`)."""
    d_sft, d_rl, d_eval = stage_configs(quick, seed, method)
    unknown = sorted(set(eval_cfg or {}) - set(d_eval))
    if unknown:
        raise ValueError(f"`eval_cfg` has unknown keys {unknown}; valid: {sorted(d_eval)}")
    sft_cfg, rl_cfg, eval_cfg = sft_cfg or d_sft, rl_cfg or d_rl, {**d_eval, **(eval_cfg or {})}
    check_method_config(method, rl_cfg)
    if eval_cfg["n_samples"] < max(KS):
        raise ValueError(f"`n_samples` must be >= {max(KS)} (pass@{max(KS)}), got {eval_cfg['n_samples']}")
    if not 1 <= eval_cfg["n_eval"] <= sft_cfg.n_heldout:
        raise ValueError(f"`n_eval` must be in [1, n_heldout = {sft_cfg.n_heldout}], got {eval_cfg['n_eval']}")
    out = Path(out_dir)

    def refuse() -> None:                          # before anything is written, the lock file included
        check_run_folder(out, ("sft", *METHODS), "minippo rlvr")
        check_reuse(out, method, sft_cfg, rl_cfg)

    # Ctrl-C between and after the stages (the evaluation): what is on disk (a stage names its own)
    with run_lock(out, check=refuse), stage("minippo rlvr", out, on_disk=lambda: stages_kept(out, ("sft", method)),
                                            restart=AGAIN):
        return _run(out, quick, seed, method, progress, log, sft_cfg, rl_cfg, eval_cfg)


def _run(out: Path, quick, seed, method, progress, log, sft_cfg, rl_cfg, eval_cfg) -> dict:
    summary = {"out": str(out), "quick": quick, "seed": seed, "method": method, "seconds": {}, "cpu_seconds": {}}
    t_all, c_all = time.perf_counter(), time.process_time()

    def timed(name, t, c):
        summary["seconds"][name], summary["cpu_seconds"][name] = time.perf_counter() - t, time.process_time() - c

    # stage 1: SFT on the teacher's demonstrations
    t, c = time.perf_counter(), time.process_time()
    if has_checkpoint(out / "sft" / "model"):
        log(f"[1/2] SFT: reusing {out / 'sft' / 'model'} (same config; delete it to retrain)")
    else:
        log(f"[1/2] SFT: {sft_cfg.n_train} demonstrations of {sft_cfg.digits}-digit sums by a teacher who forgets "
            f"each carry with probability {sft_cfg.carry_slip:g} -> TinyGPT ({sft_cfg.n_layer} layers, "
            f"C={sft_cfg.n_embd}), {sft_cfg.steps} steps")
        r = train_task_sft(sft_cfg, out / "sft", progress=progress, log=log)
        log(f"      teacher right on {r['teacher_accuracy']:.0%} of its demonstrations; held-out loss of the right "
            f"answers {r['heldout_loss']:.3f} nats/token")
    sft_model, tokenizer, _, sft_state = load_task_sft(out / "sft")
    summary["teacher_accuracy"] = sft_state["teacher_accuracy"]
    timed("sft", t, c)

    # stage 2: RL against the verifier (the canonical PPO, or the critic-free family)
    t, c = time.perf_counter(), time.process_time()
    problems, rl_dir, name = Problems(sft_cfg), out / method, METHODS[method]
    if has_checkpoint(rl_dir / "policy"):
        check_stage_inputs(out, method, {"sft": out / "sft" / "model"})
        log(f"[2/2] {name}: reusing {rl_dir / 'policy'} (same config)")
    else:
        resuming = has_checkpoint(rl_dir / "checkpoint")
        log(f"[2/2] {name} against the verifier: "
            f"{'resuming from ' + str(rl_dir / 'checkpoint') + ', ' if resuming else ''}"
            f"{rl_cfg.iterations} iterations x {rl_cfg.batch_size} answers, {rl_cfg.update_epochs} epochs of "
            f"{rl_cfg.num_minibatches} minibatches; {method_summary(rl_cfg)}")
        trainer = RLVRTrainer(rl_cfg, sft_model, tokenizer, problems, out_dir=rl_dir, resume=True,
                              inputs={"sft": input_identity(out / "sft" / "model")})
        try:
            trainer.train(progress=progress)
        finally:
            trainer.close()
    policy, _ = load_model(rl_dir / "policy")
    timed("rl", t, c)

    # the evaluation: the same held-out problems, fresh answers, before and after
    t, c = time.perf_counter(), time.process_time()
    summary["eval"] = evaluate(sft_model, policy, tokenizer, problems.heldout[:eval_cfg["n_eval"]],
                               eval_cfg["n_samples"], rl_cfg, seed)
    summary["train_pass_rate"] = [r["rlvr/pass_rate"] for r in read_metrics(rl_dir / "metrics.jsonl")]
    timed("eval", t, c)
    log(report(summary["eval"]))
    atomic_write_text(out / f"samples_{method}.md", samples_markdown(summary["eval"]))
    timed("total", t_all, c_all)
    summary["peak_rss_mb"] = peak_rss_mb()
    atomic_write_text(out / f"summary_{method}.json", json.dumps(summary, indent=1))
    log(f"done in {summary['seconds']['total']:.1f} s, {summary['cpu_seconds']['total']:.1f} s of CPU "
        f"({', '.join(f'{k} {v:.1f} s' for k, v in summary['cpu_seconds'].items() if k != 'total')}); "
        f"results in {out}")
    return summary


def method_summary(cfg) -> str:
    """One line on what the RL stage's config trains with (the command's log)."""
    if isinstance(cfg, GRPOConfig):
        overlong = ("" if cfg.overlong_max_len is None else f"; overlong punishment L_max = "
                    f"{cfg.overlong_max_len}, L_cache = {cfg.overlong_cache_len}")
        return (f"groups of {cfg.samples_per_prompt} answers per problem, {cfg.advantage_estimator} advantages, "
                f"loss {cfg.loss_agg}, KL loss {cfg.kl_ref_loss_coef:g} ({cfg.kl_ref_loss_estimator}); no critic"
                + overlong)
    line = f"critic from the SFT trunk; KL penalty {cfg.kl_ref_controller} {cfg.kl_ref_coef:g}"
    if isinstance(cfg, CorrectedConfig):
        cap = "" if cfg.correction_cap is None else f", C = {cfg.correction_cap:g}"
        line += (f"; sampler: logits {cfg.logits_precision or 'exact'}, {cfg.stale_k} updates stale; "
                 f"correction {cfg.correction} ({cfg.correction_level}{cap})")
    return line


def evaluate(sft_model, policy, tokenizer, problems, n_samples: int, ppo_cfg, seed: int) -> dict:
    """SFT and RL policies on the same problems, ``n_samples`` fresh answers each at the RL run's temperature:
    :func:`minippo.rlvr.evaluate.evaluate_pass_at_k` of both, and the paired change of pass@1 over problems."""
    verifier = Verifier(tokenizer)
    kw = dict(max_new_tokens=ppo_cfg.max_new_tokens, temperature=ppo_cfg.temperature)
    before = evaluate_pass_at_k(sft_model, tokenizer, verifier, problems, n_samples,
                                rng=np.random.default_rng([seed, SEED_EVAL, 1]), **kw)
    after = evaluate_pass_at_k(policy, tokenizer, verifier, problems, n_samples,
                               rng=np.random.default_rng([seed, SEED_EVAL, 2]), **kw)
    # the change of pass@1 problem by problem: its mean and the standard error of that mean
    diff = (np.array(after["per_problem_right"]) - np.array(before["per_problem_right"])) / n_samples   # (P,)
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else None
    return {"sft": before, "rl": after, "pass@1_change": float(diff.mean()), "pass@1_change_se": se,
            "temperature": ppo_cfg.temperature}


def report(ev: dict) -> str:
    """The table ``minippo rlvr`` prints: pass@k and answer lengths before and after RL."""
    ks = [k for k in KS if f"pass@{k}" in ev["sft"]]
    head = "".join(f"  pass@{k:<3d}" for k in ks)
    lines = [f"evaluation on {ev['sft']['n_problems']} held-out problems, {ev['sft']['n_samples']} answers each "
             f"(temperature {ev['temperature']:g}):",
             f"  {'policy':<6s}{head}   length right / wrong (tokens)   well formed   all right / all wrong"]

    def length(x):
        return "  -  " if x is None else f"{x:5.2f}"
    for name, r in (("SFT", ev["sft"]), ("RL", ev["rl"])):
        cells = "".join(f"  {r[f'pass@{k}']:8.3f}" for k in ks)
        lines.append(f"  {name:<6s}{cells}   {length(r['length_right'])} / {length(r['length_wrong'])}"
                     f"{'':18s}{r['formed']:6.3f}        {r['all_right']:.3f} / {r['all_wrong']:.3f}")
    se = ev["pass@1_change_se"]
    lines.append(f"  pass@1 {ev['sft']['pass@1']:.3f} -> {ev['rl']['pass@1']:.3f}: {ev['pass@1_change']:+.3f}"
                 + ("" if se is None else f" (s.e. {se:.3f} over the problems, paired)"))
    return "\n".join(lines)


def samples_markdown(ev: dict) -> str:
    """``samples_<method>.md``: the first held-out problems, their right answer, four answers of each policy."""
    rows = ["| problem | right answer | SFT's answers | RL's answers |", "|---|---|---|---|"]
    for a, b in zip(ev["sft"]["samples"], ev["rl"]["samples"]):
        rows.append(f"| `{a['prompt']}` | {a['answer']} | {', '.join(x or '(empty)' for x in a['answers'])} | "
                    f"{', '.join(x or '(empty)' for x in b['answers'])} |")
    return ("# Answers before and after RL\n\nFresh samples at temperature "
            f"{ev['temperature']:g}; an answer is shown up to its EOS.\n\n" + "\n".join(rows) + "\n\n"
            + report(ev).replace("\n", "\n    ").join(["    ", "\n"]))


# ----------------------------------------------------------------------------------------------
# the `minippo rlvr` command
# ----------------------------------------------------------------------------------------------

def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, metavar="DIR", help="run folder (default: runs/rlvr-<timestamp>); "
                        "an earlier "
                        "run's finished stages are reused when their config matches")
    parser.add_argument("--quick", action="store_true", help="the same stages at CI size (seconds)")
    parser.add_argument("--seed", type=integer, default=0, metavar="N", help="seed of every stage (default 0)")
    parser.add_argument("--method", default="ppo", choices=tuple(METHODS), help="the RL algorithm: ppo (the "
                        "canonical PPO with its critic, the verifier in the reward model's place), or the "
                        "critic-free grpo, dr_grpo, rloo (groups of 8 answers per problem); each trains in "
                        "<out>/<method> from the one SFT stage")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_correction_flags(parser)
    add_config_flags(parser, GRPOConfig, only=OVERLONG_FIELDS, title="DAPO's soft overlong punishment, "
                     "--method grpo | dr_grpo | rloo only (GRPOConfig fields)")



def rl_config_from_args(args):
    """The RL config ``minippo rlvr`` runs: :func:`stage_configs`'s for ``--method``, with the
    corrected objective's flags (canonical PPO: :mod:`minippo.rlhf.run.correction_cli`) or DAPO's
    overlong punishment's (the critic-free family) given; a flag the method does not take is a
    one-line :class:`~minippo.checks.UsageError`."""
    cfg = stage_configs(args.quick, args.seed, args.method)[1]
    cfg = with_correction(args, cfg, f"--method {args.method}")
    overlong = {n: getattr(args, n) for n in OVERLONG_FIELDS if getattr(args, n) is not None}
    if overlong and not isinstance(cfg, GRPOConfig):
        raise UsageError(f"{flag(next(iter(overlong)))}: DAPO's overlong punishment is an option of the "
                         f"critic-free trainer (GRPOConfig: --method grpo, dr_grpo or rloo); --method "
                         f"{args.method} does not take it")
    return replace_fields(cfg, overlong) if overlong else cfg


def cli_main(args) -> int:
    rl_cfg = rl_config_from_args(args)          # a flag's mistake: one line, before anything is written
    out = Path(args.out) if args.out else Path("runs") / time.strftime("rlvr-%Y%m%d-%H%M%S")
    print(f"minippo rlvr -> {out}{' (quick)' if args.quick else ''}")
    run_rlvr(out, quick=args.quick, seed=args.seed, method=args.method, progress=not args.no_progress,
             rl_cfg=rl_cfg)
    return 0
