"""The RL stage's pieces: RLVRTrainer draws training problems only, with the state's generator, scores them with
the verifier (0/1 in the reward model's place), logs the verifier's metrics; the evaluation's pass@k, lengths and
shares against plain recomputations from the same samples."""
import numpy as np
import pytest

from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rl.pass_k import pass_at_k
from minippo.rlvr.evaluate import evaluate_pass_at_k, sample_answers
from minippo.rlvr.task import Problems, TaskSFTConfig
from minippo.rlvr.tokenizer import CharTokenizer
from minippo.rlvr.trainer import GLOSSARY, RLVRTrainer, rlvr_ppo_config
from minippo.rlvr.verifier import Verifier

TOK = CharTokenizer()
CFG = TaskSFTConfig.quick(n_heldout=64)


def policy(seed=0):
    """A random TinyGPT: its answers are mostly wrong and malformed, some right by chance (the verifier's mix)."""
    return TinyGPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16), seed=seed)


def test_the_rollout_holds_training_problems_scored_by_the_verifier():
    problems = Problems(CFG)
    tr = RLVRTrainer(rlvr_ppo_config(iterations=2, batch_size=16, minibatch_size=8), policy(), TOK, problems)
    record = tr.step()
    ro = tr.last_rollout
    prompts = TOK.decode_batch(ro.prompt_ids)
    assert not {p.prompt for p in problems.heldout} & set(prompts) and all(p.endswith("=") for p in prompts)
    right, formed = Verifier(TOK).check(ro.sequences, ro.attn_mask)
    assert ro.rm_scores.tolist() == right.astype(float).tolist()           # the verifier's 0/1 is the score
    assert ro.scores.tolist() == ro.rm_scores.tolist()                     # no missing-EOS penalty on top
    assert record["rlvr/pass_rate"] == right.mean() and record["rlvr/formed"] == formed.mean()
    assert set(GLOSSARY) <= set(record) and "gold/score" not in record
    # the iteration's problems came from the state's generator: the same seed draws the same ones
    again = RLVRTrainer(rlvr_ppo_config(iterations=2, batch_size=16, minibatch_size=8), policy(), TOK, problems)
    again.step()
    assert TOK.decode_batch(again.last_rollout.prompt_ids) == prompts


def test_lengths_of_right_and_wrong_answers_in_the_record():
    tr = RLVRTrainer(rlvr_ppo_config(iterations=1, batch_size=64, minibatch_size=32), policy(3), TOK, Problems(CFG))
    record = tr.step()
    ro = tr.last_rollout
    right = ro.rm_scores == 1
    want_wrong = ro.lengths[~right].mean()
    assert record["rlvr/length_wrong"] == pytest.approx(want_wrong, abs=1e-12)
    assert record["rlvr/length_right"] is None if not right.any() else \
        record["rlvr/length_right"] == pytest.approx(ro.lengths[right].mean(), abs=1e-12)


def test_a_critic_copied_from_a_reward_model_is_refused():
    with pytest.raises(ValueError, match="`critic_init` must be 'sft' or 'random' against a verifier"):
        RLVRTrainer(rlvr_ppo_config(critic_init="reward_model"), policy(), TOK, Problems(CFG))


def test_max_new_tokens_that_cannot_fit_the_block_is_refused():
    with pytest.raises(ValueError, match="`max_new_tokens` = 10 does not fit"):
        RLVRTrainer(rlvr_ppo_config(max_new_tokens=10), policy(), TOK, Problems(CFG))


def test_evaluation_matches_a_recomputation_from_the_same_samples():
    problems = Problems(CFG).heldout[:12]
    model, verifier = policy(1), Verifier(TOK)
    kw = dict(max_new_tokens=6, temperature=1.5)
    s = sample_answers(model, TOK, verifier, [p.prompt for p in problems], 64, rng=np.random.default_rng(4), **kw)
    ev = evaluate_pass_at_k(model, TOK, verifier, problems, 64, rng=np.random.default_rng(4), **kw)
    c = s["right"].sum(axis=1)
    for k in (1, 4, 16, 64):
        assert ev[f"pass@{k}"] == np.mean([pass_at_k(64, int(x), k) for x in c])
    lengths = s["lengths"].ravel().tolist()
    right = s["right"].ravel().tolist()
    wrong = [n for n, r in zip(lengths, right) if not r]
    assert ev["length_wrong"] == pytest.approx(sum(wrong) / len(wrong), abs=1e-12)
    assert ev["all_wrong"] == np.mean(c == 0) and ev["all_right"] == np.mean(c == 64)
    assert ev["per_problem_right"] == c.tolist() and ev["formed"] == s["formed"].mean()
    # each sampled answer, re-verified from its text, is what the verifier said
    for i, p in enumerate(problems):
        assert s["right"][i].tolist() == [t == p.answer and f for t, f in zip(s["texts"][i], s["formed"][i])]


def test_evaluation_refuses_k_above_n():
    with pytest.raises(ValueError, match="`k` must be in \\[1, 16\\]"):
        evaluate_pass_at_k(policy(), TOK, Verifier(TOK), Problems(CFG).heldout[:2], 16, max_new_tokens=6,
                           temperature=1.0, rng=np.random.default_rng(0))
