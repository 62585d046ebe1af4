"""``minippo import-hf`` without torch: refusals name the config field, safetensors dtypes, folders that are
not minippo exports, and the command's exit codes."""
import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from minippo.cli import main
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rlhf.data.corpus import generate_corpus
from minippo.rlhf.data.tokenizer import Tokenizer
from minippo.rlhf.reward_model import RewardModel
from minippo.rlhf.checkpoint import load_model, save_model
from minippo.rlhf.run.hf import EXTRA_FILE, UnsupportedConfig, export_hf
from minippo.rlhf.run.hf_import import import_hf, read_safetensors


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train(generate_corpus(300, seed=0), vocab_size=140)


@pytest.fixture
def exported(tmp_path, tokenizer):
    """An SFT-like model exported to ``tmp_path / "hf"``; returns ``(model, folder)``."""
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=8)
    model = TinyGPT(cfg, seed=1)
    save_model(tmp_path / "m", model, tokenizer=tokenizer)
    export_hf(tmp_path / "m", tmp_path / "hf", log=lambda s: None)
    return model, tmp_path / "hf"


def edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for k, v in changes.items():
        if v is ...:
            config.pop(k, None)
        else:
            config[k] = v
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("field, value", [
    ("activation_function", "relu"), ("activation_function", "gelu_pytorch_tanh"), ("layer_norm_epsilon", 1e-6),
    ("scale_attn_by_inverse_layer_idx", True), ("reorder_and_upcast_attn", True), ("scale_attn_weights", False),
    ("add_cross_attention", True), ("model_type", "llama"), ("n_inner", 64), ("tie_word_embeddings", False),
    ("architectures", ["GPT2DoubleHeadsModel"]), ("n_head", 3),
])
def test_unrepresentable_configs_are_refused_naming_the_field(exported, tmp_path, field, value):
    _, folder = exported
    edit_config(folder, **{field: value})
    with pytest.raises(UnsupportedConfig, match=field if field != "n_head" else "n_embd.*n_head"):
        import_hf(folder, tmp_path / "out", log=lambda s: None)
    assert not (tmp_path / "out").exists()


