"""Smoke test of lesson 16: the lr = 0 check passes bitwise and each deliberate bug breaks it; the critic's
bias init removes the offset at iteration 0; a length bonus lengthens the responses."""
from lessons import l16_pitfalls as lesson


def test_l16_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    ck = r["check"]
    # C. lr = 0: ratio exactly 1 in the trainer and in the correct recompute; every bug moves it
    assert ck["first_minibatch"] == {"ratio_mean": 1.0, "approx_kl": 0.0, "clipfrac": 0.0}
    assert ck["stats"]["same forward (the trainer)"]["max_abs_log_ratio"] == 0.0
    for label in ("temperature 0.7, not 1", "no attention mask", "logits one column off"):
        assert ck["stats"][label]["approx_kl"] > 1e-3 and ck["stats"][label]["clipfrac"] > 0, label
    assert ck["stats"]["3 more pads, mask kept"]["max_abs_log_ratio"] < 1e-4          # padding + mask: harmless
    assert ck["stats"]["no attention mask"]["rows_changed"] == ck["padded_rows"]      # only the padded rows move
    # A. the critic against RM + 10: bias init removes the offset; value clipping is active
    s = lesson.summary(r)
    assert s["bias init"]["err0"] < s["no fix"]["err0"] / 5
    clip_frac = lambda name: r["critic"][name]["records"][0][-1]["val/clipfrac_avg"]   # noqa: E731
    assert clip_frac("value clip") > 0 and clip_frac("no fix") == 0
    # B. the length bonus lengthens the responses; the fitted penalty is a penalty
    lens = {k: v["eval"][0]["length_mean"] for k, v in r["length"].items()}
    plain, hack, _, normed = lens
    assert lens[hack] > lens[plain] and r["penalty"] > 0
    first = {k: r["length"][k]["records"][0][0] for k in (hack, normed)}   # same seed: the same first rollout
    assert first[hack]["objective/rm_scores"] == first[normed]["objective/rm_scores"]
    assert 0 < first[normed]["objective/scores"] < first[hack]["objective/scores"] / 2   # / n^0.5, n > 4
    out = capsys.readouterr().out
    assert "lr = 0" in out and "Seed 001" in out
    assert (tmp_path / "l16_pitfalls.png").stat().st_size > 50_000
