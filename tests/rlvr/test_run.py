"""``minippo rlvr`` end to end: the quick run raises pass@1 (a margin from the measured seed noise); a second call
reuses both stages; a stage made with another config is refused before anything is written; resumed runs equal
uninterrupted ones (SFT and PPO); the command's one-line errors and exit codes."""
import json
import shutil

import numpy as np
import pytest

from minippo.cli import main as cli
from minippo.io import load_checkpoint, read_metrics
from minippo.nn.gpt import TinyGPT
from minippo.rlhf.metrics import without_timing
from minippo.runs import ConfigMismatch
from minippo.rlvr.evaluate import KS
from minippo.rlvr.run import load_task_sft, run_rlvr, stage_configs
from minippo.rlvr.task import Problems, TaskSFTConfig
from minippo.rlvr.trainer import GLOSSARY, RLVRTrainer, rlvr_grpo_config, rlvr_ppo_config

# a second or two: one block of width 32, 20 SFT steps, 4 PPO iterations of 16 answers, 8 problems x 64 answers
TINY_SFT = dict(n_train=500, steps=20, batch_size=16, n_layer=1, n_head=2, n_embd=32, warmup_steps=2,
                eval_interval=10, ckpt_interval=10, n_heldout=32)
TINY_PPO = dict(iterations=4, batch_size=16, minibatch_size=8, checkpoint_every=2)
TINY_EVAL = {"n_eval": 8, "n_samples": 64}


def tiny(folder, seed=0, log=None, **ppo):
    return run_rlvr(folder, seed=seed, sft_cfg=TaskSFTConfig(seed=seed, **TINY_SFT),
                    rl_cfg=rlvr_ppo_config(seed=seed, **{**TINY_PPO, **ppo}), eval_cfg=TINY_EVAL,
                    progress=False, log=log or (lambda *a: None))


def files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != ".minippo.lock"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("rlvr")
    said = []
    return out, run_rlvr(out, quick=True, seed=0, progress=False, log=said.append), said


@pytest.mark.slow
def test_the_quick_run_raises_pass_at_1(quick):
    out, s, _ = quick
    before, after = s["eval"]["sft"], s["eval"]["rl"]
    # SFT leaves room for RL (the issue asks for 10 %-60 %; measured 0.32-0.42 on seeds 0-3)
    assert 0.10 < before["pass@1"] < 0.60
    # RL raises it. Measured with `minippo rlvr --quick` on seeds 0-3: +0.227, +0.243, +0.229, +0.166
    # (mean +0.216, seed s.d. 0.034); 0.08 is four seed s.d. below the mean. And beyond this run's own noise:
    # the paired change over the 64 problems is more than 2 standard errors from 0.
    change, se = s["eval"]["pass@1_change"], s["eval"]["pass@1_change_se"]
    assert change == pytest.approx(after["pass@1"] - before["pass@1"], abs=1e-12)
    assert change > 0.08 and change > 2 * se


@pytest.mark.slow
def test_the_quick_run_reports_pass_at_k_and_lengths(quick):
    out, s, said = quick
    for r in (s["eval"]["sft"], s["eval"]["rl"]):
        ps = [r[f"pass@{k}"] for k in KS]
        assert all(0 <= p <= 1 for p in ps) and ps == sorted(ps)              # pass@k never falls with k
        # pass@1 is the mean share of right answers (Chen et al. eq. (1) at k = 1): an identity
        assert r["pass@1"] == pytest.approx(np.mean(r["per_problem_right"]) / 64, abs=1e-12)
        assert r["n_problems"] == 64 and r["n_samples"] == 64 and len(r["per_problem_right"]) == 64
        assert 1 <= r["length_right"] <= 6 and 1 <= r["length_wrong"] <= 6 and 0 <= r["formed"] <= 1
    assert (out / "sft" / "model").is_dir() and (out / "ppo" / "policy").is_dir()
    assert json.loads((out / "summary_ppo.json").read_text())["eval"]["rl"]["pass@1"] == s["eval"]["rl"]["pass@1"]
    assert "| `" in (out / "samples_ppo.md").read_text()
    assert any("\n  pass@1 " in line for line in said) and said[-1].startswith("done in ")
    records = read_metrics(out / "ppo" / "metrics.jsonl")
    assert len(records) == 30 and all(set(GLOSSARY) <= set(r) and "gold/score" not in r for r in records)
    assert [r["rlvr/pass_rate"] for r in records] == s["train_pass_rate"]


