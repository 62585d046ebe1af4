"""Generation with a KV cache: log-probs equal a full forward pass, EOS/padding, determinism, validation."""
import numpy as np
import pytest

from minippo.nn.gpt import GPTConfig, KVCache, TinyGPT
from minippo.rlhf.generate import Generation, generate, join_generations, sample_from, sampling_distribution
from tests.helpers import with_kernels

EOS, PAD = 2, 0


def make_model(V=12, block_size=32, dtype="float64", seed=0):
    # a large init_std makes the distributions peaked, so temperature and top-k really change them
    cfg = GPTConfig(vocab_size=V, block_size=block_size, n_layer=2, n_head=2, n_embd=16, dtype=dtype, init_std=0.5)
    return TinyGPT(cfg, seed=seed)


def left_padded_prompts(V, lengths, rng):
    """Prompts of different lengths, left-padded with PAD, real tokens drawn from [3, V)."""
    Tp = max(lengths)
    ids = np.full((len(lengths), Tp), PAD, dtype=np.int64)
    mask = np.zeros((len(lengths), Tp), dtype=np.int64)
    for b, n in enumerate(lengths):
        ids[b, Tp - n:] = rng.integers(3, V, n)
        mask[b, Tp - n:] = 1
    return ids, mask


def reference_logp(model, gen: Generation, temperature):
    """log softmax(logits / T) of a full forward pass, gathered at the response tokens (independent of the cache)."""
    logits, _, _ = model.forward(gen.sequences, gen.attn_mask)             # (B, Tp + Tn, V)
    Tp, Tn = gen.prompt_len, gen.response.shape[1]
    z = logits[:, Tp - 1:Tp - 1 + Tn] / temperature                         # position Tp-1+t predicts token t
    zmax = z.max(axis=-1, keepdims=True)
    logq = z - zmax - np.log(np.exp(z - zmax).sum(axis=-1, keepdims=True))
    return np.take_along_axis(logq, gen.response[..., None], axis=-1)[..., 0], z


@pytest.mark.parametrize("temperature", [0.6, 1.0, 1.7])
@pytest.mark.parametrize("top_k", [0, 4])
def test_logp_equals_full_forward_pass(temperature, top_k):
    model = make_model(seed=1)                                     # a seed whose EOS is fairly likely
    rng = np.random.default_rng(1)
    ids, mask = left_padded_prompts(12, [1, 3, 5, 2, 4, 5, 1, 2, 3, 4], rng)
    gen = generate(model, ids, mask, max_new_tokens=16, rng=rng, temperature=temperature, top_k=top_k, eos_id=EOS)
    ref, z = reference_logp(model, gen, temperature)
    m = gen.response_mask == 1
    assert 0 < gen.ended.sum() < len(ids) and (~m).sum() > 0      # some rows ended early (padding), some did not
    np.testing.assert_allclose(gen.logp[m], ref[m], rtol=0, atol=1e-9)
    assert np.all(gen.logp[~m] == 0)
    if top_k:
        # sampled from the truncated distribution: every token is among the k largest logits ...
        rank = (z > np.take_along_axis(z, gen.response[..., None], axis=-1)).sum(axis=-1)   # tokens above it
        assert np.all(rank[m] < top_k)
        # ... but logp is the full softmax: strictly below log q = logp + log(1 / kept mass)
        assert np.all(gen.logp[m] < 0)


def test_logp_with_top_p_is_the_full_softmax():
    model = make_model()
    rng = np.random.default_rng(2)
    ids, mask = left_padded_prompts(12, [2, 4, 1], rng)
    gen = generate(model, ids, mask, max_new_tokens=8, rng=rng, temperature=0.9, top_p=0.5, eos_id=EOS)
    ref, _ = reference_logp(model, gen, 0.9)
    m = gen.response_mask == 1
    np.testing.assert_allclose(gen.logp[m], ref[m], rtol=0, atol=1e-9)


def test_float32_model_matches_forward_to_float32_precision():
    model = make_model(dtype="float32")
    rng = np.random.default_rng(3)
    ids, mask = left_padded_prompts(12, [3, 1, 4], rng)
    gen = generate(model, ids, mask, max_new_tokens=10, rng=rng, eos_id=EOS)
    assert gen.logp.dtype == np.float32
    ref, _ = reference_logp(model, gen, 1.0)
    m = gen.response_mask == 1
    np.testing.assert_allclose(gen.logp[m], ref[m], atol=2e-4)


