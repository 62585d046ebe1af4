"""The synthetic corpus: short lower-case movie-review sentences, and the RLHF prompts.

Everything the language model ever reads is generated here, from a seed, with no download. The
sentences come from a small grammar over a lexicon of about 250 words in which **every word has exactly
one part-of-speech tag** (so the simulated human in :mod:`minippo.rlhf.data.gold` can parse them without
ambiguity)::

    the film was very good .
    i did not enjoy the plot .
    the acting is great but the ending was boring .
    overall , i found the dialogue quite clever and the music of the movie was never dull .

Format: lower case, every token (word, ``,`` or ``.``) separated by exactly one space, exactly one
final period, 5 to 30 *words* (a word is a token that is not punctuation). No content word (noun,
lexical verb, adjective, adverb, intensifier) appears more than once in a sentence, so every corpus
sentence has gold penalty 0 (tested).

Sentiment mix (``SENTIMENT_MIX``): 45 % positive, 45 % negative, 7 % mixed ("... but ..."), 3 %
neutral. Negation ("not good", "never boring", "i did not enjoy", "i would not recommend") appears in
28 % of the sentences, intensifiers ("very", "truly", "slightly", ...) in 45 %; one sentence in four
starts with an opener ("overall ,", "in my opinion ,", "i think", ...). Words per sentence: mean 9.7,
5th-95th percentile 5-18 (seed 0, 20k sentences).

Prompts (``PROMPTS``) are 2-4 word openings of corpus sentences containing no sentiment, negation or
intensifier word; for each of them the corpus continues both positively and negatively (tested), so
the opening does not decide the sentiment: the policy does.

Randomness: ``random.Random`` seeded from the integer ``seed`` (or from one draw of a
``np.random.Generator``). Python's scalar generator is used because it is ~10x faster than NumPy's for
one-at-a-time choices; it is local to the call (the global ``random`` state is never touched).

No arrays in this module, so no shape legend is needed (B batch, T tokens elsewhere).
"""
from __future__ import annotations

import random
from typing import Iterator

import numpy as np

from minippo.checks import check_range

# ---------------------------------------------------------------------------------------------
# Lexicon. Polarity p(w) is in {+-0.5 mild, +-1 plain, +-1.5 strong}; intensifiers carry a multiplier.
# ---------------------------------------------------------------------------------------------
POSITIVE_ADJ = {
    "great": 1.5, "excellent": 1.5, "brilliant": 1.5, "wonderful": 1.5, "superb": 1.5, "fantastic": 1.5,
    "amazing": 1.5, "outstanding": 1.5, "stunning": 1.5, "perfect": 1.5, "terrific": 1.5, "masterful": 1.5,
    "good": 1.0, "funny": 1.0, "clever": 1.0, "charming": 1.0, "moving": 1.0, "touching": 1.0,
    "engaging": 1.0, "enjoyable": 1.0, "gripping": 1.0, "beautiful": 1.0, "lovely": 1.0, "witty": 1.0,
    "warm": 1.0, "fresh": 1.0, "smart": 1.0, "entertaining": 1.0, "exciting": 1.0, "memorable": 1.0,
    "stylish": 1.0, "thrilling": 1.0, "heartfelt": 1.0, "inventive": 1.0, "impressive": 1.0,
    "powerful": 1.0, "delightful": 1.0,
    "decent": 0.5, "fine": 0.5, "nice": 0.5, "pleasant": 0.5, "watchable": 0.5, "solid": 0.5,
}
NEGATIVE_ADJ = {
    "terrible": -1.5, "awful": -1.5, "horrible": -1.5, "dreadful": -1.5, "atrocious": -1.5,
    "unbearable": -1.5, "painful": -1.5, "abysmal": -1.5, "disastrous": -1.5,
    "bad": -1.0, "boring": -1.0, "dull": -1.0, "weak": -1.0, "poor": -1.0, "bland": -1.0, "clumsy": -1.0,
    "messy": -1.0, "predictable": -1.0, "tedious": -1.0, "silly": -1.0, "flat": -1.0, "forgettable": -1.0,
    "slow": -1.0, "shallow": -1.0, "confusing": -1.0, "lazy": -1.0, "cheap": -1.0, "annoying": -1.0,
    "tiresome": -1.0, "stale": -1.0, "pointless": -1.0, "lifeless": -1.0,
    "mediocre": -0.5, "uneven": -0.5, "forced": -0.5, "overlong": -0.5, "average": -0.5,
}
NEUTRAL_ADJ = ("long", "short", "loud", "quiet", "dark", "strange", "simple", "familiar", "serious",
               "unusual", "quick", "old", "new", "modern", "colourful", "busy")
