"""The experience buffer: the 7-tuple layout, masks, padding, one temperature, log-prob recompute."""
import numpy as np
import pytest

from tests.rlhf.ppo_helpers import state_of, tiny_config, world
from minippo.rl.losses import log_softmax
from minippo.rlhf.generate import encode_prompts
from minippo.rlhf.data.gold import gold_scores
from minippo.rlhf.metrics import rollout_metrics
from minippo.rlhf.ppo import per_token_rewards, rollout
from minippo.rlhf.ppo_knobs import knobs_rollout
from minippo.rlhf.ppo import Rollout, minibatches

EOS, PAD = 2, 0


def small_rollout(pad_value=0.0, extra_pad_columns=0):
    """Two responses: [t0, t1, EOS, PAD, PAD] and [u0, u1, u2, u3, u4] (no EOS), prompts left-padded.

    ``pad_value`` is written into every per-token array at padded positions before the buffer is built;
    ``extra_pad_columns`` appends more padding columns: neither may change any metric."""
    T = 5 + extra_pad_columns
    response = np.full((2, T), PAD)
    response[0, :3] = [11, 12, EOS]
    response[1, :5] = [21, 22, 23, 24, 25]
    mask = np.zeros((2, T), dtype=np.int64)
    mask[0, :3], mask[1, :5] = 1, 1
    rng = np.random.default_rng(0)
    draws = {k: np.pad(rng.normal(-1, 0.5, (2, 5)), ((0, 0), (0, extra_pad_columns))) for k in ("logp", "logp_ref", "values")}
    per_token = {k: np.where(mask == 1, v, pad_value) for k, v in draws.items()}
    return Rollout(prompt_ids=np.array([[PAD, 1, 40, 41], [1, 50, 51, 52]]), prompt_mask=np.array([[0, 1, 1, 1], [1, 1, 1, 1]]),
                   response=response, response_mask=mask, rm_scores=np.array([0.5, 1.0]),
                   scores=np.array([0.5, 0.0]), ended=np.array([True, False]), **per_token)


def compute_rewards(ro, kl_coef):
    """Step 3 of ppo_iteration, in place."""
    ro.rewards, ro.kl, ro.non_score_reward = per_token_rewards(ro.scores, ro.logp, ro.logp_ref, ro.response_mask,
                                                               kl_coef)


def test_padding_holds_zero_and_observations_are_the_context():
    ro = small_rollout(pad_value=123.0)
    assert (ro.logp[0, 3:] == 0).all() and (ro.values[0, 3:] == 0).all()
    assert ro.sequences.shape == (2, 9) and ro.prompt_len == 4
    np.testing.assert_array_equal(ro.attn_mask[0], [0, 1, 1, 1, 1, 1, 1, 0, 0])
    # the observation of token j is the real prompt plus the response before j (left padding dropped)
    np.testing.assert_array_equal(ro.observation(0, 0), [1, 40, 41])
    np.testing.assert_array_equal(ro.observation(0, 2), [1, 40, 41, 11, 12])
    np.testing.assert_array_equal(ro.observation(1, 4), [1, 50, 51, 52, 21, 22, 23, 24])
    np.testing.assert_array_equal(ro.lengths, [3, 5])


def test_padding_never_enters_a_metric():
    texts = ["the film was good .", "the film was bad"]
    base, other = small_rollout(), small_rollout(pad_value=-50.0, extra_pad_columns=3)
    for ro in (base, other):
        compute_rewards(ro, kl_coef=0.2)
    np.testing.assert_allclose(other.rewards[:, :5], base.rewards)
    assert (other.rewards[:, 5:] == 0).all()
    # the same numbers, to float64 rounding: a padded token adds an exact 0, but a sum over 8 columns may be taken in
    # another order than one over 5 (NumPy's pairwise sum); each metric sums <= 8 terms of size O(1), so a reordering
    # moves it by <= 8 * eps64 * sum|x| ~ 8 * 2.2e-16 * 10 < 1e-13
    m_base, m_other = rollout_metrics(base, gold_scores(texts)), rollout_metrics(other, gold_scores(texts))
    assert m_other.keys() == m_base.keys() and m_other == pytest.approx(m_base, rel=0, abs=1e-13)
    # the score of row 0 lands on its EOS (column 2), row 1 (no EOS) on its last token
    assert base.rewards[0, 2] == pytest.approx(0.5 - 0.2 * base.kl[0, 2])
    assert base.rewards[1, 4] == pytest.approx(0.0 - 0.2 * base.kl[1, 4])


