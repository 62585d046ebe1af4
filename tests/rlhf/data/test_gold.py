"""The simulated human: sentiment rules, every penalty with its documented magnitude, and the two
properties later stages need (learnable by a Bradley-Terry model; degenerate text is caught)."""
import math

import numpy as np
import pytest

from minippo.rlhf.data.corpus import LEXICON, generate_corpus
from minippo.rlhf.data.gold import (MAX_PENALTY, PENALTIES, SENTIMENT_SCALE, gold_breakdown, gold_score,
                               gold_scores, tokenize_words)


def raw(text):
    return gold_breakdown(text)["raw"]


def test_positive_above_neutral_above_negative():
    pos = gold_score("the film was very good .")
    neutral = gold_score("the film was very long .")
    neg = gold_score("the film was very bad .")
    assert pos > 0.5 and neutral == 0.0 and neg < -0.5
    assert gold_score("the film was truly brilliant .") > gold_score("the film was decent .") > 0


def test_sentiment_formula_and_word_values():
    # raw = sum of v(w); sentiment = tanh(raw / 1.5)
    assert raw("the film was good .") == 1.0
    assert raw("the film was great but the plot was boring .") == 1.5 - 1.0
    assert raw("the film was decent and i loved the music .") == 0.5 + 1.5
    b = gold_breakdown("the film was great but the plot was boring .")
    assert b["sentiment"] == math.tanh(0.5 / SENTIMENT_SCALE) and b["gold"] == b["sentiment"]


def test_negation_flips_and_dampens():
    assert raw("the film was not good .") == -0.75                      # -0.75 * p
    assert raw("the film was not bad .") == 0.5                          # -0.5 * p: mildly positive
    assert raw("the film was never boring .") == 0.5
    assert raw("i did not enjoy the plot .") == -0.75
    assert raw("i would not recommend it to anyone .") == -0.75
    assert raw("the film did not make me laugh .") == -0.75             # reaches the next sentiment word
    assert raw("the film was not a masterpiece .") == -1.125
    assert gold_score("the film was good .") > gold_score("the film was not bad .") > 0 > \
        gold_score("the film was not good .")


def test_negation_scope_ends_at_the_clause():
    assert raw("the film was not long and the plot was good .") == 1.0   # "and" closes the clause
    assert raw("the film was not long , the plot was good .") == 1.0
    assert raw("the plot was not good and funny .") == -0.75 + 1.0       # only the next sentiment word


def test_intensifiers_amplify_with_a_cap():
    assert raw("the film was very good .") == 1.5
    assert raw("the film was slightly boring .") == -0.5
    assert raw("it was an extremely good film .") == 1.8                 # "an" may stand between
    assert raw("the film was extremely great .") == pytest.approx(1.8 * 1.5)
    assert raw("i really loved the plot .") == 1.4 * 1.5
    assert raw("the film was extremely incredibly good .") == 2.0       # 1.8 * 1.8 capped at 2
    assert raw("the film was not very good .") == raw("the film was not good .")   # ignored under negation
    assert raw("the film was very long and good .") == 1.0              # intensity is used up or reset


# (text, the one penalty term that fires, its documented magnitude)
PURE = [
    ("the film was good good .", "repeat", 0.5),
    ("the film was good and the acting was good and the music was good .", "overuse", 0.5),
    ("the film was good funny clever .", "adj_chain", 0.5),
    ("the film was good and funny and clever and warm .", "adj_chain", 1.0),
    ("was the film very good .", "word_order", 1.0),                    # START->COP and COP->DET
    ("it was a excellent film .", "word_order", 0.5),                   # "a" before a vowel
    ("it was an good film .", "word_order", 0.5),
    ("the film was very goood .", "unknown", 0.5),
    ("the film was good and the plot was fine and the cast was warm and the music was nice and "
     "the end was lovely .", "run_on", 0.25),
    ("the good film from start to finish .", "no_verb", 1.0),
    ("the film was very good", "no_period", 1.0),
    ("the film was very good . it was fine .", "after_period", 1.0),   # four tokens after the first "."
    ("the film was good .", "short", 0.25),
    ("in my opinion , i thought the film was truly good from start to finish and the acting of the movie was "
     "very moving throughout and i would recommend it to my friends .", "long", 0.2),   # 32 words
]


@pytest.mark.parametrize("text, term, size", PURE)
def test_each_penalty_fires_alone_with_its_magnitude(text, term, size):
    b = gold_breakdown(text)
    fired = {k: b[k] for k in PENALTIES if b[k] > 0}
    assert fired == {term: pytest.approx(size)}, fired
    assert b["gold"] == pytest.approx(b["sentiment"] - size)


def test_caps_per_term_and_in_total():
    b = gold_breakdown("the film was " + "great " * 12 + ".")
    assert b["repeat"] == PENALTIES["repeat"][1] and b["overuse"] == PENALTIES["overuse"][1]
    assert b["penalty"] == MAX_PENALTY and b["gold"] == pytest.approx(b["sentiment"] - 3.0)
    empty = gold_breakdown("")
    assert empty["short"] == 1.25 and empty["no_verb"] == 1.0 and empty["no_period"] == 1.0
    assert empty["gold"] == -3.0
    long_ = gold_breakdown("the film was " + " ".join(["good and the plot was fine"] * 20) + " .")
    assert long_["long"] == PENALTIES["long"][1]
    for text in ["", "the film was " + "great " * 50, "<eos> " * 40, ". . . . ."]:
        assert -4.0 < gold_score(text) <= 1.0


