r"""The simulated human: a deterministic "gold" score for a movie-review sentence.

Later stages use it twice: to label preference pairs for the reward model (P(a preferred over b) =
sigmoid((gold(a) - gold(b)) / temperature)), and to judge the trained policy. The reward model only
ever sees those labels, so it learns an imperfect *proxy* of this function; optimising the proxy too
hard produces text the proxy likes and this function punishes (Gao et al. 2022, lesson 19).

What it rewards, exactly
------------------------
The text is lower-cased and split into tokens: runs of letters ``[a-z]+`` and single other characters
(so "good." reads as "good" "."; spacing is forgiven). A *word* is a token that is not "," or ".".
Every word has one part-of-speech tag in ``corpus.LEXICON``; anything else is *unknown*.

**Sentiment**, in (-1, 1)::

    raw       = sum over sentiment words w of v(w)
    v(w)      = p(w) * min(m, 2)     not negated ("very good" = 1.5 * 1 = 1.5, "extremely great" =
                                     1.8 * 1.5 = 2.7, "extremely incredibly great" = 2 * 1.5 = 3)
              = -0.75 * p(w)         negated, p(w) > 0   ("not good" = -0.75, "did not enjoy" = -0.75)
              = -0.5  * p(w)         negated, p(w) < 0   ("not bad" = +0.5, "never boring" = +0.5)
    sentiment = tanh(raw / 1.5)

``p(w)`` is the polarity in ``corpus.POLARITY`` (+-0.5 mild, +-1 plain, +-1.5 strong: adjectives,
"masterpiece"/"mess", "loved"/"hated", "laugh"/"yawn", "recommend"). ``m`` is the product of the
intensifier multipliers (``corpus.INTENSIFIERS``: very 1.5, extremely 1.8, slightly 0.5, ...) standing
directly before ``w`` (only "a"/"an" may sit between), capped at 2; under negation intensifiers are
ignored ("not very good" = "not good"). "not"/"never" negate the next sentiment word of their clause;
a clause ends at "and", "but", "yet", "although", "," or ".". Sentiment of "the film was ...":
"good" 0.58, "very good" 0.76, "extremely great" 0.95, "not bad" 0.32, "good but boring" 0.0,
"not good" -0.46, "bad" -0.58, "truly awful" -0.91.

**Penalties** (each term capped; the total is capped at 3)::

    term          fires on                                               magnitude            cap
    repeat        a token equal to the one before it ("great great")     0.5 each             1.5
    overuse       a content word used a 3rd, 4th, ... time               0.5 per extra use    1.5
    adj_chain     a list of 3+ adjectives ("good great fine",            0.5 per adj after 2  1.5
                  "good and great and fine": only conjunctions, commas,
                  intensifiers and negations between them)
    word_order    a tag bigram the grammar (ALLOWED_NEXT) forbids,       0.5 each             1.5
                  incl. the first token, or "a"/"an" before the wrong sound
    unknown       a token that is not in the lexicon ("gre", "<")        0.5 each             1.5
    run_on        more than 3 conjunctions (and, but, yet, although)     0.25 per extra one   1.0
    no_verb       no verb at all (copula, auxiliary or lexical verb)     1.0
    no_period     the last token is not "."                              1.0
    after_period  tokens after the first "."                             0.25 each            1.5
    short         fewer than 5 words                                     0.25 per missing     1.25
    long          more than 30 words                                     0.1 per extra word   1.5

Content words are those whose tag is not in ``corpus.FUNCTION_TAGS`` (articles, determiners, pronouns,
copulas, auxiliaries, negations, conjunctions, prepositions, punctuation are function words).
The grammar table only follows tag bigrams (a tiny finite-state check); bigrams involving an unknown
token and those after a period are not counted again.

**Gold**::

    penalty = min(3, sum of the terms)     in [0, 3]
    gold    = sentiment - penalty          in (-4, 1)

Every corpus sentence has penalty 0 (tested), so on the corpus gold = sentiment: mean about 0,
std 0.73, 48 % above +0.1 and 48 % below -0.1. Degenerate positive text scores below plain positive
text (+0.76 for "the film was very good ."): "the film was great great great great ." -2.0, eight
positive adjectives in a row -0.5 (joined by "and": -1.5), seven positive clauses joined by "and"
without a final period -1.15. Sentiment saturates (tanh) while the penalties keep growing,
which is what makes over-optimisation visible: more positive words stop helping and start hurting.

Pure Python, about 20 microseconds per sentence; deterministic (no randomness at all).
Shapes: ``gold_scores(texts)`` returns (B,) float64 for B texts.
"""
from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

