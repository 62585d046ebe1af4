"""TinyGPT: whole-model gradient checks (every tensor, float64, tol 1e-5), padding invariance,
KV cache == full forward, overfitting one batch, determinism, and input validation."""
import numpy as np
import pytest

from minippo import GPTConfig, TinyGPT, kernels
from minippo.nn import attention
from minippo.nn.attention import RealTokens
from minippo.nn.gpt import param_shapes
from minippo.nn.gradcheck import assert_gradients
from minippo.nn.optim import AdamW

TINY = dict(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8, dtype="float64")


def tiny_model(seed=0, **kw):
    """A float64 tiny model whose parameters are all O(0.3) random (biases, LN gains, scalar head too),
    so that every path carries a gradient of a useful size."""
    model = TinyGPT(GPTConfig(**{**TINY, **kw}), seed=seed)
    rng = np.random.default_rng(100 + seed)
    for name, p in model.params.items():
        p += rng.normal(0.0, 0.3, p.shape)
    return model


def batch(B=3, T=6, V=11, seed=1):
    rng = np.random.default_rng(seed)
    idx, targets = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))
    attn_mask = np.ones((B, T), dtype=np.int64)
    attn_mask[1, :2] = 0           # left padding
    attn_mask[2, 4:] = 0           # right padding
    mask = attn_mask.copy()
    mask[0, 0] = 0                 # the loss mask may drop real tokens as well
    return idx, targets, mask, attn_mask


# ------------------------------------------------------------------------------------------------
# gradient checks
# ------------------------------------------------------------------------------------------------

def test_lm_loss_gradients_every_tensor():
    model = tiny_model()
    idx, targets, mask, attn_mask = batch()
    loss, grads = model.lm_loss_and_grads(idx, targets, mask, attn_mask)
    assert set(grads) == set(model.params)
    assert np.all(grads["scalar_head.w"] == 0) and np.all(grads["scalar_head.b"] == 0)
    assert_gradients(lambda: model.lm_loss(idx, targets, mask, attn_mask), model.params, grads, tol=1e-5)


def _scalar_loss(model, idx, attn_mask, R):
    _, values, _ = model.forward(idx, attn_mask, scalar=True)
    return float(np.sum(values * R))


def test_scalar_head_gradients_every_tensor():
    model = tiny_model(1)
    idx, _, mask, attn_mask = batch(seed=2)
    R = np.random.default_rng(3).standard_normal(idx.shape) * mask     # masked, as a value loss would be
    _, values, cache = model.forward(idx, attn_mask, scalar=True)
    assert values.shape == idx.shape
    grads = model.backward(cache, dscalar=R)
    assert_gradients(lambda: _scalar_loss(model, idx, attn_mask, R), model.params, grads, tol=1e-5)


def test_lm_and_scalar_gradients_together():
    model = tiny_model(2)
    idx, targets, mask, attn_mask = batch(seed=4)
    R = np.random.default_rng(5).standard_normal(idx.shape) * mask
    Rl = np.random.default_rng(6).standard_normal(idx.shape + (11,)) * mask[..., None]

    def f():
        logits, values, _ = model.forward(idx, attn_mask, scalar=True)
        return float(np.sum(logits * Rl) + np.sum(values * R))

    _, _, cache = model.forward(idx, attn_mask, scalar=True)
    grads = model.backward(cache, dlogits=Rl, dscalar=R)
    assert_gradients(f, model.params, grads, tol=1e-5)
    # linearity: the joint backward is the sum of the two separate ones
    g_lm, g_sc = model.backward(cache, dlogits=Rl), model.backward(cache, dscalar=R)
    for k in grads:
        np.testing.assert_allclose(grads[k], g_lm[k] + g_sc[k], rtol=1e-10, atol=1e-14)


