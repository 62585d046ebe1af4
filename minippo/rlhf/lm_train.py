"""The language-model training loop of a run folder, shared by the two SFT runs: ``minippo sft`` on the review
corpus (:mod:`minippo.rlhf.sft`) and the SFT stage of ``minippo rlvr`` on arithmetic problems (:mod:`minippo.rlvr`).

Legend: B batch (sequences), T tokens, V vocab, C channels, L layers, H heads.

:class:`LMConfig` is the model's shape and the optimiser; :func:`fit_lm` trains a TinyGPT on token sequences
``<bos> ... <eos>`` with the next-token cross-entropy over the tokens a batch's mask selects::

    L = -1/N sum_{b,t: mask=1} log pi_theta(x_{b,t+1} | x_{b,<=t})

(every real token for the corpus: :func:`minippo.rlhf.data.batches.lm_batch`; only the answer for a task with
a prompt). What it writes into the run folder, and how a run resumes bitwise, is in :mod:`minippo.rlhf.sft`'s
docstring: ``config.json``, ``metrics.jsonl`` (step, train/loss, train/grad_norm, train/lr, train/tokens, and
eval/heldout_loss every eval_interval steps), ``checkpoint/`` (weights, AdamW moments, step). Batches are a
pure function of ``(seed, step)``; a non-finite loss or gradient norm stops the run naming the metric, the step
and the first non-finite gradient, the last good checkpoint kept.
"""
from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minippo.checks import check_choice, check_fields, check_range, first_nonfinite, parameter_note
from minippo.io import (STATE, MetricsWriter, RunWarning, array_specs, atomic_write_text, checkpoint_folder,
                        has_checkpoint, in_file, read_json, read_metrics)
from minippo.nn.gpt import MAX_BLOCK_SIZE, GPTConfig, TinyGPT
from minippo.nn.optim import AdamW, clip_grad_norm, lr_at
from minippo.progress import progress_bar, progress_write
from minippo.rlhf.checkpoint import load_model, save_model
from minippo.rlhf.data.batches import batch_indices, lm_batch
from minippo.runs import Stage, assign_arrays, check_fresh_start, check_no_run, check_same_config

# purposes of the random streams derived from cfg.seed: np.random.default_rng([seed, purpose])
SEED_MODEL, SEED_BATCHES, SEED_SAMPLES = 1, 2, 3
#: LMConfig fields that do not change what a run computes (a resume or a reuse may differ in them)
RESULT_NEUTRAL = ("ckpt_interval",)


