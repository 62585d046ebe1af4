"""One algorithm, one file: canonical PPO equals the knobs at their defaults, the configs old run folders stored
are read (or refused naming the field), and the old command-line spellings still work."""
import json

import numpy as np
import pytest

from minippo.cli import main
from minippo.io import STATE, read_metrics
from minippo.rlhf.checkpoint import save_model
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.metrics import without_timing
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.rlhf.run.configs import comparable, config_from_dict
from minippo.rlhf.run.trainer import PPOTrainer
from tests.rlhf.ppo_helpers import tiny_config, world

#: the one 57-field PPOConfig of `minippo rlhf`, as run folders written before issue 25 stored it
OLD_DEFAULTS = {
    "iterations": 60, "seed": 0, "batch_size": 64, "samples_per_prompt": 1, "max_new_tokens": 24, "temperature": 1.0,
    "top_k": 0, "top_p": 1.0, "lr": 1e-4, "critic_lr": None, "lr_schedule": "linear", "warmup_iterations": 0,
    "adam_betas": [0.9, 0.95], "adam_eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0, "update_epochs": 4,
    "minibatch_size": 16, "clip_eps": 0.2, "clip_eps_high": None, "loss_agg": "token-mean", "ratio_level": "token",
    "vf_coef": 0.1, "value_clip": True, "clip_eps_value": 0.2, "ent_coef": 0.0, "ptx_coef": 0.0,
    "ptx_batch_size": 16, "kl_ref_loss_coef": 0.0, "kl_ref_loss_estimator": "k3", "reward_shaping": "kl_final",
    "kl_ref_estimator": "k1", "missing_eos_penalty": 1.0, "length_penalty": 0.0, "length_bonus": 0.0,
    "length_norm_alpha": 0.0, "score_clip": None, "whiten_rewards": False, "advantage_estimator": "gae",
    "gamma": 1.0, "lam": 0.95, "whiten_advantages": True, "kl_ref_controller": "adaptive", "kl_ref_coef": 0.2,
    "kl_ref_target": 4.0, "kl_ref_horizon": 1000.0, "kl_old_target": None, "kl_old_action": "early_stop",
    "ratio_threshold": 10.0, "critic": "separate", "critic_init": "reward_model", "critic_bias_init": "mean_score",
    "shared_stop_gradient": True, "value_norm": False, "log_exact_kl": False, "checkpoint_every": 10,
    "dump_rollouts": False}


def test_the_old_config_has_57_fields_and_reads_as_the_class_that_computes_it():
    assert len(OLD_DEFAULTS) == 57
    # the old default ratio_threshold (TRL's 10) is a knob now: the old main job is the knobs' config
    assert config_from_dict(OLD_DEFAULTS) == KnobsConfig(ratio_threshold=10.0)
    assert config_from_dict({**OLD_DEFAULTS, "ratio_threshold": None}) == PPOConfig()
    assert config_from_dict({**OLD_DEFAULTS, "value_norm": True, "top_k": 5}) == KnobsConfig(
        value_norm=True, top_k=5, ratio_threshold=10.0)
    # a critic-free estimator: the group family, its unused critic fields dropped
    grpo = config_from_dict({**OLD_DEFAULTS, "advantage_estimator": "rloo", "samples_per_prompt": 4,
                             "ratio_threshold": None, "critic": "none", "critic_init": "sft",
                             "kl_ref_loss_coef": 0.04})
    assert grpo == GRPOConfig(advantage_estimator="rloo", samples_per_prompt=4, kl_ref_loss_coef=0.04)


@pytest.mark.parametrize("change, field", [(dict(critic="separate"), "critic"), (dict(critic="none", top_k=5), "top_k"),
                                           (dict(critic="none", ptx_coef=0.5), "ptx_coef"),
                                           (dict(critic="none"), "ratio_threshold")])
def test_an_old_config_the_group_family_cannot_express_is_refused_naming_the_field(change, field):
    old = {**OLD_DEFAULTS, "advantage_estimator": "grpo", "samples_per_prompt": 4, "ratio_threshold": None, **change}
    if field == "ratio_threshold":
        old["ratio_threshold"] = 10.0                            # the old default: GRPOConfig has no threshold
    with pytest.raises(ValueError, match=f"^`{field}` is") as info:
        config_from_dict(old)
    assert "\n" not in str(info.value)


def test_canonical_ppo_and_the_knobs_at_their_defaults_compute_the_same_bits():
    """ppo_iteration and knobs_iteration with the same values: every record, every weight, bitwise; and a
    resume compares them as one config."""
    sft, rm, tok = world()
    runs = {}
    for cls in (PPOConfig, KnobsConfig):
        cfg = tiny_config(iterations=3, ent_coef=0.01, kl_old_target=0.5)
        cfg = cls.from_dict(cfg.to_dict())
        tr = PPOTrainer(cfg, sft, rm, tok)
        runs[cls] = ([without_timing(r) for r in tr.train()], tr)
    (a, tr_a), (b, tr_b) = runs[PPOConfig], runs[KnobsConfig]
    assert a == b
    for k in tr_a.actor.params:
        np.testing.assert_array_equal(tr_a.actor.params[k], tr_b.actor.params[k])
        np.testing.assert_array_equal(tr_a.state.critic.params[k], tr_b.state.critic.params[k])
    assert comparable(tr_a.cfg) == comparable(tr_b.cfg)


