"""Model folders: bitwise round trip of parameters, config, extras and tokenizer; bad input."""
import json

import numpy as np
import pytest

from minippo.io import save_checkpoint
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rlhf.checkpoint import load_model, save_model
from minippo.rlhf.data.corpus import generate_corpus
from minippo.rlhf.data.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train(generate_corpus(300, seed=0), vocab_size=140)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_trip_is_bitwise(tmp_path, tokenizer, dtype):
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=8, dtype=dtype)
    model = TinyGPT(cfg, seed=3)
    for p in model.params.values():            # non-trivial values everywhere (biases, LayerNorm, head)
        p += np.random.default_rng(0).normal(size=p.shape).astype(p.dtype)
    moments = {"m.wte": np.arange(6.0).reshape(2, 3)}
    save_model(tmp_path / "m", model, tokenizer=tokenizer, extra_state={"step": 7, "note": "hi"},
               extra_arrays=moments)
    loaded, state = load_model(tmp_path / "m")
    assert loaded.cfg == cfg
    assert state["gpt_config"] == cfg.to_dict() and state["step"] == 7 and state["note"] == "hi"
    assert set(loaded.params) == set(model.params)
    for k, p in model.params.items():
        assert loaded.params[k].dtype == p.dtype
        assert loaded.params[k].tobytes() == p.tobytes(), k
    np.testing.assert_array_equal(state["extra_arrays"]["m.wte"], moments["m.wte"])
    tok = Tokenizer.load(state["tokenizer"])
    text = "the film was very good ."
    assert tok.encode(text) == tokenizer.encode(text) and tok.vocab_size == tokenizer.vocab_size
    # the loaded model computes the same logits
    idx = np.array([[1, 5, 9, 2]])
    np.testing.assert_array_equal(loaded.forward(idx)[0], model.forward(idx)[0])


def test_without_tokenizer_and_overwrite(tmp_path):
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=1, n_embd=4)
    save_model(tmp_path / "m", TinyGPT(cfg, seed=0), extra_state={"step": 1})
    second = TinyGPT(cfg, seed=1)
    save_model(tmp_path / "m", second, extra_state={"step": 2})          # replaces the first save
    loaded, state = load_model(tmp_path / "m")
    assert state["tokenizer"] is None and state["extra_arrays"] == {} and state["step"] == 2
    np.testing.assert_array_equal(loaded.params["wte"], second.params["wte"])
    assert not (tmp_path / "m.tmp").exists() and not (tmp_path / "m.old").exists()


def test_missing_tokenizer_file_is_reported(tmp_path, tokenizer):
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=8, n_layer=1, n_head=1, n_embd=4)
    folder = save_model(tmp_path / "m", TinyGPT(cfg), tokenizer=tokenizer)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        load_model(folder)


def test_bad_input(tmp_path):
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=1, n_embd=4)
    model = TinyGPT(cfg)
    with pytest.raises(ValueError, match="`extra_state`.*gpt_config"):
        save_model(tmp_path / "a", model, extra_state={"gpt_config": 1})
    with pytest.raises(ValueError, match="`model`"):
        save_model(tmp_path / "a", object())
    with pytest.raises(ValueError, match="`extra_arrays\\['x'\\]`"):
        save_model(tmp_path / "a", model, extra_arrays={"x": [1, 2]})
    model.params["h.0.mlp.c_fc.w"][0, 0] = np.nan
    with pytest.raises(ValueError, match="h.0.mlp.c_fc.w"):
        save_model(tmp_path / "a", model)
    assert not (tmp_path / "a").exists()
    save_checkpoint(tmp_path / "other", {"x": np.zeros(2)}, {"step": 1})   # an io checkpoint, not a model
    with pytest.raises(ValueError, match="not hold a minippo model"):
        load_model(tmp_path / "other")
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "nothing")


def test_state_json_is_readable(tmp_path):
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=1, n_embd=4)
    folder = save_model(tmp_path / "m", TinyGPT(cfg), extra_state={"sft_config": {"lr": 0.001}})
    state = json.loads((folder / "state.json").read_text())
    assert state["gpt_config"]["n_embd"] == 4 and state["sft_config"]["lr"] == 0.001


def test_tokenizer_is_swapped_in_with_the_weights(tmp_path, tokenizer, monkeypatch):
    """A crash after the new folder is written but before it is swapped in leaves the previous
    model *and its tokenizer* loadable: the tokenizer is part of the atomic save."""
    import os

    import minippo.io as mio

    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=8, n_layer=1, n_head=1, n_embd=4)
    first = TinyGPT(cfg, seed=0)
    save_model(tmp_path / "m", first, tokenizer=tokenizer)
    real_replace = os.replace

    def crash_on_swap(src, dst):
        if str(src).endswith(".tmp") and not str(src).endswith(".json.tmp") and "safetensors" not in str(src):
            raise OSError("simulated crash before the swap")
        return real_replace(src, dst)

    monkeypatch.setattr(mio.os, "replace", crash_on_swap)
    with pytest.raises(OSError, match="simulated crash"):
        save_model(tmp_path / "m", TinyGPT(cfg, seed=1), tokenizer=tokenizer)
    monkeypatch.undo()
    model, state = load_model(tmp_path / "m")
    assert all(np.array_equal(model.params[k], first.params[k]) for k in first.params)
    assert Tokenizer.load(state["tokenizer"]).vocab_size == tokenizer.vocab_size


def test_extra_files_cannot_shadow_the_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="`files`"):
        save_checkpoint(tmp_path / "c", {"a": np.zeros(2)}, {}, files={"state.json": "{}"})


def test_load_model_accepts_a_stage_run_folder_and_is_minippo_load_model(tmp_path):
    import minippo
    assert minippo.load_model is load_model
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=1, n_embd=4)
    model = TinyGPT(cfg, seed=2)
    save_model(tmp_path / "R" / "sft" / "model", model, extra_state={"sft_config": {}})
    save_model(tmp_path / "R" / "ppo" / "policy", model, extra_state={"ppo_config": {}})
    save_checkpoint(tmp_path / "R" / "ppo" / "checkpoint", {"x": np.zeros(2)}, {"step": 1})
    for folder in ("R/sft", "R/sft/model", "R/ppo", "R/ppo/policy"):
        loaded, state = load_model(tmp_path / folder)
        assert loaded.params["wte"].tobytes() == model.params["wte"].tobytes(), folder
    assert "ppo_config" in load_model(tmp_path / "R" / "ppo")[1]
    with pytest.raises(FileNotFoundError, match=r"holds no minippo model.*stages .*R/ppo, .*R/sft: name one"):
        load_model(tmp_path / "R")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "nothing")
