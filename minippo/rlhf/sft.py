"""Stage 1 of RLHF: supervised fine-tuning of TinyGPT on the synthetic review corpus (``minippo sft``).

Legend: B batch (sentences), T tokens, V vocab, C channels, L layers, H heads.

In InstructGPT (Ouyang et al. 2022, arXiv:2203.02155, step 1 of Fig. 2) SFT fine-tunes a pretrained
model on demonstrations. Here there is no pretrained model: SFT *is* the language modelling of the
corpus, and it produces the policy that PPO starts from, the frozen reference pi_ref of the KL
penalty, and the initialisation of the reward model and the critic. The loss is the mean next-token
cross-entropy over the real tokens of ``<bos> sentence <eos>`` (see :mod:`minippo.rlhf.data.batches`)::

    L_SFT = -1/N sum_{b,t: mask=1} log pi_theta(x_{b,t+1} | x_{b,<=t})

Numbers to read while it trains (all on held-out sentences, in nats per token):

- the initial loss is about ln V (a fresh model spreads its probability evenly: ln 512 = 6.24);
- the unigram baseline (word frequencies, no context) is what a model that ignores the context gets;
- the final held-out loss must be well below it: the gap is grammar and sentiment learned from context.

Run folder (``out_dir``)::

    tokenizer.json       trained first (or reused if present)
    config.json          the SFTConfig of the run
    metrics.jsonl        one record per step: step, train/loss, train/grad_norm, train/lr, train/tokens,
                         and eval/heldout_loss every eval_interval steps (step 0 = the initial loss)
    checkpoint/          weights + AdamW moments + step, every ckpt_interval steps (``--resume`` reads it)
    model/               the final model + tokenizer: what the reward model and PPO stages load

Batches are a pure function of ``(seed, step)`` and the checkpoint holds the parameters and the
optimizer moments bitwise, so an interrupted run resumed from its checkpoint reproduces the
uninterrupted run exactly (tested). A non-finite loss or gradient norm stops the run with a
``ValueError`` naming the metric, the step and the first non-finite gradient; the last good
checkpoint stays on disk. The folder follows the rules of :mod:`minippo.runs`: locked while training,
resumed only with the config it was made with (every field but ``ckpt_interval``), the checkpoint
validated (tensors, optimizer state, step) before anything is assigned or any file rewritten.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import UsageError, check_choice, check_fields, check_range, first_nonfinite, parameter_note
from minippo.flags import add_config_flags, config_from_args
from minippo.io import (STATE, MetricsWriter, RunWarning, array_specs, atomic_write_text, checkpoint_folder,
                        has_checkpoint, in_file, read_json, read_metrics)
from minippo.nn.gpt import MAX_BLOCK_SIZE, GPTConfig, TinyGPT
from minippo.progress import progress_bar, progress_write
from minippo.runs import Stage, assign_arrays, check_fresh_start, check_no_run, check_same_config, run_lock, stage
from minippo.nn.optim import AdamW, clip_grad_norm, lr_at
from minippo.rlhf.checkpoint import load_model, save_model
from minippo.rlhf.data.batches import batch_indices, encode_sequences, lm_batch, split_corpus, unigram_loss
from minippo.rlhf.data.corpus import generate_corpus
from minippo.rlhf.data.gold import gold_breakdown
from minippo.rlhf.data.tokenizer import MIN_VOCAB, Tokenizer
from minippo.rlhf.generate import generate_text

# purposes of the random streams derived from cfg.seed: np.random.default_rng([seed, purpose])
SEED_MODEL, SEED_BATCHES, SEED_SAMPLES = 1, 2, 3
#: SFTConfig fields that do not change what a run computes (a resume or a reuse may differ in them)
RESULT_NEUTRAL = ("ckpt_interval",)


@dataclass
class SFTConfig:
    """Everything that defines an SFT run.

    The defaults (L=2, H=4, C=64, 137k parameters) train in about 30 s of one core and reach a held-out
    loss of ~1.48 nats/token (unigram baseline 4.76); ~90 % of their samples get no gold penalty.
    """

    corpus_size: int = 20_000
    """Sentences generated from the grammar (train + held-out), >= 10; 20k in 0.2 s."""
    heldout_frac: float = 0.05
    """Fraction of the corpus held out for the held-out loss, in (0, 0.5]."""
    seed: int = 0
    """Seeds the corpus, the initialisation, the batch order and the samples, >= 0."""
    vocab_size: int = 512
    """Target BPE vocabulary V (specials + 95 ASCII characters + merges), >= 99; 256-1024 here."""
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
    """B, sentences per optimizer step, >= 1 (16-64)."""
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
    n_samples: int = 64
    """Sentences sampled at the end to judge the model with the gold score, >= 0."""
    sample_temperature: float = 1.0
    """Temperature of those samples, > 0."""

    def __post_init__(self):
        check_range("corpus_size", self.corpus_size, 10, None, integer=True)
        check_range("heldout_frac", self.heldout_frac, 0, 0.5, lo_open=True)
        check_range("seed", self.seed, 0, None, integer=True)
        check_range("vocab_size", self.vocab_size, MIN_VOCAB, None, integer=True)
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
        check_range("n_samples", self.n_samples, 0, None, integer=True)
        check_range("sample_temperature", self.sample_temperature, 0, None, lo_open=True)
        self.gpt_config(self.vocab_size)          # the model's shape is valid (the real V is at most vocab_size)

    @classmethod
    def quick(cls, **overrides) -> "SFTConfig":
        """A tiny run for CI and smoke tests (a few seconds): 3k sentences, V 256, L 1, C 48, 300 steps."""
        base = dict(corpus_size=3000, vocab_size=256, n_layer=1, n_embd=48, steps=300, lr=5e-3,
                    warmup_steps=20, eval_interval=50, ckpt_interval=100, n_samples=16)
        return cls(**{**base, **overrides})

    def gpt_config(self, vocab_size: int) -> GPTConfig:
        """The model's shape, with V = the trained tokenizer's real vocabulary size."""
        return GPTConfig(vocab_size=vocab_size, block_size=self.block_size, n_layer=self.n_layer,
                         n_head=self.n_head, n_embd=self.n_embd, dtype=self.dtype)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SFTConfig":
        """The config of ``to_dict``; an unknown field is a ``ValueError`` naming it."""
        return cls(**check_fields(cls, d, "sft_config"))


def init_model(cfg: SFTConfig, vocab_size: int) -> TinyGPT:
    """The model SFT starts from: ``cfg``'s shape, GPT-2 initialisation drawn from ``[cfg.seed, SEED_MODEL]``."""
    return TinyGPT(cfg.gpt_config(vocab_size), rng=np.random.default_rng([cfg.seed, SEED_MODEL]))


