"""Smoke test of lesson 18: PPO-ptx lowers the alignment tax; the critic arrangements run and cost what they should."""
from lessons import l18_ptx_and_critic as lesson


def test_l18_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    sz, ptx, critics = r["sizes"], r["ptx"], r["critics"]
    assert sorted(ptx) == [0.0, 1.0] and list(critics) == list(lesson.CRITICS)
    assert critics["separate, RM init"] is ptx[0.0]                    # the default config is the ptx-0 run
    # the corpus loss is only trained on with PPO-ptx, and it lowers the held-out LM loss (the tax)
    assert ptx[0.0]["ptx_loss"] == [0.0] and ptx[1.0]["ptx_loss"][0] > 0
    assert ptx[1.0]["tax"][0] < ptx[0.0]["tax"][0]
    assert r["sft_lm_loss"] > 0 and all(len(v["gold"]) == len(sz["seeds"]) for v in r["runs"].values())
    # every arrangement trained a critic (value loss > 0); the curves have one entry per iteration
    for v in critics.values():
        assert v["value_loss"][0] > 0 and v["curves"]["loss/value_avg"].shape == (1, sz["iterations"])
    # the value loss's part of the shared trunk's gradient is measured for both shared critics (a probe)
    assert all(len(critics[k]["split"]) == 1 and critics[k]["split"][0]["share"] >= 0
               for k in ("shared + stop-gradient", "shared, no stop-gradient"))
    # memory: the shared value head saves the critic's trunk
    mem = r["memory"]
    assert mem["none"]["7b_total"] <= mem["shared"]["7b_total"] < 0.6 * mem["separate"]["7b_total"]
    assert mem["shared"]["ours_total"] < mem["separate"]["ours_total"]
    out = capsys.readouterr().out
    assert "PPO-ptx" in out and "Critic arrangements" in out
    assert (tmp_path / "l18_ptx_and_critic.png").stat().st_size > 50_000
