"""Issue 13 on the PPO trainer's run folder: a crafted checkpoint is refused naming the file and the tensor before
anything is assigned; a bad state.json entry or a corrupt file stops a resume before metrics.jsonl is touched; a
folder holding a run is never overwritten; a deleted metrics file and a torn last line are warned about; a NaN
stop names the parameter and what is on disk; values that would fail later are refused at once."""
import json
import warnings

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.rlhf.ppo_helpers import tiny_config, world
from minippo.io import STATE, WEIGHTS, CorruptFileError, RunWarning, read_metrics
from minippo.nn.gpt import GPTConfig
from minippo.rlhf.metrics import without_timing
from minippo.rlhf.run.trainer import PPOTrainer
from minippo.runs import ConfigMismatch


@pytest.fixture
def stopped(tmp_path):
    """A run folder stopped after 2 of 4 iterations (checkpoint at iteration 2), and the trainer's world."""
    sft, rm, tok = world()
    cfg = tiny_config(iterations=4, checkpoint_every=2)
    tr = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path)
    tr.train(until=2)
    tr.close()
    return tmp_path, cfg, (sft, rm, tok)


def snapshot(folder):
    """Every file's bytes (but the lock file): what a refused resume must leave as it was."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != ".minippo.lock"}


def edit_weights(folder, change):
    path = folder / "checkpoint" / WEIGHTS
    arrays = load_file(str(path))
    change(arrays)
    save_file(arrays, str(path))


C = 16          # the tiny world's width


@pytest.mark.parametrize("change, match", [
    (lambda a: a.update({"actor/wte": a["actor/wte"][:1]}), r"'actor/wte' has shape \(1, 16\), expected \(\d+, 16\)"),
    (lambda a: a.update({"actor/ln_f.w": np.ones(C, np.int32)}), "'actor/ln_f.w' has dtype I32, expected float32"),
    (lambda a: a.update({"opt_actor/m.ln_f.b": np.zeros(1, np.float32)}), r"'opt_actor/m.ln_f.b' has shape \(1,\)"),
    (lambda a: a.pop("critic/scalar_head.b"), "tensor 'critic/scalar_head.b' is missing"),
    (lambda a: a.update({"junk": np.zeros((512, 1024), np.float32)}), "unexpected tensor 'junk'"),
    (lambda a: a["actor/wpe"].__setitem__((3, 2), np.nan), r"'actor/wpe' holds nan at \(3, 2\)"),
])
def test_a_crafted_checkpoint_is_refused_before_anything_is_assigned(stopped, change, match):
    folder, cfg, (sft, rm, tok) = stopped
    edit_weights(folder, change)
    before = snapshot(folder)
    with pytest.raises(CorruptFileError, match=match) as info:
        PPOTrainer(cfg, sft, rm, tok, out_dir=folder, resume=True)
    assert str(info.value).startswith(str(folder / "checkpoint" / WEIGHTS) + ": ")
    assert snapshot(folder) == before                            # metrics.jsonl and the rest untouched


@pytest.mark.parametrize("entry, value, match", [
    ("iteration", -5, r"`iteration` must be in \[1, 4\], got -5"),
    ("iteration", "x", "`iteration` must be an integer"),
    ("iteration", 99, r"`iteration` must be in \[1, 4\], got 99"),
    ("kl_coef", float("nan"), "`kl_coef` must be a number, got nan"),
    ("rng", {"bit_generator": "os", "state": {}}, "`rng` must be the state of one of numpy's bit generators"),
    ("value_norm", {"enabled": False, "mean": 0.0, "var": -1.0, "count": 0.0}, "`value_norm.var` must be in"),
    ("opt_actor", {"t": 2, "lr": float("inf")}, r"`scalars\['lr'\]` must be a finite number"),
    ("ppo_config", {"learning_rate": 1.0}, "unknown"),
    ("kl_old_lr", 1e-3, r"`kl_old_lr` must be null \(no KL-adapted learning rate in this run\), got 0.001"),
])
def test_a_bad_state_entry_stops_the_resume_before_any_file_is_rewritten(stopped, entry, value, match):
    """Issue 13 item 6: before, a bad `iteration` wiped metrics.jsonl and then failed."""
    folder, cfg, (sft, rm, tok) = stopped
    path = folder / "checkpoint" / STATE
    state = json.loads(path.read_text())
    state[entry] = value
    path.write_text(json.dumps(state))
    before = snapshot(folder)
    with pytest.raises(CorruptFileError, match=match) as info:
        PPOTrainer(cfg, sft, rm, tok, out_dir=folder, resume=True)
    assert str(info.value).startswith(f"{path}: ")
    assert snapshot(folder) == before and len(read_metrics(folder / "metrics.jsonl")) == 2


def test_corrupt_checkpoint_files_are_one_line_naming_the_file(stopped):
    folder, cfg, (sft, rm, tok) = stopped
    good = (folder / "checkpoint" / STATE).read_text()
    (folder / "checkpoint" / STATE).write_text('{"iteration": ')
    with pytest.raises(CorruptFileError, match=r"checkpoint/state.json: not valid JSON"):
        PPOTrainer(cfg, sft, rm, tok, out_dir=folder, resume=True)
    (folder / "checkpoint" / STATE).write_text(good)
    (folder / "checkpoint" / WEIGHTS).write_bytes(b"\x00" * 5)
    with pytest.raises(CorruptFileError, match=r"checkpoint/weights.safetensors: not a readable safetensors file"):
        PPOTrainer(cfg, sft, rm, tok, out_dir=folder, resume=True)


def test_a_torn_or_missing_metrics_file_warns_and_the_resume_equals_an_uninterrupted_run(stopped, tmp_path_factory):
    folder, cfg, (sft, rm, tok) = stopped
    full = tmp_path_factory.mktemp("full")
    PPOTrainer(cfg, sft, rm, tok, out_dir=full).train()
    with open(folder / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 2, "objective/kl": 0.1')             # a crash in the middle of iteration 2's write
    with pytest.warns(RunWarning, match="dropped a torn last line 3"):
        tr = PPOTrainer(cfg, sft, rm, tok, out_dir=folder, resume=True)
    tr.train()
    tr.close()
    a = [without_timing(r) for r in read_metrics(full / "metrics.jsonl")]
    assert [without_timing(r) for r in read_metrics(folder / "metrics.jsonl")] == a
    # a deleted metrics file: the resume goes on (into a partial file) and says what is lost
    (folder / "metrics.jsonl").unlink()
    with pytest.warns(RunWarning, match=r"metrics.jsonl is missing: the records of iterations 0-3 are lost"):
        PPOTrainer(cfg.replace(iterations=5), sft, rm, tok, out_dir=folder, resume=True).close()


def test_a_folder_holding_a_run_is_never_overwritten_or_resumed_with_another_config(stopped):
    folder, cfg, (sft, rm, tok) = stopped
    before = snapshot(folder)
    with pytest.raises(FileExistsError, match=f"{folder} already holds a PPO run .*nothing was overwritten"):
        PPOTrainer(cfg, sft, rm, tok, out_dir=folder)                       # resume=False on an existing run
    with pytest.raises(ConfigMismatch, match=r"seed \(stored 0, requested 3\), temperature \(stored 1.0, requested 0.5\)"):
        PPOTrainer(cfg.replace(seed=3, temperature=0.5), sft, rm, tok, out_dir=folder, resume=True)
    assert snapshot(folder) == before
    # what a resume may change: the number of iterations and the checkpoint cadence; a changed count under
    # a decaying lr schedule says that the run is then no uninterrupted run's
    with pytest.warns(RunWarning, match=r"started for 4 iterations and resumes for 6: its linear lr schedule"):
        PPOTrainer(cfg.replace(iterations=6, checkpoint_every=3), sft, rm, tok, out_dir=folder, resume=True).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunWarning)                            # the same count: no warning
        PPOTrainer(cfg.replace(checkpoint_every=3), sft, rm, tok, out_dir=folder, resume=True).close()


def test_a_refused_shorter_resume_does_not_say_that_it_resumes(stopped):
    """`minippo ppo --iterations 1` on a run checkpointed at iteration 2 warned "resumes for 1 ... follows the new
    count from here on", then refused: the warning comes once everything is checked now."""
    folder, cfg, (sft, rm, tok) = stopped
    before = snapshot(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunWarning)
        with pytest.raises(CorruptFileError, match=r"`iteration` must be in \[1, 1\], got 2"):
            PPOTrainer(cfg.replace(iterations=1), sft, rm, tok, out_dir=folder, resume=True)
    assert snapshot(folder) == before


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_nan_stop_names_the_parameter_and_what_is_on_disk(tmp_path):
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(iterations=4, checkpoint_every=2), sft, rm, tok, out_dir=tmp_path)
    tr.state.actor.params["h.0.mlp.c_fc.w"][0, 0] = np.inf      # a parameter gone bad (as a huge lr would do)
    with pytest.raises(ValueError, match=r"must be finite.* \(the parameter `actor.h.0.mlp.c_fc.w` is not finite\): "
                                         r"training stopped at iteration 0; no checkpoint had been written yet"):
        tr.step()