def heldout_loss(model: TinyGPT, seqs: list[np.ndarray], pad_id: int = 0, batch_size: int = 256) -> float:
    """Mean cross-entropy per predicted token over all of ``seqs`` (token-weighted, forward only)."""
    order = np.argsort([len(s) for s in seqs], kind="stable")     # similar lengths together: less padding
    total, count = 0.0, 0
    for i in range(0, len(seqs), batch_size):
        idx, targets, mask, attn_mask = lm_batch([seqs[j] for j in order[i:i + batch_size]], pad_id)
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


def _prepare(cfg: SFTConfig, out_dir: Path):
    """Corpus -> (tokenizer, train sequences, held-out sequences, dropped count)."""
    train_texts, held_texts = split_corpus(generate_corpus(cfg.corpus_size, seed=cfg.seed), cfg.heldout_frac)
    tok_path = out_dir / "tokenizer.json"
    if tok_path.exists():
        tokenizer = Tokenizer.load(tok_path)
        if tokenizer.vocab_size > cfg.vocab_size:
            raise ValueError(f"{tok_path} has {tokenizer.vocab_size} tokens but `vocab_size` is {cfg.vocab_size}: "
                             "use a fresh `out_dir` or delete that tokenizer")
    else:
        tokenizer = Tokenizer.train(train_texts, cfg.vocab_size)
        tokenizer.save(tok_path)
    train, n_drop = encode_sequences(tokenizer, train_texts, cfg.block_size)
    held, n_drop_held = encode_sequences(tokenizer, held_texts, cfg.block_size)
    if not train or not held:
        raise ValueError(f"`block_size` = {cfg.block_size} is too small: no sentence of the corpus fits")
    return tokenizer, train, held, n_drop + n_drop_held


