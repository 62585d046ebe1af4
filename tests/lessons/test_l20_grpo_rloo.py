"""Smoke test of lesson 20: PPO and the critic-free estimators on one budget, three models instead of four."""
import numpy as np
import pytest

from lessons import l20_grpo_rloo as lesson

PPO = "PPO (GAE + critic)"
CRITIC_FREE = ("GRPO", "RLOO", "REINFORCE (batch mean)")


def test_l20_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    sz, S = r["sizes"], r["summary"]
    assert list(S) == list(lesson.METHODS)
    # the same number of responses per iteration for every method: PPO 1 per prompt, the others GROUP per prompt
    assert S[PPO]["samples_per_prompt"] == 1 and S[PPO]["prompts"] == sz["batch_size"]
    for name in CRITIC_FREE:
        assert S[name]["samples_per_prompt"] == lesson.GROUP and S[name]["prompts"] == sz["batch_size"] // lesson.GROUP
    for name, per_seed in r["records"].items():
        for recs in per_seed:
            assert [rec["episode"] for rec in recs] == [(i + 1) * sz["batch_size"] for i in range(sz["iterations"])]
        assert 0 < np.mean(S[name]["tokens"]) <= sz["iterations"] * sz["batch_size"] * 24
    # no critic: no value loss; GRPO: the KL is a loss term, not in the reward; RLOO keeps it in the reward
    for name in CRITIC_FREE:
        assert all(rec["loss/value_avg"] == 0.0 for recs in r["records"][name] for rec in recs)
    grpo = [rec for recs in r["records"]["GRPO"] for rec in recs]
    assert all(rec["kl_coef"] == 0.0 and rec["objective/non_score_reward"] == 0.0 for rec in grpo)
    assert all(rec["loss/kl_avg"] > 0 for rec in grpo[1:])            # the policy has moved after one update
    assert all(rec["kl_coef"] > 0 for recs in r["records"]["RLOO"] for rec in recs)
    assert all(rec["loss/value_avg"] > 0 for recs in r["records"][PPO] for rec in recs)
    # the baselines' identities on the group rollouts
    bl = r["baselines"]
    assert bl["batch mean"] == pytest.approx(1.0)
    assert bl["group mean"] == pytest.approx(1.0 - bl["between_prompts"])
    assert bl["leave-one-out"] == pytest.approx((lesson.GROUP / (lesson.GROUP - 1)) ** 2 * bl["group mean"])
    # three models instead of four, and less memory at both sizes
    mem = r["memory"]
    assert (mem["separate"]["models"], mem["none"]["models"]) == (4, 3)
    assert mem["none"]["ours_total"] < mem["separate"]["ours_total"]
    assert mem["none"]["7b_total"] < 0.6 * mem["separate"]["7b_total"]
    out = capsys.readouterr().out
    assert "Memory: PPO keeps 4 models" in out and "Whitening" in out
    assert (tmp_path / "l20_grpo_rloo.png").stat().st_size > 50_000
