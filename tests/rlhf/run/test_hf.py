"""``minippo export`` without torch: GPT-2's names, shapes and orientation; the reward model's folded head;
what does not map; export -> import is bitwise. (Parity with transformers itself: tests/hf/.)"""
import json

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer as HFTokenizer

from minippo.cli import main
from minippo.nn.gpt import GPTConfig, TinyGPT, param_shapes
from minippo.rlhf.data.corpus import generate_corpus
from minippo.rlhf.data.tokenizer import Tokenizer
from minippo.rlhf.reward_model import RewardModel
from minippo.rlhf.checkpoint import load_model, save_model
from minippo.rlhf.run.hf import EXAMPLE_TEXT, EXTRA_FILE, INSTALL, export_hf, fold_score_head, hf_name
from minippo.rlhf.run.hf_import import import_hf


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train(generate_corpus(300, seed=0), vocab_size=140)


def random_model(tokenizer, dtype="float32", seed=0) -> TinyGPT:
    """Non-trivial values in every parameter (biases, LayerNorm, the scalar head)."""
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=8, dtype=dtype,
                    init_std=0.05)
    model = TinyGPT(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    for p in model.params.values():
        p += (0.1 * rng.normal(size=p.shape)).astype(p.dtype)
    return model


def params_equal(a: TinyGPT, b: TinyGPT) -> bool:
    return a.cfg == b.cfg and all(a.params[k].dtype == b.params[k].dtype and a.params[k].tobytes() == b.params[k].tobytes()
                                  for k in param_shapes(a.cfg))


def test_gpt2_names_shapes_and_orientation(tmp_path, tokenizer):
    model = random_model(tokenizer)
    save_model(tmp_path / "sft" / "model", model, tokenizer=tokenizer, extra_state={"sft_config": {"steps": 3}})
    r = export_hf(tmp_path / "sft", tmp_path / "hf", log=lambda s: None)      # the run folder is accepted
    assert r["kind"] == "sft" and r["architecture"] == "GPT2LMHeadModel"
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    C, L = model.cfg.n_embd, model.cfg.n_layer
    expected = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"}
    for i in range(L):
        expected |= {f"transformer.h.{i}.{m}.{w}" for m in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                               "mlp.c_proj") for w in ("weight", "bias")}
    assert set(tensors) == expected                       # no lm_head.weight: tied to wte
    assert tensors["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C)   # Conv1D: (in, out), as ours
    assert tensors["transformer.h.1.mlp.c_proj.weight"].shape == (4 * C, C)
    for name, p in model.params.items():
        if not name.startswith("scalar_head"):
            assert tensors[hf_name(name)].tobytes() == p.tobytes(), name    # renamed, never transposed
    with open(tmp_path / "hf" / "model.safetensors", "rb") as f:     # transformers refuses files without it
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert header["__metadata__"] == {"format": "pt"}
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["model_type"] == "gpt2"
    assert (config["vocab_size"], config["n_positions"], config["n_embd"], config["n_layer"], config["n_head"]) == \
        (tokenizer.vocab_size, 16, 8, 2, 2)
    assert config["activation_function"] == "gelu_new" and config["layer_norm_epsilon"] == 1e-5
    assert config["n_inner"] is None and config["tie_word_embeddings"] is True
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 0)
    assert config["attn_pdrop"] == config["resid_pdrop"] == config["embd_pdrop"] == 0.0
    assert config["minippo"]["state"] == {"sft_config": {"steps": 3}}
    tok_config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast" and tok_config["split_special_tokens"] is True
    assert json.loads((tmp_path / "hf" / "special_tokens_map.json").read_text()) == \
        {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
    extra = load_file(str(tmp_path / "hf" / EXTRA_FILE))
    assert extra["scalar_head.w"].tobytes() == model.params["scalar_head.w"].tobytes()
    readme = (tmp_path / "hf" / "README.md").read_text()
    assert "## What does not map" in readme and "scalar_head (unused by this model)" in readme


def test_the_exported_tokenizer_adds_bos_and_reads_back_as_ours(tmp_path, tokenizer):
    save_model(tmp_path / "m", random_model(tokenizer), tokenizer=tokenizer)
    export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None)
    hf_tok = HFTokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    hf_tok.encode_special_tokens = True                 # what tokenizer_config's split_special_tokens sets
    for text in ["the film was good .", "<eos> is text here", "a"]:
        assert hf_tok.encode(text).ids == tokenizer.encode(text, add_bos=True)
        assert hf_tok.encode(text, add_special_tokens=False).ids == tokenizer.encode(text)


