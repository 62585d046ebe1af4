"""SFT: learns below the unigram baseline, resumes exactly, stops on NaN keeping the checkpoint, validates."""
import json
import math

import numpy as np
import pytest

from minippo.cli import main as cli
from minippo.io import read_metrics
from minippo.nn.gpt import TinyGPT
from minippo.rlhf.checkpoint import load_model
from minippo.rlhf.data.batches import batch_indices, lm_batch, unigram_loss
from minippo.rlhf.sft import SFTConfig, train_sft
from minippo.rlhf.data.tokenizer import Tokenizer

# a few seconds: 1200 sentences, V 160, one block of width 32
TINY = dict(corpus_size=1200, heldout_frac=0.1, vocab_size=160, n_layer=1, n_head=2, n_embd=32, batch_size=16,
            steps=60, lr=5e-3, warmup_steps=5, eval_interval=20, ckpt_interval=20, n_samples=8)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft")
    return out, train_sft(SFTConfig(**{**TINY, "steps": 150}), out, progress=False)


def test_learns_below_the_unigram_baseline(run):
    out, r = run
    V = r["tokenizer"].vocab_size
    assert abs(r["initial_loss"] - math.log(V)) < 0.05 and r["ln_V"] == math.log(V)   # a fresh model is ~uniform
    assert r["heldout_loss"] < r["unigram_loss"] - 1.0 < r["initial_loss"] - 1.0
    evals = [x["eval/heldout_loss"] for x in r["history"] if "eval/heldout_loss" in x]
    assert evals[0] == r["initial_loss"] and evals[-1] == r["heldout_loss"]
    assert all(b < a for a, b in zip(evals, evals[1:]))                           # held-out loss keeps falling
    train = [x["train/loss"] for x in r["history"] if "train/loss" in x]
    assert len(train) == 150 and np.mean(train[-20:]) < np.mean(train[:20]) - 1.5
    assert len(r["samples"]) == 8 and all(isinstance(t, str) and np.isfinite(g) for t, g in r["samples"])
    assert 0 <= r["sample_penalty_free"] <= 1 and 0 <= r["sample_ended"] <= 1
    # which samples produced an EOS (the others stopped at the budget: lessons mark them truncated)
    assert len(r["sample_ended_each"]) == 8 and np.mean(r["sample_ended_each"]) == r["sample_ended"]


def test_run_folder(run):
    out, r = run
    assert read_metrics(out / "metrics.jsonl") == r["history"]
    model, state = load_model(out / "model")
    for k, p in r["model"].params.items():
        assert model.params[k].tobytes() == p.tobytes()
    assert state["sft_config"] == r["config"].to_dict() and state["heldout_loss"] == r["heldout_loss"]
    assert Tokenizer.load(state["tokenizer"]).to_str() == r["tokenizer"].to_str()
    _, ckpt = load_model(out / "checkpoint")
    assert ckpt["step"] == 150 and set(ckpt["extra_arrays"]) == {f"{m}.{k}" for m in "mv" for k in model.params}


def test_unigram_loss_matches_a_direct_count():
    train = [np.array([1, 5, 5, 2]), np.array([1, 6, 2])]
    held = [np.array([1, 5, 7, 2])]
    counts = {5: 2, 2: 2, 6: 1}                                  # the targets: everything after <bos>
    N, V = 5, 8
    p = lambda w: (counts.get(w, 0) + 1) / (N + V)
    assert unigram_loss(train, held, V) == pytest.approx(-np.mean(np.log([p(5), p(7), p(2)])))


