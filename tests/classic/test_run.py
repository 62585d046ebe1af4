"""The `minippo classic` command (minippo.classic.run): metrics, dashboard and weights on disk, the last good
weights kept when a run fails, the deprecated flag spellings, bad flags rejected."""
import numpy as np
import pytest

from minippo.cli import main as minippo_main
from minippo.io import load_checkpoint, read_metrics

FAST = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "2"]


def test_cli_writes_metrics_dashboard_and_weights(tmp_path, capsys):
    out = tmp_path / "run"
    rc = minippo_main(["classic", "--total-timesteps", "1024", "--seed", "3", "--out", str(out),
                       "--no-progress", "--kl-old-target", "0.001", "--no-whiten-advantages", *FAST])
    assert rc == 0
    records = read_metrics(out / "metrics.jsonl")
    assert len(records) == 8 and records[-1]["global_step"] == 1024
    assert {"losses/approx_kl", "losses/clipfrac", "losses/explained_variance", "losses/grad_norm",
            "early_stop_epoch", "charts/episodic_return"} <= set(records[0])
    assert (out / "dashboard.png").stat().st_size > 50_000
    params, state = load_checkpoint(out / "agent")
    assert params["actor.0.w"].shape == (4, 64) and state["seed"] == 3
    assert state["config"]["kl_old_target"] == 0.001 and state["config"]["whiten_advantages"] is False
    text = capsys.readouterr().out
    assert "mean return of the last 20 episodes" in text and "steps to reach 475" in text
    # issue 26 item 1: a second run into the same folder would replace the first's records (classic has no resume)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}   # the lock file too
    rc = minippo_main(["classic", "--total-timesteps", "1024", "--out", str(out), "--no-progress", *FAST])
    err = capsys.readouterr().err
    assert rc == 2 and err == (f"minippo classic: error: --out: {out} already holds metrics.jsonl, agent, "
                               "dashboard.png: use another --out, or delete them; nothing was overwritten\n")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_cli_failed_run_keeps_the_last_good_weights(tmp_path, capsys, monkeypatch):
    """A NaN in update 5 (of 8) stops the run with exit code 1; agent/ holds update 3's weights
    (--save-every 2: saved after updates 1 and 3), the finite weights the run had then."""
    import minippo.classic.ppo as ppo
    real, calls, snapshots = ppo.ppo_loss_and_grads, [], {}

    def nan_in_update_5(*args):
        loss, grads, stats = real(*args)
        calls.append(1)
        if len(calls) > 5 * 4:                    # FAST: 2 epochs x 2 minibatches per update
            stats = dict(stats, **{"losses/value_loss": float("inf")})
        return loss, grads, stats

    import minippo.classic.run as run
    real_save = run.save_checkpoint

    def recording_save(directory, arrays, state=None, **kw):
        snapshots[state["update"]] = {k: v.copy() for k, v in arrays.items()}
        return real_save(directory, arrays, state, **kw)

    monkeypatch.setattr(ppo, "ppo_loss_and_grads", nan_in_update_5)
    monkeypatch.setattr(run, "save_checkpoint", recording_save)
    out = tmp_path / "run"
    rc = minippo_main(["classic", "--total-timesteps", "1024", "--seed", "1", "--out", str(out),
                       "--no-progress", "--save-every", "2", *FAST])
    assert rc == 1
    err = capsys.readouterr().err
    assert "update 5" in err and "`losses/value_loss` is inf" in err
    assert "last good weights (update 3, step 512)" in err
    assert sorted(snapshots) == [1, 3]
    params, state = load_checkpoint(out / "agent")
    assert state["update"] == 3 and state["global_step"] == 512 and state["seed"] == 1
    for k, v in params.items():
        assert np.isfinite(v).all()
        np.testing.assert_array_equal(v, snapshots[3][k])
    assert len(read_metrics(out / "metrics.jsonl")) == 5          # updates 0-4 were logged
    assert minippo_main(["classic", "--save-every", "0", "--no-progress"]) == 2
    assert "`save_every`" in capsys.readouterr().err


