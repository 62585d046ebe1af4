"""The `minippo` dispatcher: a user's error is one or two lines naming the flag or the path, exit 2 (usage) or 1
(runtime), no traceback unless --debug / MINIPPO_DEBUG=1 (issue 13 item 9); Ctrl-C is one line, exit 130, and the
same command resumes (issue 20 item 5, with a real SIGINT sent to a real process)."""
import os
import signal
import subprocess
import sys
import time

import pytest

from minippo import cli
from minippo.io import RunWarning


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return rc, out, err


def test_a_bad_flag_value_names_the_flag_exit_2(capsys, tmp_path):
    rc, _, err = run(capsys, "ppo", "--sft", "s", "--rm", "r", "--out", str(tmp_path), "--gamma", "1.5")
    assert rc == 2 and err == "minippo ppo: error: --gamma 1.5: `gamma` must be in [0, 1], got 1.5\n"
    rc, _, err = run(capsys, "ppo", "--sft", "s", "--rm", "r", "--lr", "inf")
    assert rc == 2 and err == "minippo ppo: error: --lr inf: `lr` must be a finite number, got inf\n"
    rc, _, err = run(capsys, "ppo", "--sft", "s", "--rm", "r", "--lr", "fast")
    assert rc == 2 and err == "minippo ppo: error: --lr: expected a number (FLOAT), got 'fast'\n"
    rc, _, err = run(capsys, "sft", "--block-size", str(10**12), "--out", str(tmp_path / "b"))
    assert rc == 2 and err == ("minippo sft: error: --block-size 1000000000000: `block_size` must be in [8, 4096], "
                               "got 1000000000000\n")
    rc, _, err = run(capsys, "sft", "--resume")
    assert rc == 2 and err == "minippo sft: error: --resume needs --out (the run folder to continue)\n"


def test_a_path_flag_pointing_at_nothing_or_at_a_file_exit_2(capsys, tmp_path):
    rc, _, err = run(capsys, "ppo", "--sft", str(tmp_path / "nope"), "--rm", "r", "--out", str(tmp_path / "o"))
    assert rc == 2 and err == f"minippo ppo: error: --sft: {tmp_path / 'nope'} does not exist\n"
    (tmp_path / "file").write_text("x")
    rc, _, err = run(capsys, "rlhf", "--quick", "--out", str(tmp_path / "file"))
    assert rc == 2 and err == f"minippo rlhf: error: --out: {tmp_path / 'file'} is a file, not a run folder\n"


def test_a_read_only_folder_and_a_full_disk_exit_1_naming_the_path(capsys, tmp_path, monkeypatch):
    from minippo import io, runs
    folder = tmp_path / "ro"
    real_open = os.open

    def read_only(path, *a, **k):          # root ignores permission bits: simulate what a read-only folder says
        if str(path).startswith(str(folder)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(runs.os, "open", read_only)
    rc, _, err = run(capsys, "sft", "--quick", "--out", str(folder), "--no-progress")
    assert rc == 1 and err == f"minippo sft: error: --out: {folder / runs.LOCK_FILE}: Permission denied\n"
    monkeypatch.undo()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.os, "fsync", disk_full)
    rc, _, err = run(capsys, "sft", "--quick", "--corpus-size", "600", "--out", str(tmp_path / "full"), "--no-progress")
    assert rc == 1 and err == (f"minippo sft: error: --out: {tmp_path / 'full' / 'tokenizer.json.tmp'}: "
                               "No space left on device\n")


def test_debug_shows_the_traceback(capsys, monkeypatch):
    with pytest.raises(ValueError, match="`gamma` must be in"):
        cli.main(["--debug", "ppo", "--sft", "s", "--rm", "r", "--gamma", "1.5"])
    monkeypatch.setenv("MINIPPO_DEBUG", "1")
    with pytest.raises(ValueError, match="`gamma` must be in"):
        cli.main(["ppo", "--sft", "s", "--rm", "r", "--gamma", "1.5"])


def test_describe_error_one_line_flag_or_path_and_status():
    flags = {"gamma": ("--gamma", "1.5"), "out": ("--out", "runs/a")}
    assert cli.describe_error(ValueError("`gamma` must be in [0, 1]\nmore\ndetail"), flags) == (
        "--gamma 1.5: `gamma` must be in [0, 1] (2 more lines with --debug)", 2)
    assert cli.describe_error(PermissionError(13, "Permission denied", "runs/a/x"), flags) == (
        "--out: runs/a/x: Permission denied", 1)
    assert cli.describe_error(ValueError("`policy/grad_norm` is nan at iteration 3"), flags) == (
        "`policy/grad_norm` is nan at iteration 3", 1)
    assert cli.describe_error(cli.UsageError("--x and --y name the same field"), {}) == (
        "--x and --y name the same field", 2)