def test_scalar_stop_gradient_reaches_only_the_head():
    model = tiny_model(3)
    idx, _, mask, attn_mask = batch(seed=7)
    R = np.random.default_rng(8).standard_normal(idx.shape) * mask
    _, _, cache = model.forward(idx, attn_mask, scalar=True)
    grads = model.backward(cache, dscalar=R, scalar_into_trunk=False)
    full = model.backward(cache, dscalar=R)
    for k, g in grads.items():
        if k.startswith("scalar_head"):
            np.testing.assert_array_equal(g, full[k])
            assert np.any(g != 0)
        else:
            assert np.all(g == 0), k
    # the head's gradient is still the true one (check it numerically)
    head = {k: model.params[k] for k in ("scalar_head.w", "scalar_head.b")}
    assert_gradients(lambda: _scalar_loss(model, idx, attn_mask, R), head,
                     {k: grads[k] for k in head}, tol=1e-5)


def test_backward_validates_its_inputs():
    model = tiny_model()
    idx, _, _, _ = batch()
    _, _, cache = model.forward(idx)
    with pytest.raises(ValueError, match="`dscalar`"):
        model.backward(cache, dscalar=np.ones(idx.shape))          # forward ran without the scalar head
    with pytest.raises(ValueError, match="`dlogits`"):
        model.backward(cache, dlogits=np.ones(idx.shape))          # (B, T) instead of (B, T, V)
    grads = model.backward(cache)                                  # nothing upstream: all zeros
    assert all(np.all(g == 0) for g in grads.values())
    # the scalar head alone (logits=False) gives the same scalar and gradients
    _, values, cache = model.forward(idx, scalar=True)
    no_logits, values2, cache2 = model.forward(idx, scalar=True, logits=False)
    assert no_logits is None
    np.testing.assert_array_equal(values2, values)
    R = np.ones(idx.shape)
    g1, g2 = model.backward(cache, dscalar=R), model.backward(cache2, dscalar=R)
    assert all(np.array_equal(g1[k], g2[k]) for k in g1)
    with pytest.raises(ValueError, match="`dlogits`"):
        model.backward(cache2, dlogits=np.ones(idx.shape + (11,)))


def test_fused_kernels_and_numpy_layers_agree():
    model = tiny_model(10)
    idx, targets, mask, attn_mask = batch(seed=12)
    with kernels.use_kernels(True):
        loss, grads = model.lm_loss_and_grads(idx, targets, mask, attn_mask)
    with kernels.use_kernels(False):
        loss_ref, grads_ref = model.lm_loss_and_grads(idx, targets, mask, attn_mask)
    assert loss == pytest.approx(loss_ref, rel=1e-12)
    for k in grads:
        np.testing.assert_allclose(grads[k], grads_ref[k], rtol=1e-9, atol=1e-13)


# ------------------------------------------------------------------------------------------------
# padding, KV cache
# ------------------------------------------------------------------------------------------------

