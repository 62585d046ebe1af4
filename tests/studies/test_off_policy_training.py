"""Lesson 24 (b)'s study: the verifiable-reward trainer runs the corrected iteration when given a
CorrectedConfig, and a run is judged by its own pass@1 on held-out problems."""
import numpy as np
import pytest

from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rlhf.corrected import CorrectedConfig, CorrectedRollout
from minippo.rlvr.evaluate import evaluate_pass_at_k
from minippo.rlvr.task import Problems, TaskSFTConfig
from minippo.rlvr.tokenizer import CharTokenizer
from minippo.rlvr.trainer import RLVRTrainer, rlvr_ppo_config
from minippo.rlvr.verifier import Verifier
from minippo.studies import off_policy_training as opt

TOK = CharTokenizer()


def policy(seed=0):
    return TinyGPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=16, n_layer=1, n_head=2,
                             n_embd=16), seed=seed)


def config(**kw):
    base = rlvr_ppo_config(iterations=3, batch_size=16, minibatch_size=8).to_dict()
    return CorrectedConfig.from_dict({**base, "checkpoint_every": 3, **kw})


def test_the_rlvr_trainer_runs_the_corrected_iteration():
    problems = Problems(TaskSFTConfig.quick(n_heldout=64))
    tr = RLVRTrainer(config(**opt.RUNS["stale by 2, TIS C=2"]), policy(), TOK, problems)
    tr.train()
    assert isinstance(tr.last_rollout, CorrectedRollout) and tr.state.versions.lag == 2
    assert tr.state.versions.sampler is not tr.actor                      # a copy, two pushes behind


def test_train_and_judge_is_the_policys_own_pass_at_1():
    problems = Problems(TaskSFTConfig.quick(n_heldout=64))
    cfg = config(iterations=1, **opt.RUNS["bf16 logits, TIS C=2"])
    r = opt.train_and_judge(policy(1), TOK, problems, cfg, n_eval=8, n_samples=4)
    tr = RLVRTrainer(cfg, policy(1), TOK, problems)            # the same run again: same policy
    tr.train()
    ev = evaluate_pass_at_k(tr.actor, TOK, Verifier(TOK), problems.heldout[:8], 4,
                            max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                            rng=np.random.default_rng([cfg.seed, 24, 2]), ks=(1,))
    assert r["pass@1"] == ev["pass@1"] and 0 <= r["train_pass_rate"] <= 1


@pytest.mark.slow
def test_training_comparison_runs_every_run_on_every_seed_and_feeds_the_lesson():
    """The whole (b) at its smallest: the task's quick SFT (cached), one iteration per run; the
    lesson's table and verdicts read what it returns."""
    from lessons import l24_off_policy as lesson
    b = opt.training_comparison(True, (0, 1), iterations=1, n_eval=4, n_samples=2)
    assert set(b["runs"]) == set(opt.RUNS) and all(len(r) == 2 for r in b["runs"].values())
    assert b["iterations"] == 1 and len(b["sft_pass@1"]) == 2
    assert all(0 <= x["pass@1"] <= 1 for r in b["runs"].values() for x in r)
    assert len(lesson.training_verdicts(b)) == 4 and len(lesson.training_table(b)) == 3 + len(opt.RUNS)