@dataclass
class LMConfig:
    """The model's shape and the optimiser of a language-model training run: everything :func:`fit_lm` reads.

    A run adds its data's fields in a subclass: :class:`minippo.rlhf.sft.SFTConfig` (the review corpus) and
    ``minippo.rlvr.task.TaskSFTConfig`` (arithmetic problems with checkable answers).
    """

    seed: int = 0
    """Seeds the data, the initialisation, the batch order and the samples, >= 0."""
    block_size: int = 64
    """Longest sequence T (prompt + response), >= 8; corpus sentences are <= 43 tokens at V = 512."""
    n_layer: int = 2
    """L, transformer blocks, >= 1 (1-4 here)."""
    n_head: int = 4
    """H, attention heads per block, >= 1; must divide n_embd."""
    n_embd: int = 64
    """C, width of the residual stream, >= 1 (32-128 here; 96 or 128 reach the same held-out loss, slower)."""
    dtype: str = "float32"
    """"float32" (fast) or "float64" (for gradient checks)."""
    batch_size: int = 32
    """B, sequences per optimizer step, >= 1 (16-64)."""
    steps: int = 1500
    """Optimizer steps, >= 1 (1500 x 32 sentences = 2.5 epochs of the default corpus)."""
    lr: float = 3e-3
    """Peak learning rate of AdamW, > 0 (1e-3 - 5e-3 for models this small)."""
    warmup_steps: int = 50
    """Linear warm-up from lr / warmup_steps to lr, in [0, steps]; then a cosine decay."""
    min_lr_frac: float = 0.1
    """The cosine decays to lr * min_lr_frac at the last step, in [0, 1]."""
    weight_decay: float = 0.01
    """Decoupled AdamW weight decay on matrices (not on biases / LayerNorm), >= 0 (0-0.1)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip, > 0 (0.5-5)."""
    eval_interval: int = 100
    """Held-out loss every this many steps (and at the last step), >= 1."""
    ckpt_interval: int = 200
    """Checkpoint every this many steps (and at the last step), >= 1."""

    def __post_init__(self):
        check_range("seed", self.seed, 0, None, integer=True)
        check_range("block_size", self.block_size, 8, MAX_BLOCK_SIZE, integer=True)
        for name in ("n_layer", "n_head", "n_embd", "batch_size", "steps", "eval_interval", "ckpt_interval"):
            check_range(name, getattr(self, name), 1, None, integer=True)
        if self.n_embd % self.n_head:
            raise ValueError(f"`n_embd` (={self.n_embd}) must be divisible by `n_head` (={self.n_head})")
        check_choice("dtype", self.dtype, ("float32", "float64"))
        check_range("lr", self.lr, 0, None, lo_open=True)
        check_range("warmup_steps", self.warmup_steps, 0, self.steps, integer=True)
        check_range("min_lr_frac", self.min_lr_frac, 0, 1)
        check_range("weight_decay", self.weight_decay, 0, None)
        check_range("grad_clip", self.grad_clip, 0, None, lo_open=True)

    def gpt_config(self, vocab_size: int) -> GPTConfig:
        """The model's shape, with V = the tokenizer's real vocabulary size."""
        return GPTConfig(vocab_size=vocab_size, block_size=self.block_size, n_layer=self.n_layer,
                         n_head=self.n_head, n_embd=self.n_embd, dtype=self.dtype)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        """The config of ``to_dict``; an unknown field is a ``ValueError`` naming it."""
        return cls(**check_fields(cls, d, "sft_config"))


def init_model(cfg: LMConfig, vocab_size: int) -> TinyGPT:
    """The model SFT starts from: ``cfg``'s shape, GPT-2 initialisation drawn from ``[cfg.seed, SEED_MODEL]``."""
    return TinyGPT(cfg.gpt_config(vocab_size), rng=np.random.default_rng([cfg.seed, SEED_MODEL]))


def heldout_loss(model: TinyGPT, seqs: list[np.ndarray], pad_id: int = 0, batch_size: int = 256, *,
                 make_batch=lm_batch) -> float:
    """Mean cross-entropy per predicted token over all of ``seqs`` (token-weighted, forward only); the tokens
    that count are those of ``make_batch``'s mask (:func:`minippo.rlhf.data.batches.lm_batch`: all of them)."""
    order = np.argsort([len(s) for s in seqs], kind="stable")     # similar lengths together: less padding
    total, count = 0.0, 0
    for i in range(0, len(seqs), batch_size):
        idx, targets, mask, attn_mask = make_batch([seqs[j] for j in order[i:i + batch_size]], pad_id)
        n = int(mask.sum())
        total += float(model.lm_loss(idx, targets, mask, attn_mask)) * n
        count += n
    return total / count


def _check_finite(metric: str, value: float, step: int, st: Stage, grads: dict | None = None,
                  params: dict | None = None) -> None:
    """The NaN guard: stop with the metric, the step, the first non-finite gradient and the parameter that went bad
    (:func:`minippo.checks.parameter_note`) named; what is kept on disk is said (the last good checkpoint, or that
    none was written yet)."""
    if not math.isfinite(value):
        bad = None if grads is None else first_nonfinite(grads)
        where = f" (the first non-finite gradient is that of `{bad}`)" if bad else ""
        where += parameter_note(params) if params is not None else ""
        raise ValueError(f"`{metric}` is {value} at step {step}{where}: training stopped; {st.kept()}")


