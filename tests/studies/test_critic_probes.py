"""minippo.studies.critic_probes: the value loss's part of the shared trunk's gradient, checked independently."""
import numpy as np
import pytest
from tests.rlhf.ppo_helpers import tiny_config, world

from minippo.studies.critic_probes import HEAD, trunk_gradient_split
from minippo.rlhf.ppo_knobs import minibatch_loss_and_grads
from minippo.rlhf.run.trainer import PPOTrainer


def shared_trainer(**kw):
    sft, rm, tok = world("float64")
    tr = PPOTrainer(tiny_config(critic="shared", shared_stop_gradient=False, **kw), sft, rm, tok)
    tr.step()                                    # a rollout with adv and returns, and a trained head
    return tr


def test_value_part_equals_the_gradient_of_the_value_loss_alone():
    tr = shared_trainer()
    tr.actor.params["scalar_head.w"][...] = np.random.default_rng(0).normal(size=(tr.actor.cfg.n_embd, 1))
    split = trunk_gradient_split(tr.state, tr.last_rollout, tr.cfg)
    # independently: zero advantages (the clipped surrogate's gradient is then exactly 0), no other terms
    mb = tr.last_rollout.take(np.arange(tr.cfg.minibatch_size))
    mb.adv = np.zeros_like(mb.adv)
    g = minibatch_loss_and_grads(tr.state, mb, tr.cfg.replace(ent_coef=0.0, kl_ref_loss_coef=0.0))[2]
    value_only = np.sqrt(sum(np.sum(v ** 2) for k, v in g.items() if k not in HEAD))
    assert split["value"] == pytest.approx(value_only, rel=1e-9)
    assert 0 < split["share"] and split["total"] > 0 and tr.cfg.shared_stop_gradient is False   # cfg unchanged
    assert split["head_w_norm"] == pytest.approx(np.linalg.norm(tr.actor.params["scalar_head.w"]))


def test_a_zero_head_sends_nothing_into_the_trunk():
    tr = shared_trainer()
    tr.actor.params["scalar_head.w"][...] = 0.0
    split = trunk_gradient_split(tr.state, tr.last_rollout, tr.cfg, rows=[0, 1, 2])
    assert split["value"] == 0.0 and split["share"] == 0.0 and split["total"] > 0


def test_validation():
    tr = shared_trainer()
    with pytest.raises(ValueError, match="`rows`"):
        trunk_gradient_split(tr.state, tr.last_rollout, tr.cfg, rows=[])
    ro = tr.last_rollout.take(np.arange(4))
    ro.adv = None
    with pytest.raises(ValueError, match="`rollout`"):
        trunk_gradient_split(tr.state, ro, tr.cfg)
    sft, rm, tok = world("float64")
    sep = PPOTrainer(tiny_config(), sft, rm, tok)
    with pytest.raises(ValueError, match="`cfg.critic`"):
        trunk_gradient_split(sep.state, tr.last_rollout, sep.cfg)