def test_left_padding_does_not_change_real_logits():
    model = tiny_model(4, block_size=9)
    prompt = np.array([[3, 1, 4, 1, 5, 9]])
    logits0, _, _ = model.forward(prompt)
    for pad_id in (0, 7):
        padded = np.concatenate([np.full((1, 3), pad_id), prompt], axis=1)
        am = np.array([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
        logits3, values3, _ = model.forward(padded, am, scalar=True)
        np.testing.assert_allclose(logits3[:, 3:], logits0, rtol=0, atol=1e-12)
        assert np.all(np.isfinite(logits3)) and np.all(np.isfinite(values3))


def test_real_tokens_gather_and_scatter_are_each_others_backward():
    rng = np.random.default_rng(21)
    rows = np.array([1, 2, 4, 5, 7])                              # B=2, T=4: three pads
    tokens = RealTokens(rows, 2, 4)
    a, g = rng.standard_normal((2, 4, 3)), rng.standard_normal((5, 3))
    assert tokens.gather(a).shape == (5, 3)
    np.testing.assert_array_equal(tokens.gather(a), a.reshape(8, 3)[rows])
    grid = tokens.scatter(g)
    assert grid.shape == (2, 4, 3) and np.all(grid.reshape(8, 3)[[0, 3, 6]] == 0)
    np.testing.assert_array_equal(tokens.gather(grid), g)
    # <scatter(g), a> = <g, gather(a)>: each is the other's transpose (float64 rounding only)
    assert np.sum(grid * a) == pytest.approx(np.sum(g * tokens.gather(a)), rel=1e-12)
    full = RealTokens(None, 2, 4)                                 # no padding: reshapes, no copy
    assert np.shares_memory(full.gather(a), a) and np.shares_memory(full.scatter(a.reshape(8, 3)), a)


def test_the_row_wise_layers_see_only_the_real_tokens(monkeypatch):
    model = tiny_model(8, block_size=8)
    idx, _, _, attn_mask = batch(seed=22)
    seen = []
    original = attention.linear_forward

    def counting(x, w, b):
        seen.append(x.reshape(-1, x.shape[-1]).shape[0])
        return original(x, w, b)
    monkeypatch.setattr(attention, "linear_forward", counting)
    logits, values, _ = model.forward(idx, attn_mask, scalar=True)
    n_real = int(attn_mask.sum())
    assert n_real < attn_mask.size and seen and set(seen) == {n_real}
    # the padded positions' outputs are zeros: numbers that mean nothing, masked by every caller
    assert np.all(logits[attn_mask == 0] == 0) and np.all(values[attn_mask == 0] == 0)
    assert np.all(logits[attn_mask == 1] != 0)


def test_padding_on_both_sides_and_no_gradient_to_pads():
    model = tiny_model(5, block_size=8)
    real = np.array([[2, 6, 1, 8]])
    ref_logits, _, _ = model.forward(real)
    idx = np.array([[0, 0, 2, 6, 1, 8, 0, 0]])
    am = np.array([[0, 0, 1, 1, 1, 1, 0, 0]])
    logits, _, cache = model.forward(idx, am)
    np.testing.assert_allclose(logits[:, 2:6], ref_logits, rtol=0, atol=1e-12)
    # the pad token's own embedding row gets no gradient from a loss over the real tokens
    dlogits = np.random.default_rng(9).standard_normal(logits.shape) * am[..., None]
    grads = model.backward(cache, dlogits=dlogits)
    idx2 = idx.copy()
    idx2[am == 0] = 10                                       # a different pad id
    _, _, cache2 = model.forward(idx2, am)
    grads2 = model.backward(cache2, dlogits=dlogits)
    for k in grads:
        np.testing.assert_allclose(grads[k], grads2[k], rtol=1e-12, atol=1e-14)


def test_kv_cache_equals_full_forward_with_left_padded_prompts():
    model = tiny_model(6, block_size=10)
    rng = np.random.default_rng(10)
    prompts = rng.integers(1, 11, (3, 4))
    prompt_mask = np.array([[1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]])
    prompts[prompt_mask == 0] = 0
    new = rng.integers(0, 11, (3, 5))
    new_mask = np.ones((3, 5), dtype=np.int64)
    new_mask[0, 3:] = 0                                      # row 0 stops after 3 tokens (padding follows)
    full_idx = np.concatenate([prompts, new], axis=1)
    full_mask = np.concatenate([prompt_mask, new_mask], axis=1)
    full_logits, _, _ = model.forward(full_idx, full_mask)

    logits_last, kv = model.prefill(prompts, prompt_mask)
    np.testing.assert_allclose(logits_last, full_logits[:, 3], rtol=0, atol=1e-10)
    for t in range(5):
        logits = model.decode_step(kv, new[:, t], attn_mask=new_mask[:, t])
        real = full_mask[:, 4 + t] == 1
        np.testing.assert_allclose(logits[real], full_logits[real, 4 + t], rtol=0, atol=1e-10)
        assert np.all(np.isfinite(logits))
    assert kv.t == 9
    model.decode_step(kv, new[:, 0])
    with pytest.raises(ValueError, match="`kv`"):
        model.decode_step(kv, new[:, 0])                     # block_size 10 is full


def test_kv_cache_default_mask_and_token_validation():
    model = tiny_model(7)
    idx = np.array([[1, 2], [3, 4]])
    full, _, _ = model.forward(np.array([[1, 2, 5], [3, 4, 6]]))
    _, kv = model.prefill(idx)
    np.testing.assert_allclose(model.decode_step(kv, np.array([5, 6])), full[:, 2], rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="`tokens`"):
        model.decode_step(kv, np.array([5, 11]))
    with pytest.raises(ValueError, match="`tokens`"):
        model.decode_step(kv, np.array([5]))
    with pytest.raises(ValueError, match="`kv`"):
        model.decode_step({"k": []}, np.array([5, 6]))
    for bad in (np.array([1, 2]), np.array([1, 1, 1]), np.array([[1, 1]])):
        with pytest.raises(ValueError, match="`attn_mask`"):
            model.decode_step(kv, np.array([5, 6]), attn_mask=bad)


# ------------------------------------------------------------------------------------------------
# training, determinism, bookkeeping
# ------------------------------------------------------------------------------------------------

def test_overfits_one_batch_with_adamw():
    cfg = GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=32)   # float32, the fast path
    model = TinyGPT(cfg, seed=0)
    rng = np.random.default_rng(11)
    idx = rng.integers(0, 13, (4, 8))
    targets = np.roll(idx, -1, axis=1)
    mask = np.ones((4, 8))
    opt = AdamW(model.params, lr=1e-2)
    first, _ = model.lm_loss_and_grads(idx, targets, mask)
    assert first == pytest.approx(np.log(13), abs=0.1)       # a fresh model predicts ~uniformly
    for _ in range(150):
        loss, grads = model.lm_loss_and_grads(idx, targets, mask)
        opt.step(grads)
    assert loss < 0.05
    assert all(p.dtype == np.float32 for p in model.params.values())


def test_determinism():
    cfg = GPTConfig(**TINY)
    a, b, c = TinyGPT(cfg, seed=3), TinyGPT(cfg, seed=3), TinyGPT(cfg, seed=4)
    d = TinyGPT(cfg, rng=np.random.default_rng(3))
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
        np.testing.assert_array_equal(a.params[k], d.params[k])
    assert any(np.any(a.params[k] != c.params[k]) for k in a.params)
    idx, targets, mask, am = batch()
    la, ga = a.lm_loss_and_grads(idx, targets, mask, am)
    lb, gb = b.lm_loss_and_grads(idx, targets, mask, am)
    assert la == lb and all(np.array_equal(ga[k], gb[k]) for k in ga)
    assert la != c.lm_loss(idx, targets, mask, am)


def test_init_follows_gpt2():
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=2, n_embd=64, dtype="float64")
    p = TinyGPT(cfg, seed=0).params
    assert list(p) == list(param_shapes(cfg))
    assert all(p[k].shape == s for k, s in param_shapes(cfg).items())
    assert p["wte"].std() == pytest.approx(0.02, rel=0.05)
    assert p["h.0.mlp.c_proj.w"].std() == pytest.approx(0.02 / np.sqrt(6), rel=0.05)
    assert p["h.2.attn.c_proj.w"].std() == pytest.approx(0.02 / np.sqrt(6), rel=0.1)
    assert np.all(p["h.1.ln_2.w"] == 1) and np.all(p["ln_f.b"] == 0) and np.all(p["h.0.attn.c_attn.b"] == 0)
    assert np.all(p["scalar_head.w"] == 0) and np.all(p["scalar_head.b"] == 0)
    assert TinyGPT(GPTConfig(**{**TINY, "dtype": "float32"})).params["wte"].dtype == np.float32


