"""Preference data: the simulated human's label statistics, the pair dataset (layout, split by prompt,
save/load), policy sampling into right-padded rows, and the accuracy / correlation helpers."""
import numpy as np
import pytest

from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rlhf.data.corpus import PROMPTS, generate_corpus
from minippo.rlhf.data.gold import gold_score
from minippo.rlhf.data.preferences import (PreferencePairs, gold_order_accuracy, make_preference_pairs, pairwise_accuracy,
                                      pearson, preference_probability, rankdata, right_align, sample_labels,
                                      sample_policy, spearman)
from minippo.rlhf.data.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.train(generate_corpus(1500, 0), vocab_size=160)


@pytest.fixture(scope="module")
def policy(tok):
    """A random tiny TinyGPT: its samples are gibberish, but diverse and scoreable by gold."""
    return TinyGPT(GPTConfig(vocab_size=tok.vocab_size, block_size=24, n_layer=1, n_head=2, n_embd=16), seed=0)


# ----------------------------------------------------------------------------------------------
# labels
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tau", [0.05, 0.1, 0.3])
def test_label_frequency_matches_sigmoid(tau):
    """With a fixed seed, the empirical preference frequency for each gold gap is sigmoid(gap / tau)
    within 4 binomial standard errors."""
    rng = np.random.default_rng(123)
    gaps = np.array([-0.3, -0.1, -0.02, 0.0, 0.05, 0.1, 0.2, 0.5])
    n = 20_000
    gold_b = rng.normal(0, 1, size=(gaps.size, n))
    gold_a = gold_b + gaps[:, None]
    a_wins, prob = sample_labels(gold_a.ravel(), gold_b.ravel(), tau, rng)
    freq = a_wins.reshape(gaps.size, n).mean(axis=1)
    p = 1 / (1 + np.exp(-gaps / tau))
    np.testing.assert_allclose(prob.reshape(gaps.size, n), np.broadcast_to(p[:, None], (gaps.size, n)), rtol=1e-12)
    se = np.sqrt(p * (1 - p) / n)
    assert (np.abs(freq - p) <= 4 * se + 1e-12).all(), (freq, p)


def test_labels_are_reproducible_and_noiseless_at_zero_temperature():
    ga, gb = np.array([0.5, -0.2, 0.1, 0.3]), np.array([0.1, 0.4, 0.1, 0.3001])
    l1, _ = sample_labels(ga, gb, 0.1, np.random.default_rng(7))
    l2, _ = sample_labels(ga, gb, 0.1, np.random.default_rng(7))
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(preference_probability(ga, gb, 0.0), [1.0, 0.0, 0.5, 0.0])
    wins = np.array([sample_labels(ga, gb, 0.0, np.random.default_rng(s))[0] for s in range(200)])
    assert wins[:, 0].all() and not wins[:, 1].any() and not wins[:, 3].any()
    assert 0.3 < wins[:, 2].mean() < 0.7                  # a gold tie is a coin flip
    # no overflow for huge gaps
    assert preference_probability(np.array([1e6]), np.array([-1e6]), 1e-3)[0] == 1.0


def test_label_arguments_are_validated():
    with pytest.raises(ValueError, match="label_temperature"):
        preference_probability(np.zeros(2), np.zeros(2), -0.1)
    with pytest.raises(ValueError, match="gold_b"):
        preference_probability(np.zeros(2), np.zeros(3), 0.1)
    with pytest.raises(ValueError, match="rng"):
        sample_labels(np.zeros(2), np.zeros(2), 0.1, 0)


# ----------------------------------------------------------------------------------------------
# layout helpers
# ----------------------------------------------------------------------------------------------

