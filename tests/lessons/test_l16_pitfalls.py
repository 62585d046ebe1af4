"""Smoke test of lesson 16: the lr = 0 check passes (bitwise or to float32 rounding, as this machine's BLAS kernel
gives it, and the narrative says which) and each deliberate bug breaks it; the critic's bias init removes the
offset at iteration 0; a length bonus lengthens the responses."""
import numpy as np

from lessons import l16_pitfalls as lesson
from minippo.blas import blas_core_name


def test_l16_quick(tmp_path, capsys):
    r = lesson.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    ck = r["check"]
    fm, tol, eps = ck["first_minibatch"], ck["tolerance"], float(np.finfo(np.float32).eps)
    # C. lr = 0, exact on any machine: the parameters do not move; the same forward (same shapes, same BLAS
    # thread count as the rollout) is bitwise the rollout's logp; nothing is clipped
    assert ck["params_unchanged"] and ck["stats"]["same forward (the trainer)"]["max_abs_log_ratio"] == 0.0
    assert fm["clipfrac"] == 0.0 and ck["record"]["policy/clipfrac_avg"] == 0.0
    # ... to float32 rounding: the first minibatch (b of B rows) against the rollout's forward pass (B rows);
    # tol = eps32 * (4L + 2) * sqrt(4C) * max|logp| (pitfalls.logp_rounding_tolerance), plus one ulp for r itself
    max_log_r = max(abs(np.log(fm["ratio_max"])), abs(np.log(fm["ratio_min"])))
    assert max_log_r <= tol + eps and 0 < tol < 1e-3
    assert abs(fm["approx_kl"]) <= (eps + (tol + eps) ** 2 / 2) * np.exp(tol + eps)     # k3 with r one ulp off
    # the printed verdict follows from these numbers
    bitwise = fm["ratio_min"] == fm["ratio_max"] == 1.0 and fm["approx_kl"] == 0.0
    assert ck["verdict"]["verdict"] == ("bitwise" if bitwise else "rounding")
    kernel = blas_core_name()
    assert f"BLAS kernel {kernel}" in out if kernel else "BLAS kernel unknown" in out
    if bitwise:
        assert "Verdict: bitwise 1 on this machine" in out and "Verdict: 1 to within" not in out
    else:
        assert f"Verdict: 1 to within {max_log_r:.2g} (tolerance {tol:.2g}): float32 rounding" in out
        assert f"on this BLAS kernel ({kernel})" in out and "bitwise 1 on this machine" not in out
    assert "FAILED" not in out and "parameters stay bitwise unchanged" in out
    assert "gives bitwise its logp (max |log r| 0)" in out
    for label in ("temperature 0.7, not 1", "no attention mask", "logits one column off"):
        assert ck["stats"][label]["approx_kl"] > 1e-3 and ck["stats"][label]["clipfrac"] > 0, label
        assert ck["stats"][label]["max_abs_log_ratio"] > 1000 * tol, label    # a bug is far above rounding
    # padding + mask: harmless, to rounding (other shapes than the rollout's)
    assert ck["stats"]["3 more pads, mask kept"]["max_abs_log_ratio"] <= tol
    assert "move no row beyond float32 rounding" in out
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
    assert "lr = 0" in out and "Seed 001" in out
    assert (tmp_path / "l16_pitfalls.png").stat().st_size > 50_000