from minippo.rlhf.data.corpus import FUNCTION_TAGS, INTENSIFIERS, LEXICON, MAX_CONJ, MAX_WORDS, MIN_WORDS, POLARITY

SENTIMENT_SCALE = 1.5            # sentiment = tanh(raw / SENTIMENT_SCALE)
MAX_INTENSITY = 2.0              # cap on the product of stacked intensifiers
NEGATED_POSITIVE = -0.75         # v("not good") = -0.75 * p("good")
NEGATED_NEGATIVE = -0.5          # v("not bad")  = -0.5  * p("bad")
MAX_PENALTY = 3.0
CLAUSE_END = frozenset({"CONJ", ",", "."})
IN_ADJ_LIST = frozenset({"ADJ", "CONJ", ",", "INT", "NEG"})   # tags that do not end a list of adjectives
VERB_TAGS = frozenset({"COP", "AUX", "VERB"})

# term -> (magnitude per occurrence, cap); "no_verb" and "no_period" fire at most once.
PENALTIES = {
    "repeat": (0.5, 1.5), "overuse": (0.5, 1.5), "adj_chain": (0.5, 1.5), "word_order": (0.5, 1.5),
    "unknown": (0.5, 1.5), "run_on": (0.25, 1.0), "no_verb": (1.0, 1.0), "no_period": (1.0, 1.0),
    "after_period": (0.25, 1.5), "short": (0.25, 1.25), "long": (0.1, 1.5),
}

# The grammar: which tag may follow which ("START" is before the first token). Derived from the
# corpus templates; "." may follow only the tags listed, and nothing is checked after a ".".
ALLOWED_NEXT: dict[str, frozenset] = {k: frozenset(v.split()) for k, v in {
    "START": "DET PRON ADV PREP",
    "DET": "NOUN ADJ",
    "ART": "NOUN ADJ INT",
    "PRON": "COP AUX VERB INT PREP CONJ , .",
    "NOUN": "COP AUX VERB PREP CONJ ADV ADJ INT , .",      # NOUN ADJ: "i found the plot clever"
    "COP": "ADV NEG INT ADJ ART",
    "AUX": "NEG VERB",
    "VERB": "DET PRON CONJ , .",
    "ADJ": "NOUN ADJ PREP ADV CONJ , .",
    "INT": "ADJ VERB",
    "NEG": "INT ADJ ART VERB",
    "CONJ": "DET PRON ADJ INT NEG",
    "PREP": "DET NOUN PRON",
    "ADV": ", INT ADJ NEG CONJ .",
    ",": "DET PRON CONJ",
}.items()}

_TOKEN = re.compile(r"[a-z]+|[^a-z\s]")


def tokenize_words(text: str) -> list[str]:
    """The gold score's reading of ``text``: lower-cased letter runs and single other characters."""
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a str, got {type(text).__name__}")
    return _TOKEN.findall(text.lower())


def _sentiment_raw(tokens: list[str], tags: list[str]) -> float:
    """raw = sum of v(w) over sentiment words, with negation scope and intensifiers (see module doc)."""
    raw, mult, negated = 0.0, 1.0, False
    for tok, tag in zip(tokens, tags):
        p = POLARITY.get(tok)
        if p is not None:                          # a sentiment word consumes negation and intensity
            if negated:
                raw += (NEGATED_POSITIVE if p > 0 else NEGATED_NEGATIVE) * p
            else:
                raw += p * min(mult, MAX_INTENSITY)
            mult, negated = 1.0, False
        elif tag == "INT":
            mult *= INTENSIFIERS[tok]
        elif tag == "NEG":
            negated = True
        elif tag in CLAUSE_END:
            mult, negated = 1.0, False
        elif tag != "ART":                          # only "a"/"an" may stand between "very" and its word
            mult = 1.0
    return raw


