"""Reward model: last-token indexing, Bradley-Terry loss and gradients (finite differences, whole
model), normalisation, save/load, a short training run, configuration validation."""
import numpy as np
import pytest

from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.nn.gradcheck import assert_gradients
from minippo.rlhf import reward_model as rmod
from minippo.rlhf import rm_train
from minippo.rlhf.reward_model import (RewardModel, bradley_terry_backward, bradley_terry_forward,
                                       last_token_index)

TINY = dict(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=8, dtype="float64")


def tiny_rm(seed=0, **kw) -> RewardModel:
    """A float64 reward model with non-trivial weights (the GPT-2 init is too close to symmetric)."""
    model = TinyGPT(GPTConfig(**{**TINY, **kw}), seed=seed)
    rng = np.random.default_rng(100 + seed)
    for p in model.params.values():
        p += rng.normal(0.0, 0.3, p.shape)
    return RewardModel(model)


def right_padded(rng, B, T, V=13, min_len=1):
    """Random right-padded rows (lengths min_len..T, one row always full)."""
    lengths = rng.integers(min_len, T + 1, size=B)
    lengths[0] = T
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, rng.integers(1, V, size=(B, T)), 0)
    return ids, mask


# ----------------------------------------------------------------------------------------------
# last_token_index
# ----------------------------------------------------------------------------------------------

def test_last_token_index_on_padded_and_full_rows():
    mask = np.array([[1, 1, 1, 0, 0],      # [t0, t1, EOS, PAD, PAD] -> the EOS
                     [1, 1, 1, 1, 1],      # a full row -> the last column
                     [1, 0, 0, 0, 0],
                     [0, 0, 1, 1, 0]])     # left-padded prompt ++ right-padded response
    np.testing.assert_array_equal(last_token_index(mask), [2, 4, 0, 3])
    assert last_token_index(mask).dtype == np.int64
    # the same as a loop
    rng = np.random.default_rng(0)
    _, m = right_padded(rng, 20, 7)
    np.testing.assert_array_equal(last_token_index(m), [max(np.flatnonzero(row)) for row in m])


def test_last_token_index_rejects_empty_rows_and_bad_values():
    with pytest.raises(ValueError, match="row 1 has no real token"):
        last_token_index(np.array([[1, 0], [0, 0]]))
    with pytest.raises(ValueError, match="attn_mask"):
        last_token_index(np.array([[1, 2]]))