def test_a_run_warning_is_one_line(capsys, monkeypatch):
    import warnings
    from minippo.rlhf import sft

    def warn_and_stop(args):
        warnings.warn("metrics.jsonl: dropped a torn last line 5", RunWarning)
        return 0

    monkeypatch.setattr(sft, "cli_main", warn_and_stop)
    rc, _, err = run(capsys, "sft")
    assert rc == 0 and err == "minippo sft: warning: metrics.jsonl: dropped a torn last line 5\n"


@pytest.mark.slow      # a real SIGINT in a subprocess, then a resume
def test_ctrl_c_prints_one_line_exit_130_and_the_same_command_resumes(tmp_path, capsys):
    out = tmp_path / "sft"
    argv = ["sft", "--quick", "--steps", "400", "--corpus-size", "600", "--out", str(out), "--no-progress"]
    # a real process and a real SIGINT; SIG_DFL in the child, whatever the test runner's own disposition is
    p = subprocess.Popen([sys.executable, "-m", "minippo", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not (out / "checkpoint" / "weights.safetensors").exists() and p.poll() is None:
        time.sleep(0.02)                     # wait for the first checkpoint (step 100 of 400)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate()
    assert p.returncode == 130, err
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"minippo sft: interrupted SFT in {out}; the last good checkpoint (step ")
    assert err.endswith(f") is kept in {out / 'checkpoint'}; the same command resumes from it\n")
    step = int(err.split("(step ")[1].split(")")[0])
    rc, printed, _ = run(capsys, *argv)
    assert rc == 0 and f"SFT: resuming {out} from its checkpoint at step {step} of 400" in printed


# ---- issue 26 item 2: every command-line mistake costs seconds: one line naming the flag, exit 2, nothing run ----

def command_parser(name):
    import importlib
    sub = cli.Parser(prog=f"minippo {name}")
    importlib.import_module(cli.COMMANDS[name][0]).add_arguments(sub)
    return sub


def typed_options():
    """(command, its required flags with a placeholder, flag) for every flag of every command whose value is
    typed: read with a type or a choice list, or a config field whose class validates its text."""
    out = []
    for name in cli.COMMANDS:
        actions = command_parser(name)._actions
        required = [x for a in actions if a.required and a.option_strings for x in (a.option_strings[0], "r")]
        for action in actions:
            if action.option_strings and action.nargs != 0 and (action.type is not None or action.choices):
                out.append((name, required, action.option_strings[0]))
    return out


@pytest.mark.parametrize("command, required, flag", typed_options())
def test_every_typed_flag_of_every_command_refuses_a_bad_value_in_one_line(capsys, command, required, flag):
    """The value is read before anything runs (the required paths are placeholders that are never opened)."""
    rc, out, err = run(capsys, command, *required, flag, "@@")
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"minippo {command}: error: {flag}"), err
    assert any(w in err for w in ("expected", "invalid choice", "must be one of")), err


def test_typed_options_cover_the_commands():
    commands = {c for c, _, _ in typed_options()}
    assert {"rlhf", "sft", "rm", "ppo", "dpo", "classic", "bench"} <= commands and len(typed_options()) > 100
    flags = {(c, f) for c, _, f in typed_options()}
    correction = ("--logits-precision", "--stale-k", "--correction", "--correction-level", "--correction-cap",
                  "--correction-cap-low")
    assert {(c, f) for c in ("rlvr", "rlhf", "ppo") for f in correction} <= flags      # issue 28's option group
    assert {(c, f) for c in ("rlvr", "grpo") for f in ("--overlong-max-len", "--overlong-cache-len")} <= flags