def check_layout(gen: Generation, max_new_tokens):
    """EOS ends a row, pad after it, the mask includes the EOS; shapes and concatenations."""
    B, Tn = gen.response.shape
    assert Tn <= max_new_tokens
    for b in range(B):
        n = int(gen.response_mask[b].sum())
        assert np.all(gen.response_mask[b, :n] == 1) and np.all(gen.response_mask[b, n:] == 0)
        assert np.all(gen.response[b, n:] == PAD) and np.all(gen.logp[b, n:] == 0)
        eos_at = np.flatnonzero(gen.response[b, :n] == EOS)
        if gen.ended[b]:
            assert eos_at.tolist() == [n - 1]                      # exactly one EOS, the last valid token
        else:
            assert eos_at.size == 0 and n == Tn == max_new_tokens
    Tp = gen.prompt_len
    assert gen.sequences.shape == gen.attn_mask.shape == (B, Tp + Tn)
    np.testing.assert_array_equal(gen.sequences[:, Tp:], gen.response)
    np.testing.assert_array_equal(gen.attn_mask[:, Tp:], gen.response_mask)
    np.testing.assert_array_equal(gen.lengths, gen.response_mask.sum(axis=1))


def test_stops_when_every_row_has_ended():
    model = make_model(V=6, block_size=64)                         # EOS is 1 token in 6: every row ends soon
    rng = np.random.default_rng(4)
    ids, mask = left_padded_prompts(6, [1, 2, 3, 1, 2], rng)
    gen = generate(model, ids, mask, max_new_tokens=60, rng=rng, eos_id=EOS)
    check_layout(gen, 60)
    assert gen.ended.all()
    assert gen.response.shape[1] < 60                              # stopped early ...
    assert gen.response.shape[1] == gen.lengths.max()              # ... right after the last EOS
    np.testing.assert_array_equal(gen.sequences[:, :ids.shape[1]], ids)
    np.testing.assert_array_equal(gen.attn_mask[:, :ids.shape[1]], mask)


def test_finished_rows_leave_the_cache_and_nothing_else_changes(monkeypatch):
    """With more than MIN_ROWS rows, generation drops finished rows from the KV cache; the samples are those of
    a run that keeps every row (same tokens; log-probs equal to float64 rounding: the matrix products run over
    fewer rows) and the log-probs still equal a full forward pass."""
    from minippo.rlhf import generate as gen_module
    model = make_model(V=6, block_size=48, seed=1)                 # EOS is 1 token in 6: rows end at many steps
    ids, mask = left_padded_prompts(6, [1, 2, 3, 4] * 12, np.random.default_rng(9))
    dropped, take = [], KVCache.take
    monkeypatch.setattr(KVCache, "take", lambda kv, rows: dropped.append(rows) or take(kv, rows))
    gen = generate(model, ids, mask, max_new_tokens=40, rng=np.random.default_rng(10), eos_id=EOS)
    assert len(dropped) >= 2 and gen.ended.all()                   # the cache shrank more than once
    assert min(int(r.sum()) for r in dropped) >= gen_module.MIN_ROWS
    ref, _ = reference_logp(model, gen, 1.0)
    m = gen.response_mask == 1
    np.testing.assert_allclose(gen.logp[m], ref[m], rtol=0, atol=1e-9)
    monkeypatch.setattr(gen_module, "MIN_ROWS", 10 ** 9)           # never drop a row
    keep = generate(model, ids, mask, max_new_tokens=40, rng=np.random.default_rng(10), eos_id=EOS)
    np.testing.assert_array_equal(gen.response, keep.response)
    np.testing.assert_array_equal(gen.response_mask, keep.response_mask)
    np.testing.assert_allclose(gen.logp, keep.logp, rtol=0, atol=1e-12)


def test_max_new_tokens_is_respected():
    model = make_model(V=40)
    rng = np.random.default_rng(5)
    ids, mask = left_padded_prompts(40, [2, 3, 1, 3] * 4, rng)
    gen = generate(model, ids, mask, max_new_tokens=5, rng=rng, eos_id=EOS)
    check_layout(gen, 5)
    assert not gen.ended.all() and gen.response.shape[1] == 5


def test_an_eos_prompt_token_does_not_end_the_row():
    model = make_model(V=40)
    ids = np.array([[1, EOS]])                                     # EOS inside the prompt: only responses end
    gen = generate(model, ids, np.ones_like(ids), max_new_tokens=4, rng=np.random.default_rng(0), eos_id=EOS)
    assert gen.response_mask[0, 0] == 1


