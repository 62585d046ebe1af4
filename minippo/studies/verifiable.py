"""RL against the verifier as a study (lesson 23): the task's SFT model built once and cached, each method
trained from it with the loss and gradient of every rollout measured on-policy, and pass@k before and after.

Three things, each a plain call of the library:

1. :func:`task_sft` trains the SFT stage of ``minippo rlvr`` (:func:`minippo.rlvr.run.train_task_sft`) into a
   cache folder once (``runs/cache/rlvr-seed<k>-<kernel>-<hash>``; this user's temporary folder for ``quick``)
   and loads it; ``<hash>`` identifies the config, so a changed default never reuses a stale model, and
   ``<kernel>`` the OpenBLAS kernel, so a run under another kernel trains its own (lessons 23 and 24 share it);
2. :func:`train` runs one RL config (:class:`~minippo.rlvr.trainer.RLVRTrainer`: PPO or the critic-free family)
   and, for every iteration, the policy loss and its gradient norm at the policy that sampled the rollout,
   on the whole batch (:func:`on_policy_loss`): the number a log shows as "the loss" before any step;
3. :func:`evaluate` is :func:`minippo.rlvr.evaluate.evaluate_pass_at_k` on the first held-out problems.
"""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from minippo.blas import single_blas_thread
from minippo.io import has_checkpoint
from minippo.nn.optim import global_norm
from minippo.rl.dapo import zero_variance_share
from minippo.rlhf.grpo import GRPOConfig, actor_loss
from minippo.rlhf.ppo import backward_response
from minippo.rlhf.run.pipeline import announce_stderr, cache_folder
from minippo.rlvr.evaluate import evaluate_pass_at_k
from minippo.rlvr.run import load_task_sft, train_task_sft
from minippo.rlvr.task import Problems, TaskSFTConfig
from minippo.rlvr.trainer import RLVRTrainer
from minippo.rlvr.verifier import Verifier


def cache_dir(cfg: TaskSFTConfig, quick: bool) -> Path:
    """Where the task's SFT model of ``cfg`` is cached (module docstring, item 1)."""
    return cache_folder("rlvr", cfg.to_dict(), cfg.seed, quick)


def task_sft(cfg: TaskSFTConfig, quick: bool) -> dict:
    """``{"model", "tokenizer", "problems", "folder"}``: the SFT model of ``cfg``, trained once into
    :func:`cache_dir` (a message on stderr while it is built) and loaded."""
    folder = cache_dir(cfg, quick)
    if not has_checkpoint(folder / "sft" / "model"):
        announce_stderr(f"building the arithmetic task's SFT model once into {folder} ({cfg.steps} steps)")
        train_task_sft(cfg, folder / "sft", progress=False, log=lambda *a: None)
    model, tokenizer, _, _ = load_task_sft(folder / "sft")
    return {"model": model, "tokenizer": tokenizer, "problems": Problems(cfg), "folder": folder}


def on_policy_loss(actor, ro, cfg: GRPOConfig) -> dict:
    """The policy loss of rollout ``ro`` at the policy that sampled it (``actor``: the ratio is exactly 1),
    over the whole batch, with ``cfg``'s aggregation and no other term (no KL loss, no entropy), and the
    norm of its gradient: ``{"loss", "grad_norm"}``."""
    cfg = cfg.replace(kl_ref_loss_coef=0.0, ent_coef=0.0)
    terms, _, dlogits, _, cache = actor_loss(SimpleNamespace(actor=actor), ro, cfg)
    return {"loss": terms["loss/policy"], "grad_norm": global_norm(backward_response(actor, cache, dlogits=dlogits))}


def train(sft: dict, cfg, *, measure_loss: bool = False) -> dict:
    """One RL run of ``cfg`` from ``sft`` (:func:`task_sft`): ``{"records", "policy", "cpu", "on_policy",
    "batch_zero_share"}``. ``on_policy`` (with ``measure_loss`` and a GRPOConfig) lists
    :func:`on_policy_loss` of every iteration's rollout; ``batch_zero_share`` the share of zero-variance
    groups in each batch trained on (a group estimator), whatever dynamic sampling drew before it."""
    trainer = RLVRTrainer(cfg, sft["model"], sft["tokenizer"], sft["problems"])
    records, on_policy, zero = [], [], []
    c0 = time.process_time()
    for _ in range(cfg.iterations):
        before = trainer.actor.copy() if measure_loss else None          # pi_old of the coming rollout
        records.append(trainer.step())
        ro = trainer.last_rollout
        if isinstance(cfg, GRPOConfig) and cfg.advantage_estimator != "reinforce":
            zero.append(zero_variance_share(ro.scores, cfg.samples_per_prompt))
        if measure_loss:
            with single_blas_thread():
                on_policy.append(on_policy_loss(before, ro, cfg))
    trainer.close()
    return {"records": records, "policy": trainer.actor, "cpu": time.process_time() - c0, "on_policy": on_policy,
            "batch_zero_share": zero}


def evaluate(sft: dict, policy, n_eval: int, n_samples: int, *, max_new_tokens: int, temperature: float,
             seed: int) -> dict:
    """pass@k, lengths and shares of ``policy`` on the first ``n_eval`` held-out problems, ``n_samples`` fresh
    answers each (:func:`minippo.rlvr.evaluate.evaluate_pass_at_k`; its generator seeded by ``seed``)."""
    return evaluate_pass_at_k(policy, sft["tokenizer"], Verifier(sft["tokenizer"]),
                              sft["problems"].heldout[:n_eval], n_samples, max_new_tokens=max_new_tokens,
                              temperature=temperature, rng=np.random.default_rng(seed))