@pytest.mark.slow
def test_the_quick_grpo_run_raises_pass_at_1_from_the_same_sft(quick):
    out, s, _ = quick
    said = []
    g = run_rlvr(out, quick=True, seed=0, method="grpo", progress=False, log=said.append)
    assert said[0].startswith("[1/2] SFT: reusing") and said[1].startswith("[2/2] GRPO against the verifier")
    assert g["eval"]["sft"] == s["eval"]["sft"]                # the one SFT model, judged on the same answers
    assert (out / "grpo" / "policy").is_dir() and (out / "summary_grpo.json").is_file()
    # Measured with `minippo rlvr --quick --method grpo` on seeds 0-3: +0.158, +0.162, +0.062, +0.096 (mean +0.120,
    # seed s.d. 0.048); 0.02 is two seed s.d. below the mean. And beyond this run's own noise (2 paired s.e.).
    change, se = g["eval"]["pass@1_change"], g["eval"]["pass@1_change_se"]
    assert change > 0.02 and change > 2 * se


@pytest.mark.slow
def test_a_second_call_reuses_both_stages_and_evaluates_the_same(quick):
    out, s, _ = quick
    said = []
    again = run_rlvr(out, quick=True, seed=0, progress=False, log=said.append)
    assert said[0].startswith("[1/2] SFT: reusing") and said[1].startswith("[2/2] PPO: reusing")
    assert again["eval"] == s["eval"]                      # the same policies, the same evaluation seeds


@pytest.mark.slow
def test_a_policy_is_not_reused_over_an_sft_model_retrained_since(quick, tmp_path):
    """The RL policy records the SFT model it started from; an SFT model retrained since (by another version, on
    another kernel: here its last weight's last bit) is refused by name, not evaluated against the old policy."""
    out = tmp_path / "run"
    shutil.copytree(quick[0], out)
    assert set(json.loads((out / "ppo" / "policy" / "state.json").read_text())["inputs"]) == {"sft"}
    weights = out / "sft" / "model" / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ConfigMismatch, match=r"ppo/policy \(stage ppo of the run in .*\) was made from another --sft"):
        run_rlvr(out, quick=True, seed=0, progress=False, log=lambda *a: None)


@pytest.mark.slow
def test_a_stage_made_with_another_config_is_refused_before_anything_is_written(quick):
    out, _, _ = quick
    before = files(out)
    with pytest.raises(ConfigMismatch, match=r"sft/model \(stage sft of the run in .*\) was made with another "
                       r"configuration: seed \(stored 0, requested 1\).* delete .*sft and .*ppo to retrain those"):
        run_rlvr(out, quick=True, seed=1, progress=False, log=lambda *a: None)
    sft, ppo, _ = stage_configs(quick=True)
    with pytest.raises(ConfigMismatch, match=r"ppo/policy .*lr \(stored 0.0003, requested 0.001\).* delete "
                       r".*ppo to retrain that stage"):
        run_rlvr(out, quick=True, rl_cfg=ppo.replace(lr=1e-3), progress=False, log=lambda *a: None)
    with pytest.raises(ConfigMismatch, match=r"carry_slip \(stored 0.5, requested 0.2\)"):
        run_rlvr(out, quick=True, sft_cfg=TaskSFTConfig.quick(carry_slip=0.2), progress=False, log=lambda *a: None)
    assert files(out) == before


