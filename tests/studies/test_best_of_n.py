"""minippo.studies.best_of_n: the KL formula, the all-subsets estimator, a perfect RM, determinism, bad input."""
import itertools
import math

import numpy as np
import pytest

from minippo.studies.best_of_n import (Candidates, best_of_n, bon_curves, bon_kl, bon_weights, default_ns,
                                    sample_candidates, select_best)
from minippo.rlhf.generate import encode_prompts
from minippo.studies.study import Study


@pytest.fixture(scope="module")
def study():
    return Study(quick=True, seed=0, n_eval=8)


def exact_bon_kl_uniform(M: int, n: int) -> float:
    """KL(best-of-n || pi) for pi uniform over M responses with distinct scores, from the exact best-of-n
    distribution: the response of rank j (1 = worst) is chosen with P = (j/M)^n - ((j-1)/M)^n."""
    j = np.arange(1, M + 1, dtype=np.float64)
    p = (j / M) ** n - ((j - 1) / M) ** n
    p = p[p > 0]
    return float(np.sum(p * np.log(p * M)))


def test_bon_kl_formula():
    assert bon_kl(1) == 0.0
    assert bon_kl(2) == pytest.approx(math.log(2) - 0.5, abs=1e-15)
    assert bon_kl(np.array([256])) == pytest.approx(math.log(256) - 255 / 256, abs=1e-12)
    assert np.all(np.diff(bon_kl(np.arange(1, 2000))) > 0)                  # increasing in n
    for n in (2, 4, 16, 64):
        # a policy with many distinct responses: the exact KL tends to the formula ...
        assert exact_bon_kl_uniform(200_000, n) == pytest.approx(float(bon_kl(n)), abs=2e-3)
        # ... and with few responses the formula is an upper bound (Beirami et al. 2024)
        for M in (2, 5, 30):
            assert exact_bon_kl_uniform(M, n) <= bon_kl(n) + 1e-12


def test_bon_weights_are_subset_frequencies():
    N = 7
    for n in range(1, N + 1):
        w = bon_weights(N, n)
        # brute force: how often the candidate of ascending rank j is the maximum of an n-subset
        count = np.zeros(N)
        for sub in itertools.combinations(range(N), n):
            count[max(sub)] += 1
        np.testing.assert_allclose(w, count / math.comb(N, n), rtol=1e-12, atol=1e-15)
        assert w.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.isfinite(bon_weights(4096, 2048)).all() and bon_weights(4096, 2048).sum() == pytest.approx(1.0)


def test_subsets_estimator_equals_the_average_over_all_subsets_with_ties():
    rng = np.random.default_rng(0)
    P, N = 5, 7
    proxy = rng.integers(0, 3, size=(P, N)).astype(float)          # many ties
    values = rng.normal(size=(P, N))
    ns = np.arange(1, N + 1)
    got = bon_curves(proxy, values, ns, "subsets")
    for p in range(P):
        for k, n in enumerate(ns):
            # the best of a subset by proxy, ties to the earlier candidate (as np.argmax)
            picks = [values[p, sub[int(np.argmax(proxy[p, list(sub)]))]] for sub in itertools.combinations(range(N), n)]
            assert got[p, k] == pytest.approx(np.mean(picks), abs=1e-12)
    first = bon_curves(proxy, values, ns, "first")
    np.testing.assert_array_equal(first[:, -1], got[:, -1])       # n = N: both are the best of all
    np.testing.assert_allclose(got[:, 0], values.mean(axis=1))     # n = 1: the mean candidate


def test_both_estimators_are_unbiased_for_the_expected_maximum():
    # proxy = values ~ N(0, 1): E[max of 2] = 1 / sqrt(pi), E[max of 4] = 1.0294 (tabulated)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20_000, 8))
    for est in ("subsets", "first"):
        got = bon_curves(x, x, [1, 2, 4], est).mean(axis=0)
        assert got == pytest.approx([0.0, 1 / math.sqrt(math.pi), 1.0294], abs=0.03)


@pytest.mark.slow      # a study run of the quick stages
def test_perfect_reward_model_never_loses_gold(study):
    cands = sample_candidates(study.sft, study.tokenizer, study.prompts[:6], 16, np.random.default_rng(3),
                              max_new_tokens=16)
    for est in ("subsets", "first"):
        r = select_best(cands, "gold", estimator=est)
        assert np.all(np.diff(r["gold_per_prompt"], axis=1) >= -1e-12)       # every prompt, every n
        np.testing.assert_array_equal(r["gold"], r["rm"])
    # an anti-gold scorer picks worse and worse texts
    anti = select_best(cands, _Scorer(-cands.gold))
    assert np.all(np.diff(anti["gold"]) <= 1e-12) and anti["gold"][-1] < anti["gold"][0]


