"""minippo.rlhf.corrected: PPO with a mismatched sampler and its correction, through the trainer.

Without mismatch and without correction it is canonical PPO, bitwise; with a correction the update is
PPO's on the advantages w A, w = off_policy_weights(logp_old, logp_sampler); the stale sampler is the
actor k iterations earlier; bad options and a resume that lost the versions are ValueErrors."""
import numpy as np
import pytest

from minippo.rl.off_policy import off_policy_weights
from minippo.rlhf.corrected import CorrectedConfig, CorrectedRollout, CorrectedState
from minippo.rlhf.ppo import response_logprobs
from minippo.rlhf.run.configs import config_from_dict
from minippo.rlhf.run.trainer import PPOTrainer
from tests.rlhf.ppo_helpers import world

BASE = dict(iterations=3, batch_size=8, minibatch_size=4, max_new_tokens=8, update_epochs=2,
            checkpoint_every=1)


def run(cfg, iterations=2):
    """Records, rollouts, updates and the final actor of ``iterations`` trainer steps."""
    sft, rm, tok = world()
    tr = PPOTrainer(cfg, sft, rm, tok)
    seen = []
    for _ in range(iterations):
        tr.step(callback=lambda t, ro, rec: seen.append(ro))
    return tr, seen


def test_no_mismatch_no_correction_is_ppo_bitwise():
    """CorrectedConfig() with its defaults: every array of every rollout and every parameter equal to
    the canonical ppo_iteration's (same seed, same machine: exact equality)."""
    from minippo.rlhf.ppo_config import PPOConfig
    a, ro_a = run(PPOConfig(**BASE))
    b, ro_b = run(CorrectedConfig(**BASE))
    assert type(b.state) is CorrectedState and type(ro_b[0]) is CorrectedRollout
    for x, y in zip(ro_a, ro_b):
        for name, arr in x.arrays().items():
            np.testing.assert_array_equal(arr, getattr(y, name), err_msg=name)
        np.testing.assert_array_equal(y.logp_sampler, y.gen_logp)       # mu = pi: the sampler's own logp
    for k, p in a.state.actor.params.items():
        np.testing.assert_array_equal(p, b.state.actor.params[k], err_msg=k)
    for k, p in a.state.critic.params.items():
        np.testing.assert_array_equal(p, b.state.critic.params[k], err_msg=k)


@pytest.mark.parametrize("mode,level,cap", [("tis", "token", 2.0), ("mis", "sequence", 1.5),
                                            ("is", "sequence", None)])
def test_the_advantages_are_weighted_by_pi_old_over_mu(mode, level, cap):
    """bf16-rounded sampler: the rollout's advantages are the GAE advantages times the weights of
    off_policy_weights(logp_old, logp_sampler) (recomputed here), and log mu differs from logp_old."""
    cfg = CorrectedConfig(**BASE, logits_precision="bfloat16-truncate", correction=mode,
                          correction_level=level, correction_cap=cap)
    none = CorrectedConfig(**BASE, logits_precision="bfloat16-truncate")
    (_, (ro,)), (_, (ro0,)) = run(cfg, 1), run(none, 1)
    m = ro.response_mask
    assert np.abs((ro.logp - ro.logp_sampler)[m == 1]).max() > 0           # the mismatch is there
    np.testing.assert_array_equal(ro.logp_sampler, ro0.logp_sampler)       # same draws, same mu
    w, _ = off_policy_weights(ro.logp, ro.logp_sampler, m, mode=mode, level=level, cap=cap)
    np.testing.assert_array_equal(ro.adv, w * ro0.adv)


def test_the_stale_sampler_is_the_actor_k_iterations_earlier():
    """stale_k = 2: at iteration 2 the responses' log mu is the starting actor's log-probs (to float32
    rounding between the KV-cache sampler and a full forward pass), lag 0, 1, 2."""
    sft, rm, tok = world()
    tr = PPOTrainer(CorrectedConfig(**{**BASE, "iterations": 3}, stale_k=2, correction="tis",
                                    correction_cap=2.0), sft, rm, tok)
    start = tr.state.actor.copy()
    seen = []
    for _ in range(3):
        tr.step(callback=lambda t, ro, rec: seen.append(ro))
    assert tr.state.versions.lag == 2
    ro = seen[2]
    logp_start = response_logprobs(start, ro.sequences, ro.attn_mask, ro.response, ro.prompt_len)
    m = ro.response_mask == 1
    assert np.abs(logp_start - ro.logp_sampler)[m].max() < 1e-4             # float32, two code paths
    assert np.abs(ro.logp - ro.logp_sampler)[m].max() > 1e-3               # the actor has moved


