"""Memory accounting of the four models: parameter and byte counts against real TinyGPT arrays, the
LLaMA-7B numbers against a hand calculation, monotonicity, and the passes per PPO iteration against
the calls a real PPOTrainer step makes."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rl.losses import entropy_from_logq, log_softmax, logprobs_backward, logprobs_from_logq
from minippo.studies.memory import (FP32, MIXED, VOCAB_ARRAYS_TRAIN, ModelShape, PassCounter, activation_bytes,
                                 block_cache_per_token, buffer_bytes, four_models, kv_cache_bytes, logits_bytes,
                                 measure_tinygpt, model_memory, param_count, passes_per_iteration, static_bytes,
                                 total_bytes)

CONFIGS = [GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=8),
           GPTConfig(vocab_size=77, block_size=20, n_layer=3, n_head=3, n_embd=12, dtype="float64"),
           GPTConfig(vocab_size=512, block_size=64, n_layer=2, n_head=4, n_embd=96)]   # SFTConfig's default


@pytest.mark.parametrize("cfg", CONFIGS)
def test_param_count_equals_tinygpt(cfg):
    assert param_count(ModelShape.from_gpt_config(cfg)) == TinyGPT(cfg, seed=0).num_params()


@pytest.mark.parametrize("cfg,B,T", [(CONFIGS[0], 3, 16), (CONFIGS[1], 2, 7), (CONFIGS[2], 4, 63)])
def test_byte_counts_match_real_arrays(cfg, B, T):
    """Weights, gradients, AdamW moments, the forward cache, the logits and the KV cache of a real
    TinyGPT have exactly the bytes the formulas give."""
    m = measure_tinygpt(cfg, B, T)
    shape, item = ModelShape.from_gpt_config(cfg), np.dtype(cfg.dtype).itemsize
    n = param_count(shape)
    assert m["params"] == n
    assert m["weights"] == m["grads"] == n * item
    assert m["adam"] == 2 * n * item
    assert m["activations"] == activation_bytes(shape, B, T, item)
    assert m["logits"] == logits_bytes(B, T, cfg.vocab_size, item)
    assert m["kv_cache"] == kv_cache_bytes(shape, B, cfg.block_size, item)
    # the tiny table (fp32 models) uses the same numbers
    actor = model_memory(shape, "actor", FP32, B, T)
    if item == 4:
        assert (actor.params, actor.weights, actor.grads, actor.optimizer) == (n, m["weights"], m["grads"], m["adam"])
        assert actor.activations == m["activations"]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_padded_cache_bytes_match_real_arrays(cfg):
    """With padding, the row-wise layers keep the N real tokens only and attention keeps the whole
    (B, T) grid: the cache has exactly ``activation_bytes(..., n_real=N)`` bytes."""
    B, T = 3, 7
    mask = np.ones((B, T), dtype=np.int64)
    mask[0, :3] = 0                                  # left padding
    mask[2, 5:] = 0                                  # right padding
    N, item, shape = int(mask.sum()), np.dtype(cfg.dtype).itemsize, ModelShape.from_gpt_config(cfg)
    padded = measure_tinygpt(cfg, B, T, attn_mask=mask)["activations"]
    assert padded == activation_bytes(shape, B, T, item, n_real=N)
    assert padded < measure_tinygpt(cfg, B, T)["activations"] == activation_bytes(shape, B, T, item)


def test_activation_bytes_n_real_checked():
    shape = ModelShape.from_gpt_config(CONFIGS[0])
    with pytest.raises(ValueError, match="n_real"):
        activation_bytes(shape, 2, 5, n_real=11)
    with pytest.raises(ValueError, match="attn_mask"):
        measure_tinygpt(CONFIGS[0], 2, 5, attn_mask=np.ones((2, 4)))


def test_gpt2_block_cache_is_20C_plus_2_plus_HT():
    shape = ModelShape(2, 96, 4, 512, 64)
    assert sum(block_cache_per_token(shape, 50).values()) == 20 * 96 + 2 + 4 * 50


def test_llama_7b_by_hand():
    """LLaMA-7B: 6,738,415,616 parameters (its published count), SwiGLU MLP of width 11008."""
    s = ModelShape.llama_7b()
    C, V, L, F = 4096, 32000, 32, 11008
    by_hand = V * C + L * (4 * C * C + 3 * C * F + 2 * C) + C + V * C     # embed, blocks, norm, lm_head
    assert by_hand == 6_738_415_616
    assert param_count(s, ("lm",)) == by_hand
    critic_params = by_hand - V * C + C + 1                               # the value head replaces the LM head
    assert param_count(s, ("scalar",)) == critic_params
    rows = {r.name: r for r in four_models(s, MIXED, 4, 2048)}
    # 16 bytes per trained parameter (2 weights + 2 grads + 4 master + 8 Adam), 2 per frozen one
    assert rows["actor"].weights + rows["actor"].grads + rows["actor"].optimizer == 16 * by_hand
    assert rows["critic"].weights + rows["critic"].grads + rows["critic"].optimizer == 16 * critic_params
    assert rows["reference"].weights == 2 * by_hand and rows["reference"].grads == 0
    assert rows["reward"].weights == 2 * critic_params and rows["reward"].optimizer == 0
    assert static_bytes(rows.values()) == 16 * (by_hand + critic_params) + 2 * (by_hand + critic_params)
    assert 239e9 < static_bytes(rows.values()) < 241e9
    # activations at B = 4, T = 2048, fp16: 32 blocks x (8C + 2 + 4F + H T) values per token + ids + ln_f
    per_token = L * (8 * C + 2 + 4 * F + 32 * 2048) + 2 * C + 1
    assert rows["actor"].activations == 4 * 2048 * (2 * per_token + 8)
    # Q33: one (4, 2048, 32000) float32 array is ~1 GB; the actor holds four in the update
    assert logits_bytes(4, 2048, 32000, 4) == 1_048_576_000
    assert rows["actor"].logits == VOCAB_ARRAYS_TRAIN * 1_048_576_000


def test_critic_free_and_shared_trunk_save_the_critic():
    s = ModelShape.llama_7b()
    sep, shared, none = (four_models(s, MIXED, 4, 2048, critic=c) for c in ("separate", "shared", "none"))
    assert [r.name for r in none] == ["actor", "reference", "reward"]
    critic = next(r for r in sep if r.name == "critic")
    assert total_bytes(sep) - total_bytes(none) == critic.total
    head = next(r for r in shared if r.name == "critic")
    assert head.params == 4097 and head.total < 1e5
    assert total_bytes(none) < total_bytes(shared) < total_bytes(sep)
    assert total_bytes(sep) / total_bytes(none) > 1.7


def test_vocab_arrays_held_by_the_update():
    """As minibatch_loss_and_grads computes them: the logits, one log-softmax and one softmax shared by the
    log-prob and entropy caches, and d loss / d logits: VOCAB_ARRAYS_TRAIN distinct (B, T, V) arrays."""
    logits = np.random.default_rng(0).normal(size=(2, 3, 11))
    logq = log_softmax(logits)
    probs = np.exp(logq)
    logp, c_logp = logprobs_from_logq(logq, probs, np.zeros((2, 3), dtype=np.int64))
    _, c_ent = entropy_from_logq(logq, probs)
    dlogits = logprobs_backward(np.ones_like(logp), c_logp)
    big = [a for a in (logits, *c_logp, *c_ent, dlogits) if isinstance(a, np.ndarray) and a.shape == logits.shape]
    assert len({id(a) for a in big}) == VOCAB_ARRAYS_TRAIN


def test_buffer_stores_scalars_not_distributions():
    small = buffer_bytes(4, 2048, 32000)
    full = buffer_bytes(4, 2048, 32000, full_distributions=True)
    assert small == 4 * 2048 * (6 * 4 + 8 + 4)                             # ~300 KB
    assert full - small == 2 * (32000 - 1) * 4 * 2048 * 4                   # ~2 GB of distributions
    assert full / small > 3000


@given(L=st.integers(1, 4), H=st.integers(1, 4), hs=st.integers(1, 16), V=st.integers(1, 300),
       T=st.integers(1, 64), B=st.integers(1, 8), family=st.sampled_from(["gpt2", "llama"]))
def test_monotonicity(L, H, hs, V, T, B, family):
    C = H * hs
    d_ff = None if family == "gpt2" else 3 * C
    s = ModelShape(L, C, H, V, T, family=family, d_ff=d_ff)
    bigger = [ModelShape(L + 1, C, H, V, T, family=family, d_ff=d_ff),
              ModelShape(L, C + H, H, V, T, family=family, d_ff=None if d_ff is None else 3 * (C + H)),
              ModelShape(L, C, H, V + 1, T, family=family, d_ff=d_ff)]
    for b in bigger:
        assert param_count(b) > param_count(s)
        assert total_bytes(four_models(b, FP32, B, T)) > total_bytes(four_models(s, FP32, B, T))
    for mode in ("train", "checkpointed", "forward"):
        assert activation_bytes(s, B + 1, T, mode=mode) > activation_bytes(s, B, T, mode=mode)
        assert activation_bytes(s, B, T + 1, mode=mode) > activation_bytes(s, B, T, mode=mode)
    assert activation_bytes(s, B, T, mode="forward") < activation_bytes(s, B, T, mode="checkpointed")
    if L > 1:        # one block: checkpointing only adds the saved input
        assert activation_bytes(s, B, T, mode="checkpointed") < activation_bytes(s, B, T, mode="train")
    assert kv_cache_bytes(s, B, T + 1) > kv_cache_bytes(s, B, T)
    sep, shared, none = (total_bytes(four_models(s, FP32, B, T, critic=c)) for c in ("separate", "shared", "none"))
    assert sep > shared > none


def test_validation():
    with pytest.raises(ValueError, match="`n_embd`"):
        ModelShape(2, 10, 3, 50, 16)
    with pytest.raises(ValueError, match="`family`"):
        ModelShape(2, 8, 2, 50, 16, family="bert")
    with pytest.raises(ValueError, match="`d_ff`"):
        ModelShape(2, 8, 2, 50, 16, family="llama")
    with pytest.raises(ValueError, match="`d_ff`"):
        ModelShape(2, 8, 2, 50, 16, d_ff=7)
    with pytest.raises(ValueError, match="`n_layer`"):
        ModelShape(0, 8, 2, 50, 16)
    s = ModelShape(2, 8, 2, 50, 16)
    with pytest.raises(ValueError, match="`heads`"):
        param_count(s, ("value",))
    with pytest.raises(ValueError, match="`mode`"):
        activation_bytes(s, 2, 4, mode="eval")
    with pytest.raises(ValueError, match="`B`"):
        activation_bytes(s, 0, 4)
    with pytest.raises(ValueError, match="`name`"):
        model_memory(s, "policy", FP32, 2, 4)
    with pytest.raises(ValueError, match="`critic`"):
        four_models(s, FP32, 2, 4, critic="twin")
    with pytest.raises(ValueError, match="`T`"):
        measure_tinygpt(CONFIGS[0], 2, 17)


# ---- passes per iteration, counted on a real PPOTrainer step ----------------------------------

@pytest.mark.parametrize("critic,ptx_coef", [("separate", 0.0), ("shared", 0.0), ("none", 0.0), ("separate", 0.5)])
def test_passes_per_iteration_match_the_trainer(critic, ptx_coef):
    from tests.rlhf.ppo_helpers import tiny_config, world

    from minippo.rlhf.data.corpus import generate_corpus
    from minippo.rlhf.data.batches import encode_sequences
    from minippo.rlhf.run.trainer import PPOTrainer

    sft, rm, tok = world()
    ptx = encode_sequences(tok, generate_corpus(50, seed=1), sft.cfg.block_size)[0] if ptx_coef else None
    cfg = tiny_config(critic=critic, ptx_coef=ptx_coef, ptx_batch_size=3)
    trainer = PPOTrainer(cfg, sft, rm, tok, ptx_sequences=ptx)
    s = trainer.state
    models = {"actor": s.actor, "critic": s.critic, "reference": s.ref, "reward": rm.model}
    with PassCounter(models, methods={"kl controller": (s.kl_ctl, "update")}) as pc:
        trainer.step()
    for m in models.values():
        if m is not None:
            assert not {"forward", "backward", "prefill", "decode_step"} & set(vars(m))    # restored
    assert "update" not in vars(s.kl_ctl)
    decode_steps = trainer.last_rollout.response.shape[1] - 1
    assert pc.counts == passes_per_iteration(cfg, decode_steps)
    assert pc.method_calls["kl controller"]["calls"] == 1 and pc.method_calls["kl controller"]["seconds"] > 0
    for name, c in pc.counts.items():            # time is spent exactly in the kinds of call that were made
        assert all((pc.seconds[name][k] > 0) == (c[k] > 0) for k in ("prefill", "decode", "forward", "backward"))
    assert ("critic" in pc.counts) == (critic == "separate")
    with pytest.raises(ValueError, match="`decode_steps`"):
        passes_per_iteration(cfg, cfg.max_new_tokens)


def test_a_backward_s_rows_are_read_from_the_gradient_it_is_given():
    from minippo.studies.memory import _backward_rows
    cache = ("any cache, e.g. a clamped critic's (cache, inside)", None)
    assert _backward_rows((cache,), {"dscalar": np.zeros((3, 5))}) == 3
    assert _backward_rows((cache, np.zeros((4, 2, 7))), {}) == 4          # dlogits by position
    assert _backward_rows((cache,), {"dlogits": None, "dscalar": None}) == 0
