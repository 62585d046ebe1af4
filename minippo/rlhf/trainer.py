"""Stage 3 of RLHF: the PPO trainer with the four models, and the ``minippo ppo`` command.

Legend: B batch (responses), Tn response tokens, V vocab.

One iteration (:meth:`PPOTrainer.step`), each step a function the studies can reuse or switch::

    prompts  = sample_prompts(batch_size / samples_per_prompt)
    rollout  = collect_rollout(actor, critic, ref, RM)      ppo_step.py: sample with the KV cache, score,
                                                            logp_old, logp_ref, values (one temperature)
    rewards  = compute_rewards(rollout, beta)               rewards.py: -beta kl_t, + score on the last token
    adv, R   = compute_advantages(rollout)                  advantages.py: GAE (gamma 1, lam 0.95), whitened
    metrics  = ppo_update(...)                              ppo_update.py: K epochs x minibatches of eq. (9)
    beta     = kl_controller.update(objective/kl)           fixed, or adaptive (Ziegler et al. 2019)

The four models (seed 001): the actor (trained), the critic (trained; critic.py), the reference (a
frozen copy of the SFT actor) and the reward model (frozen).

Position alignment (written once, in response.py): the logits and the value at column p belong to the
token at column p + 1, so response token j (column Tp + j) is scored at column Tp + j - 1::

    column    Tp-2   Tp-1 | Tp    Tp+1   Tp+2
    token     p      p    | r0    r1     EOS      (then padding)
    read at          ^      ^     ^               logits / value for r0, r1, EOS

Run folder (``out_dir``)::

    config.json      the PPOConfig
    metrics.jsonl    one record per iteration (names: minippo.rlhf.metrics.GLOSSARY)
    checkpoint/      every ``checkpoint_every`` iterations and at the end, atomically: actor and critic
                     weights and AdamW moments (safetensors), config, iteration, KL-controller state,
                     critic statistics and the RNG state (JSON); ``resume=True`` continues from it and
                     the metrics then equal an uninterrupted run's (tested, timing entries aside)
    policy/          the final actor + tokenizer (``load_model``), for evaluation and later stages
    rollouts/        per-token dumps ``iter_NNNN.npz`` when ``dump_rollouts``

A non-finite loss, score or gradient norm raises ``ValueError`` naming the metric and the iteration;
the last good checkpoint stays on disk.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.io import (MetricsWriter, atomic_write_text, has_checkpoint, load_checkpoint, rng_from_state,
                        rng_state, save_checkpoint)
from minippo.nn.gpt import TinyGPT
from minippo.nn.optim import AdamW, lr_at
from minippo.rl.kl_control import AdaptiveKLController, FixedKLController, PPOPaperKLController
from minippo.rl.masked import explained_variance
from minippo.rlhf.advantages import compute_advantages
from minippo.rlhf.checkpoint import save_model
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.critic import Critic, init_bias_to_mean_score
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.ppo_step import collect_rollout, compute_rewards, rollout_metrics
from minippo.rlhf.ppo_update import check_finite, ppo_update

SEED_CRITIC = 7          # np.random.default_rng([cfg.seed, SEED_CRITIC]) initialises a random critic


def build_critic(cfg: PPOConfig, actor: TinyGPT, sft_model: TinyGPT, reward_model) -> Critic:
    """The critic chosen by ``cfg.critic`` / ``cfg.critic_init`` (see :mod:`minippo.rlhf.critic`)."""
    if cfg.critic == "none":
        return Critic("none")
    if cfg.critic == "shared":
        return Critic("shared", actor, stop_gradient=cfg.shared_stop_gradient, value_norm=cfg.value_norm)
    if cfg.critic_init == "reward_model":
        model = reward_model.normalized_model()          # trunk + head of the RM, normalisation folded in
    elif cfg.critic_init == "sft":
        model = sft_model.copy()
        model.params["scalar_head.w"][...] = 0.0
        model.params["scalar_head.b"][...] = 0.0
    else:
        model = TinyGPT(sft_model.cfg, rng=np.random.default_rng([cfg.seed, SEED_CRITIC]))
    return Critic("separate", model, value_norm=cfg.value_norm)


def make_kl_controller(cfg: PPOConfig):
    """The beta controller of ``cfg.kl_controller`` (minippo.rl.kl), fed ``objective/kl`` after each iteration."""
    if cfg.kl_controller == "fixed":
        return FixedKLController(cfg.kl_coef)
    if cfg.kl_controller == "ppo_paper":
        return PPOPaperKLController(cfg.kl_coef, d_targ=cfg.kl_target)
    return AdaptiveKLController(cfg.kl_coef, target=cfg.kl_target, horizon=cfg.kl_horizon)


class PPOTrainer:
    """RLHF-PPO with actor, critic, reference and reward model; see the module docstring.

    Parameters
    ----------
    cfg : PPOConfig
    sft_model : TinyGPT, the SFT policy: the actor starts as a copy, the reference IS a frozen copy
    reward_model : RewardModel (frozen; its normalised ``score``)
    tokenizer : Tokenizer
    out_dir : run folder for metrics, checkpoints and the final policy (None: nothing is written)
    resume : continue from ``out_dir/checkpoint`` when it exists (its config must equal ``cfg`` up
        to ``iterations``)
    ptx_sequences : list of int64 arrays ``<bos> ids <eos>`` (corpus text) for PPO-ptx, or None
    """

    def __init__(self, cfg: PPOConfig, sft_model: TinyGPT, reward_model, tokenizer, *, out_dir=None,
                 resume: bool = False, ptx_sequences=None):
        if not isinstance(cfg, PPOConfig):
            raise ValueError(f"`cfg` must be a PPOConfig, got {type(cfg).__name__}")
        if not isinstance(sft_model, TinyGPT):
            raise ValueError(f"`sft_model` must be a TinyGPT, got {type(sft_model).__name__}")
        if cfg.ptx_coef > 0 and not ptx_sequences:
            raise ValueError("`ptx_sequences` must hold corpus sequences when `cfg.ptx_coef` > 0 (PPO-ptx)")
        self.cfg, self.tokenizer, self.reward_model = cfg, tokenizer, reward_model
        self.actor = sft_model.copy()
        self.ref = sft_model.copy()
        self.critic = build_critic(cfg, self.actor, sft_model, reward_model)
        b1, b2 = cfg.adam_betas
        self.opt_actor = AdamW(self.actor.params, lr=cfg.lr, betas=(b1, b2), eps=cfg.adam_eps,
                               weight_decay=cfg.weight_decay)
        own = self.critic.trainable()
        self.opt_critic = AdamW(own, lr=self.critic_lr, betas=(b1, b2), eps=cfg.adam_eps,
                                weight_decay=cfg.weight_decay) if own else None
        self.kl_ctl = make_kl_controller(cfg)
        self.rng = np.random.default_rng(cfg.seed)
        self.iteration = 0
        self.ptx_sequences = ptx_sequences
        self.last_rollout, self.last_texts, self.first_minibatch = None, None, None
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.metrics = None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if resume and has_checkpoint(self.out_dir / "checkpoint"):
                self.load(self.out_dir / "checkpoint")
                self.metrics = MetricsWriter(self.out_dir / "metrics.jsonl", append=True)
                self.metrics.truncate_after("iteration", self.iteration - 1)
            else:
                atomic_write_text(self.out_dir / "config.json", json.dumps(cfg.to_dict(), indent=1))
                self.metrics = MetricsWriter(self.out_dir / "metrics.jsonl")

    @property
    def critic_lr(self) -> float:
        return self.cfg.lr if self.cfg.critic_lr is None else self.cfg.critic_lr

    # ---- one iteration ------------------------------------------------------------------------
    def ptx_batch(self, rng: np.random.Generator):
        """``ptx_batch_size`` corpus sequences drawn with ``rng``, as ``(idx, targets, mask, attn_mask)``."""
        from minippo.rlhf.data.batches import lm_batch
        pick = rng.integers(0, len(self.ptx_sequences), size=self.cfg.ptx_batch_size)
        return lm_batch([self.ptx_sequences[i] for i in pick], self.tokenizer.pad_id)

    def step(self, callback=None) -> dict:
        """Run one iteration; returns its metrics record (also written to ``metrics.jsonl``)."""
        cfg, it, t0, c0 = self.cfg, self.iteration, time.perf_counter(), time.process_time()
        with single_blas_thread():               # small matrices: one BLAS thread is faster and deterministic
            prompts = sample_prompts(cfg.num_prompts, seed=self.rng)
            try:
                rollout, extras = collect_rollout(self.actor, self.critic, self.ref, self.reward_model, self.tokenizer,
                                                  prompts, cfg, self.rng, exact_kl=cfg.log_exact_kl)
            except ValueError as exc:        # e.g. a NaN score: say when it happened
                raise ValueError(f"{exc} (rollout of iteration {it}): training stopped, the last good checkpoint "
                                 f"is kept") from exc
            mask = rollout.response_mask
            check_finite({"objective/scores": float(np.sum(rollout.scores)),
                          "val/values_avg": float(np.sum(rollout.values))}, it, " (rollout)")
            if it == 0 and cfg.critic_bias_init == "mean_score" and self.critic.kind != "none":
                delta = init_bias_to_mean_score(self.critic, rollout.values, rollout.scores, mask)
                rollout.values = (rollout.values + delta) * mask          # the values the shifted critic gives
            kl_coef = self.kl_ctl.value
            compute_rewards(rollout, cfg, kl_coef)
            rollout.adv, rollout.returns = compute_advantages(rollout, cfg)
            self.critic.update_moments(rollout.returns, mask)
            record = rollout_metrics(rollout, extras["texts"], extras["kl_exact"])
            record["val/explained_variance"] = explained_variance(rollout.values, rollout.returns, mask)
            t1, c1 = time.perf_counter(), time.process_time()
            schedule = dict(warmup_steps=cfg.warmup_iterations, schedule=cfg.lr_schedule)
            lr = lr_at(it, cfg.iterations, cfg.lr, **schedule)
            critic_lr = lr_at(it, cfg.iterations, self.critic_lr, **schedule)
            upd = ppo_update(self.actor, self.critic, self.opt_actor, self.opt_critic, rollout, cfg, self.rng,
                             lr=lr, critic_lr=critic_lr, iteration=it,
                             ptx_sampler=self.ptx_batch if cfg.ptx_coef > 0 else None)
            t2, c2 = time.perf_counter(), time.process_time()
        self.first_minibatch = upd.pop("first_minibatch")
        record.update(upd)
        self.kl_ctl.update(record["objective/kl"], n_steps=cfg.batch_size)
        record.update({"iteration": it, "episode": (it + 1) * cfg.batch_size, "kl_coef": kl_coef, "lr": lr,
                       "time/rollout": t1 - t0, "time/update": t2 - t1,
                       "time/cpu_rollout": c1 - c0, "time/cpu_update": c2 - c1})
        self.iteration = it + 1
        self.last_rollout, self.last_texts = rollout, extras["texts"]
        record["time/iteration"] = time.perf_counter() - t0
        if self.out_dir is not None:
            # the record first, then the checkpoint: a checkpoint never exists without its iteration's record
            self.metrics.write(record)
            if cfg.dump_rollouts:
                rollout.save_npz(self.out_dir / "rollouts" / f"iter_{it:04d}.npz")
            if self.iteration % cfg.checkpoint_every == 0 or self.iteration == cfg.iterations:
                self.save(self.out_dir / "checkpoint")
        if callback is not None:
            with single_blas_thread():       # callbacks run forward passes of the same small models
                callback(self, rollout, record)
        return record

    def train(self, until: int | None = None, *, progress: bool = False, callback=None) -> list[dict]:
        """Run iterations up to ``until`` (default ``cfg.iterations``); returns their metrics records.

        ``callback(trainer, rollout, record)`` is called after every iteration. At the end the policy is
        saved to ``out_dir/policy`` (when the run is complete).
        """
        from tqdm.auto import tqdm

        until = self.cfg.iterations if until is None else min(int(until), self.cfg.iterations)
        records = []
        bar = tqdm(range(self.iteration, until), initial=self.iteration, total=self.cfg.iterations, desc="ppo",
                   disable=not progress, dynamic_ncols=True)
        for _ in bar:
            r = self.step(callback)
            records.append(r)
            bar.set_postfix(score=f"{r['objective/scores']:+.2f}", gold=f"{r['gold/score']:+.2f}",
                            kl=f"{r['objective/kl']:.2f}")
        bar.close()
        if self.out_dir is not None and self.iteration == self.cfg.iterations:
            save_model(self.out_dir / "policy", self.actor, tokenizer=self.tokenizer,
                       extra_state={"ppo_config": self.cfg.to_dict(), "iteration": self.iteration})
        return records

    # ---- checkpoints --------------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write everything needed to continue bitwise (see the module docstring), atomically."""
        arrays = {"actor/" + k: v for k, v in self.actor.params.items()}
        a_moments, a_scalars = self.opt_actor.state_dict()
        arrays.update({"opt_actor/" + k: v for k, v in a_moments.items()})
        state = {"format": "minippo.ppo/1", "ppo_config": self.cfg.to_dict(), "iteration": self.iteration,
                 "opt_actor": a_scalars, "kl_coef": self.kl_ctl.value, "rng": rng_state(self.rng),
                 "critic": self.critic.state_dict(), "gpt_config": self.actor.cfg.to_dict()}
        if self.critic.kind == "separate":
            arrays.update({"critic/" + k: v for k, v in self.critic.model.params.items()})
            c_moments, state["opt_critic"] = self.opt_critic.state_dict()
            arrays.update({"opt_critic/" + k: v for k, v in c_moments.items()})
        return save_checkpoint(directory, arrays, state)

    def load(self, directory) -> None:
        """Restore a checkpoint written by :meth:`save` (the config must match up to ``iterations``)."""
        arrays, state = load_checkpoint(directory)
        if state.get("format") != "minippo.ppo/1":
            raise ValueError(f"`directory` {directory} does not hold a PPO checkpoint")
        saved = {k: v for k, v in state["ppo_config"].items() if k != "iterations"}
        given = {k: v for k, v in self.cfg.to_dict().items() if k != "iterations"}
        differ = {k: (saved.get(k), given[k]) for k in given if saved.get(k) != given[k]}
        if differ:
            raise ValueError(f"`cfg` differs from the run being resumed (saved, given): {differ}")
        for name, p in self.actor.params.items():              # in place: the optimizer holds these arrays
            p[...] = arrays["actor/" + name]
        self.opt_actor.load_state_dict({k[len("opt_actor/"):]: v for k, v in arrays.items()
                                        if k.startswith("opt_actor/")}, state["opt_actor"])
        if self.critic.kind == "separate":
            for name, p in self.critic.model.params.items():
                p[...] = arrays["critic/" + name]
            self.opt_critic.load_state_dict({k[len("opt_critic/"):]: v for k, v in arrays.items()
                                             if k.startswith("opt_critic/")}, state["opt_critic"])
        self.critic.load_state_dict(state["critic"])
        self.kl_ctl.value = float(state["kl_coef"])
        self.rng = rng_from_state(state["rng"])
        self.iteration = int(state["iteration"])