def test_the_reward_models_tokenizer_appends_the_eos_its_card_says_the_score_is_read_at(tmp_path, tokenizer):
    """Issue 26 item 4: the reward model reads its score at the EOS of a finished response; its export's
    tokenizer appends the EOS (the policy's does not: a prompt goes on), and its card says so, with the score of
    one text read at its EOS and at its last word, computed by the reward model at export."""
    rm = RewardModel(random_model(tokenizer), gain=1.7, bias=-0.3)
    rm.save(tmp_path / "rm" / "model", tokenizer=tokenizer)
    export_hf(tmp_path / "rm", tmp_path / "hf", log=lambda s: None)
    hf_tok = HFTokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    hf_tok.encode_special_tokens = True
    for text in ["the film was superb .", "<eos> is text here"]:
        assert hf_tok.encode(text).ids == tokenizer.encode(text, add_bos=True, add_eos=True)
        assert hf_tok.encode(text, add_special_tokens=False).ids == tokenizer.encode(text)
    card = (tmp_path / "hf" / "README.md").read_text()
    rows = [tokenizer.encode(EXAMPLE_TEXT, add_bos=True, add_eos=True), tokenizer.encode(EXAMPLE_TEXT, add_bos=True)]
    with_eos, without = rm.score(*tokenizer.pad_right(rows))
    assert "## Where the score is read: at the EOS" in card and "`tok(texts)` gives `<bos> text <eos>`" in card
    assert f"`{EXAMPLE_TEXT}` scores {with_eos:+.2f} read at its EOS (its score) and {without:+.2f} read at its " \
           "last word" in card
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in card and "CUDA build" in card
    save_model(tmp_path / "m", random_model(tokenizer), tokenizer=tokenizer)
    export_hf(tmp_path / "m", tmp_path / "policy", log=lambda s: None)
    policy_tok = HFTokenizer.from_file(str(tmp_path / "policy" / "tokenizer.json"))
    assert policy_tok.encode(EXAMPLE_TEXT).ids == tokenizer.encode(EXAMPLE_TEXT, add_bos=True)     # no <eos>
    assert "Where the score is read" not in (tmp_path / "policy" / "README.md").read_text()


def test_the_install_line_names_the_hf_extra_as_setup_cfg_declares_it():
    """The export's README and minippo's README say what the `hf` extra asks for: its lines in setup.cfg."""
    import configparser
    from pathlib import Path

    import minippo
    cfg = configparser.ConfigParser()
    cfg.read(Path(minippo.__file__).resolve().parents[1] / "setup.cfg")
    for requirement in cfg["options.extras_require"]["hf"].split():
        assert requirement in INSTALL, requirement


def test_reward_model_head_is_folded_exactly(tmp_path, tokenizer):
    """GPT-2's bias-free score head on the shifted ln_f.bias gives our normalised score (a NumPy TinyGPT
    computing w' . ln_f'(h) stands in for GPT2ForSequenceClassification here; tests/hf/ runs the real one)."""
    rm = RewardModel(random_model(tokenizer), gain=1.7, bias=-0.3)
    rm.save(tmp_path / "rm" / "model", tokenizer=tokenizer)
    export_hf(tmp_path / "rm", tmp_path / "hf", log=lambda s: None)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["GPT2ForSequenceClassification"]
    t = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert t["score.weight"].shape == (1, 8)
    hf_like = rm.model.copy()
    hf_like.params["ln_f.b"][...] = t["transformer.ln_f.bias"]
    hf_like.params["scalar_head.w"][...] = t["score.weight"].T
    hf_like.params["scalar_head.b"][...] = 0.0
    ids, mask = tokenizer.pad_right(tokenizer.encode_batch(["the film", "a bad film was it", "good"], add_bos=True))
    np.testing.assert_allclose(RewardModel(hf_like).score(ids, mask), rm.score(ids, mask), atol=1e-5)