def test_a_run_folder_written_before_issue_25_resumes(tmp_path):
    """A checkpoint of format minippo.ppo/2 with the 57-field config (and the value-norm and KL-lr entries every
    old checkpoint held) resumes as the config it stored (the old default ratio_threshold 10: a knob now), and the
    run ends where an uninterrupted one does; asked to resume it as canonical PPO, the trainer refuses in one line
    naming the field."""
    sft, rm, tok = world()
    cfg = tiny_config(iterations=4, checkpoint_every=2, ratio_threshold=10.0)
    full = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "full")
    full.train()
    part = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "part")
    part.train(until=2)
    part.close()
    state_path = tmp_path / "part" / "checkpoint" / STATE
    state = json.loads(state_path.read_text())
    old = {**OLD_DEFAULTS, **cfg.to_dict()}
    state.update(format="minippo.ppo/2", ppo_config=old,
                 value_norm={"enabled": False, "mean": 0.0, "var": 1.0, "count": 0.0}, kl_old_lr=None)
    state_path.write_text(json.dumps(state))
    resumed = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "part", resume=True)
    assert resumed.iteration == 2
    resumed.train()
    a = [without_timing(r) for r in read_metrics(tmp_path / "full" / "metrics.jsonl")]
    b = [without_timing(r) for r in read_metrics(tmp_path / "part" / "metrics.jsonl")]
    assert a == b
    resumed.close()
    canonical = PPOConfig.from_dict({k: v for k, v in cfg.to_dict().items() if k in PPOConfig.__dataclass_fields__})
    with pytest.raises(ValueError, match=r"another configuration: ratio_threshold \(stored 10.0, requested None\); "
                                         r"nothing was changed") as info:
        PPOTrainer(canonical, sft, rm, tok, out_dir=tmp_path / "part", resume=True)
    assert "\n" not in str(info.value)


def _folders(tmp_path):
    sft, rm, tok = world()
    save_model(tmp_path / "sft" / "model", sft, tokenizer=tok)
    rm.save(tmp_path / "rm" / "model", tokenizer=tok)
    return ["--sft", str(tmp_path / "sft"), "--rm", str(tmp_path / "rm"), "--quick", "--iterations", "2",
            "--batch-size", "8", "--minibatch-size", "4", "--max-new-tokens", "6", "--no-progress"]


def test_minippo_ppo_advantage_estimator_still_runs_the_group_family(tmp_path, capsys):
    """The old spelling of a critic-free run keeps working for one release, saying what it is called now; a
    critic with it, or an option the family lacks, is one line naming the flag (exit 2)."""
    common = _folders(tmp_path)
    rc = main(["ppo", *common, "--out", str(tmp_path / "old"), "--advantage-estimator", "rloo",
               "--samples-per-prompt", "4", "--critic", "none"])
    cap = capsys.readouterr()
    assert rc == 0 and "--advantage-estimator rloo is deprecated" in cap.err and "minippo grpo" in cap.err
    saved = json.loads((tmp_path / "old" / "config.json").read_text())
    assert config_from_dict(saved) == GRPOConfig.quick(advantage_estimator="rloo", samples_per_prompt=4, iterations=2,
                                                       batch_size=8, minibatch_size=4, max_new_tokens=6)
    for bad, flag in ((["--critic", "separate"], "--critic"), (["--top-k", "5"], "--top-k")):
        rc = main(["ppo", *common, "--out", str(tmp_path / "bad"), "--advantage-estimator", "grpo",
                   "--samples-per-prompt", "4", *bad])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 2 and flag in err.splitlines()[-1] and "Traceback" not in err
    # the new command: the same run
    rc = main(["grpo", *common, "--out", str(tmp_path / "new"), "--advantage-estimator", "rloo",
               "--samples-per-prompt", "4", "--log-exact-kl", "true"])
    cap = capsys.readouterr()
    assert rc == 0 and "deprecated" not in cap.err
    new = read_metrics(tmp_path / "new" / "metrics.jsonl")
    old = read_metrics(tmp_path / "old" / "metrics.jsonl")
    assert [r["gold/score"] for r in new] == [r["gold/score"] for r in old] and "objective/kl_exact" in new[0]


def test_minippo_ppo_without_a_knob_is_canonical_ppo(tmp_path, capsys):
    common = _folders(tmp_path)
    rc = main(["ppo", *common, "--out", str(tmp_path / "p"), "--dump-rollouts", "true"])
    assert rc == 0 and capsys.readouterr().err == ""
    saved = json.loads((tmp_path / "p" / "config.json").read_text())
    assert set(saved) == set(PPOConfig.__dataclass_fields__) and (tmp_path / "p" / "rollouts" / "iter_0001.npz").exists()
    rc = main(["ppo", *common, "--out", str(tmp_path / "p"), "--advantage-estimator", "gae"])
    err = capsys.readouterr().err
    assert rc == 0 and "--advantage-estimator is deprecated: GAE is PPO's estimator" in err   # the run resumed: done