def _counts(tokens: list[str], tags: list[str]) -> dict[str, int]:
    """How many times each penalty rule fires (before magnitudes and caps)."""
    n = len(tokens)
    first_period = tokens.index(".") if "." in tokens else n
    n_words = sum(1 for t in tokens if t not in (",", "."))
    c = dict.fromkeys(PENALTIES, 0)
    c["repeat"] = sum(1 for i in range(1, n) if tokens[i] == tokens[i - 1])
    content = Counter(t for t, g in zip(tokens, tags) if g != "UNK" and g not in FUNCTION_TAGS)
    c["overuse"] = sum(k - 2 for k in content.values() if k > 2)
    run = 0
    for g in tags:                                  # lists of adjectives longer than two
        run = (run + (g == "ADJ")) if g in IN_ADJ_LIST else 0
        c["adj_chain"] += g == "ADJ" and run > 2
    c["run_on"] = max(0, sum(1 for g in tags if g == "CONJ") - MAX_CONJ)
    prev = "START"
    for i in range(first_period + (first_period < n)):   # bigrams up to and including the first "."
        tok, g = tokens[i], tags[i]
        if g == "UNK" or prev == "UNK":
            c["unknown"] += g == "UNK"
        elif g not in ALLOWED_NEXT[prev]:
            c["word_order"] += 1
        if g == "ART" and i + 1 < n and tokens[i + 1].isalpha():   # "a" + consonant, "an" + vowel
            c["word_order"] += (tok == "an") != (tokens[i + 1][0] in "aeiou")
        prev = g
    c["unknown"] += sum(1 for g in tags[first_period + 1:] if g == "UNK")
    c["no_verb"] = int(not any(g in VERB_TAGS for g in tags))
    c["no_period"] = int(n == 0 or tokens[-1] != ".")
    c["after_period"] = n - first_period - 1 if first_period < n else 0
    c["short"] = max(0, MIN_WORDS - n_words)
    c["long"] = max(0, n_words - MAX_WORDS)
    return c


def gold_breakdown(text: str) -> dict:
    """Every number behind ``gold_score(text)``, for lessons and debugging.

    Returns a dict with ``n_words``, ``raw`` (sentiment before tanh), ``sentiment``, one entry per
    penalty term (its capped magnitude, see the module docstring), ``penalty`` (total, capped at 3)
    and ``gold``.
    """
    tokens = tokenize_words(text)
    tags = [LEXICON.get(t, "UNK") for t in tokens]
    raw = _sentiment_raw(tokens, tags)
    out = {"n_words": sum(1 for t in tokens if t not in (",", ".")), "raw": raw,
           "sentiment": math.tanh(raw / SENTIMENT_SCALE)}
    total = 0.0
    for term, count in _counts(tokens, tags).items():
        size, cap = PENALTIES[term]
        out[term] = min(cap, size * count)
        total += out[term]
    out["penalty"] = min(MAX_PENALTY, total)
    out["gold"] = out["sentiment"] - out["penalty"]
    return out


def gold_score(text: str) -> float:
    """The simulated human's score of one sentence: sentiment in (-1, 1) minus penalties in [0, 3]."""
    return gold_breakdown(text)["gold"]


def gold_scores(texts) -> np.ndarray:
    """``gold_score`` of each text: (B,) float64. ``texts`` is a list (or tuple) of str."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"`texts` must be a list of str, got {type(texts).__name__}")
    return np.array([gold_score(t) for t in texts], dtype=np.float64)


def gold_profile(texts) -> dict[str, float]:
    """What a set of texts is rewarded and penalised for: the mean over ``texts`` of every entry of
    :func:`gold_breakdown` (``n_words``, ``sentiment``, each penalty term, ``penalty``, ``gold``), plus
    ``frac_<term>`` (the fraction of texts where each penalty of :data:`PENALTIES` fires) and
    ``frac_too_long`` (more than ``MAX_WORDS`` = 30 words, where "long" starts). Lessons 16 and 19
    read over-optimised samples with it."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError("`texts` must be a non-empty list of str")
    rows = [gold_breakdown(t) for t in texts]
    out = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    out.update({f"frac_{k}": float(np.mean([r[k] > 0 for r in rows])) for k in PENALTIES})
    out["frac_too_long"] = float(np.mean([r["n_words"] > MAX_WORDS for r in rows]))
    return out
