"""Studies: run PPO variants on the main job's cached SFT and reward model, judge them the same way.

The lessons that test common claims about RLHF-PPO (13-20; docs/questions.md) all do the same three
things, which live here once:

1. ``Study(quick, seed)`` loads the SFT policy, tokenizer and reward model of the main job, built once
   and cached by :func:`minippo.rlhf.run.pipeline.prepare_stages` (``runs/cache/...``; a temporary folder
   for ``quick``), and fixes a set of held-out evaluation prompts;
2. ``study.run(cfg)`` trains one variant (a :class:`PPOConfig`, or a KnobsConfig / GRPOConfig) from that
   SFT policy and returns its per-iteration metric records and the final policy;
3. ``study.evaluate(policy)`` judges any policy on the evaluation prompts with fresh samples: gold
   score (the simulated human), RM score (the proxy), KL to the reference, length
   (:func:`minippo.rlhf.run.evaluate.evaluate_policy`); the SFT policy's own evaluation is ``study.reference``.

``study.sweep(base_cfg, {"name": {field: value, ...}, ...}, seeds)`` runs the variants for several
seeds and returns, per variant, the records and the evaluation of every seed: the shape every
hyperparameter / ablation figure needs.
"""
from __future__ import annotations

import time
from functools import cached_property
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.rlhf.run.evaluate import evaluate_policy
from minippo.rlhf.run.pipeline import prepare_stages
from minippo.rlhf.run.trainer import PPOTrainer, load_stages, sft_training_sequences
from minippo.rlhf.lm_train import heldout_loss

EVAL_SEED = 1000        # evaluation prompts: sample_prompts(n_eval, seed=EVAL_SEED + seed)