def test_rlvr_refuses_a_folder_of_something_else_and_writes_nothing(tmp_path):
    """It wrote sft/, ppo/, samples_ppo.md and summary_ppo.json into any folder (``--out .`` in a project)."""
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "summary_ppo.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FileExistsError, match=r"holds files of something other than a minippo rlvr run \(notes.txt, "
                       r"summary_ppo.json; no sft/, grpo/, dr_grpo/, rloo/, ppo/ folder\): use another --out; "
                       r"nothing was written"):
        run_rlvr(tmp_path, quick=True, progress=False, log=lambda *a: None)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.slow      # the fast suite keeps one resume check: tests/rlhf/test_sft.py
def test_resumed_ppo_equals_an_uninterrupted_run(tmp_path):
    full = tiny(tmp_path / "full")
    # the same run stopped after 3 PPO iterations (checkpoint at 2): the command resumes from iteration 2
    tiny(tmp_path / "part", iterations=1)                    # stage 1 as in the full run
    (tmp_path / "part" / "ppo" / "policy").rename(tmp_path / "first_policy")
    model, tok, cfg, _ = load_task_sft(tmp_path / "part" / "sft")
    ppo_cfg = rlvr_ppo_config(seed=0, **TINY_PPO)
    shutil.rmtree(tmp_path / "part" / "ppo")
    part = RLVRTrainer(ppo_cfg, model, tok, Problems(cfg), out_dir=tmp_path / "part" / "ppo")
    part.train(until=3)
    part.close()
    said = []
    resumed = tiny(tmp_path / "part", log=said.append)
    assert "resuming from" in said[1]
    a = [without_timing(r) for r in read_metrics(tmp_path / "full" / "ppo" / "metrics.jsonl")]
    b = [without_timing(r) for r in read_metrics(tmp_path / "part" / "ppo" / "metrics.jsonl")]
    assert len(a) == len(b) == 4 and a == b
    assert resumed["eval"] == full["eval"]