def test_fold_score_head_is_the_smallest_shift_and_refuses_a_zero_head():
    rng = np.random.default_rng(1)
    beta, w, b = rng.normal(size=5), rng.normal(size=(5, 1)), np.array([0.4])
    w2, beta2 = fold_score_head(beta, w, b, 2.0, -1.0, "float64")
    np.testing.assert_allclose(w2[0], 2.0 * w[:, 0])
    delta = beta2 - beta
    np.testing.assert_allclose(w2[0] @ delta, 2.0 * 0.4 - 1.0)                  # w' . delta = c = gain b + bias
    np.testing.assert_allclose(delta, (w2[0] @ delta) * w2[0] / (w2[0] @ w2[0]))   # along w': the smallest shift
    with pytest.raises(ValueError, match="scalar_head.w is all zeros"):
        fold_score_head(beta, np.zeros((5, 1)), b, 1.0, 0.0, "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["sft", "policy_shared", "reward_model"])
def test_export_then_import_is_bitwise(tmp_path, tokenizer, kind, dtype):
    model = random_model(tokenizer, dtype)
    src = tmp_path / "src"
    if kind == "reward_model":
        RewardModel(model, gain=0.8, bias=0.25).save(src, tokenizer=tokenizer, extra_state={"rm_config": {"lr": 1e-3}})
    else:
        state = {"ppo_config": {"critic": "shared"}, "iteration": 3} if kind == "policy_shared" else {"sft_config": {}}
        save_model(src, model, tokenizer=tokenizer, extra_state=state)
    lines = []
    r = export_hf(src, tmp_path / "hf", log=lines.append)
    if kind == "policy_shared":
        assert any("value head of the shared critic" in line for line in lines)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["minippo"]["not_mapped"] == r["not_mapped"]
    back = import_hf(tmp_path / "hf", tmp_path / "back", log=lines.append)
    assert back["restored"]
    a, sa = load_model(src)
    b, sb = load_model(tmp_path / "back")
    assert params_equal(a, b)
    assert (src / "state.json").read_text() == (tmp_path / "back" / "state.json").read_text()
    assert (src / "tokenizer.json").read_bytes() == (tmp_path / "back" / "tokenizer.json").read_bytes()
    if kind == "reward_model":
        rm_a, rm_b = RewardModel.load(src)[0], RewardModel.load(tmp_path / "back")[0]
        ids, mask = tokenizer.pad_right(tokenizer.encode_batch(["the film", "so bad"], add_bos=True, add_eos=True))
        assert rm_a.score(ids, mask).tobytes() == rm_b.score(ids, mask).tobytes()


def test_export_refuses_to_overwrite_another_folder_and_replaces_an_earlier_export_only_with_force(tmp_path,
                                                                                                 tokenizer):
    """Issue 26 item 1: an earlier export may have been trained further elsewhere (transformers keeps our
    `minippo` config entry): it is replaced only with --force; any other folder never, even with it."""
    save_model(tmp_path / "m", random_model(tokenizer), tokenizer=tokenizer)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    for force in (False, True):
        with pytest.raises(FileExistsError, match="not an earlier minippo export"):
            export_hf(tmp_path / "m", tmp_path / "other", log=lambda s: None, force=force)
    (tmp_path / "other" / "config.json").write_text("garbage")            # a bad config.json: the file is named
    with pytest.raises(FileExistsError, match=r"other/config.json: not valid JSON"):
        export_hf(tmp_path / "m", tmp_path / "other", log=lambda s: None, force=True)
    assert (tmp_path / "other" / "notes.txt").read_text() == "keep me"
    export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None)
    before = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}
    with pytest.raises(FileExistsError, match="holds an earlier export .*--force replaces it"):
        export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None)
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before
    export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None, force=True)   # an earlier export: replaced
    assert not (tmp_path / "hf.tmp").exists()