NP_ADJ = ("first", "second", "final", "opening", "main")      # neutral adjectives used inside subjects
POSITIVE_NOUN = {"masterpiece": 1.5, "gem": 1.5, "triumph": 1.5, "delight": 1.0, "treat": 1.0,
                 "joy": 1.0, "pleasure": 1.0}
NEGATIVE_NOUN = {"disaster": -1.5, "mess": -1.0, "bore": -1.0, "failure": -1.0, "letdown": -1.0,
                 "waste": -1.0, "chore": -1.0}
# past-tense opinion verbs ("i loved the plot"), their base forms ("i did not enjoy the plot"),
# reactions ("the film made me laugh") and "recommend"
OPINION_PAST = {"loved": 1.5, "adored": 1.5, "liked": 1.0, "enjoyed": 1.0, "admired": 1.0,
                "appreciated": 0.5, "hated": -1.5, "despised": -1.5, "disliked": -1.0, "resented": -1.0}
OPINION_BASE = {"love": 1.5, "like": 1.0, "enjoy": 1.0, "admire": 1.0, "hate": -1.5, "mind": -0.5}
REACTION = {"laugh": 1.0, "smile": 1.0, "cheer": 1.0, "yawn": -1.0, "cringe": -1.0, "wince": -1.0}
RECOMMEND = {"recommend": 1.0}
INTENSIFIERS = {"very": 1.5, "really": 1.4, "truly": 1.5, "extremely": 1.8, "incredibly": 1.8, "so": 1.5,
                "absolutely": 1.8, "genuinely": 1.4, "quite": 1.2, "rather": 1.1, "fairly": 0.8,
                "somewhat": 0.6, "slightly": 0.5}
NEGATIONS = ("not", "never")

SING_NOUNS = ("film", "movie", "plot", "story", "acting", "ending", "script", "soundtrack", "music",
              "dialogue", "direction", "cinematography", "pacing", "humour", "premise", "cast", "villain",
              "hero", "performance", "sequel", "finale", "screenplay", "editing", "climax", "romance",
              "animation", "atmosphere", "setting", "tone", "scene", "twist")
PLUR_NOUNS = ("actors", "characters", "jokes", "songs", "effects", "visuals", "scenes", "costumes",
              "twists", "performances")
OTHER_NOUNS = ("start", "finish", "times", "places", "end", "opinion", "friends", "half")
SING_COP = ("is", "was", "seemed", "felt", "looked")
PLUR_COP = ("are", "were", "seemed", "felt", "looked")
NEUTRAL_VERBS = ("think", "thought", "found", "made", "make", "watched")
OPENERS = (("overall", ","), ("honestly", ","), ("frankly", ","), ("personally", ","),
           ("in", "the", "end", ","), ("in", "my", "opinion", ","), ("for", "me", ","),
           ("i", "think"), ("i", "thought"))
TAILS = (("from", "start", "to", "finish"), ("at", "times"), ("in", "places"), ("throughout",))

# Part-of-speech tag of every word (the gold score's parser relies on this being unambiguous).
LEXICON: dict[str, str] = {}


def _tag(tag: str, words) -> None:
    for w in words:
        if LEXICON.setdefault(w, tag) != tag:
            raise AssertionError(f"word {w!r} has two tags: {LEXICON[w]} and {tag}")