def test_sequence_returns_are_the_score_plus_the_summed_kl_penalty():
    """Rollout.sequence_returns (what the critic-free estimators compare), hand-worked on small_rollout:
    scores (0.5, 0), kl_coef 0.5 and log-ratios chosen dyadic, so every number is exact in float64
    (rel 4 eps64 leaves room for the summation order only). Row 0: 0.5 - 0.5 (0.25 - 0.5 + 0.125) = 0.5625;
    row 1: 0 - 0.5 (0.5 + 0.25 + 0.125 - 0.25 + 0) = -0.3125. Catches the return without its KL penalty."""
    ro = small_rollout()
    ro.logp = np.array([[0.25, -0.5, 0.125, 0, 0], [0.5, 0.25, 0.125, -0.25, 0.0]]) - 1.0      # log-ratios - 1
    ro.logp_ref = np.full_like(ro.logp, -1.0)
    compute_rewards(ro, kl_coef=0.5)
    np.testing.assert_allclose(ro.sequence_returns, [0.5625, -0.3125], rtol=4 * np.finfo(np.float64).eps)


def test_take_and_minibatches():
    ro = small_rollout()
    sub = ro.take([1])
    assert sub.batch_size == 1 and sub.rewards is None
    np.testing.assert_array_equal(sub.response, ro.response[1:])
    # what the models read is built from the rows taken, and is not a stored field of its own
    for r in (ro, sub):
        np.testing.assert_array_equal(r.sequences, np.concatenate([r.prompt_ids, r.response], axis=1))
        np.testing.assert_array_equal(r.attn_mask,
                                      np.concatenate([r.prompt_mask, r.response_mask], axis=1))
        assert (r.batch_size, r.prompt_len) == r.prompt_ids.shape
    assert not {"sequences", "attn_mask", "batch_size", "prompt_len"} & set(ro.arrays())
    rng = np.random.default_rng(3)
    mbs = minibatches(12, 4, rng)
    assert len(mbs) == 3 and sorted(np.concatenate(mbs).tolist()) == list(range(12))
    assert [m.tolist() for m in mbs] == [m.tolist() for m in minibatches(12, 4, np.random.default_rng(3))]
    for bad in (dict(minibatch_size=5), dict(minibatch_size=13), dict(minibatch_size=0)):
        with pytest.raises(ValueError, match="minibatch_size"):
            minibatches(12, bad["minibatch_size"], rng)


def test_every_epoch_draws_its_own_shuffle():
    """epoch_minibatches: each epoch is a new permutation of the rows, drawn from the generator when the epoch
    starts (the same draws written here as a loop of rng.permutation, so equal exactly), cut into consecutive
    minibatches. Catches one shuffle drawn once and reused by every epoch."""
    from minippo.rlhf.ppo import epoch_minibatches
    got = list(epoch_minibatches(8, 4, 3, np.random.default_rng(7)))
    rng = np.random.default_rng(7)
    expect = [(e, order[s:s + 4]) for e in range(3) for order in [rng.permutation(8)] for s in (0, 4)]
    assert [(e, i.tolist()) for e, i in got] == [(e, i.tolist()) for e, i in expect]
    assert len({tuple(np.concatenate([i for e, i in got if e == k])) for k in range(3)}) > 1


def test_to_table_prints_the_seven_tuple_with_padding():
    sft, rm, tok = world()
    ro = small_rollout()
    compute_rewards(ro, kl_coef=0.1)
    table = ro.to_table(tok, 0)
    header = table.splitlines()[3]
    for col in ("observation", "action", "mask", "log_prob", "value", "reward", "advantage", "return"):
        assert col in header
    rows = table.splitlines()[4:]
    assert len(rows) == 5 and "(padding)" in rows[3] and "(padding)" in rows[4]
    assert "<eos>" in rows[2] and "(padding)" not in rows[2]
    assert rows[0].split()[-2:] == ["-", "-"]            # advantage and return not computed yet


