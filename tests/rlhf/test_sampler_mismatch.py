"""The mismatched samplers of lesson 24: the rounding of the logits against an independent rounding, generation
bitwise unchanged with the option off (against a plain sampling loop written here), logp_sampler = log q of the
distribution actually sampled from, and the stale copy of a policy."""
import numpy as np
import pytest

from minippo.blas import single_blas_thread
from minippo.rl.losses import log_softmax
from minippo.rlhf.generate import (LOGIT_PRECISIONS, generate, round_logits, sample_from,
                                   sampling_distribution)
from minippo.rlhf.stale import StalePolicy
from tests.rlhf.test_generate import EOS, PAD, left_padded_prompts, make_model, reference_logp


def bf16_nearest(x: float, truncate: bool) -> float:
    """The bfloat16 value of the float32 ``x`` by its definition, in exact float64 arithmetic: the two
    neighbours with 8 significant bits around x, the nearer one (a tie: the one whose last kept bit is 0), or
    the one toward zero."""
    if x == 0 or not np.isfinite(x):
        return x
    e = np.floor(np.log2(abs(x)))
    ulp = 2.0 ** (e - 7)                                  # 8 significant bits: 1 + 7 stored
    down = np.trunc(x / ulp) * ulp                        # toward zero (exact: x has 24 bits)
    if truncate:
        return down
    up = down + np.sign(x) * ulp
    if abs(x - down) != abs(up - x):
        return down if abs(x - down) < abs(up - x) else up
    return down if int(abs(down) / ulp) % 2 == 0 else up  # tie: the even last bit


def test_bfloat16_rounding_against_its_definition():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(3000) * 10 ** rng.uniform(-3, 2, 3000),
                        [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1.0, 0.0, 30.7]]).astype(np.float32)
    for precision, truncate in (("bfloat16", False), ("bfloat16-truncate", True)):
        got = round_logits(x, precision)
        want = np.array([bf16_nearest(float(v), truncate) for v in x], np.float32)
        np.testing.assert_array_equal(got, want)
    assert round_logits(np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8]), "bfloat16").tolist() == [1.0, 1 + 2 ** -6]
    assert round_logits(np.float32([1.999]), "bfloat16-truncate")[0] == 1.9921875       # toward zero


def test_float16_rounding_and_dtypes():
    x = np.array([0.1, -3.3, 12.345], np.float64)
    np.testing.assert_array_equal(round_logits(x, "float16"), x.astype(np.float32).astype(np.float16))
    assert round_logits(x, "bfloat16").dtype == np.float64 and round_logits(x, None) is x
    # the rounding error of each precision is below half its unit in the last place (8 or 11 bits)
    for precision, bits in (("bfloat16", 8), ("float16", 11)):
        err = np.abs(round_logits(np.float32(x), precision) - np.float32(x)) / np.abs(x)
        assert (err <= 2.0 ** -bits).all()