def test_unrepresentable_weights_are_refused_naming_the_tensor(exported, tmp_path):
    _, folder = exported
    tensors = load_file(str(folder / "model.safetensors"))
    cases = {
        "untied": {**tensors, "lm_head.weight": tensors["transformer.wte.weight"] + 1},
        "unknown": {**tensors, "transformer.h.0.attn.q_attn.weight": np.zeros((8, 8), np.float32)},
        "missing": {k: v for k, v in tensors.items() if k != "transformer.h.1.mlp.c_fc.bias"},
        "shape": {**tensors, "transformer.wpe.weight": np.zeros((20, 8), np.float32)},
    }
    expect = {"untied": "lm_head.weight differs", "unknown": "q_attn", "missing": "h.1.mlp.c_fc.bias",
              "shape": "wpe.weight has shape"}
    for case, t in cases.items():
        save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(UnsupportedConfig, match=expect[case]):
            import_hf(folder, tmp_path / "out", log=lambda s: None)
    # the tied lm_head a re-save may write, and GPT-2's old attention-mask buffers, are accepted
    save_file({**tensors, "lm_head.weight": tensors["transformer.wte.weight"],
               "transformer.h.0.attn.bias": np.ones((1, 1, 16, 16), np.float32)},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    import_hf(folder, tmp_path / "out", log=lambda s: None)


def test_safetensors_dtypes_are_widened_losslessly(tmp_path):
    values = np.array([1.0, -2.5, 3.140625, 0.0078125], dtype=np.float32)     # exact in 16 bits
    bf16 = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    header = json.dumps({"a": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, len(bf16)]}}).encode()
    (tmp_path / "bf16.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bf16)
    got = read_safetensors(tmp_path / "bf16.safetensors")["a"]
    assert got.dtype == np.float32 and got.shape == (2, 2) and got.tobytes() == values.reshape(2, 2).tobytes()
    save_file({"h": values.astype(np.float16), "d": values.astype(np.float64)}, str(tmp_path / "x.safetensors"))
    got = read_safetensors(tmp_path / "x.safetensors")
    assert got["h"].dtype == np.float32 and np.array_equal(got["h"], values)
    assert got["d"].dtype == np.float64 and np.array_equal(got["d"], values)
    save_file({"i": np.arange(3)}, str(tmp_path / "i.safetensors"))
    with pytest.raises(UnsupportedConfig, match="dtype I64"):
        read_safetensors(tmp_path / "i.safetensors")


def test_a_plain_gpt2_folder_imports_from_its_weights(exported, tmp_path):
    """Without the export's minippo entry (a GPT-2 written by another tool): the weights as they are, the scalar
    head 0, a note of where it came from; a GPT2ForSequenceClassification becomes a reward model with gain 1."""
    model, folder = exported
    edit_config(folder, minippo=..., torch_dtype=..., dtype=...)
    (folder / EXTRA_FILE).unlink()
    (folder / "tokenizer.json").unlink()
    notes = []
    r = import_hf(folder, tmp_path / "out", log=notes.append)
    assert r == {"kind": "model", "out": tmp_path / "out", "restored": False}
    assert any("no tokenizer.json" in n for n in notes)
    back, state = load_model(tmp_path / "out")
    assert state["hf_import"]["architecture"] == "GPT2LMHeadModel" and state["tokenizer"] is None
    for k in model.params:
        expect = np.zeros_like(model.params[k]) if k.startswith("scalar_head") else model.params[k]
        assert np.array_equal(back.params[k], expect), k

    tensors = load_file(str(folder / "model.safetensors"))
    w = np.random.default_rng(0).normal(size=(1, 8)).astype(np.float32)
    save_file({**tensors, "score.weight": w}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    edit_config(folder, architectures=["GPT2ForSequenceClassification"], id2label={"0": "LABEL_0"})
    assert import_hf(folder, tmp_path / "rm", log=notes.append)["kind"] == "reward_model"
    rm, _ = RewardModel.load(tmp_path / "rm")
    assert (rm.gain, rm.bias) == (1.0, 0.0) and np.array_equal(rm.params["scalar_head.w"], w.T)
    edit_config(folder, id2label={"0": "a", "1": "b"})
    with pytest.raises(UnsupportedConfig, match="id2label has 2 labels"):
        import_hf(folder, tmp_path / "rm2", log=notes.append)


def test_a_reward_model_changed_after_export_is_read_as_it_is(tmp_path, tokenizer):
    """Fine-tuned elsewhere (score.weight changed): the original head cannot be restored; the import scores what
    GPT2ForSequenceClassification scores (gain 1, bias 0), and says so."""
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=8)
    rm = RewardModel(TinyGPT(cfg, seed=2), gain=2.0, bias=0.5)
    rm.params["scalar_head.w"][...] = np.random.default_rng(3).normal(size=(8, 1))
    rm.save(tmp_path / "rm", tokenizer=tokenizer)
    export_hf(tmp_path / "rm", tmp_path / "hf", log=lambda s: None)
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    tensors["score.weight"] = tensors["score.weight"] * 1.5
    save_file(tensors, str(tmp_path / "hf" / "model.safetensors"), metadata={"format": "pt"})
    notes = []
    assert not import_hf(tmp_path / "hf", tmp_path / "back", log=notes.append)["restored"]
    assert any("changed after the export" in n for n in notes)
    back, _ = RewardModel.load(tmp_path / "back")
    assert (back.gain, back.bias) == (1.0, 0.0)
    assert np.array_equal(back.params["scalar_head.w"], tensors["score.weight"].T)
    assert np.array_equal(back.params["ln_f.b"], tensors["transformer.ln_f.bias"])


def test_import_refuses_to_overwrite_a_model_without_force_and_another_folder_always(exported, tmp_path):
    """Issue 26 item 1: `import-hf H --out R/sft/model` replaced a run's SFT model; now a model folder is replaced
    only with --force, a run folder or any other folder never."""
    _, folder = exported
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("keep")
    for force in (False, True):
        with pytest.raises(FileExistsError, match="not a minippo model folder"):
            import_hf(folder, tmp_path / "notes", log=lambda s: None, force=force)
    import_hf(folder, tmp_path / "run" / "model", log=lambda s: None)
    (tmp_path / "run" / "metrics.jsonl").write_text("")                     # run/ is now a stage's run folder
    for force in (False, True):
        with pytest.raises(FileExistsError, match="run folder"):
            import_hf(folder, tmp_path / "run", log=lambda s: None, force=force)
    before = {p.name: p.read_bytes() for p in (tmp_path / "run" / "model").iterdir()}
    with pytest.raises(FileExistsError, match=r"holds a model \(the model of the run in .*run\): not overwriting it; "
                       r"--force replaces it"):
        import_hf(folder, tmp_path / "run" / "model", log=lambda s: None)
    assert {p.name: p.read_bytes() for p in (tmp_path / "run" / "model").iterdir()} == before
    import_hf(folder, tmp_path / "run" / "model", log=lambda s: None, force=True)     # a model folder: replaced
    assert (tmp_path / "notes" / "a.txt").read_text() == "keep"


def test_import_command_and_its_errors(exported, tmp_path, capsys):
    _, folder = exported
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "back")]) == 0
    assert "its weights as the folder holds them, the minippo export's scalar head and state restored" in (
        capsys.readouterr().out)
    assert main(["import-hf", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minippo import-hf: error: ") and "nothing" in err and "config.json" in err
    edit_config(folder, activation_function="relu")
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert "activation_function = 'relu'" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    edit_config(folder, activation_function="gelu_new")
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "x")]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_truncated_or_malformed_weights_file_is_one_line_naming_it(exported, tmp_path, capsys):
    """A truncated model.safetensors said "Unterminated string starting at: line 1 column 987" (no file named); a
    header that is not a JSON object was an AttributeError traceback."""
    _, folder = exported
    data = (folder / "model.safetensors").read_bytes()
    header = json.dumps([1, 2]).encode()
    for damaged, why in ((data[:1000], "not a safetensors file, or truncated"), (data[:-8], "are not in the file"),
                         (len(header).to_bytes(8, "little") + header, "must be a JSON object of tensors, got list")):
        (folder / "model.safetensors").write_bytes(damaged)
        assert main(["import-hf", str(folder), "--out", str(tmp_path / "x")]) == 1
        err = capsys.readouterr().err
        assert err == f"minippo import-hf: error: {folder / 'model.safetensors'}: {err.split(': ', 3)[-1]}", err
        assert why in err and err.count("\n") == 1 and not (tmp_path / "x").exists()
