"""The run plumbing around :mod:`minippo.rlhf.dpo`: the two models, timing, evaluation, NaN guard, checkpoints, resume.

Legend: R response rows, N pairs.

:class:`DPOTrainer` builds the :class:`~minippo.rlhf.dpo.DPOState` (the policy = a copy of the SFT model, the
reference = a frozen copy, one AdamW, the reward-model stage's train / held-out pairs) and runs steps: each
:meth:`DPOTrainer.step` calls :func:`minippo.rlhf.dpo.dpo_step`, every ``eval_every`` steps (and after the
last; never when it is 0) evaluates, then writes the metrics record and, every ``checkpoint_every`` steps, a checkpoint.

The evaluation judges the policy like the PPO runs are judged: the DPO metrics on the held-out pairs
(``eval_*``), and fresh samples for ``n_eval`` fixed prompts (the same prompts and sampling seed at every
evaluation: the differences between evaluations are the policy's) scored by the gold function, with the
exact KL(pi || pi_ref) per response (:func:`minippo.rlhf.run.evaluate.evaluate_policy`).

Run folder (``out_dir``)::

    config.json      the DPOConfig
    metrics.jsonl    one record per step (names: minippo.rlhf.metrics.DPO_GLOSSARY)
    checkpoint/      every ``checkpoint_every`` steps and at the end, atomically: the policy and the AdamW
                     moments (safetensors), config, step, the pairs' description and the inputs' identities
                     (JSON); the batch order and the evaluation samples are pure functions of (seed, step), so
                     ``resume=True`` continues to the same metrics as an uninterrupted run (tested, timing
                     entries aside)
    policy/          the final policy + tokenizer (``load_model``), for evaluation

The NaN guard: a non-finite log-prob, loss or gradient norm raises ``ValueError`` naming the metric, the step,
the first non-finite parameter (or the largest one) and what is on disk (the last good checkpoint, or that none
was written yet); nothing computed after it is applied.

The run folder follows :mod:`minippo.runs` like the PPO run's: the trainer holds its lock from construction
until it is closed (or garbage-collected, or its process dies); a folder holding a checkpoint is resumed only
with ``resume=True``, the same config (every field but :data:`RESUME_NEUTRAL`) and the same inputs (the SFT model and
the pairs :func:`run_dpo` loads, by the SHA-256 of their files, and the pairs' split), and refused otherwise; the
checkpoint is validated whole (every tensor's name, shape, dtype and finiteness against the live model and
optimizer, the config, the step, the model config, the optimizer's scalars) before anything is assigned or
``metrics.jsonl`` is rewritten.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import check_range
from minippo.io import STATE, array_specs, checkpoint_folder, in_file, load_checkpoint, save_checkpoint
from minippo.nn.gpt import TinyGPT
from minippo.nn.optim import AdamW
from minippo.progress import progress_bar
from minippo.rlhf import dpo
from minippo.rlhf.checkpoint import resolve_model_dir, save_model
from minippo.rlhf.data.corpus import PROMPTS, sample_prompts
from minippo.rlhf.data.preferences import PreferencePairs
from minippo.rlhf.dpo_config import DPOConfig
from minippo.rlhf.generate import check_response_fits
from minippo.rlhf.rm_train import load_pairs, load_sft, pairs_folder
from minippo.rlhf.run.evaluate import evaluate_policy
from minippo.runs import RunFolderTrainer, assign_arrays, check_same_config, input_identity

CHECKPOINT_FORMAT = "minippo.dpo/1"
#: DPOConfig fields a resume may change: the checkpoint cadence, and the number of steps (with a
#: non-constant lr schedule the rate from the resumed step on then follows the new count)
RESUME_NEUTRAL = ("steps", "checkpoint_every")
SEED_EVAL = 2           # evaluation prompts: [seed, SEED_EVAL]; their samples: [seed, SEED_EVAL, 1]


def pairs_split(data_info: dict) -> dict:
    """What a resume compares of a ``data_info`` (:func:`run_dpo`'s): the pairs' sizes and the config of the run that
    sampled and split them, one field each; not ``pairs_dir``, where they were read (the same folder by another path
    is the same pairs)."""
    rm_config = data_info.get("rm_config")
    return {**{k: v for k, v in data_info.items() if k not in ("pairs_dir", "rm_config")},
            **(rm_config if isinstance(rm_config, dict) else {})}


class DPOTrainer(RunFolderTrainer):
    """DPO (or IPO, conservative DPO) with a policy and a frozen reference; see the module docstring.

    Parameters
    ----------
    cfg : DPOConfig
    sft_model : TinyGPT, the SFT policy: the policy starts as a copy, the reference IS a frozen copy
    tokenizer : Tokenizer
    train, heldout : PreferencePairs, the reward-model stage's split (:func:`minippo.rlhf.rm_train.load_pairs`)
    out_dir : run folder for metrics, checkpoints and the final policy (None: nothing is written); locked
        (:class:`minippo.runs.RunLock`) until :meth:`close`
    resume : continue from ``out_dir/checkpoint`` when it exists (its config must equal ``cfg`` up to
        :data:`RESUME_NEUTRAL`); without it a folder holding a checkpoint is refused
    data_info : JSON-serialisable description of the pairs (stored with checkpoints and the policy); a resume given
        another one (but for ``pairs_dir``, where they were read) is refused
    inputs : what the models and pairs were loaded from, ``{"sft": ..., "pairs": ...}``
        (:func:`minippo.runs.input_identity`): recorded with every checkpoint; a resume given other ones is refused
    """

    # minippo.runs.RunFolderTrainer: the run folder, its lock and records
    STAGE, UNIT, FORMATS = "DPO", "step", (CHECKPOINT_FORMAT,)

    def __init__(self, cfg: DPOConfig, sft_model: TinyGPT, tokenizer, train: PreferencePairs,
                 heldout: PreferencePairs, *, out_dir=None, resume: bool = False, data_info: dict | None = None,
                 inputs: dict | None = None):
        if not isinstance(cfg, DPOConfig):
            raise ValueError(f"`cfg` must be a DPOConfig, got {type(cfg).__name__}")
        if not isinstance(sft_model, TinyGPT):
            raise ValueError(f"`sft_model` must be a TinyGPT, got {type(sft_model).__name__}")
        for name, p in (("train", train), ("heldout", heldout)):
            if not isinstance(p, PreferencePairs) or len(p) == 0:
                raise ValueError(f"`{name}` must be a non-empty PreferencePairs")
        if tokenizer is not None:                      # the evaluation samples must fit the model's context
            check_response_fits(cfg.max_new_tokens, tokenizer, PROMPTS, sft_model.cfg.block_size)
        self.cfg, self.data_info = cfg, dict(data_info or {})
        policy = sft_model.copy()
        self.state = dpo.DPOState(policy=policy, ref=sft_model.copy(), tokenizer=tokenizer,
                                  opt=AdamW(policy.params, lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps,
                                            weight_decay=cfg.weight_decay),
                                  train=train, heldout=heldout)
        self.prompts = sample_prompts(cfg.n_eval, seed=np.random.default_rng([cfg.seed, SEED_EVAL]))
        self.last_eval = None                 # the last evaluation's samples and per-response numbers
        self._open_run_folder(out_dir, cfg.to_dict(), resume=resume, inputs=inputs)

    @property
    def policy(self) -> TinyGPT:
        return self.state.policy

    @property
    def step_count(self) -> int:
        """Optimizer steps done so far."""
        return self.state.step

    done = step_count

    # ---- one step ------------------------------------------------------------------------------

    def evaluate(self) -> dict:
        """The held-out pairs' ``eval_*`` metrics and the fresh samples' gold score, KL and length."""
        s, cfg = self.state, self.cfg
        ev = dpo.evaluate_pairs(s.policy, s.ref, s.heldout, cfg)
        samples = evaluate_policy(s.policy, s.ref, None, s.tokenizer, self.prompts,
                                  rng=np.random.default_rng([cfg.seed, SEED_EVAL, 1]),
                                  max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature)
        self.last_eval = {"pairs": ev, "samples": samples}
        out = {k: v for k, v in ev.items() if k.startswith("eval_")}
        out.update({"gold/score": samples["gold_mean"], "objective/kl": samples["kl_mean"],
                    "objective/kl_exact": samples["kl_exact_mean"], "response/length": samples["length_mean"]})
        return out

    def step(self, callback=None) -> dict:
        """Run one step (and the evaluation when due); returns its record (also written to ``metrics.jsonl``)."""
        cfg, it = self.cfg, self.step_count
        t0 = time.perf_counter()
        try:
            with single_blas_thread():      # small matrices: one BLAS thread is faster and deterministic
                record = dpo.dpo_step(self.state, cfg)
                t1 = time.perf_counter()
                done = self.step_count
                if cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.steps):
                    record.update(self.evaluate())
        except ValueError as exc:           # the NaN guard, or bad data: say what is kept on disk
            raise self._stopped(exc, {"policy." + k: v for k, v in self.policy.params.items()}, it) from exc
        record.update({"time/step": t1 - t0, "time/eval": time.perf_counter() - t1})
        self._write(record, cfg.checkpoint_every, cfg.steps)
        if callback is not None:
            with single_blas_thread():
                callback(self, record)
        return record

    def train(self, until: int | None = None, *, progress: bool = False, callback=None) -> list[dict]:
        """Run steps up to ``until`` (default ``cfg.steps``); returns their records. ``callback(trainer, record)``
        is called after every step. At the end the policy is saved to ``out_dir/policy`` (when complete)."""
        until = self.cfg.steps if until is None else min(int(until), self.cfg.steps)
        records = []
        bar = progress_bar(range(self.step_count, until), initial=self.step_count, total=self.cfg.steps, desc="dpo",
                           disable=not progress)
        with self.stage.running():                   # Ctrl-C: one line saying what is kept (minippo.runs)
            for _ in bar:
                r = self.step(callback)
                records.append(r)
                post = {"loss": f"{r['loss']:.3f}", "acc": f"{r['rewards/accuracies']:.2f}"}
                if "gold/score" in r:
                    post.update(gold=f"{r['gold/score']:+.2f}", kl=f"{r['objective/kl_exact']:.2f}")
                bar.set_postfix(**post)
        bar.close()
        if self.out_dir is not None and self.step_count == self.cfg.steps:
            save_model(self.out_dir / "policy", self.policy, tokenizer=self.state.tokenizer,
                       extra_state={"dpo_config": self.cfg.to_dict(), "step": self.step_count,
                                    "data": self.data_info, "inputs": self.inputs})
        return records

    # ---- checkpoints ---------------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write everything needed to continue bitwise (see the module docstring), atomically."""
        s = self.state
        arrays = {"policy/" + k: v for k, v in s.policy.params.items()}
        moments, scalars = s.opt.state_dict()
        arrays.update({"opt/" + k: v for k, v in moments.items()})
        state = {"format": CHECKPOINT_FORMAT, "dpo_config": self.cfg.to_dict(), "step": s.step, "opt": scalars,
                 "gpt_config": s.policy.cfg.to_dict(), "data": self.data_info, "inputs": self.inputs}
        path = save_checkpoint(directory, arrays, state)
        self._saved(s.step)
        return path

    def _expect(self) -> dict:
        """The tensors a checkpoint of this trainer holds: name -> (shape, dtype), from the live model and AdamW."""
        s = self.state
        return {**array_specs(s.policy.params, "policy/"), **array_specs(s.opt.state_dict()[0], "opt/")}

    def load(self, directory) -> None:
        """Restore a checkpoint written by :meth:`save` (the config must match up to :data:`RESUME_NEUTRAL`).

        Everything is checked before anything is assigned: the tensors against the live model and optimizer
        (:func:`minippo.io.load_checkpoint` with ``expect``), then the config, then every entry of state.json
        (a :class:`minippo.io.CorruptFileError` naming the file and the entry)."""
        s = self.state
        arrays, state = load_checkpoint(directory, self._expect())
        state_path = checkpoint_folder(directory) / STATE
        with in_file(state_path):
            if state.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"`format` is {state.get('format')!r}: not a DPO checkpoint of format {CHECKPOINT_FORMAT}")
            stored = DPOConfig.from_dict(state["dpo_config"]).to_dict()
        fresh = f"use another folder than {Path(directory).parent} (or delete it)"
        check_same_config(f"the DPO run in {Path(directory).parent}", stored, self.cfg.to_dict(), ignore=RESUME_NEUTRAL,
                          fresh=fresh)
        if isinstance(state.get("data"), dict) and state["data"] and self.data_info:     # recorded by every version
            check_same_config(f"the DPO run in {Path(directory).parent} (its pairs)", pairs_split(state["data"]),
                              pairs_split(self.data_info), fresh=fresh)
        moments = {k[len("opt/"):]: v for k, v in arrays.items() if k.startswith("opt/")}
        with in_file(state_path):
            step = state["step"]
            check_range("step", step, 1, self.cfg.steps, integer=True)
            if state["gpt_config"] != s.policy.cfg.to_dict():
                raise ValueError(f"`gpt_config` {state['gpt_config']} is not the SFT model's {s.policy.cfg.to_dict()}")
            s.opt.check_state_dict(moments, state["opt"])
        # everything is checked: assign (in place: the optimizer holds the parameter arrays)
        assign_arrays(s.policy.params, arrays, "policy/", source=directory)
        s.opt.load_state_dict(moments, state["opt"])
        s.step = step
        self._saved(step)


def run_dpo(cfg: DPOConfig, sft_dir, pairs_dir, out_dir, *, resume: bool = False, progress: bool = True,
            callback=None) -> DPOTrainer:
    """DPO from a saved SFT folder on the pairs of a reward-model folder (its own split) into ``out_dir``; a
    checkpoint there is resumed only from the same SFT model and pairs (the SHA-256 of their files)."""
    sft_model, tokenizer, _ = load_sft(sft_dir)
    train, heldout, rm_cfg = load_pairs(pairs_dir)
    pairs_file = pairs_folder(pairs_dir) / "pairs.npz"
    inputs = {"sft": input_identity(resolve_model_dir(sft_dir)), "pairs": input_identity(pairs_file)}
    info = {"pairs_dir": str(pairs_dir), "rm_config": rm_cfg.to_dict(), "train_pairs": len(train),
            "train_prompts": train.n_groups, "heldout_pairs": len(heldout), "heldout_prompts": heldout.n_groups}
    trainer = DPOTrainer(cfg, sft_model, tokenizer, train, heldout, out_dir=out_dir, resume=resume, data_info=info,
                         inputs=inputs)
    trainer.train(progress=progress, callback=callback)
    return trainer
