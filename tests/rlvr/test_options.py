"""``minippo rlvr``'s option groups (issue 28's corrected objective, issue 27's overlong punishment): the flags
build the method's config; a flag the method does not take is one line, exit 2; with ``--correction none``
and no mismatch the run is the run without flags, bitwise; the run folder stores the options and refuses
another correction in one line; a corrected quick run logs the weights' statistics."""
import json
import shutil

import numpy as np
import pytest

from minippo.cli import Parser, main as cli
from minippo.io import load_checkpoint, read_metrics
from minippo.rlhf.corrected import OFF_POLICY_GLOSSARY, CorrectedConfig
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.metrics import without_timing
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.run.configs import comparable
from minippo.rlhf.run.correction_cli import with_correction
from minippo.runs import ConfigMismatch
from minippo.rlvr import run as rlvr_run
from minippo.rlvr.run import rl_config_from_args, run_rlvr
from minippo.rlvr.task import TaskSFTConfig
from minippo.rlvr.trainer import rlvr_ppo_config
from tests.rlvr.test_run import TINY_EVAL, TINY_PPO, TINY_SFT, files


def parse(*argv):
    parser = Parser(prog="minippo rlvr")
    rlvr_run.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_flags_build_the_methods_config():
    cfg = rl_config_from_args(parse("--logits-precision", "bfloat16", "--stale-k", "2", "--correction", "tis",
                                    "--correction-level", "token", "--correction-cap", "2"))
    assert type(cfg) is CorrectedConfig
    assert cfg == CorrectedConfig.from_dict({**rlvr_ppo_config().to_dict(), "logits_precision": "bfloat16",
                                             "stale_k": 2, "correction": "tis", "correction_cap": 2.0})
    assert type(rl_config_from_args(parse())) is PPOConfig                     # no flag: canonical PPO
    cfg = rl_config_from_args(parse("--method", "dr_grpo", "--overlong-max-len", "6", "--overlong-cache-len", "2"))
    assert type(cfg) is GRPOConfig and cfg.advantage_estimator == "dr_grpo"
    assert (cfg.overlong_max_len, cfg.overlong_cache_len) == (6, 2)
    assert rl_config_from_args(parse("--quick", "--method", "grpo")).overlong_max_len is None


