"""Stage 2 of RLHF, ``minippo rm``: preference pairs -> Bradley-Terry reward model -> normalisation.

Legend: B batch (sequences), N pairs, T tokens, K responses per prompt.

The model and its loss are :mod:`minippo.rlhf.reward_model`; the data is :mod:`minippo.rlhf.data.preferences`.
This module is the run around them: :class:`RMConfig` (every knob, documented and validated),
:func:`train_reward_model` (sample K SFT responses per prompt, label all their pairs with the simulated
human, split by prompt, train with AdamW on seeded minibatches, normalise on fresh SFT samples, report
held-out accuracy and the correlation with the gold score) and the ``minippo rm`` command.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import UsageError, check_choice, check_fields, check_range, first_nonfinite
from minippo.flags import add_config_flags, config_from_args
from minippo.io import STATE, MetricsWriter, atomic_write_text, checkpoint_folder, has_checkpoint, in_file, read_json
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.progress import progress_bar
from minippo.runs import (check_fresh_start, check_same_config, check_same_inputs, input_identity, run_lock, stage,
                          stored_inputs)
from minippo.nn.optim import AdamW, clip_grad_norm, lr_at
from minippo.rlhf.checkpoint import load_model, resolve_model_dir
from minippo.rlhf.data.batches import batch_indices, steps_per_epoch
from minippo.rlhf.data.corpus import PROMPTS, sample_prompts
from minippo.rlhf.data.preferences import (PreferencePairs, gold_order_accuracy, make_preference_pairs,
                                           pairwise_accuracy, pearson, sample_policy, spearman)
from minippo.rlhf.data.tokenizer import Tokenizer
from minippo.rlhf.generate import check_response_fits
from minippo.rlhf.reward_model import STATE_KEY, RewardModel, bradley_terry_forward

# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------

RM_INITS = ("sft", "fresh")


@dataclass
class RMConfig:
    """Everything that defines a reward-model run (``minippo rm``). The defaults take ~30-60 s on 2
    cores with the default SFT model; :meth:`quick` a few seconds.

    Data: ``n_prompts`` prompts x K = ``responses_per_prompt`` SFT samples, every pair of a prompt's
    samples labelled (up to n_prompts K (K - 1) / 2 comparisons, InstructGPT section 3.5 with K = 4..9).
    Scoring each sample once for its K - 1 comparisons gives ~K/2 times more labels per forward pass
    than independent pairs; at equal compute it reached a higher held-out accuracy (K = 8 vs 2: +3 points).

    Sizes for studies (lesson 19 trains several): ``n_train`` caps the training prompts while the
    held-out prompts stay the same, and ``init`` / ``n_layer`` / ``n_embd`` / ``n_head`` shrink the model.
    With one ``seed`` the samples, labels, split and fresh samples do not depend on ``n_train`` or the
    model size, and a smaller ``n_train`` trains on a random subset of a larger one's prompts.
    """

    n_prompts: int = 2000
    """Prompts sampled for the preference data (train + held-out), >= 2; 200-5000 here."""
    responses_per_prompt: int = 8
    """K, SFT samples per prompt; all K (K - 1) / 2 pairs of them are labelled, >= 2 (2-9)."""
    heldout_frac: float = 0.1
    """Fraction of the prompts (with all their pairs) held out for the held-out loss/accuracy, in (0, 1)."""
    n_train: int | None = None
    """Train on at most this many of the non-held-out prompts (None = all of them), >= 1."""
    label_temperature: float = 0.1
    """tau of the simulated human, P(a > b) = sigmoid((gold_a - gold_b) / tau), >= 0 (0 = noiseless).
    0.1 labels some SFT pairs against gold, so even the best possible reward model disagrees with some
    held-out labels: lesson 11 measures how many pairs (its labels' agreement with gold) and that best
    possible accuracy (Bayes)."""
    temperature: float = 1.0
    """Sampling temperature of the SFT policy for the pairs and the fresh samples, > 0 (PPO's too)."""
    max_new_tokens: int = 40
    """Longest response sampled, >= 1; prompt + response must fit the SFT model's block_size."""
    epochs: int = 3
    """Passes over the training prompts, >= 1 (1-4)."""
    batch_prompts: int = 8
    """Prompts per optimizer step (their K responses in one batch, all their pairs in the loss), >= 1."""
    lr: float = 2e-3
    """Peak AdamW learning rate, > 0 (5e-4 - 3e-3); cosine decay to 0.1 lr after a short warm-up."""
    weight_decay: float = 0.01
    """Decoupled AdamW weight decay on matrices, >= 0."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip, > 0."""
    init: str = "sft"
    """``"sft"``: start from the SFT weights (a new scalar head); ``"fresh"``: a new random TinyGPT."""
    n_layer: int | None = None
    """Blocks of the reward model (None = the SFT model's); with init="sft" the first n_layer SFT blocks."""
    n_embd: int | None = None
    """Width C of a ``"fresh"`` reward model (None = the SFT model's)."""
    n_head: int | None = None
    """Heads of a ``"fresh"`` reward model (None = the SFT model's); must divide its n_embd."""
    n_eval: int = 512
    """Fresh SFT samples (in no pair) for the normalisation and the correlation with gold, >= 2."""
    n_evals: int = 8
    """Held-out evaluations spread over the training (plus one before it), >= 1: the curve's points."""
    seed: int = 0
    """Seeds the samples, labels, split, head init, minibatch order and fresh samples, >= 0."""

    def __post_init__(self):
        for name in ("n_prompts", "responses_per_prompt", "n_eval"):
            check_range(name, getattr(self, name), 2, None, integer=True)
        check_range("heldout_frac", self.heldout_frac, 0, 1, lo_open=True, hi_open=True)
        if not 1 <= round(self.heldout_frac * self.n_prompts) < self.n_prompts:
            raise ValueError(f"`heldout_frac`={self.heldout_frac} leaves an empty split of n_prompts={self.n_prompts}")
        for name in ("n_train", "n_layer", "n_embd", "n_head"):
            if getattr(self, name) is not None:
                check_range(name, getattr(self, name), 1, None, integer=True)
        check_range("label_temperature", self.label_temperature, 0, None)
        check_range("temperature", self.temperature, 0, None, lo_open=True)
        for name in ("max_new_tokens", "epochs", "batch_prompts", "n_evals"):
            check_range(name, getattr(self, name), 1, None, integer=True)
        check_range("lr", self.lr, 0, None, lo_open=True)
        check_range("weight_decay", self.weight_decay, 0, None)
        check_range("max_grad_norm", self.max_grad_norm, 0, None, lo_open=True)
        check_choice("init", self.init, RM_INITS)
        if self.init == "sft" and (self.n_embd is not None or self.n_head is not None):
            raise ValueError("`n_embd` and `n_head` apply to init='fresh' only (init='sft' keeps the SFT width)")
        check_range("seed", self.seed, 0, None, integer=True)

    @classmethod
    def quick(cls, **overrides) -> "RMConfig":
        """A run of a few seconds for CI and smoke tests: 400 prompts x 8 samples, 4 epochs, 64 fresh samples
        (held-out accuracy ~0.7 on the pipeline's quick SFT policy)."""
        base = dict(n_prompts=400, heldout_frac=0.15, epochs=4, n_eval=64, n_evals=4)
        return cls(**{**base, **overrides})

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RMConfig":
        """The config of ``to_dict``; an unknown field is a ``ValueError`` naming it."""
        return cls(**check_fields(cls, d, "rm_config"))


# ----------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------

# purposes of the random streams derived from cfg.seed: np.random.default_rng([seed, purpose])
SEED_PAIRS, SEED_SPLIT, SEED_HEAD, SEED_BATCHES, SEED_FRESH = 1, 2, 3, 4, 5


def build_reward_model(cfg: RMConfig, sft_model: TinyGPT) -> RewardModel:
    """The untrained reward model that ``cfg`` describes (``init``, ``n_layer``, ``n_embd``, ``n_head``)."""
    rng = np.random.default_rng([cfg.seed, SEED_HEAD])
    if cfg.init == "sft":
        if cfg.n_layer is not None and cfg.n_layer > sft_model.cfg.n_layer:
            raise ValueError(f"`n_layer`={cfg.n_layer} exceeds the SFT model's {sft_model.cfg.n_layer} blocks")
        return RewardModel.from_sft(sft_model, rng, n_layer=cfg.n_layer)
    shape = {k: getattr(cfg, k) for k in ("n_layer", "n_embd", "n_head") if getattr(cfg, k) is not None}
    return RewardModel.fresh(GPTConfig(**{**sft_model.cfg.to_dict(), **shape}), rng)


def evaluate_pairs(rm: RewardModel, pairs: PreferencePairs) -> dict:
    """Loss and accuracies of ``rm`` on ``pairs`` (raw scores; the normalisation changes neither).

    ``accuracy``: fraction of pairs with r_chosen > r_rejected, chosen = the sampled label.
    ``gold_accuracy``: among pairs with different gold scores, the fraction ordered as gold orders them.
    Also ``r`` (M,), the score of every response, and ``r_chosen`` / ``r_rejected`` (N,).
    """
    r = rm.raw_score(pairs.sequences, pairs.mask)                      # (M,) each response once
    r_c, r_r = r[pairs.chosen_idx], r[pairs.rejected_idx]              # (N,)
    return {"loss": bradley_terry_forward(r_c, r_r)[0], "accuracy": pairwise_accuracy(r_c, r_r),
            "gold_accuracy": gold_order_accuracy(r_c, r_r, pairs.gold_chosen, pairs.gold_rejected),
            "r": r, "r_chosen": r_c, "r_rejected": r_r}


def fit_reward_model(rm: RewardModel, train: PreferencePairs, heldout: PreferencePairs, cfg: RMConfig, *,
                     progress: bool = True, metrics: MetricsWriter | None = None) -> list[dict]:
    """Minimise the Bradley-Terry loss on ``train`` with AdamW; returns the per-step records.

    A step takes ``cfg.batch_prompts`` prompts (seeded order, :func:`minippo.rlhf.data.batches.batch_indices`),
    scores their responses once and averages the loss over all their pairs. Every step records
    ``rm/loss``, ``rm/accuracy`` (of that minibatch), ``rm/grad_norm`` (before clipping), ``rm/lr``; at
    step 0 and ``cfg.n_evals`` evenly spaced steps also ``rm/heldout_loss``, ``rm/heldout_accuracy``,
    ``rm/heldout_gold_accuracy``. A non-finite loss or gradient norm stops the run (``ValueError``) naming
    the metric, the step and the first non-finite gradient.
    """

    per_epoch = steps_per_epoch(train.n_groups, cfg.batch_prompts)
    total = cfg.epochs * per_epoch
    eval_at = set(np.linspace(0, total, cfg.n_evals + 1).round().astype(int).tolist())
    opt = AdamW(rm.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    history = []

    def record(rec):
        if rec["step"] in eval_at:
            ev = evaluate_pairs(rm, heldout)
            rec.update({"rm/heldout_loss": ev["loss"], "rm/heldout_accuracy": ev["accuracy"],
                        "rm/heldout_gold_accuracy": ev["gold_accuracy"]})
        history.append(rec)
        if metrics is not None:
            metrics.write(rec)
        return rec

    record({"step": 0, "epoch": 0.0})
    bar = progress_bar(range(total), desc="reward model", disable=not progress)
    for step in bar:
        mb = train.select_groups(batch_indices(train.n_groups, cfg.batch_prompts, step, seed=(cfg.seed, SEED_BATCHES)))
        loss, acc, grads = rm.pairs_loss_and_grads(mb.sequences, mb.mask, mb.chosen_idx, mb.rejected_idx)
        if not np.isfinite(loss):
            raise ValueError(f"`rm/loss` is {loss} at step {step + 1}: reward-model training stopped (the reward "
                             "model is saved only at the end: nothing of it is on disk)")
        grad_norm = clip_grad_norm(grads, cfg.max_grad_norm)
        if not np.isfinite(grad_norm):
            raise ValueError(f"`rm/grad_norm` is {grad_norm} at step {step + 1} (the first non-finite gradient is "
                             f"that of `{first_nonfinite(grads)}`): reward-model training stopped (nothing of it "
                             "is on disk)")
        # the next two lines are AdamW with a short linear warm-up and a cosine decay to 0.1 lr
        lr = lr_at(step, total, cfg.lr, warmup_steps=min(20, total // 10), schedule="cosine", min_lr=0.1 * cfg.lr)
        opt.step(grads, lr=lr)
        rec = record({"step": step + 1, "epoch": (step + 1) / per_epoch, "rm/loss": loss, "rm/accuracy": acc,
                      "rm/grad_norm": grad_norm, "rm/lr": lr})
        if "rm/heldout_accuracy" in rec:
            bar.set_postfix(loss=f"{loss:.3f}", heldout_acc=f"{rec['rm/heldout_accuracy']:.3f}")
    bar.close()
    return history


def split_pairs(pairs: PreferencePairs, cfg: RMConfig) -> tuple[PreferencePairs, PreferencePairs]:
    """``(train, heldout)`` of stage 2: by prompt with the stream ``[cfg.seed, SEED_SPLIT]``, the training
    prompts capped at ``cfg.n_train``. DPO trains on exactly these (:func:`load_pairs`)."""
    train, heldout = pairs.split(cfg.heldout_frac, np.random.default_rng([cfg.seed, SEED_SPLIT]))
    if cfg.n_train is not None:
        if cfg.n_train > train.n_groups:
            raise ValueError(f"`n_train`={cfg.n_train} exceeds the {train.n_groups} training prompts available")
        train = train.select_groups(np.arange(cfg.n_train))
    return train, heldout


def pairs_folder(rm_dir) -> Path:
    """The reward-model run folder meant by ``rm_dir`` (itself, or the parent of its ``model/``), which must hold
    ``pairs.npz`` and ``config.json`` (``FileNotFoundError`` naming the missing file otherwise)."""
    folder = Path(rm_dir)
    if not (folder / "pairs.npz").is_file() and (folder.parent / "pairs.npz").is_file():
        folder = folder.parent                          # rm/model given: the pairs are in rm/
    for name in ("pairs.npz", "config.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} is missing: `--pairs` must name a reward-model run folder "
                                    f"(from `minippo rm` or `minippo rlhf`) that sampled its own pairs")
    return folder


def load_pairs(rm_dir) -> tuple[PreferencePairs, PreferencePairs, RMConfig]:
    """``(train, heldout, rm_config)``: the preference pairs a reward-model run folder sampled
    (``pairs.npz``) split as that run split them (its ``config.json``); ``rm_dir`` may also be its ``model/``."""
    folder = pairs_folder(rm_dir)
    config = read_json(folder / "config.json")
    with in_file(folder / "config.json"):
        cfg = RMConfig.from_dict(config)
    path = folder / "pairs.npz"
    with in_file(path):                                 # no archive, a missing or malformed array: naming the file
        train, heldout = split_pairs(PreferencePairs.load(path), cfg)
    return train, heldout, cfg


def load_sft(sft_dir) -> tuple[TinyGPT, Tokenizer, dict]:
    """The SFT policy, its tokenizer and its saved state (``sft_config``, ...) from an SFT run folder
    (``<dir>/model``) or a model folder."""
    folder = Path(sft_dir)
    if has_checkpoint(folder / "model"):
        folder = folder / "model"
    model, state = load_model(folder)
    if STATE_KEY in state:                              # the scalar score head on a trunk: no policy
        raise UsageError(f"{sft_dir} holds a reward model (a {STATE_KEY!r} entry in state.json), not a language "
                         f"model: give an SFT run folder or a policy")
    if state["tokenizer"] is None:
        raise ValueError(f"`sft_dir` {sft_dir} has no tokenizer.json beside the model")
    return model, Tokenizer.load(state["tokenizer"]), state


def stored_config(model_dir, key: str) -> dict:
    """The config saved under ``key`` in a model folder's state.json (e.g. "rm_config"), without loading the
    weights; a :class:`minippo.io.CorruptFileError` naming the file when it is missing or not a dict."""
    path = checkpoint_folder(model_dir) / STATE
    state = read_json(path)
    with in_file(path):
        if not isinstance(state, dict) or not isinstance(state[key], dict):
            raise ValueError(f"`{key}` must be a dict")
        return state[key]


def train_reward_model(cfg: RMConfig, sft_dir, out_dir, progress: bool = True,
                       pairs: PreferencePairs | None = None) -> dict:
    """RLHF stage 2: sample and label pairs from the SFT policy, train, evaluate, normalise, save.

    Parameters
    ----------
    cfg : RMConfig
    sft_dir : an SFT run folder (its ``model/``) or a model folder with ``tokenizer.json``
    out_dir : run folder: ``config.json``, ``pairs.npz`` (when sampled here), ``metrics.jsonl``, ``model/`` (the reward
        model with gain/bias in its state and the tokenizer: what PPO loads). A finished reward model there is
        replaced only by the same run: the same config, from the same SFT model (the SHA-256 of its weights file,
        recorded as ``inputs`` in its state)
    pairs : reuse these labelled pairs instead of sampling new ones (several reward models on the same
        data, lesson 19); ``n_prompts``, ``responses_per_prompt`` and ``label_temperature`` are then theirs

    Returns
    -------
    dict: ``model`` (RewardModel), ``tokenizer``, ``history``, ``train`` / ``heldout`` (the pairs),
    ``heldout_eval`` (evaluate_pairs), ``heldout_accuracy`` (vs the sampled labels),
    ``heldout_gold_accuracy`` (vs the gold order), ``label_gold_agreement`` (how often the held-out
    labels follow gold: the ceiling noise allows), ``bayes_accuracy`` (mean max(p, 1 - p) of the
    held-out label probabilities: the expected accuracy of the best possible model), ``fresh``
    (PolicySamples of fresh SFT samples) with ``fresh_raw`` / ``fresh_score``, ``pearson`` and
    ``spearman`` (score vs gold on them), ``gain``, ``bias``, ``model_dir``, ``n_params``,
    ``seconds_pairs``, ``seconds_train``, ``seconds_total``.
    """
    if not isinstance(cfg, RMConfig):
        raise ValueError(f"`cfg` must be an RMConfig, got {type(cfg).__name__}")
    out_dir = Path(out_dir)
    inputs = {"sft": input_identity(resolve_model_dir(sft_dir))}

    def refuse() -> None:                          # reads only (minippo.runs.RunLock)
        finished = has_checkpoint(out_dir / "model")
        check_fresh_start(out_dir, cfg.to_dict(), "a reward-model run", records=not finished)   # not another run's
        if finished:                               # a finished reward model is replaced only by the same run
            check_same_config(f"the reward model in {out_dir / 'model'}",
                              stored_config(out_dir / "model", "rm_config"), cfg.to_dict(),
                              fresh=f"use another folder than {out_dir}")
            check_same_inputs(f"the reward model in {out_dir / 'model'}", stored_inputs(out_dir / "model"), inputs,
                              fresh=f"use another folder than {out_dir}")

    again = "the same command trains it again"
    with run_lock(out_dir, check=refuse), stage("the reward model", out_dir, checkpoint=out_dir / "model",
                                                resume=again, restart=again) as st:
        if has_checkpoint(out_dir / "model"):        # a finished reward model: kept until the new one replaces it
            st.saved = "the finished reward model"
        return _train_reward_model(cfg, sft_dir, out_dir, progress, pairs, inputs)


def _train_reward_model(cfg: RMConfig, sft_dir, out_dir: Path, progress: bool, pairs, inputs: dict) -> dict:
    t0 = time.perf_counter()
    # over a finished reward model, the new pairs and records are written beside its own and swapped in with the
    # new model (an interrupted rerun truncated the metrics.jsonl of the model it left in place)
    rerun = ".rerun" if has_checkpoint(out_dir / "model") else ""
    pairs_path, metrics_path = out_dir / f"pairs{rerun}.npz", out_dir / f"metrics{rerun}.jsonl"
    sft_model, tokenizer, _ = load_sft(sft_dir)
    check_response_fits(cfg.max_new_tokens, tokenizer, PROMPTS, sft_model.cfg.block_size)
    atomic_write_text(out_dir / "config.json", json.dumps(cfg.to_dict(), indent=1))
    sample = dict(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
    with single_blas_thread():          # tiny matrices: one BLAS thread is faster and deterministic
        if pairs is None:
            pairs = make_preference_pairs(sft_model, tokenizer, cfg.n_prompts, label_temperature=cfg.label_temperature,
                                          responses_per_prompt=cfg.responses_per_prompt,
                                          rng=np.random.default_rng([cfg.seed, SEED_PAIRS]), **sample)
            pairs.save(pairs_path)
        t_pairs = time.perf_counter()
        train, heldout = split_pairs(pairs, cfg)
        rm = build_reward_model(cfg, sft_model)
        history = fit_reward_model(rm, train, heldout, cfg, progress=progress,
                                   metrics=MetricsWriter(metrics_path))
        t_train = time.perf_counter()
        held = evaluate_pairs(rm, heldout)
        # fresh samples of the reference policy: the normalisation and the correlation with gold
        rng = np.random.default_rng([cfg.seed, SEED_FRESH])
        fresh = sample_policy(sft_model, tokenizer, sample_prompts(cfg.n_eval, seed=rng), rng=rng, **sample)
        fresh_raw = rm.raw_score(fresh.sequences, fresh.mask)
        rm.normalize(fresh.sequences, fresh.mask)
    fresh_score = rm.gain * fresh_raw + rm.bias
    prob = heldout.prob_chosen
    not_tie = heldout.gold_chosen != heldout.gold_rejected
    out = {"model": rm, "tokenizer": tokenizer, "config": cfg, "history": history, "pairs": pairs,
           "train": train, "heldout": heldout, "heldout_eval": held, "heldout_loss": held["loss"],
           "heldout_accuracy": held["accuracy"], "heldout_gold_accuracy": held["gold_accuracy"],
           "label_gold_agreement": float(np.mean(heldout.label_agrees_with_gold()[not_tie])),
           "bayes_accuracy": float(np.mean(np.maximum(prob, 1 - prob))),
           "fresh": fresh, "fresh_raw": fresh_raw, "fresh_score": fresh_score,
           "pearson": pearson(fresh_score, fresh.gold), "spearman": spearman(fresh_score, fresh.gold),
           "gain": rm.gain, "bias": rm.bias, "n_params": rm.model.num_params(),
           "n_train": len(train), "n_heldout": len(heldout), "n_train_prompts": train.n_groups,
           "n_heldout_prompts": heldout.n_groups}
    summary = {k: out[k] for k in ("heldout_loss", "heldout_accuracy", "heldout_gold_accuracy", "label_gold_agreement",
                                   "bayes_accuracy", "pearson", "spearman", "n_train", "n_heldout")}
    out["model_dir"] = str(rm.save(out_dir / "model", tokenizer=tokenizer,
                                   extra_state={"rm_config": cfg.to_dict(), "rm_summary": summary,
                                                "inputs": inputs}))
    for path in (pairs_path, metrics_path) if rerun else ():
        if path.exists():
            os.replace(path, out_dir / path.name.replace(rerun, ""))
    out.update(seconds_pairs=t_pairs - t0, seconds_train=t_train - t_pairs, seconds_total=time.perf_counter() - t0)
    return out


def format_report(r: dict) -> str:
    """The numbers a reward-model run prints at the end."""
    c = r["config"]
    return "\n".join([
        f"reward model: {r['n_params']:,} parameters (init={c.init}, {r['model'].model.cfg.n_layer} layers, "
        f"C={r['model'].model.cfg.n_embd}); {r['n_train']} training pairs from {r['n_train_prompts']} prompts / "
        f"{r['n_heldout']} held-out pairs from {r['n_heldout_prompts']} prompts (K={c.responses_per_prompt}), "
        f"label temperature {c.label_temperature:g}",
        f"held-out loss {r['heldout_loss']:.3f} (ln 2 = 0.693 is chance)",
        f"held-out accuracy vs the sampled labels {r['heldout_accuracy']:.3f}  (the labels themselves follow "
        f"gold on {r['label_gold_agreement']:.3f}; Bayes-optimal expected {r['bayes_accuracy']:.3f})",
        f"held-out accuracy vs the gold order      {r['heldout_gold_accuracy']:.3f}",
        f"{len(r['fresh_score'])} fresh SFT samples: score vs gold Pearson {r['pearson']:.3f}, "
        f"Spearman {r['spearman']:.3f}; normalised score mean {r['fresh_score'].mean():+.3f} "
        f"std {r['fresh_score'].std():.3f} (gain {r['gain']:.3f}, bias {r['bias']:+.3f})",
        f"wall time {r['seconds_total']:.1f} s (pairs {r['seconds_pairs']:.1f} s, "
        f"training {r['seconds_train']:.1f} s); saved in {r['model_dir']}"])


# ----------------------------------------------------------------------------------------------
# the `minippo rm` command
# ----------------------------------------------------------------------------------------------

#: the RMConfig fields that are flags of ``minippo rm`` (the others keep their defaults)
FLAGS = ("n_prompts", "responses_per_prompt", "n_train", "label_temperature", "epochs", "lr", "init", "n_layer",
         "n_embd", "n_head", "max_new_tokens", "seed")


def add_arguments(parser) -> None:
    parser.add_argument("--sft", required=True, metavar="DIR",
                        help="SFT run folder (from `minippo sft`) or its model/ folder")
    parser.add_argument("--out", default=None, metavar="DIR", help="run folder (default: runs/rm-<timestamp>)")
    parser.add_argument("--quick", action="store_true", help="tiny config for CI: a few seconds")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_config_flags(parser, RMConfig, only=FLAGS, title="RMConfig fields (the others keep their defaults)")


def cli_main(args) -> int:
    out = Path(args.out) if args.out else Path("runs") / time.strftime("rm-%Y%m%d-%H%M%S")
    cfg = config_from_args(args, RMConfig.quick() if args.quick else RMConfig())      # errors name the flag
    resolve_model_dir(args.sft)                                     # a wrong path: one line, before the banner
    print(f"reward model from {args.sft} -> {out}")
    print(format_report(train_reward_model(cfg, args.sft, out, progress=not args.no_progress)))
    return 0