def test_save_npz_round_trip(tmp_path, monkeypatch):
    import time
    ro = small_rollout()
    ro.save_npz(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz") as z:
        np.testing.assert_array_equal(z["logp"], ro.logp)
        assert "rewards" not in z.files
        assert sorted(z.files) == sorted(ro.arrays())
        assert all(z[k].dtype == a.dtype and np.array_equal(z[k], a) for k, a in ro.arrays().items())
    monkeypatch.setattr(time, "time", lambda: 1.7e9)          # later: the same bytes (no time stamp)
    ro.save_npz(tmp_path / "again.npz")
    assert (tmp_path / "again.npz").read_bytes() == (tmp_path / "r.npz").read_bytes()


@pytest.mark.parametrize("critic_kind", ["separate", "shared"])
def test_rollout_logprobs_equal_the_training_recompute_at_temperature_0_7(critic_kind):
    """The KV-cache sampler's log-probs, the rollout's full-forward recompute and a hand-written
    log_softmax(logits / 0.7) over the whole sequence all agree (float64): one temperature everywhere."""
    sft, rm, tok = world(dtype="float64")
    cfg = tiny_config(temperature=0.7, batch_size=6, minibatch_size=3, max_new_tokens=10,
                      **({} if critic_kind == "separate" else {"critic": critic_kind}))
    steps_1_2 = rollout if critic_kind == "separate" else knobs_rollout     # canonical PPO; the knobs' shared critic
    ro = steps_1_2(state_of(cfg, sft, rm, tok), cfg, *encode_prompts(tok, ["the film", "i", "the acting was"] * 2))
    m = ro.response_mask == 1
    np.testing.assert_allclose(ro.gen_logp[m], ro.logp[m], atol=1e-9, rtol=0)
    # an independent recompute: one forward pass over prompt ++ response, column Tp + j - 1 predicts token j
    logits, _, _ = sft.forward(ro.sequences, ro.attn_mask)
    Tp = ro.prompt_len
    manual = np.take_along_axis(log_softmax(logits[:, Tp - 1:-1], 0.7), ro.response[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(ro.logp[m], manual[m], atol=1e-12, rtol=0)
    # ... and at the wrong temperature the numbers would not match: the check can fail
    wrong = np.take_along_axis(log_softmax(logits[:, Tp - 1:-1], 1.0), ro.response[..., None], axis=-1)[..., 0]
    assert np.abs(wrong[m] - ro.logp[m]).max() > 1e-3
    # the reference is a copy of the policy: the KL is exactly 0 at the start
    assert (ro.logp == ro.logp_ref).all()
    # the RM score is read at the last real token, the penalty applied where no EOS was produced
    ended = ((ro.response == tok.eos_id) & m).any(axis=1)
    np.testing.assert_array_equal(ro.ended, ended)
    np.testing.assert_allclose(ro.scores, ro.rm_scores - cfg.missing_eos_penalty * (~ended))
    np.testing.assert_allclose(ro.rm_scores, rm.score(ro.sequences, ro.attn_mask))
    assert len(tok.decode_batch(ro.sequences)) == 6


@pytest.mark.parametrize("seed, n, repeat", [(0, 6, 1), (1, 4, 3), (2, 16, 1)])
def test_the_prompt_table_draws_what_sample_prompts_and_encode_prompts_give(seed, n, repeat):
    """The prompts of an iteration come from the table the trainer tokenized once: the same rows, the same
    left padding, and the same draws from the generator as sampling the strings and encoding them."""
    from minippo.rlhf.data.corpus import PROMPTS, sample_prompts
    from minippo.rlhf.generate import encode_prompts
    from minippo.rlhf.ppo import PromptTable
    _, _, tok = world()
    table = PromptTable.encode(tok, PROMPTS)
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    ids, mask = table.draw(n, rng_a, repeat=repeat)
    want_ids, want_mask = encode_prompts(tok, [p for p in sample_prompts(n, seed=rng_b) for _ in range(repeat)])
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(mask, want_mask)
    assert rng_a.integers(0, 2**32) == rng_b.integers(0, 2**32)            # the generators moved alike


def test_a_critic_forward_without_the_lm_head_gives_the_same_values_and_gradients():
    """``forward_response(..., logits=False)`` (what the critic runs) skips the LM head and nothing else: the
    values and every gradient of the value loss are the same bits as with the logits computed; the logits
    are None."""
    from minippo.rlhf.ppo import backward_response, forward_response

    sft, rm, tok = world()
    cfg = tiny_config()
    state = state_of(cfg, sft, rm, tok)
    ro = rollout(state, cfg, *encode_prompts(tok, ["the film", "i", "the acting was", "a"] * 2))
    dvalues = np.random.default_rng(3).standard_normal(ro.response_mask.shape).astype(np.float32)
    out = {}
    for logits in (True, False):
        lm, values, cache = forward_response(state.critic, ro.sequences, ro.attn_mask, ro.prompt_len,
                                             scalar=True, logits=logits)
        assert (lm is None) != logits and values.shape == ro.response_mask.shape
        out[logits] = values, backward_response(state.critic, cache, dvalues=dvalues)
    np.testing.assert_array_equal(out[True][0], out[False][0])            # same machine, same shapes: exact
    assert out[True][1].keys() == out[False][1].keys()
    for k, g in out[True][1].items():
        np.testing.assert_array_equal(g, out[False][1][k], err_msg=k)
    assert np.abs(out[False][1]["wte"]).max() > 0                          # the trunk gets a gradient