class Study:
    """The cached stages of the main job plus fixed evaluation prompts.

    Parameters
    ----------
    quick : use the CI-sized stages (seconds) instead of the main job's
    seed : seed of the stages, of the evaluation prompts and of the default PPO configs
    n_eval : number of evaluation prompts (default 32 quick, 128 otherwise)
    cache_dir : where the stages are cached (default :func:`minippo.rlhf.run.pipeline.default_cache_dir`)
    """

    def __init__(self, quick: bool = False, seed: int = 0, *, n_eval: int | None = None, cache_dir=None,
                 log=lambda *a: None):

        self.quick, self.seed = quick, seed
        self.folder = Path(prepare_stages(cache_dir, quick=quick, seed=seed, log=log))
        self.sft, self.tokenizer, self.reward_model, self.sft_state = load_stages(self.folder / "sft",
                                                                                  self.folder / "rm")
        self.n_eval = n_eval or (32 if quick else 128)
        self.prompts = sample_prompts(self.n_eval, seed=EVAL_SEED + seed)

    def config(self, config=PPOConfig, **overrides):
        """The main job's config of class ``config`` (canonical :class:`PPOConfig` by default; the knobs'
        :class:`~minippo.rlhf.ppo_knobs.KnobsConfig` or :class:`~minippo.rlhf.grpo.GRPOConfig`), its ``quick()``
        when quick, with ``overrides`` applied."""
        overrides.setdefault("seed", self.seed)
        return config.quick(**overrides) if self.quick else config(**overrides)

    @cached_property
    def ptx_sequences(self) -> list:
        """The SFT run's training sentences, for PPO-ptx (built on first use)."""
        return sft_training_sequences(self.sft_state, self.tokenizer)

    @cached_property
    def heldout_sequences(self) -> list:
        """The SFT run's held-out sentences (never trained on), for the corpus LM loss (built on first use)."""
        return sft_training_sequences(self.sft_state, self.tokenizer, split="heldout")

    def lm_loss(self, policy, n: int | None = None) -> float:
        """Held-out corpus cross-entropy of ``policy`` in nats per token (:func:`minippo.rlhf.lm_train.heldout_loss`)
        on the first ``n`` held-out sentences (all by default): how well it still models the language, the
        "alignment tax" PPO pays (InstructGPT sec. 3.5, PPO-ptx; lesson 18)."""

        seqs = self.heldout_sequences if n is None else self.heldout_sequences[:n]
        if not seqs:
            raise ValueError(f"`n` must be >= 1 (held-out sentences to score), got {n!r}")
        with single_blas_thread():
            return heldout_loss(policy, seqs, self.tokenizer.pad_id)

    def trainer(self, cfg, reward_model=None, *, log_exact_kl: bool = False):
        """A fresh :class:`PPOTrainer` from the SFT policy (``reward_model`` overrides the cached RM)."""
        ptx = self.ptx_sequences if isinstance(cfg, KnobsConfig) and cfg.ptx_coef > 0 else None
        return PPOTrainer(cfg, self.sft, reward_model or self.reward_model, self.tokenizer, ptx_sequences=ptx,
                          log_exact_kl=log_exact_kl)

    def run(self, cfg, *, reward_model=None, callback=None, setup=None, log_exact_kl: bool = False) -> dict:
        """Train one variant: ``{"config", "records" (one dict per iteration), "trainer"}``; ``setup(trainer)`` is
        called before the first iteration (e.g. :func:`minippo.studies.pitfalls.clamp_critic`); ``log_exact_kl``:
        the trainer's option (``objective/kl_exact`` in every record)."""
        trainer = self.trainer(cfg, reward_model, log_exact_kl=log_exact_kl)
        if setup is not None:
            setup(trainer)
        records = trainer.train(callback=callback)
        return {"config": cfg, "records": records, "trainer": trainer}

    def evaluate(self, policy, *, max_new_tokens: int | None = None, temperature: float | None = None,
                 sample_seed: int = 2, reward_model=None) -> dict:
        """:func:`evaluate_policy` of ``policy`` on the study's prompts (RM = the cached reward model, or
        ``reward_model``: e.g. the proxy a variant was trained against, lesson 19)."""

        base = self.config()
        with single_blas_thread():
            return evaluate_policy(policy, self.sft, reward_model or self.reward_model, self.tokenizer, self.prompts,
                                   rng=np.random.default_rng([self.seed, sample_seed]),
                                   max_new_tokens=max_new_tokens or base.max_new_tokens,
                                   temperature=temperature or base.temperature)

    @cached_property
    def reference(self) -> dict:
        """The SFT policy's evaluation (the "before" of every comparison)."""
        return self.evaluate(self.sft, sample_seed=1)

    def sweep(self, variants: dict[str, dict], seeds=(0,), *, base: dict | None = None, evaluate: bool = True,
              extra=None, reward_model=None, callback=None, setup=None, log=lambda *a: None,
              log_exact_kl: bool = False) -> dict:
        """Run every variant (name -> config overrides on top of ``base``; ``"config"``: the class, default
        :class:`PPOConfig`) for every PPO seed.

        Each trained policy is evaluated at its variant's ``max_new_tokens`` and ``temperature``.
        Returns name -> ``{"records": [per-seed list of records], "eval": [per-seed evaluation],
        "time": [per-seed {"wall", "cpu"} seconds of the training run]}``, and ``"extra"``: per seed
        ``extra(run)`` of the :meth:`run` result (e.g. ``lambda r: study.lm_loss(r["trainer"].actor)``) when
        ``extra`` is given. ``reward_model`` replaces the cached RM for training and evaluation;
        ``callback(trainer, rollout, record)`` is passed to :meth:`run` (it may add entries to ``record``), and so is
        ``setup(trainer)`` (called before training).
        """
        out = {}
        for name, overrides in variants.items():
            out[name] = {"records": [], "eval": [], "time": [], **({"extra": []} if extra is not None else {})}
            for s in seeds:
                cfg = self.config(**{**(base or {}), **overrides, "seed": s})
                wall, cpu = time.perf_counter(), time.process_time()
                r = self.run(cfg, reward_model=reward_model, callback=callback, setup=setup,
                             log_exact_kl=log_exact_kl)
                out[name]["time"].append({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu})
                out[name]["records"].append(r["records"])
                if evaluate:   # at the variant's own response length and temperature
                    out[name]["eval"].append(self.evaluate(r["trainer"].actor, reward_model=reward_model,
                                                           max_new_tokens=cfg.max_new_tokens,
                                                           temperature=cfg.temperature))
                if extra is not None:   # one BLAS thread, like training and evaluation
                    with single_blas_thread():
                        out[name]["extra"].append(extra(r))
                log(f"  {name} seed {s}: gold {r['records'][-1]['gold/score']:+.3f} "
                    f"KL {r['records'][-1]['objective/kl']:.2f}")
        return out


def final(records: list[dict], key: str, last: int = 5) -> float:
    """Mean of ``key`` over the last ``last`` iterations (a less noisy "final value" of a run)."""
    return float(np.mean([r[key] for r in records[-last:]]))