def test_right_align_moves_each_run_to_the_start():
    seqs = np.array([[0, 0, 1, 5, 6, 2, 0], [1, 7, 8, 9, 4, 4, 2], [0, 0, 0, 0, 0, 1, 9]])
    mask = np.array([[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1]])
    out, m = right_align(seqs, mask)
    np.testing.assert_array_equal(out, [[1, 5, 6, 2, 0, 0, 0], [1, 7, 8, 9, 4, 4, 2], [1, 9, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(m, [[1, 1, 1, 1, 0, 0, 0], [1] * 7, [1, 1, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="row 0 must hold one contiguous run"):
        right_align(seqs[:1], np.array([[1, 0, 1, 0, 0, 0, 0]]))


def test_sample_policy_rows_are_prompt_plus_response_and_gold_is_of_the_full_text(tok, policy):
    prompts = ["the film", "i thought the", "it was a", "the film"]
    s = sample_policy(policy, tok, prompts, rng=np.random.default_rng(0), max_new_tokens=8, batch_size=3)
    assert s.sequences.shape == s.mask.shape and s.sequences.shape[0] == 4
    for b, p in enumerate(prompts):
        ids = tok.encode(p, add_bos=True)
        assert s.prompt_len[b] == len(ids)
        np.testing.assert_array_equal(s.sequences[b, :len(ids)], ids)             # the prompt comes first
        n = s.mask[b].sum()
        assert s.mask[b, :n].all() and not s.mask[b, n:].any()                     # right-padded
        assert (s.sequences[b, n:] == tok.pad_id).all()
        assert s.texts[b] == tok.decode(s.sequences[b, :n]) and s.texts[b].startswith(p)
        assert s.gold[b] == gold_score(s.texts[b])
        assert s.ended[b] == (tok.eos_id in s.sequences[b, len(ids):n])
    # same seed, same samples
    s2 = sample_policy(policy, tok, prompts, rng=np.random.default_rng(0), max_new_tokens=8, batch_size=3)
    assert s2.texts == s.texts


# ----------------------------------------------------------------------------------------------
# the dataset
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pairs(tok, policy):
    return make_preference_pairs(policy, tok, 30, responses_per_prompt=4, rng=np.random.default_rng(3),
                                 label_temperature=0.1, max_new_tokens=8)


def test_pairs_compare_two_responses_to_the_same_prompt(pairs, tok):
    M = 30 * 4
    assert pairs.sequences.shape[0] == M and pairs.n_groups == 30
    np.testing.assert_array_equal(pairs.group, np.repeat(np.arange(30), 4))
    assert 0 < len(pairs) <= 30 * 6
    ci, ri = pairs.chosen_idx, pairs.rejected_idx
    assert (pairs.group[ci] == pairs.group[ri]).all() and (ci != ri).all()
    for c, r, L in zip(ci, ri, pairs.prompt_len[ci]):
        np.testing.assert_array_equal(pairs.sequences[c, :L], pairs.sequences[r, :L])   # one prompt
        assert tok.decode(pairs.sequences[c]) != tok.decode(pairs.sequences[r])           # no identical texts
        assert tok.decode(pairs.sequences[c]).split()[0] in {p.split()[0] for p in PROMPTS}
    # each unordered pair appears at most once
    assert len({(min(c, r), max(c, r)) for c, r in zip(ci, ri)}) == len(pairs)
    # the views and the label probabilities agree with the gold scores
    np.testing.assert_array_equal(pairs.chosen, pairs.sequences[ci])
    np.testing.assert_array_equal(pairs.rejected_mask, pairs.mask[ri])
    np.testing.assert_allclose(pairs.prob_chosen, preference_probability(pairs.gold_chosen, pairs.gold_rejected, 0.1))
    np.testing.assert_array_equal(pairs.gold, [gold_score(tok.decode(row)) for row in pairs.sequences])


def test_split_is_by_prompt_seeded_and_nested(pairs):
    train, held = pairs.split(0.2, np.random.default_rng(0))
    assert (train.n_groups, held.n_groups) == (24, 6) and len(train) + len(held) == len(pairs)
    # every response of the original appears exactly once across the two splits
    assert train.sequences.shape[0] + held.sequences.shape[0] == pairs.sequences.shape[0]
    assert sorted(train.gold.tolist() + held.gold.tolist()) == sorted(pairs.gold.tolist())
    again, _ = pairs.split(0.2, np.random.default_rng(0))
    np.testing.assert_array_equal(again.sequences, train.sequences)
    # a prefix of the training groups is a subset of a longer prefix, with the same pairs
    small, big = train.select_groups(np.arange(5)), train.select_groups(np.arange(10))
    np.testing.assert_array_equal(small.sequences, big.sequences[:small.sequences.shape[0]])
    np.testing.assert_array_equal(small.gold_chosen, big.gold_chosen[:len(small)])
    with pytest.raises(ValueError, match="heldout_frac"):
        pairs.split(0.001, np.random.default_rng(0))


def test_select_groups_keeps_pairs_consistent(pairs):
    sub = pairs.select_groups([7, 2])
    assert sub.n_groups == 2 and (sub.group[:4] == 0).all() and (sub.group[4:] == 1).all()
    np.testing.assert_array_equal(sub.sequences[:4], pairs.sequences[28:32])
    expect = [(pairs.gold[c], pairs.gold[r]) for c, r in zip(pairs.chosen_idx, pairs.rejected_idx)
              if pairs.group[c] in (7, 2)]
    assert sorted(zip(sub.gold_chosen, sub.gold_rejected)) == sorted(expect)
    with pytest.raises(ValueError, match="repeat"):
        pairs.select_groups([1, 1])


def test_save_load_round_trip(pairs, tmp_path):
    pairs.save(tmp_path / "p.npz")
    back = PreferencePairs.load(tmp_path / "p.npz")
    for name in ("sequences", "mask", "prompt_len", "gold", "group", "chosen_idx", "rejected_idx", "prob_chosen"):
        np.testing.assert_array_equal(getattr(back, name), getattr(pairs, name))


def test_the_same_pairs_saved_again_are_the_same_bytes(pairs, tmp_path, monkeypatch):
    """A run records the SHA-256 of its --pairs file, and refuses a resume after the same pairs were written
    again with other bytes ("made from another --pairs"). np.savez's entries carry what ``ZipFile.open``
    sets: the system that wrote them (Windows or not) and, should Python stamp the time there (CPython
    gh-121402), the time; every field of ours is fixed."""
    import sys
    import time
    monkeypatch.setattr(time, "time", lambda: 1.0e9)
    pairs.save(tmp_path / "a.npz")
    monkeypatch.setattr(time, "time", lambda: 1.7e9)
    monkeypatch.setattr(sys, "platform", "win32")
    pairs.save(tmp_path / "b.npz")
    monkeypatch.undo()
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def test_pairs_validation_names_the_field(pairs):
    base = {k: getattr(pairs, k) for k in ("sequences", "mask", "prompt_len", "gold", "group", "chosen_idx",
                                             "rejected_idx", "prob_chosen")}
    bad_mask = pairs.mask.copy()
    bad_mask[0, 0] = 0                                       # a hole at the start of row 0
    with pytest.raises(ValueError, match="mask"):
        PreferencePairs(**{**base, "mask": bad_mask})
    with pytest.raises(ValueError, match="same group"):
        PreferencePairs(**{**base, "rejected_idx": (pairs.rejected_idx + 4) % pairs.sequences.shape[0]})
    with pytest.raises(ValueError, match="prob_chosen"):
        PreferencePairs(**{**base, "prob_chosen": pairs.prob_chosen[:-1]})
    with pytest.raises(ValueError, match="group"):
        PreferencePairs(**{**base, "group": pairs.group[::-1].copy()})


# ----------------------------------------------------------------------------------------------
# accuracy and correlation
# ----------------------------------------------------------------------------------------------

def test_pairwise_and_gold_order_accuracy():
    rc, rr = np.array([1.0, 0.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0, -1.0])
    assert pairwise_accuracy(rc, rr) == 0.5                  # the tie at index 2 is not a success
    gc, gr = np.array([0.5, 0.9, 0.1, 0.0]), np.array([0.2, 0.1, 0.1, 0.3])
    # gold ties (index 2) are left out; pair 1 is a correct ordering against the label
    assert gold_order_accuracy(rc, rr, gc, gr) == pytest.approx(1 / 3)
    assert np.isnan(gold_order_accuracy(rc[2:3], rr[2:3], gc[2:3], gr[2:3]))


def test_rankdata_pearson_spearman_against_loops():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, 40).astype(float)                 # many ties
    y = x + rng.normal(0, 2, 40)
    loop = np.array([np.sum(x < v) + (np.sum(x == v) + 1) / 2 for v in x])
    np.testing.assert_allclose(rankdata(x), loop)
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-12)
    assert spearman(x, y) == pytest.approx(np.corrcoef(loop, rankdata(y))[0, 1], rel=1e-12)
    assert spearman(y, np.exp(y)) == pytest.approx(1.0)      # any increasing map has Spearman 1
    assert pearson(y, np.exp(y)) < 0.999
    assert np.isnan(pearson(np.ones(5), np.arange(5.0)))


def test_prompts_whose_samples_are_all_identical_are_dropped(tok):
    """A policy that always writes the same text gives no pair: its prompts disappear entirely."""
    model = TinyGPT(GPTConfig(vocab_size=tok.vocab_size, block_size=24, n_layer=1, n_head=2, n_embd=16), seed=0)
    model.params["wte"][...] = 0.0
    model.params["wte"][tok.eos_id, 0] = 50.0
    model.params["ln_f.w"][...] = 0.0                      # ln_f(x) = ln_f.b = 1 everywhere ...
    model.params["ln_f.b"][...] = 1.0                      # ... so every logit is 0 but EOS's 50: always EOS
    d = make_preference_pairs(model, tok, 5, responses_per_prompt=3, rng=np.random.default_rng(0),
                              label_temperature=0.1, max_new_tokens=4)
    assert len(d) == 0 and d.sequences.shape[0] == 0 and d.n_groups == 0