# ----------------------------------------------------------------------------------------------
# running the stage from the previous stages' folders, and the `minippo ppo` command
# ----------------------------------------------------------------------------------------------

def load_stages(sft_dir, rm_dir):
    """``(sft_model, tokenizer, reward_model, sft_state)`` from an SFT run folder (or its ``model/``) and
    a reward-model run folder (or its ``model/``)."""
    from minippo.rlhf.checkpoint import load_model
    from minippo.rlhf.reward_model import RewardModel
    from minippo.rlhf.rm_train import load_sft

    sft_model, tokenizer = load_sft(sft_dir)
    folder = Path(sft_dir) / "model" if has_checkpoint(Path(sft_dir) / "model") else Path(sft_dir)
    sft_state = load_model(folder)[1]
    rm_folder = Path(rm_dir) / "model" if has_checkpoint(Path(rm_dir) / "model") else Path(rm_dir)
    reward_model, _ = RewardModel.load(rm_folder)
    return sft_model, tokenizer, reward_model, sft_state


def sft_training_sequences(sft_state: dict, tokenizer, split: str = "train") -> list:
    """The SFT run's own training sentences as ``<bos> ids <eos>`` arrays (the PPO-ptx "pretraining" data),
    regenerated from the SFT config saved with the model (same corpus seed, same split).

    ``split="heldout"``: the SFT run's held-out sentences instead (never trained on by SFT nor by PPO-ptx):
    the corpus on which lesson 18 measures the alignment tax.
    """
    from minippo.checks import check_choice
    from minippo.rlhf.data.corpus import generate_corpus
    from minippo.rlhf.data.batches import encode_sequences, split_corpus

    check_choice("split", split, ("train", "heldout"))
    c = sft_state["sft_config"]
    train_texts, held_texts = split_corpus(generate_corpus(c["corpus_size"], seed=c["seed"]), c["heldout_frac"])
    return encode_sequences(tokenizer, train_texts if split == "train" else held_texts, c["block_size"])[0]


