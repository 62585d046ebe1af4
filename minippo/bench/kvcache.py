"""KV-cache decoding vs recomputing the whole prefix, for 64 new tokens.

Same model as the ``gpt`` section (L=4, H=4, C=128, V=512, float32) with block_size 80, a batch of
B=32 left-padded prompts of length 16, and 64 new tokens per row (fixed, pre-drawn tokens, so both
ways do exactly the same work):

- cached: ``prefill`` the prompts once, then 64 ``decode_step`` calls, each running one new position
  per row against the stored keys and values;
- recompute: for each new token, run the model over the whole sequence so far (``prefill`` of the
  prefix, which computes every position's keys/values and only the last position's logits).

Both produce the same logits (the max difference is printed); the ratio of the times is the point.
"""
from __future__ import annotations

import time

import numpy as np

from minippo.bench.report import Report, best_time
from minippo.blas import single_blas_thread
from minippo.nn.gpt import GPTConfig, TinyGPT

B, PROMPT, NEW, L, H, C, V = 32, 16, 64, 4, 4, 128, 512


def bench(report: Report, quick: bool = False) -> None:

    rng = np.random.default_rng(0)
    model = TinyGPT(GPTConfig(vocab_size=V, block_size=PROMPT + NEW, n_layer=L, n_head=H, n_embd=C), seed=0)
    prompts = rng.integers(1, V, (B, PROMPT))
    prompt_mask = np.ones((B, PROMPT), dtype=np.int64)
    for b, n_pad in enumerate(rng.integers(0, PROMPT // 2, B)):   # left padding of up to 7 tokens
        prompt_mask[b, :n_pad] = 0
    prompts[prompt_mask == 0] = 0
    new = rng.integers(1, V, (B, NEW))
    report.note(f"B={B}, prompt {PROMPT} (left-padded), {NEW} new tokens, L={L} H={H} C={C} V={V} float32")

    def cached():
        logits, kv = model.prefill(prompts, prompt_mask)
        out = [logits]
        with single_blas_thread():      # as generate's callers decode (minippo.rlhf.generate)
            for t in range(NEW - 1):
                out.append(model.decode_step(kv, new[:, t]))
        return out

    def recompute():
        out = []
        for t in range(NEW):
            seq = np.concatenate([prompts, new[:, :t]], axis=1)
            am = np.concatenate([prompt_mask, np.ones((B, t), dtype=np.int64)], axis=1)
            out.append(model.prefill(seq, am)[0])
        return out

    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(cached(), recompute()))
    # alternate the two for a fixed time and keep the best of each (the machine is shared: a
    # measurement taken while another job runs would inflate one side of the ratio)
    t_cached = t_full = float("inf")
    budget, start, rounds = (5.0 if quick else 20.0), time.perf_counter(), 0
    while rounds < 2 or time.perf_counter() - start < budget:
        t_cached = min(t_cached, best_time(cached, repeat=2, warmup=0))
        t_full = min(t_full, best_time(recompute, repeat=1, warmup=0))
        rounds += 1
    report.note(f"best of {rounds} alternating rounds ({time.perf_counter() - start:.0f} s)")
    report.time(f"KV cache ({NEW} tokens)", t_cached)
    report.time("recompute the prefix", t_full)
    report.value("tokens/s with the KV cache", B * NEW / t_cached, "tok/s")
    report.note(f"max |logits difference| between the two: {diff:.2e}")
    report.ratio("KV cache speed-up", t_full / t_cached, target=5)
