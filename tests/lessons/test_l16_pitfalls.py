"""Smoke test of lesson 16: the lr = 0 check passes (bitwise or to float32 rounding, as this machine's BLAS kernel
gives it, and the narrative says which) and each deliberate bug breaks it; the critic's bias init removes the
offset at iteration 0; a length bonus lengthens the responses."""
import numpy as np
import pytest

from lessons import l16_pitfalls as lesson
from minippo.blas import blas_core_name
from minippo.studies.sweep_stats import compare, compare_paired, pooled_seed_std
from tests.helpers import assert_one_of, assert_verdict, quick_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def test_l16_quick(runs):
    r = runs[0]
    out = runs["printed"]
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
    assert out.startswith(lesson.narrative(r)) and "lr = 0" in out
    # Q47: the clamped critic's values never leave the box; the others' do not see a clamp
    clamped = r["q47"][lesson.CLAMP]["records"]
    assert all(0 <= rec["val/values_outside_box"] <= 1 for recs in clamped for rec in recs)
    assert (runs["out"] / "l16_pitfalls.png").stat().st_size > 50_000


def _critic(s, a, b, key):                              # b - a over the seeds, seed noise pooled over the critics
    return compare(s[a][key], s[b][key], pooled_seed_std([x[key] for x in s.values()])[0])


def _length(r, a, b, key):                              # b - a: one training seed, paired over the prompts
    get = (lambda v: v["sentiment"][0]) if key == "sentiment" else (lambda v: np.asarray(v["eval"][0][key], float))
    return compare_paired(get(r["length"][a]), get(r["length"][b]))


def _sign(c):
    return int(np.sign(c["diff"])) if c["clear"] else 0


@pytest.mark.parametrize("seed", [0, 1])
def test_l16_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    text = lesson.narrative(r)
    s = lesson.summary(r)
    assert len(r["sizes"]["seeds"]) == 2 and len(r["sizes"]["long_seeds"]) == 1     # the branches tested below
    c = _critic(s, "no fix", "value clip", "err_end_seeds")
    assert_verdict(text, "clipping the value loss calms", _sign(c) < 0, "): holds;", "does not hold here")
    c = _critic(s, "no fix", "value norm", "err_end_seeds")
    assert_verdict(text, "value normalisation fixes", _sign(c) < 0, "): holds", "does not hold here")
    assert_verdict(text, "initialise the value head's bias", s["bias init"]["err0"] < s["no fix"]["err0"] / 4,
                   "the offset is gone", "the offset is NOT gone")
    c = _critic(s, "bias init", "RM-init critic", "ev_end_seeds")
    assert_verdict(text, "The main job's critic", _sign(c) > 0, "the RM's weights know more", "do not explain more")
    lo = min(s, key=lambda k: s[k]["err_end"])
    hi = max(s, key=lambda k: s[k]["err_end"])
    g = _critic(s, hi, lo, "gold")
    assert_one_of(text, "a smaller value loss means", {1: "holds between these two", -1: "the smaller error has the "
                                                       "lower gold", 0: "no gold difference beyond"}, _sign(g))
    plain, hack, fixed, normed = r["length"]
    longer, worse = _length(r, plain, hack, "length"), _length(r, plain, hack, "gold")
    key = "holds" if _sign(longer) > 0 and _sign(worse) < 0 else "half" if _sign(longer) > 0 else "no"
    assert_one_of(text, "preference for length is exploited", {"holds": "): holds.", "half": "half holds",
                                                               "no": "does not hold here"}, key)
    assert_one_of(text, "The fitted length penalty", {0: "brings the length back", 1: "does not fully fix it",
                                                      -1: "it overshoots"}, _sign(_length(r, plain, fixed, "length")))
    line = "The division by length^"
    assert_verdict(text, line, _sign(_length(r, plain, normed, "length")) > 0, "still longer", "not longer beyond")
    assert_verdict(text, line, _sign(_length(r, plain, normed, "sentiment")) < 0, "the policy learns less",
                   "does not learn less")
    st = r["check"]["stats"]
    bugs = [k for k in lesson.RECOMPUTES if k not in lesson.CONTROLS_C]
    hidden = [k for k in bugs if abs(st[k]["ratio_mean"] - 1) < 0.05]
    assert_verdict(text, "Without the mask", bool(hidden), "The mean ratio hides", "Every bug also moves")
    assert_verdict(text, "Without the mask", np.isclose(st["no attention mask"]["rows_changed"],
                                                         r["check"]["padded_rows"]), "exactly the rows", "NOT exactly")
    caught = all(st[k]["clipfrac"] > 0 for k in bugs) and all(st[k]["clipfrac"] == 0 for k in lesson.CONTROLS_C)
    assert_verdict(text, "clipfrac at lr = 0" if caught else "NOT every bug", caught, "a non-zero clipfrac at lr = 0",
                   "NOT every bug")
    assert "seed 00" not in text.lower()
    # Q47: the clamp against value clipping, error at the end with the seed noise of all seven critics
    four = {k: r["critic"][k] for k in ("no fix", "value clip", "bias init")}
    four["clamp"] = r["q47"][lesson.CLAMP]
    err = lambda v: np.log10([np.mean([rec["val/value_error"] for rec in recs[-3:]]) for recs in v["records"]])  # noqa
    noise = pooled_seed_std([err(v) for v in four.values()])[0]
    c = compare(err(four["bias init"]), err(four["clamp"]), noise)
    box = lambda v: np.mean([[rec["val/values_outside_box"] for rec in recs[-3:]] for recs in v["records"]])  # noqa
    differ = c["clear"] and c["diff"] > 0 and box(four["value clip"]) < 0.5 * box(four["clamp"])
    assert_verdict(text, "error at the end (log10", differ, "different operations' holds",
                   "different operations' does not hold here")
    assert "Q47. A clamp of V to [-10, 10]" in text

