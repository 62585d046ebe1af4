"""`minippo rlhf`'s command line (issue 26 item 3): the main knobs as flags, every other field from --config FILE,
--print-config; the knobs reach the stage they belong to and nothing else changes."""
import json

import pytest

from minippo.checks import UsageError
from minippo.cli import Parser
from minippo.rlhf.run import rlhf_cli
from minippo.rlhf.run.pipeline import dpo_config, stage_configs


def args_of(*argv):
    parser = Parser(prog="minippo rlhf")
    rlhf_cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_no_flag_is_the_main_jobs_configs():
    sft, rm, ppo = stage_configs(quick=False, seed=0)
    assert rlhf_cli.configs_from_args(args_of()) == {"sft": sft, "rm": rm, "ppo": ppo}
    sft, rm, _ = stage_configs(quick=True, seed=3)
    assert rlhf_cli.configs_from_args(args_of("--quick", "--seed", "3", "--method", "dpo")) == {
        "sft": sft, "rm": rm, "dpo": dpo_config(quick=True, seed=3)}


def test_the_knobs_change_their_fields_only():
    base = rlhf_cli.configs_from_args(args_of("--quick"))
    got = rlhf_cli.configs_from_args(args_of("--quick", "--iterations", "7", "--batch-size", "16", "--lr", "3e-4",
                                             "--kl-ref-target", "2", "--kl-ref-coef", "0.05", "--n-layer", "2",
                                             "--n-embd", "32"))
    assert got["ppo"] == base["ppo"].replace(iterations=7, batch_size=16, lr=3e-4, kl_ref_target=2.0, kl_ref_coef=0.05)
    assert got["sft"] == base["sft"].__class__(**{**base["sft"].to_dict(), "n_layer": 2, "n_embd": 32})
    assert got["rm"] == base["rm"]
    dpo = rlhf_cli.configs_from_args(args_of("--method", "dpo", "--steps", "40", "--beta", "0.2", "--lr", "1e-4",
                                             "--batch-prompts", "4"))["dpo"]
    assert dpo == dpo_config().replace(steps=40, beta=0.2, lr=1e-4, batch_prompts=4)


def test_a_knob_of_the_other_method_is_refused():
    with pytest.raises(UsageError, match=r"^--beta sets DPOConfig.beta, a knob of --method dpo; with --method ppo"):
        rlhf_cli.configs_from_args(args_of("--beta", "0.2"))
    with pytest.raises(UsageError, match=r"^--kl-ref-coef sets PPOConfig.kl_ref_coef"):
        rlhf_cli.configs_from_args(args_of("--method", "dpo", "--kl-ref-coef", "0.1"))


def test_a_config_file_sets_any_field_and_the_flags_win(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"sft": {"steps": 900}, "rm": {"epochs": 2},
                                "ppo": {"clip_eps": 0.1, "iterations": 5, "kl_ref_controller": "fixed"}}))
    got = rlhf_cli.configs_from_args(args_of("--config", str(path), "--iterations", "9"))
    assert (got["sft"].steps, got["rm"].epochs) == (900, 2)
    assert (got["ppo"].clip_eps, got["ppo"].kl_ref_controller, got["ppo"].iterations) == (0.1, "fixed", 9)
    path.write_text(json.dumps({"dpo": {"beta": 0.3}}))                 # a stage this run does not have
    with pytest.raises(UsageError, match=r"unknown stage 'dpo'; this run's stages are sft, rm, ppo"):
        rlhf_cli.configs_from_args(args_of("--config", str(path)))


def test_print_config_prints_every_field_as_a_config_file_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rlhf_cli, "run_pipeline", lambda *a, **k: pytest.fail("--print-config must not run"))
    monkeypatch.chdir(tmp_path)
    assert rlhf_cli.cli_main(args_of("--quick", "--iterations", "4", "--print-config")) == 0
    printed = json.loads(capsys.readouterr().out)
    configs = rlhf_cli.configs_from_args(args_of("--quick", "--iterations", "4"))
    assert printed == {name: json.loads(json.dumps(cfg.to_dict())) for name, cfg in configs.items()}
    assert list(tmp_path.iterdir()) == []                                # nothing written
    path = tmp_path / "printed.json"
    path.write_text(json.dumps(printed))                                 # it reads back as the same run
    assert rlhf_cli.configs_from_args(args_of("--quick", "--config", str(path))) == configs


def test_the_run_gets_the_configs(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(rlhf_cli, "run_pipeline", lambda out, **kw: seen.update(kw, out=out))
    assert rlhf_cli.cli_main(args_of("--quick", "--out", str(tmp_path / "r"), "--iterations", "3")) == 0
    assert seen["ppo_cfg"].iterations == 3 and seen["dpo_cfg"] is None and seen["out"] == tmp_path / "r"