def test_same_seed_same_samples():
    model = make_model(V=40)
    ids, mask = left_padded_prompts(40, [1, 4, 2], np.random.default_rng(6))
    a = generate(model, ids, mask, max_new_tokens=10, rng=np.random.default_rng(7), eos_id=EOS, top_p=0.9)
    b = generate(model, ids, mask, max_new_tokens=10, rng=np.random.default_rng(7), eos_id=EOS, top_p=0.9)
    c = generate(model, ids, mask, max_new_tokens=10, rng=np.random.default_rng(8), eos_id=EOS, top_p=0.9)
    np.testing.assert_array_equal(a.response, b.response)
    np.testing.assert_array_equal(a.logp, b.logp)
    assert not np.array_equal(a.response, c.response)


def test_sampling_distribution_top_k_and_top_p():
    logits = np.log(np.array([[0.4, 0.25, 0.2, 0.1, 0.05]]))
    np.testing.assert_allclose(sampling_distribution(logits), [[0.4, 0.25, 0.2, 0.1, 0.05]])
    np.testing.assert_allclose(sampling_distribution(logits, top_k=2), [[0.4 / 0.65, 0.25 / 0.65, 0, 0, 0]])
    # nucleus 0.6: 0.4 < 0.6 so 0.25 is added (mass before it 0.4 < 0.6), then the mass before 0.2 is 0.65 >= 0.6
    np.testing.assert_allclose(sampling_distribution(logits, top_p=0.6), [[0.4 / 0.65, 0.25 / 0.65, 0, 0, 0]])
    np.testing.assert_allclose(sampling_distribution(logits, top_p=0.3), [[1, 0, 0, 0, 0]])
    # top-k first, then the nucleus over the renormalised survivors
    np.testing.assert_allclose(sampling_distribution(logits, top_k=3, top_p=0.7),
                               [[0.4 / 0.65, 0.25 / 0.65, 0, 0, 0]])
    # temperature: softmax(logits / T)
    q = sampling_distribution(logits, temperature=2.0)
    p = np.sqrt([0.4, 0.25, 0.2, 0.1, 0.05])
    np.testing.assert_allclose(q, [p / p.sum()])


def test_top_p_stops_at_the_first_prefix_whose_mass_reaches_it_exactly():
    """The nucleus is the smallest prefix whose mass REACHES top_p (>=): logits (0, 0) give (0.5, 0.5)
    exactly (x / 2x is exact in float64), and top_p = 0.5 is reached by the first token alone, so the
    distribution is (1, 0), bit for bit. Catches > for >= (a token whose mass before it equals top_p kept)."""
    np.testing.assert_array_equal(sampling_distribution(np.zeros((1, 2)), top_p=0.5), [[1.0, 0.0]])


def test_join_drops_the_unused_left_padding_of_the_prompts():
    """join_generations, hand-worked: rows 0 and 1 of a batch with 3 prompt columns (real prompts of 1 and 2
    tokens) joined with a batch of 2 prompt columns: the joined prompts have 2 columns, each row's LAST
    columns (left padding: the unused column that goes is the first), the responses right-padded to the
    longest kept. Integers: compared exactly. Catches the left-padded prompts cut on the wrong side."""
    def gen(prompt, pmask, response, rmask):
        prompt, pmask, response, rmask = map(np.array, (prompt, pmask, response, rmask))
        z = np.zeros(response.shape)
        return Generation(response=response, response_mask=rmask, logp=z, logp_sampler=z,
                          sequences=np.concatenate([prompt, response], axis=1),
                          attn_mask=np.concatenate([pmask, rmask], axis=1),
                          ended=np.ones(len(prompt), bool), prompt_len=prompt.shape[1])

    a = gen([[0, 0, 5], [0, 6, 7], [8, 9, 4]], [[0, 0, 1], [0, 1, 1], [1, 1, 1]],
            [[10, 2], [11, 0], [12, 13]], [[1, 1], [1, 0], [1, 1]])
    b = gen([[5, 6]], [[1, 1]], [[3]], [[1]])
    joined = join_generations([(a, [0, 1]), (b, [0])], pad_id=0)
    assert joined.prompt_len == 2
    np.testing.assert_array_equal(joined.sequences, [[0, 5, 10, 2], [6, 7, 11, 0], [5, 6, 3, 0]])
    np.testing.assert_array_equal(joined.attn_mask, [[0, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]])