def run_ppo(cfg: PPOConfig, sft_dir, rm_dir, out_dir, *, resume: bool = False, progress: bool = True,
            callback=None) -> PPOTrainer:
    """Stage 3 from the saved SFT and reward-model folders into ``out_dir``; returns the finished trainer."""
    sft_model, tokenizer, reward_model, sft_state = load_stages(sft_dir, rm_dir)
    ptx = sft_training_sequences(sft_state, tokenizer) if cfg.ptx_coef > 0 else None
    trainer = PPOTrainer(cfg, sft_model, reward_model, tokenizer, out_dir=out_dir, resume=resume, ptx_sequences=ptx)
    trainer.train(progress=progress, callback=callback)
    return trainer


def _parse_value(text: str, default):
    """A CLI string as the type of the field's default ("none" -> None for optional fields)."""
    if text.lower() == "none":
        return None
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(default, tuple):
        return tuple(float(x) for x in text.split(","))
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float) or default is None:
        return float(text)
    return text


def add_arguments(parser) -> None:
    from dataclasses import fields

    from minippo.rlhf.ppo_config import field_docs

    parser.add_argument("--sft", required=True, help="SFT run folder (from `minippo sft`) or its model/ folder")
    parser.add_argument("--rm", required=True, help="reward-model run folder (from `minippo rm`) or its model/ folder")
    parser.add_argument("--out", default=None, help="run folder (default: runs/ppo-<timestamp>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    parser.add_argument("--quick", action="store_true", help="tiny config for CI (PPOConfig.quick())")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    docs = field_docs()
    group = parser.add_argument_group("PPOConfig fields (defaults in brackets)")
    for f in fields(PPOConfig):
        default = PPOConfig.__dataclass_fields__[f.name].default
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        group.add_argument("--" + f.name.replace("_", "-"), default=None, metavar="X",
                           help=f"{docs.get(f.name, '')} [{shown}]".replace("%", "%%"))


def cli_main(args) -> int:
    from dataclasses import fields

    base = PPOConfig.quick() if args.quick else PPOConfig()
    overrides = {}
    for f in fields(PPOConfig):
        text = getattr(args, f.name)
        if text is not None:
            try:
                overrides[f.name] = _parse_value(text, getattr(base, f.name))
            except ValueError as exc:
                raise SystemExit(f"--{f.name.replace('_', '-')}: {exc}")
    cfg = base.replace(**overrides)
    out = Path(args.out) if args.out else Path("runs") / time.strftime("ppo-%Y%m%d-%H%M%S")
    print(f"PPO from {args.sft} (policy, reference) and {args.rm} (reward model, critic) -> {out}")
    trainer = run_ppo(cfg, args.sft, args.rm, out, resume=args.resume, progress=not args.no_progress)
    from minippo.io import read_metrics
    hist = read_metrics(out / "metrics.jsonl")
    first, last = hist[0], hist[-1]
    for key in ("objective/scores", "gold/score", "objective/kl", "response/length", "kl_coef"):
        print(f"{key:<24s} first iteration {first[key]:+8.3f}   last iteration {last[key]:+8.3f}")
    print(f"{trainer.iteration} iterations; metrics in {out / 'metrics.jsonl'}, policy in {out / 'policy'}")
    return 0