def test_degenerate_text_scores_below_plain_text():
    plain_pos = gold_score("the film was very good .")
    plain_neg = gold_score("the film was very bad .")
    degenerate = [
        "great great great great .",
        "the film was great great great great .",
        "the film was very very very good .",
        "the film was great wonderful amazing superb brilliant .",
        "the film was great and wonderful and amazing and superb and brilliant and fantastic .",
        "the film was great and the acting was great and the music was great and the plot was great .",
        "the film was amazing and the acting was brilliant and the music was superb and the plot was "
        "wonderful and the cast was excellent and the ending was perfect and the pacing was stunning",
        "the film was good . the film was good . the film was good .",
        "good film .",
        "the film was gre at .",
    ]
    for text in degenerate:
        assert gold_score(text) < plain_pos - 0.3, text
    for text in degenerate[:3]:
        assert gold_score(text) < plain_neg, text                        # heavy degeneracy: below negatives


def test_reading_is_lenient_about_spacing_and_case():
    assert tokenize_words("The film was GOOD.") == ["the", "film", "was", "good", "."]
    assert gold_score("the film was very good.") == gold_score("  the film  was very good . ")
    assert gold_score("the movie was great <eos>") < gold_score("the movie was great .")   # "<", ">": unknown


def test_batch_form_and_bad_input():
    texts = ["the film was very good .", "i did not enjoy the plot .", ""]
    g = gold_scores(texts)
    assert g.dtype == np.float64 and g.shape == (3,)
    assert g.tolist() == [gold_score(t) for t in texts]
    assert gold_scores([]).shape == (0,)
    with pytest.raises(TypeError, match="`text`"):
        gold_score(None)
    with pytest.raises(TypeError, match="`texts`"):
        gold_scores("the film was good .")
    with pytest.raises(TypeError, match="`text`"):
        gold_scores(["ok", 3])


def _linear_bt_scores(n=4000, n_train=3000, seed=5):
    """A linear Bradley-Terry model on word counts (+ negation/intensifier bigrams), trained by gradient
    descent on pairs of corpus sentences labelled by gold; returns (proxy(text), held-out accuracy)."""
    texts = generate_corpus(n, seed=seed)
    g = gold_scores(texts)
    vocab = {}

    def feats(s, grow):
        toks, out = s.split(), []
        for j, t in enumerate(toks):
            keys = [t] + ([toks[j - 1] + " " + t] if j and LEXICON.get(toks[j - 1]) in ("NEG", "INT") else [])
            out += [vocab.setdefault(k, len(vocab)) if grow else vocab.get(k, -1) for k in keys]
        return [f for f in out if f >= 0]

    rows = [feats(s, True) for s in texts]
    X = np.zeros((n, len(vocab)))
    for i, r in enumerate(rows):
        np.add.at(X[i], r, 1.0)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, n_train, 10000), rng.integers(0, n_train, 10000)
    y = (g[a] > g[b]).astype(float)
    w = np.zeros(len(vocab))
    for _ in range(150):                        # full-batch gradient descent on -log sigmoid(s_a - s_b)
        s = X @ w
        p = 1.0 / (1.0 + np.exp(-(s[a] - s[b])))
        ds = np.bincount(a, p - y, n) - np.bincount(b, p - y, n)
        w -= 3.0 * (X.T @ ds) / len(y)
    s = X @ w
    ta, tb = rng.integers(n_train, n, 4000), rng.integers(n_train, n, 4000)
    d = g[ta] - g[tb]
    keep = np.abs(d) > 1e-9
    acc = np.mean((s[ta] - s[tb])[keep] * d[keep] > 0)

    def proxy(text):
        x = np.zeros(len(vocab))
        np.add.at(x, feats(text, False), 1.0)
        return float(x @ w)
    return proxy, acc


@pytest.fixture(scope="module")
def linear_rm():
    return _linear_bt_scores()


def test_gold_is_learnable_from_text(linear_rm):
    # even a linear model on word counts ranks held-out pairs by gold >= 85 % of the time
    _, acc = linear_rm
    assert acc >= 0.85, acc


def test_overoptimising_a_learned_proxy_is_caught(linear_rm):
    # Gao et al. 2022 in miniature: stacking positive words raises the learned proxy every step while
    # the gold score peaks early and then falls.
    proxy, _ = linear_rm
    adjs = ["great", "wonderful", "amazing", "superb", "brilliant", "fantastic", "excellent", "perfect"]
    for make in (lambda k: "the film was " + " ".join(["great"] * k) + " .",
                 lambda k: "the film was " + " and ".join(adjs[:k]) + " ."):
        texts = [make(k) for k in range(1, 9)]
        p = np.array([proxy(t) for t in texts])
        g = gold_scores(texts)
        assert np.all(np.diff(p) > 0), p
        assert int(np.argmax(g)) <= 1 and g[-1] < g.max() - 1.0, g


def test_gold_profile_averages_every_term_and_counts_where_penalties_fire():
    from minippo.rlhf.data.gold import gold_profile
    texts = ["the film was very good .", "the film was great great great great .",
             " ".join(["the film was good and the cast was fine"] * 4) + " ."]
    prof = gold_profile(texts)
    rows = [gold_breakdown(t) for t in texts]
    for k in rows[0]:
        assert prof[k] == pytest.approx(np.mean([r[k] for r in rows]))
    assert prof["gold"] == pytest.approx(gold_scores(texts).mean())
    assert prof["frac_repeat"] == pytest.approx(1 / 3) and prof["frac_too_long"] == pytest.approx(1 / 3)
    assert prof["run_on"] > 0
    with pytest.raises(ValueError, match="`texts`"):
        gold_profile([])
    with pytest.raises(ValueError, match="`texts`"):
        gold_profile("the film was good .")