def test_cli_ctrl_c_says_which_weights_and_records_are_on_disk(tmp_path, capsys, monkeypatch):
    """Ctrl-C in update 5 (of 8): the line named "nothing written" while metrics.jsonl and agent/ (update 3) were on
    disk; it names them now, and says that a classic run does not resume."""
    import minippo.classic.ppo as ppo
    real, calls = ppo.ppo_loss_and_grads, []

    def ctrl_c_in_update_5(*args):
        calls.append(1)
        if len(calls) > 5 * 4:                    # FAST: 2 epochs x 2 minibatches per update
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(ppo, "ppo_loss_and_grads", ctrl_c_in_update_5)
    out = tmp_path / "run"
    rc = minippo_main(["classic", "--total-timesteps", "1024", "--seed", "1", "--out", str(out), "--no-progress",
                       "--save-every", "2", *FAST])
    assert rc == 130
    assert capsys.readouterr().err == (
        f"minippo classic: interrupted the classic PPO run in {out}; the last good checkpoint (update 3, step 512) "
        f"is kept in {out / 'agent'}; metrics.jsonl holds the updates done; a classic run does not resume: a new "
        "run needs another --out\n")
    assert load_checkpoint(out / "agent")[1]["update"] == 3 and len(read_metrics(out / "metrics.jsonl")) == 5
    calls.clear()
    assert minippo_main(["classic", "--total-timesteps", "1024", "--no-progress", *FAST]) == 130
    assert capsys.readouterr().err == "minippo classic: interrupted the classic PPO run (it was writing no files)\n"


@pytest.mark.slow      # two training runs; the fast suite keeps test_cli_writes_metrics_dashboard_and_weights
def test_cli_old_spellings_still_work_and_print_the_new_flag(tmp_path, capsys, recwarn):
    out = tmp_path / "run"
    rc = minippo_main(["classic", "--total-timesteps", "1024", "--out", str(out), "--no-progress",
                       "--target-kl", "0.001", "--no-norm-adv", "--no-clip-vloss", "--no-anneal-lr", *FAST])
    assert rc == 0
    err = capsys.readouterr().err
    for old, new in (("--target-kl 0.001", "--kl-old-target 0.001"), ("--no-norm-adv", "--no-whiten-advantages"),
                     ("--no-clip-vloss", "--no-value-clip"), ("--no-anneal-lr", "--lr-schedule constant")):
        assert f"{old} is deprecated, use {new}" in err
    _, state = load_checkpoint(out / "agent")
    assert (state["config"]["kl_old_target"], state["config"]["whiten_advantages"], state["config"]["value_clip"],
            state["config"]["lr_schedule"]) == (0.001, False, False, "constant")
    assert not [w for w in recwarn if "PPOConfig" in str(w.message)]      # one notice per flag, not two
    assert minippo_main(["classic", "--anneal-lr", "--total-timesteps", "1024", "--no-progress", *FAST]) == 0
    assert "--anneal-lr is deprecated, use --lr-schedule linear" in capsys.readouterr().err


def test_cli_rejects_bad_hyperparameters(capsys):
    assert minippo_main(["classic", "--lr", "-1", "--no-progress"]) == 2
    assert "`lr`" in capsys.readouterr().err
    assert minippo_main(["classic", "--total-timesteps", "10", "--no-progress"]) == 2
    assert "`total_timesteps`" in capsys.readouterr().err


@pytest.mark.parametrize("argv, line", [
    (["--target-kl", "0.01", "--kl-old-target", "0.02"], "--target-kl and --kl-old-target name the same field"),
    (["--anneal-lr", "--lr-schedule", "constant"], "--anneal-lr and --lr-schedule name the same field"),
    (["--norm-adv", "--no-whiten-advantages"], "--norm-adv and --whiten-advantages name the same field"),
])
def test_cli_refuses_an_old_and_a_new_spelling_of_one_field(tmp_path, capsys, argv, line):
    """Both spellings given: the old one silently won (--anneal-lr --lr-schedule constant trained with linear)."""
    rc = minippo_main(["classic", *argv, "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"minippo classic: error: {line}") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()
