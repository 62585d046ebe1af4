"""Continue a minippo run in TRL: its policy trained further by TRL's GRPOTrainer, then judged by minippo.

    python examples/continue_in_trl.py RUN --out OUT [--steps 16 --batch 16 --group 4]

``RUN`` is a finished ``minippo rlhf`` run folder (``RUN/sft``, ``RUN/rm``, ``RUN/ppo``). Needs torch,
transformers and TRL: ``pip install -e ".[hf]"`` (torch's CPU build: ``torch==2.13.0``). Step by step:

1. ``minippo export RUN/ppo/policy --hf OUT/policy_hf`` and ``minippo export RUN/rm --hf OUT/rm_hf``.
2. ``trl.GRPOTrainer`` trains ``OUT/policy_hf`` on the CPU for ``--steps`` steps on minippo's prompts
   (``minippo.rlhf.data.corpus.sample_prompts``), ``--batch`` completions per step in groups of ``--group``
   per prompt, responses of the run's ``max_new_tokens`` at its temperature, and saves it as ``OUT/trl``.
   The reward is the exported reward model read as minippo's PPO read it, and the loss forward gets minippo's
   position ids: ``minippo/rlhf/run/hf_trl.py`` says how and why (TRL's defaults would read both wrongly).
3. ``minippo import-hf OUT/trl --out OUT/policy`` reads the result back, and both policies are judged on the
   same prompts with the same sampling seed by ``evaluate_policy`` (gold = the simulated human, never trained
   on; RM = the run's reward model; KL to the SFT policy). ``OUT/summary.json`` holds every number.

Nothing in RUN is changed; an ``OUT`` that holds files is refused.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from minippo.blas import single_blas_thread
from minippo.cli import main as minippo
from minippo.rlhf.checkpoint import load_model
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.run.evaluate import evaluate_policy
from minippo.rlhf.run.hf_trl import grpo_trainer
from minippo.rlhf.run.pipeline import SEED_EVAL
from minippo.rlhf.run.trainer import load_stages


def train_grpo(policy_hf: Path, rm_hf: Path, out: Path, ppo_cfg: dict, args) -> list[dict]:
    """TRL's GRPOTrainer on the exported policy, saved to ``out/trl``; returns TRL's log of every step."""
    trainer = grpo_trainer(policy_hf, rm_hf, ppo_cfg, out_dir=out / "trl_run", steps=args.steps, batch=args.batch,
                           group=args.group, lr=args.lr, beta=args.beta, n_prompts=args.prompts, seed=args.seed)
    trainer.train()
    trainer.save_model(str(out / "trl"))
    return [h for h in trainer.state.log_history if "reward" in h]


def judge(run: Path, policies: dict, n_eval: int, seed: int) -> dict:
    """``evaluate_policy`` of each policy folder on the same prompts and sampling seed (as ``minippo rlhf``)."""
    sft_model, tokenizer, reward_model, _ = load_stages(run / "sft", run / "rm")
    _, state = load_model(run / "ppo" / "policy")
    cfg = state["ppo_config"]
    prompts = sample_prompts(n_eval, seed=int(np.random.default_rng([seed, SEED_EVAL]).integers(2**31)))
    out = {}
    with single_blas_thread():
        for name, folder in policies.items():
            policy, _ = load_model(folder)
            r = evaluate_policy(policy, sft_model, reward_model, tokenizer, prompts, max_new_tokens=cfg["max_new_tokens"],
                                temperature=cfg["temperature"], rng=np.random.default_rng([seed, SEED_EVAL, 2]))
            out[name] = {k: float(r[k]) for k in ("gold_mean", "gold_std", "rm_mean", "kl_mean", "length_mean")}
    return out


def weight_change(before_dir: Path, after_dir: Path) -> float:
    """max |theta_after - theta_before| over the tensors both models have (the scalar head aside)."""
    before, _ = load_model(before_dir)
    after, _ = load_model(after_dir)
    keys = [k for k in before.params if k in after.params and not k.startswith("scalar_head")]
    return max(float(np.max(np.abs(after.params[k].astype(np.float64) - before.params[k]))) for k in keys)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a finished `minippo rlhf` run folder (sft/, rm/, ppo/)")
    p.add_argument("--out", required=True, help="a new folder for the exports, TRL's model and summary.json")
    p.add_argument("--steps", type=int, default=16, help="GRPO steps (one generation batch and update each)")
    p.add_argument("--batch", type=int, default=16, help="completions per step")
    p.add_argument("--group", type=int, default=4, help="completions per prompt (GRPO's group, TRL num_generations)")
    p.add_argument("--prompts", type=int, default=256, help="prompts in TRL's dataset")
    p.add_argument("--lr", type=float, default=None, help="TRL's learning rate (default: the run's PPO lr)")
    p.add_argument("--beta", type=float, default=0.0, help="TRL's KL coefficient (its default 0: no reference)")
    p.add_argument("--eval", type=int, default=256, help="prompts the gold score is measured on")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    run, out = Path(args.run), Path(args.out)
    for sub in ("sft", "rm", "ppo/policy"):
        if not (run / sub).is_dir():
            p.error(f"{run} has no {sub}/: not a finished `minippo rlhf` run folder")
    if out.exists() and any(out.iterdir()):
        p.error(f"--out {out}: the folder holds files; choose a new one")
    if args.steps < 1 or args.group < 2 or args.batch % args.group:
        p.error("--steps >= 1, --group >= 2, and --batch a multiple of --group")
    for cmd in (["export", str(run / "ppo" / "policy"), "--hf", str(out / "policy_hf")],
                ["export", str(run / "rm"), "--hf", str(out / "rm_hf")]):
        print("$ minippo " + " ".join(cmd), flush=True)
        if minippo(cmd) != 0:
            return 1
    _, state = load_model(run / "ppo" / "policy")
    args.lr = state["ppo_config"]["lr"] if args.lr is None else args.lr
    log = train_grpo(out / "policy_hf", out / "rm_hf", out, state["ppo_config"], args)
    print(f"$ minippo import-hf {out / 'trl'} --out {out / 'policy'}", flush=True)
    if minippo(["import-hf", str(out / "trl"), "--out", str(out / "policy")]) != 0:
        return 1
    rewards = [h["reward"] for h in log]
    summary = {"steps": len(log), "reward_first": rewards[0], "reward_last": rewards[-1], "rewards": rewards,
               "rewards_finite": all(math.isfinite(r) for r in rewards),
               "max_weight_change": weight_change(run / "ppo" / "policy", out / "policy"),
               "judged": judge(run, {"minippo": run / "ppo" / "policy", "trl": out / "policy"}, args.eval, args.seed),
               "args": vars(args)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    j = summary["judged"]
    print(f"TRL GRPO, {len(log)} steps of {args.batch} completions ({args.group} per prompt): mean reward "
          f"{rewards[0]:+.3f} at the first step -> {rewards[-1]:+.3f} at the last (all finite: "
          f"{summary['rewards_finite']}); weights changed by up to {summary['max_weight_change']:.3g}")
    se = {k: v["gold_std"] / math.sqrt(args.eval) for k, v in j.items()}     # standard error of each mean
    print(f"judged by minippo on {args.eval} prompts: gold {j['minippo']['gold_mean']:+.3f} +/- {se['minippo']:.3f} "
          f"(minippo's policy) -> {j['trl']['gold_mean']:+.3f} +/- {se['trl']:.3f} (after TRL); RM {j['minippo']['rm_mean']:+.3f} -> {j['trl']['rm_mean']:+.3f}; "
          f"KL to SFT {j['minippo']['kl_mean']:.2f} -> {j['trl']['kl_mean']:.2f} nats; summary in {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