@pytest.mark.parametrize("argv, line", [
    (["ppo", "--lr", "-1"], "minippo ppo: error: the following arguments are required: --sft, --rm\n"),
    (["rlhf", "--iterations", "abc"], "minippo rlhf: error: --iterations: expected an integer (N), got 'abc'\n"),
    (["rlhf", "--gamma", "0.9"], "minippo rlhf: error: unrecognized arguments: --gamma 0.9 (minippo rlhf --help "
                                 "lists the flags)\n"),
    (["rlhf", "--method", "dpo", "--iterations", "3"], "minippo rlhf: error: --iterations sets PPOConfig.iterations, "
     "a knob of --method ppo; with --method dpo the stage-3 knobs are --steps, --batch-prompts, --beta\n"),
    (["rlhf", "--method", "grpo"], "minippo rlhf: error: --method: invalid choice: 'grpo' (choose from 'ppo', "
                                   "'dpo')\n"),
    (["rlhf", "--kl-ref-target", "0"], "minippo rlhf: error: --kl-ref-target 0: `kl_ref_target` must be in (0, inf), "
                                       "got 0.0\n"),
    (["dpo", "--sft", "s", "--pairs", "p", "--quick", "--steps", "2"], "minippo dpo: error: --steps 2: "
     "`warmup_steps` must be in [0, 2), got 5\n"),
    (["classic", "--lr", "-1"], "minippo classic: error: --lr -1: `lr` must be in [0, inf), got -1.0\n"),
    (["rlvr", "--correction", "@@"], "minippo rlvr: error: --correction @@: `correction` must be one of 'none', 'is', "
                                     "'tis', 'mis', 'icepop'; got '@@'\n"),
    (["rlvr", "--method", "grpo", "--stale-k", "2"], "minippo rlvr: error: --stale-k: the off-policy correction is an "
     "option of canonical PPO (CorrectedConfig); --method grpo (GRPOConfig) does not take it\n"),
    (["rlvr", "--overlong-max-len", "6"], "minippo rlvr: error: --overlong-max-len: DAPO's overlong punishment is an "
     "option of the critic-free trainer (GRPOConfig: --method grpo, dr_grpo or rloo); --method ppo does not take it\n"),
    (["rlhf", "--method", "dpo", "--logits-precision", "float16"], "minippo rlhf: error: --logits-precision: the "
     "off-policy correction is an option of canonical PPO (CorrectedConfig); --method dpo (DPOConfig) does not take "
     "it\n"),
    (["grpo", "--sft", "s", "--rm", "r", "--overlong-max-len", "0"], "minippo grpo: error: --overlong-max-len 0: "
     "`overlong_max_len` must be in [1, inf), got 0\n"),
    (["ppo", "--sft", "s", "--rm", "r", "--correction", "mis"], "minippo ppo: error: --correction mis: "
     "`correction_cap` must be a number, got None\n"),
    (["exercise", "start", "nosuch"], None),
    (["nosuch"], None),
])
def test_a_command_line_mistake_is_one_line_exit_2_and_nothing_runs(capsys, argv, line):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    if line is not None:
        assert err == line


def test_a_missing_path_is_named_before_any_banner(capsys, tmp_path):
    for argv, flag in ((["ppo", "--sft", str(tmp_path / "no"), "--rm", str(tmp_path)], "--sft"),
                       (["dpo", "--sft", str(tmp_path / "no"), "--pairs", str(tmp_path)], "--sft"),
                       (["rm", "--sft", str(tmp_path / "no")], "--sft")):
        rc, out, err = run(capsys, *argv)
        assert rc == 2 and out == "" and err.startswith(f"minippo {argv[0]}: error: {flag}: ")
        assert "does not exist" in err


@pytest.mark.parametrize("argv, line", [
    (["ppo", "--sft", "", "--rm", "r"], "minippo ppo: error: --sft DIR: expected a value, got ''\n"),
    (["sft", "--quick", "--out", ""], "minippo sft: error: --out DIR: expected a value, got ''\n"),
    (["export", "", "--hf", "h"], "minippo export: error: MODEL_DIR: expected a value, got ''\n"),
    (["rlhf", "--config="], "minippo rlhf: error: --config FILE: expected a value, got ''\n"),
])
def test_an_empty_path_is_refused_not_taken_for_the_default_or_the_current_folder(capsys, argv, line, tmp_path,
                                                                                   monkeypatch):
    """``--out ''`` ran into runs/<timestamp> (the default) and ``--sft ''`` said "PosixPath('.') has an empty
    name", exit 1."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, *argv)
    assert (rc, out, err) == (2, "", line) and list(tmp_path.iterdir()) == []


def test_a_bad_config_file_is_named(capsys, tmp_path):
    bad = tmp_path / "c.json"
    for text, why in (("x", "not valid JSON"), ('{"ppx": {}}', "unknown stage 'ppx'"),
                      ('{"ppo": {"foo": 1}}', "ppo: unknown PPOConfig field(s) ['foo']"),
                      ('{"sft": {"steps": 0}}', "sft: `steps` must be in [1, inf), got 0")):
        bad.write_text(text)
        rc, out, err = run(capsys, "rlhf", "--config", str(bad))
        assert rc == 2 and out == "" and err.startswith(f"minippo rlhf: error: --config: {bad}") and why in err, err
    rc, _, err = run(capsys, "rlhf", "--config", str(tmp_path / "none.json"))
    assert rc == 2 and err == f"minippo rlhf: error: --config: {tmp_path / 'none.json'}: No such file or directory\n"


def test_help_names_what_each_value_is_and_shows_the_common_flags_first(capsys):
    for name in cli.COMMANDS:
        text = command_parser(name).format_help()
        assert " X " not in text and " X\n" not in text, name
    text = command_parser("ppo").format_help()
    assert text.startswith("usage: minippo ppo --sft DIR --rm DIR [flags]\n")
    assert text.index("--sft DIR") < text.index("--out DIR") < text.index("PPOConfig: length of the run:") < \
        text.index("--iterations N") < text.index("PPOConfig: optimisation:") < text.index("--lr FLOAT")
    text = command_parser("rlhf").format_help()
    for flag in ("--iterations N", "--batch-size N", "--lr FLOAT", "--kl-ref-target FLOAT", "--kl-ref-coef FLOAT",
                 "--n-layer N", "--n-embd N", "--method {ppo,dpo}", "--config FILE", "--steps N", "--beta FLOAT"):
        assert flag in text, flag