def plain_sampling(model, ids, mask, max_new_tokens, rng, top_k=0, top_p=1.0):
    """Sampling from pi (or top-k / top-p of it) written without generate(): its tokens and log pi."""
    logits, kv = model.prefill(ids, mask)
    B = ids.shape[0]
    ended, tokens, logps = np.zeros(B, bool), [], []
    for t in range(max_new_tokens):
        logp_all = log_softmax(logits)
        q = sampling_distribution(logits, 1.0, top_k, top_p) if (top_k or top_p < 1) else np.exp(logp_all)
        token = sample_from(q, 1.0 - rng.random(B))
        tokens.append(np.where(ended, PAD, token))
        logps.append(np.where(ended, 0.0, logp_all[np.arange(B), token]))
        ended |= token == EOS
        if ended.all():
            break
        logits = model.decode_step(kv, np.where(ended, PAD, token), (~ended).astype(np.int8))
    return np.stack(tokens, 1), np.stack(logps, 1).astype(logits.dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trunc", [dict(), dict(top_k=4), dict(top_p=0.8)])
def test_option_off_is_bitwise_the_plain_sampler(dtype, trunc):
    model = make_model(dtype=dtype, seed=1)
    ids, mask = left_padded_prompts(12, [1, 3, 5, 2, 4, 5], np.random.default_rng(3))
    with single_blas_thread():                                    # one thread count for both: the same products
        gen = generate(model, ids, mask, max_new_tokens=12, rng=np.random.default_rng(7), eos_id=EOS, **trunc)
        tokens, logp = plain_sampling(model, ids, mask, 12, np.random.default_rng(7), **trunc)
    np.testing.assert_array_equal(gen.response, tokens)
    np.testing.assert_array_equal(gen.logp, logp)
    if not trunc:
        np.testing.assert_array_equal(gen.logp_sampler, gen.logp)    # q = pi: the same array
    again = generate(model, ids, mask, max_new_tokens=12, rng=np.random.default_rng(7), eos_id=EOS,
                     logits_precision=None, **trunc)
    for field in ("response", "response_mask", "logp", "logp_sampler", "sequences", "attn_mask", "ended"):
        np.testing.assert_array_equal(getattr(gen, field), getattr(again, field))


@pytest.mark.parametrize("precision", LOGIT_PRECISIONS)
@pytest.mark.parametrize("trunc", [dict(), dict(top_p=0.8)])
def test_logp_sampler_is_log_q_and_logp_is_log_pi(precision, trunc):
    model = make_model(dtype="float32", seed=1)
    ids, mask = left_padded_prompts(12, [1, 3, 5, 2, 4, 5, 2, 3], np.random.default_rng(3))
    gen = generate(model, ids, mask, max_new_tokens=12, rng=np.random.default_rng(7), eos_id=EOS,
                   logits_precision=precision, **trunc)
    ref, z = reference_logp(model, gen, 1.0)                      # log pi from a full forward pass
    m = gen.response_mask == 1
    # float32, a different sequence of products (KV cache vs full forward): 1e-5 of a log-prob of order 10
    np.testing.assert_allclose(gen.logp[m], ref[m], atol=1e-5, rtol=0)
    q = sampling_distribution(round_logits(z.reshape(-1, z.shape[-1]), precision), 1.0, **trunc).reshape(z.shape)
    with np.errstate(divide="ignore"):                            # padding: the pad token may have q = 0
        logq = np.log(np.take_along_axis(q, gen.response[..., None], axis=-1)[..., 0])
    np.testing.assert_allclose(gen.logp_sampler[m], logq[m], atol=1e-4, rtol=0)   # rounding may move an ulp
    assert (gen.logp_sampler[~m] == 0).all()
    assert np.abs(gen.logp_sampler - gen.logp)[m].max() > 1e-4    # the sampler really differs from pi


def test_rounded_sampler_draws_from_q():
    """One state, many draws: the token frequencies of the bf16 sampler are q's, not pi's, where the two differ
    by more than the sampling noise."""
    logits = np.float32([[20.02, 20.0, 19.3, 18.0]])                  # bf16 spacing 0.125 here: 20.02 -> 20.0
    q = sampling_distribution(round_logits(logits, "bfloat16-truncate"), 1.0)[0]
    pi = np.exp(log_softmax(logits))[0]
    rng = np.random.default_rng(0)
    n = 200_000
    probs = np.repeat(sampling_distribution(round_logits(logits, "bfloat16-truncate"), 1.0), n, axis=0)
    freq = np.bincount(sample_from(probs, 1.0 - rng.random(n)), minlength=4) / n
    se = np.sqrt(q * (1 - q) / n)
    assert (np.abs(freq - q) < 5 * se).all() and (np.abs(freq - pi) > 5 * se).any()


def test_bad_precision_is_refused():
    model = make_model()
    ids, mask = left_padded_prompts(12, [2], np.random.default_rng(0))
    with pytest.raises(ValueError, match="`logits_precision`"):
        generate(model, ids, mask, max_new_tokens=3, rng=np.random.default_rng(0), eos_id=EOS,
                 logits_precision="fp8")


def test_stale_policy_lags_k_updates():
    stale = StalePolicy(2)
    with pytest.raises(ValueError, match="no version"):
        stale.sampler
    theta = np.zeros(3)
    versions = []
    for n in range(5):
        stale.push(theta)
        versions.append(theta.copy())
        assert stale.lag == min(n, 2)
        np.testing.assert_array_equal(stale.sampler, versions[max(0, n - 2)])
        theta += 1.0                                              # an in-place update never reaches the copies
    model = make_model()
    on_policy = StalePolicy(0)
    on_policy.push(model)
    assert on_policy.lag == 0 and on_policy.sampler is not model
    np.testing.assert_array_equal(on_policy.sampler.params["wte"], model.params["wte"])
    with pytest.raises(ValueError, match="`k`"):
        StalePolicy(-1)
    with pytest.raises(ValueError, match="`policy`"):
        stale.push(3)