def test_a_forced_export_stopped_while_deleting_the_earlier_one_leaves_a_whole_export(tmp_path, tokenizer,
                                                                                         monkeypatch):
    """--force deleted the earlier export in place, then swapped the new one in: stopped in between (config.json
    already deleted), OUT_DIR was half an export that the next --force refused as "not an earlier minippo export"."""
    import shutil

    save_model(tmp_path / "m", random_model(tokenizer), tokenizer=tokenizer)
    export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None)
    real = shutil.rmtree

    def stopped_while_deleting(path, *args, **kw):
        (path / "config.json").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", stopped_while_deleting)
    with pytest.raises(KeyboardInterrupt):
        export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None, force=True)
    monkeypatch.setattr(shutil, "rmtree", real)
    assert "minippo" in json.loads((tmp_path / "hf" / "config.json").read_text())    # the new export, whole
    export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "m"]


def test_an_export_stopped_at_the_swap_keeps_the_only_whole_copy(tmp_path, tokenizer, monkeypatch):
    """``<out>.old`` without ``<out>``: an export stopped between its two renames, ``.old`` the only whole
    export; the next export deleted it before its own swap (stopped there too, nothing was left)."""
    import os
    save_model(tmp_path / "m", random_model(tokenizer), tokenizer=tokenizer)
    export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None)
    before = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}
    os.replace(tmp_path / "hf", tmp_path / "hf.old")
    real = os.replace

    def stopped_at_the_swap(src, dst):
        if os.path.isdir(src):
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(os, "replace", stopped_at_the_swap)
    with pytest.raises(KeyboardInterrupt):
        export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None)
    monkeypatch.setattr(os, "replace", real)
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf.old").iterdir()} == before
    export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None)
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "m"]


def test_export_into_the_current_folder(tmp_path, tokenizer, monkeypatch):
    """``--hf .`` in an empty folder ("PosixPath('.') has an empty name")."""
    save_model(tmp_path / "m", random_model(tokenizer), tokenizer=tokenizer)
    (tmp_path / "hf").mkdir()
    monkeypatch.chdir(tmp_path / "hf")
    export_hf(tmp_path / "m", ".", log=lambda s: None)
    export_hf(tmp_path / "m", ".", log=lambda s: None, force=True)
    assert "minippo" in json.loads((tmp_path / "hf" / "config.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "m"]


def test_export_command_and_its_errors(tmp_path, tokenizer, capsys):
    save_model(tmp_path / "ppo" / "policy", random_model(tokenizer), tokenizer=tokenizer,
               extra_state={"ppo_config": {"critic": "separate"}})
    assert main(["export", str(tmp_path / "ppo"), "--hf", str(tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    assert "not mapped: scalar_head" in out and "AutoModelForCausalLM" in out
    for bad, rc in ((tmp_path / "nothing", 2), (tmp_path / "hf", 2)):       # missing; a folder that is no model
        assert main(["export", str(bad), "--hf", str(tmp_path / "x")]) == rc
        err = capsys.readouterr().err
        assert err.startswith("minippo export: error: ") and str(bad) in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "a.txt").write_text("x")
    assert main(["export", str(tmp_path / "ppo"), "--hf", str(tmp_path / "taken")]) == 2     # a refusal: usage
    assert "not an earlier minippo export" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "ppo"), "--hf", str(tmp_path / "hf")]) == 2
    assert "--force replaces it" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "ppo"), "--hf", str(tmp_path / "hf"), "--force"]) == 0
    capsys.readouterr()
    assert main(["export", str(tmp_path / "ppo")]) == 2                       # --hf is required: a usage error
    assert capsys.readouterr().err == "minippo export: error: the following arguments are required: --hf\n"