def test_values_that_would_fail_later_are_refused_at_once(tmp_path):
    sft, rm, tok = world(block_size=40)
    with pytest.raises(ValueError, match=r"`max_new_tokens` = 100000 does not fit: the longest prompt is \d+ tokens"):
        PPOTrainer(tiny_config(max_new_tokens=100000), sft, rm, tok, out_dir=tmp_path / "a")
    assert not (tmp_path / "a" / "config.json").exists()
    with pytest.raises(ValueError, match="`lr` must be a finite number, got inf"):
        tiny_config(lr=float("inf"))
    for kw, match in [(dict(init_std=float("inf")), "`init_std` must be a finite number"),
                      (dict(init_std=1e30), r"`init_std` must be in \(0, 1\]"),
                      (dict(block_size=10**12), r"`block_size` must be in \[1, 4096\]")]:
        with pytest.raises(ValueError, match=match):
            GPTConfig(**kw)
    with pytest.raises(ValueError, match=r"`gpt_config` has the unknown field\(s\) \['n_layers'\]"):
        GPTConfig.from_dict({"n_layers": 2})


def test_a_second_writer_on_a_run_folder_refuses_before_writing(tmp_path):
    """Issue 13 item 3 on the trainers: a real second process holds the folder; the trainers refuse at once, naming
    the folder and its pid, and write nothing (before: both ran, metrics.jsonl interleaved and lost records)."""
    from tests.test_runs import hold_lock
    from minippo.rlhf.sft import SFTConfig, train_sft
    from minippo.runs import RunFolderBusy
    sft, rm, tok = world()
    p = hold_lock(tmp_path)
    try:
        with pytest.raises(RunFolderBusy, match=f"{tmp_path} is being written by another process \\(pid {p.pid}"):
            PPOTrainer(tiny_config(), sft, rm, tok, out_dir=tmp_path)
        with pytest.raises(RunFolderBusy, match=f"pid {p.pid}"):
            train_sft(SFTConfig.quick(), tmp_path, progress=False)
        assert sorted(x.name for x in tmp_path.iterdir()) == [".minippo.lock"]
    finally:
        p.kill()
        p.wait()
    PPOTrainer(tiny_config(), sft, rm, tok, out_dir=tmp_path).close()     # the holder is gone: the folder is free