@pytest.mark.slow      # the fast suite keeps one resume check: tests/rlhf/test_sft.py
def test_resumed_sft_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    full = tiny(tmp_path / "full")
    real, calls = TinyGPT.lm_loss_and_grads, {"n": 0}

    def crash_at_step_13(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 13:
            raise KeyboardInterrupt                          # "the laptop lid was closed"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TinyGPT, "lm_loss_and_grads", crash_at_step_13)
    with pytest.raises(KeyboardInterrupt) as info:
        tiny(tmp_path / "cut")
    assert "the last good checkpoint (step 10) is kept" in info.value.minippo_message
    monkeypatch.setattr(TinyGPT, "lm_loss_and_grads", real)
    resumed = tiny(tmp_path / "cut")
    assert read_metrics(tmp_path / "cut" / "sft" / "metrics.jsonl") == read_metrics(
        tmp_path / "full" / "sft" / "metrics.jsonl")
    assert resumed["eval"] == full["eval"]


def test_ctrl_c_in_the_evaluation_names_the_stages_on_disk(tmp_path, monkeypatch):
    """It said 'no checkpoint had been written yet' beside the finished SFT and PPO stages."""
    import minippo.rlvr.run as rlvr_run

    def ctrl_c(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(rlvr_run, "evaluate", ctrl_c)
    with pytest.raises(KeyboardInterrupt) as info:
        tiny(tmp_path)
    assert info.value.minippo_message == (f"interrupted minippo rlvr in {tmp_path}; sft/model, ppo/policy are kept; "
                                          "the same command reuses the finished stages, resumes a stage from its "
                                          "checkpoint and evaluates again")


def test_the_command_line(tmp_path, capsys):
    assert cli(["rlvr", "--out", str(tmp_path / "a"), "--seed", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["minippo rlvr: error: --seed -1: `seed` must be in [0, inf), got -1"]
    (tmp_path / "file").write_text("x")
    assert cli(["rlvr", "--out", str(tmp_path / "file"), "--quick"]) == 2
    assert "is a file, not a run folder" in capsys.readouterr().err
    tiny(tmp_path / "b")                                     # a run with the tiny configs: not the command's
    before = files(tmp_path / "b")
    assert cli(["rlvr", "--out", str(tmp_path / "b"), "--quick", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was made with another configuration" in err[0]
    assert files(tmp_path / "b") == before


def test_a_method_outside_the_list_is_refused():
    with pytest.raises(ValueError, match="`method` must be one of"):
        run_rlvr("unused", method="gae")
    with pytest.raises(ValueError, match="`rl_cfg` must configure the method 'grpo'.*got a GRPOConfig with "
                       "advantage_estimator 'rloo'"):
        run_rlvr("unused", method="grpo", rl_cfg=rlvr_grpo_config("rloo"))
    with pytest.raises(ValueError, match="`rl_cfg` must configure the method 'ppo'.*got a GRPOConfig"):
        run_rlvr("unused", rl_cfg=rlvr_grpo_config("grpo"))
    with pytest.raises(ValueError, match="`n_samples` must be >= 64"):
        run_rlvr("unused", eval_cfg={"n_samples": 16})
    with pytest.raises(ValueError, match="unknown keys \\['n'\\]"):
        run_rlvr("unused", eval_cfg={"n": 16})


def test_each_critic_free_method_trains_in_its_own_stage_from_the_one_sft(tmp_path):
    """grpo, dr_grpo, rloo then ppo in one folder: one SFT stage, reused; a stage per method, its config the
    method's (a GRPOConfig of that estimator, no critic in its checkpoint); a second call reuses each; another
    config for one method's stage is refused naming it, before anything is written."""
    out, grpo = tmp_path / "run", dict(iterations=2, batch_size=16, minibatch_size=8, checkpoint_every=2)
    summaries = {}
    for method in ("grpo", "dr_grpo", "rloo", "ppo"):
        said = []
        rl = rlvr_ppo_config(**TINY_PPO) if method == "ppo" else rlvr_grpo_config(method, **grpo)
        summaries[method] = run_rlvr(out, method=method, sft_cfg=TaskSFTConfig(**TINY_SFT), rl_cfg=rl,
                                     eval_cfg=TINY_EVAL, progress=False, log=said.append)
        assert said[0].startswith("[1/2] SFT: reusing") == (method != "grpo")
        stored = json.loads((out / method / "config.json").read_text())
        assert stored == rl.to_dict() and (out / f"summary_{method}.json").is_file()
        arrays, _ = load_checkpoint(out / method / "checkpoint")
        assert any(k.startswith("critic/") for k in arrays) == (method == "ppo")        # no critic without PPO
        records = read_metrics(out / method / "metrics.jsonl")
        assert len(records) == rl.iterations and all(set(GLOSSARY) <= set(r) for r in records)
    # the same SFT model judged by every method's evaluation: the same numbers before RL
    assert len({json.dumps(s["eval"]["sft"], sort_keys=True) for s in summaries.values()}) == 1
    said = []
    again = run_rlvr(out, method="rloo", sft_cfg=TaskSFTConfig(**TINY_SFT), rl_cfg=rlvr_grpo_config("rloo", **grpo),
                     eval_cfg=TINY_EVAL, progress=False, log=said.append)
    assert said[1].startswith("[2/2] RLOO: reusing") and again["eval"] == summaries["rloo"]["eval"]
    before = files(out)
    with pytest.raises(ConfigMismatch, match=r"dr_grpo/policy .*samples_per_prompt \(stored 8, requested 4\).* "
                       r"delete .*dr_grpo to retrain that stage"):
        run_rlvr(out, method="dr_grpo", sft_cfg=TaskSFTConfig(**TINY_SFT),
                 rl_cfg=rlvr_grpo_config("dr_grpo", samples_per_prompt=4, **grpo), eval_cfg=TINY_EVAL,
                 progress=False, log=lambda *a: None)
    assert files(out) == before