def test_score_is_read_on_the_last_real_token():
    rm = tiny_rm()
    ids = np.array([[3, 4, 2, 0, 0], [3, 4, 5, 6, 2]])
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    _, scalar, _ = rm.model.forward(ids, mask, scalar=True)
    np.testing.assert_allclose(rm.raw_score(ids, mask), [scalar[0, 2], scalar[1, 4]], rtol=0, atol=0)
    # the padding after the EOS does not matter, nor does padding before the prompt
    np.testing.assert_allclose(rm.raw_score(ids[:1, :3], mask[:1, :3]), rm.raw_score(ids[:1], mask[:1]), atol=1e-12)
    left = np.array([[0, 0, 3, 4, 2]])
    np.testing.assert_allclose(rm.raw_score(left, np.array([[0, 0, 1, 1, 1]])), rm.raw_score(ids[:1], mask[:1]),
                               atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Bradley-Terry loss
# ----------------------------------------------------------------------------------------------

def test_bradley_terry_value_against_the_formula():
    rc, rr = np.array([2.0, -1.0, 0.5]), np.array([0.0, 1.0, 0.5])
    loss, _ = bradley_terry_forward(rc, rr)
    expect = np.mean([-np.log(1 / (1 + np.exp(-(c - r)))) for c, r in zip(rc, rr)])
    assert loss == pytest.approx(expect, rel=1e-14)
    assert bradley_terry_forward(np.zeros(4), np.zeros(4))[0] == pytest.approx(np.log(2))
    # stable for huge margins: no overflow, loss ~ |margin| on a wrong pair and ~0 on a right one
    big, _ = bradley_terry_forward(np.array([-1000.0, 1000.0]), np.array([1000.0, -1000.0]))
    assert big == pytest.approx(1000.0)
    d1, d2 = bradley_terry_backward(1.0, bradley_terry_forward(np.array([-800.0]), np.array([800.0]))[1])
    assert np.isfinite(d1).all() and d1[0] == pytest.approx(-1.0) and d2[0] == pytest.approx(1.0)


def test_bradley_terry_gradient_finite_differences():
    rng = np.random.default_rng(1)
    scores = {"r_chosen": rng.normal(0, 2, 7), "r_rejected": rng.normal(0, 2, 7)}
    loss, cache = bradley_terry_forward(scores["r_chosen"], scores["r_rejected"])
    dc, dr = bradley_terry_backward(1.0, cache)
    assert_gradients(lambda: bradley_terry_forward(scores["r_chosen"], scores["r_rejected"])[0],
                     scores, {"r_chosen": dc, "r_rejected": dr}, tol=1e-7)
    np.testing.assert_allclose(dc, -dr)           # only the margin matters
    dc3, _ = bradley_terry_backward(3.0, cache)   # the upstream gradient scales linearly
    np.testing.assert_allclose(dc3, 3 * dc)


def test_bradley_terry_validates_inputs():
    with pytest.raises(ValueError, match="r_rejected"):
        bradley_terry_forward(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="r_chosen"):
        bradley_terry_forward(np.array([np.nan]), np.zeros(1))
    with pytest.raises(ValueError, match="at least one pair"):
        bradley_terry_forward(np.zeros(0), np.zeros(0))


def test_whole_model_gradient_through_the_last_token_scalar():
    """Pairs share responses (row 0 is in three pairs) and rows have different lengths, so the check
    covers the fan-out sum, the length chunks and the last-token placement."""
    rm = tiny_rm(2)
    rng = np.random.default_rng(5)
    seqs, mask = right_padded(rng, 6, 8)
    chosen_idx, rejected_idx = np.array([0, 0, 3, 5, 2]), np.array([1, 2, 0, 4, 5])
    loss, acc, grads = rm.pairs_loss_and_grads(seqs, mask, chosen_idx, rejected_idx, chunk_rows=4)
    assert 0 <= acc <= 1 and loss > 0

    def f():
        r = rm.raw_score(seqs, mask, batch_size=6)                   # one forward, no chunks
        return bradley_terry_forward(r[chosen_idx], r[rejected_idx])[0]

    assert f() == pytest.approx(loss, rel=1e-12)
    # The loss sees only score differences, so the two parameters that shift EVERY score by the same
    # amount have a true gradient of exactly 0: scalar_head.b (adds b) and ln_f.b (adds ln_f.b @ w).
    # A relative error is undefined there; they are checked in absolute terms below.
    shift = ("scalar_head.b", "ln_f.b")
    assert_gradients(f, {k: v for k, v in rm.params.items() if k not in shift},
                     {k: v for k, v in grads.items() if k not in shift}, tol=1e-5)
    result = assert_gradients(f, {k: rm.params[k] for k in shift}, {k: grads[k] for k in shift}, tol=np.inf)
    for k in shift:
        assert np.abs(grads[k]).max() < 1e-12
    assert max(row.max_abs_err for row in result) < 1e-9
    # chunking changes nothing: one chunk of all rows gives the same loss and gradients
    loss1, acc1, grads1 = rm.pairs_loss_and_grads(seqs, mask, chosen_idx, rejected_idx, chunk_rows=100)
    assert loss1 == pytest.approx(loss, rel=1e-12) and acc1 == acc
    for k in grads:
        np.testing.assert_allclose(grads1[k], grads[k], rtol=1e-10, atol=1e-13)


def test_a_row_rejected_in_two_pairs_collects_both_gradients():
    """Row 1 is the REJECTED response of two pairs, (0, 1) and (2, 1): the loss is the mean over pairs, so
    the gradient of both pairs is the mean of each pair's own gradient (pairs_loss_and_grads called on one
    pair at a time: the sum written out). float64 model, a few operations per entry: rtol 1e-10, atol 1e-13
    as the chunking comparison above. Catches a fan-out by fancy-index += (a repeated rejected row receives
    only one of its pairs' gradients)."""
    rm = tiny_rm(3)
    seqs, mask = right_padded(np.random.default_rng(6), 3, 6)
    _, _, both = rm.pairs_loss_and_grads(seqs, mask, np.array([0, 2]), np.array([1, 1]))
    _, _, g_a = rm.pairs_loss_and_grads(seqs, mask, np.array([0]), np.array([1]))
    _, _, g_b = rm.pairs_loss_and_grads(seqs, mask, np.array([2]), np.array([1]))
    for k in both:
        np.testing.assert_allclose(both[k], (g_a[k] + g_b[k]) / 2, rtol=1e-10, atol=1e-13)


def test_accuracy_counts_strict_wins_only():
    """A response paired with itself has r_chosen = r_rejected, the same number bit for bit: a tie, which is
    not a win, so the accuracy (the fraction with r_chosen > r_rejected) is 0; the pair (0, 1) next to it
    is a win exactly when r_0 > r_1. Catches >= for >."""
    rm = tiny_rm(3)
    seqs, mask = right_padded(np.random.default_rng(6), 3, 6)
    r = rm.raw_score(seqs, mask)
    _, acc, _ = rm.pairs_loss_and_grads(seqs, mask, np.array([0]), np.array([0]))
    assert acc == 0.0
    _, acc, _ = rm.pairs_loss_and_grads(seqs, mask, np.array([0, 0]), np.array([0, 1]))
    assert acc == (0.5 if r[0] > r[1] else 0.0)


def test_length_chunks_sort_rows_and_drop_padding_columns():
    mask = np.array([[1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    chunks = rmod.length_chunks(mask, 2)
    assert [(rows.tolist(), T) for rows, T in chunks] == [([1, 3], 2), ([0, 2], 5)]
    rm = tiny_rm(6)
    seqs = np.where(mask == 1, 3, 0)
    np.testing.assert_allclose(rm.raw_score(seqs, mask, batch_size=1), rm.raw_score(seqs, mask, batch_size=4),
                               rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# normalisation, folding, save/load
# ----------------------------------------------------------------------------------------------

def test_normalize_gives_mean_zero_std_one_on_the_reference_samples():
    rm = tiny_rm(3)
    rng = np.random.default_rng(7)
    ref, ref_mask = right_padded(rng, 64, 8)
    raw = rm.raw_score(ref, ref_mask)
    gain, bias = rm.normalize(ref, ref_mask)
    s = rm.score(ref, ref_mask)
    assert s.mean() == pytest.approx(0.0, abs=1e-12) and s.std() == pytest.approx(1.0, rel=1e-12)
    assert gain == pytest.approx(1 / raw.std()) and bias == pytest.approx(-raw.mean() / raw.std())
    # an affine map: the ranking and the raw scores are untouched
    np.testing.assert_array_equal(np.argsort(s), np.argsort(raw))
    np.testing.assert_allclose(rm.raw_score(ref, ref_mask), raw, rtol=0, atol=0)
    # the folded model's scalar head gives the normalised score at the last token
    _, scalar, _ = rm.normalized_model().forward(ref, ref_mask, scalar=True)
    np.testing.assert_allclose(scalar[np.arange(64), last_token_index(ref_mask)], s, atol=1e-12)
    with pytest.raises(ValueError, match="two samples"):
        rm.normalize(ref[:1], ref_mask[:1])


def test_save_load_round_trip(tmp_path):
    rm = tiny_rm(4)
    rng = np.random.default_rng(8)
    seqs, mask = right_padded(rng, 16, 8)
    rm.normalize(seqs, mask)
    rm.save(tmp_path / "rm", extra_state={"note": "hello"})
    rm2, state = RewardModel.load(tmp_path / "rm")
    assert (rm2.gain, rm2.bias) == (rm.gain, rm.bias) and state["note"] == "hello"
    np.testing.assert_array_equal(rm2.score(seqs, mask), rm.score(seqs, mask))
    for k in rm.params:
        np.testing.assert_array_equal(rm2.params[k], rm.params[k])
    # a plain model folder is not a reward model
    from minippo.rlhf.checkpoint import save_model
    save_model(tmp_path / "plain", rm.model)
    with pytest.raises(ValueError, match="no reward model"):
        RewardModel.load(tmp_path / "plain")


# ----------------------------------------------------------------------------------------------
# configuration, model building, a short training run, the CLI
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("n_prompts", 1), ("responses_per_prompt", 1), ("heldout_frac", 1.0), ("heldout_frac", 0.0), ("n_train", 0),
    ("label_temperature", -0.1), ("temperature", 0.0), ("max_new_tokens", 0), ("epochs", 0), ("batch_prompts", 0),
    ("lr", 0.0), ("weight_decay", -1.0), ("max_grad_norm", 0.0), ("init", "random"), ("n_layer", 0),
    ("n_eval", 1), ("n_evals", 0), ("seed", -1), ("n_prompts", 2.5)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        rm_train.RMConfig(**{field: value})


def test_config_cross_checks_and_round_trip():
    with pytest.raises(ValueError, match="`heldout_frac`"):
        rm_train.RMConfig(n_prompts=4, heldout_frac=0.05)          # rounds to zero held-out prompts
    with pytest.raises(ValueError, match="`n_embd`"):
        rm_train.RMConfig(init="sft", n_embd=32)
    cfg = rm_train.RMConfig.quick(seed=3)
    assert rm_train.RMConfig.from_dict(cfg.to_dict()) == cfg


def test_build_reward_model_sizes():
    sft = TinyGPT(GPTConfig(vocab_size=13, block_size=8, n_layer=3, n_head=2, n_embd=8), seed=0)
    rm = rm_train.build_reward_model(rm_train.RMConfig(n_layer=2), sft)
    assert rm.model.cfg.n_layer == 2 and "h.2.ln_1.w" not in rm.params
    np.testing.assert_array_equal(rm.params["h.1.mlp.c_fc.w"], sft.params["h.1.mlp.c_fc.w"])
    assert rm.params["wte"] is not sft.params["wte"]                        # a copy, not the SFT arrays
    assert rm.params["scalar_head.w"].std() > 0.1                           # a new head, std 1/sqrt(C + 1)
    with pytest.raises(ValueError, match="`n_layer`"):
        rm_train.build_reward_model(rm_train.RMConfig(n_layer=4), sft)
    small = rm_train.build_reward_model(rm_train.RMConfig(init="fresh", n_layer=1, n_embd=4, n_head=1), sft)
    assert (small.model.cfg.n_layer, small.model.cfg.n_embd, small.model.cfg.vocab_size) == (1, 4, 13)


@pytest.fixture(scope="module")
def sft_dir(tmp_path_factory):
    """A small SFT run (a couple of seconds): the policy the reward model's pairs come from."""
    from minippo.rlhf.sft import SFTConfig, train_sft
    out = tmp_path_factory.mktemp("sft")
    train_sft(SFTConfig.quick(steps=150, corpus_size=2000, n_samples=0), out, progress=False)
    return out


@pytest.mark.slow      # a training run
def test_quick_training_beats_chance_and_saves_a_normalised_model(sft_dir, tmp_path):
    cfg = rm_train.RMConfig.quick()
    r = rm_train.train_reward_model(cfg, sft_dir, tmp_path / "rm", progress=False)
    assert r["n_heldout_prompts"] == 60 and r["n_train_prompts"] == 340
    # clearly above chance on held-out prompts, against the labels and against the gold order
    assert r["heldout_accuracy"] > 0.62 and r["heldout_gold_accuracy"] > 0.62
    assert r["heldout_loss"] < np.log(2) - 0.05 and r["heldout_loss"] < r["history"][0]["rm/heldout_loss"] - 0.05
    assert r["pearson"] > 0.3 and r["spearman"] > 0.3
    assert r["heldout_accuracy"] <= 1 and r["bayes_accuracy"] > 0.85
    # normalisation: the fresh reference samples score mean 0, std 1
    assert r["fresh_score"].mean() == pytest.approx(0.0, abs=1e-9)
    assert r["fresh_score"].std() == pytest.approx(1.0, rel=1e-9)
    # the saved reward model scores exactly like the trained one; metrics and pairs are on disk
    rm, state = RewardModel.load(tmp_path / "rm" / "model")
    fresh = r["fresh"]
    np.testing.assert_array_equal(rm.score(fresh.sequences, fresh.mask), r["model"].score(fresh.sequences, fresh.mask))
    assert state["rm_config"] == cfg.to_dict() and state["tokenizer"] is not None
    from minippo.io import read_metrics
    hist = read_metrics(tmp_path / "rm" / "metrics.jsonl")
    assert [h["step"] for h in hist] == list(range(len(hist))) and "rm/heldout_accuracy" in hist[-1]
    # the same seed on the same pairs and a smaller n_train reuses the same held-out prompts
    pairs = rm_train.PreferencePairs.load(tmp_path / "rm" / "pairs.npz")
    r2 = rm_train.train_reward_model(rm_train.RMConfig.quick(n_train=40, epochs=1, n_eval=8), sft_dir, tmp_path / "rm2",
                                 progress=False, pairs=pairs)
    np.testing.assert_array_equal(r2["heldout"].sequences, r["heldout"].sequences)
    assert r2["n_train_prompts"] == 40
    with pytest.raises(ValueError, match="`n_train`"):
        rm_train.train_reward_model(rm_train.RMConfig.quick(n_train=500), sft_dir, tmp_path / "rm3", progress=False,
                                pairs=pairs)


def test_cli_runs_from_an_sft_folder(sft_dir, tmp_path, capsys):
    from minippo.cli import main
    assert main(["rm", "--sft", str(sft_dir), "--out", str(tmp_path / "rm"), "--quick", "--no-progress",
                 "--n-prompts", "60", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "held-out accuracy vs the sampled labels" in out and "Pearson" in out
    assert (tmp_path / "rm" / "model" / "tokenizer.json").exists()


def test_an_interrupted_rerun_keeps_the_finished_reward_model_and_its_records(sft_dir, tmp_path, capsys, monkeypatch):
    """Rerunning `minippo rm` into a finished run's folder rewrote metrics.jsonl from its first step: stopped there, the
    finished model/ was left with 60 of its 169 records and Ctrl-C said no checkpoint had been written. The rerun's
    pairs and records are swapped in with its model now, and the line names the finished model."""
    from minippo.cli import main
    out = tmp_path / "rm"
    argv = ["rm", "--sft", str(sft_dir), "--out", str(out), "--quick", "--no-progress", "--n-prompts", "60",
            "--epochs", "1"]
    assert main(argv) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real, calls = RewardModel.pairs_loss_and_grads, []

    def ctrl_c_at_step_3(self, *args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *args)

    monkeypatch.setattr(RewardModel, "pairs_loss_and_grads", ctrl_c_at_step_3)
    assert main(argv) == 130
    assert capsys.readouterr().err == (f"minippo rm: interrupted the reward model in {out}; the last good checkpoint "
                                       f"(the finished reward model) is kept in {out / 'model'}; the same command "
                                       "trains it again\n")
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file() and ".rerun" not in p.name} == before
    monkeypatch.setattr(RewardModel, "pairs_loss_and_grads", real)
    assert main(argv) == 0                                        # the same run again: the same files
    after = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert sorted(after) == sorted(before)
    assert all(after[name] == before[name] for name in ("metrics.jsonl", "pairs.npz", "weights.safetensors"))


def test_a_finished_reward_model_is_replaced_only_from_the_same_sft_model(sft_dir, tmp_path, capsys):
    """`minippo rm --sft OTHER` into a finished reward model's folder with the same flags replaced it: rm_config did
    not record the SFT model, so "the same run" passed. The SHA-256 of the SFT weights is recorded and compared now,
    before anything is written; a run that recorded none (before this) is accepted."""
    import json
    from minippo.cli import main
    from minippo.rlhf.checkpoint import load_model, save_model
    from minippo.rlhf.data.tokenizer import Tokenizer
    model, state = load_model(sft_dir)
    model.params["wte"] += 0.01                                   # another SFT model of the same shape
    save_model(tmp_path / "other", model, tokenizer=Tokenizer.load(state["tokenizer"]))
    out = tmp_path / "rm"
    flags = ["--out", str(out), "--quick", "--no-progress", "--n-prompts", "60", "--epochs", "1"]
    assert main(["rm", "--sft", str(sft_dir), *flags]) == 0
    capsys.readouterr()
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert main(["rm", "--sft", str(tmp_path / "other"), *flags]) == 1
    err = capsys.readouterr().err
    assert f"the reward model in {out / 'model'} was made from another --sft (stored " in err
    assert f"in {sft_dir / 'model'}, given " in err and f"in {tmp_path / 'other'}); nothing was changed. To start " \
        f"fresh, use another folder than {out}\n" in err and err.count("\n") == 1
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    assert main(["rm", "--sft", str(sft_dir / "model"), *flags]) == 0         # the same model by another path
    path = out / "model" / "state.json"                           # a reward model saved before inputs were recorded
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "inputs"}))
    assert main(["rm", "--sft", str(tmp_path / "other"), *flags]) == 0