def test_copy_from_params_num_params():
    model = tiny_model(8)
    clone = model.copy()
    assert clone.cfg == model.cfg and clone.num_params() == model.num_params()
    C, V, T, L = 8, 11, 6, 2
    assert model.num_params() == V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + C + 1
    clone.params["wte"][0, 0] += 1.0                        # a deep copy: the original is untouched
    assert clone.params["wte"][0, 0] != model.params["wte"][0, 0]
    rebuilt = TinyGPT.from_params(model.cfg, model.params)
    idx = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(rebuilt.forward(idx)[0], model.forward(idx)[0])
    with pytest.raises(ValueError, match="`params`"):
        TinyGPT.from_params(model.cfg, {k: v for k, v in model.params.items() if k != "wpe"})
    with pytest.raises(ValueError, match="wte"):
        TinyGPT.from_params(model.cfg, {**model.params, "wte": np.zeros((3, 3))})


def test_params_are_read_afresh():
    model = tiny_model(9)
    idx = np.array([[1, 2, 3]])
    before = model.forward(idx)[0]
    model.params["ln_f.b"] = model.params["ln_f.b"] + 1.0     # replaced entry
    assert not np.allclose(model.forward(idx)[0], before)


# ------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("vocab_size", 0), ("block_size", -1), ("n_layer", 0), ("n_head", 0),
                                          ("n_embd", 2.5), ("dtype", "float16"), ("init_std", 0.0),
                                          ("n_head", 3), ("init_std", float("inf")), ("init_std", 1e30),
                                          ("block_size", 10**12), ("vocab_size", 10**9)])
