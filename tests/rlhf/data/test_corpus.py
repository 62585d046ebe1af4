"""The synthetic corpus: determinism, format, length limits, sentiment balance, prompts."""
import random

import numpy as np
import pytest

from minippo.rlhf.data.corpus import (LEXICON, MAX_WORDS, MIN_WORDS, NEGATIONS, INTENSIFIERS, POLARITY, PROMPTS,
                                 count_words, generate_corpus, iter_corpus, sample_prompts)
from minippo.rlhf.data.gold import gold_breakdown, gold_scores


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(20000, seed=0)      # the size the pipeline uses (speed is in `minippo bench`)


def test_same_seed_same_text_and_prefix_property():
    a = generate_corpus(500, seed=7)
    assert a == generate_corpus(500, seed=7)
    assert a != generate_corpus(500, seed=8)
    assert list(iter_corpus(200, 7)) == a[:200]
    # a np.random.Generator seeds the same way every time it is in the same state
    assert generate_corpus(50, np.random.default_rng(3)) == generate_corpus(50, np.random.default_rng(3))


def test_global_random_state_untouched():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    generate_corpus(100, seed=1)
    sample_prompts(10, seed=1)
    assert random.random() == expected


def test_format_lengths_and_vocabulary(corpus):
    lengths = []
    for s in corpus:
        toks = s.split(" ")
        assert s == s.strip().lower() and "" not in toks, s          # single spaces, lower case
        assert toks[-1] == "." and toks.count(".") == 1, s             # exactly one final period
        assert all(t in LEXICON for t in toks), s                     # only lexicon words
        lengths.append(count_words(toks))
    assert min(lengths) >= MIN_WORDS and max(lengths) <= MAX_WORDS
    assert 8 <= np.mean(lengths) <= 12                                 # short sentences, some compounds
    used = {t for s in corpus for t in s.split()}
    assert 200 <= len(used) <= len(LEXICON) <= 400                     # a few hundred words
    assert len(set(corpus)) > 0.9 * len(corpus)                        # hardly any duplicates


def test_every_corpus_sentence_has_zero_penalty(corpus):
    for s in corpus[:5000] + generate_corpus(2000, seed=99):
        b = gold_breakdown(s)
        assert b["penalty"] == 0.0, (s, {k: v for k, v in b.items() if v})


def test_sentiment_mix_is_balanced(corpus):
    g = gold_scores(corpus)
    pos, neg = np.mean(g > 0.1), np.mean(g < -0.1)
    assert 0.40 <= pos <= 0.55 and 0.40 <= neg <= 0.55, (pos, neg)
    assert 0.02 <= 1 - pos - neg <= 0.15                               # mixed and neutral ones
    assert abs(g.mean()) < 0.1 and g.std() > 0.6                       # room for PPO to improve


def test_negation_and_intensifiers_are_common(corpus):
    words = [set(s.split()) for s in corpus]
    negated = np.mean([bool(w & set(NEGATIONS)) for w in words])
    intensified = np.mean([bool(w & set(INTENSIFIERS)) for w in words])
    assert 0.15 <= negated <= 0.4 and 0.3 <= intensified <= 0.6
    # negation is used in both directions: "not good" (negative) and "not bad" (positive)
    g = gold_scores(corpus)
    neg_rows = np.array([bool(w & set(NEGATIONS)) for w in words])
    assert np.mean(g[neg_rows] > 0) > 0.15 and np.mean(g[neg_rows] < 0) > 0.15


def test_prompts_are_sentiment_free_openings_with_both_continuations(corpus):
    g = gold_scores(corpus)
    for p in PROMPTS:
        toks = p.split(" ")
        assert 2 <= count_words(toks) <= 4, p
        assert all(t in LEXICON and t not in POLARITY and t not in NEGATIONS and t not in INTENSIFIERS
                   for t in toks), p
        rows = [i for i, s in enumerate(corpus) if s.startswith(p + " ")]
        assert len(rows) >= 20, (p, len(rows))                         # the SFT model has seen it
        pos = np.mean(g[rows] > 0)
        assert 0.25 <= pos <= 0.75, (p, pos)                           # the opening does not decide


def test_sample_prompts():
    a = sample_prompts(300, seed=4)
    assert a == sample_prompts(300, seed=4) and set(a) <= set(PROMPTS)
    assert len(set(a)) > len(PROMPTS) // 2
    assert sample_prompts(0, seed=4) == []
    assert sample_prompts(5, np.random.default_rng(0)) == sample_prompts(5, np.random.default_rng(0))


@pytest.mark.parametrize("bad", [-1, 2.5, "3", None])
def test_bad_arguments(bad):
    with pytest.raises(ValueError, match="`n`"):
        generate_corpus(bad, seed=0)
    with pytest.raises(ValueError, match="`n`"):
        iter_corpus(bad, seed=0)                                       # raised at the call, not later
    with pytest.raises(ValueError, match="`n`"):
        sample_prompts(bad, seed=0)
    with pytest.raises(ValueError, match="`seed`"):
        generate_corpus(3, seed=bad if bad != 2.5 else -5)


def test_empty_corpus():
    assert generate_corpus(0, seed=0) == []
