"""TinyGPT forward+backward: tokens/s and achieved GFLOP/s as a fraction of the float32 matmul peak.

Model and batch of issue #2: B=32, T=64, L=4, H=4, C=128, V=512, float32, one
``lm_loss_and_grads`` call per step (forward, cross-entropy, backward, every gradient).

FLOPs are counted explicitly (PaLM / nanoGPT convention, multiply-add = 2 FLOPs)::

    N          = 12 L C^2 + V C          weights that enter a matmul: per block c_attn 3C^2, c_proj C^2,
                                         c_fc 4C^2, mlp c_proj 4C^2; plus the tied LM head (V x C)
    per token  = 6 N                     2N forward + 4N backward (dx and dW)
               + 12 L T C                attention QK^T and AV, forward 4TC + backward 8TC per layer
                                         (the full T x T product, as computed; the causal mask saves nothing)
    per step   = B T (6 N + 12 L T C)

LayerNorm, GELU, softmax, embeddings and the residual adds are not counted: they are the overhead
that keeps the achieved rate below the matmul peak. The section also prints the time of the
matmuls alone (the same GEMMs on the same shapes) and of the step with the NumPy reference layers
(``kernels.use_kernels(False)``), to show where the time goes, and, for each time target, the step
time it asks for, what the GEMMs alone leave of it for the rest of the step, and what the rest takes.

When PyTorch is installed (it is not a dependency), the same model with the same weights runs in torch
eager mode (:mod:`minippo.bench.torch_ref`: forward, cross-entropy, autograd backward) on as many threads
as OpenBLAS uses, timed in the same alternating rounds; the section prints both losses (they must agree)
and torch's time over ours.
"""
from __future__ import annotations

import importlib.util
import time

import numpy as np

from minippo import kernels
from minippo.blas import blas_threads
from minippo.bench.matmul import matmul_peak_gflops
from minippo.bench.report import Report, best_time
from minippo.nn.gpt import GPTConfig, TinyGPT

B, T, L, H, C, V = 32, 64, 4, 4, 128, 512
#: the targets: fwd+bwd at this % of the matmul peak, and PyTorch's time at this multiple of ours
PEAK_PCT_TARGET, TORCH_RATIO_TARGET = 60, 1.25


def flops_per_step(B: int, T: int, L: int, C: int, V: int) -> float:
    """B T (6 N + 12 L T C), N = 12 L C^2 + V C (see the module docstring)."""
    N = 12 * L * C * C + V * C
    return float(B * T * (6 * N + 12 * L * T * C))