def test_config_validation_names_the_field(field, value):
    kw = {**TINY, field: value}
    with pytest.raises(ValueError, match=f"`{field}`"):
        GPTConfig(**kw)


def test_config_roundtrip():
    cfg = GPTConfig(**TINY)
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match=r"`gpt_config` has the unknown field\(s\) \['n_layers'\]"):
        GPTConfig.from_dict({**cfg.to_dict(), "n_layers": 2})       # was a TypeError from dataclass __init__
    with pytest.raises(ValueError, match="`gpt_config` must be a dict"):
        GPTConfig.from_dict([1, 2])
    stored = cfg.to_dict()
    del stored["dtype"]                        # was read as float32, the default, whatever the weights' dtype
    with pytest.raises(ValueError, match=r"`gpt_config` misses the field\(s\) \['dtype'\]"):
        GPTConfig.from_dict(stored)


def test_bad_inputs_name_the_argument():
    model = tiny_model()
    idx, targets, mask, am = batch()
    cases = [
        (dict(idx=np.where(idx == idx[0, 0], 11, idx)), "`idx`"),            # token id >= V
        (dict(idx=idx - 20), "`idx`"),                                        # negative id
        (dict(idx=np.zeros((3, 7), int), targets=np.zeros((3, 7), int), mask=np.ones((3, 7)),
              attn_mask=None), "`idx`"),                                      # T > block_size
        (dict(idx=idx.astype(float)), "`idx`"),                               # wrong dtype
        (dict(targets=targets[:, :5]), "`targets`"),                          # mismatched shapes
        (dict(targets=targets + 11), "`targets`"),
        (dict(mask=mask[:2]), "`mask`"),
        (dict(mask=mask * 2), "`mask`"),                                      # not 0/1
        (dict(attn_mask=am[:, :5]), "`attn_mask`"),
        (dict(attn_mask=am * 3), "`attn_mask`"),
        (dict(idx=idx[0]), "`idx`"),                                          # 1-D
    ]
    for change, name in cases:
        kw = dict(idx=idx, targets=targets, mask=mask, attn_mask=am)
        kw.update(change)
        with pytest.raises(ValueError, match=name):
            model.lm_loss_and_grads(kw["idx"], kw["targets"], kw["mask"], kw["attn_mask"])


