"""minippo.studies.knob_sweeps: the measures of lesson 17's --full claims, checked by hand and independently."""
import numpy as np
import pytest
from tests.rlhf.ppo_helpers import tiny_config, world

from minippo.rl.gae import gae
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.run.trainer import PPOTrainer
from minippo.studies.knob_sweeps import (advantage_record, extra_variants, iterations_to, lambda_dynamics,
                                         oscillation, params_digest)


@pytest.mark.parametrize("kw", [{}, {"whiten_rewards": True}, {"gamma": 0.9, "lam": 0.5}])
def test_advantage_record_is_the_raw_gae_before_whitening(kw):
    sft, rm, tok = world("float64")
    tr = PPOTrainer(tiny_config(**kw), sft, rm, tok)
    tr.step()
    ro, cfg, rec = tr.last_rollout, tr.cfg, {}
    advantage_record(tr, ro, rec)
    mask = ro.response_mask.astype(bool)
    raw, _ = gae(ro.rewards, ro.values, ro.response_mask, gamma=cfg.gamma, lam=cfg.lam)  # recomputed from the rewards
    assert rec["adv/raw_var"] == pytest.approx(np.var(raw[mask], ddof=1), rel=1e-9)
    assert np.var(ro.adv[mask]) == pytest.approx(1.0, rel=1e-6)      # what the update sees: whitened (ddof 0)
    assert rec["adv/first_score_corr"] == pytest.approx(np.corrcoef(raw[:, 0], ro.scores)[0, 1], rel=1e-9)


def test_the_reward_model_is_never_changed_by_ppo():
    sft, rm, tok = world("float64")
    before = params_digest(rm)
    tr = PPOTrainer(tiny_config(), sft, rm, tok)
    tr.train()
    assert params_digest(rm) == before
    assert params_digest(tr.actor) != params_digest(sft)                     # the actor did move
    rm.params[sorted(rm.params)[0]].flat[0] += 1e-12                         # the digest sees one changed bit
    assert params_digest(rm) != before


def test_oscillation_and_iterations_to_by_hand():
    c = np.array([[0.0, 1.0, 0.0, 1.0], [0.0, 0.5, 1.0, 1.5]])
    assert oscillation(c) == pytest.approx([np.std([1, -1, 1], ddof=1), 0.0])
    # 3-iteration means: row 0: 1/3, 2/3; row 1: 0.5, 1.0
    assert iterations_to(c, 0.6).tolist() == [4.0, 4.0]
    assert iterations_to(c, 0.4).tolist() == [4.0, 3.0]
    assert iterations_to(c, 5.0).tolist() == [5.0, 5.0]                      # never: I + 1
    assert iterations_to(c, 0.5, window=1).tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="curves"):
        oscillation(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="window"):
        iterations_to(c, 0.0, window=0)
    with pytest.raises(ValueError, match="curves"):
        iterations_to(np.zeros(4), 0.0)


def test_lambda_dynamics_level_is_half_way_to_the_base_end():
    curves = {"a": np.array([[0.0, 1.0, 2.0, 3.0]]), "b": np.array([[2.0, 2.0, 2.0, 2.0]])}
    d = lambda_dynamics(curves, "a")
    assert d["start"] == 1.0 and d["end"] == 3.0 and d["level"] == 2.0
    assert d["speed"]["a"].tolist() == [4.0] and d["speed"]["b"].tolist() == [3.0]


def test_every_extra_variant_is_a_valid_config():
    base = dict(iterations=2, batch_size=16, minibatch_size=4, lr=5e-4)
    variants = extra_variants(base, vf_coef=0.1)
    assert len(variants) == 11 and variants["base"] == {}
    for name, ov in variants.items():
        ov = dict(ov)
        cls = ov.pop("config", PPOConfig)
        cfg = cls(**{**base, **ov})
        assert cfg.batch_size % cfg.minibatch_size == 0 and cfg.batch_size // cfg.minibatch_size == 4, name
    assert variants["8 x 4"]["samples_per_prompt"] == 4 and variants["score only"]["kl_ref_coef"] == 0.0