def test_lm_batch_shifts_and_masks():
    idx, targets, mask, attn = lm_batch([np.array([1, 7, 8, 2]), np.array([1, 9, 2])])
    np.testing.assert_array_equal(idx, [[1, 7, 8], [1, 9, 2]])
    np.testing.assert_array_equal(targets, [[7, 8, 2], [9, 2, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [1, 1, 0]])
    np.testing.assert_array_equal(attn, [[1, 1, 1], [1, 1, 1]])


def test_batches_are_a_function_of_seed_and_step():
    a = [batch_indices(10, 3, s, (0, 2)) for s in range(6)]
    assert np.array_equal(a[4], batch_indices(10, 3, 4, (0, 2)))
    assert sorted(np.concatenate(a[:3]).tolist()) == sorted(set(np.concatenate(a[:3]).tolist()))  # no repeats in an epoch
    assert not np.array_equal(a[0], a[3])                        # a new permutation each epoch


def test_resume_equals_uninterrupted(tmp_path, monkeypatch):
    cfg = SFTConfig(**TINY)
    full = train_sft(cfg, tmp_path / "full", progress=False)

    real = TinyGPT.lm_loss_and_grads
    calls = {"n": 0}

    def crash_at_step_47(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 47:
            raise KeyboardInterrupt                              # "the laptop lid was closed"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TinyGPT, "lm_loss_and_grads", crash_at_step_47)
    with pytest.raises(KeyboardInterrupt):
        train_sft(cfg, tmp_path / "cut", progress=False)
    monkeypatch.setattr(TinyGPT, "lm_loss_and_grads", real)
    assert len(read_metrics(tmp_path / "cut" / "metrics.jsonl")) == 1 + 46   # step 0 + steps 1..46
    resumed = train_sft(cfg, tmp_path / "cut", resume=True, progress=False)
    assert resumed["resumed_from"] == 40                        # the last checkpoint before the crash
    assert resumed["history"] == full["history"]                # same losses, same lr, same grad norms
    for k, p in full["model"].params.items():
        assert resumed["model"].params[k].tobytes() == p.tobytes(), k
    assert resumed["samples"] == full["samples"]


def test_resume_with_another_config_is_refused(tmp_path):
    train_sft(SFTConfig(**{**TINY, "steps": 20}), tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"another configuration: lr \(stored 0.005, requested 0.001\)"):
        train_sft(SFTConfig(**{**TINY, "steps": 20, "lr": 1e-3}), tmp_path, resume=True, progress=False)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    real = TinyGPT.lm_loss_and_grads
    calls = {"n": 0}

    def nan_at_step_27(self, *args, **kwargs):
        calls["n"] += 1
        loss, grads = real(self, *args, **kwargs)
        return (float("nan") if calls["n"] == 27 else loss), grads

    monkeypatch.setattr(TinyGPT, "lm_loss_and_grads", nan_at_step_27)
    with pytest.raises(ValueError, match=r"`train/loss` is nan at step 27.*last good checkpoint \(step 20\)"):
        train_sft(SFTConfig(**TINY), tmp_path, progress=False)
    model, state = load_model(tmp_path / "checkpoint")
    assert state["step"] == 20 and all(np.isfinite(p).all() for p in model.params.values())
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("field, value", [
    ("corpus_size", 5), ("heldout_frac", 0.0), ("heldout_frac", 0.7), ("seed", -1), ("vocab_size", 50),
    ("block_size", 4), ("n_layer", 0), ("n_embd", 30), ("dtype", "float16"), ("batch_size", 0), ("steps", 0),
    ("lr", 0.0), ("warmup_steps", 10_000), ("min_lr_frac", 1.5), ("weight_decay", -0.1), ("grad_clip", 0.0),
    ("eval_interval", 0), ("ckpt_interval", 0), ("n_samples", -1), ("sample_temperature", 0.0), ("steps", 2.5),
])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        SFTConfig(**{field: value})


def test_cli_runs_and_resumes(tmp_path, capsys):
    args = ["sft", "--quick", "--steps", "30", "--corpus-size", "600", "--out", str(tmp_path), "--no-progress"]
    assert cli(args) == 0
    out = capsys.readouterr().out
    assert "initial held-out loss" in out and "ln V" in out and "unigram baseline" in out and "gold" in out
    assert cli(["sft", "--resume", "--out", str(tmp_path), "--no-progress"]) == 0   # already finished: no steps
    assert "resuming" in capsys.readouterr().out
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 31


# ---- the run folder's rules (issue 13) -----------------------------------------------------------

@pytest.fixture
def stopped_sft(tmp_path, monkeypatch):
    """An SFT run of 60 steps interrupted at step 47 (checkpoints at 20 and 40)."""
    real = TinyGPT.lm_loss_and_grads
    calls = {"n": 0}

    def crash_at_47(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 47:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TinyGPT, "lm_loss_and_grads", crash_at_47)
    with pytest.raises(KeyboardInterrupt) as info:
        train_sft(SFTConfig(**TINY), tmp_path, progress=False)
    monkeypatch.setattr(TinyGPT, "lm_loss_and_grads", real)
    assert info.value.minippo_message == (f"interrupted SFT in {tmp_path}; the last good checkpoint (step 40) is kept "
                                          f"in {tmp_path / 'checkpoint'}; the same command resumes from it")
    return tmp_path


def test_a_resumed_sft_run_says_so_and_a_fresh_one_never_overwrites(stopped_sft):
    with pytest.raises(FileExistsError, match="already holds an SFT run .*nothing was overwritten"):
        train_sft(SFTConfig(**TINY), stopped_sft, progress=False)              # resume=False
    said = []
    r = train_sft(SFTConfig(**TINY), stopped_sft, resume=True, progress=False, log=said.append)
    assert said == [f"SFT: resuming {stopped_sft} from its checkpoint at step 40 of 60"] and r["resumed_from"] == 40


def test_a_crafted_sft_checkpoint_or_state_is_refused_before_metrics_are_rewritten(stopped_sft):
    from safetensors.numpy import load_file, save_file
    from minippo.io import CorruptFileError
    w = stopped_sft / "checkpoint" / "weights.safetensors"
    good = w.read_bytes()
    metrics = (stopped_sft / "metrics.jsonl").read_bytes()
    arrays = load_file(str(w))
    arrays["extra/v.wte"] = np.zeros(1, np.float32)                             # an Adam moment of shape (1,)
    save_file(arrays, str(w))
    with pytest.raises(CorruptFileError, match=r"weights.safetensors: tensor 'extra/v.wte' has shape \(1,\)"):
        train_sft(SFTConfig(**TINY), stopped_sft, resume=True, progress=False)
    w.write_bytes(good)
    s = stopped_sft / "checkpoint" / "state.json"
    state = s.read_text()
    for entry, value, match in [("step", -3, r"`step` must be in \[1, 60\]"), ("step", 30, "`optimizer.t` must equal"),
                                ("initial_loss", "nan", "`initial_loss` must be a number")]:
        s.write_text(state.replace(f'"{entry}": ', f'"{entry}": {json.dumps(value)}, "was": ', 1))
        with pytest.raises(CorruptFileError, match=f"checkpoint/state.json: {match}"):
            train_sft(SFTConfig(**TINY), stopped_sft, resume=True, progress=False)
        assert (stopped_sft / "metrics.jsonl").read_bytes() == metrics            # issue 13 item 6: not rewritten
    s.write_text(state)


def test_a_deleted_or_torn_metrics_file_is_warned_about(stopped_sft):
    from minippo.io import RunWarning
    with open(stopped_sft / "metrics.jsonl", "a") as f:
        f.write('{"step": 47, "train/lo')
    with pytest.warns(RunWarning, match="dropped a torn last line"):
        r = train_sft(SFTConfig(**TINY), stopped_sft, resume=True, progress=False, log=lambda *a: None)
    assert [x["step"] for x in r["history"]] == list(range(61))


def test_the_cli_resumes_the_same_flags_and_refuses_others(tmp_path, capsys):
    args = ["sft", "--quick", "--steps", "30", "--corpus-size", "600", "--out", str(tmp_path), "--no-progress"]
    assert cli(args) == 0
    assert cli(args) == 0                                                   # finished: resumed, nothing to do
    assert "SFT: resuming" in capsys.readouterr().out
    assert cli(args[:-1] + ["--seed", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("minippo sft: error: --out: the SFT run in") and "seed (stored 0, requested 1)" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_sft_into_another_kind_of_runs_folder_writes_nothing(tmp_path, capsys):
    """`minippo sft --out <a PPO run>` resumed it (the command always may), trained a tokenizer and wrote tokenizer.json
    into the PPO run's folder before its checkpoint was refused: refused before anything is written now."""
    from minippo.io import save_checkpoint
    ppo_run = tmp_path / "ppo"
    save_checkpoint(ppo_run / "checkpoint", {"actor/wte": np.zeros((2, 2), np.float32)},
                    {"format": "minippo.ppo/3", "ppo_config": {"seed": 0}, "iteration": 1})
    (ppo_run / "config.json").write_text('{"seed": 0}')
    (ppo_run / "metrics.jsonl").write_text('{"iteration": 0}\n')
    before = {p.relative_to(ppo_run): p.read_bytes() for p in ppo_run.rglob("*") if p.is_file()}
    assert cli(["sft", "--quick", "--out", str(ppo_run), "--no-progress"]) == 2
    assert capsys.readouterr().err.endswith(f"{ppo_run} holds something other than an SFT run (its checkpoint is of "
                                            "format 'minippo.ppo/3'): use another folder; nothing was written\n")
    assert {p.relative_to(ppo_run): p.read_bytes() for p in ppo_run.rglob("*") if p.is_file()} == before


def test_sft_into_an_sft_run_of_another_config_names_the_fields_and_writes_nothing(tmp_path, capsys):
    """A checkpoint of another LM run (another config, or rlvr's task SFT) is refused naming the fields, before
    tokenizer.json is written (it was refused by the resume, after the tokenizer)."""
    import json
    out = tmp_path / "sft"
    assert cli(["sft", "--quick", "--out", str(out), "--no-progress", "--steps", "25"]) == 0
    (out / "model").rename(tmp_path / "model")                    # an interrupted run: its checkpoint stays
    capsys.readouterr()
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert cli(["sft", "--quick", "--out", str(out), "--no-progress", "--steps", "25", "--seed", "1"]) == 1      # a mismatch, as every command reports one
    err = capsys.readouterr().err
    assert f"the SFT run in {out} was made with another configuration: seed (stored 0, requested 1)" in err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    state = out / "checkpoint" / "state.json"
    data = json.loads(state.read_text())
    data["sft_config"]["carry_slip"] = 0.5                          # rlvr's task SFT has fields SFT has not
    state.write_text(json.dumps(data))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert cli(["sft", "--quick", "--out", str(out), "--no-progress", "--steps", "25"]) == 1
    assert "carry_slip" in capsys.readouterr().err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
