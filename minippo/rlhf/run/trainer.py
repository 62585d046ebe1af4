"""Stage 3's run plumbing around one iteration: the four models, timing, NaN guard, metrics, checkpoints, resume.

Legend: B batch (responses), Tn response tokens.

:class:`PPOTrainer` builds the :class:`~minippo.rlhf.ppo.PPOState` (actor = a copy of the SFT policy, the
reference = a frozen copy, the critic, the reward model, AdamW, the KL controller, one
``np.random.Generator``) and runs iterations: each :meth:`PPOTrainer.step` calls the iteration of the
algorithm its config configures, once (:func:`iteration`: :func:`minippo.rlhf.ppo.ppo_iteration` for a
:class:`~minippo.rlhf.ppo_config.PPOConfig`; the knobs' and the critic-free family's for theirs), times it,
computes the monitoring that is not part of the algorithm (:func:`iteration_record`: the gold score, the
exact KL, the metric summaries), writes the record and, every ``checkpoint_every`` iterations, a checkpoint.

Run folder (``out_dir``)::

    config.json      the config (its class: :func:`minippo.rlhf.run.configs.config_from_dict`)
    metrics.jsonl    one record per iteration (names: minippo.rlhf.metrics.GLOSSARY)
    checkpoint/      every ``checkpoint_every`` iterations and at the end, atomically: actor and critic
                     weights and AdamW moments (safetensors), config, iteration, KL-controller state, the
                     knobs' KL-adapted learning rate and value-normalisation statistics, the RNG state and the
                     inputs' identities (JSON); ``resume=True`` continues from it and the metrics then equal an
                     uninterrupted run's (tested, timing entries aside)
    policy/          the final actor + tokenizer (``load_model``), for evaluation and later stages
    rollouts/        per-token dumps ``iter_NNNN.npz`` when ``dump_rollouts``

The NaN guard: a non-finite score, value, loss or gradient norm raises ``ValueError`` naming the metric (or
loss term), the iteration, the first non-finite parameter (else the largest one), and what is on disk (the last good
checkpoint, or that none was written yet); nothing computed after it is applied.

The run folder follows :mod:`minippo.runs`: the trainer holds its lock from construction until it is closed
(or garbage-collected, or its process dies); a folder holding a checkpoint is resumed only with
``resume=True`` and the same config (every field but ``iterations`` and ``checkpoint_every``) and inputs (the SFT
model and the reward model :func:`run_ppo` loads, by the SHA-256 of their weights files), and refused otherwise; the
checkpoint is validated whole (every tensor's name, shape and dtype from the
safetensors header, then its finiteness, the config, iteration, KL coefficient, RNG and value-normalisation state, both
optimizers) before anything is assigned or ``metrics.jsonl`` is rewritten.
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import UsageError, check_choice, check_range
from minippo.io import (STATE, RunWarning, array_specs, checkpoint_folder, has_checkpoint, in_file, load_checkpoint,
                        read_json, rng_from_state, rng_state, save_checkpoint)
from minippo.nn.gpt import TinyGPT
from minippo.nn.optim import AdamW
from minippo.progress import progress_bar
from minippo.rl.kl_control import KL_LR_MAX, KL_LR_MIN, AdaptiveKLController, FixedKLController, PPOPaperKLController
from minippo.rl.losses import kl_exact_from_logits
from minippo.rl.masked import explained_variance
from minippo.rlhf.checkpoint import resolve_model_dir, save_model
from minippo.rlhf.critic import ValueNorm, build_critic
from minippo.rlhf.data.batches import encode_sequences, split_corpus
from minippo.rlhf.data.corpus import PROMPTS, generate_corpus
from minippo.rlhf.corrected import CorrectedConfig, CorrectedState, corrected_iteration
from minippo.rlhf.data.gold import gold_scores
from minippo.rlhf.generate import check_response_fits
from minippo.rlhf.grpo import GRPOConfig, grpo_iteration
from minippo.rlhf.metrics import first_minibatch, rollout_metrics, update_metrics
from minippo.rlhf.ppo import PPOState, PromptTable, forward_response, ppo_iteration
from minippo.rlhf.ppo_config import ADAM, PPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig, KnobsState, knobs_iteration
from minippo.rlhf.reward_model import RewardModel
from minippo.rlhf.rm_train import load_sft
from minippo.rlhf.run.configs import comparable, config_from_dict
from minippo.runs import RunFolderTrainer, assign_arrays, check_same_config, input_identity

CHECKPOINT_FORMAT = "minippo.ppo/3"
#: checkpoints this version reads: /2 (before issue 25: one config class, value_norm and kl_old_lr always stored)
READABLE_FORMATS = ("minippo.ppo/2", CHECKPOINT_FORMAT)
#: config fields a resume may change: the checkpoint cadence, and the number of iterations (a run extended
#: or shortened; with a non-constant lr schedule the rate from the resumed iteration on follows the new
#: count, so the run is no uninterrupted run's: :meth:`PPOTrainer.load` warns)
RESUME_NEUTRAL = ("iterations", "checkpoint_every")


def iteration(state: PPOState, cfg):
    """One iteration of the algorithm ``cfg`` configures, each in its own file: ``(rollout, update)``."""
    if isinstance(cfg, GRPOConfig):
        return grpo_iteration(state, cfg)
    if isinstance(cfg, KnobsConfig):
        return knobs_iteration(state, cfg)
    if isinstance(cfg, CorrectedConfig):
        return corrected_iteration(state, cfg)
    return ppo_iteration(state, cfg)


def iteration_record(state: PPOState, cfg, ro, update: dict, old_actor: TinyGPT | None = None,
                     gold: bool = True) -> dict:
    """The metrics of one iteration (:data:`minippo.rlhf.metrics.GLOSSARY`, timing aside) from its rollout and
    update, with the monitoring that is not part of the algorithm: the gold score of the texts, the critic's
    explained variance and, given ``old_actor`` (pi_old: the actor before the iteration), the exact KL to
    pi_ref from the full distributions (the same forward passes as the rollout's). ``gold=False``: no
    ``gold/score`` (a task other than the review corpus, whose simulated human it is)."""
    record = rollout_metrics(ro, gold_scores(state.tokenizer.decode_batch(ro.sequences)) if gold else None)
    record["val/explained_variance"] = explained_variance(ro.values, ro.returns, ro.response_mask)
    record["kl_coef"] = update["kl_coef"]
    if old_actor is not None:
        logits = [forward_response(m, ro.sequences, ro.attn_mask, ro.prompt_len)[0] for m in (old_actor, state.ref)]
        per_token = kl_exact_from_logits(*logits, cfg.temperature)                          # (B, Tn)
        record["objective/kl_exact"] = float(np.mean((per_token * ro.response_mask).sum(axis=1)))
    record.update(update_metrics(update, cfg.max_grad_norm))
    record.update({k: v for k, v in update.items() if k.startswith("dapo/")})    # the critic-free family's
    return record


def make_kl_controller(cfg: PPOConfig):
    """The controller of the reward's beta chosen by ``cfg.kl_ref_controller`` (minippo.rl.kl_control)."""
    if cfg.kl_ref_controller == "fixed":
        return FixedKLController(cfg.kl_ref_coef)
    if cfg.kl_ref_controller == "ppo_paper":
        return PPOPaperKLController(cfg.kl_ref_coef, d_targ=cfg.kl_ref_target)
    return AdaptiveKLController(cfg.kl_ref_coef, target=cfg.kl_ref_target, horizon=cfg.kl_ref_horizon)


def make_state(cfg, sft_model: TinyGPT, reward_model, tokenizer, ptx_sequences=None, prompts=PROMPTS) -> PPOState:
    """The state of ``cfg``'s algorithm: actor and reference copies of ``sft_model``, the critic (a separate
    TinyGPT for canonical PPO and the knobs' ``critic="separate"``; none for the critic-free family and the
    knobs' shared or absent critic), AdamW of each, the KL controller, the seeded generator and the table of
    ``prompts`` (strings) the iterations draw from; the knobs'
    :class:`~minippo.rlhf.ppo_knobs.KnobsState` adds value normalisation and the PPO-ptx corpus."""
    knobs = isinstance(cfg, KnobsConfig)
    separate = not isinstance(cfg, GRPOConfig) and (not knobs or cfg.critic == "separate")
    critic = build_critic(cfg.critic_init, sft_model, reward_model, cfg.seed) if separate else None
    adam = dict(betas=cfg.adam_betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay) if knobs else ADAM
    critic_lr = cfg.critic_lr if knobs and cfg.critic_lr is not None else cfg.lr
    actor = sft_model.copy()
    models = dict(actor=actor, ref=sft_model.copy(), critic=critic, reward_model=reward_model, tokenizer=tokenizer,
                  opt_actor=AdamW(actor.params, lr=cfg.lr, **adam),
                  opt_critic=None if critic is None else AdamW(critic.params, lr=critic_lr, **adam),
                  kl_ctl=make_kl_controller(cfg), rng=np.random.default_rng(cfg.seed),
                  prompts=None if tokenizer is None else PromptTable.encode(tokenizer, prompts))
    if knobs:
        return KnobsState(**models, value_norm=ValueNorm(cfg.value_norm), ptx_sequences=ptx_sequences)
    return CorrectedState(**models) if isinstance(cfg, CorrectedConfig) else PPOState(**models)


class PPOTrainer(RunFolderTrainer):
    """RLHF stage 3 with actor, critic, reference and reward model; see the module docstring.

    Parameters
    ----------
    cfg : PPOConfig (canonical PPO), KnobsConfig (PPO with the knobs) or GRPOConfig (critic-free)
    sft_model : TinyGPT, the SFT policy: the actor starts as a copy, the reference IS a frozen copy
    reward_model : RewardModel (frozen; its normalised ``score``)
    tokenizer : Tokenizer
    out_dir : run folder for metrics, checkpoints and the final policy (None: nothing is written); locked
        (:class:`minippo.runs.RunLock`) until :meth:`close`
    resume : continue from ``out_dir/checkpoint`` when it exists (its config must equal ``cfg`` up
        to ``iterations`` and ``checkpoint_every``); without it a folder holding a checkpoint is refused
    ptx_sequences : list of int64 arrays ``<bos> ids <eos>`` (corpus text) for the knobs' PPO-ptx, or None
    log_exact_kl : also log ``objective/kl_exact`` (two more forward passes per iteration)
    dump_rollouts : write every iteration's rollout to ``rollouts/iter_NNNN.npz``
    inputs : what the models were loaded from, ``{"sft": ..., "rm": ...}`` (:func:`minippo.runs.input_identity`):
        recorded with every checkpoint; a resume given other ones is refused (:func:`minippo.runs.check_same_inputs`)

    ``state`` is the :class:`~minippo.rlhf.ppo.PPOState`; ``last_rollout`` the last iteration's experience
    and ``first_minibatch`` its update's first-minibatch ratio statistics (the lr = 0 check).
    """

    # minippo.runs.RunFolderTrainer: the run folder, its lock and records
    STAGE, UNIT, FORMATS = "PPO", "iteration", READABLE_FORMATS

    def __init__(self, cfg, sft_model: TinyGPT, reward_model, tokenizer, *, out_dir=None,
                 resume: bool = False, ptx_sequences=None, log_exact_kl: bool = False, dump_rollouts: bool = False,
                 inputs: dict | None = None):
        if not isinstance(cfg, (PPOConfig, GRPOConfig)):
            raise ValueError(f"`cfg` must be a PPOConfig, KnobsConfig or GRPOConfig, got {type(cfg).__name__}")
        if not isinstance(sft_model, TinyGPT):
            raise ValueError(f"`sft_model` must be a TinyGPT, got {type(sft_model).__name__}")
        if isinstance(cfg, KnobsConfig) and cfg.ptx_coef > 0 and not ptx_sequences:
            raise ValueError("`ptx_sequences` must hold corpus sequences when `cfg.ptx_coef` > 0 (PPO-ptx)")
        for name, flag in (("log_exact_kl", log_exact_kl), ("dump_rollouts", dump_rollouts)):
            if not isinstance(flag, bool):
                raise ValueError(f"`{name}` must be True or False, got {flag!r}")
        if tokenizer is not None:
            check_response_fits(cfg.max_new_tokens, tokenizer, self.prompt_pool(), sft_model.cfg.block_size)
        self.cfg, self.log_exact_kl, self.dump_rollouts = cfg, log_exact_kl, dump_rollouts
        self.state = make_state(cfg, sft_model, reward_model, tokenizer, ptx_sequences, self.prompt_pool())
        self.last_rollout, self.first_minibatch = None, None
        self._open_run_folder(out_dir, cfg.to_dict(), resume=resume, inputs=inputs)

    @property
    def actor(self) -> TinyGPT:
        return self.state.actor

    @property
    def iteration(self) -> int:
        return self.state.iteration

    done = iteration

    # ---- one iteration ------------------------------------------------------------------------

    def prompt_pool(self) -> list[str]:
        """Every prompt an iteration may draw (each must fit the model's block with ``max_new_tokens``): the
        corpus's :data:`~minippo.rlhf.data.corpus.PROMPTS`. A trainer of another task overrides it and
        :meth:`record` (``minippo.rlvr.trainer.RLVRTrainer``)."""
        return PROMPTS

    def record(self, rollout, update: dict, old_actor=None) -> dict:
        """The metrics of one iteration: :func:`iteration_record` (the gold score included)."""
        return iteration_record(self.state, self.cfg, rollout, update, old_actor)

    def _parameters(self) -> dict:
        """Every trained parameter by name ("actor.wte", "critic.head.w"): what a NaN stop searches."""
        s = self.state
        params = {"actor." + k: v for k, v in s.actor.params.items()}
        if s.critic is not None:
            params.update({"critic." + k: v for k, v in s.critic.params.items()})
        return params

    def step(self, callback=None) -> dict:
        """Run one iteration; returns its metrics record (also written to ``metrics.jsonl``)."""
        cfg, it = self.cfg, self.iteration
        old_actor = self.state.actor.copy() if self.log_exact_kl else None      # pi_old, for the exact KL
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            with single_blas_thread():      # small matrices: one BLAS thread is faster and deterministic
                rollout, update = iteration(self.state, cfg)
                t2, c2 = time.perf_counter(), time.process_time()
                record = self.record(rollout, update, old_actor)
        except ValueError as exc:           # the NaN guard, or bad data: say what is kept on disk
            raise self._stopped(exc, self._parameters(), it) from exc
        t1, c1 = update["clock_update"]     # when the update started
        record.update({"iteration": it, "episode": (it + 1) * cfg.batch_size,
                       "time/rollout": t1 - t0, "time/update": t2 - t1, "time/iteration": t2 - t0,
                       "time/cpu_rollout": c1 - c0, "time/cpu_update": c2 - c1})
        self.last_rollout, self.first_minibatch = rollout, first_minibatch(update)
        if self.out_dir is not None and self.dump_rollouts:
            rollout.save_npz(self.out_dir / "rollouts" / f"iter_{it:04d}.npz")
        self._write(record, cfg.checkpoint_every, cfg.iterations)
        if callback is not None:
            with single_blas_thread():       # callbacks run forward passes of the same small models
                callback(self, rollout, record)
        return record

    def train(self, until: int | None = None, *, progress: bool = False, callback=None) -> list[dict]:
        """Run iterations up to ``until`` (default ``cfg.iterations``); returns their metrics records.

        ``callback(trainer, rollout, record)`` is called after every iteration. At the end the policy is
        saved to ``out_dir/policy`` (when the run is complete).
        """
        until = self.cfg.iterations if until is None else min(int(until), self.cfg.iterations)
        records = []
        bar = progress_bar(range(self.iteration, until), initial=self.iteration, total=self.cfg.iterations,
                           desc="ppo", disable=not progress)
        with self.stage.running():                   # Ctrl-C: one line saying what is kept (minippo.runs)
            for _ in bar:
                r = self.step(callback)
                records.append(r)
                shown = {"score": f"{r['objective/scores']:+.2f}"}
                if "gold/score" in r:                # the corpus's simulated human (not in every task)
                    shown["gold"] = f"{r['gold/score']:+.2f}"
                bar.set_postfix(**shown, kl=f"{r['objective/kl']:.2f}")
        bar.close()
        if self.out_dir is not None and self.iteration == self.cfg.iterations:
            save_model(self.out_dir / "policy", self.actor, tokenizer=self.state.tokenizer,
                       extra_state={"ppo_config": self.cfg.to_dict(), "iteration": self.iteration,
                                    "inputs": self.inputs})
        return records

    # ---- checkpoints --------------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write everything needed to continue bitwise (see the module docstring), atomically."""
        s = self.state
        arrays = {"actor/" + k: v for k, v in s.actor.params.items()}
        a_moments, a_scalars = s.opt_actor.state_dict()
        arrays.update({"opt_actor/" + k: v for k, v in a_moments.items()})
        state = {"format": CHECKPOINT_FORMAT, "ppo_config": self.cfg.to_dict(), "iteration": s.iteration,
                 "opt_actor": a_scalars, "kl_coef": s.kl_ctl.value, "rng": rng_state(s.rng),
                 "gpt_config": s.actor.cfg.to_dict(), "inputs": self.inputs}
        if isinstance(s, KnobsState):
            state.update(value_norm=s.value_norm.state_dict(), kl_old_lr=s.kl_old_lr)
        if s.critic is not None:
            arrays.update({"critic/" + k: v for k, v in s.critic.params.items()})
            c_moments, state["opt_critic"] = s.opt_critic.state_dict()
            arrays.update({"opt_critic/" + k: v for k, v in c_moments.items()})
        path = save_checkpoint(directory, arrays, state)
        self._saved(s.iteration)
        return path

    def _expect(self) -> dict:
        """The tensors a checkpoint of this trainer holds: name -> (shape, dtype), from the live models."""
        s = self.state
        parts = [("actor/", s.actor.params), ("opt_actor/", s.opt_actor.state_dict()[0])]
        if s.critic is not None:
            parts += [("critic/", s.critic.params), ("opt_critic/", s.opt_critic.state_dict()[0])]
        return {k: v for prefix, arrays in parts for k, v in array_specs(arrays, prefix).items()}

    def load(self, directory) -> None:
        """Restore a checkpoint written by :meth:`save` (the config must match up to :data:`RESUME_NEUTRAL`).

        Everything is checked before anything is assigned: the config first (an old run folder's through
        :func:`minippo.rlhf.run.configs.config_from_dict`; another config, e.g. a GRPO run's resumed as
        PPO, is named by its fields, not by a critic's tensors it lacks), then the tensors against the live
        models (:func:`minippo.io.load_checkpoint` with ``expect``), then every entry of state.json (a
        :class:`minippo.io.CorruptFileError` naming the file and the entry)."""
        s = self.state
        state_path = checkpoint_folder(directory) / STATE
        with in_file(state_path):
            head = read_json(state_path)
            found = head.get("format") if isinstance(head, dict) else None
            if found not in READABLE_FORMATS:
                raise ValueError(f"`format` is {found!r}: not a PPO checkpoint of format {CHECKPOINT_FORMAT}")
            stored = comparable(config_from_dict(head["ppo_config"]))
        check_same_config(f"the PPO run in {Path(directory).parent}", stored, comparable(self.cfg),
                          ignore=RESUME_NEUTRAL, fresh=f"use another folder than {Path(directory).parent} (or delete it)")
        arrays, state = load_checkpoint(directory, self._expect())
        moments = {name: {k[len(name) + 1:]: v for k, v in arrays.items() if k.startswith(name + "/")}
                   for name in ("opt_actor", "opt_critic")}
        knobs = isinstance(s, KnobsState)
        with in_file(state_path):
            iteration = state["iteration"]
            check_range("iteration", iteration, 1, self.cfg.iterations, integer=True)
            check_range("kl_coef", state["kl_coef"], 0, None)
            rng = rng_from_state(state["rng"])
            value_norm = ValueNorm.from_state(state.get("value_norm", ValueNorm(False).state_dict()))
            if value_norm.enabled and not (knobs and self.cfg.value_norm):
                raise ValueError("`value_norm` must be disabled (no value normalisation in this run)")
            kl_old_lr = state.get("kl_old_lr")              # absent before kl_old_action, and without the knobs
            if knobs and self.cfg.kl_old_target is not None and self.cfg.kl_old_action == "adapt_lr":
                check_range("kl_old_lr", kl_old_lr, KL_LR_MIN, KL_LR_MAX)
            elif kl_old_lr is not None:
                raise ValueError(f"`kl_old_lr` must be null (no KL-adapted learning rate in this run), got {kl_old_lr!r}")
            if state["gpt_config"] != s.actor.cfg.to_dict():
                raise ValueError(f"`gpt_config` {state['gpt_config']} is not the SFT model's {s.actor.cfg.to_dict()}")
            s.opt_actor.check_state_dict(moments["opt_actor"], state["opt_actor"])
            if s.critic is not None:
                s.opt_critic.check_state_dict(moments["opt_critic"], state["opt_critic"])
        if stored["iterations"] != self.cfg.iterations and self.cfg.lr_schedule != "constant":   # it does resume
            warnings.warn(f"the PPO run in {Path(directory).parent} was started for {stored['iterations']} iterations "
                          f"and resumes for {self.cfg.iterations}: its {self.cfg.lr_schedule} lr schedule follows the "
                          f"new count from here on (not what an uninterrupted run of either length computes)",
                          RunWarning, stacklevel=3)
        # everything is checked: assign (in place: the optimizers hold the parameter arrays)
        assign_arrays(s.actor.params, arrays, "actor/", source=directory)
        s.opt_actor.load_state_dict(moments["opt_actor"], state["opt_actor"])
        if s.critic is not None:
            assign_arrays(s.critic.params, arrays, "critic/", source=directory)
            s.opt_critic.load_state_dict(moments["opt_critic"], state["opt_critic"])
        s.kl_ctl.value, s.rng, s.iteration = float(state["kl_coef"]), rng, iteration
        if knobs:
            s.value_norm, s.kl_old_lr = value_norm, None if kl_old_lr is None else float(kl_old_lr)
        self._saved(iteration)


# ----------------------------------------------------------------------------------------------
# running the stage from the previous stages' folders
# ----------------------------------------------------------------------------------------------

def load_stages(sft_dir, rm_dir):
    """``(sft_model, tokenizer, reward_model, sft_state)`` from an SFT run folder (or its ``model/``) and
    a reward-model run folder (or its ``model/``)."""
    sft_model, tokenizer, sft_state = load_sft(sft_dir)
    rm_folder = Path(rm_dir) / "model" if has_checkpoint(Path(rm_dir) / "model") else Path(rm_dir)
    reward_model, _ = RewardModel.load(rm_folder)
    return sft_model, tokenizer, reward_model, sft_state


def sft_training_sequences(sft_state: dict, tokenizer, split: str = "train") -> list:
    """The SFT run's own training sentences as ``<bos> ids <eos>`` arrays (the PPO-ptx "pretraining" data),
    regenerated from the SFT config saved with the model (same corpus seed, same split).

    ``split="heldout"``: the SFT run's held-out sentences instead (never trained on by SFT nor by PPO-ptx):
    the corpus on which lesson 18 measures the alignment tax.
    """

    check_choice("split", split, ("train", "heldout"))
    c = sft_state["sft_config"]
    train_texts, held_texts = split_corpus(generate_corpus(c["corpus_size"], seed=c["seed"]), c["heldout_frac"])
    return encode_sequences(tokenizer, train_texts if split == "train" else held_texts, c["block_size"])[0]


def run_ppo(cfg, sft_dir, rm_dir, out_dir, *, resume: bool = False, progress: bool = True, callback=None,
            **options) -> PPOTrainer:
    """Stage 3 from the saved SFT and reward-model folders into ``out_dir``; returns the finished trainer
    (``options``: :class:`PPOTrainer`'s ``log_exact_kl`` and ``dump_rollouts``). A checkpoint in ``out_dir`` is
    resumed only from the same two models (the SHA-256 of their weights files)."""
    sft_model, tokenizer, reward_model, sft_state = load_stages(sft_dir, rm_dir)
    inputs = {"sft": input_identity(resolve_model_dir(sft_dir)), "rm": input_identity(resolve_model_dir(rm_dir))}
    knobs_ptx = isinstance(cfg, KnobsConfig) and cfg.ptx_coef > 0
    if knobs_ptx and "sft_config" not in sft_state:      # a PPO policy or an imported model: no corpus to rebuild
        raise UsageError(f"`ptx_coef` > 0 trains on the SFT run's own corpus, which {sft_dir} does not record (no "
                         f"sft_config in its state.json): give the model of `minippo sft`")
    ptx = sft_training_sequences(sft_state, tokenizer) if knobs_ptx else None
    trainer = PPOTrainer(cfg, sft_model, reward_model, tokenizer, out_dir=out_dir, resume=resume, ptx_sequences=ptx,
                         inputs=inputs, **options)
    trainer.train(progress=progress, callback=callback)
    return trainer