_tag("DET", ("the", "this", "that", "my"))
_tag("ART", ("a", "an"))
_tag("PRON", ("i", "it", "me", "anyone", "everyone"))
_tag("NOUN", SING_NOUNS + PLUR_NOUNS + OTHER_NOUNS + tuple(POSITIVE_NOUN) + tuple(NEGATIVE_NOUN))
_tag("COP", SING_COP + PLUR_COP)
_tag("AUX", ("did", "would", "will"))
_tag("VERB", tuple(OPINION_PAST) + tuple(OPINION_BASE) + tuple(REACTION) + tuple(RECOMMEND) + NEUTRAL_VERBS)
_tag("ADJ", tuple(POSITIVE_ADJ) + tuple(NEGATIVE_ADJ) + NEUTRAL_ADJ + NP_ADJ)
_tag("INT", tuple(INTENSIFIERS))
_tag("NEG", NEGATIONS)
_tag("CONJ", ("and", "but", "yet", "although"))
_tag("PREP", ("of", "in", "to", "from", "at", "for", "with"))
_tag("ADV", ("overall", "honestly", "frankly", "personally", "throughout", "also"))
_tag(",", (",",))
_tag(".", (".",))

POLARITY: dict[str, float] = {**POSITIVE_ADJ, **NEGATIVE_ADJ, **POSITIVE_NOUN, **NEGATIVE_NOUN,
                              **OPINION_PAST, **OPINION_BASE, **REACTION, **RECOMMEND}
FUNCTION_TAGS = frozenset({"DET", "ART", "PRON", "COP", "AUX", "NEG", "CONJ", "PREP", ",", "."})
PUNCTUATION = frozenset({",", "."})

# Sentence kinds and their probabilities: clause polarities are drawn from these.
SENTIMENT_MIX = {"positive": 0.45, "negative": 0.45, "mixed": 0.07, "neutral": 0.03}

# The RLHF prompts: sentiment-free openings of corpus sentences (2-4 words; "," counts as a token).
PROMPTS = (
    "the film", "the movie", "the plot", "the acting", "the ending", "the story", "the music", "the script",
    "the cast", "the actors", "the jokes", "the characters", "the soundtrack", "the dialogue",
    "the film was", "the film is", "the movie was", "the plot was", "the acting was",
    "i thought", "i thought the", "i think", "i think the", "i found", "i found the", "i would",
    "it was", "it was a", "overall , the", "overall , i", "honestly , the", "frankly , the",
    "for me , the", "in the end ,", "in the end , the", "in my opinion ,", "in my opinion , the",
)
MIN_WORDS, MAX_WORDS = 5, 30
MAX_CONJ = 3                       # at most three conjunctions: more is a run-on sentence


def count_words(tokens) -> int:
    """Number of words in a token list: tokens that are not punctuation (``,`` and ``.``)."""
    return sum(1 for t in tokens if t not in PUNCTUATION)


# ---------------------------------------------------------------------------------------------
# The generator: a sentence is [opener] clause {join clause} "." with one polarity per clause.
# ---------------------------------------------------------------------------------------------
class _Exhausted(Exception):
    """Every candidate word is already used in this sentence: the sentence is drawn again."""


def _take(r: random.Random, words, used: set):
    """A word from ``words`` not yet used in this sentence (content words appear at most once)."""
    w = r.choice(words)
    if w in used:
        left = [x for x in words if x not in used]
        if not left:
            raise _Exhausted
        w = r.choice(left)
    used.add(w)
    return w


def _once(word: str, used: set) -> str:
    """A fixed content word of a template ("recommend", "found", ...), at most once per sentence."""
    if word in used:
        raise _Exhausted
    used.add(word)
    return word


_POS, _NEG = tuple(POSITIVE_ADJ), tuple(NEGATIVE_ADJ)
_POS_N, _NEG_N = tuple(POSITIVE_NOUN), tuple(NEGATIVE_NOUN)
_POS_PAST = tuple(w for w, p in OPINION_PAST.items() if p > 0)
_NEG_PAST = tuple(w for w, p in OPINION_PAST.items() if p < 0)
_POS_REACT = tuple(w for w, p in REACTION.items() if p > 0)
_NEG_REACT = tuple(w for w, p in REACTION.items() if p < 0)
_INTS = tuple(INTENSIFIERS)
_CONJ = frozenset(w for w, t in LEXICON.items() if t == "CONJ")
_VERB_INTS = ("really", "truly", "genuinely", "absolutely")    # the ones that read well before a verb
_BE = ("is", "was", "are", "were")                             # copulas that take "not" / "never"
_WHOLE = ("film", "movie", "story")                            # nouns naming the whole work


