"""``minippo rlhf``: the main job, from nothing to an aligned policy.

    corpus -> tokenizer -> SFT            minippo.rlhf.sft              (stage 1, ``<out>/sft``)
    preference pairs -> reward model      minippo.rlhf.rm_train         (stage 2, ``<out>/rm``)
    PPO with the four models              minippo.rlhf.run.trainer          (stage 3, ``<out>/ppo``)
      or, ``--method dpo``: DPO on the    minippo.rlhf.run.dpo_trainer      (stage 3, ``<out>/dpo``)
      reward model's pairs and split
    evaluation: SFT vs PPO, same prompts  minippo.rlhf.run.evaluate         (``samples.md``, ``summary.json``)
    figures                               minippo.rlhf.run.plots            (``<out>/figures/ppo_curves.png``)

A DPO stage 3 writes its own files (:data:`OUTPUTS`: ``samples_dpo.md``, ``summary_dpo.json``,
``<out>/figures/dpo_curves.png``), so ``--method dpo`` pointed at a finished PPO run trains DPO on the same SFT policy
and the same reward-model pairs and puts its results beside PPO's: the two methods compared on the same stages
(lesson 21's question), and nothing of PPO's overwritten. A folder that holds files of something else (no stage
folder in it) is refused before anything is written. The command line is :mod:`minippo.rlhf.run.rlhf_cli`.

Every stage shows a progress bar and writes into ``--out`` (default ``runs/<timestamp>``). A stage whose
final checkpoint already exists there is reused, and the log says so: pointing ``--out`` at an earlier
run skips its finished stages (an SFT or PPO stage interrupted after a checkpoint resumes from it). This
is also how lessons cache SFT and the reward model (:func:`run_pipeline` with a cache folder).

**The reuse rule** (README, "What a run folder guarantees"). A stage is reused, or resumed, only when the
configuration stored with it equals the requested one on every field that changes its result (all fields
but the checkpoint cadence, :data:`minippo.rlhf.lm_train.RESULT_NEUTRAL`; PPO and DPO may also be
extended or shortened, :data:`minippo.rlhf.run.trainer.RESUME_NEUTRAL`, with a warning when their lr
schedule then follows the new count). Otherwise the command REFUSES before it writes anything,
naming the stage, the differing fields with both values, and how to start fresh (another ``--out``, or
deleting that stage's folder and the ones after it). It does not retrain the stage over the old one: that
would destroy the records of a run the user may still want, and a refusal costs one command to undo. A
finished PPO or DPO stage is also reused only over the SFT model and reward model (pairs) it was trained
from (:func:`minippo.runs.check_stage_inputs`). The
folder is locked while the command runs (:mod:`minippo.runs`); the lessons' shared cache waits for the lock
instead of refusing (two lessons started together build it once).

``--quick`` runs the same pipeline at CI size (a few tens of seconds). ``summary.json`` holds the wall
time of each stage, the peak resident memory, and the numbers of the issue: the SFT parameter count
and losses (read from the SFT model when this call reuses it), SFT vs PPO gold mean and std, the KL to the reference against the
controller's target, RM scores, lengths.
"""
from __future__ import annotations

import hashlib
import json
import math
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from minippo.blas import blas_core_name, single_blas_thread
from minippo.checks import check_choice
from minippo.io import STATE, atomic_write_text, checkpoint_folder, has_checkpoint, read_json, read_metrics
from minippo.nn.gpt import GPTConfig
from minippo.rlhf.checkpoint import load_model
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.dpo_config import DPOConfig
from minippo.rlhf.generate import TRUNCATED_MARK
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.rm_train import RMConfig, pairs_folder, stored_config, train_reward_model
from minippo.rlhf.run.dpo_trainer import RESUME_NEUTRAL as DPO_RESUME_NEUTRAL
from minippo.rlhf.run.dpo_trainer import run_dpo
from minippo.rlhf.run.configs import comparable, config_from_dict
from minippo.rlhf.run.evaluate import disagreements, evaluate_policy, samples_markdown
from minippo.rlhf.run.plots import plot_run
from minippo.rlhf.run.trainer import RESUME_NEUTRAL, load_stages, run_ppo
from minippo.rlhf.lm_train import RESULT_NEUTRAL
from minippo.rlhf.sft import SFTConfig, train_sft
from minippo.runs import (LOCK_FILE, check_run_folder, check_stage_config, check_stage_inputs, run_lock, stage,
                          stages_kept, user_temp_dir)

