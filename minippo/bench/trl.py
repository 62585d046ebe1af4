"""TRL's GRPO iteration against minippo's: the same model, batch, group size and response length, one CPU thread each.

One model of the shape ``minippo rlhf`` trains (TinyGPT, 2 layers, C = 64, V = 512, block 64) and a reward
model of the same shape, randomly initialised and saved as model folders, then exported with ``minippo export``:
TRL trains the export, minippo the folder (equal logits, ``tests/hf``). One iteration = sample B responses
(B / G prompts x G) of at most T tokens, score them with the reward model, the reference's log-probs (a KL
coefficient > 0 on both sides), group advantages, one optimizer step over the whole batch. TRL: one
``GRPOTrainer`` step (``minippo.rlhf.run.hf_trl.grpo_trainer``: generation with ``generate`` and its KV cache,
the reward, the loss, AdamW), timed from ``on_step_begin`` to ``on_step_end``. minippo: :func:`minippo_iteration`.
Both on one thread (``torch.set_num_threads(1)``, OpenBLAS ``single_blas_thread``), best of the repeats after a
warm-up step; the float32 matmul GFLOP/s of NumPy and of torch on that thread are printed beside them.

Not identical work: minippo recomputes the old policy's log-probs in a forward pass before its update (TRL
reuses the loss pass's, detached, with one update per batch); the KL sits in minippo's reward and in TRL's loss.
Untrained weights rarely sample an EOS: most responses run to T tokens on both sides.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from minippo.bench.matmul import matmul_peak_gflops
from minippo.bench.report import Report, best_time
from minippo.blas import single_blas_thread
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rlhf.checkpoint import save_model
from minippo.rlhf.data.corpus import generate_corpus
from minippo.rlhf.data.tokenizer import train_tokenizer
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.rlhf.reward_model import RewardModel
from minippo.rlhf.run.hf import export_hf
from minippo.rlhf.run.hf_trl import SCORE_FIELDS, grpo_trainer
from minippo.rlhf.run.trainer import PPOTrainer

BATCH, GROUP, T, KL_COEF, LR = 32, 4, 24, 0.05, 1e-5


def minippo_iteration(policy: TinyGPT, reward_model: RewardModel, tokenizer, *, batch: int, group: int,
                      max_new_tokens: int, kl_coef: float, lr: float):
    """A zero-argument callable running one critic-free GRPO iteration of minippo
    (:func:`minippo.rlhf.grpo.grpo_iteration`, groups of ``group`` responses)."""
    cfg = GRPOConfig(batch_size=batch, samples_per_prompt=group, max_new_tokens=max_new_tokens, lr=lr,
                     update_epochs=1, minibatch_size=batch, advantage_estimator="grpo",
                     kl_ref_controller="fixed", kl_ref_coef=kl_coef, iterations=1000, seed=0)
    return PPOTrainer(cfg, policy, reward_model, tokenizer).step


def models(folder: Path):
    """(policy, reward model, tokenizer), randomly initialised at ``minippo rlhf``'s shape, saved and exported."""
    tokenizer = train_tokenizer(generate_corpus(2000, seed=0), vocab_size=512)
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=64, n_layer=2, n_head=4, n_embd=64)
    rng = np.random.default_rng(0)
    policy, reward_model = TinyGPT(cfg, rng=rng), RewardModel.fresh(cfg, rng)
    save_model(folder / "policy", policy, tokenizer=tokenizer)
    reward_model.save(folder / "rm", tokenizer=tokenizer)
    for name in ("policy", "rm"):
        export_hf(folder / name, folder / f"{name}_hf", log=lambda *a: None)
    return policy, reward_model, tokenizer


def trl_step_seconds(folder: Path, steps: int) -> tuple[float, str]:
    """Best wall time of one TRL GRPO step over ``steps`` steps after a warm-up one; and TRL's version."""
    import trl                                       # lazy: the optional hf extra
    from transformers import TrainerCallback       # lazy: the optional hf extra

    class Timer(TrainerCallback):
        times: list = []

        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t)

    timer = Timer()
    score_settings = {f: getattr(KnobsConfig(), f) for f in SCORE_FIELDS}   # minippo's defaults, as its side
    trainer = grpo_trainer(folder / "policy_hf", folder / "rm_hf",
                           {"max_new_tokens": T, "temperature": 1.0, **score_settings}, out_dir=folder / "trl_run",
                           steps=steps + 1, batch=BATCH, group=GROUP, lr=LR, beta=KL_COEF, callbacks=[timer],
                           logging_steps=steps + 2)       # no log line in the middle of the bench
    trainer.train()
    return min(timer.times[1:]), trl.__version__


def torch_matmul_gflops(n: int = 512, repeat: int = 5) -> float:
    import torch                                     # lazy: the optional hf extra
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n ** 3 / best_time(lambda: a @ b, repeat=repeat, number=3) / 1e9


def bench(report: Report, quick: bool = False) -> None:
    try:
        import torch                                 # lazy: the optional hf extra (torch, transformers, trl)
        import trl  # noqa: F401
    except ImportError as err:
        report.note(f"skipped: TRL is not installed ({err.name}); pip install -e \".[hf]\" (torch's CPU build)")
        return
    repeat = 2 if quick else 4
    report.note(f"one GRPO iteration: B = {BATCH} responses ({BATCH // GROUP} prompts x G = {GROUP}), T <= {T} "
                f"tokens, KL coefficient {KL_COEF}, one optimizer step; TinyGPT L=2 C=64 V=512; 1 thread each")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(prefix="minippo_bench_trl_") as tmp, single_blas_thread():
            policy, reward_model, tokenizer = models(Path(tmp))
            report.value("float32 matmul, NumPy, 1 thread", matmul_peak_gflops(512, repeat=3), "GFLOP/s")
            report.value("float32 matmul, torch, 1 thread", torch_matmul_gflops(512, repeat=3), "GFLOP/s")
            step = minippo_iteration(policy, reward_model, tokenizer, batch=BATCH, group=GROUP, max_new_tokens=T,
                                     kl_coef=KL_COEF, lr=LR)
            t_minippo = best_time(step, repeat=repeat, warmup=1)
            t_trl, version = trl_step_seconds(Path(tmp), repeat)
    finally:
        torch.set_num_threads(threads)
    report.time(f"TRL {version} GRPOTrainer step", t_trl)
    report.time("minippo GRPO iteration", t_minippo)
    report.ratio("TRL time / minippo time", t_trl / t_minippo)
