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
                     moments (safetensors), config, step (JSON); the batch order and the evaluation samples are
                     pure functions of (seed, step), so ``resume=True`` continues to the same metrics as an
                     uninterrupted run (tested, timing entries aside)
    policy/          the final policy + tokenizer (``load_model``), for evaluation

The NaN guard: a non-finite log-prob, loss or gradient norm raises ``ValueError`` naming the metric, the step
and what is on disk (the last good checkpoint, or that none was written yet); nothing computed after it
is applied.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from minippo.blas import single_blas_thread
from minippo.io import MetricsWriter, atomic_write_text, has_checkpoint, load_checkpoint, save_checkpoint
from minippo.nn.gpt import TinyGPT
from minippo.nn.optim import AdamW
from minippo.rlhf import dpo
from minippo.rlhf.checkpoint import save_model
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.data.preferences import PreferencePairs
from minippo.rlhf.dpo_config import DPOConfig
from minippo.rlhf.rm_train import load_pairs, load_sft
from minippo.rlhf.run.evaluate import evaluate_policy

CHECKPOINT_FORMAT = "minippo.dpo/1"
SEED_EVAL = 2           # evaluation prompts: [seed, SEED_EVAL]; their samples: [seed, SEED_EVAL, 1]


class DPOTrainer:
    """DPO (or IPO, conservative DPO) with a policy and a frozen reference; see the module docstring.

    Parameters
    ----------
    cfg : DPOConfig
    sft_model : TinyGPT, the SFT policy: the policy starts as a copy, the reference IS a frozen copy
    tokenizer : Tokenizer
    train, heldout : PreferencePairs, the reward-model stage's split (:func:`minippo.rlhf.rm_train.load_pairs`)
    out_dir : run folder for metrics, checkpoints and the final policy (None: nothing is written)
    resume : continue from ``out_dir/checkpoint`` when it exists (its config must equal ``cfg`` up to ``steps``)
    data_info : JSON-serialisable description of the pairs (stored with checkpoints and the policy)
    """

    def __init__(self, cfg: DPOConfig, sft_model: TinyGPT, tokenizer, train: PreferencePairs,
                 heldout: PreferencePairs, *, out_dir=None, resume: bool = False, data_info: dict | None = None):
        if not isinstance(cfg, DPOConfig):
            raise ValueError(f"`cfg` must be a DPOConfig, got {type(cfg).__name__}")
        if not isinstance(sft_model, TinyGPT):
            raise ValueError(f"`sft_model` must be a TinyGPT, got {type(sft_model).__name__}")
        for name, p in (("train", train), ("heldout", heldout)):
            if not isinstance(p, PreferencePairs) or len(p) == 0:
                raise ValueError(f"`{name}` must be a non-empty PreferencePairs")
        self.cfg, self.data_info = cfg, dict(data_info or {})
        policy = sft_model.copy()
        self.state = dpo.DPOState(policy=policy, ref=sft_model.copy(), tokenizer=tokenizer,
                                  opt=AdamW(policy.params, lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps,
                                            weight_decay=cfg.weight_decay),
                                  train=train, heldout=heldout)
        self.prompts = sample_prompts(cfg.n_eval, seed=np.random.default_rng([cfg.seed, SEED_EVAL]))
        self.last_eval = None                 # the last evaluation's samples and per-response numbers
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.metrics, self.last_saved = None, None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if resume and has_checkpoint(self.out_dir / "checkpoint"):
                self.load(self.out_dir / "checkpoint")
                self.metrics = MetricsWriter(self.out_dir / "metrics.jsonl", append=True)
                self.metrics.truncate_after("step", self.step_count - 1)
            else:
                atomic_write_text(self.out_dir / "config.json", json.dumps(cfg.to_dict(), indent=1))
                self.metrics = MetricsWriter(self.out_dir / "metrics.jsonl")

    @property
    def policy(self) -> TinyGPT:
        return self.state.policy

    @property
    def step_count(self) -> int:
        """Optimizer steps done so far."""
        return self.state.step

    # ---- one step ------------------------------------------------------------------------------
    def _on_disk(self) -> str:
        """What a stopped run leaves: the last good checkpoint, or that there is none."""
        if self.last_saved is not None:
            return f"the last good checkpoint (step {self.last_saved}) is kept in {self.out_dir / 'checkpoint'}"
        if self.out_dir is None:
            return "nothing is written (no run folder)"
        return f"no checkpoint had been written yet in {self.out_dir}"

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
            raise ValueError(f"{exc}: training stopped at step {it}; {self._on_disk()}") from exc
        record.update({"time/step": t1 - t0, "time/eval": time.perf_counter() - t1})
        if self.out_dir is not None:
            # the record first, then the checkpoint: a checkpoint never exists without its step's record
            self.metrics.write(record)
            if self.step_count % cfg.checkpoint_every == 0 or self.step_count == cfg.steps:
                self.save(self.out_dir / "checkpoint")
        if callback is not None:
            with single_blas_thread():
                callback(self, record)
        return record

    def train(self, until: int | None = None, *, progress: bool = False, callback=None) -> list[dict]:
        """Run steps up to ``until`` (default ``cfg.steps``); returns their records. ``callback(trainer, record)``
        is called after every step. At the end the policy is saved to ``out_dir/policy`` (when complete)."""
        until = self.cfg.steps if until is None else min(int(until), self.cfg.steps)
        records = []
        bar = tqdm(range(self.step_count, until), initial=self.step_count, total=self.cfg.steps, desc="dpo",
                   disable=not progress, dynamic_ncols=True)
        for _ in bar:
            r = self.step(callback)
            records.append(r)
            post = {"loss": f"{r['loss']:.3f}", "acc": f"{r['rewards/accuracies']:.2f}"}
            if "gold/score" in r:
                post.update(gold=f"{r['gold/score']:+.2f}", kl=f"{r['objective/kl_exact']:.2f}")
            bar.set_postfix(post)
        bar.close()
        if self.out_dir is not None and self.step_count == self.cfg.steps:
            save_model(self.out_dir / "policy", self.policy, tokenizer=self.state.tokenizer,
                       extra_state={"dpo_config": self.cfg.to_dict(), "step": self.step_count,
                                    "data": self.data_info})
        return records

    # ---- checkpoints ---------------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write everything needed to continue bitwise (see the module docstring), atomically."""
        s = self.state
        arrays = {"policy/" + k: v for k, v in s.policy.params.items()}
        moments, scalars = s.opt.state_dict()
        arrays.update({"opt/" + k: v for k, v in moments.items()})
        state = {"format": CHECKPOINT_FORMAT, "dpo_config": self.cfg.to_dict(), "step": s.step, "opt": scalars,
                 "gpt_config": s.policy.cfg.to_dict(), "data": self.data_info}
        path = save_checkpoint(directory, arrays, state)
        self.last_saved = s.step
        return path

    def load(self, directory) -> None:
        """Restore a checkpoint written by :meth:`save` (the config must match up to ``steps``)."""
        arrays, state = load_checkpoint(directory)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"`directory` {directory} does not hold a DPO checkpoint of format {CHECKPOINT_FORMAT}")
        saved = {k: v for k, v in state["dpo_config"].items() if k != "steps"}
        given = {k: v for k, v in self.cfg.to_dict().items() if k != "steps"}
        differ = {k: (saved.get(k), given[k]) for k in given if saved.get(k) != given[k]}
        if differ:
            raise ValueError(f"`cfg` differs from the run being resumed (saved, given): {differ}")
        s = self.state
        for name, p in s.policy.params.items():             # in place: the optimizer holds these arrays
            p[...] = arrays["policy/" + name]
        s.opt.load_state_dict({k[len("opt/"):]: v for k, v in arrays.items() if k.startswith("opt/")}, state["opt"])
        s.step = int(state["step"])
        self.last_saved = s.step


def run_dpo(cfg: DPOConfig, sft_dir, pairs_dir, out_dir, *, resume: bool = False, progress: bool = True,
            callback=None) -> DPOTrainer:
    """DPO from a saved SFT folder on the pairs of a reward-model folder (its own split) into ``out_dir``."""
    sft_model, tokenizer, _ = load_sft(sft_dir)
    train, heldout, rm_cfg = load_pairs(pairs_dir)
    info = {"pairs_dir": str(pairs_dir), "rm_config": rm_cfg.to_dict(), "train_pairs": len(train),
            "train_prompts": train.n_groups, "heldout_pairs": len(heldout), "heldout_prompts": heldout.n_groups}
    trainer = DPOTrainer(cfg, sft_model, tokenizer, train, heldout, out_dir=out_dir, resume=resume, data_info=info)
    trainer.train(progress=progress, callback=callback)
    return trainer