def matmul_only_step(rng: np.random.Generator):
    """A function running exactly the GEMMs of one forward+backward step (no elementwise work)."""
    f32 = np.float32
    x = rng.standard_normal((B * T, C), dtype=f32)
    h4 = rng.standard_normal((B * T, 4 * C), dtype=f32)
    qkv_w, proj_w = rng.standard_normal((C, 3 * C), dtype=f32), rng.standard_normal((C, C), dtype=f32)
    fc_w, mproj_w = rng.standard_normal((C, 4 * C), dtype=f32), rng.standard_normal((4 * C, C), dtype=f32)
    wte = rng.standard_normal((V, C), dtype=f32)
    g3, g1, gv = (rng.standard_normal((B * T, n), dtype=f32) for n in (3 * C, C, V))
    q = rng.standard_normal((B, H, T, C // H), dtype=f32)
    att = rng.standard_normal((B, H, T, T), dtype=f32)

    def step():
        for _ in range(L):
            # forward: c_attn, QK^T, AV, c_proj, c_fc, mlp c_proj
            x @ qkv_w, q @ q.swapaxes(-1, -2), att @ q, x @ proj_w, x @ fc_w, h4 @ mproj_w
            # backward: dx and dW of the four linears, and the four attention products
            g1 @ mproj_w.T, h4.T @ g1, h4 @ fc_w.T, x.T @ h4, g1 @ proj_w.T, x.T @ g1, g3 @ qkv_w.T, x.T @ g3
            q @ q.swapaxes(-1, -2), att.swapaxes(-1, -2) @ q, att @ q, att.swapaxes(-1, -2) @ q  # datt dv dq dk
        x @ wte.T, gv @ wte, x.T @ gv          # tied LM head: forward, dx, dW
    return step


def bench(report: Report, quick: bool = False) -> None:

    rng = np.random.default_rng(0)
    model = TinyGPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C), seed=0)
    idx = rng.integers(0, V, (B, T))
    targets = rng.integers(0, V, (B, T))
    mask = np.ones((B, T), dtype=np.float32)
    step = lambda: model.lm_loss_and_grads(idx, targets, mask)
    gemms = matmul_only_step(rng)

    flops = flops_per_step(B, T, L, C, V)
    report.note(f"B={B} T={T} L={L} H={H} C={C} V={V} float32, one lm_loss_and_grads per step")
    report.note("FLOPs/step = B*T*(6*N + 12*L*T*C), N = 12*L*C^2 + V*C "
                f"= {12 * L * C * C + V * C:,}  ->  {flops / 1e9:.2f} GFLOP")

    # The machine is shared: measure the step, the GEMMs alone and the matmul peak in alternating
    # rounds for a fixed time and keep the best of each, so that all three see the same (quietest)
    # conditions. The peak used is the larger of this and the matmul section's (the conservative choice).
    t = t_mm = t_torch = float("inf")
    torch_step, torch_loss = None, None
    if importlib.util.find_spec("torch") is not None:
        from minippo.bench.torch_ref import make_torch_step   # lazy: torch is optional and slow to import
        torch_step, torch_loss = make_torch_step(model.params, L, H, idx, targets, blas_threads() or 1)
    peak = report.shared.get("matmul_peak_gflops", 0.0)
    budget, start, rounds = (8.0 if quick else 30.0), time.perf_counter(), 0
    with kernels.use_kernels(True):                    # the step with the numba kernels of nn/_kernels.py
        while rounds < 2 or time.perf_counter() - start < budget:
            t = min(t, best_time(step, repeat=3, warmup=1))
            t_mm = min(t_mm, best_time(gemms, repeat=3, warmup=1))
            if torch_step is not None:
                t_torch = min(t_torch, best_time(torch_step, repeat=3, warmup=1))
            peak = max(peak, matmul_peak_gflops(1024, repeat=2))
            rounds += 1
    report.note(f"best of {rounds} alternating rounds ({time.perf_counter() - start:.0f} s)")
    report.shared["matmul_peak_gflops"] = peak
    with kernels.use_kernels(False):                   # the NumPy layers of layers.py
        t_ref = best_time(step, repeat=2 if quick else 5, warmup=1)

    report.value("float32 matmul peak used", peak, "GFLOP/s")
    report.time("forward+backward step", t)
    report.value("tokens/s", B * T / t, "tok/s")
    report.value("achieved", flops / t / 1e9, "GFLOP/s")
    report.ratio("fwd+bwd % of matmul peak", 100 * flops / t / 1e9 / peak, target=PEAK_PCT_TARGET, unit="%")
    report.time("the same GEMMs alone", t_mm)
    rest = 100 * (t - t_mm) / t
    report.note(f"GEMMs alone reach {100 * flops / t_mm / 1e9 / peak:.0f}% of peak; the rest of the step "
                f"(LayerNorm, GELU, softmax, cross-entropy, embeddings, adds, copies) is {rest:.0f}% of it")
    report.note(_room(f"{PEAK_PCT_TARGET}% of the peak", flops / (PEAK_PCT_TARGET / 100 * peak * 1e9), t_mm, t))
    report.time("step with the NumPy reference layers", t_ref)
    report.ratio("fused kernels vs NumPy layers", t_ref / t)
    if torch_step is None:
        report.note("PyTorch is not installed: no side-by-side torch timing")
        return
    import torch                                       # lazy: optional (imported above when installed)
    with kernels.use_kernels(True):
        loss = model.lm_loss(idx, targets, mask)
    report.note(f"PyTorch {torch.__version__} eager, {torch.get_num_threads()} thread(s): loss {torch_loss:.6f} "
                f"(minippo {loss:.6f})")
    report.time("the same step in PyTorch eager", t_torch)
    report.ratio("PyTorch time / minippo time", t_torch / t, target=TORCH_RATIO_TARGET)
    report.note(_room(f"PyTorch's time / {TORCH_RATIO_TARGET:g}", t_torch / TORCH_RATIO_TARGET, t_mm, t))


def _room(target: str, budget: float, t_mm: float, t: float) -> str:
    """What a time target leaves for the step's non-GEMM work, against what that work takes now (seconds in)."""
    left = budget - t_mm
    room = (f"leaving {left * 1e3:.1f} ms for the rest" if left > 0 else
            f"{-left * 1e3:.1f} ms more than the whole step may take, with nothing left for the rest")
    return (f"{target}: a step of {budget * 1e3:.1f} ms; the GEMMs alone take {t_mm * 1e3:.1f} ms, {room}; "
            f"the rest takes {(t - t_mm) * 1e3:.1f} ms now")
