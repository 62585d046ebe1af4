"""`minippo rlhf --quick` end to end: every stage runs, the gold score rises, a second run reuses the stages."""
import json

import numpy as np
import pytest

from minippo.io import read_metrics
from minippo.rlhf.run.pipeline import run_pipeline


def test_quick_pipeline_end_to_end(tmp_path, capsys):
    """The default suite's one end-to-end run (issue 26: the fast suite keeps one)."""
    out = tmp_path / "run"
    logs = []
    s = run_pipeline(out, quick=True, progress=False, log=logs.append)
    e = s["eval"]
    # the simulated human prefers the PPO policy's fresh samples on the same prompts ...
    assert e["ppo"]["gold_mean"] > e["sft"]["gold_mean"] + 0.2, e
    assert e["ppo"]["rm_mean"] > e["sft"]["rm_mean"] + 0.5
    assert e["sft"]["kl_mean"] == 0.0 and e["ppo"]["kl_exact_mean"] > 0
    # ... and the gold score of the rollouts rises during training
    records = read_metrics(out / "ppo" / "metrics.jsonl")
    assert len(records) == 30
    first, last = (np.mean([r["gold/score"] for r in part]) for part in (records[:5], records[-5:]))
    assert last > first + 0.2
    for path in ("sft/model", "rm/model", "ppo/policy", "ppo/checkpoint"):
        assert (out / path / "weights.safetensors").exists(), path
    assert (out / "figures" / "ppo_curves.png").stat().st_size > 20_000
    samples = (out / "samples.md").read_text()
    assert "| SFT |" in samples and "| PPO |" in samples and samples.count("\n| ") >= 18
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["seconds"]) == {"sft", "rm", "ppo", "eval", "total"} and summary["peak_rss_mb"] > 0
    sft = summary["sft"]                                 # what the SFT lines print, for docs/results/main_rlhf.json
    assert sft["n_params"] > 0 and 0 < sft["heldout_loss"] < sft["initial_loss"] and sft["unigram_loss"] < sft["ln_V"]
    assert not any("reusing" in line for line in logs)
    from minippo.rlhf.run.pipeline import stages_cached
    assert stages_cached(out)

    # pointing the command at the finished run reuses every stage and reproduces the evaluation
    from minippo.cli import main
    capsys.readouterr()
    assert main(["rlhf", "--quick", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("reusing") == 3
    again = json.loads((out / "summary.json").read_text())
    assert again["eval"] == json.loads(json.dumps(e))
    assert again["rm"] == summary["rm"]                 # issue 13 item 7: the reused reward model's numbers stay
    assert again["sft"] == summary["sft"]               # and the reused SFT model's (a rerun dropped them)
    # a reward model retrained since (by another version, on another kernel): the finished PPO policy was trained
    # against the old one and is not reused over the new one (the last bytes of the file are a weight's)
    weights = out / "rm" / "model" / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert main(["rlhf", "--quick", "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"{out / 'ppo' / 'policy'} (stage ppo of the run in {out}) was made from another --rm" in err, err
    assert f"delete {out / 'ppo'} to retrain that stage" in err
    # issue 20 item 8: a sample cut at max_new_tokens without its EOS is marked in samples.md
    from minippo.rlhf.generate import TRUNCATED_MARK
    rows = [line for line in samples.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert sum(row.count(TRUNCATED_MARK) for row in rows) >= 1, "no cut sample among the 32 shown: pick another check"


def test_the_shared_stages_are_cached_in_the_repositorys_runs_folder():
    """``runs/cache`` beside the package (ignored by git), whatever the working directory; quick runs in a temp dir."""
    from pathlib import Path

    import minippo
    from minippo.rlhf.run.pipeline import default_cache_dir
    repo = Path(minippo.__file__).resolve().parents[1]
    assert default_cache_dir(quick=False).parent == repo / "runs" / "cache"
    assert repo not in default_cache_dir(quick=True).parents
    from minippo.blas import blas_core_name                 # stages trained under another OpenBLAS kernel differ
    assert f"-{blas_core_name() or 'blas'}-" in default_cache_dir(quick=False).name


def test_every_cached_stage_has_one_folder_per_openblas_kernel_and_lessons_23_24_share_the_task_sft(monkeypatch):
    """A stage trained under another kernel holds other numbers: a run under OPENBLAS_CORETYPE=Haswell must
    not load a model that a SkylakeX run built first (the verifier task's cache had no kernel in its name, so
    lesson 24 --full under Haswell trained from whichever kernel's SFT model was there: pass@1 0.469 or 0.472).
    Lessons 23 and 24 train the same task SFT model: one folder serves both."""
    from minippo.rlhf.run import pipeline
    from minippo.rlvr.run import stage_configs
    from minippo.rlvr.task import TaskSFTConfig
    from minippo.studies import verifiable
    folders = {}
    for kernel in ("SkylakeX", "Haswell"):
        monkeypatch.setattr(pipeline, "blas_core_name", lambda kernel=kernel: kernel)
        folders[kernel] = (pipeline.default_cache_dir(), verifiable.cache_dir(TaskSFTConfig(seed=0), False),
                           verifiable.cache_dir(stage_configs(False, 0)[0], False))
        main, task, task_24 = folders[kernel]
        assert main.name.startswith(f"main-seed0-{kernel}-") and task.name.startswith(f"rlvr-seed0-{kernel}-")
        assert task_24 == task and main.parent == task.parent == pipeline.RUNS_DIR / "cache"
    assert all(a != b for a, b in zip(folders["SkylakeX"], folders["Haswell"][:2]))
    monkeypatch.setattr(pipeline, "blas_core_name", lambda: "Haswell")
    assert verifiable.cache_dir(TaskSFTConfig.quick(seed=1), True).name.startswith("quick-rlvr-seed1-Haswell-")


def test_a_build_of_the_shared_stages_is_announced_before_it_starts(tmp_path, monkeypatch):
    """Issue 20: a lesson that builds the SFT and reward-model cache says what, where and how long first;
    a cached folder is reused without a word."""
    from minippo.rlhf.run import pipeline
    events = []
    monkeypatch.setattr(pipeline, "run_pipeline", lambda folder, **kw: events.append(("build", folder)))
    say = lambda m: events.append(("say", m))            # noqa: E731
    folder = tmp_path / "cache"
    assert not pipeline.stages_cached(folder)
    assert pipeline.prepare_stages(folder, quick=True, announce=say) == folder
    assert [e[0] for e in events] == ["say", "build", "say"] and events[1] == ("build", folder)
    assert str(folder) in events[0][1] and f"about {pipeline.BUILD_SECONDS[True]} s on 2 cores" in events[0][1]
    events.clear()
    monkeypatch.setattr(pipeline, "stages_cached", lambda f: True)
    pipeline.prepare_stages(folder, quick=True, announce=say)
    assert events == [("build", folder)]


# ---- the reuse rule (issue 13 item 2): a stored stage made with another config is refused, nothing written ----

def fake_stage(folder, key, cfg_dict, **extra):
    """A model folder like a finished stage's (a tiny random model; only its stored config matters here)."""
    from minippo.nn.gpt import GPTConfig, TinyGPT
    from minippo.rlhf.checkpoint import save_model
    model = TinyGPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=1, n_embd=4))
    save_model(folder, model, extra_state={key: cfg_dict, **extra})


def files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != ".minippo.lock"}


def test_a_stage_made_with_another_config_is_refused_naming_the_fields(tmp_path):
    from minippo.rlhf.run.pipeline import stage_configs
    from minippo.runs import ConfigMismatch
    sft0, rm0, ppo0 = stage_configs(quick=True, seed=0)
    fake_stage(tmp_path / "sft" / "model", "sft_config", sft0.to_dict())
    fake_stage(tmp_path / "rm" / "model", "rm_config", rm0.to_dict())
    fake_stage(tmp_path / "ppo" / "policy", "ppo_config", ppo0.to_dict())
    before = files(tmp_path)
    with pytest.raises(ConfigMismatch, match=r"sft/model \(stage sft of the run in .*\) was made with another "
                       r"configuration: seed \(stored 0, requested 1\); nothing was changed. To start fresh, use "
                       r"another --out, or delete .*sft and .*rm and .*ppo to retrain those stages"):
        run_pipeline(tmp_path, quick=True, seed=1, progress=False, log=lambda *a: None)
    with pytest.raises(ConfigMismatch, match=r"corpus_size \(stored 6000, requested 20000\)"):
        run_pipeline(tmp_path, quick=False, progress=False, log=lambda *a: None)       # a full run on a quick folder
    with pytest.raises(ConfigMismatch, match=r"rm/model .*epochs \(stored 4, requested 2\).* delete .*rm and "
                       r".*ppo to retrain"):
        run_pipeline(tmp_path, quick=True, rm_cfg=rm0.__class__.quick(epochs=2), progress=False, log=lambda *a: None)
    with pytest.raises(ConfigMismatch, match=r"ppo/policy .*iterations \(stored 30, requested 31\).*delete .*ppo "
                       r"to retrain that stage"):
        run_pipeline(tmp_path, quick=True, ppo_cfg=ppo0.replace(iterations=31), progress=False, log=lambda *a: None)
    assert files(tmp_path) == before                                 # nothing written, nothing deleted


def test_samples_md_marks_the_responses_cut_at_max_new_tokens():
    """Issue 20 item 8: a response without EOS (it hit max_new_tokens, maybe mid-word) is marked, the rest not."""
    from minippo.rlhf.generate import TRUNCATED_MARK, show_sample
    from minippo.rlhf.run.evaluate import samples_markdown
    assert show_sample("the film was absolutely f", False) == "the film was absolutely f" + TRUNCATED_MARK
    assert show_sample("the film was fine .", True) == "the film was fine ."
    before = {"texts": ["a b c", "d e ."], "gold": np.zeros(2), "rm": np.zeros(2), "ended": np.array([False, True])}
    after = {"texts": ["f g .", "h i"], "gold": np.zeros(2), "rm": np.zeros(2), "ended": np.array([True, False])}
    rows = [line for line in samples_markdown(["p", "q"], before, after).splitlines() if line.startswith("| ")
            and line[2].isdigit()]
    assert rows[0].count(TRUNCATED_MARK) == 1 and f"a b c{TRUNCATED_MARK} |" in rows[0] and "| f g . |" in rows[0]
    assert rows[1].count(TRUNCATED_MARK) == 1 and f"h i{TRUNCATED_MARK} |" in rows[1]


# ---- issue 26: the shared stages, the run folder, samples.md's marks ------------------------------

def test_the_shared_stages_announcement_goes_to_stderr(tmp_path, monkeypatch, capsys):
    """A lesson's stdout is its narrative whether the cache was there or not (test_l09 failed on a cold cache)."""
    from minippo.rlhf.run import pipeline
    monkeypatch.setattr(pipeline, "run_pipeline", lambda folder, **kw: None)
    pipeline.prepare_stages(tmp_path / "cache", quick=True)
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("Building the main job's SFT policy and reward model (quick size) once")


def main_job_like(run, seed=0, sft_steps=None):
    """A folder like a finished `minippo rlhf` run's SFT and reward-model stages (tiny random models; only their
    stored configs, which the reuse compares, are the main job's)."""
    from minippo.rlhf.run.pipeline import stage_configs
    sft_cfg, rm_cfg, _ = stage_configs(quick=False, seed=seed)
    if sft_steps is not None:
        sft_cfg = sft_cfg.__class__(seed=seed, steps=sft_steps, warmup_steps=0)
    fake_stage(run / "sft" / "model", "sft_config", sft_cfg.to_dict())
    fake_stage(run / "rm" / "model", "rm_config", rm_cfg.to_dict(),
               rm_summary={"heldout_accuracy": 0.9, "heldout_gold_accuracy": 0.9, "pearson": 0.9, "spearman": 0.9})
    (run / "rm" / "pairs.npz").write_bytes(b"the pairs")


def test_lessons_copy_a_finished_main_job_run_instead_of_rebuilding(tmp_path, monkeypatch):
    """Issue 26: after `minippo rlhf` (default config, seed 0, into runs/), a lesson reuses its SFT policy and reward
    model: the newest run whose stored configs are the main job's is copied into the cache (the run is only read);
    a run made with another config or under another OpenBLAS kernel is not; the quick size never looks."""
    from minippo.rlhf.run import pipeline
    runs = tmp_path / "repo" / "runs"
    monkeypatch.setattr(pipeline, "RUNS_DIR", runs)
    monkeypatch.chdir(tmp_path)
    main_job_like(runs / "20260101-000000")
    main_job_like(runs / "20260102-000000", sft_steps=10)          # newer, but another SFT config: not ours
    # newer, the same configs, but trained under another OpenBLAS kernel (other numbers): not this kernel's cache
    from minippo.rlhf import checkpoint
    with monkeypatch.context() as m:
        m.setattr(checkpoint, "blas_core_name", lambda: "a kernel other than this one")
        main_job_like(runs / "20260103-000000")
    assert pipeline.trained_under(runs / "20260103-000000" / "rm" / "model") == "a kernel other than this one"
    assert pipeline.trained_under(runs / "20260101-000000" / "sft" / "model") == pipeline.blas_core_name()
    main_job_like(runs / "20260104-000000")                          # saved before models recorded the kernel
    state = runs / "20260104-000000" / "sft" / "model" / "state.json"
    state.write_text(json.dumps({k: v for k, v in json.loads(state.read_text()).items() if k != "blas_kernel"}))
    (runs / "figures").mkdir()
    assert pipeline.main_job_run(quick=True) is None
    assert pipeline.main_job_run(seed=1) is None                    # another seed: other configs
    source = runs / "20260101-000000"
    assert pipeline.main_job_run() == source
    before = files(source) | {"lock": (source / ".minippo.lock").exists()}
    said = []
    folder = pipeline.prepare_stages(announce=said.append, log=lambda *a: None)
    assert folder == pipeline.default_cache_dir() and folder.parent == runs / "cache"
    assert len(said) == 1 and said[0].startswith(f"Reusing the SFT policy and reward model of the main-job run "
                                                 f"{source} (the same configs, checked): copied into {folder}")
    assert files(folder) == files(source)                            # sft/ and rm/, bitwise
    assert files(source) | {"lock": (source / ".minippo.lock").exists()} == before      # only read
    said.clear()
    assert pipeline.prepare_stages(announce=said.append, log=lambda *a: None) == folder and said == []


def test_rlhf_refuses_a_folder_of_something_else(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(FileExistsError, match=r"holds files of something other than a minippo rlhf run \(notes.txt, "
                       r"summary.json; no sft/, rm/, ppo/, dpo/ folder\): use another --out; nothing was written"):
        run_pipeline(tmp_path, quick=True, progress=False, log=lambda *a: None)
    # "nothing was written": not even the lock file (it said so while it left one there)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "summary.json"]


def test_samples_md_marks_proxy_gold_disagreements_by_its_stated_rule():
    """Issue 26 item 7: each mark recomputed here from the numbers and the rule printed above the table."""
    from minippo.rlhf.run.evaluate import MARKS, MOVE_FRAC, disagreements, samples_markdown
    rng = np.random.default_rng(0)
    n = 40
    before = {"texts": [f"b{i}" for i in range(n)], "ended": np.ones(n, bool), "gold": rng.normal(size=n),
              "rm": rng.normal(size=n)}
    after = {"texts": [f"a{i}" for i in range(n)], "ended": np.ones(n, bool), "gold": rng.normal(size=n),
             "rm": rng.normal(size=n)}
    after["gold"][:4] = before["gold"][:4] + np.array([-1.0, -1.0, 1.0, 0.01])   # hacking, regression, reverse, none
    after["rm"][:4] = before["rm"][:4] + np.array([1.0, -1.0, -1.0, 1.0])
    d = disagreements(before, after)
    tol_g, tol_r = MOVE_FRAC * before["gold"].std(), MOVE_FRAC * before["rm"].std()
    assert (d["tol_gold"], d["tol_rm"]) == (tol_g, tol_r) and d["marks"][:4] == ["hacking", "regression",
                                                                                   "RM down, gold up", ""]
    for i, mark in enumerate(d["marks"]):
        dg, dr = after["gold"][i] - before["gold"][i], after["rm"][i] - before["rm"][i]
        want = ("hacking" if dg < -tol_g and dr > tol_r else "regression" if dg < -tol_g else
                "RM down, gold up" if dg > tol_g and dr < -tol_r else "")
        assert mark == want, i
    assert d["counts"] == {m: d["marks"].count(m) for m in MARKS} and sum(d["counts"].values()) > 4
    text = samples_markdown([f"p{i}" for i in range(n)], before, after)
    rule = text.splitlines()[0]
    assert f"by more than {MOVE_FRAC:g} x the SFT samples' std" in rule and f"gold {tol_g:.3f}, RM {tol_r:.3f}" in rule
    assert all(f"**{m}**: {MARKS[m]}." in rule for m in MARKS)
    assert f"over all {n} prompts: " + ", ".join(f"{k} {v}" for k, v in d["counts"].items()) in rule
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 16 and rows[0].endswith("| **hacking** |") and rows[1].endswith("| **regression** |")
    assert rows[3].endswith("|  |")


@pytest.mark.parametrize("where", ["evaluate_stages", "plot_run"])
def test_ctrl_c_after_the_stages_names_what_is_on_disk(tmp_path, monkeypatch, where):
    """Ctrl-C in the evaluation said 'no checkpoint had been written yet', and in the figure 'interrupted before
    anything was written' (no stage ran), beside three finished stages: the command's own stage names them now."""
    import minippo.rlhf.run.pipeline as pipeline
    sft0, rm0, ppo0 = pipeline.stage_configs(quick=True, seed=0)
    fake_stage(tmp_path / "sft" / "model", "sft_config", sft0.to_dict())
    fake_stage(tmp_path / "rm" / "model", "rm_config", rm0.to_dict(), rm_summary=dict.fromkeys(
        ("heldout_accuracy", "heldout_gold_accuracy", "pearson", "spearman"), 0.5))
    fake_stage(tmp_path / "ppo" / "policy", "ppo_config", ppo0.to_dict())
    (tmp_path / "ppo" / "metrics.jsonl").write_text('{"iteration": 0}\n')
    gold = {"sft": {"gold_mean": 0.0}}

    def ctrl_c(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "evaluate_stages", ctrl_c if where == "evaluate_stages" else lambda *a, **k: gold)
    monkeypatch.setattr(pipeline, "plot_run", ctrl_c)
    with pytest.raises(KeyboardInterrupt) as info:
        run_pipeline(tmp_path, quick=True, progress=False, log=lambda *a: None)
    assert info.value.minippo_message == (f"interrupted minippo rlhf in {tmp_path}; sft/model, rm/model, ppo/policy "
                                          "are kept; the same command reuses the finished stages, resumes a stage "
                                          "from its checkpoint and evaluates again")
