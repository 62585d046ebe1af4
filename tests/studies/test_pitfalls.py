"""minippo.studies.pitfalls: the lr = 0 recomputes (right and deliberately wrong) against token-by-token
forward passes, the ratio statistics against NumPy, the value error, the offset RM, the clamped critic (values
and gradients by finite differences), the length slope."""
import numpy as np
import pytest

from tests.rlhf.ppo_helpers import tiny_config, world
from minippo.rl.losses import log_softmax
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.nn.gradcheck import assert_gradients
from minippo.studies.pitfalls import (ClampedCritic, clamp_critic, length_slope, offset_reward_model,
                                   ratio_statistics, recompute_logp, scaled_reward_model, value_error)
from minippo.rlhf.run.trainer import PPOTrainer

TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def lr0():
    """A float64 trainer after one lr = 0 iteration (its rollout has advantages and returns)."""
    sft, rm, tok = world(dtype="float64")
    tr = PPOTrainer(tiny_config(lr=0.0, batch_size=16, minibatch_size=4, temperature=TEMPERATURE), sft, rm, tok)
    tr.step()
    return tr


def token_by_token(model, rollout, temperature, *, use_mask=True, shift=0):
    """log pi(r_j | context) from one forward pass per token: the context is the real tokens only
    (``use_mask``), or the padded row without a mask; ``shift=1`` reads the column after (the bug)."""
    out = np.zeros(rollout.logp.shape)
    seqs, Tp = rollout.sequences, rollout.prompt_len
    for b in range(rollout.batch_size):
        for j in range(int(rollout.lengths[b])):
            if use_mask:
                ctx = rollout.observation(b, j)
                ctx = np.concatenate([ctx, seqs[b, Tp + j:Tp + j + 1]]) if shift else ctx
            else:
                ctx = seqs[b, :Tp + j + shift]
            logits, _, _ = model.forward(ctx[None])                             # (1, len, V)
            out[b, j] = log_softmax(logits[0, -1], temperature)[rollout.response[b, j]]
    return out


def test_lr_zero_recompute_is_bitwise_the_rollouts_logp(lr0):
    ro = lr0.last_rollout
    # exact on any machine: the whole batch with the rollout's shapes, on one BLAS thread like the trainer's rollout
    logp = recompute_logp(lr0.actor, ro, temperature=TEMPERATURE)
    assert np.array_equal(logp, ro.logp)
    s = ratio_statistics(logp, ro)
    assert (s["ratio_mean"], s["ratio_min"], s["ratio_max"], s["approx_kl"], s["clipfrac"]) == (1.0, 1.0, 1.0, 0.0, 0.0)
    assert s["outside_band"] == 0.0 and s["max_abs_log_ratio"] == 0.0 and s["rows_changed"] == 0.0


@pytest.mark.parametrize("temperature", [TEMPERATURE, 1.0])
def test_same_and_repadded_equal_one_forward_pass_per_token(lr0, temperature):
    ro = lr0.last_rollout
    expected = token_by_token(lr0.actor, ro, temperature)
    for mode in ("same", "repadded"):
        got = recompute_logp(lr0.actor, ro, temperature=temperature, mode=mode, extra_pad=2, pad_id=5)
        np.testing.assert_allclose(got, expected, atol=1e-10, err_msg=mode)
    if temperature != TEMPERATURE:                       # the temperature mismatch moves every row
        s = ratio_statistics(recompute_logp(lr0.actor, ro, temperature=temperature), ro)
        assert s["approx_kl"] > 0 and s["rows_changed"] == 1.0


def test_no_mask_attends_the_padding_and_changes_only_padded_rows(lr0):
    ro = lr0.last_rollout
    got = recompute_logp(lr0.actor, ro, temperature=TEMPERATURE, mode="no_mask")
    np.testing.assert_allclose(got, token_by_token(lr0.actor, ro, TEMPERATURE, use_mask=False), atol=1e-10)
    padded = (ro.prompt_mask == 0).any(axis=1)                                   # (B,)
    assert padded.any() and not padded.all()
    np.testing.assert_allclose(got[~padded], ro.logp[~padded], atol=1e-12)
    s = ratio_statistics(got, ro)
    assert s["rows_changed"] == pytest.approx(padded.mean()) and s["approx_kl"] > 0


def test_shifted_reads_the_next_column(lr0):
    ro = lr0.last_rollout
    got = recompute_logp(lr0.actor, ro, temperature=TEMPERATURE, mode="shifted")
    np.testing.assert_allclose(got, token_by_token(lr0.actor, ro, TEMPERATURE, shift=1), atol=1e-10)
    assert ratio_statistics(got, ro)["max_abs_log_ratio"] > 0.1


def test_ratio_statistics_match_numpy(lr0):
    ro = lr0.last_rollout
    rng = np.random.default_rng(0)
    m = ro.response_mask != 0
    logp = (ro.logp + rng.normal(0, 0.3, ro.logp.shape)) * m
    s = ratio_statistics(logp, ro, clip_eps=0.2, row_tol=0.5)
    r = np.exp(logp - ro.logp)[m]
    adv = ro.adv[m]
    assert s["ratio_mean"] == pytest.approx(r.mean()) and s["ratio_max"] == pytest.approx(r.max())
    assert s["approx_kl"] == pytest.approx(np.mean((r - 1) - np.log(r)))
    assert s["clipfrac"] == pytest.approx(np.mean(((adv > 0) & (r > 1.2)) | ((adv < 0) & (r < 0.8))))
    assert s["outside_band"] == pytest.approx(np.mean(np.abs(r - 1) > 0.2))
    assert s["rows_changed"] == pytest.approx(np.mean((np.abs(logp - ro.logp) * m > 0.5).any(axis=1)))
    with pytest.raises(ValueError, match="`logp`"):
        ratio_statistics(logp[:, :-1], ro)
    with pytest.raises(ValueError, match="`mode`"):
        recompute_logp(lr0.actor, ro, temperature=1.0, mode="unmasked")
    with pytest.raises(ValueError, match="`extra_pad`"):
        recompute_logp(lr0.actor, ro, temperature=1.0, mode="repadded", extra_pad=0)