def test_lag_is_reported():
    tr, _ = run(CorrectedConfig(**BASE, stale_k=2), 3)
    # iteration n samples with version max(0, n - 2): lag min(n, 2)
    assert tr.state.versions.lag == 2


def test_a_resumed_stale_run_is_refused():
    sft, rm, tok = world()
    tr = PPOTrainer(CorrectedConfig(**BASE, stale_k=1), sft, rm, tok)
    tr.step()
    tr.state.versions = None                       # what a resume from a checkpoint holds
    with pytest.raises(ValueError, match="cannot resume"):
        tr.step()


@pytest.mark.parametrize("kw,name", [({"correction": "trim"}, "correction"),
                                     ({"correction_level": "row"}, "correction_level"),
                                     ({"correction": "tis"}, "cap"),
                                     ({"correction": "none", "correction_cap": 2.0}, "cap"),
                                     ({"stale_k": -1}, "stale_k"),
                                     ({"logits_precision": "fp8"}, "logits_precision")])
def test_bad_options_name_the_field(kw, name):
    with pytest.raises(ValueError, match=name):
        CorrectedConfig(**BASE, **kw)


def test_config_round_trip():
    cfg = CorrectedConfig(**BASE, stale_k=2, correction="mis", correction_cap=2.0)
    assert config_from_dict(cfg.to_dict()) == cfg


def test_the_record_holds_the_weights_statistics():
    """Each iteration's record: off_policy/* are off_policy_weights' statistics of that rollout (recomputed
    here from its logp_old and log mu) and the sampler's lag; a tight cap truncates some tokens."""
    from minippo.rlhf.corrected import OFF_POLICY_GLOSSARY
    cfg = CorrectedConfig(**BASE, logits_precision="bfloat16-truncate", stale_k=1, correction="tis",
                          correction_cap=1.001)
    sft, rm, tok = world()
    tr = PPOTrainer(cfg, sft, rm, tok)
    seen = []
    records = [tr.step(callback=lambda t, ro, rec: seen.append(ro)) for _ in range(2)]
    for it, (rec, ro) in enumerate(zip(records, seen)):
        # the weights were computed before the update from the rollout's logp (pi_old) and logp_sampler (mu)
        _, stats = off_policy_weights(ro.logp, ro.logp_sampler, ro.response_mask, mode="tis", cap=1.001)
        assert {k: rec[k] for k in OFF_POLICY_GLOSSARY} == {**{f"off_policy/{k}": stats[k] for k in (
            "truncated_frac", "masked_frac", "ess_frac", "weight_mean", "mismatch_kl")}, "off_policy/lag": it}
    assert records[1]["off_policy/truncated_frac"] > 0


def test_the_sampler_log_probs_hold_zero_on_padding():
    """CorrectedRollout keeps log mu of the sampler with 0 on padding, as every per-token array of the
    rollout (whatever was stored there: 7 here), the valid tokens unchanged (exactly: nothing is computed).
    Catches the padding of logp_sampler kept."""
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    z = np.zeros((2, 3))
    ro = CorrectedRollout(prompt_ids=np.ones((2, 2), dtype=np.int64), prompt_mask=np.ones((2, 2), dtype=np.int64),
                          response=np.ones((2, 3), dtype=np.int64), response_mask=mask, logp=z, logp_ref=z,
                          values=z, rm_scores=np.zeros(2), scores=np.zeros(2), ended=np.ones(2, bool),
                          logp_sampler=np.array([[-1.5, -0.5, 7.0], [-2.0, -1.0, -0.25]]))
    np.testing.assert_array_equal(ro.logp_sampler, [[-1.5, -0.5, 0.0], [-2.0, -1.0, -0.25]])