def test_another_commands_run_folder_is_refused_as_such_before_its_tensors_are_read(stopped, tmp_path):
    """``minippo ppo --out`` an SFT run's folder (a checkpoint of format minippo.model/1) said "tensor
    'actor/h.0.attn.c_attn.b' is missing (and 107 more)", exit 1, as if the checkpoint were corrupt; ``minippo sft
    --out`` a PPO run's folder likewise (and wrote its tokenizer.json there first)."""
    from minippo.rlhf.checkpoint import save_model
    from minippo.rlhf.lm_train import check_lm_folder
    from minippo.rlhf.sft import SFTConfig
    folder, cfg, (sft, rm, tok) = stopped
    other = tmp_path / "sft_run"
    save_model(other / "checkpoint", sft, tokenizer=tok, extra_state={"step": 1})
    for out, what in ((other, "a PPO run"), (folder, "an SFT run")):
        before = snapshot(out)
        with pytest.raises(FileExistsError, match=f"holds something other than {what} \\(its checkpoint is of "
                                                  "format 'minippo.(model/1|ppo/3)'\\): use another folder"):
            if what == "a PPO run":
                PPOTrainer(cfg, sft, rm, tok, out_dir=out, resume=True)
            else:
                check_lm_folder(out, SFTConfig.quick(), resume=True, what=what)
        assert snapshot(out) == before