def _article(word: str) -> str:
    """"an" before a vowel, "a" otherwise (the gold score checks this agreement)."""
    return "an" if word[0] in "aeiou" else "a"


def _adjective(r: random.Random, pol: int, used: set, negate: bool = True) -> list[str]:
    """Words expressing polarity ``pol`` with an adjective: "very good", "not good", "never boring".

    ``negate=False`` forbids the negated form (after "seemed", "looked", "felt", "i found NP").
    """
    if pol == 0:
        words = [_take(r, NEUTRAL_ADJ, used)]
    elif negate and r.random() < (0.15 if pol > 0 else 0.25):   # negated opposite: "not bad", "not very good"
        neg = r.choice(NEGATIONS)
        words = [neg, _take(r, _NEG if pol > 0 else _POS, used)]
        if pol < 0 and neg == "not" and r.random() < 0.3:
            words.insert(1, _take(r, _INTS, used))
        return words
    else:
        words = [_take(r, _POS if pol > 0 else _NEG, used)]
    if r.random() < 0.45:
        words.insert(0, _take(r, _INTS, used))
    return words


def _subject(r: random.Random, used: set) -> tuple[list[str], bool]:
    """A noun phrase "the plot", "the final scene", "the music of the film"; returns (words, plural)."""
    if r.random() < 0.2:
        return ["the", _take(r, PLUR_NOUNS, used)], True
    det = "the" if r.random() < 0.8 else r.choice(("this", "that"))
    if r.random() < 0.1:
        return [det, _take(r, NP_ADJ, used), _take(r, ("scene", "half", "twist", "performance"), used)], False
    words = [det, _take(r, SING_NOUNS, used)]
    if det == "the" and words[1] not in _WHOLE and r.random() < 0.15:
        words += ["of", "the", _take(r, _WHOLE[:2], used)]
    return words, False


def _clause(r: random.Random, pol: int, used: set) -> list[str]:
    """One clause with polarity ``pol`` (+1, -1 or 0), from one of seven templates."""
    u = r.random()
    if pol == 0 or u < 0.45:                     # NP COP [also] ADJ [and ADJ] [tail]
        np_, plural = _subject(r, used)
        cop = r.choice(PLUR_COP if plural else SING_COP)
        words = np_ + [cop]
        if cop in _BE and r.random() < 0.05 and "also" not in used:
            words.append(_once("also", used))
        negate = cop in _BE
        words += _adjective(r, pol, used, negate)
        if pol != 0 and r.random() < 0.15:
            words += ["and"] + _adjective(r, pol, used, negate)
        if r.random() < 0.12:
            words += list(_take(r, TAILS, used))
        return words
    if u < 0.55:                                 # NP COP [not] a SNOUN / it was a [INT] ADJ film
        if r.random() < 0.5:
            np_, plural = _subject(r, used)
            if plural:
                np_, plural = ["the", _take(r, SING_NOUNS, used)], False
            cop = r.choice(("is", "was", "seemed"))
            neg = cop in _BE and r.random() < 0.2
            nouns = (_NEG_N if pol > 0 else _POS_N) if neg else (_POS_N if pol > 0 else _NEG_N)
            noun = _take(r, nouns, used)
            return np_ + [cop] + (["not"] if neg else []) + [_article(noun), noun]
        adj = _adjective(r, pol, used)
        if adj[0] == "so" or (len(adj) > 1 and adj[1] == "so"):     # "a so good film" is not English
            adj[adj.index("so")] = _take(r, ("very", "truly", "really"), used)
        neg = [adj.pop(0)] if adj[0] in NEGATIONS else []
        return ["it", "was"] + neg + [_article(adj[0])] + adj + [_take(r, _WHOLE, used)]
    if u < 0.68:                                 # i [INT] loved NP [tail]
        words = ["i"] + ([_take(r, _VERB_INTS, used)] if r.random() < 0.3 else [])
        words += [_take(r, _POS_PAST if pol > 0 else _NEG_PAST, used)] + _subject(r, used)[0]
        if r.random() < 0.12:
            words += list(_take(r, TAILS, used))
        return words
    if u < 0.76:                                 # i did not enjoy NP  (/ i did not hate NP)
        verbs = [w for w, p in OPINION_BASE.items() if (p < 0) == (pol > 0)]
        return ["i", "did", "not", _take(r, verbs, used)] + _subject(r, used)[0]
    if u < 0.84:                                 # i would [not] recommend it [to anyone]
        words = ["i", "would"] + ([] if pol > 0 else ["not"]) + [_once("recommend", used)]
        words += ["it"] if r.random() < 0.5 else _subject(r, used)[0]
        return words + r.choice(([], ["to", "anyone"], ["to", "everyone"], ["to", "my", "friends"]))
    if u < 0.92:                                 # i found NP [INT] ADJ
        return ["i", _once("found", used)] + _subject(r, used)[0] + _adjective(r, pol, used, negate=False)
    np_, _ = _subject(r, used)                   # NP made me laugh / NP did not make me laugh
    if r.random() < 0.2:
        reaction = _take(r, _NEG_REACT if pol > 0 else _POS_REACT, used)
        return np_ + ["did", "not", _once("make", used), "me", reaction]
    return np_ + [_once("made", used), "me", _take(r, _POS_REACT if pol > 0 else _NEG_REACT, used)]


