"""Lesson 24 (b): does the correction help a training run whose sampler is not the trainer?

Legend: P held-out problems, n answers per problem.

The verifiable-reward task of ``minippo rlvr`` (sums checked by a rule, :mod:`minippo.rlvr`): its
SFT policy, then PPO against the verifier (:class:`minippo.rlvr.trainer.RLVRTrainer`) with the
config of :func:`minippo.rlvr.trainer.rlvr_ppo_config` made a
:class:`minippo.rlhf.corrected.CorrectedConfig`: the sampler's logits rounded to bf16 (truncated),
or the sampler 2 iterations stale, each without correction and with token-level truncated IS
(w = min(pi_old / mu, C)), plus the on-policy run. Each final policy is judged by its own pass@1
on held-out problems (:func:`minippo.rlvr.evaluate.evaluate_pass_at_k`: its own samples, not the
mismatched sampler's); the runs of one seed share the SFT policy and the seed of the generator,
so the seeds give paired differences.
"""
from __future__ import annotations

import time

import numpy as np

from minippo.rlhf.corrected import CorrectedConfig
from minippo.rlvr.evaluate import evaluate_pass_at_k
from minippo.rlvr.run import stage_configs
from minippo.rlvr.trainer import RLVRTrainer
from minippo.rlvr.verifier import Verifier
from minippo.studies import verifiable

CAP = 2.0
#: run name -> the CorrectedConfig fields that make it
RUNS = {
    "on-policy": {},
    "bf16 logits, uncorrected": {"logits_precision": "bfloat16-truncate"},
    "bf16 logits, TIS C=2": {"logits_precision": "bfloat16-truncate", "correction": "tis",
                             "correction_cap": CAP},
    "stale by 2, uncorrected": {"stale_k": 2},
    "stale by 2, TIS C=2": {"stale_k": 2, "correction": "tis", "correction_cap": CAP},
}


def pass_at_1(policy, tokenizer, problems, cfg, n_eval: int, n_samples: int) -> float:
    """pass@1 of ``policy`` on the first ``n_eval`` held-out problems, ``n_samples`` answers each
    at the run's temperature (the generator seeded by the run's seed)."""
    ev = evaluate_pass_at_k(policy, tokenizer, Verifier(tokenizer), problems.heldout[:n_eval],
                            n_samples, max_new_tokens=cfg.max_new_tokens,
                            temperature=cfg.temperature,
                            rng=np.random.default_rng([cfg.seed, 24, 2]), ks=(1,))
    return ev["pass@1"]


def train_and_judge(sft, tokenizer, problems, cfg: CorrectedConfig, *, n_eval: int,
                    n_samples: int) -> dict:
    """One PPO run against the verifier with ``cfg``: the final policy's pass@1
    (:func:`pass_at_1`), the last 5 rollouts' pass rate (the sampler's answers), CPU seconds."""
    c0 = time.process_time()
    trainer = RLVRTrainer(cfg, sft, tokenizer, problems)
    try:
        records = trainer.train()
        policy = trainer.actor.copy()
    finally:
        trainer.close()
    return {"pass@1": pass_at_1(policy, tokenizer, problems, cfg, n_eval, n_samples),
            "train_pass_rate": float(np.mean([r["rlvr/pass_rate"] for r in records[-5:]])),
            "cpu": time.process_time() - c0}


def training_comparison(quick: bool, seeds, *, iterations: int | None = None, n_eval: int = 128,
                        n_samples: int = 16) -> dict:
    """Every run of :data:`RUNS` on each seed: ``{"runs": name -> [result per seed]}``
    (:func:`train_and_judge`), ``sft_pass@1`` per seed (the starting policy, judged the same way),
    and the sizes."""
    out = {"runs": {name: [] for name in RUNS}, "sft_pass@1": [], "seeds": list(seeds),
           "n_eval": n_eval, "n_samples": n_samples}
    for seed in seeds:
        sft_cfg, rl_cfg, _ = stage_configs(quick, seed)
        # minippo rlvr's SFT stage, trained once into the cache lesson 23 uses too
        task = verifiable.task_sft(sft_cfg, quick)
        sft, tokenizer, problems = task["model"], task["tokenizer"], task["problems"]
        base = rl_cfg.to_dict()
        if iterations is not None:
            base.update(iterations=iterations, checkpoint_every=iterations)
        cfg0 = CorrectedConfig.from_dict(base)
        out["sft_pass@1"].append(pass_at_1(sft, tokenizer, problems, cfg0, n_eval, n_samples))
        for name, fields in RUNS.items():
            cfg = CorrectedConfig.from_dict({**base, **fields})
            out["runs"][name].append(train_and_judge(sft, tokenizer, problems, cfg,
                                                     n_eval=n_eval, n_samples=n_samples))
        out["iterations"], out["batch_size"] = base["iterations"], base["batch_size"]
    return out
