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
validated (tensors, optimizer state, step) before anything is assigned or any file rewritten. The loop itself,
shared with the SFT stage of ``minippo rlvr``, is :func:`minippo.rlhf.lm_train.fit_lm`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import UsageError, check_range
from minippo.flags import add_config_flags, config_from_args
from minippo.io import in_file, read_json
from minippo.rlhf.checkpoint import save_model
from minippo.rlhf.data.batches import encode_sequences, split_corpus, unigram_loss
from minippo.rlhf.data.corpus import generate_corpus
from minippo.rlhf.data.gold import gold_breakdown
from minippo.rlhf.data.tokenizer import MIN_VOCAB, Tokenizer
from minippo.rlhf.generate import generate_text
from minippo.rlhf.lm_train import (RESULT_NEUTRAL, SEED_SAMPLES, LMConfig, check_lm_folder, fit_lm, heldout_loss,
                                    init_model)
from minippo.runs import Stage, run_lock, stage

# the shared loop's names are importable from here too, where SFT's readers (and lesson 10) look for them
__all__ = ["SFTConfig", "train_sft", "sample_and_judge", "format_report", "add_arguments", "cli_main",
           "LMConfig", "RESULT_NEUTRAL", "fit_lm", "heldout_loss", "init_model"]

@dataclass
class SFTConfig(LMConfig):
    """Everything that defines an SFT run on the review corpus: the corpus, then :class:`LMConfig`'s model
    and optimiser.

    The defaults (L=2, H=4, C=64, 137k parameters) reach a held-out loss of ~1.48 nats/token in their
    1,500 steps (unigram baseline 4.76): the README's ``minippo rlhf`` section quotes both from
    ``docs/results/main_rlhf.json``, with the seconds they take.
    """

    corpus_size: int = 20_000
    """Sentences generated from the grammar (train + held-out), >= 10; 20k in 0.2 s."""
    heldout_frac: float = 0.05
    """Fraction of the corpus held out for the held-out loss, in (0, 0.5]."""
    vocab_size: int = 512
    """Target BPE vocabulary V (specials + 95 ASCII characters + merges), >= 98; 256-1024 here."""
    n_samples: int = 64
    """Sentences sampled at the end to judge the model with the gold score, >= 0."""
    sample_temperature: float = 1.0
    """Temperature of those samples, > 0."""

    def __post_init__(self):
        super().__post_init__()
        check_range("corpus_size", self.corpus_size, 10, None, integer=True)
        check_range("heldout_frac", self.heldout_frac, 0, 0.5, lo_open=True)
        check_range("vocab_size", self.vocab_size, MIN_VOCAB, None, integer=True)
        check_range("n_samples", self.n_samples, 0, None, integer=True)
        check_range("sample_temperature", self.sample_temperature, 0, None, lo_open=True)
        self.gpt_config(self.vocab_size)          # the model's shape is valid (the real V is at most vocab_size)

    @classmethod
    def quick(cls, **overrides) -> "SFTConfig":
        """A tiny run for CI and smoke tests (a few seconds): 3k sentences, V 256, L 1, C 48, 300 steps."""
        base = dict(corpus_size=3000, vocab_size=256, n_layer=1, n_embd=48, steps=300, lr=5e-3,
                    warmup_steps=20, eval_interval=50, ckpt_interval=100, n_samples=16)
        return cls(**{**base, **overrides})


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
    refuse = lambda: check_lm_folder(out_dir, cfg, resume=resume, what="an SFT run")  # noqa: E731
    with run_lock(out_dir, check=refuse), stage("SFT", out_dir, checkpoint=ckpt_dir) as st, \
            single_blas_thread():                                # tiny matrices: faster, deterministic
        result = _train(cfg, out_dir, progress, st, log)
    result["train_seconds"] = time.perf_counter() - t_start
    return result


def _train(cfg: SFTConfig, out_dir: Path, progress: bool, st: Stage, log) -> dict:
    tokenizer, train, held, n_dropped = _prepare(cfg, out_dir)
    V = tokenizer.vocab_size
    model, history, initial_loss, start = fit_lm(cfg, out_dir, st, tokenizer, train, held, progress=progress,
                                                 log=log)
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