@pytest.mark.parametrize("argv, line", [
    (["--method", "grpo", "--correction", "tis"], "--correction: the off-policy correction is an option of canonical "
     "PPO (CorrectedConfig); --method grpo (GRPOConfig) does not take it"),
    (["--method", "rloo", "--stale-k", "2"], "--stale-k: the off-policy correction is an option of canonical PPO "
     "(CorrectedConfig); --method rloo (GRPOConfig) does not take it"),
    (["--overlong-max-len", "6"], "--overlong-max-len: DAPO's overlong punishment is an option of the critic-free "
     "trainer (GRPOConfig: --method grpo, dr_grpo or rloo); --method ppo does not take it"),
    (["--correction", "tis"], "--correction tis: `correction_cap` must be a number, got None"),
    (["--correction-cap", "2"], "--correction-cap 2: `correction_cap` does not apply to mode 'none' (it takes no "
     "bound), got 2.0"),
    (["--method", "grpo", "--overlong-cache-len", "2"], "--overlong-cache-len 2: `overlong_cache_len` must be 0 "
     "while `overlong_max_len` is None (the overlong punishment is off), got 2"),
    (["--method", "grpo", "--overlong-max-len", "6", "--overlong-cache-len", "7"], "--overlong-cache-len 7: "
     "`overlong_cache_len` must be in [0, 6], got 7"),
])
def test_a_flag_the_method_does_not_take_is_one_line_exit_2_before_anything_runs(tmp_path, capsys, argv, line):
    assert cli(["rlvr", "--out", str(tmp_path / "o"), *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"minippo rlvr: error: {line}\n"
    assert not (tmp_path / "o").exists()


def test_the_other_commands_refuse_the_correction_where_it_does_not_apply(capsys):
    for argv, line in (
            (["rlhf", "--method", "dpo", "--correction", "tis"], "minippo rlhf: error: --correction: the off-policy "
             "correction is an option of canonical PPO (CorrectedConfig); --method dpo (DPOConfig) does not take it"),
            (["ppo", "--sft", "s", "--rm", "r", "--value-norm", "true", "--stale-k", "1"], "minippo ppo: error: "
             "--stale-k: the off-policy correction is an option of canonical PPO (CorrectedConfig); PPO with the "
             "knobs, --value-norm (KnobsConfig) does not take it")):
        assert cli(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == line + "\n"


def test_rlhf_prints_and_reads_back_a_corrected_config(tmp_path, capsys):
    assert cli(["rlhf", "--quick", "--correction", "mis", "--correction-cap", "1.5", "--print-config"]) == 0
    printed = capsys.readouterr().out
    ppo = json.loads(printed)["ppo"]
    assert (ppo["correction"], ppo["correction_cap"], ppo["stale_k"]) == ("mis", 1.5, 0)
    (tmp_path / "c.json").write_text(printed)
    assert cli(["rlhf", "--quick", "--config", str(tmp_path / "c.json"), "--print-config"]) == 0
    assert capsys.readouterr().out == printed
    assert cli(["ppo", "--sft", "s", "--rm", "r", "--correction", "icepop", "--correction-cap", "2"]) == 2
    assert "`correction_cap_low` must be a number, got None" in capsys.readouterr().err


def test_resume_compares_the_correction_fields():
    """A run folder's config is compared with the correction's fields at their defaults when a config has
    none: canonical PPO and CorrectedConfig() compare equal; another correction differs in exactly its
    fields."""
    ppo = rlvr_ppo_config()
    none = with_correction(parse("--correction", "none"), ppo, "")
    assert type(none) is CorrectedConfig and comparable(none) == comparable(ppo)
    tis = with_correction(parse("--correction", "tis", "--correction-cap", "2"), ppo, "")
    differ = {k for k in comparable(tis) if comparable(tis)[k] != comparable(ppo)[k]}
    assert differ == {"correction", "correction_cap"}


def tiny_cfg(*argv):
    """The tiny PPO config of tests/rlvr/test_run.py with the correction flags ``argv``."""
    return with_correction(parse(*argv), rlvr_ppo_config(seed=0, **TINY_PPO), "")


def test_correction_none_is_the_run_without_flags_bitwise_and_another_is_refused(tmp_path, capsys):
    kw = dict(sft_cfg=TaskSFTConfig(seed=0, **TINY_SFT), eval_cfg=TINY_EVAL, progress=False, log=lambda *a: None)
    plain = run_rlvr(tmp_path / "plain", rl_cfg=tiny_cfg(), **kw)
    shutil.copytree(tmp_path / "plain" / "sft", tmp_path / "flag" / "sft")
    flagged = run_rlvr(tmp_path / "flag", rl_cfg=tiny_cfg("--correction", "none"), **kw)
    assert json.loads((tmp_path / "flag" / "ppo" / "config.json").read_text())["correction"] == "none"
    a = [without_timing(r) for r in read_metrics(tmp_path / "plain" / "ppo" / "metrics.jsonl")]
    b = [without_timing(r) for r in read_metrics(tmp_path / "flag" / "ppo" / "metrics.jsonl")]
    assert [{k: v for k, v in r.items() if not k.startswith("off_policy/")} for r in b] == a
    for r in b:                  # w = 1 exactly; mu and pi_old differ by float32 rounding only (lesson 16)
        assert (r["off_policy/weight_mean"], r["off_policy/ess_frac"], r["off_policy/truncated_frac"]) == (1, 1, 0)
        assert 0 <= r["off_policy/mismatch_kl"] < 1e-6, r["off_policy/mismatch_kl"]
    wa, _ = load_checkpoint(tmp_path / "plain" / "ppo" / "policy")
    wb, _ = load_checkpoint(tmp_path / "flag" / "ppo" / "policy")
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)
    assert flagged["eval"] == plain["eval"]
    # the run without flags reuses the flagged stage (the same computation); another correction is refused
    said = []
    run_rlvr(tmp_path / "flag", rl_cfg=tiny_cfg(), **{**kw, "log": said.append})
    assert said[1].startswith("[2/2] PPO: reusing")
    before = files(tmp_path / "flag")
    with pytest.raises(ConfigMismatch, match=r"ppo/policy .*correction \(stored 'none', requested 'tis'\), "
                       r"correction_cap \(stored None, requested 2.0\); nothing was changed"):
        run_rlvr(tmp_path / "flag", rl_cfg=tiny_cfg("--correction", "tis", "--correction-cap", "2"), **kw)
    assert files(tmp_path / "flag") == before


@pytest.fixture(scope="module")
def quick_sft(tmp_path_factory):
    """The quick SFT stage, trained once for the command-line runs below (each copies it)."""
    out = tmp_path_factory.mktemp("rlvr-options")
    assert cli(["rlvr", "--quick", "--out", str(out / "plain"), "--no-progress"]) == 0
    return out


@pytest.mark.slow
def test_the_quick_command_with_correction_none_is_bitwise_the_command_without(quick_sft, capsys):
    out = quick_sft
    shutil.copytree(out / "plain" / "sft", out / "none" / "sft")
    assert cli(["rlvr", "--quick", "--correction", "none", "--out", str(out / "none"), "--no-progress"]) == 0
    wa, _ = load_checkpoint(out / "plain" / "ppo" / "policy")
    wb, _ = load_checkpoint(out / "none" / "ppo" / "policy")
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    a = json.loads((out / "plain" / "summary_ppo.json").read_text())["eval"]
    assert json.loads((out / "none" / "summary_ppo.json").read_text())["eval"] == a
    # the same folder with another correction: one line, exit 1 (a stored stage made with another config)
    capsys.readouterr()
    before = files(out / "none")
    assert cli(["rlvr", "--quick", "--correction", "tis", "--correction-cap", "2", "--out", str(out / "none")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "correction (stored 'none', requested 'tis')" in err[0]
    assert files(out / "none") == before


@pytest.mark.slow
def test_a_quick_bf16_tis_run_records_the_weights_statistics(quick_sft):
    out = quick_sft
    shutil.copytree(out / "plain" / "sft", out / "tis" / "sft")
    assert cli(["rlvr", "--quick", "--logits-precision", "bfloat16", "--correction", "tis", "--correction-cap",
                "2", "--out", str(out / "tis"), "--no-progress"]) == 0
    stored = json.loads((out / "tis" / "ppo" / "config.json").read_text())
    assert (stored["logits_precision"], stored["correction"], stored["correction_cap"]) == ("bfloat16", "tis", 2.0)
    records = read_metrics(out / "tis" / "ppo" / "metrics.jsonl")
    assert len(records) == 30 and all(set(OFF_POLICY_GLOSSARY) <= set(r) for r in records)
    for r in records:
        assert 0.0 <= r["off_policy/truncated_frac"] <= 1.0 and r["off_policy/masked_frac"] == 0.0
        assert 0.0 < r["off_policy/ess_frac"] <= 1.0 and r["off_policy/lag"] == 0
        assert r["off_policy/mismatch_kl"] > 0                  # bf16 logits: the sampler is not the trainer
    s = json.loads((out / "tis" / "summary_ppo.json").read_text())["eval"]
    assert s["rl"]["pass@1"] > s["sft"]["pass@1"]