SEED_EVAL = 11          # the evaluation prompts and samples: np.random.default_rng([seed, SEED_EVAL])
STAGES = ("sft", "rm", "ppo", "dpo")                # the stage folders of a run folder
#: stage-3 method -> (samples, summary, figure) it writes in the run folder (the figure in its ``figures/``)
OUTPUTS = {"ppo": ("samples.md", "summary.json", "ppo_curves.png"),
           "dpo": ("samples_dpo.md", "summary_dpo.json", "dpo_curves.png")}
RUNS_DIR = Path(__file__).resolve().parents[3] / "runs"         # <repo>/runs (git-ignored)
#: how a command made of stages goes on after Ctrl-C (minippo rlhf, minippo rlvr)
AGAIN = "the same command reuses the finished stages, resumes a stage from its checkpoint and evaluates again"


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (``ru_maxrss`` is in kB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def stage_configs(quick: bool = False, seed: int = 0):
    """``(SFTConfig, RMConfig, PPOConfig)`` of the main job (``quick``: the CI size)."""
    if quick:
        # SFTConfig.quick() alone writes mostly broken words; 600 steps at C = 64 give a policy worth aligning
        return (SFTConfig.quick(seed=seed, steps=600, n_embd=64, corpus_size=6000),
                RMConfig.quick(seed=seed), PPOConfig.quick(seed=seed))
    return SFTConfig(seed=seed), RMConfig(seed=seed), PPOConfig(seed=seed)


def dpo_config(quick: bool = False, seed: int = 0) -> DPOConfig:
    """The main job's DPOConfig for ``--method dpo`` (``quick``: the CI size)."""
    return DPOConfig.quick(seed=seed) if quick else DPOConfig(seed=seed)


def default_cache_dir(quick: bool = False, seed: int = 0) -> Path:
    """Where lessons keep the SFT and reward-model stages they share: ``runs/cache/main-seed<k>-<kernel>-<hash>``
    in the repository (resolved from the package location, never the working directory), or this user's own
    temporary folder for ``quick`` runs (the smoke tests; :func:`minippo.runs.user_temp_dir`). ``<hash>``
    identifies the stage configs, so changed defaults never reuse a stale cache; ``<kernel>`` is the OpenBLAS
    kernel (:func:`minippo.blas.blas_core_name`): stages trained under another kernel hold other numbers, so
    ``OPENBLAS_CORETYPE=Haswell`` builds its own."""
    sft_cfg, rm_cfg, _ = stage_configs(quick, seed)
    return cache_folder("main", [sft_cfg.to_dict(), rm_cfg.to_dict()], seed, quick)


def cache_folder(prefix: str, configs, seed: int, quick: bool) -> Path:
    """``runs/cache/<prefix>-seed<k>-<kernel>-<hash>`` (quick: ``quick-<prefix>-...`` in this user's temporary
    folder): the one naming of every cached stage. ``<hash>`` identifies ``configs`` (JSON-able), ``<kernel>``
    the OpenBLAS kernel (:func:`minippo.blas.blas_core_name`): a stage trained under another kernel holds other
    numbers, so each kernel builds its own and a run never depends on which kernel built the cache first."""
    key = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()[:8]
    name = f"{prefix}-seed{seed}-{blas_core_name() or 'blas'}-{key}"
    return user_temp_dir("cache") / f"quick-{name}" if quick else RUNS_DIR / "cache" / name


#: what building the shared SFT and reward-model stages costs, in seconds on 2 cores (quick: the CI size),
#: printed before a build so that nobody waits in silence. Measured with `prepare_stages` into an empty
#: folder: 64 s of CPU (quick: 17 s) on a busy 2-core machine; inside lesson 14 from a cold cache, 83 s wall
#: at load average ~4 (85 s of CPU for the whole lesson, 28 s with the cache); on an idle machine
#: `minippo rlhf` spends 28 s + 23 s wall in the same two stages.
BUILD_SECONDS = {False: 60, True: 15}


def stages_cached(folder) -> bool:
    """Whether ``folder`` already holds the finished SFT and reward-model stages."""
    folder = Path(folder)
    return has_checkpoint(folder / "sft" / "model") and has_checkpoint(folder / "rm" / "model")


def announce_stderr(line: str) -> None:
    """What a lesson says about the shared stages (building, reusing, waiting), on stderr: the lesson's own
    output on stdout is the same whether the cache was there or not."""
    print(line, file=sys.stderr, flush=True)


def trained_under(model_dir) -> str | None:
    """The OpenBLAS kernel a saved model was trained under (``blas_kernel`` in its state.json, written by
    :func:`minippo.rlhf.checkpoint.save_model`; None for a model saved before it was recorded)."""
    state = read_json(checkpoint_folder(model_dir) / STATE)
    return state.get("blas_kernel") if isinstance(state, dict) else None


def main_job_run(quick: bool = False, seed: int = 0) -> Path | None:
    """The newest run of ``minippo rlhf`` in a ``runs/`` folder (the repository's, or the working directory's:
    where ``minippo rlhf`` writes by default) whose finished SFT and reward-model stages were made with the
    configs of :func:`stage_configs` (their stored configs compared by :func:`check_reuse`, nothing written)
    and under this process's OpenBLAS kernel (``blas_kernel`` in their state: the cache is the kernel's own), or
    None. Only for the default size: the quick lessons never depend on what a user ran."""
    if quick:
        return None
    sft_cfg, rm_cfg, _ = stage_configs(quick, seed)
    found = []
    for root in dict.fromkeys([RUNS_DIR, Path.cwd().resolve() / "runs"]):
        for run in sorted(root.iterdir()) if root.is_dir() else ():
            if run.name in ("cache", "figures") or not stages_cached(run):
                continue
            try:
                check_reuse(run, sft_cfg, rm_cfg, None, ("sft", "rm"))
                kernels = {trained_under(run / s / "model") for s in ("sft", "rm")}
            except (ValueError, OSError, KeyError):         # made with another config, or unreadable: not ours
                continue
            if kernels == {blas_core_name()}:               # trained under this OpenBLAS kernel: the cache's numbers
                found.append(run)
    return max(found, key=lambda run: (run / "rm" / "model").stat().st_mtime, default=None)


def prepare_stages(cache_dir=None, *, quick: bool = False, seed: int = 0, progress: bool = False, log=print,
                   announce=announce_stderr) -> Path:
    """The main job's SFT and reward-model stages, built once into ``cache_dir`` (default
    :func:`default_cache_dir`) and reused afterwards; returns the folder holding ``sft/`` and ``rm/``
    (pass them to ``minippo.rlhf.run.trainer.load_stages`` / ``run_ppo``).

    The default cache of the default size is not built when ``minippo rlhf`` already made the same two stages
    (:func:`main_job_run`): they are copied from that run (which is only read) and checked like any stored
    stage. ``log`` receives the stages' own lines; ``announce`` (default: stderr) one line before a build or a
    copy, saying what is built or copied, where and, for a build, about how long it takes
    (:data:`BUILD_SECONDS`), one line after a build, and the line saying that another process is building the
    same folder (then this one waits for it).
    """
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir(quick, seed)
    # another lesson building the same cache: wait for it (announced: a student would wait in silence)
    with run_lock(folder, wait=True, log=announce):
        source = None
        if not stages_cached(folder) and cache_dir is None and not any((folder / s).exists() for s in ("sft", "rm")):
            source = main_job_run(quick, seed)
        if source is not None:
            announce(f"Reusing the SFT policy and reward model of the main-job run {source} (the same configs, "
                     f"checked): copied into {folder}; {source} is only read.")
            for name in ("sft", "rm"):
                shutil.copytree(source / name, folder / name, ignore=shutil.ignore_patterns(LOCK_FILE))
        if stages_cached(folder):
            run_pipeline(folder, quick=quick, seed=seed, progress=progress, log=log, stages=("sft", "rm"))
            return folder
        announce(f"Building the main job's SFT policy and reward model{' (quick size)' if quick else ''} once, "
                 f"into {folder}: about {BUILD_SECONDS[quick]} s on 2 cores. Every later run that needs them "
                 f"reuses it.")
        t = time.perf_counter()
        run_pipeline(folder, quick=quick, seed=seed, progress=progress, log=log, stages=("sft", "rm"))
        announce(f"Built in {time.perf_counter() - t:.0f} s; reused from now on.")
    return folder


def run_pipeline(out_dir, *, quick: bool = False, seed: int = 0, progress: bool = True, log=print,
                 sft_cfg=None, rm_cfg=None, ppo_cfg=None, n_eval: int | None = None, evaluate: bool = True,
                 figures: bool = True, callback=None, stages=("sft", "rm", "ppo"), method: str = "ppo",
                 dpo_cfg=None) -> dict:
    """Run (or reuse) every stage into ``out_dir``; returns the summary dict (also ``summary.json``).

    ``sft_cfg`` / ``rm_cfg`` / ``ppo_cfg`` / ``n_eval`` override the defaults of :func:`stage_configs`;
    ``callback`` is passed to the PPO trainer (called after every iteration). ``stages=("sft", "rm")``
    stops before PPO (no evaluation, no figure, no summary file). Stages already in ``out_dir`` are reused
    only under the reuse rule of the module docstring (:func:`check_reuse`); ``out_dir`` is locked meanwhile.
    ``method="dpo"``: stage 3 is DPO (``dpo_cfg``, default ``DPOConfig`` / ``DPOConfig.quick()``) into
    ``<out>/dpo`` on the reward-model stage's pairs, judged by the same evaluation (its training
    curves: ``dpo_curves.png`` in the run's figures folder).
    """

    out = Path(out_dir)
    d_sft, d_rm, d_ppo = stage_configs(quick, seed)
    sft_cfg, rm_cfg, ppo_cfg = sft_cfg or d_sft, rm_cfg or d_rm, ppo_cfg or d_ppo
    check_choice("method", method, ("ppo", "dpo"))
    if method == "dpo":                                         # stage 3 is DPO: <out>/dpo instead of <out>/ppo
        dpo_cfg = dpo_cfg or dpo_config(quick, seed)
        stages = tuple("dpo" if s == "ppo" else s for s in stages)
    def refuse() -> None:                    # before anything is written, the lock file included
        check_run_folder(out, STAGES, "minippo rlhf")
        check_reuse(out, sft_cfg, rm_cfg, ppo_cfg, stages, dpo_cfg=dpo_cfg)

    # Ctrl-C between and after the stages (the evaluation, the figure): what is on disk (a stage names its own)
    with run_lock(out, check=refuse), stage("minippo rlhf", out, on_disk=lambda: stages_kept(out, STAGES),
                                            restart=AGAIN):
        return _run_stages(out, quick, seed, progress, log, sft_cfg, rm_cfg, ppo_cfg, n_eval, evaluate, figures,
                           callback, stages, dpo_cfg)


def check_reuse(out: Path, sft_cfg, rm_cfg, ppo_cfg, stages=("sft", "rm", "ppo"), *, dpo_cfg=None) -> None:
    """The reuse rule: every stage already in ``out`` (finished, or with a checkpoint to resume) must have been
    made with the requested config, else :class:`minippo.runs.ConfigMismatch` naming the stage, the differing
    fields and how to start fresh. Only the stored JSON is read (the weights are checked when loaded). A
    ``"dpo"`` stage (``--method dpo``) is checked against ``dpo_cfg`` the same way."""
    names = [n for n in ("sft", "rm", "ppo", "dpo") if n in stages]
    found = [(n, out / n / sub, key, comparable(cfg) if n == "ppo" else cfg.to_dict(), ignore)
             for n, sub, key, cfg, ignore in (("sft", "model", "sft_config", sft_cfg, RESULT_NEUTRAL),
                                              ("sft", "checkpoint", "sft_config", sft_cfg, RESULT_NEUTRAL),
                                              ("rm", "model", "rm_config", rm_cfg, ()),
                                              ("ppo", "policy", "ppo_config", ppo_cfg, RESUME_NEUTRAL),
                                              ("ppo", "checkpoint", "ppo_config", ppo_cfg, RESUME_NEUTRAL),
                                              ("dpo", "policy", "dpo_config", dpo_cfg, DPO_RESUME_NEUTRAL),
                                              ("dpo", "checkpoint", "dpo_config", dpo_cfg, DPO_RESUME_NEUTRAL))
             if n in names and has_checkpoint(out / n / sub)]
    for name, folder, key, requested, ignore in found:
        stored = stored_config(folder, key)
        if name == "ppo":
            stored = comparable(config_from_dict(stored))             # its class; old run folders translated
        if name == "dpo":
            stored = DPOConfig.from_dict(stored).to_dict()
        if name in ("ppo", "dpo") and folder.name == "policy":
            ignore = ("checkpoint_every",)                            # a finished run: its length is its result
        check_stage_config(out, names, name, folder, stored, requested, ignore=ignore)


def stored_sft_numbers(model_dir) -> dict:
    """The SFT block of ``summary.json`` (parameter count, ln V, and the initial, held-out and unigram losses)
    read from a finished SFT model's state.json, as the run that trained it wrote them; what a model saved by
    an older version does not record is left out (what loads the model names a file it cannot read)."""
    try:
        state = read_json(checkpoint_folder(model_dir) / STATE)
        cfg = GPTConfig.from_dict(state["gpt_config"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    numbers = {"n_params": cfg.num_params(), "ln_V": math.log(cfg.vocab_size)}
    for key in ("initial_loss", "heldout_loss", "unigram_loss"):
        if isinstance(state.get(key), (int, float)):
            numbers[key] = float(state[key])
    return numbers


def _run_stages(out: Path, quick, seed, progress, log, sft_cfg, rm_cfg, ppo_cfg, n_eval, evaluate, figures,
                callback, stages, dpo_cfg=None) -> dict:
    n_eval = n_eval or (64 if quick else 256)
    summary = {"out": str(out), "quick": quick, "seed": seed, "seconds": {}}
    t_all = time.perf_counter()

    # stage 1: corpus -> tokenizer -> SFT
    t = time.perf_counter()
    if has_checkpoint(out / "sft" / "model"):
        log(f"[1/3] SFT: reusing {out / 'sft' / 'model'} (same config; delete it to retrain)")
        summary["sft"] = stored_sft_numbers(out / "sft" / "model")    # those of the run that trained it
    else:
        log(f"[1/3] SFT: corpus ({sft_cfg.corpus_size} sentences) -> tokenizer (V={sft_cfg.vocab_size}) -> "
            f"TinyGPT ({sft_cfg.n_layer} layers, C={sft_cfg.n_embd}), {sft_cfg.steps} steps")
        r = train_sft(sft_cfg, out / "sft", resume=True, progress=progress, log=log)
        summary["sft"] = {k: r[k] for k in ("n_params", "initial_loss", "heldout_loss", "unigram_loss", "ln_V")}
        log(f"      held-out loss {r['heldout_loss']:.3f} nats/token (unigram {r['unigram_loss']:.3f}, "
            f"ln V {r['ln_V']:.3f})")
    summary["seconds"]["sft"] = time.perf_counter() - t

    # stage 2: preference pairs -> reward model
    t = time.perf_counter()
    if has_checkpoint(out / "rm" / "model"):
        log(f"[2/3] reward model: reusing {out / 'rm' / 'model'} (same config)")
        stored = stored_config(out / "rm" / "model", "rm_summary")     # the numbers of the run that trained it
        summary["rm"] = {k: stored[k] for k in ("heldout_accuracy", "heldout_gold_accuracy", "pearson", "spearman")}
    else:
        log(f"[2/3] reward model: preference pairs of SFT samples labelled by the simulated human -> "
            f"Bradley-Terry, {rm_cfg.epochs} epoch(s)")
        r = train_reward_model(rm_cfg, out / "sft", out / "rm", progress=progress)
        summary["rm"] = {k: r[k] for k in ("heldout_accuracy", "heldout_gold_accuracy", "pearson", "spearman")}
        log(f"      held-out accuracy {r['heldout_accuracy']:.3f} (gold order {r['heldout_gold_accuracy']:.3f}); "
            f"score vs gold on fresh samples: Pearson {r['pearson']:.3f}")
    summary["seconds"]["rm"] = time.perf_counter() - t
    if "dpo" in stages:                                         # --method dpo: stage 3 is DPO
        return _dpo_stage(out, summary, t_all, dpo_cfg, n_eval, seed, progress, log)
    if "ppo" not in stages:
        return summary

    # stage 3: PPO
    t = time.perf_counter()
    if has_checkpoint(out / "ppo" / "policy"):
        check_stage_inputs(out, "ppo", {"sft": out / "sft" / "model", "rm": out / "rm" / "model"})
        log(f"[3/3] PPO: reusing {out / 'ppo' / 'policy'} (same config)")
    else:
        resuming = has_checkpoint(out / "ppo" / "checkpoint")
        log(f"[3/3] PPO: {'resuming from ' + str(out / 'ppo' / 'checkpoint') + ', ' if resuming else ''}"
            f"{ppo_cfg.iterations} iterations x {ppo_cfg.batch_size} responses, {ppo_cfg.update_epochs} epochs of "
            f"{ppo_cfg.num_minibatches} minibatches; KL controller {ppo_cfg.kl_ref_controller} "
            f"(target {ppo_cfg.kl_ref_target:g} nats/response)")
        run_ppo(ppo_cfg, out / "sft", out / "rm", out / "ppo", resume=True, progress=progress, callback=callback)
    summary["seconds"]["ppo"] = time.perf_counter() - t
    records = read_metrics(out / "ppo" / "metrics.jsonl")

    if evaluate:
        t = time.perf_counter()
        summary["eval"] = evaluate_stages(out, ppo_cfg, n_eval, seed, log)
        summary["seconds"]["eval"] = time.perf_counter() - t
    if figures:
        ref = {"gold/score": summary["eval"]["sft"]["gold_mean"]} if evaluate else None
        path = out / "figures" / OUTPUTS["ppo"][2]
        plot_run(records, path, reference=ref, title=f"RLHF-PPO run {out.name}",
                 kl_ref_target=ppo_cfg.kl_ref_target if ppo_cfg.kl_ref_controller == "adaptive" else None)
        summary["figure"] = str(path)
    return _finish(out, summary, t_all, log)


def _dpo_stage(out: Path, summary: dict, t_all: float, dpo_cfg: DPOConfig, n_eval: int, seed: int, progress: bool,
               log) -> dict:
    """Stage 3 as DPO into ``<out>/dpo``, then the evaluation and ``summary.json`` (the ``--method dpo`` branch)."""
    t = time.perf_counter()
    if has_checkpoint(out / "dpo" / "policy"):
        check_stage_inputs(out, "dpo", {"sft": out / "sft" / "model",
                                        "pairs": pairs_folder(out / "rm") / "pairs.npz"})
        log(f"[3/3] DPO: reusing {out / 'dpo' / 'policy'} (same config)")
    else:
        resuming = has_checkpoint(out / "dpo" / "checkpoint")
        log(f"[3/3] DPO: {'resuming from ' + str(out / 'dpo' / 'checkpoint') + ', ' if resuming else ''}"
            f"{dpo_cfg.steps} steps x {dpo_cfg.batch_prompts} prompts (all their pairs), loss {dpo_cfg.loss_type}, "
            f"beta {dpo_cfg.beta:g}, on the reward model's preference pairs and split")
        run_dpo(dpo_cfg, out / "sft", out / "rm", out / "dpo", resume=True, progress=progress)
    summary["method"] = "dpo"
    summary["seconds"]["dpo"] = time.perf_counter() - t
    t = time.perf_counter()
    summary["eval"] = evaluate_stages(out, dpo_cfg, n_eval, seed, log, stage="dpo")
    summary["seconds"]["eval"] = time.perf_counter() - t
    path = out / "figures" / OUTPUTS["dpo"][2]
    plot_run(read_metrics(out / "dpo" / "metrics.jsonl"), path, method="dpo", title=f"RLHF-DPO run {out.name}",
             reference={"gold/score": summary["eval"]["sft"]["gold_mean"]})
    summary["figure"] = str(path)
    return _finish(out, summary, t_all, log, method="dpo")


def _finish(out: Path, summary: dict, t_all: float, log, method: str = "ppo") -> dict:
    """The end of every method's run: total time, peak memory, its summary file and the closing line."""
    summary["seconds"]["total"] = time.perf_counter() - t_all
    summary["peak_rss_mb"] = peak_rss_mb()
    atomic_write_text(out / OUTPUTS[method][1], json.dumps(summary, indent=1))
    log(f"done in {summary['seconds']['total']:.1f} s "
        f"({', '.join(f'{k} {v:.1f} s' for k, v in summary['seconds'].items() if k != 'total')}); "
        f"peak RSS {summary['peak_rss_mb']:.0f} MB; results in {out}")
    return summary


def evaluate_stages(out: Path, ppo_cfg, n_eval: int, seed: int, log=print, stage: str = "ppo") -> dict:
    """SFT vs the ``stage`` policy (``"ppo"`` or ``"dpo"``; ``ppo_cfg`` its config) on the same ``n_eval`` prompts
    (fresh samples): gold, RM, KL; writes its samples file (:data:`OUTPUTS`: ``samples.md`` for PPO)."""
    sft_model, tokenizer, reward_model, _ = load_stages(out / "sft", out / "rm")
    policy, _ = load_model(out / stage / "policy")
    prompts = sample_prompts(n_eval, seed=int(np.random.default_rng([seed, SEED_EVAL]).integers(2**31)))
    kw = dict(max_new_tokens=ppo_cfg.max_new_tokens, temperature=ppo_cfg.temperature)
    with single_blas_thread():
        before = evaluate_policy(sft_model, sft_model, reward_model, tokenizer, prompts,
                                 rng=np.random.default_rng([seed, SEED_EVAL, 1]), **kw)
        after = evaluate_policy(policy, sft_model, reward_model, tokenizer, prompts,
                                rng=np.random.default_rng([seed, SEED_EVAL, 2]), **kw)
    keys = ("gold_mean", "gold_std", "rm_mean", "kl_mean", "kl_exact_mean", "length_mean", "ended_frac")
    name = stage.upper()
    res = {"n_prompts": n_eval, "sft": {k: before[k] for k in keys}, stage: {k: after[k] for k in keys}}
    target = ""
    if stage == "ppo":
        res["kl_ref_target"] = ppo_cfg.kl_ref_target
        target = f"; target {ppo_cfg.kl_ref_target:g}"
    res["gold_gain_in_sft_std"] = (after["gold_mean"] - before["gold_mean"]) / max(before["gold_std"], 1e-12)
    res["disagreements"] = disagreements(before, after)["counts"]       # the marks of samples.md, all prompts
    text = (f"# Samples before and after {name}\n\nThe same {min(16, n_eval)} prompts (of {n_eval} evaluated), one fresh "
            f"sample each at temperature {ppo_cfg.temperature:g}; gold = the simulated human, RM = the normalised "
            f"reward model. A sample that reached max_new_tokens = {ppo_cfg.max_new_tokens} without its EOS ends "
            f"with \"{TRUNCATED_MARK.strip()}\": it was cut there and scored as it stands.\n\n"
            f"| policy | gold mean | gold std | RM mean | KL to SFT (k1 / exact, nats per response) | length |\n"
            f"|---|---|---|---|---|---|\n"
            + "".join(f"| {who} | {r['gold_mean']:+.3f} | {r['gold_std']:.3f} | {r['rm_mean']:+.3f} | "
                      f"{r['kl_mean']:.2f} / {r['kl_exact_mean']:.2f} | {r['length_mean']:.1f} |\n"
                      for who, r in (("SFT", before), (name, after)))
            + "\n" + samples_markdown(prompts, before, after, names=("SFT", name)) + "\n")
    atomic_write_text(out / OUTPUTS[stage][0], text)
    log(f"evaluation on {n_eval} prompts: gold SFT {before['gold_mean']:+.3f} (std {before['gold_std']:.3f}) -> "
        f"{name} {after['gold_mean']:+.3f}  ({res['gold_gain_in_sft_std']:+.2f} SFT std); RM "
        f"{before['rm_mean']:+.2f} -> {after['rm_mean']:+.2f}; KL to SFT {after['kl_mean']:.2f} nats/response "
        f"(exact {after['kl_exact_mean']:.2f}{target}); samples in {out / OUTPUTS[stage][0]}")
    return res