def test_value_error_in_return_units(lr0):
    ro = lr0.last_rollout
    m = ro.response_mask != 0
    assert value_error(ro) == pytest.approx(0.5 * np.mean((ro.values - ro.returns)[m] ** 2))
    no_returns = ro.take(np.arange(ro.batch_size))
    no_returns.returns = None
    with pytest.raises(ValueError, match="returns"):
        value_error(no_returns)
    no_adv = ro.take(np.arange(ro.batch_size))
    no_adv.adv = None
    with pytest.raises(ValueError, match="adv"):
        ratio_statistics(ro.logp, no_adv)


def test_offset_reward_model_adds_a_constant(lr0):
    ro = lr0.last_rollout
    rm = lr0.state.reward_model
    shifted = offset_reward_model(rm, 10.0)
    assert shifted.model is rm.model
    np.testing.assert_allclose(shifted.score(ro.sequences, ro.attn_mask), rm.score(ro.sequences, ro.attn_mask) + 10.0)
    with pytest.raises(ValueError, match="`reward_model`"):
        offset_reward_model(rm.model, 1.0)
    scaled = scaled_reward_model(rm, 10.0)
    assert scaled.model is rm.model
    np.testing.assert_allclose(scaled.score(ro.sequences, ro.attn_mask), 10.0 * rm.score(ro.sequences, ro.attn_mask))
    with pytest.raises(ValueError, match="`scale`"):
        scaled_reward_model(rm, 0.0)


def test_clamped_critic_values_and_gradients():
    """V = min(max(head, lo), hi): equal to the head inside the box, lo / hi outside; its gradient by central
    differences (float64, whole model) is the head's where the clamp does not bind and 0 where it does. The box is
    put between the head's values with a margin, so no value sits on a kink."""
    model = TinyGPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, dtype="float64"), seed=1)
    rng = np.random.default_rng(2)
    model.params["scalar_head.w"][:] = rng.normal(0, 1.0, model.params["scalar_head.w"].shape)
    idx = rng.integers(0, 16, (3, 6))
    head = model.forward(idx, scalar=True)[1]                                       # (3, 6)
    v = np.sort(head.ravel())
    lo, hi = (v[3] + v[4]) / 2, (v[-4] + v[-5]) / 2                                 # 4 values below, 4 above
    clamped = ClampedCritic(model, lo, hi)
    _, values, cache = clamped.forward(idx, scalar=True)
    np.testing.assert_array_equal(values, np.clip(head, lo, hi))
    assert (values == lo).sum() == 4 and (values == hi).sum() == 4
    w = rng.normal(0, 1, head.shape)                                                # loss = sum(w * V)
    grads = clamped.backward(cache, dscalar=w)
    assert_gradients(lambda: float((w * clamped.forward(idx, scalar=True)[1]).sum()), model.params, grads, tol=1e-5)
    inside = model.backward(model.forward(idx, scalar=True)[2], dscalar=w * ((head > lo) & (head < hi)))
    for k in grads:
        np.testing.assert_array_equal(grads[k], inside[k])
    with pytest.raises(ValueError, match="`hi`"):
        ClampedCritic(model, 1.0, 1.0)


def test_clamp_critic_wraps_the_trainers_critic_and_trains_it():
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(iterations=2), sft, rm, tok)
    critic = tr.state.critic
    wrapped = clamp_critic(tr, -0.05, 0.05)
    assert wrapped.params is critic.params is tr.state.opt_critic.params     # the same arrays, still optimised
    before = {k: v.copy() for k, v in critic.params.items()}
    tr.train()
    ro = tr.last_rollout
    m = ro.response_mask != 0
    box = float(np.float32(0.05))              # the float32 critic's values are clamped to 0.05 rounded to float32
    assert (np.abs(ro.values[m]) <= box).all() and (np.abs(ro.values[m]) == box).any()   # the rollout saw the clamp
    assert any(not np.array_equal(before[k], v) for k, v in critic.params.items())  # and the critic still trained
    with pytest.raises(ValueError, match="separate critic"):
        clamp_critic(PPOTrainer(tiny_config(critic="shared"), sft, rm, tok))


def test_length_slope_is_least_squares_and_decorrelates():
    rng = np.random.default_rng(1)
    lengths = rng.integers(3, 30, size=200)
    scores = 0.3 * lengths + rng.normal(0, 1, size=200)
    slope = length_slope(scores, lengths)
    assert slope == pytest.approx(np.polyfit(lengths, scores, 1)[0])
    assert abs(np.corrcoef(lengths, scores - slope * lengths)[0, 1]) < 1e-12
    assert length_slope(2.0 * lengths + 1.0, lengths) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="`lengths`"):
        length_slope(scores, np.full(200, 7))