def _resume(cfg: LMConfig, out_dir: Path, model: TinyGPT, opt: AdamW, what: str) -> tuple[int, float]:
    """Restore ``model`` and ``opt`` from ``out_dir/checkpoint``, everything checked first (tensors by
    ``load_model``, the config, the step, the optimizer state); returns ``(step, initial_loss)``."""
    ckpt_dir = out_dir / "checkpoint"
    saved, state = load_model(ckpt_dir, extra_expect=array_specs(opt.state_dict()[0]))
    _check_same_config(checkpoint_folder(ckpt_dir) / STATE, state["sft_config"], cfg, out_dir, what)
    with in_file(checkpoint_folder(ckpt_dir) / STATE):
        step, initial_loss = state["step"], state["initial_loss"]
        check_range("step", step, 1, cfg.steps, integer=True)
        check_range("initial_loss", initial_loss, 0, None)
        opt.check_state_dict(state["extra_arrays"], state["optimizer"])
        if state["optimizer"]["t"] != step:
            raise ValueError(f"`optimizer.t` must equal `step` ({step}), got {state['optimizer']['t']!r}")
    opt.load_state_dict(state["extra_arrays"], state["optimizer"])        # everything checked: assign
    assign_arrays(model.params, saved.params, source=ckpt_dir)   # in place: the optimizer holds these arrays
    return step, float(initial_loss)


def check_lm_folder(out_dir: Path, cfg: LMConfig, *, resume: bool, what: str) -> None:
    """The refusals of an LM run's folder, which only read it (the ``check`` of
    :func:`minippo.runs.run_lock`): without ``resume``, a folder holding a checkpoint (another run's
    records); without a checkpoint, a folder of someone's files or of another kind of run
    (:func:`minippo.runs.check_fresh_start`); with a checkpoint to resume, one of another kind of run or
    made with another config (what :func:`_resume` checks, before SFT writes its tokenizer)."""
    if not resume:
        check_no_run(out_dir, out_dir / "checkpoint", what)
    if not has_checkpoint(out_dir / "checkpoint"):
        check_fresh_start(out_dir, cfg.to_dict(), what, ignore=RESULT_NEUTRAL)
        return
    path = checkpoint_folder(out_dir / "checkpoint") / STATE
    state = read_json(path)
    stored = state.get("sft_config") if isinstance(state, dict) else None
    if not isinstance(stored, dict):                             # a PPO or DPO run's checkpoint
        found = state.get("format") if isinstance(state, dict) else None
        which = f"is of format {found!r}" if isinstance(found, str) else "is not one"
        raise FileExistsError(f"{out_dir} holds something other than {what} (its checkpoint {which}): use another "
                              "folder; nothing was written")
    _check_same_config(path, stored, cfg, out_dir, "SFT")


def _check_same_config(path: Path, stored, cfg: LMConfig, out_dir: Path, what: str) -> None:
    """The checkpoint's ``sft_config`` (``stored``, read from the state.json ``path``) must hold
    ``cfg``'s fields and equal it up to the result-neutral ones; the error names the file or fields."""
    with in_file(path):
        stored = check_fields(type(cfg), stored, "sft_config")
    check_same_config(f"the {what} run in {out_dir}", stored, cfg.to_dict(), ignore=RESULT_NEUTRAL,
                      fresh=f"use another folder than {out_dir} (or delete it)")


