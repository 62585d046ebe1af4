"""Smoke test of lesson 16: the lr = 0 check passes (bitwise or to float32 rounding, as this machine's BLAS kernel
gives it, and the narrative says which) and each deliberate bug breaks it; the critic's bias init removes the
offset at iteration 0; a length bonus lengthens the responses."""
import numpy as np
import pytest

from lessons import l16_pitfalls as lesson
from minippo.blas import blas_core_name
from minippo.studies.sweep_stats import compare, compare_paired, pooled_seed_std
from minippo.studies.verdicts import FAILS, HOLDS, NOT_SHOWN, by_key
from tests.helpers import assert_comparison, assert_derived, assert_printed, expected_outcome, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)


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
        assert "Bitwise 1 on this machine" in out and "  1 to within" not in out
    else:
        assert f"  1 to within {max_log_r:.2g} (tolerance {tol:.2g}): float32 rounding" in out
        assert f"on this BLAS kernel ({kernel})" in out and "Bitwise 1 on this machine" not in out
    assert "parameters stay bitwise unchanged" in out
    V = by_key(lesson.verdicts(r))                         # the identities of part C, on this machine
    assert V["lr0_ratio_is_one"].outcome == V["lr0_bitwise_on_every_machine"].outcome == HOLDS
    for label in ("temperature 0.7, not 1", "no attention mask", "logits one column off"):
        assert ck["stats"][label]["approx_kl"] > 1e-3 and ck["stats"][label]["clipfrac"] > 0, label
        assert ck["stats"][label]["max_abs_log_ratio"] > 1000 * tol, label    # a bug is far above rounding
    # padding + mask: harmless, to rounding (other shapes than the rollout's)
    assert ck["stats"]["3 more pads, mask kept"]["max_abs_log_ratio"] <= tol
    assert V["padding_harmless"].outcome == V["no_mask_hits_padded_rows"].outcome == HOLDS
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


@pytest.mark.parametrize("seed", [0, 1])
def test_l16_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    assert_printed(lesson, runs)
    V = by_key(lesson.verdicts(r))
    s = lesson.summary(r)
    assert len(r["sizes"]["seeds"]) == 2 and len(r["sizes"]["long_seeds"]) == 1     # the branches tested below
    assert_comparison(V["value_clip_calms"], _critic(s, "no fix", "value clip", "err_end_seeds"), -1)
    assert_comparison(V["value_norm_fixes_scale"], _critic(s, "no fix", "value norm", "err_end_seeds"), -1)
    assert V["bias_init_removes_offset"].holds == (s["bias init"]["err0"] < s["no fix"]["err0"] / 4)
    assert_comparison(V["rm_critic_explains_more"], _critic(s, "bias init", "RM-init critic", "ev_end_seeds"), +1)
    # Q15: every pair of critics whose logged loss differs beyond 2 s.e. (log10, seed noise pooled): gold order
    loss = {k: np.log10(lesson.seed_values(r["critic"][k], "loss/value_avg")) for k in s}
    ln = pooled_seed_std(list(loss.values()))[0]
    outs = []
    for i, a in enumerate(s):
        for b in list(s)[i + 1:]:
            lo, hi = (a, b) if loss[a].mean() < loss[b].mean() else (b, a)
            if expected_outcome(loss[hi].mean() - loss[lo].mean(), ln * np.sqrt(1 / len(loss[a]) + 1 / len(loss[b])),
                                +1) == HOLDS:
                g = _critic(s, hi, lo, "gold")
                outs.append(expected_outcome(g["diff"], g["se"], +1))
    want = NOT_SHOWN if not outs else FAILS if FAILS in outs else HOLDS if set(outs) == {HOLDS} else NOT_SHOWN
    assert V["smaller_loss_better_policy"].outcome == want
    plain, hack, fixed, normed = r["length"]
    longer, worse = _length(r, plain, hack, "length"), _length(r, plain, hack, "gold")
    parts = [expected_outcome(longer["diff"], longer["se"], +1), expected_outcome(worse["diff"], worse["se"], -1)]
    assert V["length_exploited"].outcome == (FAILS if FAILS in parts else HOLDS if set(parts) == {HOLDS} else NOT_SHOWN)
    assert_comparison(V["penalty_undoes_bonus"], _length(r, hack, fixed, "length"), -1)
    assert_comparison(V["norm_still_longer"], _length(r, plain, normed, "length"), +1)
    assert_comparison(V["norm_learns_less"], _length(r, plain, normed, "sentiment"), -1)
    st = r["check"]["stats"]
    bugs = [k for k in lesson.RECOMPUTES if k not in lesson.CONTROLS_C]
    caught = all(st[k]["clipfrac"] > 0 for k in bugs) and all(st[k]["clipfrac"] == 0 for k in lesson.CONTROLS_C)
    assert V["bugs_clip"].holds == caught
    assert "seed 00" not in lesson.narrative(r).lower()
    # Q47: the clamp against the bias init, error at the end with the seed noise of the four critics
    four = {k: r["critic"][k] for k in ("no fix", "value clip", "bias init")}
    four["clamp"] = r["q47"][lesson.CLAMP]
    err = lambda v: np.log10([np.mean([rec["val/value_error"] for rec in recs[-3:]]) for recs in v["records"]])  # noqa
    noise = pooled_seed_std([err(v) for v in four.values()])[0]
    assert_comparison(V["q47_clamp_differs"], compare(err(four["bias init"]), err(four["clamp"]), noise), +1)
    assert "Q47. A clamp of V to [-10, 10]" in lesson.narrative(r)


@pytest.mark.parametrize("seed", [0, 1])
def test_l16_lr_zero_identities_on_the_numpy_path(seed):
    """Part C's identities with the NumPy formulas instead of the kernels (the quick runs use the kernels)."""
    from minippo import kernels
    from minippo.studies.study import Study
    sz = lesson.sizes(quick=True, full=False)
    base = dict(iterations=1, batch_size=sz["batch_size"], minibatch_size=sz["minibatch_size"], lr=0.0)
    with kernels.use_kernels(False):
        ck = lesson.lr_zero_check(Study(quick=True, seed=seed), base)
    assert ck["params_unchanged"] and ck["stats"]["same forward (the trainer)"]["max_abs_log_ratio"] == 0.0
    assert ck["verdict"]["verdict"] in ("bitwise", "rounding") and ck["first_minibatch"]["clipfrac"] == 0.0
    assert all(v.outcome == HOLDS for v in lesson.lr_zero_verdicts(ck))


def test_l16_derived_is_what_the_narrative_prints(runs):
    """derived(): the numbers the results file keeps besides run()'s scalars (docs/results, the quoted docs)."""
    assert_derived(lesson, runs[0], runs["printed"], {'length_variants.1.length_mean': '.1f'})