def train_sft(cfg: SFTConfig, out_dir, *, resume: bool = False, progress: bool = True, log=print) -> dict:
    """Train TinyGPT on the corpus; see the module docstring for what is written to ``out_dir``.

    Parameters
    ----------
    cfg : SFTConfig
    out_dir : run folder (created)
    resume : continue from ``out_dir/checkpoint`` if it exists (its config must equal ``cfg``); without it a
        folder that already holds a checkpoint is refused (its records are never overwritten)
    progress : show a progress bar (:func:`minippo.progress.progress_bar`)
    log : where "resuming from step N" and other run messages go (default print)

    Returns
    -------
    dict with ``model``, ``tokenizer``, ``history`` (the metrics records), ``initial_loss`` and
    ``ln_V``, ``heldout_loss`` (final), ``unigram_loss``, ``samples`` (list of ``(text, gold)``),
    ``sample_gold_mean``, ``sample_penalty_free`` (fraction of samples with gold penalty 0),
    ``sample_ended`` (fraction that produced an EOS), ``sample_ended_each`` (per sample), ``model_dir``,
    ``n_params``, ``n_train``,
    ``n_heldout``, ``n_dropped``, ``train_seconds`` (this call's wall time), ``resumed_from``.
    """
    if not isinstance(cfg, SFTConfig):
        raise ValueError(f"`cfg` must be an SFTConfig, got {type(cfg).__name__}")
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    ckpt_dir = out_dir / "checkpoint"
    with run_lock(out_dir), stage("SFT", out_dir, checkpoint=ckpt_dir) as st, single_blas_thread():
        # (one BLAS thread: tiny matrices, faster and deterministic)
        if not resume:
            check_no_run(out_dir, ckpt_dir, "an SFT run")
        if not has_checkpoint(ckpt_dir):                         # never another run's or someone's files
            check_fresh_start(out_dir, cfg.to_dict(), "an SFT run", ignore=RESULT_NEUTRAL)
        result = _train(cfg, out_dir, progress, st, log)
    result["train_seconds"] = time.perf_counter() - t_start
    return result


def _resume(cfg: SFTConfig, out_dir: Path, model: TinyGPT, opt: AdamW) -> tuple[int, float]:
    """Restore ``model`` and ``opt`` from ``out_dir/checkpoint``, everything checked first (tensors by
    ``load_model``, the config, the step, the optimizer state); returns ``(step, initial_loss)``."""
    ckpt_dir = out_dir / "checkpoint"
    saved, state = load_model(ckpt_dir, extra_expect=array_specs(opt.state_dict()[0]))
    with in_file(checkpoint_folder(ckpt_dir) / STATE):
        stored = check_fields(SFTConfig, state["sft_config"], "sft_config")
    check_same_config(f"the SFT run in {out_dir}", stored, cfg.to_dict(), ignore=RESULT_NEUTRAL,
                      fresh=f"use another folder than {out_dir} (or delete it)")
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


def _train(cfg: SFTConfig, out_dir: Path, progress: bool, st: Stage, log) -> dict:
    tokenizer, train, held, n_dropped = _prepare(cfg, out_dir)
    V = tokenizer.vocab_size
    model = init_model(cfg, V)
    opt = AdamW(model.params, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=cfg.weight_decay)
    ckpt_dir, metrics_path = out_dir / "checkpoint", out_dir / "metrics.jsonl"

    start = 0
    if has_checkpoint(ckpt_dir):
        start, initial_loss = _resume(cfg, out_dir, model, opt)
        st.saved = f"step {start}"
        log(f"SFT: resuming {out_dir} from its checkpoint at step {start} of {cfg.steps}")
        if not metrics_path.exists():
            warnings.warn(f"{metrics_path} is missing: the records of steps 0-{start} are lost; it will hold the "
                          f"steps after {start} only", RunWarning, stacklevel=2)
        metrics = MetricsWriter(metrics_path, append=True)
        metrics.truncate_after("step", start)       # drop what the interrupted run wrote after its checkpoint
    else:
        atomic_write_text(out_dir / "config.json", json.dumps(cfg.to_dict(), indent=1))
        metrics = MetricsWriter(metrics_path)
        initial_loss = heldout_loss(model, held, tokenizer.pad_id)
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
    bar = progress_bar(range(start, cfg.steps), initial=start, total=cfg.steps, desc="sft", disable=not progress)
    for step in bar:
        n = step + 1                                               # updates done after this iteration
        ix = batch_indices(len(train), cfg.batch_size, step, seed=(cfg.seed, SEED_BATCHES))
        idx, targets, mask, attn_mask = lm_batch([train[i] for i in ix], tokenizer.pad_id)   # (B, T) each
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
            record["eval/heldout_loss"] = heldout_loss(model, held, tokenizer.pad_id)
            _check_finite("eval/heldout_loss", record["eval/heldout_loss"], n, st)
            bar.set_postfix(loss=f"{loss:.3f}", heldout=f"{record['eval/heldout_loss']:.3f}")
        metrics.write(record)
        if n % cfg.ckpt_interval == 0 or n == cfg.steps:
            save_checkpoint(n)
            st.saved = f"step {n}"
    bar.close()

    history = read_metrics(metrics_path)
    final = [r["eval/heldout_loss"] for r in history if "eval/heldout_loss" in r][-1]
    unigram = unigram_loss(train, held, V)
    samples, stats = sample_and_judge(model, tokenizer, cfg.n_samples, cfg.sample_temperature,
                                      np.random.default_rng([cfg.seed, SEED_SAMPLES]))
    model_dir = save_model(out_dir / "model", model, tokenizer=tokenizer, extra_state={
        "sft_config": cfg.to_dict(), "step": cfg.steps, "heldout_loss": final,
        "unigram_loss": unigram, "initial_loss": initial_loss})
    return {"model": model, "tokenizer": tokenizer, "history": history, "initial_loss": initial_loss,
            "ln_V": math.log(V), "heldout_loss": final, "unigram_loss": unigram,
            "samples": samples, **stats, "model_dir": str(model_dir), "n_params": model.num_params(),
            "n_train": len(train), "n_heldout": len(held), "n_dropped": n_dropped, "resumed_from": start,
            "config": cfg}


