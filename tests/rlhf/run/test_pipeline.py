"""`minippo rlhf --quick` end to end: every stage runs, the gold score rises, a second run reuses the stages."""
import json

import numpy as np
import pytest

from minippo.io import read_metrics
from minippo.rlhf.run.pipeline import run_pipeline


@pytest.mark.slow
def test_quick_pipeline_end_to_end(tmp_path, capsys):
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


def test_the_shared_stages_are_cached_in_the_repositorys_runs_folder():
    """``runs/cache`` beside the package (ignored by git), whatever the working directory; quick runs in a temp dir."""
    from pathlib import Path

    import minippo
    from minippo.rlhf.run.pipeline import default_cache_dir
    repo = Path(minippo.__file__).resolve().parents[1]
    assert default_cache_dir(quick=False).parent == repo / "runs" / "cache"
    assert repo not in default_cache_dir(quick=True).parents


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