_KIND_POLS = {"positive": 1, "negative": -1, "neutral": 0}


def _kind(u: float) -> str:
    """The sentence kind for a uniform draw ``u`` (inverse CDF of ``SENTIMENT_MIX``)."""
    for kind, p in SENTIMENT_MIX.items():
        if u < p:
            return kind
        u -= p
    return kind


def _sentence(r: random.Random) -> str:
    """One sentence of 5 to 30 words (resampled until the length fits)."""
    while True:
        kind = _kind(r.random())
        n_clauses = 1 if r.random() < 0.6 else (2 if r.random() < 0.85 else 3)
        if kind == "mixed":
            pols = [1, -1] if r.random() < 0.5 else [-1, 1]
        else:
            pols = [_KIND_POLS[kind]] * (1 if kind == "neutral" else n_clauses)
        used: set = set()
        words = list(r.choice(OPENERS)) if r.random() < 0.25 else []
        used.update(words)
        try:
            for i, pol in enumerate(pols):
                if i:   # clauses of equal polarity are joined by "and", opposite ones by a contrast
                    join = "and" if pol == pols[i - 1] else r.choice(("but", "yet", "although"))
                    words += [",", join] if r.random() < 0.2 else [join]
                words += _clause(r, pol, used)
        except _Exhausted:
            continue
        words.append(".")
        if MIN_WORDS <= count_words(words) <= MAX_WORDS and sum(w in _CONJ for w in words) <= MAX_CONJ:
            return " ".join(words)


def _make_rng(seed) -> random.Random:
    """A local ``random.Random`` from an int seed or from one draw of a ``np.random.Generator``."""
    if isinstance(seed, np.random.Generator):
        return random.Random(int(seed.integers(0, 2**63 - 1)))
    check_range("seed", seed, 0, None, integer=True)
    return random.Random(int(seed))


def iter_corpus(n: int, seed: int | np.random.Generator = 0) -> Iterator[str]:
    """Yield ``n`` corpus sentences (the streaming form, e.g. for tokenizer training).

    Same ``seed`` -> same sentences, and ``iter_corpus(n, s)`` is a prefix of ``iter_corpus(m, s)``
    for ``n < m``.
    """
    check_range("n", n, 0, None, integer=True)
    r = _make_rng(seed)                 # validated here, at the call, not at the first next()
    return (_sentence(r) for _ in range(n))


def generate_corpus(n: int, seed: int | np.random.Generator = 0) -> list[str]:
    """``n`` corpus sentences as a list (20k take about 0.1-0.2 s)."""
    return list(iter_corpus(n, seed))


def sample_prompts(n: int, seed: int | np.random.Generator = 0) -> list[str]:
    """``n`` prompts drawn uniformly (with replacement) from ``PROMPTS``."""
    check_range("n", n, 0, None, integer=True)
    r = _make_rng(seed)
    return [r.choice(PROMPTS) for _ in range(n)]
