"""The rules of a run folder (minippo.runs): one writer (a real second process refuses; kill -9 leaves no stale
lock), the config-equality rule with its message, in-place assignment that never broadcasts, the Ctrl-C line."""
import hashlib
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from minippo import runs

HOLD = textwrap.dedent("""
    import sys, time
    from minippo.runs import run_lock
    with run_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(60)
""")


def hold_lock(folder) -> subprocess.Popen:
    """A real second process that takes the folder's lock and keeps it (until it is killed)."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_a_second_writer_refuses_at_once_naming_the_folder_and_the_pid(tmp_path):
    p = hold_lock(tmp_path / "run")
    try:
        # "at once": a lock that waited would get the folder when the holder exits after 60 s, and not raise
        with pytest.raises(runs.RunFolderBusy) as info:
            runs.run_lock(tmp_path / "run")
        msg = str(info.value)
        assert str(tmp_path / "run") in msg and f"pid {p.pid}" in msg and "use another folder" in msg
    finally:
        p.kill()
        p.wait()


def test_kill_9_leaves_no_stale_lock(tmp_path):
    p = hold_lock(tmp_path / "run")
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert (tmp_path / "run" / runs.LOCK_FILE).exists()          # the file stays, the OS lock died with the process
    with runs.run_lock(tmp_path / "run"):
        assert (tmp_path / "run" / runs.LOCK_FILE).read_text().strip() == str(os.getpid())


def test_the_lock_is_reentrant_in_one_process_and_released(tmp_path):
    a = runs.RunLock(tmp_path).acquire()
    b = runs.RunLock(tmp_path).acquire()               # the same process: a resumed trainer in one session
    a.release()
    p = subprocess.run([sys.executable, "-c", "import sys; from minippo.runs import run_lock; run_lock(sys.argv[1])",
                        str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 1 and "RunFolderBusy" in p.stderr    # b still holds it
    b.release()
    p = subprocess.run([sys.executable, "-c", "import sys; from minippo.runs import run_lock; run_lock(sys.argv[1])",
                        str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_wait_blocks_until_the_holder_is_gone(tmp_path):
    p = hold_lock(tmp_path)
    said = []
    try:
        killer = subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(1); os.kill({p.pid}, 9)"])
        with runs.run_lock(tmp_path, wait=True, log=said.append):
            pass
        killer.wait()
    finally:
        p.kill()
        p.wait()
    assert said and f"pid {p.pid}" in said[0]


def test_a_file_is_not_a_run_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a run folder"):
        runs.run_lock(tmp_path / "f")


def test_config_rule_names_every_differing_field_and_how_to_start_fresh():
    stored = {"seed": 0, "lr": 1e-3, "ckpt_interval": 100, "old": 1}
    asked = {"seed": 1, "lr": 1e-3, "ckpt_interval": 50, "new": 2}
    assert runs.config_differences(stored, asked, ignore=("ckpt_interval",)) == {
        "new": ("<absent>", 2), "old": (1, "<absent>"), "seed": (0, 1)}
    with pytest.raises(runs.ConfigMismatch, match=r"X was made with another configuration: new \(stored '<absent>', "
                       r"requested 2\), old .*seed \(stored 0, requested 1\); nothing was changed\. To start fresh, FRESH"):
        runs.check_same_config("X", stored, asked, ignore=("ckpt_interval",), fresh="FRESH")
    runs.check_same_config("X", stored, dict(stored, ckpt_interval=7), ignore=("ckpt_interval",))   # no error


def test_an_input_is_identified_by_its_file_and_another_one_is_refused_naming_the_flag(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "weights.safetensors").write_bytes(b"one")
    (tmp_path / "b.npz").write_bytes(b"two")
    a, b = runs.input_identity(tmp_path / "a"), runs.input_identity(tmp_path / "b.npz")   # a model folder: its weights
    assert a == {"sha256": hashlib.sha256(b"one").hexdigest(), "folder": str(tmp_path / "a")}
    assert b["sha256"] == hashlib.sha256(b"two").hexdigest() and b["folder"] == str(tmp_path)
    runs.check_same_inputs("X", {"sft": a}, {"sft": dict(a, folder="elsewhere")})     # the same file, another path
    with pytest.raises(runs.ConfigMismatch, match=rf"X was made from another --sft \(stored {a['sha256'][:12]} in "
                       rf"{tmp_path / 'a'}, given {b['sha256'][:12]} in {tmp_path}\); nothing was changed\. "
                       r"To start fresh, FRESH$"):
        runs.check_same_inputs("X", {"sft": a, "rm": b}, {"sft": b, "rm": b}, fresh="FRESH")
    for stored in (None, {}, {"rm": b}):            # written before inputs were recorded: nothing to compare
        runs.check_same_inputs("X", stored, {"sft": b})


def test_assign_arrays_checks_everything_before_assigning_anything():
    params = {"a": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    good = {"p/a": np.ones((2, 3), np.float32), "p/b": np.ones(3, np.float32)}
    for bad, match in [({**good, "p/b": np.ones(1, np.float32)}, r"'p/b' is float32\[1\]"),       # would broadcast
                       ({**good, "p/b": np.ones(3, np.int32)}, r"'p/b' is int32\[3\]"),           # would cast
                       ({"p/a": good["p/a"]}, "'p/b' is missing"),
                       ({**good, "p/c": np.ones(1)}, "'p/c' is unexpected"),
                       ({**good, "p/b": np.array([1, np.nan, 1], np.float32)}, "'p/b' is not finite")]:
        with pytest.raises(ValueError, match=match):
            runs.assign_arrays(params, bad, "p/", source="ckpt")
        assert not params["a"].any() and not params["b"].any()            # nothing was assigned
    runs.assign_arrays(params, good, "p/")
    assert params["a"].all() and params["b"].all()


def test_the_interrupted_message_says_what_is_kept_and_how_to_go_on(tmp_path):
    with pytest.raises(KeyboardInterrupt) as info:
        with runs.stage("outer", tmp_path):
            with runs.stage("SFT", tmp_path / "sft", checkpoint=tmp_path / "sft" / "checkpoint") as st:
                st.saved = "step 200"
                raise KeyboardInterrupt
    assert info.value.minippo_message == (f"interrupted SFT in {tmp_path / 'sft'}; the last good checkpoint (step 200) "
                                          f"is kept in {tmp_path / 'sft' / 'checkpoint'}; the same command resumes from it")
    with pytest.raises(KeyboardInterrupt) as info:
        with runs.stage("PPO", tmp_path, checkpoint=tmp_path / "c"):
            raise KeyboardInterrupt
    assert "no checkpoint had been written yet; the same command starts it again" in info.value.minippo_message


# ---- issue 26 item 1: a fresh run never writes over files it did not make -------------------------

def test_a_fresh_start_refuses_a_folder_of_another_kind_and_accepts_its_own_interrupted_start(tmp_path):
    import json

    from minippo.nn.gpt import GPTConfig, TinyGPT
    from minippo.rlhf.checkpoint import save_model
    config = {"steps": 3, "lr": 0.1, "ckpt_interval": 1}
    what = "an SFT run"
    runs.check_fresh_start(tmp_path / "new", config, what)             # new or empty: fine
    (tmp_path / "empty").mkdir()
    runs.check_fresh_start(tmp_path / "empty", config, what)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"n_prompts": 5}))  # another command's run
    (other / "metrics.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(FileExistsError, match=r"holds something other than an SFT run \(.*other/config.json is not "
                                              r"its config\): use another folder; nothing was overwritten"):
        runs.check_fresh_start(other, config, what)
    (other / "config.json").write_text("not json")
    with pytest.raises(FileExistsError, match="is not its config"):
        runs.check_fresh_start(other, config, what)
    (other / "config.json").unlink()
    with pytest.raises(FileExistsError, match=r"metrics.jsonl holds records of something else"):
        runs.check_fresh_start(other, config, what)
    save_model(tmp_path / "model", TinyGPT(GPTConfig(vocab_size=8, block_size=4, n_layer=1, n_head=1, n_embd=4)))
    with pytest.raises(FileExistsError, match="is a model folder, not a run folder"):
        runs.check_fresh_start(tmp_path / "model", config, what)
    mine = tmp_path / "mine"                                            # an interrupted start of the same kind
    mine.mkdir()
    (mine / "config.json").write_text(json.dumps(config))
    (mine / "metrics.jsonl").write_text('{"step": 0}\n')
    runs.check_fresh_start(mine, config, what)                         # the same run: started again
    runs.check_fresh_start(mine, {**config, "ckpt_interval": 2}, what, ignore=("ckpt_interval",))
    with pytest.raises(runs.ConfigMismatch, match=r"interrupted start of an SFT run .* lr \(stored 0.1, requested "
                                                  r"0.2\)"):
        runs.check_fresh_start(mine, {**config, "lr": 0.2}, what)
    runs.check_fresh_start(mine, {**config, "lr": 0.2}, what, records=False)


def test_trainers_refuse_another_runs_folder_before_writing(tmp_path, capsys):
    """`minippo sft --out <a reward-model run>` replaced its config.json, metrics.jsonl and model/; now refused."""
    import json

    from minippo.cli import main
    from minippo.rlhf.rm_train import RMConfig
    rm_run = tmp_path / "rm"
    rm_run.mkdir()
    (rm_run / "config.json").write_text(json.dumps(RMConfig().to_dict()))
    (rm_run / "metrics.jsonl").write_text('{"step": 1}\n')
    before = {p.name: p.read_bytes() for p in rm_run.iterdir()}
    rc = main(["sft", "--quick", "--out", str(rm_run), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"minippo sft: error: --out: {rm_run} holds something other than an SFT run")
    assert {p.name: p.read_bytes() for p in rm_run.iterdir()} == before          # no lock file either


def test_a_refusing_check_leaves_the_folder_as_it_was_found(tmp_path):
    """``run_lock(folder, check=...)``: the read-only refusals run before the lock file is created."""
    (tmp_path / "mine.txt").write_text("x")
    calls = []

    def refuse():
        calls.append("check")
        raise FileExistsError("someone's folder")

    with pytest.raises(FileExistsError, match="someone's folder"):
        runs.run_lock(tmp_path, check=refuse)
    assert calls == ["check"] and sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    assert not runs._held


def test_the_check_runs_again_under_the_lock_and_a_refusal_there_releases_it(tmp_path):
    """Another writer may change the folder between the first check and the lock: checked again, holding it."""
    calls = []

    def changed_meanwhile():
        calls.append(runs.RunLock(tmp_path).held or str(tmp_path.resolve()) in runs._held)
        if len(calls) == 2:
            raise FileExistsError("changed meanwhile")

    (tmp_path / "x").write_text("x")
    with pytest.raises(FileExistsError, match="changed meanwhile"):
        runs.run_lock(tmp_path, check=changed_meanwhile)
    assert calls == [False, True] and not runs._held                  # the second call held the lock; released
    held = runs.run_lock(tmp_path)
    with pytest.raises(FileExistsError, match="changed meanwhile"):   # a lock already held stays held
        calls.clear()
        held.acquire(check=changed_meanwhile)
    assert held.held and str(tmp_path.resolve()) in runs._held
    held.release()
    assert not runs._held


def test_a_check_is_not_run_on_a_folder_that_does_not_exist_yet(tmp_path):
    with runs.run_lock(tmp_path / "new", check=lambda: (tmp_path / "new").iterdir().__next__()):
        assert (tmp_path / "new" / runs.LOCK_FILE).is_file()          # created by the lock; checked under it


def test_user_temp_dir_is_this_users_own(tmp_path, monkeypatch):
    import os
    import stat
    monkeypatch.setattr(runs.tempfile, "gettempdir", lambda: str(tmp_path))
    folder = runs.user_temp_dir("quick_figures")
    assert folder == tmp_path / f"minippo-{os.getuid()}" / "quick_figures"
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    monkeypatch.setattr(runs.os, "getuid", lambda: 4242)               # a folder of that name owned by another uid
    (tmp_path / "minippo-4242").mkdir()
    with pytest.raises(PermissionError, match=r"minippo-4242 belongs to another user .* set TMPDIR"):
        runs.user_temp_dir("quick_figures")