def sample_and_judge(model, tokenizer, n: int, temperature: float, rng: np.random.Generator):
    """``n`` sentences written from ``<bos>`` alone, and how the simulated human rates them.

    Returns ``(samples, stats)``: ``samples`` a list of ``(text, gold)``; ``stats`` has
    ``sample_gold_mean``, ``sample_penalty_free`` (fraction with gold penalty 0: grammatical, one
    period, no repeats), ``sample_ended`` (fraction that produced an EOS) and ``sample_ended_each`` (list of
    n bools: which samples produced one; the others stopped at what fits in the block, often mid-word).
    """
    if n == 0:
        return [], {"sample_gold_mean": float("nan"), "sample_penalty_free": float("nan"), "sample_ended": float("nan"),
                    "sample_ended_each": []}
    texts, gen = generate_text(model, tokenizer, [""] * n, rng=rng, temperature=temperature)
    judged = [gold_breakdown(t) for t in texts]
    return ([(t, j["gold"]) for t, j in zip(texts, judged)],
            {"sample_gold_mean": float(np.mean([j["gold"] for j in judged])),
             "sample_penalty_free": float(np.mean([j["penalty"] == 0 for j in judged])),
             "sample_ended": float(gen.ended.mean()), "sample_ended_each": [bool(e) for e in gen.ended]})


def format_report(r: dict, n_show: int = 8) -> str:
    """The numbers an SFT run prints at the end."""
    lines = [f"model: {r['n_params']:,} parameters ({r['config'].n_layer} layers, C={r['config'].n_embd}, "
             f"H={r['config'].n_head}, V={r['model'].cfg.vocab_size}); {r['n_train']} training / "
             f"{r['n_heldout']} held-out sentences ({r['n_dropped']} longer than block_size dropped)",
             f"initial held-out loss {r['initial_loss']:.3f} nats/token  vs  ln V = {r['ln_V']:.3f}",
             f"final   held-out loss {r['heldout_loss']:.3f}  vs  unigram baseline {r['unigram_loss']:.3f}",
             f"samples from <bos> (T={r['config'].sample_temperature:g}): mean gold {r['sample_gold_mean']:+.3f}, "
             f"{r['sample_penalty_free']:.0%} with no gold penalty, {r['sample_ended']:.0%} ended with <eos>"]
    lines += [f"  gold {g:+.2f} | {t}" for t, g in r["samples"][:n_show]]
    lines.append(f"wall time {r['train_seconds']:.1f} s; model saved in {r['model_dir']}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# the `minippo sft` command
# ----------------------------------------------------------------------------------------------

#: the SFTConfig fields that are flags of ``minippo sft`` (the others keep their defaults)
FLAGS = ("steps", "seed", "n_layer", "n_head", "n_embd", "block_size", "batch_size", "lr", "corpus_size", "vocab_size")


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, metavar="DIR", help="run folder (default: runs/sft-<timestamp>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out with the config saved "
                        "there (other flags are ignored); without it, a folder holding a checkpoint made with the "
                        "same flags is resumed, and one made with other flags is refused")
    parser.add_argument("--quick", action="store_true", help="tiny config for CI: a few seconds")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_config_flags(parser, SFTConfig, only=FLAGS, title="SFTConfig fields (the others keep their defaults)")


def cli_main(args) -> int:
    if args.resume and args.out is None:
        raise UsageError("--resume needs --out (the run folder to continue)")
    out = Path(args.out) if args.out else Path("runs") / time.strftime("sft-%Y%m%d-%H%M%S")
    if args.resume and (out / "config.json").exists():
        with in_file(out / "config.json"):
            cfg = SFTConfig.from_dict(read_json(out / "config.json"))
        print(f"resuming {out} with its saved config")
    else:
        cfg = config_from_args(args, SFTConfig.quick() if args.quick else SFTConfig())   # errors name the flag
    print(f"SFT -> {out}")
    result = train_sft(cfg, out, resume=True, progress=not args.no_progress)
    print(format_report(result))
    return 0