def test_inverse_cdf_sampling_frequencies():
    probs = np.array([0.5, 0.0, 0.3, 0.15, 0.05])
    rng = np.random.default_rng(9)
    n = 40_000
    tokens = sample_from(np.tile(probs, (n, 1)), 1.0 - rng.random(n))
    freq = np.bincount(tokens, minlength=5) / n
    assert freq[1] == 0                                            # probability 0 is never drawn
    assert np.all(np.abs(freq - probs) < 4 * np.sqrt(probs * (1 - probs) / n) + 1e-12)
    # the edges of (0, 1]: u = 1 gives the last token with probability > 0, tiny u the first
    np.testing.assert_array_equal(sample_from(np.array([[0.5, 0.5, 0.0]] * 2), np.array([1.0, 1e-12])), [1, 0])


@pytest.mark.kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sampling_kernel_matches_its_numpy_formula(dtype):
    rng = np.random.default_rng(11)
    probs = rng.random((300, 50)) ** 3
    probs[rng.random(probs.shape) < 0.5] = 0.0                     # truncated rows (top-k / top-p) ...
    probs[:, 0] += 1e-3                                            # ... with at least one token left
    probs = (probs / probs.sum(axis=1, keepdims=True)).astype(dtype)
    u = 1.0 - rng.random(300)
    u[:3] = [1.0, 1e-300, 0.5]
    np.testing.assert_array_equal(with_kernels(sample_from, True)(probs, u), with_kernels(sample_from, False)(probs, u))
    assert np.all(probs[np.arange(300), sample_from(probs, u)] > 0)


def test_top_k_1_is_greedy():
    model = make_model(V=40)
    ids, mask = left_padded_prompts(40, [2, 3, 1], np.random.default_rng(10))
    gen = generate(model, ids, mask, max_new_tokens=6, rng=np.random.default_rng(0), eos_id=EOS, top_k=1)
    logits, _, _ = model.forward(gen.sequences, gen.attn_mask)
    Tp = gen.prompt_len
    z = logits[:, Tp - 1:-1]                                        # (B, Tn, V) the full forward's logits
    greedy = z.argmax(axis=-1)                                      # (B, Tn)
    m = gen.response_mask == 1
    # the KV cache and the full forward agree to 1e-10 in float64 (other shapes: rounding, not bitwise), so their
    # argmax can only differ at a near-tie; every position here has a clear winner, so the argmax is the same
    top2 = np.sort(z, axis=-1)[..., -2:]
    assert np.all((top2[..., 1] - top2[..., 0])[m] > 1e-8)
    np.testing.assert_array_equal(gen.response[m], greedy[m])


@pytest.mark.parametrize("kwargs, name", [
    (dict(temperature=0.0), "temperature"), (dict(temperature=-1.0), "temperature"),
    (dict(top_k=-1), "top_k"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(max_new_tokens=30), "prompt_ids"),
    (dict(rng=None), "rng"), (dict(eos_id=12), "eos_id"), (dict(pad_id=-1), "pad_id"),
])
def test_bad_arguments_raise_naming_them(kwargs, name):
    model = make_model()
    ids, mask = left_padded_prompts(12, [2, 3], np.random.default_rng(0))
    args = dict(max_new_tokens=4, rng=np.random.default_rng(0), eos_id=EOS)
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"`{name}`"):
        generate(model, ids, mask, **args)


def test_bad_prompts_raise_naming_them():
    model = make_model()
    kw = dict(max_new_tokens=4, rng=np.random.default_rng(0), eos_id=EOS)
    ids = np.array([[5, 6, PAD], [4, 5, 6]])
    right_padded = np.array([[1, 1, 0], [1, 1, 1]])
    with pytest.raises(ValueError, match="`prompt_mask`.*left"):
        generate(model, ids, right_padded, **kw)
    with pytest.raises(ValueError, match="`prompt_mask` row 0 has no real token"):
        generate(model, ids, np.array([[0, 0, 0], [1, 1, 1]]), **kw)
    with pytest.raises(ValueError, match="`prompt_ids`"):
        generate(model, np.array([[5, 99]]), np.ones((1, 2)), **kw)
    with pytest.raises(ValueError, match="`prompt_mask`"):
        generate(model, ids, np.ones((2, 2)), **kw)
    with pytest.raises(ValueError, match="`model`"):
        generate(object(), ids, np.ones_like(ids), **kw)