def test_nan_parameter_is_named():
    model = tiny_model()
    idx, targets, mask, am = batch()
    model.params["h.1.mlp.c_fc.w"][2, 3] = np.nan
    for call in (lambda: model.lm_loss_and_grads(idx, targets, mask, am), lambda: model.forward(idx),
                 lambda: model.prefill(idx)):
        with pytest.raises(ValueError, match=r"h\.1\.mlp\.c_fc\.w.*finite"):
            call()


def test_wrong_parameter_dtype_is_named():
    model = tiny_model()
    model.params["wpe"] = model.params["wpe"].astype(np.float32)
    with pytest.raises(ValueError, match="wpe"):
        model.forward(np.array([[1, 2]]))


def test_kv_cache_take_keeps_the_filled_positions():
    """Mutation audit: ``KVCache.take`` (generation drops finished rows with it) must keep ``t``, the
    number of filled slots; a copy with ``t = 0`` decodes the next token as if the prompt were gone.
    After taking rows 0 and 2, decoding goes on to equal the full forward of those rows (float64, the
    tolerance of the other KV-cache tests)."""
    model = tiny_model(9, block_size=8)
    rng = np.random.default_rng(12)
    prompts = rng.integers(0, 11, (3, 3))
    prompt_mask = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1]])
    new = rng.integers(0, 11, (3, 2))
    full_mask = np.concatenate([prompt_mask, np.ones((3, 2), dtype=np.int64)], axis=1)
    full_logits, _, _ = model.forward(np.concatenate([prompts, new], axis=1), full_mask)
    _, kv = model.prefill(prompts, prompt_mask)
    model.decode_step(kv, new[:, 0])
    kept = np.array([0, 2])
    kv = kv.take(kept)
    assert kv.t == 4 and kv.k[0].shape[0] == 2
    logits = model.decode_step(kv, new[kept, 1])
    np.testing.assert_allclose(logits, full_logits[kept, 4], rtol=0, atol=1e-10)


def test_decoding_padding_into_a_row_without_real_tokens_stays_finite():
    """Mutation audit: a decoded token must attend to itself (``allowed[..., t] = True``) even when it
    is padding; without that, a padded token in a row with no real token so far (an all-padding prompt)
    has no key at all, its softmax is 0/0 = NaN, the NaN reaches the next layer's cached values, and
    ``0 * NaN`` poisons every later real token of the row. Compared with the full forward (float64,
    the tolerance of the other KV-cache tests)."""
    model = tiny_model(10, block_size=8)
    prompts = np.array([[3, 4], [0, 0]])
    prompt_mask = np.array([[1, 1], [0, 0]])                  # row 1: no real token in the prompt
    new = np.array([[5, 0], [6, 7]])
    new_mask = np.array([[1, 0], [0, 1]])                     # row 1 pads first, then a real token
    full_idx = np.concatenate([prompts, new], axis=1)
    full_mask = np.concatenate([prompt_mask, new_mask], axis=1)
    full_logits, _, _ = model.forward(full_idx, full_mask)
    _, kv = model.prefill(prompts, prompt_mask)
    for t in range(2):
        logits = model.decode_step(kv, new[:, t], attn_mask=new_mask[:, t])
        assert np.all(np.isfinite(logits))
        real = new_mask[:, t] == 1
        np.testing.assert_allclose(logits[real], full_logits[real, 2 + t], rtol=0, atol=1e-10)


def test_the_config_counts_the_parameters_of_its_model():
    """GPTConfig.num_params (the count MAX_PARAMS is checked against, and summary.json's for a reused SFT model)
    is the model's own count, for the tied LM head and both heads."""
    for kw in ({}, {"n_layer": 3, "vocab_size": 37}, {"n_embd": 24, "n_head": 3, "block_size": 5}):
        cfg = GPTConfig(**{**TINY, **kw})
        assert cfg.num_params() == TinyGPT(cfg, seed=0).num_params()