def fit_lm(cfg: LMConfig, out_dir: Path, st: Stage, tokenizer, train: list[np.ndarray], held: list[np.ndarray], *,
           make_batch=lm_batch, progress: bool = True, log=print, what: str = "SFT"):
    """The language-model training loop of a run folder: init (or resume from ``out_dir/checkpoint``), ``cfg.steps``
    AdamW steps on minibatches of ``train`` with warm-up and cosine decay, the held-out loss on ``held``, the NaN
    guard, ``metrics.jsonl`` and checkpoints (the module docstring). ``make_batch(seqs, pad_id) -> (idx, targets,
    mask, attn_mask)`` builds a minibatch (default :func:`~minippo.rlhf.data.batches.lm_batch`: every token
    counts in the loss); ``what`` names the run in messages. The caller holds the folder's lock and its
    :class:`~minippo.runs.Stage` ``st``. Returns ``(model, history, initial_loss, resumed_from)``."""
    V = tokenizer.vocab_size
    model = init_model(cfg, V)
    opt = AdamW(model.params, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=cfg.weight_decay)
    ckpt_dir, metrics_path = out_dir / "checkpoint", out_dir / "metrics.jsonl"

    start = 0
    if has_checkpoint(ckpt_dir):
        start, initial_loss = _resume(cfg, out_dir, model, opt, what)
        st.saved = f"step {start}"
        log(f"{what}: resuming {out_dir} from its checkpoint at step {start} of {cfg.steps}")
        if not metrics_path.exists():
            warnings.warn(f"{metrics_path} is missing: the records of steps 0-{start} are lost; it will hold the "
                          f"steps after {start} only", RunWarning, stacklevel=2)
        metrics = MetricsWriter(metrics_path, append=True)
        metrics.truncate_after("step", start)       # drop what the interrupted run wrote after its checkpoint
    else:
        atomic_write_text(out_dir / "config.json", json.dumps(cfg.to_dict(), indent=1))
        metrics = MetricsWriter(metrics_path)
        initial_loss = heldout_loss(model, held, tokenizer.pad_id, make_batch=make_batch)
        _check_finite("eval/heldout_loss", initial_loss, 0, st)
        metrics.write({"step": 0, "eval/heldout_loss": initial_loss})

    def save_checkpoint(step):
        arrays, scalars = opt.state_dict()
        save_model(ckpt_dir, model, tokenizer=tokenizer, extra_arrays=arrays,
                   extra_state={"sft_config": cfg.to_dict(), "step": step, "optimizer": scalars,
                                "initial_loss": initial_loss})

    if progress:
        progress_write(f"{model.num_params():,} parameters; initial held-out loss {initial_loss:.3f} nats/token "
                       f"(ln V = {math.log(V):.3f}); " + (f"resuming at step {start}" if start else "training"))
    bar = progress_bar(range(start, cfg.steps), initial=start, total=cfg.steps, desc=what.lower(),
                       disable=not progress)
    for step in bar:
        n = step + 1                                               # updates done after this iteration
        ix = batch_indices(len(train), cfg.batch_size, step, seed=(cfg.seed, SEED_BATCHES))
        idx, targets, mask, attn_mask = make_batch([train[i] for i in ix], tokenizer.pad_id)   # (B, T) each
        loss, grads = model.lm_loss_and_grads(idx, targets, mask, attn_mask)
        grad_norm = clip_grad_norm(grads, cfg.grad_clip)
        _check_finite("train/loss", loss, n, st, params=model.params)
        _check_finite("train/grad_norm", grad_norm, n, st, grads, model.params)
        # the next two lines are AdamW with linear warm-up and cosine decay
        lr = lr_at(step, cfg.steps, cfg.lr, warmup_steps=cfg.warmup_steps, schedule="cosine",
                   min_lr=cfg.lr * cfg.min_lr_frac)
        opt.step(grads, lr=lr)
        record = {"step": n, "train/loss": float(loss), "train/grad_norm": grad_norm, "train/lr": lr,
                  "train/tokens": int(mask.sum())}
        if n % cfg.eval_interval == 0 or n == cfg.steps:
            record["eval/heldout_loss"] = heldout_loss(model, held, tokenizer.pad_id, make_batch=make_batch)
            _check_finite("eval/heldout_loss", record["eval/heldout_loss"], n, st)
            bar.set_postfix(loss=f"{loss:.3f}", heldout=f"{record['eval/heldout_loss']:.3f}")
        metrics.write(record)
        if n % cfg.ckpt_interval == 0 or n == cfg.steps:
            save_checkpoint(n)
            st.saved = f"step {n}"
    bar.close()
    return model, read_metrics(metrics_path), initial_loss, start