class _Scorer:
    """A stand-in reward model returning fixed scores (P, N) for the candidates in row order."""

    def __init__(self, scores):
        self.scores = np.asarray(scores, dtype=np.float64)

    def score(self, sequences, attn_mask):
        assert len(sequences) == self.scores.size
        return self.scores.ravel()


def test_best_of_n_with_the_reward_model_is_deterministic_and_consistent(study):
    kw = dict(n=8, max_new_tokens=16)
    a = best_of_n(study.sft, study.reward_model, study.tokenizer, study.prompts[:4], rng=np.random.default_rng(5), **kw)
    b = best_of_n(study.sft, study.reward_model, study.tokenizer, study.prompts[:4], rng=np.random.default_rng(5), **kw)
    c = best_of_n(study.sft, study.reward_model, study.tokenizer, study.prompts[:4], rng=np.random.default_rng(6), **kw)
    assert a["candidates"].texts == b["candidates"].texts and np.array_equal(a["gold"], b["gold"])
    assert a["candidates"].texts != c["candidates"].texts
    np.testing.assert_array_equal(a["ns"], [1, 2, 4, 8])
    np.testing.assert_allclose(a["kl"], bon_kl(a["ns"]))
    assert np.all(np.diff(a["rm"]) >= -1e-12)                              # E[max proxy] grows with n
    # the selected text of n = 8 is the proxy-best candidate; candidates belong to their prompt
    cands = a["candidates"]
    for p in range(4):
        i = int(np.argmax(a["proxy"][p]))
        assert a["selected_texts"][8][p] == cands.text(p, i)
        prompt_text = study.tokenizer.decode_batch(encode_prompts(study.tokenizer, [study.prompts[p]])[0])[0]
        assert all(cands.text(p, j).startswith(prompt_text) for j in range(8))


def test_scores_do_not_depend_on_the_padding_of_the_batches(study):
    # batches of different widths are padded to one array: each row must score as it does alone
    cands = sample_candidates(study.sft, study.tokenizer, study.prompts[:3], 4, np.random.default_rng(2),
                              max_new_tokens=16, batch_size=5)
    together = study.reward_model.score(cands.sequences, cands.attn_mask)
    for b in range(cands.sequences.shape[0]):
        keep = cands.attn_mask[b] == 1
        alone = study.reward_model.score(cands.sequences[b][keep][None, :], np.ones((1, keep.sum()), dtype=np.int64))
        # other shapes (one row: a matrix-vector product), so float32 rounding, not bitwise: eps32 * (4L + 2) *
        # sqrt(4C) * max(1, |score|) = 1.19e-7 * 6 * 16 * 3.5 ~ 4e-5 for the quick RM (L 1, C 64, scores < 3.5);
        # measured 5e-7 (SkylakeX) / 7e-7 (Haswell)
        assert together[b] == pytest.approx(alone[0], rel=1e-4, abs=1e-4)


def test_default_ns():
    np.testing.assert_array_equal(default_ns(1), [1])
    np.testing.assert_array_equal(default_ns(16), [1, 2, 4, 8, 16])
    np.testing.assert_array_equal(default_ns(12), [1, 2, 4, 8, 12])


def test_bad_input(study):
    with pytest.raises(ValueError, match="`n`"):
        bon_kl(0)
    with pytest.raises(ValueError, match="`n`"):
        bon_weights(4, 5)
    with pytest.raises(ValueError, match="`estimator`"):
        bon_curves(np.zeros((2, 3)), np.zeros((2, 3)), [1], "best")
    with pytest.raises(ValueError, match="`ns`"):
        bon_curves(np.zeros((2, 3)), np.zeros((2, 3)), [1, 4])
    with pytest.raises(ValueError, match="`values`"):
        bon_curves(np.zeros((2, 3)), np.zeros((2, 4)), [1])
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="`prompts`"):
        best_of_n(study.sft, study.reward_model, study.tokenizer, "a prompt", 4, rng)
    with pytest.raises(ValueError, match="`n`"):
        best_of_n(study.sft, study.reward_model, study.tokenizer, ["the film"], 0, rng)
    with pytest.raises(ValueError, match="`reward_model`"):
        best_of_n(study.sft, object(), study.tokenizer, ["the film"], 2, rng)
    with pytest.raises(ValueError, match="`reward_model`"):
        best_of_n(study.sft, "human", study.tokenizer, ["the film"], 2, rng)
    with pytest.raises(ValueError, match="`rng`"):
        sample_candidates(study.sft, study.tokenizer, ["the film"], 2, 0)
    assert isinstance(sample_candidates(study.sft, study.tokenizer, ["the film"], 2, rng, max_new_tokens=4), Candidates)
